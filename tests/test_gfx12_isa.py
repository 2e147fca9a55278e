"""gfx12 instruction semantics against numpy: hand-written assembly, assembled by clang 22
(the `ziglang` wheel, which knows gfx1201 and gfx1250), run on the executor.

Each case is one kernel of one wave32 wave: lane l loads VGPR 16 + r from word 32 * r + l of
the input (32 VGPRs, v16-v47), runs the case's instructions and stores v48-v55. The WMMA
cases pack A, B and C with IREE's gfx12 layouts (IREEGPUAttrs.cpp: lane l holds row / column
l % 16 and K = (K / 2) * (l // 16) + 0..K/2-1 as consecutive halves, D's VGPR i of lane l is
row 8 * (l // 16) + i); the hardware's K order within a lane differs (IREE notes it), which
only changes the order of the sums, so integer data gives exact results either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.hsa_virtual

u32, i32, f32, f64, u64 = np.uint32, np.int32, np.float32, np.float64, np.uint64
NREG = 32  # v16..v47 in, v48..v55 out


def F(x):  # noqa: N802 - bits as float32
    return np.asarray(x, u32).view(f32)


def B(x):  # noqa: N802 - float32 as bits
    return np.asarray(x, f32).view(u32)


def pair(regs, r):
    """A 64-bit value from VGPRs r, r+1 (absolute register numbers)."""
    return regs[r - 16].astype(u64) | (regs[r - 15].astype(u64) << u64(32))


def split(x):
    x = np.asarray(x, u64)
    return (x & u64(0xFFFFFFFF)).astype(u32), (x >> u64(32)).astype(u32)


@dataclass
class Case:
    target: str
    body: str
    ref: Callable[[np.ndarray], dict[int, np.ndarray]]
    inputs: Callable[[np.random.Generator], np.ndarray] | None = None
    out_regs: list[int] = field(default_factory=list)
    vgprs: int = 64  # .amdhsa_next_free_vgpr
    lds: int = 0  # bytes of LDS


def small_floats(rng):
    return B(rng.integers(-8, 9, (NREG, 32)).astype(f32))


def f64_inputs(rng):
    regs = small_floats(rng)
    for r in (18, 20, 22):  # f64 values in pairs
        lo, hi = split(rng.integers(-50, 51, 32).astype(f64).view(u64))
        regs[r - 16], regs[r - 15] = lo, hi
    return regs


def random_bits(rng):
    return rng.integers(0, 2 ** 32, (NREG, 32), dtype=np.uint64).astype(u32)


MASK = 0x0F0F00FF
LANE_MASK = ((MASK >> np.arange(32)) & 1).astype(bool)


def _r(regs, k):
    return regs[k - 16]


CASES: dict[str, Case] = {
    # --- VOPD3 (gfx1250) -------------------------------------------------------------------
    "vopd3_fma_fma": Case(
        "gfx1250", "v_dual_fma_f32 v48, v17, v18, v19 :: v_dual_fma_f32 v49, v22, v23, v24",
        lambda r: {48: B(F(_r(r, 17)) * F(_r(r, 18)) + F(_r(r, 19))),
                   49: B(F(_r(r, 22)) * F(_r(r, 23)) + F(_r(r, 24)))}, small_floats),
    "vopd3_neg_add_and": Case(
        "gfx1250", "v_dual_add_f32 v48, -v17, v18 :: v_dual_bitop2_b32 v49, v22, v23 "
        "bitop3:0x40",
        lambda r: {48: B(-F(_r(r, 17)) + F(_r(r, 18))), 49: _r(r, 22) & _r(r, 23)},
        random_bits),
    "vopd3_or_xor": Case(
        "gfx1250", "v_dual_mov_b32 v48, v17 :: v_dual_bitop2_b32 v49, v22, v23 bitop3:0x54\n"
        "v_dual_mov_b32 v50, v17 :: v_dual_bitop2_b32 v51, v22, v23 bitop3:0x14",
        lambda r: {48: _r(r, 17), 49: _r(r, 22) | _r(r, 23), 50: _r(r, 17),
                   51: _r(r, 22) ^ _r(r, 23)}, random_bits),
    "vopd3_cndmask_sgpr": Case(
        "gfx1250", f"s_mov_b32 s8, 0x{MASK:x}\n"
        "v_dual_cndmask_b32 v48, v17, v18, s8 :: v_dual_mov_b32 v49, v22",
        lambda r: {48: np.where(LANE_MASK, _r(r, 18), _r(r, 17)), 49: _r(r, 22)},
        random_bits),
    "vopd3_fma_f64_max_i32": Case(
        "gfx1250", "v_dual_fma_f64 v[48:49], v[18:19], v[20:21], v[22:23] :: "
        "v_dual_max_i32 v51, v25, v26",
        lambda r: dict(zip((48, 49), split(
            (pair(r, 18).view(f64) * pair(r, 20).view(f64) + pair(r, 22).view(f64)).view(u64)),
            strict=True)) | {51: np.maximum(_r(r, 25).view(i32), _r(r, 26).view(i32)).view(u32)},
        f64_inputs),
    "vopd_gfx1250_y_ops": Case(
        "gfx1250", "v_dual_mov_b32 v48, v17 :: v_dual_sub_nc_u32 v49, v22, v23\n"
        "v_dual_mov_b32 v50, v17 :: v_dual_lshrrev_b32 v51, v22, v23\n"
        "v_dual_mov_b32 v52, v17 :: v_dual_ashrrev_i32 v53, v22, v23\n"
        "v_dual_mov_b32 v54, v17 :: v_dual_min_i32 v55, v22, v23",
        lambda r: {48: _r(r, 17), 49: _r(r, 22) - _r(r, 23),
                   51: _r(r, 23) >> (_r(r, 22) & u32(31)),
                   53: (_r(r, 23).view(i32) >> (_r(r, 22) & u32(31)).view(i32)).view(u32),
                   55: np.minimum(_r(r, 22).view(i32), _r(r, 23).view(i32)).view(u32)},
        random_bits),
    # --- packed fp32 (gfx1250) -------------------------------------------------------------
    "pk_fma_f32_neg_lo": Case(
        "gfx1250", "v_pk_fma_f32 v[48:49], v[16:17], v[18:19], v[20:21] neg_lo:[1,0,0]",
        lambda r: {48: B(-F(_r(r, 16)) * F(_r(r, 18)) + F(_r(r, 20))),
                   49: B(F(_r(r, 17)) * F(_r(r, 19)) + F(_r(r, 21)))}, small_floats),
    "pk_mul_f32_op_sel_hi": Case(
        "gfx1250", "v_pk_mul_f32 v[48:49], v[16:17], v[18:19] op_sel_hi:[0,1]",
        lambda r: {48: B(F(_r(r, 16)) * F(_r(r, 18))), 49: B(F(_r(r, 16)) * F(_r(r, 19)))},
        small_floats),
    "pk_add_f32_constant": Case(
        "gfx1250", "v_pk_add_f32 v[48:49], v[16:17], 1.0 op_sel_hi:[1,0]",
        lambda r: {48: B(F(_r(r, 16)) + 1), 49: B(F(_r(r, 17)) + 1)}, small_floats),
    # --- operand 254: 64-bit literals, 64-bit vector integers (gfx1250) ------------------
    "literal64": Case(
        "gfx1250", "s_mov_b64 s[8:9], 0x123456789abcdef0\n"
        "s_or_b64 s[10:11], s[8:9], 0x800000000000000\n"
        "v_mov_b32 v48, s8\nv_mov_b32 v49, s9\nv_mov_b32 v50, s10\nv_mov_b32 v51, s11\n"
        "v_mov_b64 v[52:53], 0x1122334455667788",
        lambda r: {48: np.full(32, 0x9ABCDEF0, u32), 49: np.full(32, 0x12345678, u32),
                   50: np.full(32, 0x9ABCDEF0, u32), 51: np.full(32, 0x1A345678, u32),
                   52: np.full(32, 0x55667788, u32), 53: np.full(32, 0x11223344, u32)},
        random_bits),
    "int64_vector": Case(
        "gfx1250", "v_mad_nc_u64_u32 v[48:49], v16, v17, v[18:19]\n"
        "v_add_nc_u64 v[50:51], v[20:21], v[22:23]\n"
        "v_mul_u64 v[52:53], v[24:25], v[26:27]\n"
        "v_lshl_add_u64 v[54:55], v[28:29], 3, v[30:31]",
        lambda r: dict(zip((48, 49), split(_r(r, 16).astype(u64) * _r(r, 17) + pair(r, 18)),
                           strict=True))
        | dict(zip((50, 51), split(pair(r, 20) + pair(r, 22)), strict=True))
        | dict(zip((52, 53), split(pair(r, 24) * pair(r, 26)), strict=True))
        | dict(zip((54, 55), split((pair(r, 28) << u64(3)) + pair(r, 30)), strict=True)),
        random_bits),
    "pc_i64": Case(  # s_get_pc_i64 / s_swap_pc_i64 (a call) / s_set_pc_i64 (its return)
        "gfx1250", "v_mov_b32 v48, 1\n"
        "s_get_pc_i64 s[8:9]\n"          # s[8:9] = A, the address of the next instruction
        "s_add_nc_u64 s[8:9], s[8:9], 16\n"  # A: the function at A + 16
        "s_swap_pc_i64 s[10:11], s[8:9]\n"   # A + 4: returns to A + 8
        "s_branch .Ldone_pc\n"           # A + 8
        "s_nop 0\n"                      # A + 12
        "v_mov_b32 v48, 7\n"             # A + 16: the function
        "s_set_pc_i64 s[10:11]\n"
        ".Ldone_pc:\nv_mov_b32 v49, 3",
        lambda r: {48: np.full(32, 7, u32), 49: np.full(32, 3, u32)}, random_bits),
    # --- s_set_vgpr_msb (gfx1250: VGPRs 256-1023) ------------------------------------------
    # mode bits: src0 [1:0], src1 [3:2], src2 [5:4], dst [7:6] (the high byte: the old mode)
    "vgpr_msb_valu": Case(
        "gfx1250", "s_set_vgpr_msb 0x40\n"
        "s_branch .Lmsb_valu\n.Lmsb_valu:\n"  # the mode is wave state: it survives a jump
        "v_mov_b32 v44, v17\n"              # v300 = v17
        "v_add_nc_u32 v45, v18, v19\n"      # v301 = v18 + v19
        "v_dual_mov_b32 v46, v20 :: v_dual_mov_b32 v47, v21\n"  # v302, v303
        "s_set_vgpr_msb 0x4005\n"
        "v_add_nc_u32 v48, v44, v45\n"      # v48 = v300 + v301
        "s_set_vgpr_msb 0x0501\n"
        "v_mov_b32 v49, v44\n"              # v49 = v300
        "s_set_vgpr_msb 0x0100\n"
        "v_mov_b32 v50, v44\n"              # v50 = v44: the low bank is untouched
        "s_set_vgpr_msb 0xc0\n"
        "v_lshl_add_u32 v0, v20, 3, v21\n"  # v768 = (v20 << 3) + v21
        "s_set_vgpr_msb 0xc030\n"
        "v_add3_u32 v51, v22, v23, v0\n"    # v51 = v22 + v23 + v768
        "s_set_vgpr_msb 0x3005\n"
        "v_dual_add_nc_u32 v52, v46, v47 :: v_dual_mov_b32 v53, v46\n"  # v302 + v303, v302
        "s_set_vgpr_msb 0x0500",
        lambda r: {48: _r(r, 17) + _r(r, 18) + _r(r, 19), 49: _r(r, 17), 50: _r(r, 44),
                   51: _r(r, 22) + _r(r, 23) + (_r(r, 20) << u32(3)) + _r(r, 21),
                   52: _r(r, 20) + _r(r, 21), 53: _r(r, 20)},
        random_bits, vgprs=1024),
    "vgpr_msb_memory": Case(
        "gfx1250", "s_set_vgpr_msb 0x40\n"
        "v_lshlrev_b32 v11, 2, v0\n"        # v267 = 4 * lane
        "s_set_vgpr_msb 0x4001\n"
        "ds_store_b32 v11, v17\n"           # LDS[v267] = v17 (addr slot 0)
        "s_wait_dscnt 0\n"
        "s_set_vgpr_msb 0x0181\n"
        "ds_load_b32 v12, v11\n"            # v524 = LDS[v267] (vdst slot 3: bank 2)
        "s_set_vgpr_msb 0x8140\n"
        "global_load_b32 v13, v10, s[6:7] offset:640\n"  # v269 = input register 21
        "s_wait_loadcnt_dscnt 0\n"
        "s_set_vgpr_msb 0x4002\n"
        "v_mov_b32 v48, v12\n"              # v48 = v524
        "s_set_vgpr_msb 0x0201\n"
        "v_mov_b32 v49, v13\n"              # v49 = v269
        "s_set_vgpr_msb 0x0100\n"
        "v_mov_b32 v50, v12\n"              # the low v12, v13: untouched
        "v_mov_b32 v51, v13",
        lambda r: {48: _r(r, 17), 49: _r(r, 21), 50: np.zeros(32, u32),
                   51: np.zeros(32, u32)},
        random_bits, vgprs=1024, lds=128),
    # --- ds_load_tr (gfx1250): lane l stores its 8 halves (v16-v19) at 16 * l ------------
    "ds_load_tr": Case(
        "gfx1250", "v_lshlrev_b32 v11, 4, v0\n"
        "ds_store_b128 v11, v[16:19]\n"
        "s_wait_dscnt 0\n"
        "ds_load_tr16_b128 v[48:51], v11\n"
        "ds_load_tr8_b64 v[52:53], v11\n"
        "s_wait_dscnt 0",
        lambda r: _tr_ref(r), random_bits, lds=512),
}


def _tr_ref(regs):
    """AMD's description of gfx1250's ds_load_tr (ROCm blog "A Deep Dive into LDS
    Optimizations on AMD Instinct MI450 GPUs", 2026): 4 independent groups of 8 lanes, an
    8 x 8 transpose each; destination lane D_i of a group receives element E_i of the
    group's source lanes. tr16_b128: the 8 source lanes of lanes 0-7 are 0-7; tr8_b64:
    lanes 0-7 draw from 0-3 and 8-11 (lanes 8-15 from 4-7 and 12-15)."""
    rows = np.ascontiguousarray(regs[:4].T)  # (lane, 4 dwords): what each lane stored
    halves = rows.view(np.uint16)  # (32, 8)
    by = rows.view(np.uint8)  # (32, 16); tr8_b64 reads the first 8 bytes
    t16 = np.zeros((32, 8), np.uint16)
    t8 = np.zeros((32, 8), np.uint8)
    runs8 = [0, 1, 2, 3, 8, 9, 10, 11]
    for d in range(32):
        group = d & ~7
        for j in range(8):
            t16[d, j] = halves[group + j, d & 7]
            src = (d & 16) + (4 if d & 8 else 0) + runs8[j]
            t8[d, j] = by[src, d & 7]
    w16, w8 = t16.view(u32), t8.view(u32)  # (32, 4), (32, 2)
    return {48 + k: w16[:, k] for k in range(4)} | {52 + k: w8[:, k] for k in range(2)}


def _wmma_case(target: str, inst: str, k: int, typ: str, c_const: bool = False) -> Case:
    """D = A (16 x k) @ B (k x 16) + C, A in v16.., B after it, C in v40..v47."""
    nab = {"f16": k // 4, "bf16": k // 4, "f32": k // 2, "iu8": k // 8}[typ]  # VGPRs of A, B
    a_reg, b_reg = 16, 16 + nab
    c_src = "0" if c_const else "v[40:47]"
    body = f"{inst} v[48:55], v[{a_reg}:{a_reg + nab - 1}], v[{b_reg}:{b_reg + nab - 1}], {c_src}"
    if typ == "iu8":
        body += " neg_lo:[1,1,0]"  # A and B signed
    lane = np.arange(32)
    rows = 8 * (lane[None, :] // 16) + np.arange(8)[:, None]  # (8, 32)
    cols = np.broadcast_to(lane % 16, (8, 32))

    def make(rng):
        lim = 128 if typ == "iu8" else 4
        a = rng.integers(-lim, lim, (16, k)).astype(f32)
        b = rng.integers(-lim, lim, (k, 16)).astype(f32)
        c = rng.integers(-8, 9, (16, 16)).astype(f32)
        regs = np.zeros((NREG, 32), u32)
        regs[a_reg - 16:a_reg - 16 + nab] = pack(a)
        regs[b_reg - 16:b_reg - 16 + nab] = pack(b.T)
        cc = c[rows, cols]
        regs[40 - 16:48 - 16] = cc.astype(i32).view(u32) if typ == "iu8" else B(cc)
        make.abc = (a, b, c)
        return regs

    def pack(m):  # m[lane % 16, K]: lane l holds K = (k / 2) * (l // 16) + 0..k/2-1
        half = k // 2
        per_lane = np.concatenate([m[:, :half], m[:, half:]], axis=0)  # (32, k/2)
        if typ == "f32":
            return B(per_lane).T  # VGPR v holds K = half * (l // 16) + v
        if typ == "iu8":  # four bytes a VGPR, the lowest K in the low byte
            by = per_lane.astype(np.int64).astype(np.uint8).astype(u32).reshape(32, -1, 4)
            return (by[..., 0] | by[..., 1] << 8 | by[..., 2] << 16 | by[..., 3] << 24).T
        bits = (B(per_lane) >> u32(16)) if typ == "bf16" else (
            per_lane.astype(np.float16).view(np.uint16).astype(u32))
        return (bits[:, 0::2] | (bits[:, 1::2] << u32(16))).T

    def ref(regs):
        a, b, c = make.abc
        d = a.astype(f64) @ b + (0 if c_const else c)
        if typ == "iu8":
            return {48 + i: d[rows[i], cols[i]].astype(np.int64).astype(i32).view(u32)
                    for i in range(8)}
        return {48 + i: B(d[rows[i], cols[i]].astype(f32)) for i in range(8)}

    return Case(target, body, ref, make)


# --- the scalar float ALU (gfx1201; gfx1250 has it too) -----------------------------------
# Each case runs its scalar ops once per lane l < SLANES: the operands are read from that
# lane of v17.. (v_readlane_b32), the result goes back into lane l of v48.. (v_writelane).
SLANES = 16
H = np.float16


def _lanes(ops: list[str], srcs: int = 2) -> str:
    """`ops` (one per output VGPR v48 + k) with s8 = v17[l], s9 = v18[l], s10 = v19[l] and
    s11 the result, written into lane l of v48 + k."""
    lines = [f"v_mov_b32 v{48 + k}, 0" for k in range(len(ops))]
    for lane in range(SLANES):
        lines += [f"v_readlane_b32 s{8 + j}, v{17 + j}, {lane}" for j in range(srcs)]
        for k, op in enumerate(ops):
            lines += [op, f"v_writelane_b32 v{48 + k}, s11, {lane}"]
    return "\n".join(lines)


def _per_lane(fn, *regs) -> np.ndarray:
    """fn of each lane's operands as (SLANES,) bits, zero above SLANES."""
    out = np.zeros(32, u32)
    out[:SLANES] = np.asarray(fn(*(r[:SLANES] for r in regs)), u32)
    return out


def float_specials(rng):
    """Small floats with specials in the first lanes of v17/v18: -0, +-inf, denormals,
    halfway cases and values with a fraction of .5 for the rounding ops."""
    regs = B((rng.integers(-64, 65, (NREG, 32)) / 8).astype(f32))
    specials = B(np.array([-0.0, np.inf, -np.inf, 1e-40, -2.5, 3.5, 0.5, 65520.0,
                           1.0009765625, -7.75, 2.0 ** -20, 1e30], f32))
    regs[1, :specials.size] = specials
    regs[2, 3:3 + specials.size] = specials
    return regs


def half_inputs(rng):
    """f16 values in the low halves (garbage in the high halves, which f16 ops ignore)."""
    regs = random_bits(rng)
    vals = (rng.integers(-400, 401, (NREG, 32)) / 16).astype(H)
    vals[1, :6] = np.array([-0.0, np.inf, 6e-8, -2.5, 3.5, 65504], H)
    return (regs & u32(0xFFFF0000)) | vals.view(np.uint16).astype(u32)


def nan_inputs(rng):
    regs = float_specials(rng)
    regs[1, 0:4] = B(np.array([np.nan, 1.0, np.nan, -0.0], f32))
    regs[2, 0:4] = B(np.array([1.0, np.nan, np.nan, 0.0], f32))
    regs[2, 4:8] = regs[1, 4:8]  # equal operands
    return regs


def _hf(x):  # the low-half f16 of each register, as f32
    return (np.asarray(x, u32) & u32(0xFFFF)).astype(np.uint16).view(H).astype(f32)


def _hb(x):  # f32 values rounded to f16, zero-extended
    return np.asarray(x, f32).astype(H).view(np.uint16).astype(u32)


def _f64fma(a, b, c):
    return (a.astype(f64) * b + c).astype(f32)


def _rtz16(x):
    """f32 -> f16 toward zero, by brute force: the f16 nearest to x not larger in size."""
    table = np.arange(0x7C00, dtype=np.uint16).view(H).astype(f64)  # +0 .. max finite
    mag = np.abs(np.asarray(x, f64))
    idx = np.searchsorted(table, mag, side="right") - 1
    bits = np.where(np.isinf(mag), 0x7C00, idx).astype(u32)
    return bits | (np.signbit(x).astype(u32) << u32(15))


def _cmp_scc(op: str) -> str:
    return f"{op}\ns_cselect_b32 s11, 1, 0"


SCALAR_CASES: dict[str, Case] = {
    "salu_f32_arith": Case(
        "gfx1201", _lanes([
            "s_add_f32 s11, s8, s9", "s_sub_f32 s11, s8, s9", "s_mul_f32 s11, s8, s9",
            "s_mov_b32 s11, s10\ns_fmac_f32 s11, s8, s9",
            "s_fmaak_f32 s11, s8, s9, 0x3ec00000",  # + 0.375
            "s_fmamk_f32 s11, s8, 0xbfa00000, s9",  # s8 * -1.25 + s9
            "s_min_num_f32 s11, s8, s9", "s_maximum_f32 s11, s8, s9"], srcs=3),
        lambda r: {48 + k: _per_lane(fn, _r(r, 17), _r(r, 18), _r(r, 19)) for k, fn in enumerate([
            lambda a, b, c: B(F(a) + F(b)), lambda a, b, c: B(F(a) - F(b)),
            lambda a, b, c: B(F(a) * F(b)), lambda a, b, c: B(_f64fma(F(a), F(b), F(c))),
            lambda a, b, c: B(_f64fma(F(a), F(b), f32(0.375))),
            lambda a, b, c: B(_f64fma(F(a), f32(-1.25), F(b))),
            lambda a, b, c: B(np.fmin(F(a), F(b))), lambda a, b, c: B(np.maximum(F(a), F(b)))])},
        float_specials),
    "salu_f32_convert_round": Case(
        "gfx1201", _lanes([
            "s_cvt_f32_i32 s11, s9", "s_cvt_f32_u32 s11, s9", "s_cvt_i32_f32 s11, s8",
            "s_cvt_u32_f32 s11, s8", "s_ceil_f32 s11, s8", "s_floor_f32 s11, s8",
            "s_trunc_f32 s11, s8", "s_rndne_f32 s11, s8"]),
        lambda r: {48 + k: _per_lane(fn, _r(r, 17), _r(r, 18)) for k, fn in enumerate([
            lambda a, b: B(b.view(i32).astype(f32)), lambda a, b: B(b.astype(f32)),
            lambda a, b: np.clip(np.trunc(F(a).astype(f64)), -2**31, 2**31 - 1)
            .astype(np.int64).astype(u32),
            lambda a, b: np.clip(np.trunc(F(a).astype(f64)), 0, 2**32 - 1).astype(u32),
            lambda a, b: B(np.ceil(F(a))), lambda a, b: B(np.floor(F(a))),
            lambda a, b: B(np.trunc(F(a))), lambda a, b: B(np.round(F(a)))])},
        lambda rng: np.vstack([float_specials(rng)[:2], random_bits(rng)[2:3],
                               float_specials(rng)[3:]])),
    "salu_f16": Case(
        "gfx1201", _lanes([
            "s_add_f16 s11, s8, s9", "s_mul_f16 s11, s8, s9", "s_sub_f16 s11, s8, s9",
            "s_mov_b32 s11, s10\ns_fmac_f16 s11, s8, s9", "s_max_num_f16 s11, s8, s9",
            "s_cvt_f32_f16 s11, s8", "s_cvt_hi_f32_f16 s11, s9", "s_floor_f16 s11, s8"],
            srcs=3),
        lambda r: {48 + k: _per_lane(fn, _r(r, 17), _r(r, 18), _r(r, 19)) for k, fn in enumerate([
            lambda a, b, c: _hb(_hf(a) + _hf(b)), lambda a, b, c: _hb(_hf(a) * _hf(b)),
            lambda a, b, c: _hb(_hf(a) - _hf(b)),
            lambda a, b, c: (_hf(a).astype(f64) * _hf(b) + _hf(c)).astype(H).view(
                np.uint16).astype(u32),
            lambda a, b, c: _hb(np.fmax(_hf(a), _hf(b))), lambda a, b, c: B(_hf(a)),
            lambda a, b, c: B(_hf(np.asarray(b, u32) >> u32(16))),
            lambda a, b, c: _hb(np.floor(_hf(a)))])},
        half_inputs),
    "salu_f16_convert": Case(
        "gfx1201", _lanes(["s_cvt_f16_f32 s11, s8", "s_cvt_pk_rtz_f16_f32 s11, s8, s9",
                           "s_rndne_f16 s11, s10", "s_cvt_f16_f32 s11, s9"], srcs=3),
        lambda r: {48 + k: _per_lane(fn, _r(r, 17), _r(r, 18), _r(r, 19)) for k, fn in enumerate([
            lambda a, b, c: _hb(F(a)), lambda a, b, c: _rtz16(F(a)) | (_rtz16(F(b)) << u32(16)),
            lambda a, b, c: _hb(np.round(_hf(c))), lambda a, b, c: _hb(F(b))])},
        lambda rng: np.vstack([B((rng.standard_normal((2, 32)) * 300).astype(f32)),
                               half_inputs(rng)[2:3], float_specials(rng)[3:]])),
    "salu_f32_compare": Case(
        "gfx1201", _lanes([_cmp_scc(f"s_cmp_{c}_f32 s8, s9") for c in
                           ("lt", "eq", "lg", "u", "nge", "neq", "o", "nlt")]),
        lambda r: {48 + k: _per_lane(lambda a, b, fn=fn: fn(F(a), F(b)).astype(u32),
                                     _r(r, 17), _r(r, 18)) for k, fn in enumerate([
            np.less, np.equal, lambda a, b: (a < b) | (a > b),
            lambda a, b: np.isnan(a) | np.isnan(b), lambda a, b: ~(a >= b),
            lambda a, b: ~(a == b), lambda a, b: ~(np.isnan(a) | np.isnan(b)),
            lambda a, b: ~(a < b)])},
        nan_inputs),
    "valu_scalar_result": Case(  # v_s_*: VALU transcendentals with an SGPR result
        "gfx1201", _lanes(["v_s_rcp_f32 s11, s8", "v_s_sqrt_f32 s11, s9",
                           "v_s_exp_f32 s11, s8", "v_s_log_f32 s11, s9",
                           "v_s_rsq_f32 s11, s9", "v_s_rcp_f32 s11, -s8 clamp",
                           "v_s_sqrt_f16 s11, s10", "v_s_exp_f16 s11, s10"], srcs=3),
        lambda r: {48 + k: _per_lane(fn, _r(r, 17), _r(r, 18), _r(r, 19)) for k, fn in enumerate([
            lambda a, b, c: B(f32(1) / F(a)), lambda a, b, c: B(np.sqrt(np.abs(F(b)))),
            lambda a, b, c: B(np.exp2(F(a))), lambda a, b, c: B(np.log2(np.abs(F(b)))),
            lambda a, b, c: B(f32(1) / np.sqrt(np.abs(F(b)))),
            lambda a, b, c: B(np.clip(f32(1) / -F(a), 0, 1)),
            lambda a, b, c: _hb(np.sqrt(_hf(c))), lambda a, b, c: _hb(np.exp2(_hf(c)))])},
        lambda rng: np.vstack([small_floats(rng)[:1] + B(f32(0.5)) * 0,
                               B(np.abs(F(small_floats(rng)[1:2])) + f32(0.25)),
                               (rng.integers(0, 64, (1, 32)) / 16).astype(H).view(
                                   np.uint16).astype(u32), small_floats(rng)[3:]])),
    # constant sources: IREE's 1/384 of minilm-f16's layer norm (v_s_rcp_f32 s4, 0x43c00000)
    "valu_scalar_result_constant": Case(
        "gfx1201", _lanes(["v_s_rcp_f32 s11, 0x43c00000", "v_s_sqrt_f32 s11, 4.0"]),
        lambda r: {48: _per_lane(lambda a: np.full(a.shape, B(f32(1) / f32(384)), u32),
                                 _r(r, 17)),
                   49: _per_lane(lambda a: np.full(a.shape, B(f32(2)), u32), _r(r, 17))}),
}
CASES.update(SCALAR_CASES)


WMMA = {
    "wmma_gfx1201_f16": ("gfx1201", "v_wmma_f32_16x16x16_f16", 16, "f16", False),
    "wmma_gfx1201_f16_zero_c": ("gfx1201", "v_wmma_f32_16x16x16_f16", 16, "f16", True),
    "wmma_gfx1201_bf16": ("gfx1201", "v_wmma_f32_16x16x16_bf16", 16, "bf16", False),
    "wmma_gfx1250_f16": ("gfx1250", "v_wmma_f32_16x16x32_f16", 32, "f16", False),
    "wmma_gfx1250_f16_zero_c": ("gfx1250", "v_wmma_f32_16x16x32_f16", 32, "f16", True),
    "wmma_gfx1250_bf16": ("gfx1250", "v_wmma_f32_16x16x32_bf16", 32, "bf16", False),
    "wmma_gfx1250_f32": ("gfx1250", "v_wmma_f32_16x16x4_f32", 4, "f32", False),
    "wmma_gfx1201_iu8": ("gfx1201", "v_wmma_i32_16x16x16_iu8", 16, "iu8", False),
    "wmma_gfx1250_iu8": ("gfx1250", "v_wmma_i32_16x16x64_iu8", 64, "iu8", False),
    "wmma_gfx1250_iu8_zero_c": ("gfx1250", "v_wmma_i32_16x16x64_iu8", 64, "iu8", True),
}
CASES.update({name: _wmma_case(*args) for name, args in WMMA.items()})


def _source(target: str, names: list[str]) -> str:
    loads = [f"  global_load_b32 v{16 + r}, v10, s[6:7] offset:{128 * r}" for r in range(NREG)]
    stores = [f"  global_store_b32 v10, v{48 + k}, s[4:5] offset:{128 * k}" for k in range(8)]
    parts = [f'.amdgcn_target "amdgcn-amd-amdhsa--{target}"', ".text"]
    meta, descs = [], []
    for name in names:
        parts.append(f".globl {name}\n.p2align 8\n.type {name},@function\n{name}:\n"
                     "  s_load_b128 s[4:7], s[0:1], 0x0\n  v_lshlrev_b32 v10, 2, v0\n"
                     "  s_wait_kmcnt 0\n" + "\n".join(loads) + "\n  s_wait_loadcnt 0\n"
                     + "\n".join("  " + line for line in CASES[name].body.splitlines())
                     + "\n" + "\n".join(stores) + "\n  s_endpgm\n")
        case = CASES[name]
        meta.append(f"""  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: 16
    .group_segment_fixed_size: {case.lds}
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: {case.vgprs}
    .max_flat_workgroup_size: 32
    .args:
      - {{.offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global}}""")
        descs.append(f".p2align 6\n.amdhsa_kernel {name}\n  .amdhsa_next_free_vgpr {case.vgprs}\n"
                     f"  .amdhsa_group_segment_fixed_size {case.lds}\n"
                     "  .amdhsa_next_free_sgpr 16\n  .amdhsa_user_sgpr_count 2\n"
                     "  .amdhsa_user_sgpr_kernarg_segment_ptr 1\n  .amdhsa_kernarg_size 16\n"
                     "  .amdhsa_wavefront_size32 1\n.end_amdhsa_kernel")
    parts += [".rodata", *descs, ".amdgpu_metadata\n---\namdhsa.version: [1, 2]\n"
              "amdhsa.kernels:", *meta, "...\n.end_amdgpu_metadata\n"]
    return "\n".join(parts)


@lru_cache(maxsize=2)
def _code(target: str) -> bytes:
    names = sorted(n for n, c in CASES.items() if c.target == target)
    return build_code_object(_source(target, names), "assembler", mcpu=target)


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_matches_numpy(name):
    case = CASES[name]
    h = Harness(case.target)
    code = h.load(_code(case.target))
    rng = np.random.default_rng(sum(name.encode()))
    regs = (case.inputs or small_floats)(rng)
    inputs = h.buffer(regs.reshape(-1))
    out = h.alloc(4 * 8 * 32)
    h.dispatch(code, name, (32,), (32,), [out, inputs])
    got = h.read(out, u32, 8 * 32).reshape(8, 32)
    with np.errstate(over="ignore", invalid="ignore"):  # references of inf/NaN cases
        wants = case.ref(regs)
    for reg, want in wants.items():
        np.testing.assert_array_equal(got[reg - 48], np.asarray(want, u32),
                                      err_msg=f"{name}: v{reg}")


def test_scalar_result_of_a_constant_in_a_group_of_waves():
    """Two waves run v_s_rcp_f32 with a literal source as one group: each gets the one
    value (the executor reshaped the constant to one row per wave: ValueError, the stop of
    minilm-f16 on gfx1201)."""
    name = "valu_scalar_result_constant"
    case = CASES[name]
    h = Harness(case.target)
    code = h.load(_code(case.target))
    regs = small_floats(np.random.default_rng(0))
    inputs = h.buffer(regs.reshape(-1))
    out = h.alloc(4 * 8 * 32)
    h.dispatch(code, name, (64,), (32,), [out, inputs])
    got = h.read(out, u32, 8 * 32).reshape(8, 32)
    for reg, want in case.ref(regs).items():
        np.testing.assert_array_equal(got[reg - 48], np.asarray(want, u32))
