"""Global wave sync (GWS): the ds_gws_* instructions of gfx9 and gfx11, which HIP's
cooperative groups use for a grid-wide barrier.

A GWS resource (ISA: index offset[5:0] + M0[21:16]) is a counter that every wave of the
dispatch can reach. ds_gws_init sets it from the data VGPR of the first active lane (the
barrier's wave count minus one; LLVM's disassembler reads that VGPR from the DS address
field, as here); ds_gws_barrier holds the wave until every live wave of the dispatch waits
at a barrier (the scheduler's barrier, which is dispatch-wide when all workgroups run as one
batch: a cooperative launch must fit the GPU at once, and a dispatch that does not is
refused by name). The semaphore ops count: sema_v adds one, sema_br adds the data value,
sema_p takes one (refused where it would have to wait: no other wave could give it one
before this one runs again), sema_release_all zeroes the count.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup

# what a GWS op returns to the scheduler: the next pc, or this marker for a barrier
GWS_BARRIER = -2  # the same value as the executor's BARRIER


class GwsError(Exception):
    """A GWS use the virtual GPU cannot honour (the message names it)."""


def _resource(g: WaveGroup, offset: int) -> int:
    ids = np.unique((g.s[:, d.M0] >> np.uint32(16)) & np.uint32(0x3F))
    if ids.size != 1:
        raise GwsError("waves of one group name different GWS resources (M0[21:16])")
    return (int(ids[0]) + offset) & 0x3F


def _first_lane_value(g: WaveGroup, reg: int) -> int:
    mask = g.exec_mask()
    rows, lanes = np.nonzero(mask)
    if rows.size == 0:
        return 0
    return int(g.v[reg][rows[0], lanes[0]])


def compile_gws(inst: d.Instruction) -> Callable | None:
    """fn(g, ctx) -> next pc or GWS_BARRIER for a ds_gws_* instruction, or None."""
    name, f = inst.name, inst.f
    offset = f.get("offset0", 0) & 0x3F
    nxt = inst.pc + inst.size
    reg = f.get("addr", 0)

    def state(ctx) -> dict[int, dict[str, int]]:
        gws = getattr(ctx, "gws", None)
        if gws is None:
            gws = ctx.gws = {}
        return gws

    if name == "ds_gws_init":
        def init(g: WaveGroup, ctx) -> int:
            state(ctx)[_resource(g, offset)] = {"count": _first_lane_value(g, reg), "sem": 0}
            return nxt
        return init
    if name == "ds_gws_barrier":
        def barrier(g: WaveGroup, ctx) -> int:
            _resource(g, offset)  # (the count of ds_gws_init, or of the runtime's own
            # init, is every wave of the launch: the scheduler's barrier waits for them all)
            if not ctx.whole_dispatch:
                raise GwsError("ds_gws_barrier needs every workgroup of the dispatch resident "
                               "at once (a cooperative launch); this dispatch runs in batches: "
                               "launch at most the occupancy's workgroups")
            return GWS_BARRIER
        return barrier
    if name in ("ds_gws_sema_v", "ds_gws_sema_br", "ds_gws_sema_p", "ds_gws_sema_release_all"):
        def sema(g: WaveGroup, ctx) -> int:
            entry = state(ctx).setdefault(_resource(g, offset), {"count": 0, "sem": 0})
            if name == "ds_gws_sema_v":
                entry["sem"] += g.count
            elif name == "ds_gws_sema_br":
                entry["sem"] += _first_lane_value(g, reg) * g.count
            elif name == "ds_gws_sema_release_all":
                entry["sem"] = 0
            else:
                if entry["sem"] < g.count:
                    raise GwsError("ds_gws_sema_p would wait for a semaphore no other wave "
                                   "can release first")
                entry["sem"] -= g.count
            return nxt
        return sema
    return None


__all__ = ["GWS_BARRIER", "GwsError", "compile_gws"]
