"""Scalar ALU semantics (SOP1, SOP2, SOPK, SOPC) for all waves of a group at once.

Each scalar register is a (waves,) column; an operation maps columns to a result column and,
where the ISA says so, an SCC column. Operations are data: `SOP2[name] = (width, fn)` with
fn(a, b) -> (result, scc or None).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ground.errors import IllegalInstruction
from ground.status import HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.sfloat import compile_sfloat
from hsa.virtual.isa.state import WaveGroup

u32, i32, u64, i64 = np.uint32, np.int32, np.uint64, np.int64
M32 = u64(0xFFFFFFFF)


def _s32(x):
    return np.asarray(x, u32).view(i32).astype(i64)


def _nz(x):
    return np.asarray(x) != 0


def _mul_hi(a, b, t):
    product = np.asarray(a).astype(t) * np.asarray(b).astype(t)
    return (product >> t(32)).astype(u32)


def _bfm(a, b):
    width = np.asarray(a, u64) & u64(31)
    return (((u64(1) << width) - u64(1)) << (np.asarray(b, u64) & u64(31))).astype(u32)


def _pack(a, b, shift_a, shift_b):
    lo = (np.asarray(a, u32) >> u32(shift_a)) & u32(0xFFFF)
    hi = (np.asarray(b, u32) >> u32(shift_b)) & u32(0xFFFF)
    return lo | (hi << u32(16))


def _bit(a, b):
    return (np.asarray(a, u32) >> (np.asarray(b, u32) & u32(31))) & u32(1)


def _brev(a):
    a = np.asarray(a, u32)
    bits = np.unpackbits(np.atleast_1d(a).astype("<u4").view(np.uint8), bitorder="little")
    rev = np.packbits(bits.reshape(-1, 32)[:, ::-1], axis=1, bitorder="little")
    return rev.view("<u4").reshape(a.shape)


def _sext(a, unsigned, signed):
    return np.asarray(a, u32).astype(unsigned).view(signed).astype(i32).astype(u32)


def _add_u32(a, b):
    r = np.asarray(a, u64) + np.asarray(b, u64)
    return (r & M32).astype(u32), r > M32


def _sub_u32(a, b):
    a, b = np.asarray(a, u32), np.asarray(b, u32)
    return (a - b).astype(u32), b > a


def _add_i32(a, b):
    r = _s32(a) + _s32(b)
    return r.astype(u32), (r > 2**31 - 1) | (r < -(2**31))


def _sub_i32(a, b):
    r = _s32(a) - _s32(b)
    return r.astype(u32), (r > 2**31 - 1) | (r < -(2**31))


def _bfe(a, b, signed, wide):
    off = np.asarray(b, u32) & u32(63 if wide else 31)
    width = (np.asarray(b, u32) >> u32(16)) & u32(0x7F)
    bits = 64 if wide else 32
    a64 = np.asarray(a, u64)
    v = (a64 >> off.astype(u64)) & ((u64(1) << np.minimum(width, 63).astype(u64)) - u64(1))
    v = np.where(width >= bits, a64 >> off.astype(u64), v)
    if signed:
        sign = u64(1) << np.maximum(np.minimum(width, 64).astype(np.int64) - 1, 0).astype(u64)
        v = np.where(width > 0, (v ^ sign) - sign, u64(0))
    if not wide:
        v = v & M32
    return v, _nz(v)


def _lsh(a, b, wide):
    if wide:
        r = np.asarray(a, u64) << (np.asarray(b, u64) & u64(63))
        return r, _nz(r)
    r = (np.asarray(a, u32) << (np.asarray(b, u32) & u32(31))).astype(u32)
    return r, _nz(r)


def _rsh(a, b, wide):
    if wide:
        r = np.asarray(a, u64) >> (np.asarray(b, u64) & u64(63))
        return r, _nz(r)
    r = np.asarray(a, u32) >> (np.asarray(b, u32) & u32(31))
    return r, _nz(r)


def _ash(a, b, wide):
    if wide:
        r = (np.asarray(a, u64).view(i64) >> (np.asarray(b, u64) & u64(63)).astype(i64))
        r = r.astype(u64)
    else:
        r = (_s32(a) >> (np.asarray(b, u32) & u32(31)).astype(i64)).astype(u32)
    return r, _nz(r)


def _logic(fn):
    def op(a, b):
        r = fn(a, b)
        return r, _nz(r)
    return op


SOP2: dict[str, tuple[bool, Callable]] = {
    "s_add_u32": (False, _add_u32),
    "s_sub_u32": (False, _sub_u32),
    "s_add_i32": (False, _add_i32),
    "s_sub_i32": (False, _sub_i32),
    "s_min_i32": (False, lambda a, b: (np.where(_s32(a) <= _s32(b), a, b), _s32(a) <= _s32(b))),
    "s_min_u32": (False, lambda a, b: (np.minimum(a, b), np.asarray(a) <= np.asarray(b))),
    "s_max_i32": (False, lambda a, b: (np.where(_s32(a) >= _s32(b), a, b), _s32(a) >= _s32(b))),
    "s_max_u32": (False, lambda a, b: (np.maximum(a, b), np.asarray(a) >= np.asarray(b))),
    "s_lshl_b32": (False, lambda a, b: _lsh(a, b, False)),
    "s_lshl_b64": (True, lambda a, b: _lsh(a, b, True)),
    "s_lshr_b32": (False, lambda a, b: _rsh(a, b, False)),
    "s_lshr_b64": (True, lambda a, b: _rsh(a, b, True)),
    "s_ashr_i32": (False, lambda a, b: _ash(a, b, False)),
    "s_ashr_i64": (True, lambda a, b: _ash(a, b, True)),
    "s_mul_i32": (False, lambda a, b: ((np.asarray(a, u32) * b).astype(u32), None)),
    # gfx12 64-bit scalar integer ops: no carry, SCC unchanged
    "s_add_nc_u64": (True, lambda a, b: ((np.asarray(a, u64) + np.asarray(b, u64)), None)),
    "s_sub_nc_u64": (True, lambda a, b: ((np.asarray(a, u64) - np.asarray(b, u64)), None)),
    "s_mul_u64": (True, lambda a, b: ((np.asarray(a, u64) * np.asarray(b, u64)), None)),
    "s_mul_hi_u32": (False, lambda a, b: (_mul_hi(a, b, u64), None)),
    "s_mul_hi_i32": (False, lambda a, b: (_mul_hi(_s32(a), _s32(b), i64), None)),
    "s_bfe_u32": (False, lambda a, b: _bfe(a, b, False, False)),
    "s_bfe_i32": (False, lambda a, b: _bfe(a, b, True, False)),
    "s_bfe_u64": (True, lambda a, b: _bfe(a, b, False, True)),
    "s_bfe_i64": (True, lambda a, b: _bfe(a, b, True, True)),
    "s_bfm_b32": (False, lambda a, b: (_bfm(a, b), None)),
    "s_bfm_b64": (True, lambda a, b: ((((u64(1) << (np.asarray(a, u64) & u64(63))) - u64(1))
                                       << (np.asarray(b, u64) & u64(63))), None)),
    "s_lshl1_add_u32": (False, lambda a, b: _add_u32((np.asarray(a, u32) << u32(1)), b)),
    "s_lshl2_add_u32": (False, lambda a, b: _add_u32((np.asarray(a, u32) << u32(2)), b)),
    "s_lshl3_add_u32": (False, lambda a, b: _add_u32((np.asarray(a, u32) << u32(3)), b)),
    "s_lshl4_add_u32": (False, lambda a, b: _add_u32((np.asarray(a, u32) << u32(4)), b)),
    "s_pack_ll_b32_b16": (False, lambda a, b: (_pack(a, b, 0, 0), None)),
    "s_pack_lh_b32_b16": (False, lambda a, b: (_pack(a, b, 0, 16), None)),
    "s_pack_hh_b32_b16": (False, lambda a, b: (_pack(a, b, 16, 16), None)),
    "s_pack_hl_b32_b16": (False, lambda a, b: (_pack(a, b, 16, 0), None)),
    "s_absdiff_i32": (False, lambda a, b: _logic(lambda x, y: np.abs(_s32(x) - _s32(y)).astype(
        u32))(a, b)),
}
for _w, _sfx in ((False, "b32"), (True, "b64")):
    SOP2.update({
        f"s_and_{_sfx}": (_w, _logic(lambda a, b: np.asarray(a) & b)),
        f"s_or_{_sfx}": (_w, _logic(lambda a, b: np.asarray(a) | b)),
        f"s_xor_{_sfx}": (_w, _logic(lambda a, b: np.asarray(a) ^ b)),
        f"s_and_not1_{_sfx}": (_w, _logic(lambda a, b: np.asarray(a) & ~np.asarray(b))),
        f"s_or_not1_{_sfx}": (_w, _logic(lambda a, b: np.asarray(a) | ~np.asarray(b))),
        f"s_nand_{_sfx}": (_w, _logic(lambda a, b: ~(np.asarray(a) & b))),
        f"s_nor_{_sfx}": (_w, _logic(lambda a, b: ~(np.asarray(a) | b))),
        f"s_xnor_{_sfx}": (_w, _logic(lambda a, b: ~(np.asarray(a) ^ b))),
    })

SOPC: dict[str, tuple[bool, Callable]] = {
    "s_bitcmp0_b32": (False, lambda a, b: _bit(a, b) == 0),
    "s_bitcmp1_b32": (False, lambda a, b: _bit(a, b) == 1),
    "s_cmp_eq_u64": (True, lambda a, b: np.asarray(a) == b),
    "s_cmp_lg_u64": (True, lambda a, b: np.asarray(a) != b),
    "s_bitcmp0_b64": (True, lambda a, b: ((np.asarray(a, u64) >> (np.asarray(b, u64) & u64(63)))
                                          & u64(1)) == 0),
    "s_bitcmp1_b64": (True, lambda a, b: ((np.asarray(a, u64) >> (np.asarray(b, u64) & u64(63)))
                                          & u64(1)) == 1),
}
for _c, _fn in (("eq", np.equal), ("lg", np.not_equal), ("gt", np.greater),
                ("ge", np.greater_equal), ("lt", np.less), ("le", np.less_equal)):
    SOPC[f"s_cmp_{_c}_u32"] = (False, lambda a, b, fn=_fn: fn(np.asarray(a, u32), b))
    SOPC[f"s_cmp_{_c}_i32"] = (False, lambda a, b, fn=_fn: fn(_s32(a), _s32(b)))


def _popcount32(x):
    x = np.asarray(x, u32)
    bits = np.unpackbits(np.atleast_1d(x).astype("<u4").view(np.uint8)).reshape(-1, 32)
    return bits.sum(-1).astype(u32).reshape(x.shape)


def _count64(a, bit):
    a = np.asarray(a, u64)
    ones = _popcount32((a & u64(0xFFFFFFFF)).astype(u32)) + _popcount32((a >> u64(32)).astype(u32))
    r = ones if bit else u32(64) - ones
    return r, _nz(r)


def _wqm(a):  # whole quad mode: a lane is on when any lane of its quad is
    a = np.asarray(a, u32)
    out = np.zeros_like(a)
    for q in range(8):
        quad = (a >> u32(4 * q)) & u32(15)
        out |= np.where(quad != 0, u32(15) << u32(4 * q), u32(0))
    return out


def _quadmask(a):  # one bit per quad: set when any lane of the quad is
    a = np.asarray(a, u32)
    out = np.zeros_like(a)
    for q in range(8):
        out |= np.where(((a >> u32(4 * q)) & u32(15)) != 0, u32(1) << u32(q), u32(0))
    return out


def _wqm64(a):
    a = np.asarray(a, u64)
    out = np.zeros_like(a)
    for q in range(16):
        out |= np.where((a >> u64(4 * q)) & u64(15) != 0, u64(15) << u64(4 * q), u64(0))
    return out


def _quadmask64(a):
    a = np.asarray(a, u64)
    out = np.zeros_like(a)
    for q in range(16):
        out |= np.where((a >> u64(4 * q)) & u64(15) != 0, u64(1) << u64(q), u64(0))
    return out


def _bitreplicate(a):  # each bit of a 32-bit source twice: bit i -> bits 2i and 2i+1
    a = np.asarray(a, u64) & u64(0xFFFFFFFF)
    out = np.zeros_like(a)
    for i in range(32):
        out |= ((a >> u64(i)) & u64(1)) * (u64(3) << u64(2 * i))
    return out


def _ff1(x, wide):
    x = np.asarray(x, u64 if wide else u32)
    out = np.full(x.shape, 0xFFFFFFFF, dtype=u32)
    nz = x != 0
    low = x & (~x + (u64(1) if wide else u32(1)))
    out[nz] = np.round(np.log2(low[nz].astype(np.float64))).astype(u32)
    return out


def _flbit(x):
    x = np.asarray(x, u32)
    out = np.full(x.shape, 0xFFFFFFFF, dtype=u32)
    nz = x != 0
    out[nz] = (31 - np.floor(np.log2(x[nz].astype(np.float64)))).astype(u32)
    return out


# name: (wide source, wide result, fn(a) -> (result, scc or None); None: s_cmov)
Sop1Spec = tuple[bool, bool, Callable | None]
SOP1: dict[str, Sop1Spec] = {
    "s_mov_b32": (False, False, lambda a: (a, None)),
    "s_mov_b64": (True, True, lambda a: (a, None)),
    "s_cmov_b32": (False, False, None),
    "s_cmov_b64": (True, True, None),
    "s_not_b32": (False, False, lambda a: (~np.asarray(a, u32), _nz(~np.asarray(a, u32)))),
    "s_not_b64": (True, True, lambda a: (~np.asarray(a, u64), _nz(~np.asarray(a, u64)))),
    "s_brev_b32": (False, False, lambda a: (_brev(a), None)),
    "s_bcnt1_i32_b32": (False, False, lambda a: (_popcount32(a), _nz(_popcount32(a)))),
    "s_ctz_i32_b32": (False, False, lambda a: (_ff1(a, False), None)),
    "s_ctz_i32_b64": (True, False, lambda a: (_ff1(a, True), None)),
    "s_clz_i32_u32": (False, False, lambda a: (_flbit(a), None)),
    "s_sext_i32_i8": (False, False, lambda a: (_sext(a, np.uint8, np.int8), None)),
    "s_sext_i32_i16": (False, False, lambda a: (_sext(a, np.uint16, np.int16), None)),
    "s_abs_i32": (False, False, lambda a: (np.abs(_s32(a)).astype(u32), _nz(a))),
    "s_bcnt0_i32_b32": (False, False, lambda a: (u32(32) - _popcount32(a),
                                                 _nz(u32(32) - _popcount32(a)))),
    "s_bcnt1_i32_b64": (True, False, lambda a: _count64(a, 1)),
    "s_bcnt0_i32_b64": (True, False, lambda a: _count64(a, 0)),
    "s_brev_b64": (True, True, lambda a: ((_brev(np.asarray(a, u64) & u64(0xFFFFFFFF)).astype(u64)
                                           << u64(32)) | _brev(np.asarray(a, u64) >> u64(32)),
                                          None)),
    "s_cls_i32": (False, False, lambda a: (_flbit(np.where(_s32(a) < 0, ~np.asarray(a, u32),
                                                           np.asarray(a, u32))), None)),
    "s_wqm_b32": (False, False, lambda a: (_wqm(a), _nz(_wqm(a)))),
    "s_quadmask_b32": (False, False, lambda a: (_quadmask(a), _nz(_quadmask(a)))),
    "s_wqm_b64": (True, True, lambda a: (_wqm64(a), _nz(_wqm64(a)))),
    "s_quadmask_b64": (True, True, lambda a: (_quadmask64(a), _nz(_quadmask64(a)))),
    "s_bitreplicate_b64_b32": (False, True, lambda a: (_bitreplicate(a), None)),
}


def run_sop2(g: WaveGroup, inst: d.Instruction, wide: bool, fn: Callable) -> None:
    f = inst.f
    a = g.sread(f["ssrc0"], inst.literal, wide)
    b = g.sread(f["ssrc1"], inst.literal, wide)
    result, scc = fn(a, b)
    g.swrite(f["sdst"], np.broadcast_to(result, (g.count,)), wide)
    if scc is not None:
        g.scc = np.broadcast_to(np.asarray(scc, bool), (g.count,)).copy()


def run_sopc(g: WaveGroup, inst: d.Instruction, wide: bool, fn: Callable) -> None:
    a = g.sread(inst.f["ssrc0"], inst.literal, wide)
    b = g.sread(inst.f["ssrc1"], inst.literal, wide)
    g.scc = np.broadcast_to(np.asarray(fn(a, b), bool), (g.count,)).copy()


def run_addc(g: WaveGroup, inst: d.Instruction, sub: bool) -> None:
    a = np.asarray(g.sread(inst.f["ssrc0"], inst.literal), u64)
    b = np.asarray(g.sread(inst.f["ssrc1"], inst.literal), u64)
    c = g.scc.astype(u64)
    if sub:
        r = a - b - c
        carry = a < b + c
    else:
        r = a + b + c
        carry = r > M32
    g.swrite(inst.f["sdst"], np.broadcast_to((r & M32).astype(u32), (g.count,)))
    g.scc = np.broadcast_to(carry, (g.count,)).copy()


def run_cselect(g: WaveGroup, inst: d.Instruction, wide: bool) -> None:
    a = np.broadcast_to(g.sread(inst.f["ssrc0"], inst.literal, wide), (g.count,))
    b = np.broadcast_to(g.sread(inst.f["ssrc1"], inst.literal, wide), (g.count,))
    g.swrite(inst.f["sdst"], np.where(g.scc, a, b), wide)


def run_sop1(g: WaveGroup, inst: d.Instruction, spec: Sop1Spec) -> None:
    wide_in, wide_out, fn = spec
    a = g.sread(inst.f["ssrc0"], inst.literal, wide_in)
    if fn is None:  # s_cmov
        old = g.sread(inst.f["sdst"], None, wide_out) if inst.f["sdst"] < 128 else a
        g.swrite(inst.f["sdst"], np.where(g.scc, a, old), wide_out)
        return
    result, scc = fn(a)
    g.swrite(inst.f["sdst"], np.broadcast_to(result, (g.count,)), wide_out)
    if scc is not None:
        g.scc = np.broadcast_to(np.asarray(scc, bool), (g.count,)).copy()


def _flbit64(x):
    x = np.asarray(x, u64)
    hi = _flbit((x >> u64(32)).astype(u32))
    lo = _flbit((x & u64(0xFFFFFFFF)).astype(u32))
    return np.where(hi != u32(0xFFFFFFFF), hi, np.where(lo != u32(0xFFFFFFFF), lo + u32(32), lo))


def _cls64(x):
    x = np.asarray(x, u64)
    neg = (x >> u64(63)) != 0
    return _flbit64(np.where(neg, ~x, x))


SOP1.update({
    "s_clz_i32_u64": (True, False, lambda a: (_flbit64(a), None)),
    "s_cls_i32_i64": (True, False, lambda a: (_cls64(a), None)),
})


def run_bitset(g: WaveGroup, inst: d.Instruction, one: bool, wide: bool) -> None:
    """s_bitset0/1: clear or set bit ssrc0[4:0] (5:0 for b64) of sdst."""
    bit = np.asarray(g.sread(inst.f["ssrc0"], inst.literal), u64) & u64(63 if wide else 31)
    dst = inst.f["sdst"]
    old = np.asarray(g.sread(dst, None, wide) if dst < 128 else u64(0), u64)
    mask = u64(1) << bit
    g.swrite(dst, np.broadcast_to((old | mask) if one else (old & ~mask), (g.count,)).astype(
        u64 if wide else u32), wide)


def run_movrel(g: WaveGroup, inst: d.Instruction, dest: bool, wide: bool) -> None:
    """s_movrels: sdst = SGPR[ssrc0 + M0]; s_movreld: SGPR[sdst + M0] = ssrc0."""
    m0 = g.s[:, d.M0].astype(np.int64)
    rows = np.arange(g.count)
    n = 2 if wide else 1
    if dest:
        value = np.broadcast_to(np.asarray(g.sread(inst.f["ssrc0"], inst.literal, wide)),
                                (g.count,))
        base = inst.f["sdst"] + m0
        words = ([value & u64(0xFFFFFFFF), value >> u64(32)] if wide else [value])
        for k in range(n):
            reg = base + k
            ok = reg < 106  # writes past the SGPRs are dropped
            g.s[rows[ok], reg[ok]] = np.asarray(words[k], u64)[ok].astype(u32)
    else:
        reg = inst.f["ssrc0"] + m0
        for k in range(n):
            r = reg + k
            ok = r < 106
            out = np.zeros(g.count, u32)
            out[ok] = g.s[rows[ok], r[ok]]
            g.swrite(inst.f["sdst"] + k, out)


# s_sendmsg_rtn message ids (gfx11): the ones a compute kernel reads
MSG_RTN_GET_DOORBELL, MSG_RTN_GET_DDID, MSG_RTN_GET_TMA, MSG_RTN_GET_REALTIME = 128, 129, 130, 131
MSG_RTN_GET_TBA = 133


def run_sendmsg_rtn(g: WaveGroup, inst: d.Instruction, wide: bool) -> None:
    """s_sendmsg_rtn: the message id is the ssrc0 field itself (never a register or a
    literal). GET_REALTIME returns a 100 MHz-style counter; here a monotonic nanosecond
    clock, so clock64-style timing code sees time advance."""
    import time

    msg = inst.f["ssrc0"]
    if msg == MSG_RTN_GET_REALTIME:
        value = np.uint64(time.monotonic_ns() // 10)
    elif msg in (MSG_RTN_GET_DOORBELL, MSG_RTN_GET_DDID, MSG_RTN_GET_TMA, MSG_RTN_GET_TBA):
        value = np.uint64(0)
    else:
        raise IllegalInstruction(
            HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
            f"s_sendmsg_rtn message {msg} is not one the virtual GPU answers (it answers "
            "MSG_RTN_GET_REALTIME, GET_DOORBELL, GET_DDID, GET_TMA and GET_TBA)")
    g.swrite(inst.f["sdst"], np.broadcast_to(value if wide else np.uint32(value & 0xFFFFFFFF),
                                             (g.count,)), wide)


def run_saveexec(g: WaveGroup, inst: d.Instruction, name: str) -> None:
    """s_<op>_saveexec_b32 and friends: sdst = EXEC; EXEC = op(src, EXEC); SCC = EXEC != 0."""
    wide = name.endswith("b64")
    a = np.asarray(g.sread(inst.f["ssrc0"], inst.literal, wide))
    ex = np.asarray(g.sread(d.EXEC_LO, None, wide))
    op = name[2:].split("_saveexec")[0].split("_wrexec")[0]
    ops = {
        "and": lambda: a & ex, "or": lambda: a | ex, "xor": lambda: a ^ ex,
        "nand": lambda: ~(a & ex), "nor": lambda: ~(a | ex), "xnor": lambda: ~(a ^ ex),
        "and_not0": lambda: ~ex & a, "or_not0": lambda: ~ex | a,
        "and_not1": lambda: a & ~ex, "or_not1": lambda: a | ~ex,
    }
    result = np.broadcast_to(ops[op](), (g.count,))
    if "_wrexec" in name:  # s_and_not{0,1}_wrexec: sdst = EXEC = result
        g.swrite(d.EXEC_LO, result, wide)
        g.swrite(inst.f["sdst"], result, wide)
    else:
        g.swrite(inst.f["sdst"], np.broadcast_to(ex, (g.count,)), wide)
        g.swrite(d.EXEC_LO, result, wide)
    g.scc = result != 0
    g.exec_changed()


def run_sopk(g: WaveGroup, inst: d.Instruction, name: str) -> None:
    simm = inst.f["simm16"]
    sext = simm - 0x10000 if simm & 0x8000 else simm
    dst = inst.f["sdst"]
    if name == "s_movk_i32":
        g.swrite(dst, np.uint32(sext & 0xFFFFFFFF))
    elif name == "s_cmovk_i32":
        g.s[:, dst] = np.where(g.scc, np.uint32(sext & 0xFFFFFFFF), g.s[:, dst])
    elif name == "s_addk_i32":
        r = _s32(g.s[:, dst]) + sext
        g.s[:, dst] = r.astype(u32)
        g.scc = (r > 2**31 - 1) | (r < -(2**31))
    elif name == "s_mulk_i32":
        g.s[:, dst] = (_s32(g.s[:, dst]) * sext).astype(u32)
    elif name.startswith("s_cmpk_"):
        cond, t = name.split("_")[2:4]
        a = _s32(g.s[:, dst]) if t == "i32" else g.s[:, dst].astype(i64)
        b = sext if t == "i32" else simm
        fn = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal,
              "lt": np.less, "le": np.less_equal}[cond]
        g.scc = fn(a, b)
    elif name == "s_getreg_b32":
        g.swrite(dst, np.uint32(0))
    elif name in ("s_setreg_b32", "s_setreg_imm32_b32", "s_version") or name.startswith(
            "s_waitcnt"):
        pass
    else:
        raise KeyError(name)


def compile_salu(inst: d.Instruction) -> Callable[[WaveGroup], None] | None:
    name = inst.name
    enc = inst.encoding
    fn = compile_sfloat(inst)  # gfx12's scalar float ALU
    if fn is not None:
        return fn
    if enc == "SOP2":
        if name in ("s_addc_u32", "s_subb_u32"):
            return lambda g: run_addc(g, inst, name == "s_subb_u32")
        if name in ("s_cselect_b32", "s_cselect_b64"):
            return lambda g: run_cselect(g, inst, name.endswith("b64"))
        sop2 = SOP2.get(name)
        if sop2 is None:
            return None
        wide, op2 = sop2
        return lambda g: run_sop2(g, inst, wide, op2)
    if enc == "SOPC":
        sopc = SOPC.get(name)
        if sopc is None:
            return None
        wide, compare = sopc
        return lambda g: run_sopc(g, inst, wide, compare)
    if enc == "SOP1":
        if "saveexec" in name or "wrexec" in name:
            return lambda g: run_saveexec(g, inst, name)
        if name.startswith("s_bitset"):
            return lambda g: run_bitset(g, inst, name.startswith("s_bitset1"),
                                        name.endswith("b64"))
        if name in ("s_movrels_b32", "s_movrels_b64", "s_movreld_b32", "s_movreld_b64"):
            return lambda g: run_movrel(g, inst, "movreld" in name, name.endswith("b64"))
        if name in ("s_sendmsg_rtn_b32", "s_sendmsg_rtn_b64"):
            return lambda g: run_sendmsg_rtn(g, inst, name.endswith("b64"))
        sop1 = SOP1.get(name)
        if sop1 is None:
            return None
        return lambda g: run_sop1(g, inst, sop1)
    if enc == "SOPK":
        if name in ("s_call_b64", "s_subvector_loop_begin", "s_subvector_loop_end"):
            return None
        return lambda g: run_sopk(g, inst, name)
    return None
