"""hipMallocPitch + hipMemcpy2D both ways on the emulated gfx90a (issue 32): Debian's hipcc
5.2.3 builds tests/data/isa/hip_memcpy2d.hip and the real HIP 5.2.3 over ROCr 5.2.3 runs it
over the emulated kernel (scripts/emulated.sh). ROCr turns the host <-> pitched device
copies into SDMA COPY_LINEAR_SUB_WINDOW packets (16-byte elements for the whole rows, 1-byte
ones for the odd-width sub-rectangle), which hsa.virtual.sdma runs; before, the engine
refused them and hipMemcpy2D never returned. The program checks every byte, the pitch
padding and the bytes around each rectangle included."""

from __future__ import annotations

from pathlib import Path

import pytest
from hip_emulated import run_hip_program

SOURCE = Path(__file__).resolve().parent / "data" / "isa" / "hip_memcpy2d.hip"

pytestmark = [pytest.mark.generic, pytest.mark.slow]


def test_hip_memcpy2d_through_sdma_sub_windows(tmp_path):
    run = run_hip_program(SOURCE, tmp_path)
    out = run.stdout + run.stderr[-2000:]
    for case in ("hipMemcpy2D host to device, pitch 512: 0 of 5776 wrong",
                 "hipMemcpy2D device to host, 123x7 at (44,9): 0 of 1120 wrong",
                 "hipMemcpy2D device to device, pitch 256: 0 of 3200 wrong"):
        assert case in run.stdout, out
    assert run.returncode == 0 and "memcpy2d ok" in run.stdout, out
