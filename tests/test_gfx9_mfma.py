"""CDNA MFMA beyond one block: multi-block shapes, f64, fp8/bf8 and the cbsz/abid/blgp
controls, each against a numpy model of the documented register layout written out element
by element (CDNA3 ISA guide, "Matrix Arithmetic"; the same tables as AMD's matrix instruction
calculator, which every gfx90a/gfx942 MFMA variant was compared with offline). Encodings are
llvm-mc-19 -show-encoding output (gfx942, gfx90a) and clang 22's (gfx950)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hsa.virtual import gfx9
from hsa.virtual.gfx9 import decoder as d9
from hsa.virtual.gfx9 import mfma
from hsa.virtual.isa.state import WaveGroup

pytestmark = pytest.mark.isa_gfx9

_FP8 = {("fp8", False): ml_dtypes.float8_e4m3fnuz, ("bf8", False): ml_dtypes.float8_e5m2fnuz,
        ("fp8", True): ml_dtypes.float8_e4m3fn, ("bf8", True): ml_dtypes.float8_e5m2}
_NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8}


def _blgp_lane(blgp: int, lane: int) -> int:
    """Where lane `lane` reads its B value from (CDNA3 ISA, BLGP)."""
    return [lane, lane % 32, lane % 32 + 32, (lane + 16) % 64, lane % 16, lane % 16 + 16,
            lane % 16 + 32, lane % 16 + 48][blgp]


def _random(kind: str, shape, rng, ocp: bool) -> np.ndarray:
    if kind == "i8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if kind in ("fp8", "bf8"):
        return rng.standard_normal(shape).astype(_FP8[kind, ocp])
    return rng.standard_normal(shape).astype(_NP[kind])


def _case(target, words, m, n, k, blocks, kinds, out, cbsz=0, abid=0, blgp=0, neg=0):
    rng = np.random.default_rng(m * 1000 + k * 10 + blocks)
    ocp = target == "gfx950"
    ka, kb = kinds
    a = _random(ka, (blocks, m, k), rng, ocp)
    b = _random(kb, (blocks, k, n), rng, ocp)
    item = a.dtype.itemsize
    vals = blocks * m * k // 64
    regs_in = max(1, vals * item // 4)
    lanes_a = np.zeros((64, regs_in * 4), np.uint8)
    lanes_b = np.zeros((64, regs_in * 4), np.uint8)
    for blk in range(blocks):
        for kk in range(k):
            e = kk % vals
            for i in range(m):  # A[b][i][k]: lane i + m * (b + blocks * (k // vals))
                lane = i + m * (blk + blocks * (kk // vals))
                lanes_a[lane, e * item:(e + 1) * item] = np.frombuffer(a[blk, i, kk].tobytes(),
                                                                       np.uint8)
            for j in range(n):
                lane = j + n * (blk + blocks * (kk // vals))
                lanes_b[lane, e * item:(e + 1) * item] = np.frombuffer(b[blk, kk, j].tobytes(),
                                                                       np.uint8)
    # blgp: the B element that logical lane L holds is read from physical lane src(L)
    b_used = b.copy()
    for blk in range(blocks):
        for kk in range(k):
            e = kk % vals
            for j in range(n):
                src = _blgp_lane(blgp, j + n * (blk + blocks * (kk // vals)))
                b_used[blk, kk, j] = np.frombuffer(lanes_b[src, e * item:(e + 1) * item],
                                                   b.dtype)[0]
    phys_b = lanes_b
    inst = d9.decode_one(tuple(np.frombuffer(bytes(words), "<u4").tolist()), 0, 0, target)
    s = np.zeros((1, 128), np.uint32)
    s[:, 126] = s[:, 127] = 0xFFFFFFFF
    g = WaveGroup(s, np.zeros((64, 1, 64), np.uint32), np.zeros(1, bool), np.arange(1), 0)
    ra, rb = inst.f["src0"] - 256, inst.f["src1"] - 256
    g.v[ra:ra + regs_in, 0] = lanes_a.view("<u4").T
    g.v[rb:rb + regs_in, 0] = phys_b.view("<u4").T
    dst = inst.f["vdst"]
    c = rng.standard_normal((blocks, m, n))
    if out == "i32":
        c = rng.integers(-1000, 1000, (blocks, m, n))
    per_lane_groups = 64 // n

    def where(blk, i, j):  # (register, lane) of D/C[b][i][j]
        if out == "f64":
            rows_per = per_lane_groups // blocks
            return 2 * (i // rows_per), j + n * (blk + blocks * (i % rows_per))
        row = blk * m + i  # the blocks' rows stacked
        grp = (row // 4) % per_lane_groups
        return 4 * (row // (4 * per_lane_groups)) + row % 4, j + n * grp

    cdt = {"f32": np.float32, "f64": np.float64, "i32": np.int32}[out]
    c = c.astype(cdt)
    for blk in range(blocks):
        for i in range(m):
            for j in range(n):
                r, lane = where(blk, i, j)
                word = np.frombuffer(c[blk, i, j].tobytes(), np.uint32)
                g.v[dst + r: dst + r + word.size, 0, lane] = word
    c_in = c.astype(np.float64)
    compiled = gfx9.family(target).compile(inst)
    assert compiled.fn is not None, (inst.name, compiled.error)
    compiled.fn(g)
    src_blk = [(blk & ~((1 << cbsz) - 1)) | abid if cbsz else blk for blk in range(blocks)]
    av = a.astype(np.float64)[src_blk] * (-1 if neg & 1 else 1)
    bv = b_used.astype(np.float64) * (-1 if neg & 2 else 1)
    want = np.einsum("bmk,bkn->bmn", av, bv) + c_in * (-1 if neg & 4 else 1)
    got = np.zeros_like(want)
    for blk in range(blocks):
        for i in range(m):
            for j in range(n):
                r, lane = where(blk, i, j)
                words = g.v[dst + r: dst + r + (2 if out == "f64" else 1), 0, lane]
                got[blk, i, j] = np.frombuffer(words.astype("<u4").tobytes(), cdt)[0]
    if out == "i32":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target, words, shape, kinds, out, ctl", [
    # v_mfma_f32_32x32x1_2b_f32 v[4:35], v0, v1, v[4:35]
    ("gfx942", [0x04, 0x00, 0xC0, 0xD3, 0x00, 0x03, 0x12, 0x04], (32, 32, 1, 2), ("f32", "f32"),
     "f32", {}),
    # v_mfma_f32_4x4x4_16b_f16 v[4:7], v[0:1], v[2:3], v[4:7] cbsz:4 abid:15 blgp:3
    ("gfx942", [0x04, 0x7C, 0xCA, 0xD3, 0x00, 0x05, 0x12, 0x64], (4, 4, 4, 16), ("f16", "f16"),
     "f32", {"cbsz": 4, "abid": 15, "blgp": 3}),
    # v_mfma_f64_16x16x4_f64 v[4:11], v[0:1], v[2:3], v[4:11] neg:[1,0,1]
    ("gfx942", [0x04, 0x00, 0xEE, 0xD3, 0x00, 0x05, 0x12, 0xA4], (16, 16, 4, 1), ("f64", "f64"),
     "f64", {"neg": 5}),
    # v_mfma_f64_4x4x4_4b_f64 v[4:5], v[0:1], v[2:3], v[4:5]
    ("gfx942", [0x04, 0x00, 0xEF, 0xD3, 0x00, 0x05, 0x12, 0x04], (4, 4, 4, 4), ("f64", "f64"),
     "f64", {}),
    # v_mfma_f32_16x16x32_fp8_bf8 v[4:7], v[0:1], v[2:3], v[4:7] (MI300: the fnuz formats)
    ("gfx942", [0x04, 0x00, 0xF2, 0xD3, 0x00, 0x05, 0x12, 0x04], (16, 16, 32, 1),
     ("fp8", "bf8"), "f32", {}),
    # the same on gfx950 (clang 22): OCP e4m3fn / e5m2
    ("gfx950", [0x04, 0x00, 0xF2, 0xD3, 0x00, 0x05, 0x12, 0x04], (16, 16, 32, 1),
     ("fp8", "bf8"), "f32", {}),
    # v_mfma_i32_16x16x4_4b_i8 v[4:19], v0, v1, v[4:19] cbsz:1 abid:1 blgp:6
    ("gfx942", [0x04, 0x09, 0xD1, 0xD3, 0x00, 0x03, 0x12, 0xC4], (16, 16, 4, 4), ("i8", "i8"),
     "i32", {"cbsz": 1, "abid": 1, "blgp": 6}),
    # gfx90a v_mfma_f32_16x16x1f32 v[4:19], v0, v1, v[4:19] cbsz:2 abid:1 blgp:5
    ("gfx90a", [0x04, 0x0A, 0xC1, 0xD3, 0x00, 0x03, 0x12, 0xA4], (16, 16, 1, 4), ("f32", "f32"),
     "f32", {"cbsz": 2, "abid": 1, "blgp": 5}),
])
def test_mfma_against_the_documented_layout(target, words, shape, kinds, out, ctl):
    _case(target, words, *shape, kinds, out, **ctl)


def test_shapes_follow_from_the_register_widths():
    s = mfma.parse("v_mfma_f32_32x32x1f32", "v_mfma_f32_32x32x1f32 v[16:47], a32, a48, v[64:95]")
    assert (s.blocks, s.vals, s.d_items) == (2, 1, 32)
    s = mfma.parse("v_mfma_f64_4x4x4_4b_f64",
                   "v_mfma_f64_4x4x4_4b_f64 v[16:17], a[32:33], a[48:49], v[64:65]")
    assert (s.out, s.blocks, s.vals, s.d_items) == ("f64", 4, 1, 1)
