"""The device API both backends implement: `Device`, `TimelinePoint`, `DeviceSpec`.

This module is the base the backends build on; it imports neither of them. Choosing and
opening a device (spec parsing, the opt-in rules, `open`, `devices`) is
`amdgpu.selection`, which imports the backends.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hsa.provider import Capability

DEFAULT_VIRTUAL_GPUS = ("gfx1100",)
DEFAULT_EMULATED_GPU = "gfx90a"


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device spec."""

    backend: str  # "hsa" | "vulkan"
    provider: str = ""  # "rocr" | "virtual" | "emulated" (hsa only)
    gpus: tuple[str, ...] = ()  # virtual/emulated system's GPU targets
    index: int = 0

    @property
    def driver(self) -> str:
        return "amdgpu" if self.backend == "hsa" else "vulkan"

    @property
    def system(self) -> str:
        """The provider key: "rocr" or "virtual:gfx1100,gfx1100"."""
        if self.provider in ("virtual", "emulated"):
            return self.provider + ":" + ",".join(self.gpus)
        return self.provider

    def __str__(self) -> str:
        if self.backend == "vulkan":
            return f"vulkan:{self.index}"
        if self.provider == "rocr":
            return f"amdgpu:{self.index}"
        if self.provider == "emulated":
            default = self.gpus == (DEFAULT_EMULATED_GPU,)
            return "amdgpu:emulated" if default else f"amdgpu:emulated:{self.gpus[0]}"
        if self.gpus == DEFAULT_VIRTUAL_GPUS:
            return "amdgpu:virtual" if self.index == 0 else f"amdgpu:virtual:{self.index}"
        return f"amdgpu:virtual:{','.join(self.gpus)}:{self.index}"


# --- the device API both backends implement ------------------------------------------------
class TimelinePoint:
    """A value on one queue lane's timeline: done once the lane has completed `value`
    submissions. `timeline` is the backend's lane object (it knows how to wait).
    A plain slotted class: one is made per dispatch, so its construction is kept cheap."""

    __slots__ = ("lane", "value", "timeline")

    def __init__(self, lane: int, value: int, timeline: Any = None):
        self.lane = lane
        self.value = value
        self.timeline = timeline

    def wait(self, timeout: float = 10.0) -> None:
        """Block until the point is reached; SignalTimeout after `timeout` seconds, the
        lane's error (QueueError) if the lane stopped."""
        if self.timeline is not None:
            self.timeline.wait(self.value, timeout)

    def done(self) -> bool:
        return self.timeline is None or self.timeline.completed() >= self.value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TimelinePoint)
            and self.lane == other.lane
            and self.value == other.value
            and self.timeline is other.timeline
        )

    def __hash__(self) -> int:
        return hash((self.lane, self.value, id(self.timeline)))

    def __repr__(self) -> str:
        return f"TimelinePoint(lane={self.lane}, value={self.value})"


class Device(abc.ABC):
    """The driver's device API (see /tmp contracts "driver public API"). `HsaDevice` and
    the Vulkan backend's device implement it."""

    spec: str
    backend: str  # "hsa" | "vulkan"
    driver: str  # "amdgpu" | "vulkan"
    name: str
    target: str
    paths: dict[str, Capability]

    @property
    @abc.abstractmethod
    def lanes(self) -> int: ...

    @abc.abstractmethod
    def buffer(self, array_or_nbytes: Any, dtype: Any = None): ...

    @abc.abstractmethod
    def load(self, bundle: Any): ...

    @abc.abstractmethod
    def dispatch(
        self, kernel, grid, block=None, args=(), lane: int = 0, wait=()
    ) -> TimelinePoint: ...

    @abc.abstractmethod
    def command_buffer(self): ...

    @abc.abstractmethod
    def submit(self, cb, bindings: Sequence = (), lane: int = 0, wait=()) -> TimelinePoint: ...

    @abc.abstractmethod
    def synchronize(self, timeout: float = 10.0) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        # Both backends are Devices by what they offer (the Vulkan one does not inherit).
        if cls is Device:
            needed = ("buffer", "load", "dispatch", "command_buffer", "submit", "synchronize")
            return all(any(n in B.__dict__ for B in other.__mro__) for n in needed)
        return NotImplemented

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec} {self.name} ({self.target})>"


__all__ = ["DEFAULT_VIRTUAL_GPUS", "Device", "DeviceSpec", "TimelinePoint"]
