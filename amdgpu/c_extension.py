"""Building and loading the driver's compiled CPython extensions (one C file each).

A C file `SOURCE` builds with gcc into build/<folder>/_<name><EXT_SUFFIX>, a content hash of
the source beside it (`.sha256`): a build made from another version of the file is stale
(git checkouts and rebases move mtimes, not content) and is not loaded. Nothing is compiled
on import: `load` returns (None, why) for a missing or stale build, and the caller runs its
Python steps instead; `build` (scripts/setup.sh, through each extension's `main`) compiles.
Users: amdgpu/hsa_backend/hotpath.py (hotpath.c), amdgpu/vulkan/fast_submit.py
(fast_submit.c). Building needs gcc and the Python headers (Debian: gcc, python3-dev).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def library_path(folder: str, name: str) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return ROOT / "build" / folder / (name + suffix)


def source_hash(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def stamp_of(lib: Path) -> Path:
    return lib.with_name(lib.name + ".sha256")  # the hash of the source it was built from


def is_stale(lib: Path, source: Path) -> bool:
    """True when `lib` is missing or was built from another version of `source`."""
    stamp = stamp_of(lib)
    return not lib.exists() or not stamp.exists() or \
        stamp.read_text().strip() != source_hash(source)


def build(source: Path, out: Path, what: str) -> Path:
    """Compile `source` into `out`; RuntimeError with gcc's first line of complaint (or
    what is missing) when it cannot. `what` names the extension in that line."""
    gcc = shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if gcc is None:
        raise RuntimeError("gcc is not installed")
    if not (Path(include) / "Python.h").exists():
        raise RuntimeError(f"{include}/Python.h is missing (Debian package python3-dev)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [gcc, "-O2", "-Wall", "-Werror", "-fPIC", "-shared", "-fvisibility=hidden",
           f"-I{include}", "-o", str(tmp), str(source)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = (result.stderr.strip().splitlines() or ["(no output)"])[0]
        raise RuntimeError(f"gcc failed to build {what}: {first}")
    digest = source_hash(source)
    os.replace(tmp, out)  # atomic: a concurrent importer sees the old or the new file
    stamp_of(out).write_text(digest + "\n")
    return out


def setup(source: Path, lib: Path, what: str, fallback: str) -> None:
    """scripts/setup.sh's step for one extension: build `lib` when it is missing or stale,
    and say what happened in one line (a failed build is not an error: `fallback` runs)."""
    if not is_stale(lib, source):
        return
    try:
        build(source, lib, what)
    except RuntimeError as e:
        print(f"setup: {what} was not built ({e}); {fallback}", file=sys.stderr)
        return
    print(f"setup: {what} compiled at {lib}")


def load(module_name: str, lib: Path, source: Path, env_var: str,
         setup: str = "run scripts/setup.sh") -> tuple[ModuleType | None, str]:
    """(the loaded extension, "") or (None, why not): `env_var` set to anything but 0, the
    build missing or stale, or built for another Python."""
    if os.environ.get(env_var, "") not in ("", "0"):
        return None, f"{env_var} is set"
    if not lib.exists():
        return None, f"{lib} is not built ({setup})"
    if is_stale(lib, source):
        return None, f"{lib} was built from another {source.name} ({setup})"
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(lib))
    spec = importlib.util.spec_from_file_location(loader.name, lib, loader=loader)
    if spec is None:
        return None, f"{lib} cannot be loaded"
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:  # built for another Python
        return None, f"{lib} does not load: {e}"
    return module, ""
