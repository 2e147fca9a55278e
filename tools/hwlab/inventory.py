"""The device inventory: every device of every backend, with "backend available" kept
apart from "optimized path available", and the hardware classes that decide which tests
run on it."""

from __future__ import annotations

from dataclasses import dataclass, field

import amdgpu
from compiler.targets import lookup


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

    @property
    def hardware_classes(self) -> set[str]:
        """The pytest markers this device satisfies."""
        classes = {"generic"}
        if self.backend == "hsa":
            classes.add("hsa_virtual" if self.spec.startswith("amdgpu:virtual") else "hsa_rocr")
            try:
                classes.add(f"isa_{lookup(self.target.split(':')[0]).family}")
            except Exception:  # an agent whose ISA the target table does not know
                pass
        if self.backend == "vulkan":
            classes.add("vulkan")
            if self.paths.get("bda"):
                classes.add("vulkan_bda")
        return classes

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
        }


def inventory(machine: str) -> list[LabDevice]:
    rows = []
    for rep in amdgpu.devices():
        rows.append(
            LabDevice(
                key=f"{machine}/{rep.spec}",
                spec=rep.spec,
                backend=rep.backend,
                name=rep.name,
                target=rep.target,
                available=rep.available,
                reason=rep.reason,
                paths={k: bool(c.available) for k, c in rep.paths.items()},
                path_reasons={k: c.reason for k, c in rep.paths.items() if not c.available},
                versions=dict(getattr(rep, "versions", {}) or {}),
            )
        )
    return rows
