"""gfx12-only semantics on top of the shared core: the Family.compile hook of gfx1201/gfx1250.

What the core (written for gfx11) lacks and gfx12 code uses:
- gfx1250's VOPD3 (96-bit dual issue: a third source, neg modifiers, SGPR lane masks for
  v_dual_cndmask_b32, v_dual_bitop2_b32, 64-bit float X ops) and the VOPD Y ops gfx1250
  adds (sub_nc_u32, lshrrev/ashrrev, max/min_i32): both forms run through `compile_dual`;
- gfx1250's packed fp32 (v_pk_add_f32 / v_pk_mul_f32 / v_pk_fma_f32) on register pairs;
- s_barrier_signal_isfirst and gfx1250's HW_REG_IB_STS2 (cluster status and flat id);
- gfx1250's s_set_vgpr_msb (the VGPR bank of 1024-VGPR waves: a control op that switches
  the wave to instructions compiled with the bank bits, decoder.apply_vgpr_msb);
- gfx1250's transposing LDS loads ds_load_tr16_b128 and ds_load_tr8_b64 (`tr_sources`).
Everything else goes to the core's `compile_instruction`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from hsa.virtual.isa import executor as core
from hsa.virtual.isa import image, mem
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup
from hsa.virtual.isa.valu import _fma, base_name, max_num, min_num
from hsa.virtual.isa.vop3p import cvt_from_fp8

u32, u64, i32, f32, f64 = np.uint32, np.uint64, np.int32, np.float32, np.float64


# --- dual issue (VOPD, VOPD3) -----------------------------------------------------------------
def _f(x):
    return np.asarray(x, u32).view(f32)


def _b(x):
    return np.asarray(x, f32).view(u32)


def _i(x):
    return np.asarray(x, u32).view(i32)


def _dot2(a, b, c, bf16: bool):
    def half(x, hi: bool):
        bits = (np.asarray(x, u32) >> u32(16)) if hi else (np.asarray(x, u32) & u32(0xFFFF))
        if bf16:
            return (bits << u32(16)).view(f32).astype(f64)
        return bits.astype(np.uint16).view(np.float16).astype(f64)

    return _b(_f(c).astype(f64) + half(a, False) * half(b, False) + half(a, True) * half(b, True))


def _bitop2(a, b, table: int):
    """v_bitop3 with two sources: result bit = bit ((a << 2) | (b << 1)) of the 8-bit
    truth table (LLVM encodes AND as 0x40 and OR as 0x54)."""
    a, b = np.asarray(a, u32), np.asarray(b, u32)
    out = np.zeros(np.broadcast(a, b).shape, u32)
    for idx, (ma, mb) in ((4, (a, ~b)), (6, (a, b)), (2, (~a, b)), (0, (~a, ~b))):
        if table >> idx & 1:
            out |= ma & mb
    return out


# name -> (operand kind, fn(a, b, c, k)) with register bits in, register bits out; c is the
# third source (or the old destination for the accumulating ops), k the VOPD literal.
# Kinds: "32" 32-bit, "f32" 32-bit float (neg applies), "f64" 64-bit float pairs, "mask"
# (c is a lane mask), "bitop" (c is the truth table).
DUAL_OPS: dict[str, tuple[str, Callable]] = {
    "v_dual_fmac_f32": ("f32", lambda a, b, c, k: _b(_fma(_f(a), _f(b), _f(c)))),
    "v_dual_fma_f32": ("f32", lambda a, b, c, k: _b(_fma(_f(a), _f(b), _f(c)))),
    "v_dual_fmaak_f32": ("f32", lambda a, b, c, k: _b(_fma(_f(a), _f(b), _f(u32(k))))),
    "v_dual_fmamk_f32": ("f32", lambda a, b, c, k: _b(_fma(_f(a), _f(u32(k)), _f(b)))),
    "v_dual_mul_f32": ("f32", lambda a, b, c, k: _b(_f(a) * _f(b))),
    "v_dual_add_f32": ("f32", lambda a, b, c, k: _b(_f(a) + _f(b))),
    "v_dual_sub_f32": ("f32", lambda a, b, c, k: _b(_f(a) - _f(b))),
    "v_dual_subrev_f32": ("f32", lambda a, b, c, k: _b(_f(b) - _f(a))),
    "v_dual_mul_dx9_zero_f32": ("f32", lambda a, b, c, k: _b(np.where(
        (_f(a) == 0) | (_f(b) == 0), f32(0), _f(a) * _f(b)))),
    "v_dual_max_num_f32": ("f32", lambda a, b, c, k: _b(max_num(_f(a), _f(b)))),
    "v_dual_min_num_f32": ("f32", lambda a, b, c, k: _b(min_num(_f(a), _f(b)))),
    "v_dual_max_f32": ("f32", lambda a, b, c, k: _b(max_num(_f(a), _f(b)))),
    "v_dual_min_f32": ("f32", lambda a, b, c, k: _b(min_num(_f(a), _f(b)))),
    "v_dual_dot2acc_f32_f16": ("f32", lambda a, b, c, k: _dot2(a, b, c, False)),
    "v_dual_dot2acc_f32_bf16": ("f32", lambda a, b, c, k: _dot2(a, b, c, True)),
    "v_dual_mov_b32": ("32", lambda a, b, c, k: np.asarray(a, u32)),
    "v_dual_cndmask_b32": ("mask", lambda a, b, c, k: np.where(c, b, a)),
    "v_dual_add_nc_u32": ("32", lambda a, b, c, k: np.asarray(a, u32) + np.asarray(b, u32)),
    "v_dual_sub_nc_u32": ("32", lambda a, b, c, k: np.asarray(a, u32) - np.asarray(b, u32)),
    "v_dual_lshlrev_b32": ("32", lambda a, b, c, k: np.asarray(b, u32) << (
        np.asarray(a, u32) & u32(31))),
    "v_dual_lshrrev_b32": ("32", lambda a, b, c, k: np.asarray(b, u32) >> (
        np.asarray(a, u32) & u32(31))),
    "v_dual_ashrrev_i32": ("32", lambda a, b, c, k: (_i(b) >> _i(np.asarray(a, u32) & u32(31)))
                           .view(u32)),
    "v_dual_max_i32": ("32", lambda a, b, c, k: np.maximum(_i(a), _i(b)).view(u32)),
    "v_dual_min_i32": ("32", lambda a, b, c, k: np.minimum(_i(a), _i(b)).view(u32)),
    "v_dual_and_b32": ("32", lambda a, b, c, k: np.asarray(a, u32) & np.asarray(b, u32)),
    "v_dual_bitop2_b32": ("bitop", lambda a, b, c, k: _bitop2(a, b, c)),
    "v_dual_fma_f64": ("f64", lambda a, b, c, k: a * b + c),
    "v_dual_add_f64": ("f64", lambda a, b, c, k: a + b),
    "v_dual_mul_f64": ("f64", lambda a, b, c, k: a * b),
    "v_dual_max_num_f64": ("f64", lambda a, b, c, k: max_num(a, b)),
    "v_dual_min_num_f64": ("f64", lambda a, b, c, k: min_num(a, b)),
}
ACCUMULATES = ("v_dual_fmac_f32", "v_dual_dot2acc_f32_f16", "v_dual_dot2acc_f32_bf16")


def _component(inst: d.Instruction, side: str, name: str):
    """fn(g) -> (vdst, kind, result bits) for one half of a dual-issue instruction; all
    sources are read before either half writes."""
    kind, fn = DUAL_OPS[name]
    f = inst.f
    vopd3 = inst.encoding == "VOPD3"
    src0, vsrc1, vdst = f["src0" + side], f["vsrc1" + side] - d.VGPR0, f["vdst" + side]
    vsrc2 = f.get("vsrc2" + side, 0)
    neg = f.get("neg" + side, 0) if vopd3 else 0
    literal = inst.literal

    def signed(value, k: int, typ):
        return -value.view(typ) if neg >> k & 1 else value.view(typ)

    def run(g: WaveGroup):
        if kind == "f64":
            a = signed(np.asarray(g.vread(src0, literal, "64"), u64), 0, f64)
            b = signed(g.v[vsrc1].astype(u64) | (g.v[vsrc1 + 1].astype(u64) << u64(32)), 1, f64)
            c = g.v[vsrc2].astype(u64) | (g.v[vsrc2 + 1].astype(u64) << u64(32))
            c = signed(c, 2, f64)
            return vdst, kind, np.asarray(fn(a, b, c, literal), f64).view(u64)
        a = np.asarray(g.vread(src0, literal), u32)
        b = g.v[vsrc1]
        if kind == "mask":  # VOPD3: any SGPR holds the lane mask; VOPD: VCC
            c = g.lane_mask(vsrc2 if vopd3 else d.VCC_LO)
        elif kind == "bitop":
            c = vsrc2
        elif name in ACCUMULATES:
            c = g.v[vdst]
        elif vopd3:
            c = g.v[vsrc2]
        else:
            c = None
        if kind == "f32" and neg:
            a, b = _b(signed(a, 0, f32)), _b(signed(b, 1, f32))
            if c is not None:
                c = _b(signed(np.asarray(c, u32), 2, f32))
        return vdst, kind, fn(a, b, c, literal)

    return run


def compile_dual(inst: d.Instruction) -> Callable | None:
    names = inst.name.split(" :: ")
    if len(names) != 2 or any(n not in DUAL_OPS for n in names):
        return None
    halves = [_component(inst, side, n) for side, n in zip("xy", names, strict=True)]

    def run(g: WaveGroup) -> None:
        results = [h(g) for h in halves]
        for vdst, kind, value in results:
            value = np.array(np.broadcast_to(value, (g.count, g.lanes)))
            if kind == "f64":
                g.vwrite64(vdst, value)
            else:
                g.vwrite(vdst, value.astype(u32))

    return run


# --- packed fp32 (gfx1250 v_pk_*_f32) ---------------------------------------------------------
# v_pk_*_f32: (sources, fn of the f32 halves)
_PK_F32: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "v_pk_add_f32": (2, lambda a, b: a + b),
    "v_pk_mul_f32": (2, lambda a, b: a * b),
    "v_pk_fma_f32": (3, lambda a, b, c: _fma(a, b, c)),
}


def compile_pk_f32(inst: d.Instruction) -> Callable | None:
    """D.lo = op(S.[op_sel]) and D.hi = op(S.[op_sel_hi]): each 64-bit source is a register
    pair, op_sel bit k picks the dword of source k for the low result (op_sel_hi for the
    high one), neg / neg_hi negate it. A constant is its f32 value in both dwords (LLVM
    clears op_sel_hi for constants, so only the low dword is read)."""
    entry = _PK_F32.get(inst.name)
    if entry is None or "dpp" in inst.f:
        return None
    nsrc, fn = entry
    f = inst.f

    def pair(g: WaveGroup, code: int):
        if code >= d.VGPR0 or code < 128:
            wide = np.asarray(g.vread(code, inst.literal, "64"), u64)
            return (wide & u64(0xFFFFFFFF)).astype(u32), (wide >> u64(32)).astype(u32)
        lo = np.asarray(g.vread(code, inst.literal), u32)
        return lo, lo

    def run(g: WaveGroup) -> None:
        srcs = [pair(g, f[f"src{k}"]) for k in range(nsrc)]
        out = []
        for sel, negs in ((f["opsel"], f["neg"]), (f["opsel_hi"], f["neg_hi"])):
            args = []
            for k, (lo, hi) in enumerate(srcs):
                v = (hi if sel >> k & 1 else lo).view(f32)
                args.append(-v if negs >> k & 1 else v)
            r = np.asarray(fn(*args), f32)
            if f["clamp"]:
                r = np.clip(r, f32(0), f32(1))
            out.append(np.array(np.broadcast_to(r, (g.count, g.lanes))).view(u32))
        g.vwrite(f["vdst"], out[0])
        g.vwrite(f["vdst"] + 1, out[1])

    return run


# --- waves, barriers and hardware registers ----------------------------------------------------
TTMP6, TTMP8 = 108 + 6, 108 + 8
HW_REG_IB_STS2 = 28


def _first_wave(g: WaveGroup) -> np.ndarray:
    """Wave 0 of its workgroup (TTMP8 [29:25], see hsa.virtual.gfx12.architected_ids)."""
    return ((g.s[:, TTMP8] >> u32(25)) & u32(0x1F)) == 0


def run_barrier_signal_isfirst(g: WaveGroup) -> None:
    """s_barrier_signal_isfirst: signals (the wait is s_barrier_wait) and sets SCC in the
    one wave that signals first; here that is wave 0 of the workgroup (any single wave is
    a valid order; LLVM lets that wave alone join the cluster barrier)."""
    g.scc = _first_wave(g).copy()


def ib_sts2(g: WaveGroup) -> np.ndarray:
    """gfx1250's HW_REG_IB_STS2 as LLVM reads it: bits [9:6] non-zero when the dispatch
    has workgroup clusters (LLVM tests them against zero only: 1 here), bits [24:21] the
    workgroup's flat id in its cluster. Derived from the wave's TTMP6 (its place in its
    cluster, written at dispatch: hsa.virtual.executor.cluster_ids)."""
    t = g.s[:, TTMP6]
    x, y, z = t & u32(15), (t >> u32(4)) & u32(15), (t >> u32(8)) & u32(15)
    sx, sy = ((t >> u32(12)) & u32(15)) + u32(1), ((t >> u32(16)) & u32(15)) + u32(1)
    flat = x + sx * (y + sy * z)
    clustered = ((t >> u32(12)) & u32(0xFFF)) != 0
    return (clustered.astype(u32) << u32(6)) | ((flat & u32(15)) << u32(21))


def compile_getreg(inst: d.Instruction) -> Callable | None:
    """s_getreg_b32 of HW_REG_IB_STS2 (cluster status and place); other registers are the
    core's (which reads them as zero)."""
    simm = inst.f["simm16"]
    reg, offset, size = simm & 0x3F, (simm >> 6) & 0x1F, ((simm >> 11) & 0x1F) + 1
    if reg != HW_REG_IB_STS2:
        return None
    mask = u32((1 << size) - 1)

    def run(g: WaveGroup) -> None:
        g.s[:, inst.f["sdst"]] = (ib_sts2(g) >> u32(offset)) & mask

    return run


