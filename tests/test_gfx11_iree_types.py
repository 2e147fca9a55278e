"""IREE-compiled programs of our own over the element types compute code uses beyond f32
(f16, bf16, i8 -> i32 matmul, i16, i64), run on the gfx11 executor against numpy: IREE's
code generation picks instructions for each (packed f16, bf16 shifts, int8 WMMA, 16-bit
true16 ALU, 64-bit integer division sequences) that nobody here wrote.
"""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import require_iree

from hsa.virtual.gfx11.testing import Harness, run_program

pytestmark = pytest.mark.isa_gfx11

PROGRAMS = {
    "f16": """
func.func @fma_f16(%a: tensor<1000xf16>, %b: tensor<1000xf16>, %c: tensor<1000xf16>)
    -> tensor<1000xf16> {
  %m = arith.mulf %a, %b : tensor<1000xf16>
  %r = arith.addf %m, %c : tensor<1000xf16>
  %z = arith.maximumf %r, %c : tensor<1000xf16>
  return %z : tensor<1000xf16>
}""",
    "bf16": """
func.func @bf16_mix(%a: tensor<777xbf16>, %b: tensor<777xbf16>) -> tensor<777xf32> {
  %m = arith.mulf %a, %b : tensor<777xbf16>
  %s = arith.addf %m, %a : tensor<777xbf16>
  %e = arith.extf %s : tensor<777xbf16> to tensor<777xf32>
  return %e : tensor<777xf32>
}""",
    "i16": """
func.func @i16_ops(%a: tensor<999xi16>, %b: tensor<999xi16>) -> tensor<999xi16> {
  %m = arith.muli %a, %b : tensor<999xi16>
  %x = arith.maxsi %m, %a : tensor<999xi16>
  %c3 = arith.constant dense<3> : tensor<999xi16>
  %s = arith.shrsi %x, %c3 : tensor<999xi16>
  %r = arith.xori %s, %b : tensor<999xi16>
  return %r : tensor<999xi16>
}""",
    "i64": """
func.func @i64_ops(%a: tensor<513xi64>, %b: tensor<513xi64>) -> tensor<513xi64> {
  %m = arith.muli %a, %b : tensor<513xi64>
  %s = arith.addi %m, %a : tensor<513xi64>
  %c7 = arith.constant dense<7> : tensor<513xi64>
  %d = arith.divsi %s, %c7 : tensor<513xi64>
  %r = arith.minsi %d, %b : tensor<513xi64>
  return %r : tensor<513xi64>
}""",
    "i8_matmul": """
func.func @i8_matmul(%a: tensor<64x96xi8>, %b: tensor<96x32xi8>) -> tensor<64x32xi32> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<64x32xi32>
  %f = linalg.fill ins(%c0 : i32) outs(%e : tensor<64x32xi32>) -> tensor<64x32xi32>
  %r = linalg.matmul ins(%a, %b : tensor<64x96xi8>, tensor<96x32xi8>)
                     outs(%f : tensor<64x32xi32>) -> tensor<64x32xi32>
  return %r : tensor<64x32xi32>
}""",
}


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    b = np.asarray(x, np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _inputs(name: str, rng) -> list[np.ndarray]:
    if name == "f16":
        return [rng.standard_normal(1000).astype(np.float16) for _ in range(3)]
    if name == "bf16":
        return [_bf16_bits(rng.standard_normal(777)) for _ in range(2)]
    if name == "i16":
        return [rng.integers(-2**15, 2**15, 999).astype(np.int16) for _ in range(2)]
    if name == "i64":
        return [rng.integers(-2**40, 2**40, 513), rng.integers(-2**20, 2**20, 513)]
    return [rng.integers(-128, 128, (64, 96)).astype(np.int8),
            rng.integers(-128, 128, (96, 32)).astype(np.int8)]


def _reference(name: str, xs: list[np.ndarray]) -> np.ndarray:
    if name == "f16":
        a, b, c = (x.astype(np.float32) for x in xs)
        r = (a * b).astype(np.float16).astype(np.float32) + c
        return np.maximum(r.astype(np.float16).astype(np.float32), c)
    if name == "bf16":
        a, b = (_bf16(x) for x in xs)
        return _bf16(_bf16_bits(_bf16(_bf16_bits(a * b)) + a))
    if name == "i16":
        a, b = (x.astype(np.int16) for x in xs)
        with np.errstate(over="ignore"):
            m = a * b
        return ((np.maximum(m, a) >> 3) ^ b).astype(np.int16)
    if name == "i64":
        a, b = xs
        s = a * b + a
        return np.minimum(_cdiv(s, 7), b)
    a, b = xs
    return a.astype(np.int32) @ b.astype(np.int32)


def _cdiv(x: np.ndarray, d: int) -> np.ndarray:  # C's truncating division, exactly
    q = np.abs(x) // d
    return np.where(x < 0, -q, q)


@pytest.fixture(scope="module")
def harness():
    return Harness()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_iree_program_matches_numpy(harness, name: str, tmp_path):
    require_iree()
    import compiler

    src = tmp_path / f"{name}.mlir"
    src.write_text(PROGRAMS[name])
    bundle = compiler.compile(src, targets=["gfx1100"], abi=())
    xs = _inputs(name, np.random.default_rng(len(name)))
    got = run_program(harness, bundle, xs)[0]
    want = _reference(name, xs)
    if name in ("f16", "bf16"):  # one rounding per op either side; fused or not
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    else:
        np.testing.assert_array_equal(got, want)
