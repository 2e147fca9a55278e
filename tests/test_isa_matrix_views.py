"""Matrix instructions read through strided views (hsa.virtual.isa.strided) against the
index-array path they replace, bit for bit.

The index-array path is the one the layout tests check against AMD's documented register
layouts (test_gfx9_mfma.py, test_isa_fast_paths.py, the IREE/Triton kernels); here every
dense MFMA shape of gfx90a, gfx942 and gfx950 (f64 results keep the index path) and the
gfx11/gfx12 WMMAs run both ways on the same random registers of several waves, with C in
VGPRs, in AccVGPRs, in place, and as an inline constant.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hsa.virtual.gfx9 import mfma
from hsa.virtual.isa import operands as d
from hsa.virtual.isa import strided, vop3p
from hsa.virtual.isa.state import AGPR_ROW, WaveGroup

pytestmark = pytest.mark.generic
u32 = np.uint32
GFX9 = Path(mfma.__file__).parent


def test_plan_splits_a_mixed_radix_permutation_and_refuses_others():
    x = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    take = x.transpose(2, 0, 1)  # (4, 2, 3): element (i, j, k) reads x[j, k, i]
    p = strided.plan((take,))
    assert p is not None
    flat = x.reshape(-1)
    batch = np.stack([flat, flat + 100])  # two batches of the same source
    got = strided.view(batch, p, 0, 1)  # (sub-axes of axis 0, batch, the rest)
    np.testing.assert_array_equal(np.asarray(got).reshape(4, 2, 2, 3),
                                  np.stack([take, take + 100], axis=1))
    assert strided.plan((np.array([0, 2, 1]),)) is None  # no constant step of any split
    assert strided.plan((np.array([[0, 1], [5, 7]]),)) is None  # steps that do not add up


def _values(kind: str, shape, rng) -> np.ndarray:
    """Random register words holding finite values of `kind` (sums of their products are
    exact in float64, so the summation order of the two paths' BLAS calls cannot matter)."""
    n = int(np.prod(shape)) * 4
    if kind == "i8":
        raw = rng.integers(0, 256, n).astype(np.uint8)
    elif kind in ("fp8", "bf8"):
        raw = rng.standard_normal(n).astype(ml_dtypes.float8_e4m3fn if kind == "fp8"
                                            else ml_dtypes.float8_e5m2).view(np.uint8)
    elif kind in ("f16", "bf16", "bf16_1k"):
        dt = np.float16 if kind == "f16" else ml_dtypes.bfloat16
        raw = rng.standard_normal(n // 2).astype(dt).view(np.uint8)
    else:
        raw = rng.standard_normal(n // 4).astype(np.float32).view(np.uint8)
    return raw.view(u32).reshape(shape)


def _mfma_opcodes(target: str) -> list[tuple[int, str, str]]:
    table = json.loads((GFX9 / f"opcodes_{target}.json").read_text())["VOP3P"]
    return [(int(op), e["name"], e["sample"]) for op, e in table.items()
            if e["name"].startswith("v_mfma_") and mfma.parse(e["name"], e["sample"])]


def _run_mfma(inst, sample, target, v, slow: bool, monkeypatch) -> np.ndarray:
    with monkeypatch.context() as m:
        if slow:
            m.setattr(mfma, "_fast_plans", lambda *a: None)
        fn = mfma.compile_mfma(inst, sample, target)
    assert fn is not None
    s = np.zeros((v.shape[1], 128), u32)
    s[:, d.EXEC_LO] = s[:, d.EXEC_HI] = 0xFFFFFFFF
    g = WaveGroup(s, v.copy(), np.zeros(v.shape[1], bool), np.arange(v.shape[1]), 0)
    fn(g)
    return g.v


@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx950"])
def test_every_mfma_shape_through_views_equals_the_index_path(target, monkeypatch):
    rng = np.random.default_rng(7)
    ran = 0
    for op, name, sample in _mfma_opcodes(target):
        shape = mfma.parse(name, sample)
        if shape.out == "f64":
            continue
        kind = shape.a_kind if shape.a_kind != "f8f6f4" else "fp8"
        # A at v0, B at v16, C/D at v32 (or AccVGPRs), 3 waves
        for acc, src2, vdst in ((0, d.VGPR0 + 32, 32), (3, d.VGPR0 + 32, 48),
                                (1, 128, 32), (2, d.VGPR0 + 32, 32)):
            v = _values(kind, (AGPR_ROW + 96, 3, 64), rng)
            f = {"src0": d.VGPR0, "src1": d.VGPR0 + 16, "src2": src2, "vdst": vdst,
                 "acc": 3 if acc == 3 else 0, "acc_cd": int(acc in (1, 3)), "cbsz": 0,
                 "abid": 0, "blgp": 0, "neg": 0}
            inst = d.Instruction(0, 8, "VOP3P", op, name, f, None, (0, 0))
            want = _run_mfma(inst, sample, target, v, True, monkeypatch)
            got = _run_mfma(inst, sample, target, v, False, monkeypatch)
            np.testing.assert_array_equal(got, want, err_msg=f"{target} {name} {f}")
            ran += 1
    assert ran >= 40


def _wmma_group(v: np.ndarray, contiguous: bool) -> WaveGroup:
    waves = v.shape[1]
    if not contiguous:  # a lane-sliced view: the executor's fast paths step aside
        wide = np.zeros(v.shape[:2] + (64,), u32)
        wide[..., :32] = v
        v = wide[..., :32]
    else:
        v = v.copy()
    s = np.zeros((waves, 128), u32)
    s[:, d.EXEC_LO] = 0xFFFFFFFF
    return WaveGroup(s, v, np.zeros(waves, bool), np.arange(waves), 0)


@pytest.mark.parametrize("name, gfx12, kind", [
    ("v_wmma_f32_16x16x16_f16", False, "f16"),
    ("v_wmma_f32_16x16x16_bf16", False, "bf16"),
    ("v_wmma_f32_16x16x16_f16", True, "f16"),
    ("v_wmma_f32_16x16x16_bf16", True, "bf16"),
    ("v_wmma_f32_16x16x32_f16", True, "f16"),  # gfx1250's K = 32
    ("v_wmma_f32_16x16x16_fp8_fp8", True, "fp8"),
    ("v_wmma_f32_16x16x16_bf8_fp8", True, "fp8"),
])
def test_wmma_through_views_equals_the_index_path(name, gfx12, kind):
    rng = np.random.default_rng(11)
    for src2, vdst in ((d.VGPR0 + 32, 32), (d.VGPR0 + 32, 48), (128, 40)):
        v = _values(kind, (64, 5, 32), rng)
        f = {"src0": d.VGPR0, "src1": d.VGPR0 + 16, "src2": src2, "vdst": vdst, "opsel": 0,
             "neg": 0, "neg_hi": 0, "clamp": 0}
        if gfx12:
            f["gfx12_wmma"] = 1
        inst = d.Instruction(0, 8, "VOP3P", 0, name, f, None, (0, 0))
        slow, fast = _wmma_group(v, False), _wmma_group(v, True)
        vop3p.run_wmma(slow, inst, name)
        vop3p.run_wmma(fast, inst, name)
        np.testing.assert_array_equal(fast.v, np.asarray(slow.v), err_msg=f"{name} {f}")
        assert not np.array_equal(fast.v[vdst:vdst + 8], v[vdst:vdst + 8])


def test_wmma_respects_exec_on_the_view_path():
    rng = np.random.default_rng(3)
    v = _values("f16", (64, 2, 32), rng)
    name = "v_wmma_f32_16x16x16_f16"
    f = {"src0": d.VGPR0, "src1": d.VGPR0 + 16, "src2": d.VGPR0 + 32, "vdst": 32, "opsel": 0,
         "neg": 0, "neg_hi": 0, "clamp": 0}
    inst = d.Instruction(0, 8, "VOP3P", 0, name, f, None, (0, 0))
    g = _wmma_group(v, True)
    g.s[1, d.EXEC_LO] = 0x0000FFFF  # wave 1: lanes 16-31 off
    vop3p.run_wmma(g, inst, name)
    np.testing.assert_array_equal(g.v[32:40, 1, 16:], v[32:40, 1, 16:])
    assert not np.array_equal(g.v[32:40, 0, 16:], v[32:40, 0, 16:])


def test_reused_operands_follow_every_register_change(monkeypatch):
    """A/B conversions are kept per wave group while their registers hold the same bits
    (strided.converted): the same MFMA/WMMA run again after one lane's A word, one lane's
    B word, or all of A changed gives the index path's result each time (and a result that
    differs from the run before, so a stale operand would show)."""
    rng = np.random.default_rng(5)
    name = "v_mfma_f32_16x16x16_f16"
    sample = f"{name} v[0:3], v[0:1], v[2:3], v[4:7]"
    op = next(op for op, n, _ in _mfma_opcodes("gfx942") if n == name)
    f = {"src0": d.VGPR0, "src1": d.VGPR0 + 16, "src2": d.VGPR0 + 32, "vdst": 40,
         "acc": 0, "acc_cd": 0, "cbsz": 0, "abid": 0, "blgp": 0, "neg": 0}
    inst = d.Instruction(0, 8, "VOP3P", op, name, f, None, (0, 0))
    with monkeypatch.context() as m:
        m.setattr(mfma, "_fast_plans", lambda *a: None)
        slow_fn = mfma.compile_mfma(inst, sample, "gfx942")
    fast_fn = mfma.compile_mfma(inst, sample, "gfx942")
    assert slow_fn is not None and fast_fn is not None
    v = _values("f16", (AGPR_ROW + 96, 3, 64), rng)
    s = np.zeros((3, 128), u32)
    s[:, d.EXEC_LO] = s[:, d.EXEC_HI] = 0xFFFFFFFF
    slow = WaveGroup(s.copy(), v.copy(), np.zeros(3, bool), np.arange(3), 0)
    fast = WaveGroup(s.copy(), v.copy(), np.zeros(3, bool), np.arange(3), 0)
    new_a = _values("f16", (2, 3, 64), rng)
    changes = [lambda x: x.__setitem__((1, 2, 17), 0x3C004000),  # one lane of A
               lambda x: x.__setitem__((16, 0, 40), 0x3C004000),  # one lane of B
               lambda x: x.__setitem__(slice(0, 2), new_a)]  # all of A
    before = None
    for change in [None] + changes:
        if change is not None:
            change(fast.v)
            change(slow.v)
        fast_fn(fast)
        slow_fn(slow)
        np.testing.assert_array_equal(fast.v, slow.v)
        assert before is None or not np.array_equal(fast.v[40:44], before)
        before = fast.v[40:44].copy()
    assert len(fast.memo["matrix_operands"]) == 2  # A and B, kept

    wname = "v_wmma_f32_16x16x16_f16"
    wf = {"src0": d.VGPR0, "src1": d.VGPR0 + 16, "src2": d.VGPR0 + 32, "vdst": 40,
          "opsel": 0, "neg": 0, "neg_hi": 0, "clamp": 0}
    winst = d.Instruction(0, 8, "VOP3P", 0, wname, wf, None, (0, 0))
    w = _values("f16", (64, 4, 32), rng)
    slow, fast = _wmma_group(w, False), _wmma_group(w, True)
    before = None
    for reg, wave, lane in ((None, 0, 0), (3, 1, 5), (20, 3, 0)):
        if reg is not None:
            fast.v[reg, wave, lane] = slow.v[reg, wave, lane] = 0x3C004000
        vop3p.run_wmma(slow, winst, wname)
        vop3p.run_wmma(fast, winst, wname)
        np.testing.assert_array_equal(fast.v, np.asarray(slow.v))
        assert before is None or not np.array_equal(fast.v[40:48], before)
        before = fast.v[40:48].copy()


def test_kept_operands_stay_within_their_count_and_bytes(monkeypatch):
    """strided.converted keeps at most _KEPT operands and _KEPT_BYTES of them, dropping the
    oldest first; a kept one is still returned while its words are unchanged, and a
    dropped one is converted again."""
    monkeypatch.setattr(strided, "_KEPT_BYTES", 3 * (64 + 512))
    memo: dict = {}
    calls: list[int] = []

    def conv(i: int):
        def run():
            calls.append(i)
            return np.full(64, i, np.float64)  # 512 bytes (+ 64 of words)
        return run
    words = [np.full(16, i, np.uint32) for i in range(5)]
    first = [strided.converted(memo, ("k", i), words[i], conv(i)) for i in range(5)]
    assert calls == [0, 1, 2, 3, 4]
    assert list(memo["matrix_operands"]) == [("k", 2), ("k", 3), ("k", 4)]  # three fit
    assert strided.converted(memo, ("k", 4), words[4], conv(4)) is first[4]  # kept
    strided.converted(memo, ("k", 0), words[0], conv(0))  # dropped: converted again
    assert calls == [0, 1, 2, 3, 4, 0]
    monkeypatch.setattr(strided, "_KEPT_BYTES", 1 << 30)
    monkeypatch.setattr(strided, "_KEPT", 2)
    memo.clear()
    for i in range(5):
        strided.converted(memo, ("k", i), words[i], conv(i))
    assert list(memo["matrix_operands"]) == [("k", 3), ("k", 4)]
