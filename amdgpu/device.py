"""Device selection: spec parsing, the opt-in flag for the HSA path, `open` and `devices`.

The HSA path (`amdgpu/hsa_backend`) is opt-in. It is taken only when the caller asks for
it: `driver="amdgpu"` (the CLI's `--driver amdgpu`), a spec that starts with "amdgpu", or
the environment variable AMDGPU_DRIVER=amdgpu. Everything else ("auto", the default) opens
the Vulkan backend (`amdgpu/vulkan`). An explicit spec always wins over the environment;
an explicit `driver=` that contradicts an explicit spec is an error.

Spec forms:
    amdgpu, amdgpu:N                      ROCr GPU agent N (hsa.rocr)
    amdgpu:virtual, amdgpu:virtual:N      the default virtual system (one gfx1100), agent N
    amdgpu:virtual:GPUS[:N]               a virtual system of GPUS (comma-separated target
                                          names, e.g. gfx1100,gfx1100), agent N
    vulkan, vulkan:N                      Vulkan physical device N
"""

from __future__ import annotations

import abc
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amdgpu.errors import AmdgpuError, DeviceError
from amdgpu.report import DeviceReport
from hsa.provider import Capability

DRIVERS = ("auto", "amdgpu", "vulkan")
DRIVER_ENV = "AMDGPU_DRIVER"
DEFAULT_VIRTUAL_GPUS = ("gfx1100",)
VALID_FORMS = (
    "amdgpu, amdgpu:N, amdgpu:virtual, amdgpu:virtual:N, "
    "amdgpu:virtual:gfx1100[,gfx1100...][:N], vulkan, vulkan:N"
)

