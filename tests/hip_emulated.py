"""A HIP program built with Debian's hipcc (HIP 5.2.3) for gfx90a and run on the emulated
gfx90a under scripts/emulated.sh (the real HIP and ROCr over the emulated kernel): the one
recipe of the tests that run public-style HIP programs (device printf, cooperative groups,
texture objects)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_hip_program(source: Path, tmp_path: Path, node: str = "gfx90a"
                    ) -> subprocess.CompletedProcess:
    """Build `source` with hipcc --offload-arch=gfx90a (skips when hipcc is missing) and run
    it on the emulated `node`; returns the finished run (stdout, stderr, returncode)."""
    from hsa.emulated import build

    if shutil.which("hipcc") is None:
        pytest.skip("Debian's hipcc is not installed (scripts/setup.sh installs it)")
    build.ensure_built()
    exe = tmp_path / source.stem
    made = subprocess.run(["hipcc", "-O2", "--offload-arch=gfx90a", "-o", str(exe), str(source)],
                          env=dict(os.environ, HIP_PLATFORM="amd"), capture_output=True,
                          text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(AMDGPU_EMULATED_NODE=node, PYTHONPATH=str(ROOT))
    return subprocess.run(["bash", str(ROOT / "scripts" / "emulated.sh"), str(exe)], env=env,
                          capture_output=True, text=True, timeout=300)
