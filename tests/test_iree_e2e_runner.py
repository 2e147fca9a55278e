"""benchmarks/iree_e2e_pass_rate.py's judgement, on small e2e-style files of our own: a
test function becomes a program returning what its checks check, a result that IREE's CPU
backend gets wrong but the test's own check.expect_* accepts passes (and says so), and a
program IREE's own ROCm backend cannot compile is named as such, not counted as ours."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location(
        "iree_e2e_pass_rate", ROOT / "benchmarks" / "iree_e2e_pass_rate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SUM = """
func.func @long_sum() {
  %x = util.unfoldable_constant dense<1.0e-03> : tensor<40960xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                       iterator_types = ["reduction"]}
      ins(%x : tensor<40960xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %t = arith.addf %a, %o : f32
    linalg.yield %t : f32
  } -> tensor<f32>
  check.expect_almost_eq_const(%s, dense<40.96> : tensor<f32>) : tensor<f32>
  %i = util.unfoldable_constant dense<[1, 2]> : tensor<2xi32>
  check.expect_eq_const(%i, dense<[1, 2]> : tensor<2xi32>) : tensor<2xi32>
  return
}
"""

TRUNC_I1 = """
func.func @trunc_i1() {
  %m = util.unfoldable_constant dense<[1, 0, 1, 1, 0, 0, 1, 0]> : tensor<8xi8>
  %e = tensor.empty() : tensor<8xi1, #iree_encoding.packed_storage>
  %t = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%m : tensor<8xi8>) outs(%e : tensor<8xi1, #iree_encoding.packed_storage>) {
  ^bb0(%a: i8, %o: i1):
    %b = arith.trunci %a : i8 to i1
    linalg.yield %b : i1
  } -> tensor<8xi1, #iree_encoding.packed_storage>
  %r = flow.tensor.bitcast %t : tensor<8xi1, #iree_encoding.packed_storage> -> tensor<1xi8>
  check.expect_eq_const(%r, dense<[77]> : tensor<1xi8>) : tensor<1xi8>
  return
}
"""


def _split(runner, tmp_path, text, family="regression", stem="mine"):
    src = tmp_path / family / f"{stem}.mlir"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(text)
    out = tmp_path / "work"
    out.mkdir(exist_ok=True)
    return runner.split_programs(src, out)


def test_iree_check_accepts_what_the_cpu_backend_gets_wrong(runner, tmp_path):
    (prog,) = _split(runner, tmp_path, SUM)
    assert prog.name == "regression__mine__long_sum.mlir"
    assert "check." not in prog.read_text()
    checks = prog.with_suffix(".checks.json").read_text()
    assert '"expect_almost_eq"' in checks and '"expect_eq"' in checks
    # IREE's CPU backend sums sequentially (40.949); the test expects 40.96 within 1e-4.
    ints = np.array([1, 2], np.int32)
    assert runner.passes_iree_check([np.float32(40.960003), ints], str(prog))
    assert runner.passes_iree_check([np.float32(40.949123), ints], str(prog)) is None
    assert runner.passes_iree_check([np.float32(40.96), ints + 1], str(prog)) is None


@pytest.mark.slow
def test_a_program_iree_cannot_compile_for_the_target_is_named(runner, tmp_path):
    (sum_prog,) = _split(runner, tmp_path, SUM)
    assert runner.iree_rocm_refuses(str(sum_prog), "gfx942:sramecc+:xnack-") is None
    (prog,) = _split(runner, tmp_path, TRUNC_I1, "subbyte_types")
    why = runner.iree_rocm_refuses(str(prog), "gfx1100")
    assert why is not None and "materialization" in why, why
    assert str(tmp_path) not in why


def test_summary_counts_exclusions_apart(runner, capsys):
    results = {
        "linalg__a__x": {"reference": "ok", "amdgpu:virtual": "pass"},
        "linalg__a__y": {"reference": "ok", "amdgpu:virtual": "pass: matches (differs)"},
        "regression__b__z": {"reference": "ok", "amdgpu:virtual": "error: E"},
        "regression__b__w": {"reference": "ok",
                             "amdgpu:virtual": f"{runner.NOT_COMPILED}: LLVM ERROR: x"},
        "regression__b__v": {"reference": "CompileError: no"},
    }
    runner.summarize(results, ["amdgpu:virtual"])
    out = capsys.readouterr().out
    assert "| linalg | 2 | 2 / 2 (100.0%) |" in out
    assert "| regression | 2 | 0 / 1 (0.0%), 1 excl. |" in out
    assert "regression__b__w: LLVM ERROR: x" in out
    assert "2 / 3 pass (66.7%); 1 of them by IREE's own check" in out
    assert f"1 {runner.NOT_COMPILED} (excluded" in out
