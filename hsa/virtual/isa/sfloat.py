"""The scalar float ALU that gfx1150 and gfx12 added (SOP1/SOP2/SOPC f32 and f16 ops).

A scalar float register is a (waves,) column of bits; an f16 operand is the low half of an
SGPR and an f16 result is written zero-extended (RDNA4 ISA guide, "Scalar ALU float
operations"). Arithmetic rounds to nearest even as the VALU does here; fused ops are
rounded once (`valu._fma`, `valu._fma16`). s_min_num/s_max_num are IEEE minimumNumber /
maximumNumber (a NaN operand yields the other), s_minimum/s_maximum propagate NaN and
order -0 below +0. The float compares set SCC; the n* forms are the negations (true when
either operand is NaN).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hsa.virtual.isa import operands as d
from hsa.virtual.isa import valu
from hsa.virtual.isa.state import WaveGroup
from hsa.virtual.isa.valu import _cvt_i32, _cvt_u32, _fma, _fma16, rtz_f16
from hsa.virtual.isa.valu import maximum as _maximum
from hsa.virtual.isa.valu import minimum as _minimum

u16, u32, f16, f32 = np.uint16, np.uint32, np.float16, np.float32


def _f32(x) -> np.ndarray:
    return np.asarray(x, u32).view(f32)


def _h(x) -> np.ndarray:
    """The f16 in the low half of each register, as f32 (exact)."""
    return (np.asarray(x, u32) & u32(0xFFFF)).astype(u16).view(f16).astype(f32)


def _b32(x) -> np.ndarray:
    return np.asarray(x, f32).view(u32)


def _b16(x) -> np.ndarray:
    """An f32 value rounded once to f16, zero-extended to 32 bits."""
    return np.asarray(np.asarray(x).astype(f16)).view(u16).astype(u32)


# SOP1: name -> fn(a bits) -> result bits
SOP1: dict[str, Callable] = {
    "s_cvt_f32_i32": lambda a: _b32(np.asarray(a, u32).view(np.int32).astype(f32)),
    "s_cvt_f32_u32": lambda a: _b32(np.asarray(a, u32).astype(f32)),
    "s_cvt_i32_f32": lambda a: _cvt_i32(_f32(a)),
    "s_cvt_u32_f32": lambda a: _cvt_u32(_f32(a)),
    "s_cvt_f16_f32": lambda a: _b16(_f32(a)),
    "s_cvt_f32_f16": lambda a: _b32(_h(a)),
    "s_cvt_hi_f32_f16": lambda a: _b32(_h(np.asarray(a, u32) >> u32(16))),
    "s_ceil_f32": lambda a: _b32(np.ceil(_f32(a))),
    "s_floor_f32": lambda a: _b32(np.floor(_f32(a))),
    "s_trunc_f32": lambda a: _b32(np.trunc(_f32(a))),
    "s_rndne_f32": lambda a: _b32(np.rint(_f32(a))),
    "s_ceil_f16": lambda a: _b16(np.ceil(_h(a))),
    "s_floor_f16": lambda a: _b16(np.floor(_h(a))),
    "s_trunc_f16": lambda a: _b16(np.trunc(_h(a))),
    "s_rndne_f16": lambda a: _b16(np.rint(_h(a))),
}

# SOP2: name -> (unpack, pack, fn(a, b, c, k)) where c is the old destination (fmac) and k
# the literal constant (fmaak/fmamk), both already unpacked
_ARITH = {
    "add": lambda a, b, c, k: a + b,
    "sub": lambda a, b, c, k: a - b,
    "mul": lambda a, b, c, k: a * b,
    "min_num": lambda a, b, c, k: valu.min_num(a, b),
    "max_num": lambda a, b, c, k: valu.max_num(a, b),
    "minimum": lambda a, b, c, k: _minimum(a, b),
    "maximum": lambda a, b, c, k: _maximum(a, b),
}
SOP2: dict[str, tuple[Callable, Callable, Callable]] = {}
for _op, _fn in _ARITH.items():
    SOP2[f"s_{_op}_f32"] = (_f32, _b32, _fn)
    # f16 add/sub/mul in f32 then one rounding to f16: f32 holds the exact product of two
    # f16 and 24 >= 2 * 11 + 2 bits make the double rounding of a sum innocuous
    SOP2[f"s_{_op}_f16"] = (_h, _b16, _fn)
SOP2.update({
    "s_fmac_f32": (_f32, _b32, lambda a, b, c, k: _fma(a, b, c)),
    "s_fmaak_f32": (_f32, _b32, lambda a, b, c, k: _fma(a, b, k)),
    "s_fmamk_f32": (_f32, _b32, lambda a, b, c, k: _fma(a, k, b)),
    "s_fmac_f16": (_h, _b16, lambda a, b, c, k: _fma16(a, b, c)),
    "s_fmaak_f16": (_h, _b16, lambda a, b, c, k: _fma16(a, b, k)),
    "s_fmamk_f16": (_h, _b16, lambda a, b, c, k: _fma16(a, k, b)),
})

_CMP = {
    "eq": lambda a, b: a == b, "lg": lambda a, b: (a < b) | (a > b),
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "u": lambda a, b: np.isnan(a) | np.isnan(b),
}
_CMP.update({
    "neq": lambda a, b: ~(a == b), "nlg": lambda a, b: ~((a < b) | (a > b)),
    "ngt": lambda a, b: ~(a > b), "nge": lambda a, b: ~(a >= b),
    "nlt": lambda a, b: ~(a < b), "nle": lambda a, b: ~(a <= b),
})
SOPC: dict[str, tuple[Callable, Callable]] = {}
for _c, _cmp in _CMP.items():
    SOPC[f"s_cmp_{_c}_f32"] = (_f32, _cmp)
    SOPC[f"s_cmp_{_c}_f16"] = (_h, _cmp)


def _column(g: WaveGroup, value) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, u32), (g.count,))


def compile_v_s(inst: d.Instruction) -> Callable[[WaveGroup], None]:
    """gfx12's v_s_{exp,log,rcp,rsq,sqrt}_{f32,f16}: a VALU transcendental (VOP3, with its
    abs/neg/clamp/omod/op_sel modifiers) on a scalar source whose result goes to the SGPR
    in vdst; the VALU op's semantics, one value per wave."""
    form = valu.AluForm(inst)
    vname = "v_" + inst.name[len("v_s_"):]
    out_t, in_ts, fn = valu.OPS[vname]

    def run(g: WaveGroup) -> None:
        value = fn(valu.read_src(g, form, 0, in_ts[0]))
        if form.omod or form.clamp:
            value = np.asarray(value, f32)
            if form.omod:
                value = value * f32((2.0, 2.0, 4.0, 0.5)[form.omod])
            if form.clamp:
                value = np.clip(value, f32(0), f32(1))
        bits = np.asarray(valu.from_type(value, out_t), u32)
        # one value per wave: lane 0's of a register source; a constant (literal, inline)
        # is one value for every wave of the group
        bits = (np.full(g.count, bits.item(), u32) if bits.size == 1
                else bits.reshape(g.count, -1)[:, 0])
        if out_t == "f16":
            bits = bits & u32(0xFFFF)
        g.swrite(form.vdst, bits)

    return run


