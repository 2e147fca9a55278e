"""Building the emulated driver's libhsakmt.so.1 with gcc (scripts/setup.sh runs this).

`python -c "from hsa.emulated.build import main; main()"` builds build/emulated/libhsakmt.so.1 from
hsa/emulated/thunk/hsakmt_emu.c when the library is missing or older than its sources;
`ensure_built()` does the same on demand and raises HsaUnavailable with the cause when it
cannot (no gcc, no libhsakmt-dev headers, a compile error).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ground.errors import HsaUnavailable
from ground.status import HSA_STATUS_ERROR_NOT_INITIALIZED

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = Path(__file__).resolve().parent / "thunk"
SOURCES = (SOURCE_DIR / "hsakmt_emu.c", SOURCE_DIR / "hsakmt.map")
ENV_VAR = "AMDGPU_EMULATED_THUNK"  # a prebuilt libhsakmt.so.1 to use instead
HEADER = "/usr/include/hsakmt.h"
NEXT_STEP = "run scripts/setup.sh (it installs libhsakmt-dev and gcc and builds the thunk)"


def library_path() -> Path:
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    return ROOT / "build" / "emulated" / "libhsakmt.so.1"


def _unavailable(why: str) -> HsaUnavailable:
    return HsaUnavailable(
        HSA_STATUS_ERROR_NOT_INITIALIZED, f"emulated AMD driver: {why}; {NEXT_STEP}", "build"
    )


def is_stale(lib: Path) -> bool:
    if not lib.exists():
        return True
    built = lib.stat().st_mtime
    return any(src.stat().st_mtime > built for src in SOURCES if src.exists())


def build(out: Path | None = None) -> Path:
    """Compile the thunk into `out` (default: build/emulated/libhsakmt.so.1)."""
    out = out or (ROOT / "build" / "emulated" / "libhsakmt.so.1")
    gcc = shutil.which("gcc")
    if gcc is None:
        raise _unavailable("gcc is not installed, so libhsakmt.so.1 cannot be built")
    if not os.path.exists(HEADER):
        raise _unavailable(f"{HEADER} is missing (Debian package libhsakmt-dev)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [
        gcc, "-O2", "-Wall", "-fPIC", "-shared", "-fvisibility=hidden",
        "-Wl,-soname,libhsakmt.so.1", f"-Wl,--version-script={SOURCES[1]}",
        "-o", str(tmp), str(SOURCES[0]), "-lpthread",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = (result.stderr.strip().splitlines() or ["(no output)"])[0]
        raise _unavailable(f"gcc failed to build libhsakmt.so.1: {first}")
    os.replace(tmp, out)  # atomic: a concurrent loader sees the old or the new file
    write_embedding(out.parent)
    return out


def write_embedding(folder: Path) -> None:
    """embed.conf (the libpython to load) and embed.py (what it runs) for programs that
    load the thunk by themselves (LD_LIBRARY_PATH=build/emulated): the thunk starts the
    device side in an embedded Python from them."""
    import sysconfig

    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    libpython = os.path.join(libdir, ldlib)
    paths = [str(ROOT)] + [p for p in sys.path if p and os.path.isdir(p)]
    script = (
        "# Written by hsa/emulated/build.py: the embedded device side of the emulated driver.\n"
        "import sys\n"
        f"sys.path[:0] = [p for p in {paths!r} if p not in sys.path]\n"
        "from hsa.emulated.driver import serve_embedded\n"
        f"serve_embedded({str(folder / 'libhsakmt.so.1')!r})\n"
    )
    (folder / "embed.conf").write_text(libpython + "\n")
    (folder / "embed.py").write_text(script)


def ensure_built() -> Path:
    """The thunk library, built first if missing or stale (only the default location)."""
    lib = library_path()
    if os.environ.get(ENV_VAR):
        if not lib.exists():
            raise _unavailable(f"{ENV_VAR}={lib} does not exist")
        return lib
    if is_stale(lib) or not (lib.parent / "embed.py").exists():
        build(lib)
    return lib


def main() -> None:
    try:
        path = ensure_built()
    except HsaUnavailable as exc:
        print(f"setup: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"setup: emulated AMD driver thunk at {path}")