# --- gfx1250 transposing LDS loads ------------------------------------------------------------
def tr_sources(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(source lane, source element) of element r of destination lane l, as (32, 8) arrays,
    for gfx1250's ds_load_tr16_b128 and ds_load_tr8_b64. Each lane reads 8 contiguous
    elements (128 or 64 bits) from its own LDS address; the hardware then exchanges them
    within groups of 8 lanes as an 8 x 8 transpose: destination lane l receives element
    l % 8 of each of 8 source lanes. AMD's description ("A Deep Dive into LDS Optimizations
    on AMD Instinct MI450 GPUs", ROCm blog, 2026, Part I, figures 1 and 4): for tr16_b128
    the 8 source lanes of destination lanes 8g..8g+7 are 8g..8g+7 (element r from lane
    8g + r); for tr8_b64 each group draws from two runs of 4 lanes (lanes 0-7 from 0-3 and
    8-11; the lane basis 8 selects source lane 4, the element basis 4 source lane 8)."""
    lane = np.arange(32)[:, None]
    r = np.arange(8)[None, :]
    if name == "ds_load_tr16_b128":
        src = (lane & ~7) | r
    else:  # ds_load_tr8_b64
        src = (lane & 16) | (((lane >> 3) & 1) << 2) | (r & 3) | (((r >> 2) & 1) << 3)
    return np.broadcast_to(src, (32, 8)), np.broadcast_to(lane & 7, (32, 8))


_TR_LOADS = {"ds_load_tr16_b128": (16, 4), "ds_load_tr8_b64": (8, 2)}  # element bits, dwords


def compile_ds_load_tr(inst: d.Instruction) -> Callable:
    bits, nw = _TR_LOADS[inst.name]
    f = inst.f
    offset = f["offset0"] | (f["offset1"] << 8)
    src_lane, src_elem = tr_sources(inst.name)
    dtype = np.uint16 if bits == 16 else np.uint8

    def run(g: WaveGroup, ctx) -> None:
        if g.lanes != 32:
            raise ValueError(f"{inst.name} exchanges data across a wave32 wave")
        idx = mem._active(g)
        space, addr = ctx.lds_space(g, inst, mem._sel(g.v[f["addr"]], idx), idx)
        got = space.gather_words(addr + offset, nw)
        full = np.zeros((g.count * 32, nw), u32)  # inactive lanes supply zeros
        if idx is None:
            full[:] = got
        else:
            full[idx] = got
        elems = np.ascontiguousarray(full).view(dtype).reshape(g.count, 32, 8)
        out = np.ascontiguousarray(elems[:, src_lane, src_elem]).view(u32).reshape(-1, nw)
        for k in range(nw):
            mem._put(g, f["vdst"] + k, idx, out[:, k] if idx is None else out[idx, k])

    return run


def compile_set_vgpr_msb(inst: d.Instruction) -> Callable:
    """s_set_vgpr_msb imm16: the low byte is the new VGPR bank select of the wave (see
    decoder.apply_vgpr_msb); the instructions after it are compiled under that mode
    (Program.cache_for). A control op, so the executor picks the mode's cache up."""
    mode, nxt = inst.f["simm16"] & 0xFF, inst.pc + inst.size

    def run(g: WaveGroup) -> int:
        g.vgpr_msb = mode
        return nxt

    return run


def compile_from_fp8(inst: d.Instruction) -> Callable | None:
    """gfx12's OCP 8-bit float to f32 conversions: VOP1, or VOP3 with byte_sel (op_sel
    bits 0 and 1 are byte_sel's bits 1 and 0; clang: `v_cvt_f32_fp8_e64 v2, v11
    byte_sel:1`) or, packed, op_sel[0] for the high word. DPP, modifiers, clamp refused."""
    f = inst.f
    if "dpp" in f or f.get("clamp") or f.get("omod") or f.get("abs") or f.get("neg"):
        return None
    opsel = f.get("opsel", 0)
    name = base_name(inst.name)
    if name.startswith("v_cvt_pk_"):
        shift = 16 * (opsel & 1)
    else:
        shift = 8 * (((opsel & 1) << 1) | ((opsel >> 1) & 1))
    return cvt_from_fp8(name, f["src0"], inst.literal, f["vdst"], shift, True)


def compile_instruction(inst: d.Instruction) -> core.Compiled:
    """Family.compile for gfx12: gfx12-only semantics first, else the core's."""
    fn = None
    if inst.encoding in ("VIMAGE", "VSAMPLE"):  # images through T# (isa.image)
        named = dataclasses.replace(inst, name=image.image_name_gfx12(inst.encoding, inst.op))
        fn, why = image.compile_gfx12(named)
        if fn is not None:
            return core.Compiled(named, core.MEMORY, fn)
        return core.Compiled(named, core.SIMPLE, None, f"{why}; the virtual GPU runs "
                             "image_load/image_store and point samples on linear images")
    if inst.name == "s_set_vgpr_msb":
        return core.Compiled(inst, core.CONTROL, compile_set_vgpr_msb(inst))
    if inst.encoding == "VOPD3":
        fn = compile_dual(inst)
        if fn is None:
            return core.Compiled(inst, core.SIMPLE, None, "not implemented")
    elif inst.encoding == "VOPD" and inst.name != "<unknown>":
        c = core.compile_instruction(inst)  # the core's VOPD ops, else gfx1250's new ones
        if c.fn is not None:
            return c
        fn = compile_dual(inst)
    elif inst.encoding == "VOP3P" and inst.name in _PK_F32:
        fn = compile_pk_f32(inst)
    elif base_name(inst.name).startswith(("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_")):
        fn = compile_from_fp8(inst)
        if fn is None:
            return core.Compiled(inst, core.SIMPLE, None, "not implemented with these "
                                 "modifiers")
    elif inst.name == "s_barrier_signal_isfirst":
        fn = run_barrier_signal_isfirst
    elif inst.name == "s_getreg_b32":
        fn = compile_getreg(inst)
    elif inst.encoding == "DS" and inst.name in _TR_LOADS:
        return core.Compiled(inst, core.MEMORY, compile_ds_load_tr(inst))
    if fn is not None:
        return core.Compiled(inst, core.SIMPLE, fn)
    return core.compile_instruction(inst)


__all__ = ["DUAL_OPS", "compile_dual", "compile_ds_load_tr", "compile_instruction",
           "compile_pk_f32", "compile_set_vgpr_msb", "tr_sources"]
