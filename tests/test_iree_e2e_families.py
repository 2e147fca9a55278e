"""Programs of our own in the op families where IREE's e2e suite (benchmarks/
iree_e2e_pass_rate.py) found gaps: each is compiled by IREE, run by amdgpu-run (immediate
and replayed) and checked against IREE's own CPU runtime.

- matvec_i8: i8 x i8 -> i32 matvec into its accumulator (gfx942: v_dot4c_i32_i8);
- subbyte_constants: host constants of type i4/i2 (packed), bf16 (a NaN printed as a bit
  pattern) and f8E4M3FN (software fp8 on chips without it, as IREE's ROCm suite compiles);
- topk_rows: iree_linalg_ext.topk_v2 in one workgroup of two waves that update the same
  outputs; the waves split where lane 0 alone initialises them and now run together again
  where that block falls through (the scheduler merged groups only after jumps, so one wave
  ran the whole kernel before the other and the second inserted every value again);
- log1p_pow: stablehlo log_plus_one and power on f32, against numpy too: gfx942's code moves
  register pairs with v_pk_mov_b32 op_sel:[1,0] (a swap of halves), whose high half the
  executor took by op_sel_hi (log1p(0.5) was 0.98, pow off by 125).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amdgpu.cli import main

DATA = Path(__file__).parent / "data" / "iree"


def _run(capsys, name: str, device: str) -> dict:
    rc = main([str(DATA / f"{name}.mlir"), "--device", device, "--replay", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    return json.loads(out[-1])


@pytest.mark.parametrize("name", ["matvec_i8", "subbyte_constants", "topk_rows"])
def test_on_virtual(capsys, name):
    assert _run(capsys, name, "amdgpu:virtual")["correct"] is True


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matvec_i8", "subbyte_constants", "topk_rows"])
def test_on_gfx942(capsys, name):
    assert _run(capsys, name, "amdgpu:virtual:gfx942")["correct"] is True


@pytest.mark.parametrize("device", ["amdgpu:virtual", "amdgpu:virtual:gfx942"])
def test_log1p_and_pow_against_numpy(device):
    import amdgpu
    import compiler
    from amdgpu.program import ProgramRunner

    x = np.array([0.0, 0.5, 1.0, 5.0, 2.0, 3.0, 0.25, 1e-3], np.float32)
    y = np.array([2.0, 3.0, -1.5, 3.0, 7.0, 0.5, 2.5, 1.0], np.float32)
    with amdgpu.open(device) as dev:
        runner = ProgramRunner(dev, compiler.compile(DATA / "log1p_pow.mlir",
                                                     targets=[dev.target]))
        buffers = runner.allocate([x, y])
        runner.run_immediate(buffers)
        dev.synchronize(60.0)
        log1p, power = runner.read_outputs(buffers)
    np.testing.assert_allclose(log1p, np.log1p(x.astype(np.float64)), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(power, x.astype(np.float64) ** y, rtol=2e-6)


def test_constant_elements_of_every_width():
    from compiler.iree_host import _numpy_elements

    assert _numpy_elements(["dense<[0, 1, -2, 7]> : tensor<4xi4>"]) == bytes([0x10, 0x7E])
    assert _numpy_elements(["dense<[-1, 1, -2, 0, 1]> : tensor<5xi2>"]) == bytes([0x27, 0x01])
    assert _numpy_elements(["dense<[1.5, 0x7FC0]> : tensor<2xbf16>"]) == bytes.fromhex(
        "c03fc07f")
    assert _numpy_elements(["dense<0x7F800000> : tensor<2xf32>"]) == bytes.fromhex(
        "0000807f") * 2
    assert _numpy_elements(["dense<[1.0, -2.0]> : tensor<2xf8E4M3FN>"]) == bytes([0x38, 0xC0])
    # stablehlo's fft inputs: complex<f32> as (re,im) pairs, stored re then im
    assert _numpy_elements(["dense<[(1.5,-2.0), (7.5e-01,0.5)]> : tensor<2xcomplex<f32>>"]) == (
        np.array([1.5, -2.0, 0.75, 0.5], np.float32).tobytes())
    assert _numpy_elements(["dense<(1.0,2.0)> : tensor<2xcomplex<f64>>"]) == (
        np.array([1.0, 2.0, 1.0, 2.0]).tobytes())
