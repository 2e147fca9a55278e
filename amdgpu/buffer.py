"""Buffer: device memory with numpy in and out, and views at byte offsets.

A Buffer is backend-neutral: it knows its device, its device address and its size, and
asks its device to move bytes (`device._read_bytes`, `device._write_bytes`,
`device._free_buffer`). Views share the memory of their root buffer and cannot be freed
on their own. Reads and writes are ordered after the device's submitted work: the device
waits for its lanes first, as a synchronous copy on a default stream would.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np

from ground.errors import BufferRangeError, BufferStateError, DeviceError


class Lifetime:
    """Whether a root allocation is freed; shared by the root, its views and its finalizer,
    so memory is released exactly once: by free(), or when the buffer is dropped.

    `owner` is the device's token (owner_token) while the memory is live and None once
    freed, so one identity test (`buffer._life.owner is token`) says "alive and this
    device's" on the dispatch path; `where` is the file:line that freed it, for the error.
    `Lifetime.ends` counts every lifetime ended in the process: a cache of checked
    arguments (the launch cache's last arguments) stays valid while it is unchanged."""

    __slots__ = ("freed", "owner", "where")
    ends = 0

    def __init__(self, owner: Any) -> None:
        self.freed = False
        self.owner = owner
        self.where = ""

    def end(self, where: str) -> None:
        self.freed = True
        self.owner = None
        self.where = where
        Lifetime.ends += 1


def _caller(depth: int) -> str:
    """file:line of the frame `depth` levels above the caller (where a buffer was freed)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def owner_token(device: Any) -> Any:
    """The token a live buffer of `device` carries as `Lifetime.owner`: the device's weak
    reference (kept on it, so it is one object), never the device itself, so a buffer does
    not keep a closed device alive."""
    state = getattr(device, "__dict__", None)
    if state is None:  # no device object (a test's stand-in): the value itself
        return device
    token = state.get("_owner_token")
    if token is None:
        token = device._owner_token = weakref.ref(device)
    return token


def _release_dropped(device_ref: weakref.ref, handle: Any, life: Lifetime) -> None:
    """A root buffer was garbage-collected without free(). Runs in any thread at any
    point, so it only hands the handle to the device, which frees it at its next
    allocation or synchronize, once the lanes have finished the work submitted before.
    A device already gone released the memory when it closed."""
    device = device_ref()
    if device is not None and not life.freed:
        life.end("(dropped without free())")
        device._dropped_buffer(handle)


def check_usable(buffer: Buffer, device: Any, what: str) -> int:
    """The one check of a buffer handed to `device` (a dispatch argument, a binding, a
    recorded operand), on every path: alive, and this device's or an open peer's it can
    reach. Returns the address; BufferStateError names the buffer and where it was freed or
    which device owns it. `what` says which argument ("argument 0 'x' of kernel saxpy")."""
    life = buffer._life
    owner = buffer.device
    if owner is not device and getattr(owner, "_closed", False):
        spec = getattr(owner, "spec", None) or repr(owner)
        raise BufferStateError(
            f"{what}: buffer at 0x{buffer.address:x} belongs to another device ({spec}), "
            f"which was closed: allocate it on {getattr(device, 'spec', '?')}"
        )
    if life.freed:
        raise BufferStateError(
            f"{what}: buffer at 0x{buffer.address:x} ({buffer.nbytes} bytes) was freed at "
            f"{life.where or '?'}: allocate a new one"
        )
    if owner is not device:
        reach = getattr(device, "can_access_peer", None)
        if reach is None or not reach(owner):
            spec = getattr(owner, "spec", None) or repr(owner)
            raise BufferStateError(
                f"{what}: buffer at 0x{buffer.address:x} belongs to another device ({spec}), "
                f"which {getattr(device, 'spec', '?')} cannot reach: allocate it on this one "
                f"(or enable peer access)"
            )
    return buffer.address


class Buffer:
    """`nbytes` bytes of device memory at device address `address`."""

    # HostBuffers are not released when dropped: a numpy view of `.array` may outlive them.
    _release_when_dropped = True

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
        if root is None:
            self._life = Lifetime(owner_token(device))
            track = getattr(device, "_track_root", None)
            if handle is not None and track is not None:
                track(self)  # close() frees what is still held
            if handle is not None and self._release_when_dropped:
                # The finalizer holds the device weakly: finalizers live in a global registry
                # until their buffer dies, and a buffer the device itself keeps (a staging
                # or blit buffer) would keep the closed device, its rings and pools alive.
                weakref.finalize(self, _release_dropped, weakref.ref(device), handle,
                                 self._life).atexit = False
        else:
            self._life = root._life

    @property
    def _freed(self) -> bool:
        return self._life.freed

    @_freed.setter
    def _freed(self, value: bool) -> None:
        if value and not self._life.freed:
            self._life.end(_caller(1))

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

    def write_async(
        self, array: Any, offset: int = 0, *, lane: int = 0, wait: Any = (),
        zero_copy: bool = False,
    ) -> Any:
        """Start copying `array` in at byte `offset` on `lane` after the points in `wait`;
        returns the TimelinePoint the copy completes at. A HostBuffer or an array pinned
        with dev.pin(...) is copied in place (zero-copy: leave it alone until the point);
        any other array's bytes are taken now (staged), so the caller may reuse it at once.
        zero_copy=True refuses to stage: the array must be pinned."""
        return self.device.write_async(self, array, offset, lane=lane, wait=wait,
                                       zero_copy=zero_copy)

    def read_async(
        self,
        out: Any = None,
        offset: int = 0,
        *,
        dtype: Any = np.uint8,
        lane: int = 0,
        wait: Any = (),
        zero_copy: bool = False,
    ) -> Any:
        """Start copying this buffer's bytes from `offset` out into `out` (a HostBuffer or
        a pinned array: zero-copy; a writable contiguous numpy array; None: a new `dtype`
        array of the rest of the buffer) on `lane` after `wait`. Returns a TransferPoint:
        later work may wait on it; `point.result()` waits and returns the filled array.
        zero_copy=True refuses to stage: `out` must be pinned or a HostBuffer."""
        return self.device.read_async(self, out, offset, dtype=dtype, lane=lane, wait=wait,
                                      zero_copy=zero_copy)

    def free(self) -> None:
        if self.is_view:
            raise DeviceError("a buffer view cannot be freed on its own: free the buffer it views")
        if not self._life.freed:
            self._life.end(_caller(1))
            self.device._free_buffer(self)

    def mark_released(self) -> None:
        """Its device released the memory itself (closing): the buffer counts as freed from
        here, and nothing releases it again."""
        if not self._life.freed:
            self._life.end(_caller(1))

    # --- checks --------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self._life.freed:
            spec = getattr(self.device, "spec", "?")
            raise BufferStateError(
                f"buffer at 0x{self.address:x} ({self.nbytes} bytes) on {spec} was freed at "
                f"{self._life.where or '?'}: allocate a new one"
            )

    def _check_range(self, offset: int, nbytes: int) -> None:
        self._check_alive()
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise BufferRangeError(
                f"bytes [{offset}, {offset + nbytes}) are outside a buffer of {self.nbytes} "
                f"bytes (0x{self.address:x} on {getattr(self.device, 'spec', '?')}): check "
                f"the offset and size"
            )

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        kind = "view" if self.is_view else "buffer"
        spec = getattr(self.device, "spec", "?")
        return f"<Buffer {kind} 0x{self.address:x} {self.nbytes} bytes on {spec}>"


class HostBuffer(Buffer):
    """Pinned host memory the GPU reaches directly (`dev.host_buffer(...)`, or
    `dev.buffer(..., memory="host")`): `.array` is a zero-copy uint8 numpy view, kernels
    and async copies use its device address. The host must not touch `.array` while GPU
    work on it is in flight: wait on that work's point first."""

    _release_when_dropped = False

    def __init__(self, device: Any, address: int, nbytes: int, *, array: np.ndarray,
                 handle: Any = None, memory: str = "host"):
        super().__init__(device, address, nbytes, handle=handle)
        self._array = array
        self.memory = memory

    @property
    def array(self) -> np.ndarray:
        self._check_alive()
        return self._array

    def numpy(self, dtype: Any = np.uint8, shape: Any = None) -> np.ndarray:
        """The memory itself (no copy) as `dtype` (and `shape`)."""
        dtype = np.dtype(dtype)
        if self.nbytes % dtype.itemsize:
            raise BufferRangeError(
                f"host buffer of {self.nbytes} bytes is not a whole number of {dtype} items"
            )
        out = self.array.view(dtype)
        return out.reshape(shape) if shape is not None else out


