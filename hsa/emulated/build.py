"""Building the emulated kernel's two C libraries with gcc (scripts/setup.sh runs this).

build/emulated/libamdgpu_kfd.so: the LD_PRELOAD shim clients run with (shim/kfd_shim.c);
build/emulated/libamdgpu_devside.so: the device server's doorbell watch, atomics and event
wakeups (shim/devside.c). A library is rebuilt when the content hash of its source changed
(a rebase moves mtimes). `python -c "from hsa.emulated.build import main; main()"`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ground.errors import HsaUnavailable
from ground.status import HSA_STATUS_ERROR_NOT_INITIALIZED

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = Path(__file__).resolve().parent / "shim"
OUT_DIR = ROOT / "build" / "emulated"
NEXT_STEP = "run scripts/setup.sh (it installs gcc and builds the emulated kernel)"
# library name -> (source, extra gcc flags)
LIBRARIES = {
    "libamdgpu_kfd.so": ("kfd_shim.c", ["-ldl", "-lpthread"]),
    "libamdgpu_devside.so": ("devside.c", []),
}


def shim_path() -> Path:
    return OUT_DIR / "libamdgpu_kfd.so"


def devside_path() -> Path:
    return OUT_DIR / "libamdgpu_devside.so"


def _unavailable(why: str) -> HsaUnavailable:
    return HsaUnavailable(HSA_STATUS_ERROR_NOT_INITIALIZED,
                          f"emulated AMD kernel: {why}; {NEXT_STEP}", "build")


def _hash(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def is_stale(lib: Path) -> bool:
    source = SOURCE_DIR / LIBRARIES[lib.name][0]
    stamp = lib.with_name(lib.name + ".sha256")
    return not lib.exists() or not stamp.exists() or stamp.read_text() != _hash(source)


def build(name: str) -> Path:
    source, flags = LIBRARIES[name]
    gcc = shutil.which("gcc")
    if gcc is None:
        raise _unavailable(f"gcc is not installed, so {name} cannot be built")
    out = OUT_DIR / name
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [gcc, "-O2", "-Wall", "-Werror", "-fPIC", "-shared", "-fvisibility=hidden",
           "-o", str(tmp), str(SOURCE_DIR / source), *flags]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        lines = result.stderr.strip().splitlines() or ["(no output)"]
        first = next((line for line in lines if "error" in line), lines[0])
        raise _unavailable(f"gcc failed to build {name}: {first}")
    os.replace(tmp, out)  # atomic: a process loading it sees the old or the new file
    out.with_name(out.name + ".sha256").write_text(_hash(SOURCE_DIR / source))
    return out


def ensure_built() -> list[Path]:
    """Both libraries, each rebuilt first when missing or stale."""
    return [build(name) if is_stale(OUT_DIR / name) else OUT_DIR / name for name in LIBRARIES]


def main() -> None:
    try:
        paths = ensure_built()
    except HsaUnavailable as exc:
        print(f"setup: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"setup: emulated AMD kernel: {', '.join(str(p) for p in paths)}")
