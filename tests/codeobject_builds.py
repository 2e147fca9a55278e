"""The code objects the compiler-area tests read, built with clang 22 from the ziglang wheel
(not a test module: tests/conftest.py's `code_objects` session fixture builds them once per
session under the session's base temp directory, and test modules ask for the fixture).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

KERNELS_CL = r"""
__kernel void saxpy(__global float* y, __global const float* x, float a, unsigned int n) {
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
                   + __builtin_amdgcn_workitem_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void lds_reverse(__global float* out) {
  __local float tmp[64];
  unsigned int t = __builtin_amdgcn_workitem_id_x();
  tmp[t] = out[t];
  __builtin_amdgcn_s_barrier();
  out[t] = tmp[63 - t];
}

__kernel void scratch(__global float* out, __global const unsigned int* idx) {
  float tmp[96];
  unsigned int t = __builtin_amdgcn_workitem_id_x();
  for (int j = 0; j < 96; ++j) tmp[j] = out[j + t];
  out[t] = tmp[idx[t] % 96u];
}
"""

#: (mcpu, code object version) pairs built for the tests.
BUILDS = [
    ("gfx942:sramecc+:xnack-", 4), ("gfx942:sramecc+:xnack-", 5), ("gfx942:sramecc+:xnack-", 6),
    ("gfx942", 5), ("gfx950", 5), ("gfx1100", 4), ("gfx1100", 5), ("gfx1100", 6),
    ("gfx1201", 5), ("gfx1250", 5), ("gfx11-generic", 6),
]


@dataclass(frozen=True)
class Built:
    mcpu: str
    version: int
    obj: Path  # relocatable .o
    hsaco: Path  # linked shared object

    def read(self, linked: bool = True) -> bytes:
        return (self.hsaco if linked else self.obj).read_bytes()


def have_clang() -> bool:
    return importlib.util.find_spec("ziglang") is not None


def _run(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "ziglang", *args], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {proc.stderr.strip()[-500:]}")


def build_code_object(source: Path, mcpu: str, version: int, out_dir: Path) -> Built:
    stem = f"{mcpu.replace(':', '_').replace('+', 'p').replace('-', 'm')}_v{version}"
    obj, hsaco = out_dir / f"{stem}.o", out_dir / f"{stem}.hsaco"
    if not hsaco.exists():
        _run(["clang", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa",
              f"-mcpu={mcpu}", "-nogpulib", "-cl-no-stdinc", "-O2", "-Wno-everything",
              f"-mcode-object-version={version}", "-c", str(source), "-o", str(obj)])
        _run(["ld.lld", "-shared", str(obj), "-o", str(hsaco)])
    return Built(mcpu, version, obj, hsaco)


def build_all(out: Path) -> dict[tuple[str, int], Built]:
    """{(mcpu, version): Built} for every entry of BUILDS, built under `out` (reused when
    already there)."""
    out.mkdir(parents=True, exist_ok=True)
    source = out / "kernels.cl"
    if not source.exists():
        source.write_text(KERNELS_CL)
    return {(mcpu, v): build_code_object(source, mcpu, v, out) for mcpu, v in BUILDS}
