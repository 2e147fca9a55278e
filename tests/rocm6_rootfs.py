"""The ROCm 6 root filesystem of scripts/rocm6.sh for the tests that run inside it: built
here on first use (debootstrap, about 6-8 minutes and 2.4 GB, cached in
/var/cache/amdgpu-direct), so a fresh machine runs them whatever the order of the run,
instead of skipping the ones collected before tests/test_rocm6_rootfs.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "rocm6.sh"


def ensure_rootfs(suite: str = "sid") -> Path:
    """The suite's root filesystem, built when missing; skips only where this machine
    cannot run scripts/rocm6.sh at all (not root, or util-linux's tools missing)."""
    if os.geteuid() != 0:
        pytest.skip("scripts/rocm6.sh needs root (debootstrap, chroot, mount namespaces)")
    for tool in ("unshare", "chroot", "flock"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing (util-linux/coreutils)")
    built = subprocess.run(["bash", str(SCRIPT), "--suite", suite, "--path"],
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-2000:]
    return Path(built.stdout.strip().splitlines()[-1])
