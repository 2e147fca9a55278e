"""The command-buffer API shared by both backends, and binding slots.

A command buffer is recorded once (`dispatch`, `fill`, `copy`, `barrier`), finalized, then
submitted many times with a binding table: `cb.binding(i)` stands for "the buffer passed
as bindings[i] at submit", so changing buffers needs no re-record.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BindingSlot:
    """Binding `index` of the table given at submit, plus a byte `offset` into it."""

    index: int
    offset: int = 0

    def view(self, offset: int, nbytes: int | None = None) -> BindingSlot:
        return BindingSlot(self.index, self.offset + int(offset))


class CommandBuffer(abc.ABC):
    """Record once, replay many times (see `Device.submit`)."""

    def binding(self, index: int) -> BindingSlot:
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"binding index must be a non-negative int, got {index!r}")
        return BindingSlot(index)

    @abc.abstractmethod
    def dispatch(self, kernel: Any, grid: Any, block: Any = None, args: Any = ()) -> None: ...

    @abc.abstractmethod
    def fill(self, buffer: Any, value: Any, nbytes: int | None = None) -> None: ...

    @abc.abstractmethod
    def copy(self, dst: Any, src: Any, nbytes: int) -> None: ...

    @abc.abstractmethod
    def barrier(self) -> None: ...

    @abc.abstractmethod
    def finalize(self) -> CommandBuffer: ...
