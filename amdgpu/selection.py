"""Device selection: spec parsing, the opt-in flag for the HSA path, `open` and `devices`.

The HSA path (`amdgpu/hsa_backend`) is opt-in. It is taken only when the caller asks for
it: `driver="amdgpu"` (the CLI's `--driver amdgpu`), a spec that starts with "amdgpu", or
the environment variable AMDGPU_DRIVER=amdgpu. Everything else ("auto", the default) opens
the Vulkan backend (`amdgpu/vulkan`). An explicit spec always wins over the environment;
an explicit `driver=` that contradicts an explicit spec is an error.

Spec forms:
    amdgpu, amdgpu:N                      ROCr GPU agent N (hsa.rocr)
    amdgpu:virtual, amdgpu:virtual:N      the default virtual system (one gfx1100), agent N
    amdgpu:emulated, amdgpu:emulated:gfx90a  real ROCr over the emulated AMD driver (hsa.emulated)
    amdgpu:emulated:4xgfx90a[:N|:GPU-<uuid>]  ... with 4 GPU nodes (XGMI links), agent N
    amdgpu:virtual:GPUS[:N]               a virtual system of GPUS (comma-separated target
                                          names, e.g. gfx1100,gfx1100, or a count: 8xgfx942,
                                          an MI300X-like node with XGMI links), agent N
    amdgpu:GPU-<uuid>, amdgpu:virtual[:GPUS]:GPU-<uuid>   the agent with that UUID
                                          (HSA_AMD_AGENT_INFO_UUID; `hwlab devices` lists them)
    vulkan, vulkan:N                      Vulkan physical device N

AMDGPU_VIRTUAL_NODE=8xgfx942 makes plain `amdgpu:virtual` that node (default: one gfx1100),
AMDGPU_EMULATED_NODE=4xgfx90a plain `amdgpu:emulated` (default: one gfx90a).
ROCR_VISIBLE_DEVICES (ordinals or UUIDs) hides and orders GPUs: ROCr applies it itself, the
virtual system the same way; N counts the visible agents.
"""

from __future__ import annotations

import os
import re
from typing import Any

from amdgpu.device import (
    DEFAULT_EMULATED_GPU,
    Device,
    DeviceSpec,
    default_emulated_gpus,
    default_virtual_gpus,
)
from amdgpu.report import DeviceReport
from ground.errors import AmdgpuError, DeviceError
from hsa.virtual.topology import MAX_GPUS, compact_gpus, expand_gpus

DRIVERS = ("auto", "amdgpu", "vulkan")
DRIVER_ENV = "AMDGPU_DRIVER"
VALID_FORMS = (
    "amdgpu, amdgpu:N, amdgpu:GPU-<uuid>, amdgpu:virtual, amdgpu:virtual:N, "
    "amdgpu:virtual:gfx1100[,gfx1100...][:N], amdgpu:virtual:8xgfx942[:N|:GPU-<uuid>], "
    "amdgpu:emulated[:gfx90a|:4xgfx90a][:N|:GPU-<uuid>], vulkan, vulkan:N"
)

EMULATED_MAX_GPUS = 16  # GPU nodes an emulated node spec may hold
_COUNTED_RE = re.compile(r"^([1-9][0-9]*x)?gfx[0-9a-f]+$")
_UUID_RE = re.compile(r"^gpu-[0-9a-f]{1,16}$")


def _which(text: str, spec: str) -> tuple[int, str]:
    """(index, uuid) of an agent selector: an ordinal or GPU-<hex>."""
    if _UUID_RE.match(text):
        return 0, "GPU-" + text[4:]
    return _index(text, spec), ""


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
    if rest[0] == "emulated":  # one emulated system per process
        rest = rest[1:]
        node = default_emulated_gpus()
        if rest and _COUNTED_RE.match(rest[0]):
            node, rest = tuple(expand_gpus([rest[0]])), rest[1:]
        if len(rest) > 1:
            raise _unknown(spec)
        if len(node) > EMULATED_MAX_GPUS:
            raise DeviceError(f"device spec {spec!r} asks for {len(node)} GPUs: the emulated "
                              f"driver exposes at most {EMULATED_MAX_GPUS}")
        index, uuid = _which(rest[0], spec) if rest else (0, "")
        if index >= len(node):
            raise DeviceError(
                f"device spec {spec!r} asks for agent {index} of an emulated node with "
                f"{len(node)} GPU(s): use an index below {len(node)}")
        return DeviceSpec("hsa", "emulated", node, index, uuid)
    if rest[0] != "virtual":
        if len(rest) > 1:
            raise _unknown(spec)
        index, uuid = _which(rest[0], spec)
        return DeviceSpec("hsa", "rocr", index=index, uuid=uuid)
    rest = rest[1:]
    gpus: tuple[str, ...] = default_virtual_gpus()
    index, uuid = 0, ""
    if rest and not rest[0].isdigit() and not _UUID_RE.match(rest[0]):
        names = [g.strip() for g in rest[0].split(",")]
        if not names or not all(_COUNTED_RE.match(g) for g in names):
            raise _unknown(spec)
        gpus = tuple(expand_gpus(names))
        if len(gpus) > MAX_GPUS:
            raise DeviceError(f"device spec {spec!r} asks for {len(gpus)} GPUs: a virtual "
                              f"node has at most {MAX_GPUS}")
        rest = rest[1:]
    if len(rest) > 1:
        raise _unknown(spec)
    if rest:
        index, uuid = _which(rest[0], spec)
    if index >= len(gpus):
        raise DeviceError(
            f"device spec {spec!r} asks for agent {index} of a virtual system with "
            f"{len(gpus)} GPU(s): use an index below {len(gpus)}"
        )
    return DeviceSpec("hsa", "virtual", gpus, index, uuid)


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

    reports = hsa_reports("rocr") + hsa_reports("virtual:" + compact_gpus(default_virtual_gpus()))
    # plain amdgpu:emulated is agent 0 of the node AMDGPU_EMULATED_NODE names (one gfx90a
    # by default): its row names that agent's target, as the opened device does
    reports.append(_emulated_report(default_emulated_gpus()[0], plain=True))
    return reports + _vulkan_reports()


def _emulated_report(isa: str, plain: bool = False) -> DeviceReport:
    """amdgpu:emulated without starting it: whether this process could open it, and
    whether its GPU runs kernels yet."""
    from hsa.emulated import runs_kernels, unavailable_reason
    from hsa.provider import Capability

    why = unavailable_reason()
    kernels = runs_kernels()
    paths = {"executor:gfx9": Capability(kernels, "" if kernels else (
        "no gfx9 ISA executor in hsa/virtual yet: queues, signals, memory and barriers only"))}
    spec = "amdgpu:emulated" if plain or isa == DEFAULT_EMULATED_GPU else f"amdgpu:emulated:{isa}"
    return DeviceReport(spec, "hsa", isa, isa, not why, why,  # the name ROCr gives the agent
                        paths, {"provider": "rocr over the emulated driver"})


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


__all__ = ["DRIVERS", "DRIVER_ENV", "VALID_FORMS", "devices", "open", "parse_spec", "resolve"]
