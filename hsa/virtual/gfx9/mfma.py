"""CDNA matrix instructions (v_mfma_*) on wide wave state: every shape of gfx90a, gfx942 and
gfx950's dense MFMA (single and multi-block, f32/f16/bf16/xf32/i8/f64/fp8/bf8), with the
cbsz/abid (A broadcast) and blgp (B lane pattern) controls.

The register layouts, as AMD documents them (CDNA3 ISA guide, "Matrix Arithmetic"; AMD's
matrix instruction calculator prints the same tables):
- blocks: an instruction computes B independent (M x N) = (M x K) @ (K x N) products; B is
  what the D register count implies (D holds B*M*N values).
- A (and B, with N for M): lane l holds `vals` consecutive K values of row i = l % M of
  block g % B, at k = (g // B) * vals, where g = l // M is the lane group. cbsz/abid: A of
  block b comes from block (b with its low cbsz bits replaced by abid). blgp: B of lane l
  is read from lane blgp_source(l) (broadcast or rotated lane groups).
- D and C (32-bit results): register r of lane l, with g = l // N, is row
  (r // 4) * 4 * (64 // N) + 4 * g + r % 4 of the blocks stacked on top of each other
  (B*M rows), column l % N. f64 results take two registers each: item r of lane l is
  block g % B, row g // B + (64 // N // B) * r, column l % N.

Products are exact in float64 for every input type here but f32/f64 (rounded once per
product there); the sums are float64 then rounded to the output type.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from hsa.virtual.isa import operands as d
from hsa.virtual.isa import strided
from hsa.virtual.isa.state import AGPR_ROW, WaveGroup
from hsa.virtual.isa.valu import base_name
from hsa.virtual.isa.vop3p import fp8_values

u32, f32, f64 = np.uint32, np.float32, np.float64

_MFMA = re.compile(
    r"^v_mfma_(f32|i32|f64)_(\d+)x(\d+)x(\d+)(?:_(\d+)b)?_?"
    r"(f16|bf16_1k|bf16|xf32|f32|i8|f64|(?:fp8|bf8)_(?:fp8|bf8)|f8f6f4)$")
_BYTES = {"f16": 2, "bf16": 2, "bf16_1k": 2, "f32": 4, "xf32": 4, "i8": 1, "f64": 8,
          "fp8": 1, "bf8": 1, "f8f6f4": 1}
# gfx950's f8f6f4 MFMA: cbsz (A) and blgp (B) select the operand format; fp8 and bf8 run
F8F6F4_FORMATS = {0: "fp8", 1: "bf8"}


@dataclass(frozen=True)
class MfmaShape:
    out: str  # f32 | i32 | f64
    m: int
    n: int
    k: int
    blocks: int
    a_kind: str
    b_kind: str
    vals: int  # A/B values a lane holds
    d_items: int  # D values a lane holds


def parse(name: str, sample: str) -> MfmaShape | None:
    """The shape of an MFMA from its mnemonic and LLVM's sample text (register widths)."""
    m_ = _MFMA.match(base_name(name))
    if m_ is None:
        return None
    out, m, n, k, kind = m_.group(1), *map(int, m_.groups()[1:4]), m_.group(6)
    a_kind, b_kind = kind.split("_") if kind[:3] in ("fp8", "bf8") else (kind, kind)
    widths = _operand_widths(sample)
    if len(widths) < 2 or widths[0] is None or widths[1] is None:
        return None
    d_regs, a_regs = widths[0], widths[1]
    d_items = d_regs // (2 if out == "f64" else 1)
    vals = a_regs * 4 // _BYTES[a_kind]
    blocks = d_items * 64 // (m * n)
    if blocks < 1 or 64 * vals != blocks * m * k or 64 % m or 64 % n:
        return None
    return MfmaShape(out, m, n, k, blocks, a_kind, b_kind, vals, d_items)


def _operand_widths(sample: str) -> list[int | None]:
    """Register counts of the first operands of LLVM's sample text ("v[16:31], a32, ...")."""
    out: list[int | None] = []
    for token in sample.split(None, 1)[1].split(","):
        token = token.strip().split()[0] if token.strip() else ""
        rng = re.fullmatch(r"[va]\[(\d+):(\d+)\]", token)
        if rng:
            out.append(int(rng.group(2)) - int(rng.group(1)) + 1)
        elif re.fullmatch(r"[va]\d+", token):
            out.append(1)
        else:
            out.append(None)
    return out


