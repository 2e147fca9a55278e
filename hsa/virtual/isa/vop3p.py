"""VOP3P (packed 16-bit math, dot products, mixed-precision FMA, WMMA) and VOPD (dual issue).

WMMA lane layout (RDNA3, wave32, 16x16x16): lane l holds row l%16 of A and column l%16 of B
(all 16 K values, two 16-bit values per VGPR; lanes 16-31 repeat lanes 0-15); for C and D,
VGPR i of lane l holds element (row 2*i + l//16, column l%16).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import ml_dtypes
import numpy as np

from hsa.virtual.isa import operands as d
from hsa.virtual.isa import strided
from hsa.virtual.isa.state import LANES, WaveGroup
from hsa.virtual.isa.valu import (
    _fma,
    _fma16,
    base_name,
    from_type,
    max_num,
    maximum,
    min_num,
    minimum,
    to_type,
)

u32, f32 = np.uint32, np.float32


def _bf16_to_f32(bits16: np.ndarray) -> np.ndarray:
    return (bits16.astype(u32) << u32(16)).view(f32)


def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
    b = np.asarray(x, f32).view(u32)
    rounding = ((b >> u32(16)) & u32(1)) + u32(0x7FFF)  # round to nearest even
    return ((b + rounding) >> u32(16)).astype(u32)


# --- packed 16-bit -----------------------------------------------------------------------------
_PK: dict[str, tuple[str, Callable]] = {
    "v_pk_fma_f16": ("f16", _fma16),
    "v_pk_add_f16": ("f16", lambda a, b: a + b),
    "v_pk_mul_f16": ("f16", lambda a, b: a * b),
    "v_pk_max_f16": ("f16", max_num),
    "v_pk_min_f16": ("f16", min_num),
    "v_pk_minimum_f16": ("f16", minimum),  # gfx12: NaN propagates, -0 < +0
    "v_pk_maximum_f16": ("f16", maximum),
    "v_pk_add_u16": ("u16", lambda a, b: a + b),
    "v_pk_sub_u16": ("u16", lambda a, b: a - b),
    "v_pk_add_i16": ("i16", lambda a, b: a + b),
    "v_pk_sub_i16": ("i16", lambda a, b: a - b),
    "v_pk_mul_lo_u16": ("u16", lambda a, b: a * b),
    "v_pk_max_u16": ("u16", np.maximum),
    "v_pk_min_u16": ("u16", np.minimum),
    "v_pk_max_i16": ("i16", np.maximum),
    "v_pk_min_i16": ("i16", np.minimum),
    "v_pk_lshlrev_b16": ("u16", lambda a, b: b << (a & np.uint16(15))),
    "v_pk_lshrrev_b16": ("u16", lambda a, b: b >> (a & np.uint16(15))),
    "v_pk_mad_u16": ("u16", lambda a, b, c: a * b + c),
    "v_pk_mad_i16": ("i16", lambda a, b, c: a.astype(np.int64) * b + c),
    "v_pk_ashrrev_i16": ("i16", lambda a, b: b >> (a & np.int16(15))),
}


def _src(g: WaveGroup, inst: d.Instruction, k: int, kind: str = "16"):
    return g.vread(inst.f[f"src{k}"], inst.literal, kind)


def _half(g: WaveGroup, inst: d.Instruction, k: int, t: str, hi_result: bool):
    """Source k for the low (or high) half of a packed result."""
    f = inst.f
    sel = (f["opsel_hi"] if hi_result else f["opsel"]) >> k & 1
    value = to_type(_src(g, inst, k), t, bool(sel))
    neg = (f["neg_hi"] if hi_result else f["neg"]) >> k & 1
    if neg and t == "f16":
        value = -value
    return value


def run_packed(g: WaveGroup, inst: d.Instruction, t: str, fn: Callable, nsrc: int) -> None:
    halves = []
    for hi in (False, True):
        args = [_half(g, inst, k, t, hi) for k in range(nsrc)]
        halves.append(np.asarray(from_type(fn(*args), t), u32) & u32(0xFFFF))
    g.vwrite(inst.f["vdst"], halves[0] | (halves[1] << u32(16)))


def run_dot2(g: WaveGroup, inst: d.Instruction, bf16: bool) -> None:
    f = inst.f
    a, b = _src(g, inst, 0), _src(g, inst, 1)
    c = to_type(_src(g, inst, 2, "32"), "f32").astype(np.float64)
    acc = c
    for hi in (False, True):
        if bf16:
            x = _bf16_to_f32((np.asarray(a, u32) >> u32(16 * hi)) & u32(0xFFFF))
            y = _bf16_to_f32((np.asarray(b, u32) >> u32(16 * hi)) & u32(0xFFFF))
        else:
            x = to_type(a, "f16", bool((f["opsel_hi"] if hi else f["opsel"]) & 1))
            y = to_type(b, "f16", bool((f["opsel_hi"] if hi else f["opsel"]) >> 1 & 1))
        acc = acc + np.asarray(x, np.float64) * np.asarray(y, np.float64)
    g.vwrite(f["vdst"], np.asarray(acc, f32).view(u32))


def _is_constant(code: int) -> bool:
    return 128 <= code < d.VGPR0 and code != d.SCC


def run_dot_int(g: WaveGroup, inst: d.Instruction, bits: int, signed: bool) -> None:
    """v_dot4_i32_iu8 / v_dot8_i32_iu4 (neg[0] / neg[1]: A / B signed) and the unsigned
    v_dot4_u32_u8 / v_dot8_u32_u4: S2 plus the products of the 8- or 4-bit fields; clamp
    saturates, otherwise the sum wraps."""
    f = inst.f
    a, b = (np.asarray(_src(g, inst, k, "32"), u32).astype(np.int64) for k in (0, 1))
    c = np.asarray(_src(g, inst, 2, "32"), u32)
    sa = signed and bool(f["neg"] & 1)
    sb = signed and bool(f["neg"] >> 1 & 1)
    acc = c.view(np.int32).astype(np.int64) if signed else c.astype(np.int64)
    mask, half = (1 << bits) - 1, 1 << (bits - 1)
    for k in range(32 // bits):
        x = (a >> (bits * k)) & mask
        y = (b >> (bits * k)) & mask
        if sa:
            x = np.where(x >= half, x - (1 << bits), x)
        if sb:
            y = np.where(y >= half, y - (1 << bits), y)
        acc = acc + x * y
    if f["clamp"]:
        acc = np.clip(acc, -(2 ** 31), 2 ** 31 - 1) if signed else np.clip(acc, 0, 2 ** 32 - 1)
    g.vwrite(f["vdst"], acc.astype(u32))


def run_fma_mix(g: WaveGroup, inst: d.Instruction, out: str) -> None:
    f = inst.f
    args = []
    for k in range(3):
        f16 = bool(f["opsel_hi"] >> k & 1)
        code = f[f"src{k}"]
        if f16 and _is_constant(code) and code != d.LITERAL:
            # an inline constant on an f16-selected source is the f16 constant (LLVM's
            # rule for mix ops), not the low half of the f32 bit pattern
            value = to_type(g.vread(code, None, "16"), "f16")
        elif f16:
            raw = _src(g, inst, k, "32")
            value = to_type(raw, "f16", bool(f["opsel"] >> k & 1))
        else:
            value = to_type(_src(g, inst, k, "32"), "f32")
        if f["neg_hi"] >> k & 1:  # for mix ops neg_hi is abs
            value = np.abs(value)
        if f["neg"] >> k & 1:
            value = -value
        args.append(value)
    r = _fma(*args) if out == "f32" else _fma16(*args)  # an f16 result: rounded once
    if f["clamp"]:
        r = np.clip(r, 0, 1)
    if out == "f32":
        g.vwrite(f["vdst"], np.asarray(r, f32).view(u32))
        return
    bits = np.asarray(r, f32).astype(np.float16).view(np.uint16).astype(u32)
    old = g.v[f["vdst"]]
    if out == "lo":
        g.vwrite(f["vdst"], (old & u32(0xFFFF0000)) | bits)
    else:
        g.vwrite(f["vdst"], (old & u32(0xFFFF)) | (bits << u32(16)))


# --- WMMA ----------------------------------------------------------------------------------------
def _operand16(g: WaveGroup, reg: int, bf16: bool) -> np.ndarray:
    """8 VGPRs of 16-bit values in lanes 0-15 -> (waves, 16 lanes, 16 values) float32:
    value k is half k % 2 of VGPR k // 2, so a (lane, VGPR) copy viewed as halves is it."""
    words = np.ascontiguousarray(g.v[reg:reg + 8, :, :16].transpose(1, 2, 0))  # (W, 16, 8)
    if bf16:
        return _bf16_to_f32(words.view(np.uint16))
    return words.view(np.float16).astype(f32)


