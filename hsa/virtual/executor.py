"""The ISA executor interface of the virtual AMD system.

The packet processor hands each kernel-dispatch packet to the executor of its agent's
encoding family (`gfx11` first; `gfx12` and `gfx9` plug in the same way). An executor runs
every workgroup of the grid against the virtual system's `MemoryMap` and returns when the
dispatch is complete. It reports failures by raising `ground.errors.MemoryFault` (status
HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, naming kernel, PC and address) or
`ground.errors.IllegalInstruction` (naming encoding, mnemonic, kernel and PC); the packet
processor turns either into the queue's error state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hsa.virtual.memory import MemoryMap


@dataclass(frozen=True)
class ShaderRegisters:
    """A dispatch that a PM4 stream programmed (hsa/virtual/pm4.py): the command processor
    starts its waves from the shader registers instead of a kernel descriptor. The first
    RSRC2.USER_SGPR user SGPRs are COMPUTE_USER_DATA_0.. as written (the driver put the
    kernarg pointer, a dispatch pointer or a scratch V# there itself)."""

    program_address: int  # COMPUTE_PGM_HI:LO << 8, the first instruction
    rsrc1: int
    rsrc2: int
    rsrc3: int
    user_data: tuple[int, ...]  # COMPUTE_USER_DATA_0..15


@dataclass(frozen=True)
class Dispatch:
    """Everything the hardware knows when it starts a kernel-dispatch packet."""

    packet_address: int  # the 64-byte AQL packet in the ring (the "dispatch ptr" SGPRs)
    queue_address: int  # the amd_queue_t (the "queue ptr" SGPRs)
    dispatch_id: int  # the packet id (the "dispatch id" SGPRs)
    dims: int
    workgroup_size: tuple[int, int, int]
    grid_size: tuple[int, int, int]  # in work-items
    private_segment_size: int  # bytes per work-item, from the packet
    group_segment_size: int  # bytes per workgroup, from the packet (static + dynamic LDS)
    kernel_object: int  # address of the 64-byte kernel descriptor in loaded memory
    kernarg_address: int
    agent: int  # agent handle, for access checks in the memory map
    target: str  # the agent's target id, "gfx1100"
    wavefront_size: int
    kernel_name: str  # symbol behind kernel_object, or a hex address if unknown
    # gfx1250 workgroup clusters (the extended dispatch packet's cluster_size); (1, 1, 1)
    # for a classic packet. See cluster_ids for what the kernel sees.
    cluster_size: tuple[int, int, int] = (1, 1, 1)
    # A PM4 dispatch: program, resources and user SGPRs from the shader registers, and
    # kernel_object is the program address (no kernel descriptor is read). None: AQL.
    registers: ShaderRegisters | None = None


def cluster_ids(workgroup_id: tuple[int, ...], cluster_size: tuple[int, ...]
                ) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(cluster id, workgroup id within its cluster, TTMP6) of a workgroup, as gfx1250
    reports them. LLVM's gfx1250 lowering (llvm.amdgcn.cluster.workgroup.id.*) reads the
    workgroup's place in its cluster from TTMP6 bits [3:0] x, [7:4] y, [11:8] z, and the
    cluster's largest such id (cluster_size - 1; llvm.amdgcn.cluster.workgroup.max.id.*)
    from bits [15:12], [19:16], [23:20] and the largest flat id (workgroups in the cluster
    - 1; llvm.amdgcn.cluster.workgroup.max.flat.id) from bits [27:24]; the cluster id is
    the workgroup id divided by the cluster size."""
    cluster = tuple(w // s for w, s in zip(workgroup_id, cluster_size, strict=True))
    inner = tuple(w % s for w, s in zip(workgroup_id, cluster_size, strict=True))
    flat_max = cluster_size[0] * cluster_size[1] * cluster_size[2] - 1
    ttmp6 = (inner[0] | inner[1] << 4 | inner[2] << 8 | (cluster_size[0] - 1) << 12
             | (cluster_size[1] - 1) << 16 | (cluster_size[2] - 1) << 20 | flat_max << 24)
    return cluster, inner, ttmp6


class IsaExecutor(Protocol):
    """Runs one dispatch to completion or raises MemoryFault / IllegalInstruction."""

    family: str  # "gfx11", "gfx12", "gfx9"

    def run(self, dispatch: Dispatch, memory: MemoryMap) -> None: ...


# family name -> factory. Executors register themselves on import (see hsa/virtual/gfx11).
_EXECUTORS: dict[str, Callable[[], IsaExecutor]] = {}
_FRESH: dict[str, Callable[[], IsaExecutor]] = {}  # family -> a new executor of its own


def register_executor(family: str, factory: Callable[[], IsaExecutor],
                      fresh: Callable[[], IsaExecutor] | None = None) -> None:
    """`factory`: the process's shared executor; `fresh`: makes one of its own."""
    _EXECUTORS[family] = factory
    if fresh is not None:
        _FRESH[family] = fresh


def _import_family(family: str) -> None:
    """Import hsa.virtual.<family>, which registers its executor. A family with no package
    is simply not there; an import error inside an existing package is a bug and raises."""
    module = f"hsa.virtual.{family}"
    try:
        __import__(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise


def executor_for(family: str) -> IsaExecutor | None:
    """The executor for an encoding family, or None when the virtual GPU has none yet."""
    if family not in _EXECUTORS:
        _import_family(family)
    factory = _EXECUTORS.get(family)
    return factory() if factory else None


def new_executor(family: str) -> IsaExecutor | None:
    """An executor of its own for `family`, whose program cache (keyed by code address) dies
    with it: the emulated kernel gives one to each client process, whose code addresses
    are its own (a shared one kept every client's programs for good). executor_for's shared
    one where the family registered no `fresh`."""
    if family not in _EXECUTORS:
        _import_family(family)
    fresh = _FRESH.get(family)
    return fresh() if fresh else executor_for(family)


def supported_families() -> list[str]:
    """The encoding families that have an executor (for error messages)."""
    return [f for f in ("gfx9", "gfx10", "gfx11", "gfx12") if has_executor(f)]


def has_executor(family: str) -> bool:
    """Whether an executor is registered for `family` (importing its package if needed),
    without building one: cheap enough for capability reports."""
    if family not in _EXECUTORS:
        _import_family(family)
    return family in _EXECUTORS
