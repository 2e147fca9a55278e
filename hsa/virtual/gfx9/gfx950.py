"""What gfx950 (CDNA4) adds to the gfx9 family: v_bitop3, the permlane swaps, the LDS
transpose reads, v_prng, and the new v_cvt forms (pk_bf16/pk_f16/sr/ashr_pk).

Facts: AMD's CDNA4 ISA guide and LLVM (the bitop3 truth-table index is S0 bit 2, S1 bit 1,
S2 bit 0: LLVM folds logic into it with the source masks 0xf0, 0xcc, 0xaa; its 8 bits sit in
the VOP3 neg (bits 2:0), abs (5:3) and omod (7:6) fields, as clang 22 assembles them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hsa.virtual.isa import mem
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup
from hsa.virtual.isa.valu import AluForm, read_src, write_result

u32, f32 = np.uint32, np.float32


# --- v_bitop3 ------------------------------------------------------------------------------
def bitop3_table(f: dict) -> int:
    """The truth table of a v_bitop3 instruction's fields."""
    return (f["neg"] & 7) | (f["abs"] & 7) << 3 | (f["omod"] & 3) << 6


def bitop3(a, b, c, table: int, bits: int = 32):
    """Bit i of the result is table bit (a_i << 2 | b_i << 1 | c_i): the table's shortest
    form of at most two word operations on a, b, c or their complements where it has one
    (IREE's byte merges use a | (b & c) and b | (a & c)), else Shannon's expansion on a,
    then b (a few word operations instead of one term per minterm)."""
    a, b, c = (np.asarray(x, u32) for x in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    ones = u32(0xFFFFFFFF)
    form = _SHORT_FORMS.get(table)
    if form is not None:
        out, fresh = form(a, b, c)
    else:
        def of_c(t: int):  # the 2-entry table t (bit 1: c = 1, bit 0: c = 0) of c
            return (u32(0), ~c, c, ones)[t]

        def of_bc(t: int):  # the 4-entry table t over (b, c)
            hi, lo = of_c(t >> 2), of_c(t & 3)
            return lo if t >> 2 == t & 3 else (b & hi) | (~b & lo)

        hi, lo = of_bc(table >> 4), of_bc(table & 15)
        out = lo if table >> 4 == table & 15 else (a & hi) | (~a & lo)
        fresh = False
    out = np.asarray(out, u32)
    if bits < 32:
        out = out & u32((1 << bits) - 1)
        fresh = True
    if fresh and out.shape == shape:
        return out
    return np.broadcast_to(out, shape).copy()


def _short_forms() -> dict[int, Callable]:
    """Truth table -> fn(a, b, c) giving (value, whether it is a new array) for the tables
    that one or two word operations on the inputs or their complements compute, the
    cheapest found first (a complement costs an operation too)."""
    ops = ((np.bitwise_and, lambda x, y: x & y), (np.bitwise_or, lambda x, y: x | y),
           (np.bitwise_xor, lambda x, y: x ^ y))
    # literals: (truth table, cost, fn of (a, b, c))
    lits = [(0xF0, 0, lambda a, b, c: a), (0xCC, 0, lambda a, b, c: b),
            (0xAA, 0, lambda a, b, c: c), (0x0F, 1, lambda a, b, c: ~a),
            (0x33, 1, lambda a, b, c: ~b), (0x55, 1, lambda a, b, c: ~c)]
    found: dict[int, tuple[int, Callable]] = {}

    def offer(t: int, cost: int, fn: Callable) -> None:
        if t not in found or cost < found[t][0]:
            found[t] = (cost, fn)

    pairs = []
    for i, (tx, cx, fx) in enumerate(lits):
        for ty, cy, fy in lits[i + 1:]:
            for ufunc, tt in ops:
                t = tt(tx, ty) & 0xFF

                def pair(a, b, c, fx=fx, fy=fy, ufunc=ufunc):
                    return ufunc(fx(a, b, c), fy(a, b, c))
                pairs.append((t, cx + cy + 1, pair))
                offer(t, cx + cy + 1, pair)
    for tx, cx, fx in lits:
        for ty, cy, fy in pairs:
            for ufunc, tt in ops:
                def nested(a, b, c, fx=fx, fy=fy, ufunc=ufunc):
                    return ufunc(fx(a, b, c), fy(a, b, c))
                offer(tt(tx, ty) & 0xFF, cx + cy + 1, nested)
    forms = {}
    for t, (cost, fn) in found.items():
        if cost >= 1:  # an operation ran: a new array
            forms[t] = lambda a, b, c, fn=fn: (fn(a, b, c), True)
    return forms


_SHORT_FORMS = _short_forms()


def _compile_bitop3(inst: d.Instruction) -> Callable[[WaveGroup], None]:
    form = AluForm(inst)
    table = bitop3_table(inst.f)
    form.abs = form.neg = form.omod = 0  # those fields hold the table, not modifiers
    t, bits = ("u16", 16) if inst.name.startswith("v_bitop3_b16") else ("u32", 32)

    def run(g: WaveGroup) -> None:
        args = [read_src(g, form, k, t) for k in range(3)]
        write_result(g, form, bitop3(args[0], args[1], args[2], table, bits), t)

    return run


# --- permlane swaps --------------------------------------------------------------------------
def permlane_swap_partner(lanes: int, rows: int) -> np.ndarray:
    """v_permlane16_swap (rows=1) / v_permlane32_swap (rows=2): lane l of vdst trades with
    lane partner[l] of src0. Odd 16-lane rows of vdst swap with even rows of src0 (16), rows
    2-3 of vdst with rows 0-1 of src0 (32)."""
    lane = np.arange(lanes)
    return lane ^ (16 * rows)


def _compile_permlane_swap(inst: d.Instruction) -> Callable[[WaveGroup], None]:
    rows = 2 if "permlane32" in inst.name else 1
    vdst, src = inst.f["vdst"], inst.f["src0"] - d.VGPR0
    # the lanes of vdst that take src0's values: odd rows (16) or the upper half (32)
    lane = np.arange(64)
    upper = (lane // (16 * rows)) % 2 == 1

    def run(g: WaveGroup) -> None:
        n = g.lanes
        partner = permlane_swap_partner(n, rows)
        take = upper[:n]
        old_d, old_s = g.v[vdst].copy(), g.v[src].copy()
        exec_ = g.exec_mask()
        new_d = np.where(take, old_s[:, partner], old_d)
        new_s = np.where(take[partner], old_d[:, partner], old_s)
        np.copyto(g.v[vdst], new_d, where=exec_)
        np.copyto(g.v[src], new_s, where=exec_)

    return run


# --- conversions -----------------------------------------------------------------------------
def f32_to_bf16_rne(x) -> np.ndarray:
    b = np.asarray(x, f32).view(u32)
    nan = (b & u32(0x7FFFFFFF)) > u32(0x7F800000)
    r = (b.astype(np.uint64) + 0x7FFF + ((b >> u32(16)) & u32(1))) >> 16
    return np.where(nan, (b >> u32(16)) | u32(0x40), r.astype(u32)).astype(u32) & u32(0xFFFF)


def f32_to_f16_bits(x) -> np.ndarray:
    return np.asarray(x, f32).astype(np.float16).view(np.uint16).astype(u32)


def sr_bf16(x, rand) -> np.ndarray:
    """Stochastic rounding to bf16: the random bits are added below the kept 16 bits, then
    truncated (NaN stays NaN)."""
    b = np.asarray(x, f32).view(u32)
    nan = (b & u32(0x7FFFFFFF)) > u32(0x7F800000)
    r = ((b.astype(np.uint64) + (np.asarray(rand, u32) & u32(0xFFFF))) >> 16).astype(u32)
    inf = (b & u32(0x7FFFFFFF)) == u32(0x7F800000)
    return np.where(nan, (b >> u32(16)) | u32(0x40), np.where(inf, b >> u32(16), r)) & u32(
        0xFFFF)


def sr_f16(x, rand) -> np.ndarray:
    """Stochastic rounding to f16: random bits added below f16's precision at x's exponent,
    truncated, then the (now exact) value converted."""
    x = np.asarray(x, f32)
    mag = np.abs(x)
    exp = np.floor(np.log2(np.where(mag > 0, mag, 1))).astype(np.int64)
    drop = 13 + np.clip(-14 - exp, 0, 11)  # f32 mantissa bits below f16's (more for denormals)
    b = mag.view(u32).astype(np.int64)
    mask = (np.int64(1) << drop) - 1
    r = ((b + (np.asarray(rand, u32).astype(np.int64) & mask)) & ~mask).astype(u32).view(f32)
    out = np.where(np.isfinite(x), np.copysign(r, x), x)
    return f32_to_f16_bits(out)


def _sat(x, lo, hi):
    return np.clip(x, lo, hi)


def _compile_cvt(inst: d.Instruction, name: str) -> Callable[[WaveGroup], None] | None:
    form = AluForm(inst)

    def pk(fn) -> Callable[[WaveGroup], None]:
        def run(g: WaveGroup) -> None:
            a, b = read_src(g, form, 0, "f32"), read_src(g, form, 1, "f32")
            form_bits = fn(a) | (fn(b) << u32(16))
            write_result(g, form, form_bits, "u32")
        return run

    if name == "v_cvt_pk_bf16_f32":
        return pk(f32_to_bf16_rne)
    if name == "v_cvt_pk_f16_f32":
        return pk(f32_to_f16_bits)
    if name in ("v_cvt_sr_bf16_f32", "v_cvt_sr_f16_f32"):
        fn = sr_bf16 if "bf16" in name else sr_f16
        form.zero_hi16 = False  # the other half of vdst is kept (LLVM ties vdst_in)

        def run_sr(g: WaveGroup) -> None:
            a, r = read_src(g, form, 0, "f32"), read_src(g, form, 1, "u32")
            write_result(g, form, fn(a, r), "u16")
        return run_sr
    if name in ("v_ashr_pk_i8_i32", "v_ashr_pk_u8_i32"):
        lo, hi = (-128, 127) if "i8" in name else (0, 255)

        def run_ashr(g: WaveGroup) -> None:
            a, b = (read_src(g, form, k, "i32").astype(np.int64) for k in (0, 1))
            s = read_src(g, form, 2, "u32").astype(np.int64) & 31
            pa = _sat(a >> s, lo, hi).astype(np.int64) & 0xFF
            pb = _sat(b >> s, lo, hi).astype(np.int64) & 0xFF
            write_result(g, form, (pa | pb << 8).astype(u32), "u16")
        return run_ashr
    if name == "v_cvt_f32_bf16":
        def run_ext(g: WaveGroup) -> None:
            raw = read_src(g, form, 0, "u32")
            h = raw >> u32(16) if form.opsel & 1 else raw & u32(0xFFFF)
            write_result(g, form, (h << u32(16)).astype(u32), "u32")
        return run_ext
    if name == "v_prng_b32":
        def run_prng(g: WaveGroup) -> None:
            x = read_src(g, form, 0, "u32")
            write_result(g, form, (x << u32(1)) ^ np.where(x >> u32(31), u32(197), u32(0)),
                         "u32")
        return run_prng
    if name in ("v_minimum3_f32", "v_maximum3_f32"):
        pick = np.minimum if "minimum" in name else np.maximum  # NaN-propagating, -0 < +0

        def run_mm(g: WaveGroup) -> None:
            a, b, c = (read_src(g, form, k, "f32") for k in range(3))
            write_result(g, form, pick(pick(a, b), c), "f32")
        return run_mm
    return None


# --- LDS transpose reads -------------------------------------------------------------------
_TR = {"ds_read_b64_tr_b4": (4, 2), "ds_read_b64_tr_b8": (8, 2), "ds_read_b64_tr_b16": (16, 2),
       "ds_read_b96_tr_b6": (6, 3)}


def transpose_lanes(words: np.ndarray, bits: int) -> np.ndarray:
    """The exchange of ds_read_b*_tr_b<bits> on (lanes, dwords) loaded words: within each
    block of 16 lanes the loaded elements form a tile of E rows (E = elements per lane) of 16
    columns, row r held by lanes r*16/E ...; lane i receives column i, row j as its element
    j: out[i][j] = in[j * 16/E + i // E][i % E]."""
    n, nw = words.shape
    per = 32 * nw // bits  # elements per lane
    if bits in (8, 16):  # whole bytes: a transpose of a typed view, no bit unpacking
        # lane i = i1 * E + i0 gets element j = in[j * 16/E + i1][i0]: (j, i1, i0) -> (i1, i0, j)
        typed = np.ascontiguousarray(words, "<u4").view(f"<u{bits // 8}")
        blocks = typed.reshape(n // 16, per, 16 // per, per)
        out = np.ascontiguousarray(blocks.transpose(0, 2, 3, 1))
        return out.reshape(n, per).view("<u4").reshape(n, nw)
    raw = np.unpackbits(np.ascontiguousarray(words.astype("<u4")).view(np.uint8),
                        bitorder="little").reshape(n, per, bits)
    i = np.arange(16)[:, None]
    j = np.arange(per)[None, :]
    src_lane = j * (16 // per) + i // per  # (16, per)
    src_elem = np.broadcast_to(i % per, src_lane.shape)
    blocks = raw.reshape(n // 16, 16, per, bits)
    out = blocks[:, src_lane, src_elem]  # (blocks, 16, per, bits)
    packed = np.packbits(out.reshape(n, per * bits), axis=1, bitorder="little")
    return packed.view("<u4").reshape(n, nw)


def _compile_ds_tr(inst: d.Instruction, name: str) -> Callable | None:
    bits, nw = _TR[name]
    f = inst.f
    offset = f["offset0"] | (f["offset1"] << 8)

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is None and nw == 2:  # every lane, 8-byte aligned in range: one u64 gather
            got = ctx.lds_gather(g, g.v[f["addr"]], offset, np.dtype("<u8"))
            if got is not None:
                out = transpose_lanes(got.view(u32).reshape(-1, 2), bits)
                for k in range(nw):
                    mem._put(g, f["vdst"] + k, None, out[:, k])
                return
        space, addr = ctx.lds_space(g, inst, mem._sel(g.v[f["addr"]], idx), idx)
        got = space.gather_words(addr + offset, nw)
        full = np.zeros((g.count * g.lanes, nw), u32)
        if idx is None:
            full[:] = got
        else:
            full[idx] = got
        out = transpose_lanes(full, bits)
        for k in range(nw):
            mem._put(g, f["vdst"] + k, idx, out[:, k] if idx is None else out[idx, k])

    return run


# --- the hook --------------------------------------------------------------------------------
_CVT = ("v_cvt_pk_bf16_f32", "v_cvt_pk_f16_f32", "v_cvt_sr_bf16_f32", "v_cvt_sr_f16_f32",
        "v_ashr_pk_i8_i32", "v_ashr_pk_u8_i32", "v_cvt_f32_bf16", "v_prng_b32",
        "v_minimum3_f32", "v_maximum3_f32")


def compile_alu(inst: d.Instruction, name: str) -> Callable[[WaveGroup], None] | None:
    """gfx950-only VALU semantics for `inst` (base name `name`), or None."""
    if inst.encoding not in ("VOP1", "VOP2", "VOP3"):
        return None
    if name in ("v_bitop3_b32", "v_bitop3_b16"):
        return _compile_bitop3(inst)
    if name in ("v_permlane16_swap_b32", "v_permlane32_swap_b32"):
        return _compile_permlane_swap(inst)
    return _compile_cvt(inst, name) if name in _CVT else None


def compile_memory(inst: d.Instruction, name: str) -> Callable | None:
    if name in _TR:
        return _compile_ds_tr(inst, name)
    return None


__all__ = ["bitop3", "compile_alu", "compile_memory", "transpose_lanes"]