def _operand16_gfx12(g: WaveGroup, reg: int, bf16: bool, k: int = 16) -> np.ndarray:
    """gfx12's 16-bit A/B layout, k/4 VGPRs a lane: lane l holds row (A) or column (B)
    l % 16; its VGPR v holds K = 8 * (v // 2) + 4 * (l // 16) + 2 * (v % 2) + (0, 1): the
    two lane halves take turns every two VGPRs (IREE's gfx12 WMMA layout notes it: A[0, 4]
    comes from lane 16's first VGPR) -> (waves, 16, k) f32."""
    nreg = k // 4
    words = g.v[reg:reg + nreg]  # (nreg, W, 32)
    halves = np.stack([words & u32(0xFFFF), words >> u32(16)], axis=-1)  # (nreg, W, 32, 2)
    # (pair of VGPRs p, VGPR in pair q, W, lane half h, m, value j) -> K = 8p + 4h + 2q + j
    halves = halves.reshape(nreg // 2, 2, g.count, 2, 16, 2)
    vals = halves.transpose(2, 4, 0, 3, 1, 5).reshape(g.count, 16, k)
    if bf16:
        return _bf16_to_f32(vals)
    return vals.astype(np.uint16).view(np.float16).astype(f32)


def _operand32_gfx12(g: WaveGroup, reg: int) -> np.ndarray:
    """gfx1250 v_wmma_f32_16x16x4_f32's A/B: 2 VGPRs, lane l holds row/column l % 16 and
    K = 2 * (l // 16) + v -> (waves, 16, 4) f32."""
    words = g.v[reg:reg + 2].view(f32)  # (2, W, 32)
    vals = words.reshape(2, g.count, 2, 16).transpose(1, 3, 2, 0)  # (W, m, h, v)
    return vals.reshape(g.count, 16, 4)


def _wmma_shape(name: str) -> tuple[int, str]:
    """(K, input type) of v_wmma_<acc>_16x16x<K>_<in>."""
    shape, typ = name.split("_16x16x")[1].split("_", 1)
    return int(shape), typ


def _acc_values(g: WaveGroup, inst: d.Instruction, f32_acc: bool, bf16: bool,
                opsel_hi: bool) -> np.ndarray:
    """C as (8, W, 32) f32: 8 VGPRs, or an inline constant (IREE's code passes 0 for a
    zero accumulator) broadcast to every element."""
    code = inst.f["src2"]
    if code < d.VGPR0:
        value = np.asarray(g.vread(code, inst.literal, "32" if f32_acc else "16"), u32)
        raw = np.broadcast_to(value, (8, g.count, LANES)) if value.ndim < 2 else (
            np.broadcast_to(value[None], (8, g.count, LANES)))
        raw = np.array(raw, u32)
        if f32_acc:
            return raw.view(f32)
        raw = raw & u32(0xFFFF)
    else:
        c_reg = code - d.VGPR0
        raw = g.v[c_reg:c_reg + 8]
        if f32_acc:
            return raw.view(f32)
        raw = (raw >> u32(16)) if opsel_hi else (raw & u32(0xFFFF))
    return _bf16_to_f32(raw) if bf16 else raw.astype(np.uint16).view(np.float16).astype(f32)


@cache
def fp8_values(kind: str, ocp: bool) -> np.ndarray:
    """The 256 values of an 8-bit float code as float64: fp8 (E4M3) or bf8 (E5M2), in OCP's
    encoding (gfx950, gfx12) or the FNUZ one (gfx942)."""
    dtype = {("fp8", False): ml_dtypes.float8_e4m3fnuz, ("bf8", False): ml_dtypes.float8_e5m2fnuz,
             ("fp8", True): ml_dtypes.float8_e4m3fn, ("bf8", True): ml_dtypes.float8_e5m2}
    return np.arange(256, dtype=np.uint8).view(dtype[kind, ocp]).astype(np.float64)


_CVT_FROM_FP8 = {"v_cvt_f32_fp8": ("fp8", False), "v_cvt_f32_bf8": ("bf8", False),
                 "v_cvt_pk_f32_fp8": ("fp8", True), "v_cvt_pk_f32_bf8": ("bf8", True)}


def cvt_from_fp8(name: str, src0: int, literal, vdst: int, shift: int, ocp: bool
                 ) -> Callable | None:
    """v_cvt_f32_fp8/bf8 (one 8-bit float of src0, from bit `shift`, to an f32) and
    v_cvt_pk_f32_fp8/bf8 (two, from bits shift..shift+15, to vdst and vdst+1), or None for
    another name. Every 8-bit float is exact in f32. `ocp`: OCP's E4M3/E5M2 (gfx950,
    gfx12), else the FNUZ forms of gfx942. The caller reads the byte or word select from
    its encoding (gfx9 SDWA src0_sel, gfx12 VOP3 byte_sel/op_sel)."""
    if name not in _CVT_FROM_FP8:
        return None
    kind, pk = _CVT_FROM_FP8[name]
    table = fp8_values(kind, ocp).astype(f32).view(u32)

    def run(g: WaveGroup) -> None:
        raw = np.broadcast_to(np.asarray(g.vread(src0, literal), u32), (g.count, g.lanes))
        x = raw >> u32(shift)
        g.vwrite(vdst, table[x & u32(0xFF)])
        if pk:
            g.vwrite(vdst + 1, table[(x >> u32(8)) & u32(0xFF)])

    return run


_FP8_PAIRS = ("fp8_fp8", "fp8_bf8", "bf8_fp8", "bf8_bf8")


def run_wmma(g: WaveGroup, inst: d.Instruction, name: str) -> None:
    f = inst.f
    a_reg, b_reg = (f[f"src{k}"] - d.VGPR0 for k in range(2))
    k, typ = _wmma_shape(name)
    bf16 = typ == "bf16"
    gfx12 = bool(f.get("gfx12_wmma"))  # set by the gfx12 decoder: gfx12's register layout
    f32_acc = name.startswith("v_wmma_f32")
    if gfx12 and not f32_acc:
        raise NotImplementedError("gfx12 WMMA with a 16-bit accumulator")
    fast = g.v.flags.c_contiguous
    if typ in _FP8_PAIRS:
        if not gfx12:
            raise NotImplementedError(f"{name} outside gfx12")
        # 8-bit floats in the 8-bit integer layout (gfx12: A/B as the iu8 WMMA's), OCP codes
        kinds = typ.split("_")
        if fast:
            a, b = (_ab_values(g, reg, gfx12, k, np.uint8, kind)
                    for kind, reg in zip(kinds, (a_reg, b_reg), strict=True))
        else:
            a, b = (fp8_values(kind, True)[_operand_int_gfx12(g, reg, 8, False, k)].astype(f32)
                    for kind, reg in zip(kinds, (a_reg, b_reg), strict=True))
    elif fast and typ in ("f16", "bf16") and (gfx12 or k == 16):
        a, b = (_ab_values(g, reg, gfx12, k, np.uint16, typ) for reg in (a_reg, b_reg))
    elif typ == "f32":
        a, b = _operand32_gfx12(g, a_reg), _operand32_gfx12(g, b_reg)
    elif gfx12:
        a, b = _operand16_gfx12(g, a_reg, bf16, k), _operand16_gfx12(g, b_reg, bf16, k)
    else:
        a, b = _operand16(g, a_reg, bf16), _operand16(g, b_reg, bf16)  # (W, m|n, k)
    lane = np.arange(LANES)
    if gfx12:  # D: VGPR i, lane l holds row i + 8 * (l // 16), column l % 16
        rows = np.arange(8)[:, None] + 8 * (lane[None, :] // 16)
    else:  # gfx11: row 2 * i + l // 16
        rows = 2 * np.arange(8)[:, None] + lane[None, :] // 16  # (8, 32)
    cols = np.broadcast_to(lane[None, :] % 16, (8, LANES))
    opsel_hi = bool(f["opsel"] >> 2 & 1)
    c_vals = _acc_values(g, inst, f32_acc, bf16, opsel_hi)
    prod = np.matmul(a, b.transpose(0, 2, 1))  # (W, 16, 16)
    if fast and f32_acc and g.exec_all():  # D = prod + C straight into the registers
        src = strided.view(prod.reshape(g.count, 256), _d_plan(gfx12), 0, 1)
        target = g.v[f["vdst"]:f["vdst"] + 8]
        np.add(src, c_vals.reshape(src.shape), out=target.view(f32).reshape(src.shape))
        return
    dvals = prod.reshape(g.count, 256)[:, rows * 16 + cols]  # (W, 8, 32)
    dvals = dvals.transpose(1, 0, 2) + c_vals  # (8, W, 32)
    vdst = f["vdst"]
    if f32_acc:
        bits = dvals.astype(f32, copy=False).view(u32)
    else:
        h = _f32_to_bf16(dvals) if bf16 else np.asarray(dvals, f32).astype(
            np.float16).view(np.uint16).astype(u32)
        old = g.v[vdst:vdst + 8]
        bits = (old & u32(0xFFFF)) | (h << u32(16)) if opsel_hi else (
            (old & u32(0xFFFF0000)) | h)
    if g.exec_all():
        g.v[vdst:vdst + 8] = bits
    else:
        for i in range(8):
            g.vwrite(vdst + i, bits[i])


# The same layouts as strided views (hsa.virtual.isa.strided): one copy from the registers.
@cache
def _ab_plan(gfx12: bool, k: int, itemsize: int) -> tuple[strided.Plan, int]:
    """A (or B) of a 16x16xk WMMA, (16 rows, k / items per VGPR) over (VGPR, lane): each
    layout keeps a VGPR's items together, in order (so whole words are copied); and the
    VGPRs it spans."""
    per = 4 // itemsize
    m = np.arange(16)[:, None]
    kk = np.arange(0, k, per)[None, :]  # the first item of each word
    if not gfx12:  # gfx11: lanes 0-15, value k is item k % per of VGPR k // per
        v, lane = kk // per, m + 0 * kk
    elif itemsize == 2:  # see _operand16_gfx12
        v, lane = 2 * (kk // 8) + (kk // 2) % 2, m + 16 * ((kk // 4) % 2)
    else:  # see _operand_int_gfx12
        half = k // 2
        v, lane = (kk % half) // per, m + 16 * (kk // half)
    p = strided.plan(tuple(np.broadcast_to(x, (16, k // per)) for x in (v, lane)))
    assert p is not None, "every WMMA operand layout is a mixed-radix permutation"
    return p, int(v.max()) + 1


def _ab_words(g: WaveGroup, reg: int, gfx12: bool, k: int, dtype) -> np.ndarray:
    """A/B register items (`dtype`: uint16 or uint8) as a contiguous (W, 16, k) array."""
    dt = np.dtype(dtype)
    p, nreg = _ab_plan(gfx12, k, dt.itemsize)
    words = np.array(strided.view(g.v[reg:reg + nreg], p, 1, 0), order="C")
    return words.view(dt).reshape(g.count, 16, k)


def _ab_values(g: WaveGroup, reg: int, gfx12: bool, k: int, dtype, kind: str) -> np.ndarray:
    """A/B of type `kind` (f16, bf16, fp8 or bf8) as a contiguous f32 (W, 16, k) array,
    reused while its registers hold the same bits (strided.converted)."""
    nreg = _ab_plan(gfx12, k, np.dtype(dtype).itemsize)[1]

    def convert() -> np.ndarray:
        x = _ab_words(g, reg, gfx12, k, dtype)
        if kind == "bf16":
            return _bf16_to_f32(x)
        return np.take(_f16_table_f32() if kind == "f16" else _fp8_table_f32(kind), x)

    return strided.converted(g.memo, ("wmma", reg, gfx12, k, kind), g.v[reg:reg + nreg],
                             convert)


@cache
def _f16_table_f32() -> np.ndarray:
    """Every f16 code's value as f32 (numpy's own conversion): a table lookup is about
    twice as fast as numpy's float16 cast."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(f32)


@cache
def _fp8_table_f32(kind: str) -> np.ndarray:
    return fp8_values(kind, True).astype(f32)


@cache
def _d_plan(gfx12: bool) -> strided.Plan:
    """D/C of a 16x16 WMMA, (8 VGPRs, 32 lanes) over the flat (16 x 16) product."""
    lane = np.arange(LANES)
    rows = (np.arange(8)[:, None] + 8 * (lane[None, :] // 16) if gfx12
            else 2 * np.arange(8)[:, None] + lane[None, :] // 16)
    p = strided.plan((rows * 16 + lane[None, :] % 16,))
    assert p is not None
    return p


def _operand_int(g: WaveGroup, reg: int, bits: int, signed: bool) -> np.ndarray:
    """16 8-bit (4 VGPRs) or 4-bit (2 VGPRs) integers per lane in lanes 0-15 ->
    (waves, 16 lanes, 16 values) float64 (exact); value k sits at bits [bits*k % 32] of
    VGPR bits*k // 32."""
    nreg = 16 * bits // 32
    words = np.ascontiguousarray(g.v[reg:reg + nreg, :, :16].transpose(1, 2, 0))  # (W, 16, n)
    if bits == 8:  # little-endian bytes of the (lane, VGPR) copy are the values in order
        return words.view(np.int8 if signed else np.uint8).astype(np.float64)
    nib = words.view(np.uint8)[..., None] >> np.array([0, 4], np.uint8)  # (W, 16, 8, 2)
    vals = (nib & np.uint8(15)).reshape(g.count, 16, 16).astype(np.float64)
    if signed:
        vals = np.where(vals >= 8, vals - 16, vals)
    return vals


def _operand_int_gfx12(g: WaveGroup, reg: int, bits: int, signed: bool, k: int = 16
                       ) -> np.ndarray:
    """gfx12's integer A/B (16 x k): k * bits / 64 VGPRs, lane l holds row / column l % 16
    and K = (k / 2) * (l // 16) + 0..k/2-1 (IREE's gfx12 layout), value j at bits
    [bits*j % 32] of VGPR bits*j // 32 -> (waves, 16, k) int64."""
    half = k // 2
    nreg = half * bits // 32
    words = g.v[reg:reg + nreg].astype(np.int64)  # (nreg, W, 32)
    per = 32 // bits
    shifts = np.arange(per, dtype=np.int64) * bits
    vals = (words[..., None] >> shifts) & ((1 << bits) - 1)  # (nreg, W, 32, per)
    vals = vals.transpose(1, 2, 0, 3).reshape(g.count, 2, 16, half)  # (W, l // 16, m, k)
    vals = vals.transpose(0, 2, 1, 3).reshape(g.count, 16, k)
    if signed:
        vals = np.where(vals >= 1 << (bits - 1), vals - (1 << bits), vals)
    return vals


def run_wmma_int(g: WaveGroup, inst: d.Instruction, bits: int, k: int = 16) -> None:
    """v_wmma_i32_16x16x16_iu8 / iu4: neg[0] / neg[1] say A / B are signed; clamp
    saturates the i32 result (otherwise it wraps). gfx12: its A/B/D layouts, C may be an
    inline constant."""
    f = inst.f
    a_reg, b_reg, c_reg = (f[f"src{k}"] - d.VGPR0 for k in range(3))
    gfx12 = bool(f.get("gfx12_wmma"))
    if gfx12:
        a = _operand_int_gfx12(g, a_reg, bits, bool(f["neg"] & 1), k)
        b = _operand_int_gfx12(g, b_reg, bits, bool(f["neg"] >> 1 & 1), k)
    else:
        a = _operand_int(g, a_reg, bits, bool(f["neg"] & 1))
        b = _operand_int(g, b_reg, bits, bool(f["neg"] >> 1 & 1))
    lane = np.arange(LANES)
    if gfx12:
        rows = np.arange(8)[:, None] + 8 * (lane[None, :] // 16)
    else:
        rows = 2 * np.arange(8)[:, None] + lane[None, :] // 16
    cols = lane[None, :] % 16
    # f64 matmul (BLAS): |sums| < 2**21, exact; numpy's int64 matmul is a slow loop
    prod = np.matmul(a.astype(np.float64, copy=False),
                     b.astype(np.float64, copy=False).transpose(0, 2, 1)).astype(np.int64)
    if f["src2"] < d.VGPR0:
        c_vals = np.asarray(g.vread(f["src2"], inst.literal), u32).view(np.int32).astype(
            np.int64)
    else:
        c_vals = g.v[c_reg:c_reg + 8].view(np.int32)  # (8, W, 32)
    dvals = prod.reshape(g.count, 256)[:, rows * 16 + cols].transpose(1, 0, 2) + c_vals
    if f["clamp"]:
        dvals = np.clip(dvals, -(2 ** 31), 2 ** 31 - 1)
    bits_out = dvals.astype(np.uint32)  # wraps modulo 2**32
    if g.exec_all():
        g.v[f["vdst"]:f["vdst"] + 8] = bits_out
    else:
        for i in range(8):
            g.vwrite(f["vdst"] + i, bits_out[i])


# --- VOPD ----------------------------------------------------------------------------------------
def _vopd_op(name: str) -> Callable | None:
    """fn(src0, vsrc1, old_dst, literal, vcc_mask) -> uint32 result bits."""
    F = lambda x: np.asarray(x, u32).view(f32)  # noqa: E731
    B = lambda x: np.asarray(x, f32).view(u32)  # noqa: E731
    ops = {
        "v_dual_fmac_f32": lambda a, b, c, k, m: B(_fma(F(a), F(b), F(c))),
        "v_dual_fmaak_f32": lambda a, b, c, k, m: B(_fma(F(a), F(b), F(np.uint32(k)))),
        "v_dual_fmamk_f32": lambda a, b, c, k, m: B(_fma(F(a), F(np.uint32(k)), F(b))),
        "v_dual_mul_f32": lambda a, b, c, k, m: B(F(a) * F(b)),
        "v_dual_add_f32": lambda a, b, c, k, m: B(F(a) + F(b)),
        "v_dual_sub_f32": lambda a, b, c, k, m: B(F(a) - F(b)),
        "v_dual_subrev_f32": lambda a, b, c, k, m: B(F(b) - F(a)),
        "v_dual_mul_dx9_zero_f32": lambda a, b, c, k, m: B(np.where(
            (F(a) == 0) | (F(b) == 0), f32(0), F(a) * F(b))),
        "v_dual_mov_b32": lambda a, b, c, k, m: np.asarray(a, u32),
        "v_dual_cndmask_b32": lambda a, b, c, k, m: np.where(m, b, a),
        "v_dual_max_f32": lambda a, b, c, k, m: B(max_num(F(a), F(b))),
        "v_dual_min_f32": lambda a, b, c, k, m: B(min_num(F(a), F(b))),
        "v_dual_add_nc_u32": lambda a, b, c, k, m: np.asarray(a, u32) + np.asarray(b, u32),
        "v_dual_lshlrev_b32": lambda a, b, c, k, m: np.asarray(b, u32) << (
            np.asarray(a, u32) & u32(31)),
        "v_dual_and_b32": lambda a, b, c, k, m: np.asarray(a, u32) & np.asarray(b, u32),
        "v_dual_dot2acc_f32_f16": lambda a, b, c, k, m: B(
            F(c).astype(np.float64)
            + to_type(a, "f16").astype(np.float64) * to_type(b, "f16")
            + to_type(a, "f16", True).astype(np.float64) * to_type(b, "f16", True)),
    }
    return ops.get(name)


def compile_vopd(inst: d.Instruction) -> Callable | None:
    names = inst.name.split(" :: ")
    if len(names) != 2:
        return None
    fx, fy = _vopd_op(names[0]), _vopd_op(names[1])
    if fx is None or fy is None:
        return None
    f = inst.f

    def run(g: WaveGroup) -> None:
        m = g.lane_mask(d.VCC_LO)
        ax, bx = g.vread(f["src0x"], inst.literal), g.v[f["vsrc1x"] - d.VGPR0]
        ay, by = g.vread(f["src0y"], inst.literal), g.v[f["vsrc1y"] - d.VGPR0]
        rx = fx(ax, bx, g.v[f["vdstx"]], inst.literal, m)
        ry = fy(ay, by, g.v[f["vdsty"]], inst.literal, m)
        rx = np.array(np.broadcast_to(rx, (g.count, g.lanes)), dtype=u32)
        ry = np.array(np.broadcast_to(ry, (g.count, g.lanes)), dtype=u32)
        g.vwrite(f["vdstx"], rx)
        g.vwrite(f["vdsty"], ry)

    return run


def compile(inst: d.Instruction) -> Callable[[WaveGroup], None] | None:
    if inst.encoding == "VOPD":
        return compile_vopd(inst)
    if "dpp" in inst.f:  # VOP3P with DPP16/DPP8: not modelled, so refused rather than guessed
        return None
    name = base_name(inst.name)
    if name in _PK:
        t, fn = _PK[name]
        nsrc = fn.__code__.co_argcount if hasattr(fn, "__code__") else 2
        return lambda g: run_packed(g, inst, t, fn, nsrc)
    if name in ("v_dot2_f32_f16", "v_dot2_f32_bf16"):
        return lambda g: run_dot2(g, inst, "bf16" in name)
    if name in ("v_dot4_i32_iu8", "v_dot4_u32_u8", "v_dot8_i32_iu4", "v_dot8_u32_u4"):
        bits = 8 if name.startswith("v_dot4") else 4
        return lambda g: run_dot_int(g, inst, bits, "_i32_" in name)
    if name == "v_fma_mix_f32":
        return lambda g: run_fma_mix(g, inst, "f32")
    if name == "v_fma_mixlo_f16":
        return lambda g: run_fma_mix(g, inst, "lo")
    if name == "v_fma_mixhi_f16":
        return lambda g: run_fma_mix(g, inst, "hi")
    if name in ("v_wmma_i32_16x16x16_iu8", "v_wmma_i32_16x16x16_iu4"):
        return lambda g: run_wmma_int(g, inst, 8 if name.endswith("iu8") else 4)
    if name == "v_wmma_i32_16x16x64_iu8":  # gfx1250
        return lambda g: run_wmma_int(g, inst, 8, 64)
    if name.startswith("v_wmma_") and "iu" not in name:
        return lambda g: run_wmma(g, inst, name)
    return None
