"""Vector ALU semantics (VOP1, VOP2, VOPC, VOP3, VOP3P, VOPD) on wide wave state.

Floating-point warnings (overflow, invalid, divide by zero) are silenced once per dispatch
by the executor: NaN and infinity are ordinary register values here.

Ordinary operations are data: `OPS[name] = (out type, in types, function)`; the function
gets numpy arrays already converted to the input types (float32, int32, float16 promoted to
float32, ...) and returns the result, which is converted back to register bits and written
for active lanes. Operations that touch lane masks, carries, other lanes or several
registers are functions of their own in `SPECIAL`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from ground.errors import IllegalInstruction
from ground.status import HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup

u32, i32, f32, u64, i64, f64 = np.uint32, np.int32, np.float32, np.uint64, np.int64, np.float64
M32 = np.uint64(0xFFFFFFFF)


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.uint32).view(np.float32)


def _fused_sum(a, b, c, fraction_bits: int, min_exponent: int) -> np.ndarray:
    """a * b + c in f64 such that its conversion to a float format of `fraction_bits`
    (f32: 23, f16: 10) whose normals start at 2**min_exponent rounds the exact value once.

    The product of two f32 (or f16) values is exact in f64; the f64 sum is rounded, and the
    conversion rounds again. The two roundings differ from one only where the f64 sum lands
    exactly on a midpoint of the narrow format while the exact sum lies off it
    (fma(1 + 2**-23, 3, -2**-80) in f32: the midpoint 3 + 1.5 * 2**-22 ties to even, up,
    where the exact value is below it). The lanes that can be such a case are found from
    the sum's bits alone (a midpoint's low bits, or a nonzero sum in the narrow format's
    subnormal range, where the midpoints sit elsewhere; an f64 sum of 0 is exact), so
    ordinary data pays two passes; those lanes take the sum rounded to odd instead: the
    exact error (TwoSum) moves an even sum one f64 ulp toward the exact value, to a
    neighbour no midpoint can be."""
    p = np.multiply(a, b, dtype=f64)
    if isinstance(p, np.ndarray) and p.shape == np.broadcast_shapes(p.shape, np.shape(c)):
        s = np.add(p, c, out=p)  # in place: one f64 array, not two
    else:
        s = np.asarray(np.add(p, c, dtype=f64))
    shape = s.shape
    s = s.reshape(-1) if s.ndim == 0 else s  # (a view: a ufunc's result is contiguous)
    bits = s.view(u64)
    drop = 52 - fraction_bits
    # two tests, in two scratch arrays (allocations cost as much as the passes here)
    scratch = np.left_shift(bits, u64(64 - drop))  # the dropped bits, at the top
    suspect = np.equal(scratch, u64(1 << 63))  # a midpoint's: 1 then zeros
    np.bitwise_and(bits, u64(0x7FF << 52), out=scratch)
    np.subtract(scratch, u64(1 << 52), out=scratch)  # exponent - 1: 0 (f64 subnormals) wraps
    suspect |= np.less(scratch, u64((1023 + min_exponent - 1) << 52))
    if suspect.any():
        where = np.nonzero(suspect)
        x, y, z = (np.broadcast_to(np.asarray(v, f64), s.shape)[where] for v in (a, b, c))
        prod, total = x * y, s[where]
        back = total - prod
        err = (prod - (total - back)) + (z - back)
        odd = (err != 0) & np.isfinite(total) & (bits[where] & u64(1) == 0)
        away = (err > 0) == (total > 0)  # toward the exact value: away from zero or toward
        step = np.where(away, u64(1), u64(0xFFFFFFFFFFFFFFFF))
        bits[where] += np.where(odd, step, u64(0))
    return s.reshape(shape)


def _fma(a, b, c):
    """An f32 FMA, rounded once (the hardware's fused multiply-add)."""
    return _fused_sum(a, b, c, 23, -126).astype(f32)


def _fma16(a, b, c):
    """An f16 FMA, rounded once: the f64 result straight to f16 (as f32 values, which hold
    every f16 exactly). Through f32 it would be rounded twice, and f32's 24 bits are too
    few for a fused result to survive that (v_pk_fmac_f16 was 1 ulp off for some inputs)."""
    return _fused_sum(a, b, c, 10, -14).astype(np.float16).astype(f32)


def _minmax_f(fn):  # IEEE minNum/maxNum: a NaN operand yields the other one
    def op(a, b):
        return fn(a, b)
    return op


def _fract(x):
    return (x - np.floor(x)).astype(f32)


def _bfe_u(x, off, width):
    off = np.asarray(off, u32) & u32(31)
    width = np.asarray(width, u32) & u32(31)
    mask = ((np.uint64(1) << width.astype(u64)) - np.uint64(1)).astype(u32)
    return (np.asarray(x, u32) >> off) & mask


def _bfe_i(x, off, width):
    off = np.asarray(off, u32) & u32(31)
    width = (np.asarray(width, u32) & u32(31)).astype(i64)
    v = (np.asarray(x, u32).astype(i64) >> off.astype(i64)) & ((np.int64(1) << width) - 1)
    sign = np.where(width > 0, np.int64(1) << np.maximum(width - 1, 0), 0)
    return np.where(width > 0, (v ^ sign) - sign, 0).astype(i64).astype(u32)


def min_num(a, b):
    """AMD's v_min_* (IEEE minNum, gfx12's minimumNumber): a NaN operand gives the other;
    -0 is below +0 (the ISA guides' pseudo-code compares with -0 < +0)."""
    r = np.fmin(a, b)
    zero = (a == 0) & (b == 0)
    return np.where(zero, np.where(np.signbit(a), a, b), r) if np.any(zero) else r


def max_num(a, b):
    """AMD's v_max_*: a NaN operand gives the other; +0 is above -0."""
    r = np.fmax(a, b)
    zero = (a == 0) & (b == 0)
    return np.where(zero, np.where(np.signbit(a), b, a), r) if np.any(zero) else r


def minimum(a, b):
    """IEEE 754-2019 minimum (v_minimum_*, s_minimum_*): a NaN propagates, -0 < +0."""
    r = np.minimum(a, b)
    zero = (a == 0) & (b == 0)
    return np.where(zero, np.where(np.signbit(a), a, b), r)


def maximum(a, b):
    """IEEE 754-2019 maximum: a NaN propagates, +0 > -0."""
    r = np.maximum(a, b)
    zero = (a == 0) & (b == 0)
    return np.where(zero, np.where(np.signbit(a), b, a), r)


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _u24(x):
    return np.asarray(x, u32) & u32(0xFFFFFF)


def _i24(x):
    v = (np.asarray(x, u32) & u32(0xFFFFFF)).astype(i64)
    return np.where(v >= 0x800000, v - 0x1000000, v)


def _cvt_i32(x):  # float -> int32, saturating, NaN -> 0
    x = np.nan_to_num(np.asarray(x, f64), nan=0.0)
    return np.clip(np.trunc(x), -2147483648, 2147483647).astype(i64).astype(u32)


def _cvt_u32(x):
    x = np.nan_to_num(np.asarray(x, f64), nan=0.0)
    return np.clip(np.trunc(x), 0, 4294967295).astype(u64).astype(u32)


def _ldexp(x, e):
    return np.ldexp(np.asarray(x, f32), np.clip(np.asarray(e, i64), -1000, 1000).astype(i32))


def _frexp_mant(x):
    m, _ = np.frexp(x)
    return np.where(np.isfinite(x), m, x).astype(f32)


def _frexp_exp(x):
    _, e = np.frexp(x)
    return np.where(np.isfinite(x), e, 0).astype(i32).astype(u32)


def _clz(x):
    x = np.asarray(x, u32)
    out = np.full(x.shape, 0xFFFFFFFF, dtype=u32)
    nz = x != 0
    out[nz] = (31 - np.floor(np.log2(x[nz].astype(f64)))).astype(u32)
    return out


def _ctz(x):
    x = np.asarray(x, u32)
    low = x & (~x + u32(1))
    out = np.full(x.shape, 0xFFFFFFFF, dtype=u32)
    nz = x != 0
    out[nz] = np.log2(low[nz].astype(f64)).astype(u32)
    return out


def _bfrev(x):
    x = np.asarray(x, u32)  # swap halves, bytes, nibbles, pairs, bits (any shape, 0-d too)
    for shift, mask in ((16, 0x0000FFFF), (8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333),
                        (1, 0x55555555)):
        s_, m = u32(shift), u32(mask)
        x = ((x >> s_) & m) | ((x & m) << s_)
    return x


def _perm_plan(sel: int) -> tuple[int, list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """v_perm_b32 with one selector for every lane, as word operations: (constant bits,
    [(source, left shift, mask)] for picked bytes, [(source, sign bit, byte mask)] for sign
    fills); source 0 is S0, 1 is S1. Bytes 0-3 of the pool {S0, S1} are S1's."""
    const = 0
    moves: dict[tuple[int, int], int] = {}
    signs = []
    for k in range(4):
        s = (sel >> 8 * k) & 0xFF
        byte_mask = 0xFF << 8 * k
        if s < 8:
            key = (1 if s < 4 else 0, 8 * k - 8 * (s & 3))
            moves[key] = moves.get(key, 0) | byte_mask
        elif s < 12:  # sign of S1[15], S1[31], S0[15], S0[31]
            signs.append((1 if s < 10 else 0, 15 if s % 2 == 0 else 31, byte_mask))
        elif s > 12:
            const |= byte_mask
    return const, [(src, shift, mask) for (src, shift), mask in moves.items()], signs


_PERM_PLANS: dict[int, tuple] = {}


def _perm_uniform(s0, s1, sel: int, shape: tuple[int, ...]):
    plan = _PERM_PLANS.get(sel)
    if plan is None:
        plan = _PERM_PLANS[sel] = _perm_plan(sel)
    const, moves, signs = plan
    srcs = (s0, s1)
    out = None
    for src, shift, mask in moves:
        x = srcs[src]
        x = (x << u32(shift)) if shift > 0 else (x >> u32(-shift)) if shift < 0 else x
        x = x & u32(mask)
        out = x if out is None else out | x
    for src, bit, mask in signs:
        x = ((srcs[src] >> u32(bit)) & u32(1)) * u32(mask)
        out = x if out is None else out | x
    if out is None:
        return np.full(shape, const, u32)
    if const:
        out = out | u32(const)
    return np.broadcast_to(out, shape) if out.shape != shape else out


def _perm(s0, s1, sel):
    """v_perm_b32: each byte of sel picks a byte of {s0, s1}, a sign fill, 0x00 or 0xFF."""
    s0, s1, sel = (np.asarray(v, u32) for v in (s0, s1, sel))
    if sel.size and (sel.ndim == 0 or not (sel != sel.flat[0]).any()):
        shape = np.broadcast_shapes(s0.shape, s1.shape, sel.shape)
        return _perm_uniform(s0, s1, int(sel.flat[0]), shape)  # a literal or SGPR selector
    return _perm_general(s0, s1, sel)


def _perm_general(s0, s1, sel):
    shape = np.broadcast_shapes(s0.shape, s1.shape, sel.shape)
    a = np.broadcast_to(s0, shape)
    b = np.broadcast_to(s1, shape)
    pool = (a.astype(u64) << np.uint64(32)) | b.astype(u64)
    sel = np.broadcast_to(sel, shape)
    signs = [(b >> u32(15)) & u32(1), (b >> u32(31)) & u32(1), (a >> u32(15)) & u32(1),
             (a >> u32(31)) & u32(1)]
    out = np.zeros(shape, dtype=u32)
    for k in range(4):
        s = (sel >> u32(8 * k)) & u32(0xFF)
        shift = np.minimum(s, 7).astype(u64) * np.uint64(8)
        byte = ((pool >> shift) & np.uint64(0xFF)).astype(u32)
        for j in range(4):
            byte = np.where(s == 8 + j, signs[j] * u32(0xFF), byte)
        byte = np.where(s == 12, u32(0), np.where(s > 12, u32(0xFF), byte))
        out |= byte << u32(8 * k)
    return out


def _mul_zero(a, b):  # legacy multiply: 0 * anything (inf, NaN included) is 0
    return np.where((a == 0) | (b == 0), np.float32(0), a * b)


def _bfm(a, b):
    width = np.asarray(a & u32(31), u64)
    return (((np.uint64(1) << width) - np.uint64(1)) << np.asarray(b & u32(31), u64)).astype(u32)


def _align(a, b, shift):
    return (((np.asarray(a, u64) << u64(32)) | np.asarray(b, u64)) >> shift).astype(u32)


def _mul_hi(a, b, t):
    product = np.asarray(a).astype(t) * np.asarray(b).astype(t)
    return (product >> t(32)).astype(u32)


def rtz_f16(x) -> np.ndarray:
    """f32 -> f16 bits (as u32) rounded toward zero: round to nearest, then step back one
    f16 ulp where that moved away from zero (an overflow to infinity becomes the largest
    finite value)."""
    x = np.asarray(x, f32)
    h = np.atleast_1d(x.astype(np.float16))
    away = np.atleast_1d(np.isfinite(x) & (np.abs(h.astype(f32)) > np.abs(x)))
    bits = h.view(np.uint16).copy()
    bits[away] -= np.uint16(1)
    return bits.astype(u32).reshape(np.shape(x))


def _cvt_pk_rtz(a, b):
    return rtz_f16(a) | (rtz_f16(b) << u32(16))


def _pack_f16(a, b):
    return _cvt_pk_rtz(a, b)


def _pack16(lo, hi):
    lo = np.asarray(lo).astype(np.int64).astype(u32) & u32(0xFFFF)
    return lo | ((np.asarray(hi).astype(np.int64).astype(u32) & u32(0xFFFF)) << u32(16))


def _pack8(lo, hi):
    lo = np.asarray(lo).astype(np.int64).astype(u32) & u32(0xFF)
    return lo | ((np.asarray(hi).astype(np.int64).astype(u32) & u32(0xFF)) << u32(8))


def _snorm(x):  # float -> int16 snorm: clamp to [-1, 1], scale by 32767 (in f32), round
    x = np.nan_to_num(np.asarray(x, f32), nan=0.0)
    return np.rint(np.clip(x, f32(-1), f32(1)) * f32(32767)).astype(np.int64)


def _unorm(x):
    x = np.nan_to_num(np.asarray(x, f32), nan=0.0)
    return np.rint(np.clip(x, f32(0), f32(1)) * f32(65535)).astype(np.int64)


def _sat_int(x, lo, hi):  # float -> integer, truncating, saturating, NaN -> 0
    x = np.nan_to_num(np.asarray(x, f64), nan=0.0)
    return np.clip(np.trunc(x), lo, hi).astype(np.int64)


def _pk_u8(a, b, c):
    """v_cvt_pk_u8_f32: byte S1[1:0] of S2 replaced by S0 rounded and saturated to u8."""
    shift = (np.asarray(b, u32) & u32(3)) * u32(8)
    byte = np.rint(np.clip(np.nan_to_num(np.asarray(a, f64), nan=0.0), 0, 255)).astype(
        np.int64).astype(u32)
    return (np.asarray(c, u32) & ~(u32(0xFF) << shift)) | (byte << shift)


def _sad_bytes(a, b, c, bits, masked=False):
    """Sum of absolute differences of the 8- or 16-bit fields of a and b, plus c
    (v_msad_u8: fields where b is 0 count nothing)."""
    a, b = np.asarray(a, u32).astype(np.int64), np.asarray(b, u32).astype(np.int64)
    mask = (1 << bits) - 1
    total = np.asarray(c, u32).astype(np.int64)
    for shift in range(0, 32, bits):
        diff = np.abs(((a >> shift) & mask) - ((b >> shift) & mask))
        if masked:
            diff = np.where(((b >> shift) & mask) == 0, 0, diff)
        total = total + diff
    return total.astype(u32)


def _sad_u32(a, b, c):
    a, b = np.asarray(a, i64), np.asarray(b, i64)
    return (np.abs(a - b) + np.asarray(c, i64)).astype(u32)


def _two_over_pi_bits(bits: int) -> int:
    """floor(2/pi * 2**bits), from pi by Machin's formula in integers (16 guard bits)."""
    one = 1 << (bits + 16)

    def arctan_inv(x: int) -> int:  # arctan(1/x) * one
        total = term = one // x
        k, x2 = 1, x * x
        while term:
            term //= x2
            total += term // (2 * k + 1) if k % 2 == 0 else -(term // (2 * k + 1))
            k += 1
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    return (2 * one * one // pi) >> 16


@lru_cache(maxsize=1)
def _trig_preop_segments() -> np.ndarray:
    """The 53-bit segment of 2/pi's 1201 fraction bits at each left shift (0 past the end)."""
    frac = _two_over_pi_bits(1201)
    mask = (1 << 53) - 1
    return np.array([float(((frac << s) >> 1148) & mask) for s in range(32 * 53 + 1024)],
                    dtype=f64)


def _trig_preop(a, seg):
    """v_trig_preop_f64 (RDNA3 ISA): 53 bits of 2/pi starting at bit 53 * S1[4:0] (further
    along by the exponent of S0 beyond 1077), scaled to their place: 2**(-53 - shift),
    2**128 more for exponents >= 1968. Rounded toward zero by construction."""
    exp = ((np.asarray(a, f64).view(u64) >> u64(52)) & u64(0x7FF)).astype(np.int64)
    shift = (np.asarray(seg, u32) & u32(31)).astype(np.int64) * 53 + np.maximum(exp - 1077, 0)
    scale = -53 - shift + np.where(exp >= 1968, 128, 0)
    return np.ldexp(_trig_preop_segments()[shift], scale.astype(np.int32))


def _lerp_u8(a, b, c):
    """v_lerp_u8: per byte, (a + b + the low bit of c's byte) >> 1."""
    a, b, c = (np.asarray(x, u32).astype(np.int64) for x in (a, b, c))
    out = np.zeros(np.broadcast(a, b, c).shape, np.int64)
    for shift in range(0, 32, 8):
        byte = (((a >> shift) & 255) + ((b >> shift) & 255) + ((c >> shift) & 1)) >> 1
        out |= byte << shift
    return out.astype(u32)


def _qsad(a, b, c, masked):
    """v_qsad_pk_u16_u8 / v_mqsad_pk_u16_u8: four 16-bit SADs of S1 against the byte
    windows of the 64-bit S0 at byte 0..3, each plus its 16 bits of S2 (16 bits kept)."""
    a, c = np.asarray(a, u64), np.asarray(c, u64)
    out = np.zeros(np.broadcast(a, b, c).shape, u64)
    for i in range(4):
        window = ((a >> u64(8 * i)) & M32).astype(u32)
        acc = ((c >> u64(16 * i)) & u64(0xFFFF)).astype(u32)
        sad = _sad_bytes(window, b, acc, 8, masked).astype(u64) & u64(0xFFFF)
        out |= sad << u64(16 * i)
    return out


def _cube(x, y, z, what: str):
    """v_cubeid/sc/tc/ma_f32: the major axis of (x, y, z) (z, then y, then x on ties), its
    face id, the face's s and t coordinates, and twice the major coordinate."""
    ax, ay, az = np.abs(x), np.abs(y), np.abs(z)
    zmajor = (az >= ax) & (az >= ay)
    ymajor = ~zmajor & (ay >= ax)
    if what == "id":
        return np.where(zmajor, np.where(z < 0, 5.0, 4.0), np.where(
            ymajor, np.where(y < 0, 3.0, 2.0), np.where(x < 0, 1.0, 0.0))).astype(f32)
    if what == "sc":
        return np.where(zmajor, np.where(z < 0, -x, x), np.where(
            ymajor, x, np.where(x < 0, z, -z)))
    if what == "tc":
        return np.where(zmajor, -y, np.where(ymajor, np.where(y < 0, -z, z), -y))
    return 2 * np.where(zmajor, z, np.where(ymajor, y, x))


_FLOAT_OPS: dict[str, tuple[str, tuple[str, ...], Callable]] = {}
for _t in ("f32", "f16"):
    _FLOAT_OPS.update({
        f"v_add_{_t}": (_t, (_t, _t), lambda a, b: a + b),
        f"v_sub_{_t}": (_t, (_t, _t), lambda a, b: a - b),
        f"v_subrev_{_t}": (_t, (_t, _t), lambda a, b: b - a),
        f"v_mul_{_t}": (_t, (_t, _t), lambda a, b: a * b),
        f"v_min_{_t}": (_t, (_t, _t), min_num),
        f"v_max_{_t}": (_t, (_t, _t), max_num),
        f"v_fma_{_t}": (_t, (_t, _t, _t), _fma16 if _t == "f16" else _fma),
        f"v_min3_{_t}": (_t, (_t, _t, _t), lambda a, b, c: min_num(min_num(a, b), c)),
        f"v_max3_{_t}": (_t, (_t, _t, _t), lambda a, b, c: max_num(max_num(a, b), c)),
        f"v_med3_{_t}": (_t, (_t, _t, _t), _med3),
        # gfx12's NaN-propagating forms (llvm.minimum/maximum)
        f"v_minimum_{_t}": (_t, (_t, _t), minimum),
        f"v_maximum_{_t}": (_t, (_t, _t), maximum),
        f"v_minimum3_{_t}": (_t, (_t, _t, _t), lambda a, b, c: minimum(minimum(a, b), c)),
        f"v_maximum3_{_t}": (_t, (_t, _t, _t), lambda a, b, c: maximum(maximum(a, b), c)),
        f"v_minimummaximum_{_t}": (_t, (_t, _t, _t),
                                   lambda a, b, c: maximum(minimum(a, b), c)),
        f"v_maximumminimum_{_t}": (_t, (_t, _t, _t),
                                   lambda a, b, c: minimum(maximum(a, b), c)),
        f"v_fract_{_t}": (_t, (_t,), _fract),
        f"v_trunc_{_t}": (_t, (_t,), np.trunc),
        f"v_ceil_{_t}": (_t, (_t,), np.ceil),
        f"v_floor_{_t}": (_t, (_t,), np.floor),
        f"v_rndne_{_t}": (_t, (_t,), np.rint),
        f"v_exp_{_t}": (_t, (_t,), np.exp2),
        f"v_log_{_t}": (_t, (_t,), np.log2),
        f"v_rcp_{_t}": (_t, (_t,), lambda a: np.float32(1.0) / a),
        f"v_rsq_{_t}": (_t, (_t,), lambda a: np.float32(1.0) / np.sqrt(a)),
        f"v_sqrt_{_t}": (_t, (_t,), np.sqrt),
        f"v_sin_{_t}": (_t, (_t,), lambda a: np.sin(a * np.float32(2 * np.pi))),
        f"v_cos_{_t}": (_t, (_t,), lambda a: np.cos(a * np.float32(2 * np.pi))),
        f"v_ldexp_{_t}": (_t, (_t, "i32"), _ldexp),
        f"v_frexp_mant_{_t}": (_t, (_t,), _frexp_mant),
    })

OPS: dict[str, tuple[str, tuple[str, ...], Callable]] = {
    **_FLOAT_OPS,
    "v_mov_b32": ("u32", ("u32",), lambda a: a),
    "v_rcp_iflag_f32": ("f32", ("f32",), lambda a: np.float32(1.0) / a),
    "v_mul_legacy_f32": ("f32", ("f32", "f32"), _mul_zero),
    "v_mul_dx9_zero_f32": ("f32", ("f32", "f32"), _mul_zero),
    "v_frexp_exp_i32_f32": ("u32", ("f32",), _frexp_exp),
    "v_not_b32": ("u32", ("u32",), lambda a: ~a),
    "v_bfrev_b32": ("u32", ("u32",), _bfrev),
    "v_clz_i32_u32": ("u32", ("u32",), _clz),
    "v_ctz_i32_b32": ("u32", ("u32",), _ctz),
    "v_cls_i32": ("u32", ("i32",), lambda a: _clz(np.where(a < 0, ~a, a).astype(u32))),
    "v_cvt_f32_i32": ("f32", ("i32",), lambda a: a.astype(f32)),
    "v_cvt_f32_u32": ("f32", ("u32",), lambda a: a.astype(f32)),
    "v_cvt_i32_f32": ("u32", ("f32",), _cvt_i32),
    "v_cvt_u32_f32": ("u32", ("f32",), _cvt_u32),
    "v_cvt_rpi_i32_f32": ("u32", ("f32",), lambda a: _cvt_i32(np.floor(a + np.float32(0.5)))),
    "v_cvt_flr_i32_f32": ("u32", ("f32",), lambda a: _cvt_i32(np.floor(a))),
    "v_cvt_f16_f32": ("f16", ("f32",), lambda a: a),
    "v_cvt_f32_f16": ("f32", ("f16",), lambda a: a),
    "v_cvt_f32_f64": ("f32", ("f64",), lambda a: a.astype(f32)),
    "v_cvt_f64_f32": ("f64", ("f32",), lambda a: a.astype(f64)),
    "v_cvt_f64_i32": ("f64", ("i32",), lambda a: a.astype(f64)),
    "v_cvt_f64_u32": ("f64", ("u32",), lambda a: a.astype(f64)),
    "v_cvt_i32_f64": ("u32", ("f64",), _cvt_i32),
    "v_cvt_u32_f64": ("u32", ("f64",), _cvt_u32),
    "v_cvt_f32_ubyte0": ("f32", ("u32",), lambda a: (a & u32(0xFF)).astype(f32)),
    "v_cvt_f32_ubyte1": ("f32", ("u32",), lambda a: ((a >> u32(8)) & u32(0xFF)).astype(f32)),
    "v_cvt_f32_ubyte2": ("f32", ("u32",), lambda a: ((a >> u32(16)) & u32(0xFF)).astype(f32)),
    "v_cvt_f32_ubyte3": ("f32", ("u32",), lambda a: (a >> u32(24)).astype(f32)),
    "v_cvt_i32_i16": ("u32", ("i16",), lambda a: a.astype(i32).astype(u32)),
    "v_cvt_u32_u16": ("u32", ("u16",), lambda a: a.astype(u32)),
    "v_cvt_f16_i16": ("f16", ("i16",), lambda a: a.astype(f32)),
    "v_cvt_f16_u16": ("f16", ("u16",), lambda a: a.astype(f32)),
    "v_cvt_i16_f16": ("u16", ("f16",), lambda a: _cvt_i32(a) & u32(0xFFFF)),
    "v_cvt_u16_f16": ("u16", ("f16",), lambda a: _cvt_u32(a) & u32(0xFFFF)),
    "v_cvt_pk_rtz_f16_f32": ("u32", ("f32", "f32"), _cvt_pk_rtz),
    "v_pack_b32_f16": ("u32", ("f16", "f16"), _pack_f16),
    "v_add_f64": ("f64", ("f64", "f64"), lambda a, b: a + b),
    "v_mul_f64": ("f64", ("f64", "f64"), lambda a, b: a * b),
    "v_fma_f64": ("f64", ("f64", "f64", "f64"), lambda a, b, c: a * b + c),
    "v_min_f64": ("f64", ("f64", "f64"), min_num),
    "v_max_f64": ("f64", ("f64", "f64"), max_num),
    "v_minimum_f64": ("f64", ("f64", "f64"), minimum),
    "v_maximum_f64": ("f64", ("f64", "f64"), maximum),
    "v_rcp_f64": ("f64", ("f64",), lambda a: 1.0 / a),
    "v_rsq_f64": ("f64", ("f64",), lambda a: 1.0 / np.sqrt(a)),
    "v_sqrt_f64": ("f64", ("f64",), np.sqrt),
    "v_ldexp_f64": ("f64", ("f64", "i32"), lambda a, e: np.ldexp(a, np.asarray(e, i32))),
    "v_trig_preop_f64": ("f64", ("f64", "u32"), _trig_preop),
    "v_lerp_u8": ("u32", ("u32", "u32", "u32"), _lerp_u8),
    "v_sad_hi_u8": ("u32", ("u32", "u32", "u32"),
                    lambda a, b, c: (_sad_bytes(a, b, 0, 8) << u32(16)) + np.asarray(c, u32)),
    "v_qsad_pk_u16_u8": ("u64", ("u64", "u32", "u64"), lambda a, b, c: _qsad(a, b, c, False)),
    "v_mqsad_pk_u16_u8": ("u64", ("u64", "u32", "u64"), lambda a, b, c: _qsad(a, b, c, True)),
    "v_cubeid_f32": ("f32", ("f32", "f32", "f32"), lambda x, y, z: _cube(x, y, z, "id")),
    "v_cubesc_f32": ("f32", ("f32", "f32", "f32"), lambda x, y, z: _cube(x, y, z, "sc")),
    "v_cubetc_f32": ("f32", ("f32", "f32", "f32"), lambda x, y, z: _cube(x, y, z, "tc")),
    "v_cubema_f32": ("f32", ("f32", "f32", "f32"), lambda x, y, z: _cube(x, y, z, "ma")),
    "v_trunc_f64": ("f64", ("f64",), np.trunc),
    "v_floor_f64": ("f64", ("f64",), np.floor),
    "v_ceil_f64": ("f64", ("f64",), np.ceil),
    "v_rndne_f64": ("f64", ("f64",), np.rint),
    "v_frexp_mant_f64": ("f64", ("f64",), lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a)),
    "v_frexp_exp_i32_f64": ("u32", ("f64",), _frexp_exp),
    "v_cvt_floor_i32_f32": ("u32", ("f32",), lambda a: _cvt_i32(np.floor(a))),
    "v_cvt_nearest_i32_f32": ("u32", ("f32",), lambda a: _cvt_i32(np.floor(a + np.float32(0.5)))),
    "v_fma_dx9_zero_f32": ("f32", ("f32", "f32", "f32"),
                           lambda a, b, c: np.where((a == 0) | (b == 0), c, _fma(a, b, c))),
    "v_mad_u16": ("u16", ("u16", "u16", "u16"), lambda a, b, c: a * b + c),
    "v_min3_i16": ("i16", ("i16", "i16", "i16"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_min3_u16": ("u16", ("u16", "u16", "u16"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_sad_u16": ("u32", ("u32", "u32", "u32"), lambda a, b, c: _sad_bytes(a, b, c, 16)),
    "v_sad_u8": ("u32", ("u32", "u32", "u32"), lambda a, b, c: _sad_bytes(a, b, c, 8)),
    "v_fract_f64": ("f64", ("f64",), lambda a: a - np.floor(a)),
    "v_and_b32": ("u32", ("u32", "u32"), lambda a, b: a & b),
    "v_or_b32": ("u32", ("u32", "u32"), lambda a, b: a | b),
    "v_xor_b32": ("u32", ("u32", "u32"), lambda a, b: a ^ b),
    "v_xnor_b32": ("u32", ("u32", "u32"), lambda a, b: ~(a ^ b)),
    "v_lshlrev_b32": ("u32", ("u32", "u32"), lambda a, b: b << (a & u32(31))),
    "v_lshrrev_b32": ("u32", ("u32", "u32"), lambda a, b: b >> (a & u32(31))),
    "v_ashrrev_i32": ("u32", ("u32", "i32"),
                      lambda a, b: (b >> (a & u32(31)).astype(i32)).astype(u32)),
    "v_lshlrev_b64": ("u64", ("u32", "u64"), lambda a, b: b << (np.asarray(a, u64) & u64(63))),
    "v_lshrrev_b64": ("u64", ("u32", "u64"), lambda a, b: b >> (np.asarray(a, u64) & u64(63))),
    "v_ashrrev_i64": ("u64", ("u32", "i64"),
                      lambda a, b: (b >> (np.asarray(a, i64) & 63)).astype(u64)),
    "v_add_nc_u32": ("u32", ("u32", "u32"), lambda a, b: a + b),
    "v_add_nc_u64": ("u64", ("u64", "u64"), lambda a, b: a + b),  # gfx1250
    "v_mov_b64": ("u64", ("u64",), lambda a: a),  # gfx940, gfx1250
    "v_sub_nc_u64": ("u64", ("u64", "u64"), lambda a, b: a - b),
    "v_mul_u64": ("u64", ("u64", "u64"), lambda a, b: a * b),
    "v_sub_nc_u32": ("u32", ("u32", "u32"), lambda a, b: a - b),
    "v_subrev_nc_u32": ("u32", ("u32", "u32"), lambda a, b: b - a),
    "v_add3_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: a + b + c),
    "v_lshl_or_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a << (b & u32(31))) | c),
    "v_lshl_add_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a << (b & u32(31))) + c),
    # gfx940/gfx1250: D.u64 = (S0.u64 << S1[2:0]) + S2.u64
    "v_lshl_add_u64": ("u64", ("u64", "u32", "u64"),
                       lambda a, b, c: (a << (np.asarray(b, u64) & u64(7))) + c),
    "v_add_lshl_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a + b) << (c & u32(31))),
    "v_and_or_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a & b) | c),
    "v_or3_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: a | b | c),
    "v_xor3_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: a ^ b ^ c),
    "v_xad_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a ^ b) + c),
    "v_bfe_u32": ("u32", ("u32", "u32", "u32"), _bfe_u),
    "v_bfe_i32": ("u32", ("u32", "u32", "u32"), _bfe_i),
    "v_bfi_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a & b) | (~a & c)),
    "v_bfm_b32": ("u32", ("u32", "u32"), _bfm),
    "v_alignbit_b32": ("u32", ("u32", "u32", "u32"),
                       lambda a, b, c: _align(a, b, np.asarray(c & u32(31), u64))),
    "v_alignbyte_b32": ("u32", ("u32", "u32", "u32"),
                        lambda a, b, c: _align(a, b, np.asarray(c & u32(3), u64) * u64(8))),
    "v_perm_b32": ("u32", ("u32", "u32", "u32"), _perm),
    "v_min_i32": ("u32", ("i32", "i32"), lambda a, b: np.minimum(a, b).astype(u32)),
    "v_max_i32": ("u32", ("i32", "i32"), lambda a, b: np.maximum(a, b).astype(u32)),
    "v_min_u32": ("u32", ("u32", "u32"), np.minimum),
    "v_max_u32": ("u32", ("u32", "u32"), np.maximum),
    "v_min3_i32": ("u32", ("i32", "i32", "i32"),
                   lambda a, b, c: np.minimum(np.minimum(a, b), c).astype(u32)),
    "v_max3_i32": ("u32", ("i32", "i32", "i32"),
                   lambda a, b, c: np.maximum(np.maximum(a, b), c).astype(u32)),
    "v_med3_i32": ("u32", ("i32", "i32", "i32"), lambda a, b, c: _med3(a, b, c).astype(u32)),
    "v_min3_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_med3_u32": ("u32", ("u32", "u32", "u32"), _med3),
    "v_mul_lo_u32": ("u32", ("u32", "u32"), lambda a, b: a * b),
    "v_mul_hi_u32": ("u32", ("u32", "u32"), lambda a, b: _mul_hi(a, b, u64)),
    "v_mul_hi_i32": ("u32", ("i32", "i32"), lambda a, b: _mul_hi(a, b, i64)),
    "v_mul_u32_u24": ("u32", ("u32", "u32"), lambda a, b: _u24(a) * _u24(b)),
    "v_mul_hi_u32_u24": ("u32", ("u32", "u32"), lambda a, b: _mul_hi(_u24(a), _u24(b), u64)),
    "v_mul_i32_i24": ("u32", ("u32", "u32"), lambda a, b: (_i24(a) * _i24(b)).astype(u32)),
    "v_mul_hi_i32_i24": ("u32", ("u32", "u32"), lambda a, b: _mul_hi(_i24(a), _i24(b), i64)),
    "v_mad_u32_u24": ("u32", ("u32", "u32", "u32"), lambda a, b, c: _u24(a) * _u24(b) + c),
    "v_mad_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: a * b + c),  # gfx1250
    "v_mad_i32_i24": ("u32", ("u32", "u32", "u32"),
                      lambda a, b, c: (_i24(a) * _i24(b) + np.asarray(c, i64)).astype(u32)),
    "v_mad_u32_u16": ("u32", ("u16", "u16", "u32"),
                      lambda a, b, c: a.astype(u32) * b.astype(u32) + c),
    "v_sad_u32": ("u32", ("u32", "u32", "u32"), _sad_u32),
    "v_maxmin_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: min_num(max_num(a, b), c)),
    "v_minmax_f32": ("f32", ("f32", "f32", "f32"), lambda a, b, c: max_num(min_num(a, b), c)),
    "v_maxmin_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: min_num(max_num(a, b), c)),
    "v_minmax_f16": ("f16", ("f16", "f16", "f16"), lambda a, b, c: max_num(min_num(a, b), c)),
    "v_maxmin_u32": ("u32", ("u32", "u32", "u32"),
                     lambda a, b, c: np.minimum(np.maximum(a, b), c)),
    "v_minmax_u32": ("u32", ("u32", "u32", "u32"),
                     lambda a, b, c: np.maximum(np.minimum(a, b), c)),
    "v_maxmin_i32": ("i32", ("i32", "i32", "i32"),
                     lambda a, b, c: np.minimum(np.maximum(a, b), c)),
    "v_minmax_i32": ("i32", ("i32", "i32", "i32"),
                     lambda a, b, c: np.maximum(np.minimum(a, b), c)),
    "v_max3_i16": ("i16", ("i16", "i16", "i16"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_max3_u16": ("u16", ("u16", "u16", "u16"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_med3_i16": ("i16", ("i16", "i16", "i16"), _med3),
    "v_med3_u16": ("u16", ("u16", "u16", "u16"), _med3),
    "v_mad_i16": ("i16", ("i16", "i16", "i16"), lambda a, b, c: a * b + c),
    "v_mad_i32_i16": ("u32", ("i16", "i16", "i32"),
                      lambda a, b, c: (a.astype(i64) * b + c).astype(u32)),
    "v_mov_b16": ("u16", ("u16",), lambda a: a),
    "v_not_b16": ("u16", ("u16",), lambda a: ~a),
    "v_and_b16": ("u16", ("u16", "u16"), lambda a, b: a & b),
    "v_or_b16": ("u16", ("u16", "u16"), lambda a, b: a | b),
    "v_xor_b16": ("u16", ("u16", "u16"), lambda a, b: a ^ b),
    "v_max_u16": ("u16", ("u16", "u16"), np.maximum),
    "v_min_u16": ("u16", ("u16", "u16"), np.minimum),
    "v_max_i16": ("i16", ("i16", "i16"), np.maximum),
    "v_min_i16": ("i16", ("i16", "i16"), np.minimum),
    "v_add_nc_u16": ("u16", ("u16", "u16"), lambda a, b: a + b),
    "v_sub_nc_u16": ("u16", ("u16", "u16"), lambda a, b: a - b),
    "v_add_nc_i16": ("i16", ("i16", "i16"), lambda a, b: a + b),
    "v_sub_nc_i16": ("i16", ("i16", "i16"), lambda a, b: a - b),
    "v_ashrrev_i16": ("i16", ("u16", "i16"), lambda a, b: b >> (a & np.uint16(15)).astype(
        np.int16)),
    "v_add_u16": ("u16", ("u16", "u16"), lambda a, b: a + b),
    "v_sub_u16": ("u16", ("u16", "u16"), lambda a, b: a - b),
    "v_subrev_u16": ("u16", ("u16", "u16"), lambda a, b: b - a),  # gfx9
    "v_mul_lo_u16": ("u16", ("u16", "u16"), lambda a, b: a * b),
    "v_lshlrev_b16": ("u16", ("u16", "u16"), lambda a, b: b << (a & np.uint16(15))),
    "v_lshrrev_b16": ("u16", ("u16", "u16"), lambda a, b: b >> (a & np.uint16(15))),
    # the packing conversions saturate (RDNA3 ISA): 70000 packs as 0xFFFF, not 0x1170
    "v_cvt_pk_u16_u32": ("u32", ("u32", "u32"), lambda a, b: _pack16(
        np.minimum(a, u32(0xFFFF)), np.minimum(b, u32(0xFFFF)))),
    "v_cvt_pk_i16_i32": ("u32", ("i32", "i32"), lambda a, b: _pack16(
        np.clip(a, -32768, 32767), np.clip(b, -32768, 32767))),
    "v_cvt_pk_norm_i16_f32": ("u32", ("f32", "f32"), lambda a, b: _pack16(_snorm(a), _snorm(b))),
    "v_cvt_pk_norm_u16_f32": ("u32", ("f32", "f32"), lambda a, b: _pack16(_unorm(a), _unorm(b))),
    "v_cvt_pk_norm_i16_f16": ("u32", ("f16", "f16"), lambda a, b: _pack16(_snorm(a), _snorm(b))),
    "v_cvt_pk_norm_u16_f16": ("u32", ("f16", "f16"), lambda a, b: _pack16(_unorm(a), _unorm(b))),
    "v_cvt_pk_i16_f32": ("u32", ("f32", "f32"), lambda a, b: _pack16(
        _sat_int(a, -32768, 32767), _sat_int(b, -32768, 32767))),
    "v_cvt_pk_u16_f32": ("u32", ("f32", "f32"), lambda a, b: _pack16(
        _sat_int(a, 0, 65535), _sat_int(b, 0, 65535))),
    "v_cvt_norm_i16_f16": ("u16", ("f16",), _snorm),
    "v_cvt_norm_u16_f16": ("u16", ("f16",), _unorm),
    "v_frexp_exp_i16_f16": ("u16", ("f16",), lambda a: _frexp_exp(a) & u32(0xFFFF)),
    "v_cvt_off_f32_i4": ("f32", ("u32",), lambda a: (
        ((a & u32(0xF)).astype(np.int64) ^ 8) - 8).astype(f32) / f32(16)),
    "v_msad_u8": ("u32", ("u32", "u32", "u32"), lambda a, b, c: _sad_bytes(a, b, c, 8, True)),
    "v_cvt_pk_u8_f32": ("u32", ("f32", "u32", "u32"), lambda a, b, c: _pk_u8(a, b, c)),
    "v_sat_pk_u8_i16": ("u16", ("u32",), lambda a: _pack8(
        np.clip(to_type(a, "i16"), 0, 255), np.clip(to_type(a, "i16", True), 0, 255))),
}


def base_name(name: str) -> str:
    """The operation without its encoding suffixes: v_add_f32_e64_dpp -> v_add_f32."""
    stripped = True
    while stripped:
        stripped = False
        for suffix in ("_e32", "_e64", "_dpp", "_sdwa"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                stripped = True
    return name


# --- typed operand conversion --------------------------------------------------------------
def _kind(t: str) -> str:
    return "64" if t in ("f64", "u64", "i64") else "16" if t == "f16" else "32"


def to_type(raw, t: str, hi: bool = False):
    """Register bits -> numpy values of type t (f16 is promoted to float32)."""
    if t == "u32":
        return np.asarray(raw, u32)
    if t == "i32":
        return np.asarray(raw, u32).view(i32)
    if t == "f32":
        return np.asarray(raw, u32).view(f32)
    if t in ("f16", "u16", "i16"):
        bits = np.asarray(raw, u32)
        bits = ((bits >> u32(16)) if hi else bits) & u32(0xFFFF)
        h = bits.astype(np.uint16)
        if t == "f16":
            return h.view(np.float16).astype(f32)
        return h.view(np.int16) if t == "i16" else h
    if t == "u64":
        return np.asarray(raw, u64)
    if t == "i64":
        return np.asarray(raw, u64).view(i64)
    if t == "f64":
        return np.asarray(raw, u64).view(f64)
    raise KeyError(t)


def from_type(value, t: str):
    """numpy values of type t -> register bits (uint32, or uint64 for 64-bit types)."""
    if t in ("u32", "i32"):
        return np.asarray(value).astype(u32) if np.asarray(value).dtype != u32 else value
    if t == "f32":
        return np.asarray(value, f32).view(u32)
    if t == "f16":
        return np.asarray(value, f32).astype(np.float16).view(np.uint16).astype(u32)
    if t in ("u16", "i16"):
        return np.asarray(value).astype(np.int64).astype(u32) & u32(0xFFFF)
    if t in ("u64", "i64"):
        return np.asarray(value).astype(u64, copy=False)
    if t == "f64":
        return np.asarray(value, f64).view(u64)
    raise KeyError(t)


# --- DPP -----------------------------------------------------------------------------------
_LANE = np.arange(64)


def dpp_lanes(ctrl_word: int, dpp8: bool, lanes: int = 32) -> np.ndarray:
    """For each lane the source lane, or -1 where the source is out of the row (or out of
    the wave for gfx9's wave shifts and row broadcasts)."""
    lane = _LANE[:lanes]
    if dpp8:
        sel = np.array([(ctrl_word >> (8 + 3 * k)) & 7 for k in range(8)])
        return (lane & ~7) + sel[lane & 7]
    ctrl = (ctrl_word >> 8) & 0x1FF
    row = lane & ~15
    pos = lane & 15
    if ctrl <= 0xFF:
        return (lane & ~3) + ((ctrl >> (2 * (lane & 3))) & 3)
    if 0x101 <= ctrl <= 0x10F:
        n = ctrl & 0xF
        return np.where(pos + n < 16, lane + n, -1)
    if 0x111 <= ctrl <= 0x11F:
        n = ctrl & 0xF
        return np.where(pos - n >= 0, lane - n, -1)
    if 0x121 <= ctrl <= 0x12F:
        n = ctrl & 0xF
        return row + ((pos - n) % 16)
    if ctrl == 0x140:
        return row + 15 - pos
    if ctrl == 0x141:
        return (lane & ~7) + 7 - (lane & 7)
    if ctrl in (0x130, 0x134, 0x138, 0x13C):  # gfx9 wave_shl1/rol1/shr1/ror1
        step = -1 if ctrl in (0x130, 0x134) else 1  # shl: lane i reads lane i+1
        srcl = lane - step
        if ctrl in (0x134, 0x13C):
            return srcl % lanes
        return np.where((srcl >= 0) & (srcl < lanes), srcl, -1)
    if ctrl == 0x142:  # gfx9 row_bcast:15: lane 15 of each row feeds the next row
        return np.where(row > 0, row - 1, -1)
    if ctrl == 0x143:  # gfx9 row_bcast:31: lane 31 feeds rows 2 and 3
        return np.where(lane >= 32, 31, -1)
    if 0x150 <= ctrl <= 0x15F:
        return row + (ctrl & 0xF)
    if 0x160 <= ctrl <= 0x16F:
        return row + (pos ^ (ctrl & 0xF))
    raise NotImplementedError(f"dpp_ctrl 0x{ctrl:x}")


class DppSource:
    """src0 of a DPP instruction: the permuted VGPR and the lanes that may be written."""

    def __init__(self, g: WaveGroup, inst: d.Instruction) -> None:
        word = inst.f["dpp"]
        dpp8 = inst.f["src0"] in (d.DPP8, d.DPP8FI)
        src = dpp_lanes(word, dpp8, g.lanes)
        reg = g.v[word & 0xFF]
        valid = src >= 0
        safe = np.where(valid, src, 0)
        value = reg[:, safe]
        exec_mask = g.exec_mask()
        fetch_inactive = inst.f["src0"] == d.DPP8FI or (not dpp8 and (word >> 18) & 1)
        ok = np.broadcast_to(valid, exec_mask.shape)
        if not fetch_inactive:
            ok = ok & exec_mask[:, safe]
        write = exec_mask.copy()
        if not dpp8:
            bound_ctrl = (word >> 19) & 1
            row_mask = (word >> 28) & 0xF
            bank_mask = (word >> 24) & 0xF
            lane = _LANE[:g.lanes]
            lane_ok = ((row_mask >> (lane // 16)) & 1).astype(bool) & (
                (bank_mask >> ((lane // 4) & 3)) & 1).astype(bool)
            write &= lane_ok
            if bound_ctrl:
                value = np.where(ok, value, u32(0))
            else:
                write &= ok
            self.neg0 = (word >> 20) & 1
            self.abs0 = (word >> 21) & 1
            self.neg1 = (word >> 22) & 1
            self.abs1 = (word >> 23) & 1
        else:
            write &= ok
            self.neg0 = self.abs0 = self.neg1 = self.abs1 = 0
        self.value = value
        self.write = write


# --- the generic ALU path ----------------------------------------------------------------
class AluForm:
    """Operands of one VALU instruction in any of its encodings."""

    __slots__ = ("name", "srcs", "vdst", "sdst", "abs", "neg", "opsel", "clamp", "omod",
                 "literal", "dpp", "enc", "inst", "zero_hi16")

    def __init__(self, inst: d.Instruction) -> None:
        f = inst.f
        self.inst = inst
        self.enc = inst.encoding
        self.name = base_name(inst.name)
        self.literal = inst.literal
        self.dpp = "dpp" in f
        self.abs = f.get("abs", 0)
        self.neg = f.get("neg", 0)
        self.opsel = f.get("opsel", 0)
        self.clamp = f.get("clamp", 0)
        self.omod = f.get("omod", 0)
        # gfx9: a 16-bit result not written to the high half (op_sel) zeroes bits 31:16
        self.zero_hi16 = bool(f.get("zero_hi16", 0))
        self.sdst = f.get("sdst", d.VCC_LO)
        self.vdst = f.get("vdst", 0)
        if inst.encoding == "VOP3":
            self.srcs = [f["src0"], f["src1"], f["src2"]]
        elif inst.encoding == "VOP1":
            self.srcs = [f["src0"]]
        else:
            self.srcs = [f["src0"], f["vsrc1"]]

    def true16(self, in_types: tuple[str, ...], out_type: str | None) -> None:
        """VOP1/VOP2/VOPC 16-bit operands name a half register: bit 7 of the VGPR number
        selects the high half (v2.h). Fold that into opsel, as VOP3 encodes it. Not on gfx9
        (its decoder marks no_true16), where v128-v255 are registers of their own."""
        if self.enc not in ("VOP1", "VOP2", "VOPC") or self.inst.f.get("no_true16"):
            return
        for k, t in enumerate(in_types[: len(self.srcs)]):
            code = self.srcs[k]
            if t in _T16 and code >= d.VGPR0 and (code - d.VGPR0) & 0x80:
                self.srcs[k] = code & ~0x80
                self.opsel |= 1 << k
        if out_type in _T16 and self.enc != "VOPC" and self.vdst & 0x80:
            self.vdst &= 0x7F
            self.opsel |= 8


_T16 = ("f16", "u16", "i16")


def read_src(g: WaveGroup, form: AluForm, k: int, t: str, dpp: DppSource | None = None):
    code = form.srcs[k]
    if dpp is None and k == 0 and code in (d.DPP16, d.DPP8, d.DPP8FI):
        raise NotImplementedError(f"{form.inst.name} with DPP (src0 code {code}) is not "
                                  "modelled for this operation")
    raw = dpp.value if (k == 0 and dpp is not None) else g.vread(code, form.literal, _kind(t))
    absb = (form.abs >> k) & 1
    negb = (form.neg >> k) & 1
    if dpp is not None and form.enc != "VOP3" and k < 2:  # VOP1/2/C DPP: modifiers in DPP
        absb, negb = (dpp.abs0, dpp.neg0) if k == 0 else (dpp.abs1, dpp.neg1)
    hi = bool((form.opsel >> k) & 1)
    if t == "f16" and code < d.VGPR0 and code != d.LITERAL and 240 <= code <= 248:
        hi = False
    value = to_type(raw, t, hi)
    if t in ("f32", "f16", "f64"):
        if absb:
            value = np.abs(value)
        if negb:
            value = -value
    return value


def write_result(g: WaveGroup, form: AluForm, value, t: str,
                 mask: np.ndarray | None = None) -> None:
    if t in ("f32", "f16", "f64") and (form.omod or form.clamp):
        value = np.asarray(value, f64 if t == "f64" else f32)
        if form.omod:
            value = value * (2.0, 2.0, 4.0, 0.5)[form.omod]
        if form.clamp:
            value = np.clip(value, 0.0, 1.0)
    bits = from_type(value, t)
    if t in ("f64", "u64", "i64"):
        g.vwrite64(form.vdst, bits, mask)
        return
    if t in ("f16", "u16", "i16"):
        old = g.v[form.vdst]
        if (form.opsel >> 3) & 1:
            bits = (old & u32(0xFFFF)) | (np.asarray(bits, u32) << u32(16))
        elif form.zero_hi16:
            bits = np.asarray(bits, u32) & u32(0xFFFF)
        else:
            bits = (old & u32(0xFFFF0000)) | np.asarray(bits, u32)
    g.vwrite(form.vdst, bits, mask)


def run_generic(g: WaveGroup, form: AluForm, spec) -> None:
    out_t, in_ts, fn = spec
    dpp = DppSource(g, form.inst) if form.dpp else None
    args = [read_src(g, form, k, t, dpp) for k, t in enumerate(in_ts)]
    value = fn(*args)
    write_result(g, form, value, out_t, dpp.write if dpp else None)


# --- compares ----------------------------------------------------------------------------
# v_cmp conditions: (a, b) -> bool per lane (sources are arrays or numpy scalars)
_CMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "f": lambda a, b: np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
    "t": lambda a, b: np.ones(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
    "tru": lambda a, b: np.ones(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
    "lg": lambda a, b: (a < b) | (a > b), "ne": np.not_equal, "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
    "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
    "nlt": lambda a, b: ~(a < b),
}


def _class(value, mask):
    """v_cmp_class: bit 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0, 7 +denorm,
    8 +normal, 9 +inf."""
    v = np.asarray(value)
    mask = np.asarray(mask, u32)
    tiny = np.finfo(v.dtype).tiny
    neg = np.signbit(v)
    nan = np.isnan(v)
    inf = np.isinf(v)
    zero = v == 0
    den = (~zero) & (np.abs(v) < tiny)
    norm = ~(nan | inf | zero | den)
    classes = [nan, nan, inf & neg, norm & neg, den & neg, zero & neg, zero & ~neg,
               den & ~neg, norm & ~neg, inf & ~neg]
    out = np.zeros(np.broadcast_shapes(v.shape, mask.shape), bool)
    for bit, c in enumerate(classes):
        out |= c & (((mask >> u32(bit)) & u32(1)) != 0)
    return out


def run_compare(g: WaveGroup, form: AluForm) -> None:
    name = form.name
    parts = name.split("_")  # v_cmp[x]_<cond>_<type>
    cmpx = parts[1] == "cmpx"
    t = parts[-1]
    dpp = DppSource(g, form.inst) if form.dpp else None
    if parts[2] == "class":
        a = read_src(g, form, 0, t, dpp)
        b = read_src(g, form, 1, "u32", dpp)
        result = _class(a, b)
    else:
        cond = "_".join(parts[2:-1])
        a = read_src(g, form, 0, t, dpp)
        b = read_src(g, form, 1, t, dpp)
        result = _CMP[cond](a, b)
    result = np.broadcast_to(result, (g.count, g.lanes)) & g.exec_mask()
    if dpp is not None:
        result = result & dpp.write
    if cmpx:
        g.write_lane_mask(d.EXEC_LO, result)
        if form.inst.f.get("cmpx_sdst"):  # gfx9: v_cmpx also writes VCC (VOP3: sdst)
            g.write_lane_mask(d.VCC_LO if form.enc == "VOPC" else form.vdst, result)
    else:
        dst = d.VCC_LO if form.enc == "VOPC" else form.vdst
        g.write_lane_mask(dst, result)


# --- special operations ----------------------------------------------------------------
def _carry_mask(g: WaveGroup, form: AluForm, k: int) -> np.ndarray:
    code = d.VCC_LO if form.enc != "VOP3" else form.srcs[k]
    return g.lane_mask(code)


def _write_sdst_mask(g: WaveGroup, form: AluForm, mask: np.ndarray) -> None:
    code = d.VCC_LO if form.enc != "VOP3" else form.sdst
    if code == d.NULL:
        return
    mask = np.broadcast_to(mask, (g.count, g.lanes)) & g.exec_mask()
    g.write_lane_mask(code, mask)


def op_cndmask(g: WaveGroup, form: AluForm) -> None:
    dpp = DppSource(g, form.inst) if form.dpp else None
    a = read_src(g, form, 0, "u32", dpp)
    b = read_src(g, form, 1, "u32", dpp)
    if form.abs or form.neg:
        a = read_src(g, form, 0, "f32", dpp).view(u32)
        b = read_src(g, form, 1, "f32", dpp).view(u32)
    m = _carry_mask(g, form, 2)
    g.vwrite(form.vdst, np.where(m, b, a), dpp.write if dpp else None)


def op_cndmask_b16(g: WaveGroup, form: AluForm) -> None:
    """v_cndmask_b16 (VOP3): 16-bit halves picked by opsel; abs/neg act on them as f16."""
    t = "f16" if (form.abs or form.neg) else "u16"
    a = from_type(read_src(g, form, 0, t), t)
    b = from_type(read_src(g, form, 1, t), t)
    m = _carry_mask(g, form, 2)
    write_result(g, form, to_type(np.where(m, b, a), "u16"), "u16")


def op_addsub_i32(g: WaveGroup, form: AluForm, sub: bool) -> None:
    """v_add_nc_i32 / v_sub_nc_i32: wrap, or saturate to int32 with clamp."""
    a = np.asarray(read_src(g, form, 0, "i32"), i64)
    b = np.asarray(read_src(g, form, 1, "i32"), i64)
    r = a - b if sub else a + b
    if form.clamp:
        r = np.clip(r, -(2 ** 31), 2 ** 31 - 1)
    g.vwrite(form.vdst, r.astype(u32))


def _addsub(g: WaveGroup, form: AluForm, sub: bool, rev: bool, carry_in: bool) -> None:
    # DPP (gfx11/gfx12 VOP3 DPP16/DPP8 too: src0 code 250/233/234): src0 from the DPP lane;
    # lanes DPP disables (row/bank mask, out-of-bounds without bound_ctrl) write neither
    # the result nor a carry bit, like lanes EXEC leaves out
    dpp = DppSource(g, form.inst) if form.dpp else None
    # in u32, wrapping (the executor silences numpy's overflow warnings): a carry out is a
    # wrapped sum below an addend, a borrow a minuend below the subtrahend; half the bytes
    # of the u64 form and no widening or masking passes (the 64-bit address arithmetic
    # of every global access)
    a = np.asarray(read_src(g, form, 0, "u32", dpp), u32)
    b = np.asarray(read_src(g, form, 1, "u32", dpp), u32)
    if rev:
        a, b = b, a
    if sub:
        r = a - b
        carry = a < b
    else:
        r = a + b
        carry = r < a
    if carry_in:
        c = _carry_mask(g, form, 2)
        t = r
        r = t - c if sub else t + c  # bool c: numpy adds it as 0/1 in u32
        carry = carry | ((t < c) if sub else (r < t))
    g.vwrite(form.vdst, r, dpp.write if dpp else None)
    _write_sdst_mask(g, form, carry if dpp is None else carry & dpp.write)


def op_mad_64_32(g: WaveGroup, form: AluForm, signed: bool, carry_out: bool = True) -> None:
    """v_mad_u64_u32 / v_mad_i64_i32; gfx1250's v_mad_nc_* forms have no carry out."""
    t = "i32" if signed else "u32"
    a = np.asarray(read_src(g, form, 0, t), i64 if signed else u64)
    b = np.asarray(read_src(g, form, 1, t), i64 if signed else u64)
    c = np.asarray(read_src(g, form, 2, "i64" if signed else "u64"))
    if signed:
        r = (a * b).astype(i64) + c
        g.vwrite64(form.vdst, np.asarray(r, i64).view(u64))
        if carry_out:
            _write_sdst_mask(g, form, np.zeros((1, 1), bool))
    else:
        prod = a * b
        r = prod + c
        carry = r < c
        g.vwrite64(form.vdst, r)
        if carry_out:
            _write_sdst_mask(g, form, carry)


def op_div_scale(g: WaveGroup, form: AluForm) -> None:
    # Without denormal-range inputs no scaling is needed: D = S0, VCC = 0. Enough for the
    # division sequences compilers emit for ordinary values.
    s0 = read_src(g, form, 0, "f32")
    g.vwrite(form.vdst, np.asarray(s0, f32).view(u32))
    _write_sdst_mask(g, form, np.zeros((1, 1), bool))


def op_div_scale64(g: WaveGroup, form: AluForm) -> None:
    s0 = read_src(g, form, 0, "f64")
    g.vwrite64(form.vdst, np.asarray(s0, f64).view(u64))
    _write_sdst_mask(g, form, np.zeros((1, 1), bool))


def op_div_fmas(g: WaveGroup, form: AluForm, t: str = "f32") -> None:
    a, b, c = (read_src(g, form, k, t) for k in range(3))
    vcc = g.lane_mask(d.VCC_LO)
    if t == "f64":
        r = np.asarray(a, f64) * b + c
        r = np.where(vcc, r * 2.0 ** 64, r)
    else:
        r = _fma(a, b, c)
        r = np.where(vcc, r * np.float32(2.0 ** 32), r).astype(f32)
    write_result(g, form, r, t)


def op_div_fixup(g: WaveGroup, form: AluForm, t: str = "f32") -> None:
    q, den, num = (read_src(g, form, k, t) for k in range(3))
    ft = f64 if t == "f64" else f32
    exact = (np.asarray(num, ft) / np.asarray(den, ft)).astype(ft)
    special = ~np.isfinite(q) | (den == 0) | ~np.isfinite(den) | ~np.isfinite(num)
    r = np.where(special, exact, q)
    write_result(g, form, r, t)


def op_readfirstlane(g: WaveGroup, form: AluForm) -> None:
    src = np.broadcast_to(read_src(g, form, 0, "u32"), (g.count, g.lanes))
    ex = g.exec_mask()
    first = np.where(ex.any(axis=1), ex.argmax(axis=1), 0)
    g.swrite(form.vdst, src[np.arange(g.count), first])


def _uniform(g: WaveGroup, form: AluForm, k: int, wide: bool = False) -> np.ndarray:
    """Source k of a lane-select operand: an SGPR, M0 or a constant, one value per wave
    ((waves, 1)). A VGPR there is not an encodable instruction: a clean queue error."""
    code = form.srcs[k]
    if code >= d.VGPR0:
        raise IllegalInstruction(
            HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
            f"{form.name} takes a scalar (SGPR or constant) as source {k}, not "
            f"v{code - d.VGPR0}")
    value = np.asarray(g.vread(code, form.literal), u64 if wide else None)
    return np.broadcast_to(value, (g.count, 1))


def op_readlane(g: WaveGroup, form: AluForm) -> None:
    src = np.broadcast_to(read_src(g, form, 0, "u32"), (g.count, g.lanes))
    lane = _uniform(g, form, 1)
    g.swrite(form.vdst, src[np.arange(g.count), lane[:, 0] & (g.lanes - 1)])


def op_writelane(g: WaveGroup, form: AluForm) -> None:
    value = _uniform(g, form, 0)
    lane = _uniform(g, form, 1)
    mask = (_LANE[None, :g.lanes] == (lane & (g.lanes - 1)))
    np.copyto(g.v[form.vdst], value, where=mask)


def _permlane(g: WaveGroup, form: AluForm, cross: bool) -> None:
    src = np.broadcast_to(read_src(g, form, 0, "u32"), (g.count, g.lanes))
    lo = _uniform(g, form, 1, wide=True)
    hi = _uniform(g, form, 2, wide=True)
    sel64 = lo | (hi << u64(32))
    pos = _LANE[:g.lanes] & 15
    nib = ((sel64 >> (pos.astype(u64) * u64(4))) & u64(15)).astype(np.int64)  # (W, 32)
    row = _LANE[:g.lanes] & ~15
    if cross:
        row = row ^ 16
    srcl = row[None, :] + nib
    g.vwrite(form.vdst, np.take_along_axis(src, srcl, axis=1))


def op_permlane64(g: WaveGroup, form: AluForm) -> None:
    """v_permlane64_b32: each lane of a wave64 reads lane ^ 32 (the other half)."""
    if g.lanes != 64:
        raise IllegalInstruction(HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                                 "v_permlane64_b32 swaps the halves of a wave64; this wave "
                                 "has 32 lanes (LLVM folds it away in wave32)")
    src = np.broadcast_to(read_src(g, form, 0, "u32"), (g.count, g.lanes))
    g.vwrite(form.vdst, src[:, _LANE[:64] ^ 32])


def op_mqsad_u32(g: WaveGroup, form: AluForm) -> None:
    """v_mqsad_u32_u8: four 32-bit masked SADs of S1 against the byte windows of the 64-bit
    S0 at byte 0..3, each plus its dword of the 128-bit S2 (VGPRs or a 64-bit-or-less
    source zero-extended)."""
    a = np.array(read_src(g, form, 0, "u64"), u64)  # copies: vdst may overlap a source
    b = np.array(read_src(g, form, 1, "u32"), u32)
    code = form.srcs[2]
    if code >= d.VGPR0:
        acc = [g.v[code - d.VGPR0 + k].copy() for k in range(4)]
    else:
        low = np.asarray(read_src(g, form, 2, "u64"), u64)
        acc = [(low & M32).astype(u32), (low >> u64(32)).astype(u32), u32(0), u32(0)]
    for k in range(4):
        window = ((a >> u64(8 * k)) & M32).astype(u32)
        g.vwrite(form.vdst + k, np.broadcast_to(_sad_bytes(window, b, acc[k], 8, True),
                                                (g.count, g.lanes)))


def op_fmac(g: WaveGroup, form: AluForm, t: str) -> None:
    dpp = DppSource(g, form.inst) if form.dpp else None
    a = read_src(g, form, 0, t, dpp)
    b = read_src(g, form, 1, t, dpp)
    c = to_type(g.v[form.vdst], t, bool((form.opsel >> 3) & 1))  # D's own half (v4.h)
    fma = _fma16 if t == "f16" else _fma
    write_result(g, form, fma(a, b, c), t, dpp.write if dpp else None)


def op_fmac_dx9(g: WaveGroup, form: AluForm) -> None:
    """v_fmac_dx9_zero_f32: D = S0 * S1 + D where 0 times anything (inf, NaN) is 0."""
    dpp = DppSource(g, form.inst) if form.dpp else None
    a = read_src(g, form, 0, "f32", dpp)
    b = read_src(g, form, 1, "f32", dpp)
    c = to_type(g.v[form.vdst], "f32")
    r = np.where((a == 0) | (b == 0), c, _fma(a, b, c))
    write_result(g, form, r, "f32", dpp.write if dpp else None)


def op_fmamk(g: WaveGroup, form: AluForm, t: str, ak: bool) -> None:
    a = read_src(g, form, 0, t)
    b = read_src(g, form, 1, t)
    k = to_type(g.vread(d.LITERAL, form.literal), t)
    fma = _fma16 if t == "f16" else _fma
    write_result(g, form, fma(a, b, k) if ak else fma(a, k, b), t)


def op_pk_fmac(g: WaveGroup, form: AluForm) -> None:
    """v_pk_fmac_f16 (VOP2): both f16 halves D = S0 * S1 + D, no modifiers."""
    a = np.asarray(read_src(g, form, 0, "u32"), u32)
    b = np.asarray(read_src(g, form, 1, "u32"), u32)
    c = g.v[form.vdst]
    halves = [from_type(_fma16(to_type(a, "f16", hi), to_type(b, "f16", hi),
                               to_type(c, "f16", hi)), "f16") for hi in (False, True)]
    g.vwrite(form.vdst, np.asarray(halves[0], u32) | (np.asarray(halves[1], u32) << u32(16)))


def _bf16(bits):
    return (np.asarray(bits, u32) << u32(16)).view(f32)


def op_dot2_16(g: WaveGroup, form: AluForm, bf16: bool) -> None:
    """v_dot2_f16_f16 / v_dot2_bf16_bf16 (VOP3): S0.lo*S1.lo + S0.hi*S1.hi + S2 (its half
    chosen by opsel[2]), one 16-bit result in the half opsel[3] names (the other is kept);
    neg/abs act on every half of their source."""
    def val(k, hi):
        raw = np.asarray(g.vread(form.srcs[k], form.literal), u32)
        bits = (raw >> u32(16)) if hi else (raw & u32(0xFFFF))
        x = (_bf16(bits) if bf16 else to_type(bits, "f16")).astype(f64)
        if form.abs >> k & 1:
            x = np.abs(x)
        return -x if form.neg >> k & 1 else x
    acc = val(2, bool(form.opsel >> 2 & 1)) + val(0, False) * val(1, False) + (
        val(0, True) * val(1, True))
    r = np.asarray(acc, f32)
    if bf16:
        b = r.view(u32)
        bits = ((b + ((b >> u32(16)) & u32(1)) + u32(0x7FFF)) >> u32(16)) & u32(0xFFFF)
    else:
        bits = from_type(r, "f16")
    old = g.v[form.vdst]
    if form.opsel >> 3 & 1:
        out = (old & u32(0xFFFF)) | (np.asarray(bits, u32) << u32(16))
    else:
        out = (old & u32(0xFFFF0000)) | np.asarray(bits, u32)
    g.vwrite(form.vdst, out)


def op_dot2acc(g: WaveGroup, form: AluForm) -> None:
    a = np.asarray(read_src(g, form, 0, "u32"), u32)
    b = np.asarray(read_src(g, form, 1, "u32"), u32)
    acc = to_type(g.v[form.vdst], "f32")
    r = acc.astype(f64)
    for hi in (False, True):
        r = r + to_type(a, "f16", hi).astype(f64) * to_type(b, "f16", hi).astype(f64)
    write_result(g, form, r.astype(f32), "f32")


# for lane l, the bits of the lanes below it within a 32-bit mask half (lo: lanes 0-31
# count bits of mask bits < l; hi: lanes 32-63 count bits < l - 32; lanes past a half all)
_BELOW_LO = ((np.uint64(1) << np.minimum(np.arange(64), 32).astype(np.uint64))
             - np.uint64(1)).astype(u32)
_BELOW_HI = ((np.uint64(1) << np.clip(np.arange(64) - 32, 0, 32).astype(np.uint64))
             - np.uint64(1)).astype(u32)


def _popcount(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype="<u4")
    bits = np.unpackbits(x.view(np.uint8).reshape(x.shape + (4,)), axis=-1)
    return bits.sum(axis=-1, dtype=np.uint32)


def op_mbcnt(g: WaveGroup, form: AluForm, hi: bool) -> None:
    """v_mbcnt_lo/hi: count the mask bits of the lanes below this one (wave32: hi adds 0)."""
    mask = np.asarray(read_src(g, form, 0, "u32"), u32)
    base = read_src(g, form, 1, "u32")
    below = np.broadcast_to(mask, (g.count, g.lanes)) & (_BELOW_HI if hi else _BELOW_LO)[
        :g.lanes]
    g.vwrite(form.vdst, (_popcount(below) + base).astype(u32))


def op_bcnt(g: WaveGroup, form: AluForm) -> None:
    a = np.broadcast_to(np.asarray(read_src(g, form, 0, "u32"), u32), (g.count, g.lanes))
    g.vwrite(form.vdst, (_popcount(a) + read_src(g, form, 1, "u32")).astype(u32))


def op_movrel(g: WaveGroup, form: AluForm, src_rel: bool, dst_rel: bool,
              split: bool = False) -> None:
    """v_movrels/movreld/movrelsd: VGPR numbers offset by M0 (per wave; movrelsd_2 takes
    the source offset from M0[9:0] and the destination's from M0[25:16]). Indexes past the
    wave's VGPRs read 0 and write nothing."""
    m0 = g.s[:, d.M0].astype(np.int64)
    nreg = g.v.shape[0]
    src = form.srcs[0]
    for word in np.unique(m0):
        waves = m0 == word
        s_off = int(word) & 0x3FF if split else int(word)
        d_off = (int(word) >> 16) & 0x3FF if split else int(word)
        s_reg = src - d.VGPR0 + (s_off if src_rel else 0)
        dst = form.vdst + (d_off if dst_rel else 0)
        if src >= d.VGPR0:
            value = g.v[s_reg] if 0 <= s_reg < nreg else np.zeros((g.count, g.lanes), u32)
        else:
            value = np.broadcast_to(read_src(g, form, 0, "u32"), (g.count, g.lanes))
        if 0 <= dst < nreg:
            mask = g.exec_mask() & waves[:, None]
            np.copyto(g.v[dst], np.broadcast_to(value, (g.count, g.lanes)), where=mask,
                      casting="unsafe")


def op_swap(g: WaveGroup, form: AluForm) -> None:
    if form.srcs[0] < d.VGPR0:
        raise IllegalInstruction(HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                                 "v_swap_b32 swaps two VGPRs; its source is not one")
    src = form.srcs[0] - d.VGPR0
    a, b = g.v[form.vdst].copy(), g.v[src].copy()
    g.vwrite(form.vdst, b)
    g.vwrite(src, a)


SPECIAL: dict[str, Callable[[WaveGroup, AluForm], None]] = {
    "v_swap_b32": op_swap,
    "v_movrels_b32": lambda g, f: op_movrel(g, f, True, False),
    "v_movreld_b32": lambda g, f: op_movrel(g, f, False, True),
    "v_movrelsd_b32": lambda g, f: op_movrel(g, f, True, True),
    "v_movrelsd_2_b32": lambda g, f: op_movrel(g, f, True, True, split=True),
    "v_mbcnt_lo_u32_b32": lambda g, f: op_mbcnt(g, f, False),
    "v_mbcnt_hi_u32_b32": lambda g, f: op_mbcnt(g, f, True),
    "v_bcnt_u32_b32": op_bcnt,
    "v_cndmask_b32": op_cndmask,
    "v_cndmask_b16": op_cndmask_b16,
    "v_add_nc_i32": lambda g, f: op_addsub_i32(g, f, False),
    "v_sub_nc_i32": lambda g, f: op_addsub_i32(g, f, True),
    "v_add_co_u32": lambda g, f: _addsub(g, f, False, False, False),
    "v_sub_co_u32": lambda g, f: _addsub(g, f, True, False, False),
    "v_subrev_co_u32": lambda g, f: _addsub(g, f, True, True, False),
    "v_add_co_ci_u32": lambda g, f: _addsub(g, f, False, False, True),
    "v_sub_co_ci_u32": lambda g, f: _addsub(g, f, True, False, True),
    "v_subrev_co_ci_u32": lambda g, f: _addsub(g, f, True, True, True),
    "v_mad_u64_u32": lambda g, f: op_mad_64_32(g, f, False),
    "v_mad_i64_i32": lambda g, f: op_mad_64_32(g, f, True),
    "v_mad_nc_u64_u32": lambda g, f: op_mad_64_32(g, f, False, False),  # gfx1250
    "v_mad_nc_i64_i32": lambda g, f: op_mad_64_32(g, f, True, False),
    "v_div_scale_f32": op_div_scale,
    "v_div_fmas_f32": op_div_fmas,
    "v_div_fixup_f32": op_div_fixup,
    "v_div_scale_f64": op_div_scale64,
    "v_div_fmas_f64": lambda g, f: op_div_fmas(g, f, "f64"),
    "v_div_fixup_f64": lambda g, f: op_div_fixup(g, f, "f64"),
    "v_div_fixup_f16": lambda g, f: op_div_fixup(g, f, "f16"),
    "v_readfirstlane_b32": op_readfirstlane,
    "v_readlane_b32": op_readlane,
    "v_writelane_b32": op_writelane,
    "v_permlane16_b32": lambda g, f: _permlane(g, f, False),
    "v_permlanex16_b32": lambda g, f: _permlane(g, f, True),
    "v_permlane64_b32": op_permlane64,
    "v_mqsad_u32_u8": op_mqsad_u32,
    "v_fmac_f32": lambda g, f: op_fmac(g, f, "f32"),
    "v_fmac_dx9_zero_f32": op_fmac_dx9,
    "v_fmac_f16": lambda g, f: op_fmac(g, f, "f16"),
    "v_fmamk_f32": lambda g, f: op_fmamk(g, f, "f32", False),
    "v_fmaak_f32": lambda g, f: op_fmamk(g, f, "f32", True),
    "v_fmamk_f16": lambda g, f: op_fmamk(g, f, "f16", False),
    "v_fmaak_f16": lambda g, f: op_fmamk(g, f, "f16", True),
    "v_dot2acc_f32_f16": op_dot2acc,
    "v_pk_fmac_f16": op_pk_fmac,
    "v_dot2_f16_f16": lambda g, f: op_dot2_16(g, f, False),
    "v_dot2_bf16_bf16": lambda g, f: op_dot2_16(g, f, True),
    "v_nop": lambda g, f: None,
    "v_pipeflush": lambda g, f: None,
}


# SPECIAL ops with 16-bit VOP2 forms, whose operands may name a half register (true16)
_SPECIAL_F16 = ("v_fmac_f16", "v_fmamk_f16", "v_fmaak_f16")


def compile_alu(inst: d.Instruction) -> Callable[[WaveGroup], None] | None:
    """A function running this VOP1/VOP2/VOPC/VOP3 instruction, or None if unsupported."""
    form = AluForm(inst)
    name = form.name
    if name.startswith("v_cmp_") or name.startswith("v_cmpx_"):
        t = name.split("_")[-1]
        if t not in ("f16", "f32", "f64", "i16", "u16", "i32", "u32", "i64", "u64"):
            return None
        form.true16((t, t), None)
        return lambda g: run_compare(g, form)
    if name in SPECIAL:
        fn = SPECIAL[name]
        if name in _SPECIAL_F16:
            form.true16(("f16", "f16"), "f16")
        return lambda g: fn(g, form)
    spec = OPS.get(name)
    if spec is None:
        return None
    form.true16(spec[1], spec[0])
    return lambda g: run_generic(g, form, spec)