def compile_sfloat(inst: d.Instruction) -> Callable[[WaveGroup], None] | None:
    """The semantic function of a scalar float instruction, or None if `inst` is none."""
    name, f = inst.name, inst.f
    if inst.encoding == "SOP1" and name in SOP1:
        fn1 = SOP1[name]

        def run1(g: WaveGroup) -> None:
            g.swrite(f["sdst"], _column(g, fn1(g.sread(f["ssrc0"], inst.literal))))

        return run1
    if inst.encoding == "SOP2" and name in SOP2:
        unpack, pack, fn2 = SOP2[name]
        k = unpack(u32(inst.literal or 0))
        accumulates = name.startswith("s_fmac_")

        def run2(g: WaveGroup) -> None:
            a = unpack(g.sread(f["ssrc0"], inst.literal))
            b = unpack(g.sread(f["ssrc1"], inst.literal))
            c = unpack(g.sread(f["sdst"], None)) if accumulates else None
            g.swrite(f["sdst"], _column(g, pack(fn2(a, b, c, k))))

        return run2
    if inst.encoding == "SOPC" and name in SOPC:
        unpack, cmp = SOPC[name]

        def runc(g: WaveGroup) -> None:
            a = unpack(g.sread(f["ssrc0"], inst.literal))
            b = unpack(g.sread(f["ssrc1"], inst.literal))
            g.scc = np.array(np.broadcast_to(cmp(a, b), (g.count,)), bool)

        return runc
    if inst.encoding == "SOP2" and name == "s_cvt_pk_rtz_f16_f32":
        def runpk(g: WaveGroup) -> None:
            lo = rtz_f16(_f32(g.sread(f["ssrc0"], inst.literal)))
            hi = rtz_f16(_f32(g.sread(f["ssrc1"], inst.literal)))
            g.swrite(f["sdst"], _column(g, lo | (hi << u32(16))))

        return runpk
    return None


__all__ = ["SOP1", "SOP2", "SOPC", "compile_sfloat"]
