"""The gfx9 family (CDNA2/3/4: gfx90a, gfx942, gfx950) of the virtual AMD system.

Decoder and opcode tables (from LLVM) live here with gfx9's renames and its own
instructions (MFMA, AccVGPRs, SDWA, packed fp32); execution is the shared core in
`hsa.virtual.isa`, in wave64. Importing this package registers the executor as family
"gfx9"; it routes each dispatch to the target's decoder (gfx90a and gfx942 tables differ:
gfx940 renumbered the MFMA opcodes).
"""

from __future__ import annotations

from functools import partial

from hsa.virtual.executor import Dispatch, register_executor
from hsa.virtual.gfx9 import decoder, semantics
from hsa.virtual.isa.executor import Descriptor, Executor, Family
from hsa.virtual.isa.mem import private_vsharp
from hsa.virtual.isa.state import AGPR_ROW
from hsa.virtual.memory import MemoryMap

SPARE_ROWS = 3  # scratch rows at the end of v[] for SDWA operand selects


def vgpr_rows(desc: Descriptor) -> int:
    """gfx90a+ wave64: one unified file, granules of 8; AccVGPRs start at accum_offset."""
    total = ((desc.rsrc1 & 0x3F) + 1) * 8
    arch = ((desc.rsrc3 & 0x3F) + 1) * 4
    agprs = max(0, total - arch)
    return (AGPR_ROW + agprs if agprs else max(arch, total)) + SPARE_ROWS


def family(target: str) -> Family:
    def sample(inst) -> str:
        info = decoder.opcode_tables(target).get(inst.encoding, {}).get(inst.op)
        return info["sample"] if info else ""

    return Family(target, partial(decoder.decode_one, target=target), wave_sizes=(64,),
                  vgpr_rows=vgpr_rows, kernarg_preload=target != "gfx90a",
                  private_buffer=private_vsharp,
                  compile=semantics.make_compile(sample, target),
                  vgpr_msb=semantics.gpr_idx_variant)


class Gfx9Executor:
    """One executor per CDNA target, chosen by the dispatch's target id."""

    family = "gfx9"

    def __init__(self) -> None:
        self._by_target: dict[str, Executor] = {}
        self.last_lane_instructions = 0
        self.last_instructions = 0

    def for_target(self, target: str) -> Executor:
        name = target.split(":")[0]
        if name not in decoder.TARGETS:
            name = "gfx942"
        ex = self._by_target.get(name)
        if ex is None:
            ex = self._by_target[name] = Executor(family(name))
        return ex

    def run(self, dispatch: Dispatch, memory: MemoryMap) -> None:
        ex = self.for_target(dispatch.target)
        try:
            ex.run(dispatch, memory)
        finally:
            self.last_lane_instructions = ex.last_lane_instructions
            self.last_instructions = ex.last_instructions


_SHARED: Gfx9Executor | None = None


def shared_executor() -> Gfx9Executor:
    global _SHARED
    if _SHARED is None:
        _SHARED = Gfx9Executor()
    return _SHARED


register_executor("gfx9", shared_executor, fresh=Gfx9Executor)

__all__ = ["Gfx9Executor", "family", "shared_executor"]
