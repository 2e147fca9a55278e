"""The command-buffer API shared by both backends, binding slots, and the checks every
backend gets from one place.

A command buffer is recorded once (`dispatch`, `fill`, `copy`, `barrier`), finalized, then
submitted many times with a binding table: `cb.binding(i)` stands for "the buffer passed
as bindings[i] at submit", so changing buffers needs no re-record.

The base validates once for every backend, with one error type per mistake: recording
after finalize or submitting before it (DeviceError), a buffer of another device or a
freed one (DeviceError), a fill value that is not an explicit 1-, 2- or 4-byte pattern or does not
divide the length (DeviceError, `amdgpu.fill`), a range outside its buffer
(BufferRangeError), and at submit a binding table of the wrong length, of buffers of
another device, freed, or smaller than the ranges recorded for their slots
(KernelArgumentError). Backends only plan and replay.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np

from amdgpu.buffer import Buffer
from amdgpu.errors import BufferRangeError, DeviceError, KernelArgumentError
from amdgpu.fill import check_fill_length, fill_pattern


@dataclass(frozen=True)
class BindingSlot:
    """Binding `index` of the table given at submit, from byte `offset` of that buffer;
    `nbytes` bytes of it when given, else the rest of the buffer."""

    index: int
    offset: int = 0
    nbytes: int | None = None

    def view(self, offset: int, nbytes: int | None = None) -> BindingSlot:
        """Bytes [offset, offset + nbytes) of this slot (offset relative to the slot)."""
        offset = int(offset)
        if offset < 0 or (nbytes is not None and int(nbytes) < 0):
            raise BufferRangeError(
                f"a slot view needs a non-negative offset and size, got {offset}, {nbytes}"
            )
        if nbytes is None:
            nbytes = None if self.nbytes is None else self.nbytes - offset
        else:
            nbytes = int(nbytes)
        if self.nbytes is not None and offset + (nbytes or 0) > self.nbytes:
            raise BufferRangeError(
                f"bytes [{offset}, {offset + (nbytes or 0)}) are outside a slot view of "
                f"{self.nbytes} bytes: check the offset and size"
            )
        return BindingSlot(self.index, self.offset + offset, nbytes)


class CommandBuffer(abc.ABC):
    """Record once, replay many times (see `Device.submit`)."""

    device: Any

    def binding(self, index: int) -> BindingSlot:
        """Slot `index` of the binding table given at submit."""
        if type(index) is not int or index < 0:
            raise KernelArgumentError(f"binding index must be a non-negative int, got {index!r}")
        return BindingSlot(index)

    @abc.abstractmethod
    def dispatch(self, kernel: Any, grid: Any, block: Any = None, args: Any = ()) -> None:
        """Record a dispatch of `kernel` over `grid` work-items (HSA's convention)."""

    @abc.abstractmethod
    def fill(self, buffer: Any, value: Any, nbytes: int | None = None) -> None:
        """Record a fill of `nbytes` (default: the whole buffer or slot) with `value`'s
        pattern (`amdgpu.fill`)."""

    @abc.abstractmethod
    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        """Record a copy of `nbytes` from `src` to `dst` (buffers or slots)."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Everything recorded after waits for everything recorded before."""

    @abc.abstractmethod
    def finalize(self) -> CommandBuffer:
        """Close recording; later records are a DeviceError."""

    # --- the checks, once for every backend ------------------------------------------------
    def _slot_need(self) -> dict[int, int]:
        need = self.__dict__.get("_slot_bytes")
        if need is None:
            need = self.__dict__["_slot_bytes"] = {}
        return need

    def check_target(self, target: Any, nbytes: int | None, what: str) -> int | None:
        """A buffer or slot used by a fill or copy: this device's and alive, the range
        inside it. Returns the length (None: the rest of a slot, known at submit)."""
        if isinstance(target, BindingSlot):
            if nbytes is None:
                nbytes = target.nbytes
            elif target.nbytes is not None and nbytes > target.nbytes:
                raise BufferRangeError(
                    f"{what} of {nbytes} bytes does not fit a slot view of {target.nbytes} bytes"
                )
            need = self._slot_need()
            end = target.offset + (nbytes or 0)
            need[target.index] = max(need.get(target.index, 0), end)
            return nbytes
        if isinstance(target, Buffer):
            if target.device is not self.device:
                raise DeviceError(
                    f"{what}: {target!r} belongs to another device: use a buffer of "
                    f"{getattr(self.device, 'spec', 'this device')}"
                )
            nbytes = target.nbytes if nbytes is None else nbytes
            target._check_range(0, nbytes)
            return nbytes
        raise KernelArgumentError(
            f"{what} wants a Buffer or a binding slot (cb.binding(i)), got {target!r}"
        )

    def check_fill(self, target: Any, value: Any, nbytes: Any) -> tuple[np.ndarray, int | None]:
        """(pattern, length) of a recorded fill, every mistake refused here."""
        self.check_recording()
        if nbytes is not None:
            nbytes = _count(nbytes, "fill size")
        pattern = fill_pattern(value)
        nbytes = self.check_target(target, nbytes, "fill")
        if nbytes is not None:
            check_fill_length(pattern, nbytes)
        return pattern, nbytes

    def check_copy(self, dst: Any, src: Any, nbytes: Any) -> int:
        self.check_recording()
        nbytes = _count(nbytes, "copy size")
        self.check_target(dst, nbytes, "copy destination")
        self.check_target(src, nbytes, "copy source")
        return nbytes

    def check_recording(self) -> None:
        if self.finalized_:
            raise DeviceError("this command buffer is finalized: record a new one")

    def check_finalized(self) -> None:
        if not self.finalized_:
            raise DeviceError("submit a finalized command buffer: call cb.finalize() first")

    @property
    def finalized_(self) -> bool:  # overridden by each backend from its own state
        return False

    def check_bindings(self, bindings: Any, slots: int) -> None:
        """A binding table at submit: `slots` buffers of this device, alive, each as large
        as the ranges recorded for its slot."""
        if not isinstance(bindings, (list, tuple)):
            raise KernelArgumentError(
                f"bindings must be a list or tuple of buffers, got {type(bindings).__name__}"
            )
        if len(bindings) != slots:
            raise KernelArgumentError(
                f"the command buffer uses {slots} binding slot(s); got {len(bindings)} buffer(s)"
            )
        need = self.__dict__.get("_slot_bytes") or {}
        device = self.device
        for i, b in enumerate(bindings):
            if not isinstance(b, Buffer) or b.device is not device:
                raise KernelArgumentError(
                    f"binding {i} ({b!r}) is not a buffer of {getattr(device, 'spec', '?')}"
                )
            if b.root._freed:
                raise KernelArgumentError(f"binding {i} ({b!r}) was freed: allocate a new one")
            if b.nbytes < need.get(i, 0):
                raise KernelArgumentError(
                    f"binding {i} ({b!r}) is smaller than the {need[i]} bytes the command "
                    f"buffer recorded for its slot: bind a larger buffer"
                )


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise BufferRangeError(f"{what} must be a non-negative int of bytes, got {value!r}")
    return int(value)
