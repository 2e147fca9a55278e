"""Triton 3.9 kernels compiled for gfx942 (MI300) and gfx950 (MI355X), run on the virtual CDNA
agents and checked against numpy: vector add, softmax, layer norm, atomics, and MFMA matmuls
in fp16, fp32 and int8. The code objects are committed (tests/data/codeobjects/triton_cdna,
built by make_cdna_fixtures.py there); CI needs no Triton."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from codeobjects import triton_launch

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx9]

DATA = Path(__file__).parent / "data" / "codeobjects" / "triton_cdna"
FACTS = json.loads((DATA / "manifest.json").read_text())["kernels"]
TARGETS = ["gfx942", "gfx950"]


@pytest.fixture(params=TARGETS)
def dev(request):
    import amdgpu

    d = amdgpu.open(f"amdgpu:virtual:{request.param}")
    d.target = request.param
    yield d
    d.close()


def _launch(dev, stem: str, programs: tuple[int, ...], args: tuple) -> None:
    """As Triton's launcher: num_warps waves a program, `shared` bytes of dynamic LDS, two
    null scratch pointers after the user's arguments."""
    triton_launch(dev, (DATA / f"{stem}_{dev.target}.hsaco").read_bytes(),
                  FACTS[f"{stem}_{dev.target}.hsaco"], programs, args, wait_s=120)


def test_add(dev) -> None:
    n = 1000
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    out = dev.buffer(np.full(n + 24, 7, np.float32))
    _launch(dev, "add", (-(-n // 256),), (dev.buffer(x), dev.buffer(y), out, np.int32(n)))
    got = out.to_numpy(np.float32)
    np.testing.assert_array_equal(got[:n], x + y)
    assert (got[n:] == 7).all()


def test_softmax(dev) -> None:
    rows, cols, stride = 5, 100, 128
    x = np.random.default_rng(2).standard_normal((rows, stride)).astype(np.float32)
    out = dev.buffer(np.zeros_like(x))
    _launch(dev, "softmax", (rows,), (dev.buffer(x), out, np.int32(cols), np.int32(stride)))
    e = np.exp(x[:, :cols] - x[:, :cols].max(1, keepdims=True))
    got = out.to_numpy(np.float32).reshape(rows, stride)
    np.testing.assert_allclose(got[:, :cols], e / e.sum(1, keepdims=True), rtol=1e-5)


def test_layer_norm(dev) -> None:
    rows, cols, stride = 4, 200, 256
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, stride)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal(cols, np.float32), rng.standard_normal(cols, np.float32)
    out = dev.buffer(np.zeros_like(x))
    _launch(dev, "layer_norm", (rows,), (dev.buffer(x), dev.buffer(w), dev.buffer(b), out,
                                         np.int32(cols), np.int32(stride), np.float32(1e-5)))
    v = x[:, :cols].astype(np.float64)
    want = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + 1e-5) * w + b
    got = out.to_numpy(np.float32).reshape(rows, stride)[:, :cols]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_atomics_histogram(dev) -> None:
    n, bins = 3000, 7
    x = np.random.default_rng(4).integers(0, 1000, n).astype(np.int32)
    counts, total = dev.buffer(np.zeros(bins, np.int32)), dev.buffer(np.zeros(1, np.float32))
    _launch(dev, "histogram", (-(-n // 256),), (dev.buffer(x), counts, total, np.int32(n),
                                                np.int32(bins)))
    np.testing.assert_array_equal(counts.to_numpy(np.int32), np.bincount(x % bins,
                                                                         minlength=bins))
    np.testing.assert_allclose(total.to_numpy(np.float32)[0], x.sum(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["f16", "f32", "i8"])
def test_matmul_mfma(dev, kind: str) -> None:
    m, n, k = 40, 48, 72  # not multiples of the 32 x 32 x 32 tiles: masks on every edge
    rng = np.random.default_rng(5)
    if kind == "i8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        out_t = np.int32
    else:
        dt = np.float16 if kind == "f16" else np.float32
        a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
        out_t = np.float32
    c = dev.buffer(m * n * 4)
    _launch(dev, f"matmul_{kind}", (-(-m // 32), -(-n // 32)),
            (dev.buffer(a), dev.buffer(b), c, np.int32(m), np.int32(n), np.int32(k)))
    got = c.to_numpy(out_t).reshape(m, n)
    if kind == "i8":
        np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    else:
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx950"])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention(target: str, causal: bool) -> None:
    """Triton's flash-attention forward (online softmax, two MFMA dots a block), causal and
    not, two heads of 100 x 64: the causal one was wrong on gfx90a (issue 32)."""
    import amdgpu

    heads, seq, dim = 2, 100, 64
    rng = np.random.default_rng(32)
    q, k, v = (rng.standard_normal((heads, seq, dim)).astype(np.float16) for _ in range(3))
    scale = np.float32(1 / np.sqrt(dim))
    stem = f"attention_{'causal' if causal else 'full'}_{target}.hsaco"
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    try:
        o = dev.buffer(np.zeros((heads, seq, dim), np.float16))
        triton_launch(dev, (DATA / stem).read_bytes(), FACTS[stem], (-(-seq // 32), heads),
                      (dev.buffer(q), dev.buffer(k), dev.buffer(v), o, np.int32(seq), scale),
                      wait_s=120)
        got = o.to_numpy(np.float16).reshape(heads, seq, dim).astype(np.float32)
    finally:
        dev.close()
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float32), k.astype(np.float32)) * scale
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_tutorial(target: str, causal: bool) -> None:
    """Triton's tutorial 06 forward (exp2, stages left of / on the diagonal, the diagonal
    block masked by adding -1e6), two heads of 128 x 64. The causal gfx942 build converts
    P to f16 into v128 (v_cvt_f16_f32_e32 v128, v43): the executor took VGPR bit 7 of a
    gfx9 VOP1 destination for gfx11's true16 high-half select and wrote v0.h instead."""
    import amdgpu

    heads, seq, dim = 2, 128, 64
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((heads, seq, dim)).astype(np.float16) for _ in range(3))
    scale = np.float32(1 / np.sqrt(dim))
    stem = f"attention_tutorial_{'causal' if causal else 'full'}_{target}.hsaco"
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    try:
        o = dev.buffer(np.zeros((heads, seq, dim), np.float16))
        triton_launch(dev, (DATA / stem).read_bytes(), FACTS[stem], (seq // 64, heads),
                      (dev.buffer(q), dev.buffer(k), dev.buffer(v), o, scale), wait_s=120)
        got = o.to_numpy(np.float16).reshape(heads, seq, dim).astype(np.float32)
    finally:
        dev.close()
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float32), k.astype(np.float32)) * scale
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