_TARGET_RE = re.compile(r"^gfx[0-9a-f]+$")


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device spec."""

    backend: str  # "hsa" | "vulkan"
    provider: str = ""  # "rocr" | "virtual" (hsa only)
    gpus: tuple[str, ...] = ()  # virtual system's GPU targets (hsa virtual only)
    index: int = 0

    @property
    def driver(self) -> str:
        return "amdgpu" if self.backend == "hsa" else "vulkan"

    @property
    def system(self) -> str:
        """The provider key: "rocr" or "virtual:gfx1100,gfx1100"."""
        if self.provider == "virtual":
            return "virtual:" + ",".join(self.gpus)
        return self.provider

    def __str__(self) -> str:
        if self.backend == "vulkan":
            return f"vulkan:{self.index}"
        if self.provider == "rocr":
            return f"amdgpu:{self.index}"
        if self.gpus == DEFAULT_VIRTUAL_GPUS:
            return "amdgpu:virtual" if self.index == 0 else f"amdgpu:virtual:{self.index}"
        return f"amdgpu:virtual:{','.join(self.gpus)}:{self.index}"


def _unknown(spec: str) -> DeviceError:
    return DeviceError(f"unknown device spec {spec!r}: use one of {VALID_FORMS}")


def _index(text: str, spec: str) -> int:
    if not text.isdigit():
        raise _unknown(spec)
    return int(text)


def parse_spec(spec: str) -> DeviceSpec:
    """Parse an explicit spec (see the module doc). Raises DeviceError listing valid forms."""
    if not isinstance(spec, str):
        raise DeviceError(
            f"device spec must be a string, not {type(spec).__name__}: use one of {VALID_FORMS}"
        )
    parts = spec.strip().lower().split(":")
    head, rest = parts[0], parts[1:]
    if head == "vulkan":
        if len(rest) > 1:
            raise _unknown(spec)
        return DeviceSpec("vulkan", index=_index(rest[0], spec) if rest else 0)
    if head != "amdgpu":
        raise _unknown(spec)
    if not rest:
        return DeviceSpec("hsa", "rocr", index=0)
    if rest[0] != "virtual":
        if len(rest) > 1:
            raise _unknown(spec)
        return DeviceSpec("hsa", "rocr", index=_index(rest[0], spec))
    rest = rest[1:]
    gpus: tuple[str, ...] = DEFAULT_VIRTUAL_GPUS
    index = 0
    if rest and not rest[0].isdigit():
        gpus = tuple(g.strip() for g in rest[0].split(","))
        if not gpus or not all(_TARGET_RE.match(g) for g in gpus):
            raise _unknown(spec)
        rest = rest[1:]
    if len(rest) > 1:
        raise _unknown(spec)
    if rest:
        index = _index(rest[0], spec)
    if index >= len(gpus):
        raise DeviceError(
            f"device spec {spec!r} asks for agent {index} of a virtual system with "
            f"{len(gpus)} GPU(s): use an index below {len(gpus)}"
        )
    return DeviceSpec("hsa", "virtual", gpus, index)


def resolve(spec: str | None = None, driver: str | None = None) -> DeviceSpec:
    """Apply the opt-in rules: which backend and device `open(spec, driver=driver)` means."""
    if driver is not None and driver not in DRIVERS:
        raise DeviceError(f"unknown driver {driver!r}: use one of {', '.join(DRIVERS)}")
    if spec is not None:
        parsed = parse_spec(spec)
        if driver not in (None, "auto") and driver != parsed.driver:
            raise DeviceError(
                f"device spec {spec!r} is a {parsed.driver} device but driver={driver!r} was "
                f"asked for: drop one of them"
            )
        return parsed
    if driver in (None, "auto"):
        env = os.environ.get(DRIVER_ENV, "").strip().lower()
        if env and env not in DRIVERS:
            raise DeviceError(
                f"{DRIVER_ENV}={env!r} is not a driver: use one of {', '.join(DRIVERS)}"
            )
        driver = env or "auto"
    if driver == "amdgpu":
        return DeviceSpec("hsa", "rocr", index=0)
    return DeviceSpec("vulkan", index=0)  # auto -> Vulkan: the HSA path is opt-in


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


def open(spec: str | None = None, *, driver: str | None = None, **options: Any) -> Device:  # noqa: A001
    """Open one device. HSA only when opted in (see the module doc); default Vulkan.

    Raises DeviceError for an unknown spec or index, HsaUnavailable (with ROCr's cause)
    when the HSA path was asked for and cannot run here, VulkanError for Vulkan failures.
    """
    parsed = resolve(spec, driver)
    if parsed.backend == "hsa":
        from amdgpu.hsa_backend.device import HsaDevice

        return HsaDevice(parsed, **options)
    from amdgpu.vulkan import VulkanDevice

    return VulkanDevice(parsed.index, options.pop("path", None), **options)


def devices() -> list[DeviceReport]:
    """Every device this machine offers: ROCr GPU agents (or why there are none), the
    default virtual system's agents, and the Vulkan devices."""
    from amdgpu.hsa_backend.device import hsa_reports

    reports = hsa_reports("rocr") + hsa_reports("virtual:" + ",".join(DEFAULT_VIRTUAL_GPUS))
    return reports + _vulkan_reports()


def _vulkan_reports() -> list[DeviceReport]:
    try:
        from amdgpu import vulkan

        found = vulkan.list_devices()
    except (ImportError, AttributeError) as e:
        return [
            DeviceReport("vulkan", "vulkan", "", "vulkan", False, f"Vulkan backend not built: {e}")
        ]
    except AmdgpuError as e:
        return [DeviceReport("vulkan", "vulkan", "", "vulkan", False, str(e))]
    out = []
    for i, item in enumerate(found):
        if isinstance(item, DeviceReport):
            out.append(item)
        elif isinstance(item, dict):
            out.append(
                DeviceReport(
                    spec=item.get("spec", f"vulkan:{i}"),
                    backend="vulkan",
                    name=item.get("name", ""),
                    target=item.get("target", "vulkan"),
                    available=item.get("available", True),
                    reason=item.get("reason", ""),
                    paths=item.get("paths", {}),
                    versions=item.get("versions", {}),
                )
            )
    if not out:
        out.append(DeviceReport("vulkan", "vulkan", "", "vulkan", False, "no Vulkan device found"))
    return out


__all__ = [
    "Device",
    "DeviceSpec",
    "TimelinePoint",
    "devices",
    "open",
    "parse_spec",
    "resolve",
]
