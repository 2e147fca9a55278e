"""CDNA3 sparse matrix instructions (v_smfmac_*): D = C + A @ B with A 4:2 structurally
sparse, on gfx942 and gfx950 (f16, bf16, i8 and fp8/bf8 operands; 16x16 and 32x32 shapes),
and gfx950's forms with twice the K (A 4 VGPRs, B 8).

What AMD's CDNA3 ISA guide ("Sparse Matrix Multiply": SMFMAC) and LLVM's AMDGPU docs say,
as modelled here:
- src0 holds A compressed: each lane keeps 2 of every 4 consecutive K values of its row, so
  it holds half the K values that B holds (2 VGPRs); src1 holds B dense (4 VGPRs); vdst is
  both C and D; the src2 field names the index VGPR.
- Lane l's dense K slab is the one of the dense MFMA with the same M/N/K: row (or column)
  l % M, K values (l // M) * V .. + V, V = B's values per lane. Kept value j of the lane
  sits in group j // 2 of 4 K values, at position idx_j in it.
- The index VGPR holds 2 bits per kept value, low bits first: one 8-bit set for 16-bit
  data (4 sets in the VGPR), one 16-bit set for 8-bit data (2 sets); gfx950's wide forms
  keep twice the values, so 2 sets of 16 bits or the whole VGPR (LLVM's verifier for them).
  With cbsz == 0, abid selects the set; with cbsz != 0 the first set is used.

Each kept A value multiplies the B row its index selects (products exact in float64, summed
in float64 and rounded once, as the dense MFMA here): a position A does not keep takes no
part, so an Inf or NaN in B there does not reach D, and two kept values that name the same
position both count. Where neither case arises (finite B, distinct positions) the same
sums run as one dense matmul of A scattered into zeros, which is several times faster.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from functools import cache

import numpy as np

from hsa.virtual.gfx9.mfma import _BYTES, MfmaShape, _operand_widths, layout, operand_values
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import AGPR_ROW, WaveGroup
from hsa.virtual.isa.valu import base_name

u32, f32, f64 = np.uint32, np.float32, np.float64

_SMFMAC = re.compile(
    r"^v_smfmac_(f32|i32)_(\d+)x(\d+)x(\d+)_(f16|bf16|i8|(?:fp8|bf8)_(?:fp8|bf8))$")


def parse(name: str, sample: str) -> MfmaShape | None:
    """The dense-equivalent shape (vals = B's values per lane; A holds half) of an SMFMAC
    from its mnemonic and LLVM's sample text, or None."""
    m_ = _SMFMAC.match(base_name(name))
    if m_ is None:
        return None
    out, m, n, k, kind = m_.group(1), *map(int, m_.groups()[1:4]), m_.group(5)
    a_kind, b_kind = kind.split("_") if "_" in kind else (kind, kind)
    widths = _operand_widths(sample)
    if len(widths) < 3 or None in widths[:3]:
        return None
    d_regs, a_regs, b_regs = widths[0], widths[1], widths[2]
    assert d_regs is not None and a_regs is not None and b_regs is not None
    vals = b_regs * 4 // _BYTES[b_kind]
    if (a_regs * 4 // _BYTES[a_kind] * 2 != vals or d_regs * 64 != m * n
            or 64 * vals != m * k or 64 % m or 64 % n):
        return None
    return MfmaShape(out, m, n, k, 1, a_kind, b_kind, vals, d_regs)


@cache
def _gathers(shape: MfmaShape) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flat gathers: compressed A tile (M, K/2) from the (64 x V/2) kept values (the same
    index picks each kept value's dense K position), B tile (K, N) from (64 x V), D (items,
    64) from (M, N); and each kept value's K group base within its lane's slab plus the
    slab's first K, as (64, V/2)."""
    half = dataclasses.replace(shape, k=shape.k // 2, vals=shape.vals // 2)
    a_take = layout(half)[0][0]
    _, b_take, d_take = layout(shape)
    lane = np.arange(64)[:, None]
    j = np.arange(shape.vals // 2)[None, :]
    k_base = (lane // shape.m) * shape.vals + 4 * (j // 2)
    return a_take, b_take[0], d_take, k_base


def compile_smfmac(inst: d.Instruction, sample: str, target: str = "gfx942"
                   ) -> Callable[[WaveGroup], None] | None:
    shape = parse(inst.name, sample)
    if shape is None:
        return None
    f = inst.f
    kept = shape.vals // 2
    sets = 32 // (2 * kept)  # index sets the VGPR holds
    index_set = f["abid"] if f["cbsz"] == 0 else 0
    if index_set >= sets or f["src2"] < d.VGPR0:
        return None  # an index set the VGPR does not hold: refused by name
    shift = u32(2 * kept * index_set)
    a_take, b_take, d_take, k_base = _gathers(shape)
    regs_a = max(1, kept * _BYTES[shape.a_kind] // 4)
    regs_b = max(1, shape.vals * _BYTES[shape.b_kind] // 4)
    ocp = target == "gfx950"
    m, n = shape.m, shape.n
    two = (2 * np.arange(kept)).astype(u32)

    def reg(code: int, acc: bool) -> int:
        return (AGPR_ROW if acc else 0) + code - d.VGPR0

    def values(g: WaveGroup, r: int, rows: int, kind: str, vals: int) -> np.ndarray:
        words = g.v[r: r + rows].transpose(1, 2, 0)  # (W, 64, rows)
        return operand_values(words, kind, vals, ocp)

    def run(g: WaveGroup) -> None:
        W = g.count
        av = values(g, reg(f["src0"], bool(f["acc"] & 1)), regs_a, shape.a_kind, kept)
        bv = values(g, reg(f["src1"], bool(f["acc"] & 2)), regs_b, shape.b_kind, shape.vals)
        idx = g.v[reg(f["src2"], False)] >> shift  # (W, 64)
        k_pos = k_base + ((idx[..., None] >> two) & u32(3)).astype(np.int64)  # (W, 64, kept)
        a_tile = av.reshape(W, -1)[:, a_take]  # (W, M, K/2)
        k_tile = k_pos.reshape(W, -1)[:, a_take]  # the dense K of each kept value
        b_tile = bv.reshape(W, -1)[:, b_take]  # (W, K, N)
        if np.isfinite(b_tile).all() and not (k_tile[..., 0::2] == k_tile[..., 1::2]).any():
            # the same sums as one matmul: A scattered into a dense tile (zeros where it
            # keeps nothing meet only finite B values; no two kept values share a place)
            a_dense = np.zeros((W, m, shape.k))
            np.put_along_axis(a_dense, k_tile, a_tile, axis=2)
            prod = np.matmul(a_dense, b_tile)
        else:
            b_rows = np.take_along_axis(b_tile[:, None], k_tile[..., None], axis=2)
            prod = np.einsum("wik,wikn->win", a_tile, b_rows)  # (W, M, N)
        dvals = prod.reshape(W, m * n)[:, d_take].transpose(1, 0, 2)  # (items, W, 64)
        dst = reg(d.VGPR0 + f["vdst"], bool(f["acc_cd"]))
        c = g.v[dst: dst + shape.d_items]  # vdst is C too; SMFMAC ignores EXEC like MFMA
        if shape.out == "f32":
            c[...] = (dvals + c.view(f32)).astype(f32).view(u32)
        else:  # i32: exact integer sums, wrapped to 32 bits
            c[...] = (dvals.astype(np.int64) + c.view(np.int32)).astype(u32)

    return run


__all__ = ["compile_smfmac", "parse"]
