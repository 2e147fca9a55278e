"""The device inventory: every device of every backend, with "backend available" kept
apart from "optimized path available", and the hardware classes that decide which tests
run on it."""

from __future__ import annotations

from dataclasses import dataclass, field

import amdgpu
from hsa.abi.targets import lookup

# The hardware classes hwlab knows (pytest markers of the suites). `hsa` (any HSA agent) and
# `runs_kernels` (the device executes kernels: every Vulkan device and ROCr agent; a virtual
# agent only where an ISA executor for its family exists) are hwlab's own additions.
HARDWARE_CLASSES = (
    "generic",
    "hsa",
    "hsa_virtual",
    "hsa_rocr",
    "isa_gfx11",
    "isa_gfx12",
    "isa_gfx9",
    "runs_kernels",
    "vulkan",
    "vulkan_bda",
)


@dataclass
class LabDevice:
    key: str  # column key in reports: "<machine>/<spec>"
    spec: str
    backend: str
    name: str
    target: str
    available: bool
    reason: str
    paths: dict[str, bool]
    path_reasons: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    topology: dict = field(default_factory=dict)  # HSA agents: uuid, node, pools, links

    @property
    def family(self) -> str | None:
        """The target's ISA family ("gfx11"), or None for Vulkan / unknown targets."""
        if self.backend != "hsa" or not self.target:
            return None
        try:
            return lookup(self.target.split(":")[0]).family
        except Exception:  # noqa: BLE001 - an agent whose ISA the target table does not know
            return None

    @property
    def is_virtual(self) -> bool:
        return self.spec.startswith("amdgpu:virtual")

    def _executor_ok(self) -> bool:
        fam = self.family
        return fam is None or self.paths.get(f"executor:{fam}", True)

    @property
    def hardware_classes(self) -> set[str]:
        """The pytest markers this device satisfies."""
        classes = {"generic"}
        if self.backend == "hsa":
            classes |= {"hsa", "hsa_virtual" if self.is_virtual else "hsa_rocr"}
            if self._executor_ok():
                classes.add("runs_kernels")
                if self.family:
                    classes.add(f"isa_{self.family}")
        if self.backend == "vulkan":
            classes |= {"vulkan", "runs_kernels"}
            if self.paths.get("bda"):
                classes.add("vulkan_bda")
        return classes

    def missing_class_reason(self, cls: str) -> str:
        """Why this device lacks hardware class `cls` (one line, for skip messages)."""
        fam = self.family
        if cls in ("runs_kernels", f"isa_{fam}") and not self._executor_ok():
            why = self.path_reasons.get(f"executor:{fam}", "no ISA executor")
            return f"{self.spec} cannot execute {fam} code: {why}"
        if cls == "vulkan_bda" and self.backend == "vulkan":
            return f"{self.spec} has no bufferDeviceAddress: {self.path_reasons.get('bda', '')}"
        have = ", ".join(sorted(self.hardware_classes))
        what = (
            self.backend if self.target in ("", self.backend) else f"{self.backend} {self.target}"
        )
        return f"needs {cls}; {self.spec} ({what}) has {have}"

    def to_json(self) -> dict:
        return {
            "spec": self.spec,
            "backend": self.backend,
            "name": self.name,
            "target": self.target,
            "available": self.available,
            "reason": self.reason,
            "paths": self.paths,
            "path_reasons": self.path_reasons,
            "versions": self.versions,
            "topology": self.topology,
            "classes": sorted(self.hardware_classes) if self.available else [],
        }


def _row(machine: str, rep) -> LabDevice:
    dev = LabDevice(
        key=f"{machine}/{rep.spec}",
        spec=rep.spec,
        backend=rep.backend,
        name=rep.name,
        target=rep.target,
        available=rep.available,
        reason=rep.reason,
        paths={k: bool(c.available) for k, c in rep.paths.items()},
        path_reasons={k: c.reason for k, c in rep.paths.items() if not c.available},
        versions={k: str(v) for k, v in (getattr(rep, "versions", {}) or {}).items()},
        topology=dict(getattr(rep, "topology", {}) or {}),
    )
    return dev


def inventory(machine: str) -> list[LabDevice]:
    """Every device amdgpu.devices() reports: ROCr agents (or the row saying why there are
    none), the default virtual system's agents, and the Vulkan devices."""
    return [_row(machine, rep) for rep in amdgpu.devices()]


def find_device(machine: str, spec: str, known: list[LabDevice]) -> LabDevice:
    """The inventory row for `spec`, normalized as amdgpu.open parses it ("vulkan" is
    "vulkan:0"); a virtual system other than the default one (amdgpu:virtual:gfx1100,gfx1100:1)
    is probed on demand. Raises DeviceError for a spec no backend has."""
    from amdgpu.selection import parse_spec

    parsed = parse_spec(spec)
    canonical = str(parsed)
    by_spec = {d.spec: d for d in known}
    if canonical in by_spec:
        return by_spec[canonical]
    if parsed.backend == "hsa" and parsed.provider == "rocr" and "amdgpu" in by_spec:
        row = by_spec["amdgpu"]  # ROCr not available: its one row stands for every index
        if not row.available:
            return LabDevice(**{**row.__dict__, "spec": canonical, "key": f"{machine}/{canonical}"})
    if parsed.backend == "hsa" and parsed.provider == "virtual":
        from amdgpu.hsa_backend.device import hsa_reports

        for rep in hsa_reports(parsed.system):
            if rep.spec == canonical:
                return _row(machine, rep)
    from ground.errors import DeviceError

    raise DeviceError(f"no device {canonical!r} here: 'hwlab devices' lists " + ", ".join(by_spec))
