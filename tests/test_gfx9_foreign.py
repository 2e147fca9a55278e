"""Foreign CDNA code objects on the gfx9 executor, against numpy: Triton 3.9 kernels built
for gfx942 (kernarg preloading, buffer ops, MFMA) and hipcc --genco objects for gfx90a."""

from __future__ import annotations

import numpy as np
import pytest
from codeobjects import TRITON, hip_entries, launch_triton_fixture, load_kernel

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx9]


def _open(target: str):
    import amdgpu

    return amdgpu.open(f"amdgpu:virtual:{target}")


@pytest.fixture
def dev942():
    d = _open("gfx942")
    yield d
    d.close()


@pytest.fixture
def dev90a():
    d = _open("gfx90a")
    yield d
    d.close()


@pytest.mark.parametrize("n", [1000, 256, 1])
def test_triton_add_gfx942(dev942, n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    bx, by = dev942.buffer(x), dev942.buffer(y)
    out = dev942.buffer(np.full(n + 64, 7, np.float32))
    launch_triton_fixture(dev942, "triton_add_gfx942.hsaco", (-(-n // 256),),
                           (bx, by, out, np.int32(n)))
    got = out.to_numpy(np.float32)
    np.testing.assert_array_equal(got[:n], x + y)
    assert (got[n:] == 7).all()


def test_triton_row_sum_gfx942(dev942) -> None:
    rows, cols, stride = 6, 100, 128
    a = np.random.default_rng(1).standard_normal((rows, stride)).astype(np.float32)
    ba, out = dev942.buffer(a), dev942.buffer(rows * 4)
    launch_triton_fixture(dev942, "triton_row_sum_gfx942.hsaco", (rows,),
                           (ba, out, np.int32(cols), np.int32(stride)))
    np.testing.assert_allclose(out.to_numpy(np.float32), a[:, :cols].sum(1), rtol=1e-5,
                               atol=1e-5)


def test_triton_softmax_gfx942(dev942) -> None:
    rows, cols, stride = 5, 50, 64
    x = np.random.default_rng(2).standard_normal((rows, stride)).astype(np.float32)
    bx, out = dev942.buffer(x), dev942.buffer(np.zeros_like(x))
    launch_triton_fixture(dev942, "triton_softmax_gfx942.hsaco", (rows,),
                           (bx, out, np.int32(cols), np.int32(stride)))
    e = np.exp(x[:, :cols] - x[:, :cols].max(1, keepdims=True))
    got = out.to_numpy(np.float32).reshape(rows, stride)
    np.testing.assert_allclose(got[:, :cols], e / e.sum(1, keepdims=True), rtol=1e-5)


def test_triton_matmul_mfma_gfx942(dev942) -> None:
    m, n, k = 40, 48, 40  # not multiples of the tiles: masks on every edge
    name = "triton_matmul_gfx942.hsaco"
    facts = TRITON[name]["constexprs"]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev942.buffer(m * n * 4)
    launch_triton_fixture(dev942, name, (-(-m // facts["BM"]), -(-n // facts["BN"])),
                           (dev942.buffer(a), dev942.buffer(b), c, np.int32(m), np.int32(n),
                            np.int32(k)))
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.to_numpy(np.float32).reshape(m, n), want, rtol=1e-4,
                               atol=1e-4)


def test_hipcc_gfx90a_kernels_run(dev90a) -> None:
    data = hip_entries("hipcc_builtins.hsaco")["hipv4-amdgcn-amd-amdhsa--gfx90a"]
    n = 1000
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    by = dev90a.buffer(y)
    saxpy = load_kernel(dev90a, data, "hip_saxpy")
    dev90a.dispatch(saxpy, 1024, 128, (np.float32(2.5), dev90a.buffer(x), by,
                                       np.int32(n))).wait(30)
    np.testing.assert_allclose(by.to_numpy(np.float32), 2.5 * x + y, rtol=1e-6, atol=1e-6)
    block_sum = load_kernel(dev90a, data, "hip_block_sum")
    blocks = 7
    v = rng.standard_normal(64 * blocks, np.float32)
    out = dev90a.buffer(blocks * 4)
    dev90a.dispatch(block_sum, 64 * blocks, 64, (dev90a.buffer(v), out)).wait(30)
    np.testing.assert_allclose(out.to_numpy(np.float32), v.reshape(blocks, 64).sum(1),
                               rtol=1e-5, atol=1e-5)


_WORKLOADS = ["saxpy", "chain-4", "reduction", "softmax", "matmul-f32", "matmul-f16", "mlp",
              "fill", "copy", "saxpy-hidden", "lds-reduce"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx950"])
@pytest.mark.parametrize("workload", _WORKLOADS)
def test_every_workload_replayed_on_cdna(capsys, target, workload):
    """amdgpu-run checks each workload against numpy (immediate, then --replay)."""
    import json

    from amdgpu.cli import main

    argv = [workload, "--device", f"amdgpu:virtual:{target}", "--driver", "amdgpu",
            "--replay", "--repeat", "1", "--json"]
    rc = main(argv)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["correct"] is True and out["target"] == target