def blgp_source(blgp: int) -> np.ndarray:
    """The lane whose B value lane l uses under a blgp pattern."""
    lane = np.arange(64)
    return [lane, lane % 32, lane % 32 + 32, (lane + 16) % 64,
            lane % 16, lane % 16 + 16, lane % 16 + 32, lane % 16 + 48][blgp]


@cache
def layout(shape: MfmaShape, cbsz: int = 0, abid: int = 0, blgp: int = 0
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat gathers: A tiles (B, M, K) and B tiles (B, K, N) from the (64 lanes x vals)
    operand values, and D (items, 64) from the (B, M, N) products."""
    m, n, k, nb, vals = shape.m, shape.n, shape.k, shape.blocks, shape.vals
    lane = np.arange(64)[:, None]
    v = np.arange(vals)[None, :]
    src = lane * vals + v  # (64, vals)

    def tiles(rows: int) -> np.ndarray:
        g = lane // rows
        out = np.full((nb, rows, k), -1, np.int64)
        out[np.broadcast_to(g % nb, src.shape), np.broadcast_to(lane % rows, src.shape),
            (g // nb) * vals + v] = src
        assert (out >= 0).all(), "the lanes cover every element of every block"
        return out

    a_take = tiles(m)
    if cbsz:
        group = 1 << cbsz
        if group > nb or abid >= group:
            raise ValueError(f"cbsz {cbsz} / abid {abid} do not fit {nb} block(s)")
        a_take = a_take[(np.arange(nb) & ~(group - 1)) | abid]
    b_take = tiles(n).transpose(0, 2, 1)  # (B, K, N)
    if blgp:
        b_take = (blgp_source(blgp) * vals)[b_take // vals] + b_take % vals
    r = np.arange(shape.d_items)[:, None]
    g = np.arange(64)[None, :] // n
    col = np.arange(64)[None, :] % n
    if shape.out == "f64":
        blk, row = g % nb, g // nb + (64 // n // nb) * r
    else:
        stacked = (r // 4) * 4 * (64 // n) + 4 * g + r % 4
        blk, row = stacked // m, stacked % m
    d_take = (blk * m + row) * n + col
    return a_take, b_take, d_take


def _to_tf32(x: np.ndarray) -> np.ndarray:
    b = np.asarray(x, f32).view(u32)
    b = (b + u32(0xFFF) + ((b >> u32(13)) & u32(1))) & u32(0xFFFFE000)
    return b.view(f32)


def operand_values(words: np.ndarray, kind: str, vals: int, ocp_fp8: bool) -> np.ndarray:
    """(W, 64, regs) uint32 register words -> (W, 64, vals) float64 (or exact int) values."""
    words = np.ascontiguousarray(words)
    if kind == "i8":
        return words.view(np.int8)[..., :vals].astype(f64)
    if kind in ("fp8", "bf8"):
        return fp8_values(kind, ocp_fp8)[words.view(np.uint8)[..., :vals]]
    if kind == "f16":
        return words.view(np.float16)[..., :vals].astype(f64)
    if kind in ("bf16", "bf16_1k"):
        h = words.view(np.uint16)[..., :vals].astype(u32) << u32(16)
        return h.view(f32).astype(f64)
    if kind == "f64":
        return words.view(f64)[..., :vals]
    x = words.view(f32)[..., :vals]
    return (_to_tf32(x) if kind == "xf32" else x).astype(f64)


def compile_mfma(inst: d.Instruction, sample: str, target: str = "gfx942"
                 ) -> Callable[[WaveGroup], None] | None:
    shape = parse(inst.name, sample)
    if shape is None:
        return None
    f = inst.f
    neg = 0
    blgp = f["blgp"]
    cbsz = f["cbsz"]
    if shape.a_kind == "f8f6f4":  # the format fields, not broadcast controls
        a_kind, b_kind = F8F6F4_FORMATS.get(cbsz), F8F6F4_FORMATS.get(blgp)
        if a_kind is None or b_kind is None:
            return None  # fp6/bf6/fp4 operands: not modelled (refused by name)
        shape = dataclasses.replace(shape, a_kind=a_kind, b_kind=b_kind)
        cbsz = blgp = 0
    if shape.out == "f64":
        if target == "gfx90a" and blgp:
            return None
        neg, blgp = blgp, 0  # gfx940+: the f64 forms' blgp bits are neg:[A, B, C]
    try:
        a_take, b_take, d_take = layout(shape, cbsz, f["abid"], blgp)
    except ValueError:
        return None
    regs_a = max(1, shape.vals * _BYTES[shape.a_kind] // 4)
    regs_b = max(1, shape.vals * _BYTES[shape.b_kind] // 4)
    wide = 2 if shape.out == "f64" else 1
    d_regs = shape.d_items * wide
    ocp = target == "gfx950"
    nb, m, n = shape.blocks, shape.m, shape.n

    def reg(code: int, acc: bool) -> int:
        return (AGPR_ROW if acc else 0) + code - d.VGPR0

    def values(g: WaveGroup, code: int, acc: bool, rows: int, kind: str) -> np.ndarray:
        r = reg(code, acc)
        words = g.v[r: r + rows].transpose(1, 2, 0)  # (W, 64, rows)
        return operand_values(words, kind, shape.vals, ocp).reshape(words.shape[0], -1)

    fast = _fast_plans(shape, cbsz, f["abid"], blgp) if shape.out != "f64" else None

    def run(g: WaveGroup) -> None:
        W = g.count
        if fast is not None and g.v.flags.c_contiguous:
            if f["src2"] >= d.VGPR0:
                r = reg(f["src2"], bool(f["acc_cd"]))
                c = g.v[r: r + d_regs]
            else:  # an inline constant C: the same bits in every register
                c = np.asarray(g.vread(f["src2"], inst.literal), u32)
                if c.ndim:
                    c = None
            if c is not None:
                av = _fast_operand(g, reg(f["src0"], bool(f["acc"] & 1)), regs_a,
                                   shape.a_kind, fast[0], ocp)
                bv = _fast_operand(g, reg(f["src1"], bool(f["acc"] & 2)), regs_b,
                                   shape.b_kind, fast[1], ocp)
                prod = np.matmul(av, bv).reshape(W, nb * m * n)
                dst = reg(d.VGPR0 + f["vdst"], bool(f["acc_cd"]))
                _fast_result(g.v[dst: dst + d_regs], prod, c, fast[2], shape.out)
                return
        av = values(g, f["src0"], bool(f["acc"] & 1), regs_a, shape.a_kind)
        bv = values(g, f["src1"], bool(f["acc"] & 2), regs_b, shape.b_kind)
        if neg & 1:
            av = -av
        if neg & 2:
            bv = -bv
        prod = np.matmul(av[:, a_take], bv[:, b_take])  # (W, B, M, N)
        dvals = prod.reshape(W, nb * m * n)[:, d_take].transpose(1, 0, 2)  # (items, W, 64)
        acc = bool(f["acc_cd"])
        if f["src2"] >= d.VGPR0:
            cw = g.v[reg(f["src2"], acc): reg(f["src2"], acc) + d_regs]
        else:  # an inline constant C: the same bits in every register
            cw = np.broadcast_to(np.asarray(g.vread(f["src2"], inst.literal), u32),
                                 (d_regs, W, 64))
        dst = reg(d.VGPR0 + f["vdst"], acc)
        if shape.out == "f64":
            c = np.ascontiguousarray(cw.reshape(shape.d_items, 2, W, 64).transpose(0, 2, 3, 1))
            cf = c.view(f64)[..., 0] if f["src2"] >= d.VGPR0 else _const_f64(g, f, inst, W)
            res = dvals + (-cf if neg & 4 else cf)
            pair = np.ascontiguousarray(res.astype(f64)[..., None]).view(u32)  # (items,W,64,2)
            g.v[dst: dst + d_regs] = pair.transpose(0, 3, 1, 2).reshape(d_regs, W, 64)
        elif shape.out == "f32":  # MFMA ignores EXEC
            g.v[dst: dst + d_regs] = (dvals + cw.view(f32)).astype(f32).view(u32)
        else:
            g.v[dst: dst + d_regs] = (dvals.astype(np.int64) + cw.view(np.int32)).astype(u32)

    return run


# --- the strided fast path ---------------------------------------------------------------
# The same layouts read through strided views (hsa.virtual.isa.strided): A and B convert
# straight from the register words into contiguous (W, B, M, K) / (W, B, K, N) float64
# tiles, and D is written by one add of C (in float64, rounded once, as above) whose output
# is the destination registers. Layouts that are no mixed-radix permutation (blgp's lane
# rotations, cbsz broadcasts) and f64 results keep the index-array path.
_VIEW_DTYPE = {"f16": np.uint16, "bf16": np.uint16, "bf16_1k": np.uint16, "f32": u32,
               "xf32": u32, "i8": np.int8, "fp8": np.uint8, "bf8": np.uint8}


@cache
def _fast_plans(shape: MfmaShape, cbsz: int, abid: int, blgp: int) -> tuple | None:
    """Strided plans of A and B (over register, lane, value-in-register; each with whether
    it reads the tile transposed) and of D (over the flat product), or None where a layout
    has none."""
    if shape.a_kind not in _VIEW_DTYPE or shape.b_kind not in _VIEW_DTYPE:
        return None
    a_take, b_take, d_take = layout(shape, cbsz, abid, blgp)
    plans: list = []
    for take, kind in ((a_take, shape.a_kind), (b_take, shape.b_kind)):
        per = 4 // np.dtype(_VIEW_DTYPE[kind]).itemsize
        best = None
        # the copy runs fastest along long inner rows: read the tile in the orientation
        # whose innermost sub-axis is longest (a transposed operand is still one BLAS call)
        for transposed in (False, True):
            t = take.transpose(0, 2, 1) if transposed else take
            lane, v = np.divmod(t, shape.vals)
            p = strided.plan((v // per, lane, v % per))
            if p is not None and (best is None or _inner(p) > _inner(best[0])):
                best = (p, transposed)
        plans.append(best)
    plans.append(strided.plan((d_take,)))
    return None if None in plans else tuple(plans)


def _inner(p: strided.Plan) -> int:
    """The length of a plan's innermost sub-axis (1 for an empty plan)."""
    sizes = [size for axis in p.axes for size, _ in axis]
    return sizes[-1] if sizes else 1


def _fast_operand(g: WaveGroup, r: int, rows: int, kind: str, plan: tuple,
                  ocp: bool) -> np.ndarray:
    """A or B as float64 (W, B, rows, cols) tiles, read through plan `p` (contiguous, or
    its transpose)."""
    words = g.v[r: r + rows]  # (rows, W, 64)
    return strided.converted(g.memo, ("mfma", r, rows, kind, plan, ocp), words,
                             lambda: _convert_operand(words, kind, plan, ocp))


def _convert_operand(words: np.ndarray, kind: str, plan: tuple, ocp: bool) -> np.ndarray:
    p, transposed = plan
    dt = np.dtype(_VIEW_DTYPE[kind])
    x = words.view(dt).reshape(words.shape[0], words.shape[1], 64, 4 // dt.itemsize)
    src = strided.view(x, p, 1, 0)
    if kind in ("fp8", "bf8"):  # np.take's result is C-ordered (an index's own order
        out = np.take(fp8_values(kind, ocp), src)  # would make the reshape below copy)
    elif kind == "f16":  # a table lookup: a third faster than numpy's float16 cast
        out = np.take(_f16_table_f64(), src)
    elif kind in ("bf16", "bf16_1k"):
        out = (src.astype(u32, order="C") << u32(16)).view(f32).astype(f64)
    elif kind == "xf32":
        out = _to_tf32(src.view(f32).astype(f32, order="C")).astype(f64)
    elif kind == "f32":
        out = src.view(f32).astype(f64, order="C")
    else:
        out = src.astype(f64, order="C")
    out = out.reshape((words.shape[1],) + _tile_shape(p))
    return out.transpose(0, 1, 3, 2) if transposed else out


@cache
def _f16_table_f64() -> np.ndarray:
    """Every f16 code's value as float64 (numpy's own conversion)."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(f64)


def _tile_shape(p: strided.Plan) -> tuple[int, ...]:
    return tuple(int(np.prod([size for size, _ in axis], dtype=np.int64)) for axis in p.axes)


def _fast_result(dst: np.ndarray, prod: np.ndarray, c: np.ndarray, p: strided.Plan,
                 out: str) -> None:
    """dst (items, W, 64) registers = the products' D layout + C, rounded once."""
    src = strided.view(prod, p, 0, 1)  # (item sub-axes, W, lane sub-axes)
    target = dst.reshape(src.shape)
    if c.ndim:
        c = c.reshape(src.shape)
    if out == "f32":
        np.add(src, c.view(f32), out=target.view(f32), dtype=f64, casting="same_kind")
    else:  # i32: exact integer sums, wrapped to 32 bits
        np.add(src, c.view(np.int32), out=target.view(np.int32), dtype=np.int64,
               casting="unsafe")


def _const_f64(g: WaveGroup, f: dict, inst: d.Instruction, W: int) -> np.ndarray:
    value = np.asarray(g.vread(f["src2"], inst.literal, "64"))
    return np.broadcast_to(value.astype(np.uint64).view(f64), (1, W, 64))


__all__ = ["MfmaShape", "blgp_source", "compile_mfma", "layout", "operand_values", "parse"]
