"""The gfx12 family of the virtual AMD system: gfx1201 (RDNA4) and gfx1250 (CDNA5).

The decoder and opcode tables live here; execution is the shared core in `hsa.virtual.isa`.
gfx12 has architected SGPRs: the hardware puts the workgroup ids in trap-temporary
registers (TTMP9 = x, TTMP7 = y | z << 16, as LLVM's gfx12 code reads them), the wave's
index in its workgroup in TTMP8 and, on gfx1250,
the workgroup's place in its cluster in TTMP6 (`hsa.virtual.executor.cluster_ids`); the
cluster id is then in TTMP9/TTMP7 in place of the workgroup id. Importing this package
registers the executor as family "gfx12".
"""

from __future__ import annotations

import numpy as np

from hsa.virtual.executor import cluster_ids, register_executor
from hsa.virtual.gfx12 import decoder, semantics
from hsa.virtual.isa.executor import Executor, Family

TTMP6, TTMP7, TTMP8, TTMP9 = 108 + 6, 108 + 7, 108 + 8, 108 + 9


def architected_ids(s: np.ndarray, dispatch, gx: np.ndarray, gy: np.ndarray,
                    gz: np.ndarray, wave_in_wg: np.ndarray) -> None:
    """TTMP registers of each wave (rows of `s`) from its workgroup coordinates; TTMP8 bits
    [29:25] hold the wave's index in its workgroup (LLVM's gfx12 llvm.amdgcn.wave.id is
    `s_bfe_u32 ttmp8, 0x50019`, as Triton's code reads it)."""
    s[:, TTMP8] = (np.asarray(wave_in_wg, np.uint32) & 0x1F) << 25
    size = tuple(int(c) for c in dispatch.cluster_size)
    if size == (1, 1, 1):
        s[:, TTMP9] = gx
        s[:, TTMP7] = (gy & 0xFFFF) | (gz << 16)
        return
    for i, (x, y, z) in enumerate(zip(gx.tolist(), gy.tolist(), gz.tolist(), strict=True)):
        cluster, _, ttmp6 = cluster_ids((x, y, z), size)
        s[i, TTMP9] = cluster[0]
        s[i, TTMP7] = (cluster[1] & 0xFFFF) | (cluster[2] << 16)
        s[i, TTMP6] = ttmp6


def _vgpr_rows_gfx1250(desc) -> int:
    """gfx1250 has 1024 VGPRs a lane: rsrc1's VGPR count is in granules of 16 (a kernel with
    14 VGPRs has the field 0), not gfx11/gfx1201's 8."""
    return min(1024, ((desc.rsrc1 & 0x3F) + 1) * 16)


FAMILIES = {
    "gfx1201": Family("gfx12", decoder.decoder_for("gfx1201"), init_sgprs=architected_ids,
                      wave_sizes=(32, 64), compile=semantics.compile_instruction),
    "gfx1250": Family("gfx12", decoder.decoder_for("gfx1250"), init_sgprs=architected_ids,
                      vgpr_rows=_vgpr_rows_gfx1250, compile=semantics.compile_instruction,
                      vgpr_msb=decoder.apply_vgpr_msb),
}


class Gfx12Executor:
    """One core Executor per gfx12 target (each decodes with its own opcode table)."""

    family = "gfx12"

    def __init__(self) -> None:
        self.targets = {t: Executor(f) for t, f in FAMILIES.items()}
        self.last_lane_instructions = 0
        self.last_instructions = 0

    def run(self, dispatch, memory) -> None:
        target = dispatch.target.split(":")[0]
        ex = self.targets.get(target, self.targets["gfx1201"])
        try:
            ex.run(dispatch, memory)
        finally:  # what the last dispatch executed (benchmarks read it)
            self.last_lane_instructions = ex.last_lane_instructions
            self.last_instructions = ex.last_instructions


_SHARED: Gfx12Executor | None = None


def shared_executor() -> Gfx12Executor:
    """The process-wide gfx12 executor (its program caches are shared by every dispatch)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Gfx12Executor()
    return _SHARED


register_executor("gfx12", shared_executor, fresh=Gfx12Executor)

__all__ = ["FAMILIES", "Gfx12Executor", "shared_executor"]
