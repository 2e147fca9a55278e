"""hipcc's 5x5 convolution (issue 32: "a 4096x4096 convolution sample did not finish in
300 s") on the gfx90a executor: the mask in __constant__ memory, dwordx4 loads at dword
addresses, and a bounds check whose out-of-range waves end at once.

The fixture (tests/data/codeobjects/hipcc_convolution.hsaco, its source in make_fixtures.py)
is shaped like ROCm's public convolution sample, launched as the sample does: 32x32
workgroups over (size + 32) / 32 blocks a side, so the last row and column of blocks hold
waves that are wholly out of range. Those waves branch (s_cbranch_execz) straight to
s_endpgm: the executor ends them where they branch, copying only the waves that go on, and
never merges groups that meet at s_endpgm (each copy was the whole batch's registers:
most of the sample's time)."""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest
from codeobjects import hip_entries

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx9]

# the sample's mask (a 5x5 of small multiples of 0.5: with integer inputs every sum is exact)
MASK = np.array([1, 3, 0, -2, 0, 1, 4, 0, -8, -4, 2, 7, 0, -12, 0, 2, 3, 1.5, -8, -4,
                 0, 1, 0, -2, 0], np.float32)


def _reference(padded: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n), np.float64)
    for my in range(5):
        for mx in range(5):
            out += padded[my:my + n, mx:mx + n] * np.float64(MASK[my * 5 + mx])
    return out.astype(np.float32)  # exact: integer inputs, half-integer weights


@pytest.fixture(scope="module")
def loaded():
    from hsa.virtual.gfx11.testing import Harness

    h = Harness("gfx90a")
    code = h.load(hip_entries("hipcc_convolution.hsaco")["hipv4-amdgcn-amd-amdhsa--gfx90a"])
    mask = code.code_object.symbols["conv_mask"]
    h.memory.write(code.base + mask.value, MASK)  # hipMemcpyToSymbol
    return h, code


def test_convolution_is_exact_and_out_of_range_waves_end_uncopied(loaded, monkeypatch):
    from hsa.virtual.isa.state import WaveGroup

    h, code = loaded
    n = 100  # 4x4 blocks of 32x32; rows 100-127 of the last block row are out of range
    rng = np.random.default_rng(5)
    padded = np.zeros((n + 4, n + 4), np.float32)
    padded[2:-2, 2:-2] = rng.integers(0, 256, (n, n))
    src = h.buffer(padded)
    out = h.buffer(np.full(n * n + 64, -7, np.float32))  # 64 guard floats after the grid

    taken: list[int] = []
    merged: list[int] = []
    take, merge = WaveGroup.take, WaveGroup.merge

    def spy_take(self, select, pc):
        g = take(self, select, pc)
        taken.append(g.count)
        return g

    def spy_merge(groups):
        merged.append(len(groups))
        return merge(groups)

    monkeypatch.setattr(WaveGroup, "take", spy_take)
    monkeypatch.setattr(WaveGroup, "merge", staticmethod(spy_merge))
    side = (n + 32) // 32 * 32
    h.dispatch(code, "convolution_5x5", (side, side, 1), (32, 32, 1),
               [src, out, struct.pack("<II", n, n)])

    got = h.read(out, np.float32, n * n + 64)
    assert np.array_equal(got[:n * n].reshape(n, n), _reference(padded, n))
    assert (got[n * n:] == -7).all()
    # 16 blocks of 16 waves (two rows of 32 a wave): in the last block row, rows 100-127
    # (14 waves a block, 4 blocks) have no lane in range and end; the 200 others (the
    # last block column's waves with 4 of 32 columns in range too) are the one copy
    assert taken == [16 * 16 - 14 * 4]
    assert merged == []


def _round_f32(x: Fraction) -> np.float32:
    """x rounded to the nearest f32, ties to even (float() rounds to f64 first, which can
    be one f32 ulp off: the answer is among that value's neighbours)."""
    near = np.float32(float(x))
    around = [np.nextafter(near, np.float32(-np.inf)), near,
              np.nextafter(near, np.float32(np.inf))]
    return min(around, key=lambda y: (abs(Fraction(float(y)) - x),
                                      int(np.float32(y).view(np.uint32)) & 1))


def test_fused_multiply_adds_round_once(loaded):
    """The kernel's v_fma_f32/v_fmac_f32 chain over ordinary floats, against exact
    arithmetic rounded once per step: a multiply then an add (two roundings) differs in
    about one output in three here. Two outputs land their f64 sum exactly on an f32
    midpoint that the exact sum is not on (the sum so far -2**-80, then fma(1 + 2**-23, 3,
    sum): exactly below the midpoint 3 + 1.5 * 2**-22, which an f64 sum rounded again to
    f32 ties up to even; and its mirror)."""
    h, code = loaded
    n = 8
    padded = np.random.default_rng(3).standard_normal((n + 4, n + 4)).astype(np.float32)
    padded[:2, :] = 0  # out[0, x] sums rows 0-4: rows 0-1 zero, so the first fmas are exact
    padded[0, 0], padded[0, 1] = -2.0 ** -80, 1 + 2.0 ** -23
    padded[2:5, 0:9] = 0
    padded[0, 4], padded[0, 5] = 2.0 ** -80, 1 + 3 * 2.0 ** -23
    padded[2:5, 4:9] = 0
    src = h.buffer(padded)
    out = h.buffer(np.zeros(n * n, np.float32))
    h.dispatch(code, "convolution_5x5", (32, 32, 1), (32, 32, 1),
               [src, out, struct.pack("<II", n, n)])
    got = h.read(out, np.float32, n * n).reshape(n, n)
    want = np.zeros((n, n), np.float32)
    unfused = np.zeros((n, n), np.float32)
    for y in range(n):
        for x in range(n):
            acc = np.float32(0)
            for k in range(25):  # the compiled order: v_fma_f32 then 24 v_fmac_f32
                term = Fraction(float(padded[y + k // 5, x + k % 5])) * Fraction(float(MASK[k]))
                acc = _round_f32(term + Fraction(float(acc)))
                unfused[y, x] += padded[y + k // 5, x + k % 5] * MASK[k]
            want[y, x] = acc
    assert got[0, 0].view(np.uint32) == 0x40400001, hex(got[0, 0].view(np.uint32))  # 3 + 2**-22
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert (unfused != want).sum() > n * n // 8  # the check tells fused from unfused
