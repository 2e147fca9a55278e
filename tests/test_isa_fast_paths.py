"""The executor's fast paths against straightforward references.

Speed work replaced per-lane scatter/einsum code with gathers and batched matmuls (WMMA)
and a word-operation plan for v_perm_b32 with one selector per wave. Each is checked here
against a reference written from the documented register layout, one lane and one value at
a time, on random contents (all waves different), so that a layout slip shows.
"""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual.isa import operands as d
from hsa.virtual.isa import vop3p
from hsa.virtual.isa.state import WaveGroup
from hsa.virtual.isa.valu import _perm, _perm_general

pytestmark = pytest.mark.generic
u32 = np.uint32


def _group(waves: int, lanes: int, rows: int, rng) -> WaveGroup:
    v = rng.integers(0, 2**32, (rows, waves, lanes), dtype=np.uint64).astype(u32)
    s = np.zeros((waves, 128), u32)
    s[:, d.EXEC_LO] = 0xFFFFFFFF
    s[:, d.EXEC_HI] = 0xFFFFFFFF if lanes == 64 else 0
    return WaveGroup(s, v, np.zeros(waves, bool), np.arange(waves), 0)


def _perm_reference(a: int, b: int, sel: int) -> int:
    pool = (a << 32) | b
    out = 0
    for k in range(4):
        s = (sel >> 8 * k) & 0xFF
        if s < 8:
            byte = (pool >> 8 * s) & 0xFF
        elif s < 12:
            src, bit = ((b, a)[(s - 8) // 2], (15, 31)[s % 2])
            byte = 0xFF if (src >> bit) & 1 else 0
        else:
            byte = 0 if s == 12 else 0xFF
        out |= byte << 8 * k
    return out


def test_perm_uniform_selector_matches_the_general_path_and_the_reference():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2**32, (3, 64), dtype=np.uint64).astype(u32)
    b = rng.integers(0, 2**32, (3, 64), dtype=np.uint64).astype(u32)
    for trial in range(400):
        raw = rng.integers(0, 16 if trial % 2 else 256, 4)
        sel = int.from_bytes(bytes(int(x) for x in raw), "little")
        for s in (np.uint32(sel), np.full((3, 1), sel, u32)):  # literal, SGPR
            got = _perm(a, b, s)
            assert got.shape == (3, 64)
            np.testing.assert_array_equal(got, _perm_general(a, b, s))
        want = [_perm_reference(int(x), int(y), sel) for x, y in zip(a[1], b[1], strict=True)]
        np.testing.assert_array_equal(_perm(a, b, np.uint32(sel))[1], want)
    mixed = np.array([[0x05040100], [0x07060302], [0x0C0C0C0C]], u32)  # differs per wave
    np.testing.assert_array_equal(_perm(a, b, mixed), _perm_general(a, b, mixed))


def _wmma_int(bits: int, signed_a: bool, signed_b: bool, clamp: bool) -> None:
    rng = np.random.default_rng(bits + 2 * signed_a + 4 * signed_b + 8 * clamp)
    g = _group(3, 32, 64, rng)
    nreg = 16 * bits // 32
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1))
    mats = []
    for k, signed in ((0, signed_a), (1, signed_b)):
        m = rng.integers(lo if signed else 0, hi if signed else 1 << bits, (3, 16, 16))
        mats.append(m)
        # lane l (and l + 16) holds row l of A / column l of B: value j at bits*j of the dword
        for w in range(3):
            for lane in range(32):
                row = m[w, lane % 16] if k == 0 else m[w, :, lane % 16]
                for r in range(nreg):
                    word = 0
                    for j in range(32 // bits):
                        word |= (int(row[r * 32 // bits + j]) & ((1 << bits) - 1)) << bits * j
                    g.v[8 * k + r, w, lane] = word
    c = rng.integers(-(2**31), 2**31, (3, 16, 16))
    if clamp:
        c[:, 0, :] = 2**31 - 1  # saturates where the product is positive
    for w in range(3):
        for i in range(8):
            for lane in range(32):
                g.v[16 + i, w, lane] = int(c[w, 2 * i + lane // 16, lane % 16]) & 0xFFFFFFFF
    name = f"v_wmma_i32_16x16x16_iu{bits}"
    inst = d.Instruction(0, 8, "VOP3P", 0, name, {
        "src0": d.VGPR0, "src1": d.VGPR0 + 8, "src2": d.VGPR0 + 16, "vdst": 32,
        "neg": int(signed_a) | int(signed_b) << 1, "clamp": int(clamp), "opsel": 0,
        "neg_hi": 0, "opsel_hi": 0}, None, ())
    vop3p.compile(inst)(g)
    for w in range(3):
        full = mats[0][w] @ mats[1][w] + c[w]
        if clamp:
            full = np.clip(full, -(2**31), 2**31 - 1)
        for i in range(8):
            for lane in range(32):
                want = int(full[2 * i + lane // 16, lane % 16]) & 0xFFFFFFFF
                assert int(g.v[32 + i, w, lane]) == want, (w, i, lane)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("signs", [(True, True), (False, False), (True, False)])
def test_wmma_int_matches_per_lane_reference(bits, signs):
    _wmma_int(bits, *signs, clamp=False)


def test_wmma_int_clamp_saturates():
    _wmma_int(8, True, True, clamp=True)


@pytest.mark.parametrize("lanes", [32, 64])
def test_lane_masks_unpack_every_bit_in_lane_order(lanes):
    """WaveGroup.lane_mask (EXEC, VCC, compare results) unpacks the SGPR (pair)'s bytes:
    lane i is bit i of the low word, lane 32 + i bit i of the high one, and a write and a
    read give back the mask."""
    rng = np.random.default_rng(lanes)
    g = _group(5, lanes, 1, rng)
    g.s[:, d.VCC_LO:d.VCC_LO + 2] = rng.integers(0, 2**32, (5, 2), dtype=np.uint64)
    got = g.lane_mask(d.VCC_LO)
    for w in range(5):
        word = int(g.s[w, d.VCC_LO]) | (int(g.s[w, d.VCC_LO + 1]) << 32 if lanes == 64 else 0)
        assert got[w].tolist() == [bool(word >> i & 1) for i in range(lanes)]
    mask = rng.random((5, lanes)) < 0.5
    g.write_lane_mask(d.EXEC_LO, mask)
    assert (g.exec_mask() == mask).all() and g.exec_mask().dtype == bool
