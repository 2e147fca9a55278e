"""IREE-compiled gfx1100 kernels (the kernel library) on the gfx11 executor, against numpy.

These exercise MUBUF buffer descriptors, DPP and v_permlanex16 cross-lane reductions,
LDS with barriers, v_exp/v_rcp/v_div_* sequences, WMMA (f16 matmul) and scratch.
"""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import require_iree

from hsa.virtual.gfx11.testing import Harness, run_program

pytestmark = pytest.mark.isa_gfx11


def _bundle(name: str):
    import compiler

    require_iree()  # skips only when IREE is absent; a failed compile fails
    return compiler.compile(name, targets=["gfx1100"], abi=())


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _relu(x):
    return np.maximum(x, 0)


CASES = {
    # name: (reference, rtol, atol)
    "saxpy": (lambda a, x, y: a * x + y, 0, 0),
    "reduction": (lambda x: x.astype(np.float64).sum(axis=-1), 1e-5, 1e-4),
    "softmax": (_softmax, 1e-5, 1e-7),
    "matmul_f16": (lambda a, b: a.astype(np.float64) @ b.astype(np.float64), 1e-5, 1e-3),
    "matmul_f32": (lambda a, b: a.astype(np.float64) @ b, 1e-5, 1e-4),
    "mlp": (lambda x, w1, b1, w2, b2: _relu(_relu(x.astype(np.float64) @ w1 + b1) @ w2 + b2),
            1e-5, 1e-4),
}


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness()


@pytest.mark.parametrize("name", sorted(CASES))
def test_library_kernel_matches_numpy(harness, name):
    bundle = _bundle(name)
    ref_fn, rtol, atol = CASES[name]
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(spec["shape"]).astype(spec["dtype"])
              for spec in bundle.program["inputs"]]
    (out,) = run_program(harness, bundle, inputs)
    ref = ref_fn(*inputs)
    if name == "saxpy":  # elementwise f32: mul then add, each rounded, like numpy
        assert np.array_equal(out, (inputs[0] * inputs[1] + inputs[2]).astype(np.float32))
    else:
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)
    assert harness.executor.last_lane_instructions > 0


def test_chain_of_dependent_dispatches(harness):
    bundle = _bundle("chain_4")
    from compiler import library

    inputs = library.example_inputs("chain_4")
    (out,) = run_program(harness, bundle, inputs)
    assert len(bundle.program["dispatches"]) == 4
    step = inputs[0]
    for _ in range(4):  # each dispatch rounds its + 1
        step = (step + np.float32(1)).astype(np.float32)
    np.testing.assert_array_equal(out, step)


@pytest.mark.parametrize("name,grid,block", [("fill", 4096, 256), ("copy", 4096, 96),
                                             ("saxpy_hidden", 1024, 128),
                                             ("lds_reduce", 4096, 256)])
def test_opencl_library_kernel(harness, name, grid, block):
    """The kernel library's OpenCL C kernels (clang via compiler.compile), every argument
    checked against library.reference after the run."""
    bundle = _bundle(name)
    from compiler import library

    args = library.example_inputs(name)
    code = harness.load(bundle.variant_for("gfx1100").data)
    values, buffers = [], {}
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            buffers[i] = harness.buffer(a)
            values.append(buffers[i])
        else:
            values.append(a.item() if hasattr(a, "item") else a)
    kernel = next(iter(code.code_object.kernels))
    harness.dispatch(code, kernel, (grid,), (block,), values)
    expected = library.reference(name, *args)
    for i, want in enumerate(expected):
        if i in buffers:
            got = harness.read(buffers[i], want.dtype, want.size)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
