"""What `amdgpu.devices()` tells about one device: can the backend run here, and which of
its optimized paths are there (with the reason when one is not)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hsa.provider import Capability


@dataclass(frozen=True)
class DeviceReport:
    """One device as `amdgpu.devices()` lists it.

    `available` says whether the backend can open this device at all (`reason` says why
    not); `paths` lists the optimized paths separately (HSA: barrier_value, profiling,
    async_copy; Vulkan: bda, push_descriptors), each a `Capability` with its own reason, so
    that a missing fast path never reads as a missing device.
    """

    spec: str  # what to pass to amdgpu.open(), e.g. "amdgpu:virtual" or "vulkan:0"
    backend: str  # "hsa" | "vulkan"
    name: str
    target: str  # "gfx1100", or "vulkan"
    available: bool
    reason: str = ""
    paths: dict[str, Capability] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    # HSA agents: {"uuid", "node", "pools": [...], "links": [...]} (`topology_of`)
    topology: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "spec": self.spec,
            "backend": self.backend,
            "name": self.name,
            "target": self.target,
            "available": self.available,
            "reason": self.reason,
            "paths": {
                k: {"available": c.available, "reason": c.reason} for k, c in self.paths.items()
            },
            "versions": dict(self.versions),
            "topology": dict(self.topology),
        }