class PinnedBuffer(HostBuffer):
    """An existing numpy array registered with the GPU (`dev.pin(array)`,
    hsa_amd_memory_lock): `.array` is the caller's own array, copies and kernels reach its
    bytes in place. `unpin()` (or free()) waits for the lanes, then unlocks it; the array
    itself stays the caller's."""

    def __init__(self, device: Any, address: int, nbytes: int, *, array: np.ndarray,
                 owner: np.ndarray, host_address: int):
        super().__init__(device, address, nbytes, array=array, handle=host_address,
                         memory="pinned")
        self.owner = owner  # keeps the caller's array (and its memory) alive while pinned
        self.host_address = host_address

    def unpin(self) -> None:
        self.free()

    def __repr__(self) -> str:
        spec = getattr(self.device, "spec", "?")
        return f"<PinnedBuffer 0x{self.host_address:x} {self.nbytes} bytes on {spec}>"


MEMORY_KINDS = ("device", "device-fine", "host")


def check_memory_kind(memory: Any, spec: str) -> str:
    if memory not in MEMORY_KINDS:
        raise DeviceError(
            f"{spec}: memory={memory!r} is not a placement: use one of "
            f"{', '.join(repr(m) for m in MEMORY_KINDS)}"
        )
    return memory


def host_bytes(array: Any, what: str) -> np.ndarray:
    """The bytes of `array` as a flat uint8 array (KernelArgumentError if numpy can't)."""
    from ground.errors import KernelArgumentError

    if isinstance(array, Buffer):
        raise KernelArgumentError(
            f"{what} takes host data (a numpy array or a HostBuffer), got the device "
            f"{array!r}: use dev.copy(dst, src) between device buffers"
        )
    try:
        return np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    except (TypeError, ValueError) as e:
        raise KernelArgumentError(f"{what} cannot take {array!r} as bytes: {e}") from None


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
