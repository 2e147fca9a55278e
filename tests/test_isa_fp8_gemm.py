"""fp8 GEMMs from IREE on the matrix instructions of gfx942 (MFMA, FNUZ fp8), gfx950
(v_mfma_f32_16x16x128_f8f6f4 with fp8 formats, OCP fp8) and gfx1201
(v_wmma_f32_16x16x16_fp8_fp8, OCP fp8), against numpy bit for bit: small-integer inputs
make every product and sum exact. gfx1201's fp8 WMMA read its operands as f16 before
(every element wrong)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from toolchains import require_iree

pytestmark = pytest.mark.hsa_virtual



@pytest.mark.parametrize("target,fp8", [("gfx942", "f8E4M3FNUZ"), ("gfx950", "f8E4M3FN"),
                                       ("gfx1201", "f8E4M3FN")])
def test_fp8_gemm_is_exact(target: str, fp8: str) -> None:
    require_iree()
    import ml_dtypes  # noqa: F401 - numpy's names for the fp8 dtypes

    import compiler
    from compiler.library import gemm_source
    from hsa.virtual.gfx11.testing import Harness, run_program

    n = 48
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gemm.mlir"
        path.write_text(gemm_source(n, fp8))
        bundle = compiler.compile(path, targets=[target], abi=())
    rng = np.random.default_rng(32)
    ints = [rng.integers(-4, 5, (n, n)) for _ in range(2)]
    inputs = [x.astype(s["dtype"]) for x, s in zip(ints, bundle.program["inputs"],
                                                      strict=True)]
    got = run_program(Harness(target), bundle, inputs)[0]
    np.testing.assert_array_equal(got, (ints[0] @ ints[1]).astype(np.float32))
