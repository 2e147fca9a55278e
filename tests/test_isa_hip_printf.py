"""A HIP program with device printf and system-scope atomics, built with Debian's hipcc
(HIP 5.2) from tests/data/isa/hip_printf.hip, runs on the emulated gfx90a
(scripts/emulated.sh): HIP's hostcall service answers the kernel's printf packets and the
text comes out. The device library's hostcall code holds the gfx90a cache write-back and
invalidate instructions that used to stop the executor (buffer_wbl2/buffer_invl2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hip_emulated import run_hip_program

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "isa" / "hip_printf.hip"

pytestmark = [pytest.mark.isa_gfx9, pytest.mark.slow]


def test_device_printf_and_system_atomics(tmp_path: Path) -> None:
    run = run_hip_program(SOURCE, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert "device printf: thread 0 value 40" in lines
    assert "device printf: thread 1 value 41" in lines
    assert "sync no error, counter 64" in lines or "sync hipSuccess, counter 64" in lines
