"""HIP cooperative groups end to end on the emulated gfx90a: Debian's hipcc builds
tests/data/isa/hip_grid_sync.hip, and the real HIP 5.2.3 runtime over ROCr 5.2.3 and the
emulated kernel (scripts/emulated.sh) reports cooperative launch (ROCr's cooperative queues
come from the KFD node's num_gws), launches it with hipLaunchCooperativeKernel (a
cooperative queue: AMDKFD_IOC_ALLOC_QUEUE_GWS), and the kernel's grid.sync()
(ds_gws_barrier, hsa.virtual.isa.gws) orders a grid-wide sum: the total is exact."""

from __future__ import annotations

from pathlib import Path

import pytest
from hip_emulated import run_hip_program

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "data" / "isa" / "hip_grid_sync.hip"

pytestmark = [pytest.mark.generic, pytest.mark.slow]


def test_hip_cooperative_launch_and_grid_sync(tmp_path):
    run = run_hip_program(SOURCE, tmp_path)
    out = run.stdout + run.stderr[-2000:]
    assert "cooperative launch 1" in run.stdout, out
    assert run.returncode == 0 and "grid sync ok" in run.stdout, out
