"""Buffer: device memory with numpy in and out, and views at byte offsets.

A Buffer is backend-neutral: it knows its device, its device address and its size, and
asks its device to move bytes (`device._read_bytes`, `device._write_bytes`,
`device._free_buffer`). Views share the memory of their root buffer and cannot be freed
on their own. Reads and writes are ordered after the device's submitted work: the device
waits for its lanes first, as a synchronous copy on a default stream would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amdgpu.errors import BufferRangeError, DeviceError


class Buffer:
    """`nbytes` bytes of device memory at device address `address`."""

    def __init__(
        self,
        device: Any,
        address: int,
        nbytes: int,
        *,
        root: Buffer | None = None,
        offset: int = 0,
        handle: Any = None,
    ):
        self.device = device
        self.address = int(address)
        self.nbytes = int(nbytes)
        self.offset = int(offset)  # from the root buffer's start
        self.root = root if root is not None else self
        self.handle = handle  # backend object of the root allocation
        self._freed = False

    # --- views ---------------------------------------------------------------------------
    def view(self, offset: int, nbytes: int | None = None) -> Buffer:
        """The bytes [offset, offset + nbytes) of this buffer, as a Buffer sharing memory."""
        offset = int(offset)
        if nbytes is None:
            nbytes = self.nbytes - offset
        self._check_range(offset, int(nbytes))
        return Buffer(
            self.device,
            self.address + offset,
            nbytes,
            root=self.root,
            offset=self.offset + offset,
            handle=self.handle,
        )

    @property
    def is_view(self) -> bool:
        return self.root is not self

    # --- data in and out -----------------------------------------------------------------
    def write(self, array: Any, offset: int = 0) -> None:
        """Copy `array` (anything numpy can make contiguous bytes of) in at byte `offset`."""
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        self._check_range(int(offset), data.size)
        if data.size:
            self.device._write_bytes(self, int(offset), data)

    def to_numpy(self, dtype: Any = np.uint8, shape: Any = None) -> np.ndarray:
        """A host copy of the whole buffer as `dtype` (and `shape` when given)."""
        self._check_alive()
        dtype = np.dtype(dtype)
        if self.nbytes % dtype.itemsize:
            raise BufferRangeError(
                f"buffer of {self.nbytes} bytes is not a whole number of {dtype} items: "
                f"take a view first"
            )
        raw = (
            self.device._read_bytes(self, 0, self.nbytes) if self.nbytes else np.empty(0, np.uint8)
        )
        out = raw.view(dtype)
        return out.reshape(shape) if shape is not None else out

    def free(self) -> None:
        if self.is_view:
            raise DeviceError("a buffer view cannot be freed on its own: free the buffer it views")
        if not self._freed:
            self._freed = True
            self.device._free_buffer(self)

    # --- checks --------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self.root._freed:
            raise DeviceError(f"buffer at 0x{self.address:x} was freed: allocate a new one")

    def _check_range(self, offset: int, nbytes: int) -> None:
        self._check_alive()
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise BufferRangeError(
                f"bytes [{offset}, {offset + nbytes}) are outside a buffer of {self.nbytes} "
                f"bytes: check the offset and size"
            )

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        kind = "view" if self.is_view else "buffer"
        spec = getattr(self.device, "spec", "?")
        return f"<Buffer {kind} 0x{self.address:x} {self.nbytes} bytes on {spec}>"


def as_host_array(array_or_nbytes: Any, dtype: Any = None) -> tuple[int, np.ndarray | None]:
    """(nbytes, contents or None) for `dev.buffer(array_or_nbytes, dtype)`: an int is a
    size in bytes (or in `dtype` items when dtype is given), anything else an array. A bare
    numpy scalar is refused: np.int32(5) could mean either."""
    if isinstance(array_or_nbytes, np.generic):
        raise DeviceError(
            f"dev.buffer got the numpy scalar {array_or_nbytes!r}: pass int(...) for a size in "
            f"bytes, or np.array([...]) for contents"
        )
    if isinstance(array_or_nbytes, int) and not isinstance(array_or_nbytes, bool):
        n = int(array_or_nbytes)
        if n < 0:
            raise BufferRangeError(f"buffer size {n} is negative: pass a size in bytes")
        return (n * np.dtype(dtype).itemsize if dtype is not None else n), None
    arr = np.asarray(array_or_nbytes, dtype=dtype)
    arr = np.ascontiguousarray(arr)
    return arr.nbytes, arr
