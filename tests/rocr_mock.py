"""The stand-in libhsa-runtime64 (tests/c/rocr_mock_runtime.c), built for the tests that run
RocrProvider over it (not a test module: tests/test_rocr_mock.py and
tests/test_rocr_conformance.py import it).

The mock is compiled against the real ROCr headers, so each C definition has the real
prototype.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).parent / "c" / "rocr_mock_runtime.c"


def build_mock_library(tmp: Path, minimal: bool) -> Path:
    """Compile the stand-in ROCr into `tmp` (the MOCK_MINIMAL variant when `minimal`) and
    return the library's path; skips where gcc or the ROCr headers are missing."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: cannot build the mock ROCr library")
    if not os.path.exists("/usr/include/hsa/hsa_ext_amd.h"):
        pytest.skip("ROCr headers missing from /usr/include/hsa (libhsa-runtime-dev)")
    out = tmp / ("libmockhsa_min.so" if minimal else "libmockhsa.so")
    cmd = [
        gcc,
        "-std=gnu11",
        "-O1",
        "-fPIC",
        "-shared",
        "-pthread",
        "-Wall",
        "-Werror",
        "-Wl,-Bsymbolic",
        "-o",
        str(out),
        str(SOURCE),
    ]
    if minimal:
        cmd.insert(1, "-DMOCK_MINIMAL")
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    return out
