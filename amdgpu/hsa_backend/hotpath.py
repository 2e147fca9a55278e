"""The compiled dispatch and replay hot path (hotpath.c): building it and loading it.

`python -c "from amdgpu.hsa_backend.hotpath import main; main()"` (scripts/setup.sh runs it)
builds build/hotpath/_hotpath<EXT_SUFFIX> with gcc when it is missing or was built from
another hotpath.c (a content hash beside it says which). `MODULE` is the loaded extension,
or None: then the HSA backend publishes through packets.Ring's Python methods (the packets
library's implementation of the same protocol) and runs HsaDevice.dispatch and
HsaCommandBuffer._submit as Python. `AMDGPU_PYTHON_HOT_PATH=1` picks the Python steps even
when the module is built (tests compare the two; see tests/test_hot_path.py). `why_not`
says why MODULE is None. Building needs gcc and the Python headers (Debian: gcc,
python3-dev).

Nothing is compiled on import: a missing or stale build only falls back to Python;
`status()` names the path in use.
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

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).with_suffix(".c")
ENV_VAR = "AMDGPU_PYTHON_HOT_PATH"  # "1": use the Python steps even when the build exists


def library_path() -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return ROOT / "build" / "hotpath" / ("_hotpath" + suffix)


def _source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def _stamp(lib: Path) -> Path:
    return lib.with_name(lib.name + ".sha256")  # the hash of the hotpath.c it was built from


def is_stale(lib: Path) -> bool:
    """True when `lib` is missing or was built from another hotpath.c (by content: git
    checkouts and rebases move mtimes)."""
    stamp = _stamp(lib)
    return not lib.exists() or not stamp.exists() or stamp.read_text().strip() != _source_hash()


def build(out: Path | None = None) -> Path:
    """Compile hotpath.c into `out` (default: library_path()); RuntimeError with gcc's
    first line of complaint when it cannot."""
    out = out or library_path()
    gcc = shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if gcc is None:
        raise RuntimeError("gcc is not installed")
    if not (Path(include) / "Python.h").exists():
        raise RuntimeError(f"{include}/Python.h is missing (Debian package python3-dev)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [gcc, "-O2", "-Wall", "-Werror", "-fPIC", "-shared", "-fvisibility=hidden",
           f"-I{include}", "-o", str(tmp), str(SOURCE)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = (result.stderr.strip().splitlines() or ["(no output)"])[0]
        raise RuntimeError(f"gcc failed to build the hot path: {first}")
    source_hash = _source_hash()
    os.replace(tmp, out)  # atomic: a concurrent importer sees the old or the new file
    _stamp(out).write_text(source_hash + "\n")
    return out


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        return None, f"{ENV_VAR} is set"
    lib = library_path()
    if not lib.exists():
        return None, f"{lib} is not built (run scripts/setup.sh)"
    if is_stale(lib):
        return None, f"{lib} was built from another {SOURCE.name} (run scripts/setup.sh)"
    loader = importlib.machinery.ExtensionFileLoader("amdgpu.hsa_backend._hotpath", str(lib))
    spec = importlib.util.spec_from_file_location(loader.name, lib, loader=loader)
    if spec is None:
        return None, f"{lib} cannot be loaded"
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:  # built for another Python
        return None, f"{lib} does not load: {e}"
    return module, ""


MODULE, why_not = _load()
if MODULE is not None:  # the compiled lanes' traced mode follows the trace sink
    import packets.trace

    packets.trace.watch_sink(MODULE.set_traced)


def status() -> str:
    """One line: which hot path the HSA backend uses."""
    return "compiled (hotpath.c)" if MODULE is not None else f"Python ({why_not})"


def main() -> None:
    lib = library_path()
    if not is_stale(lib):
        return
    try:
        build(lib)
    except RuntimeError as e:
        print(f"setup: the compiled dispatch hot path was not built ({e}); the HSA backend "
              "uses its Python steps", file=sys.stderr)
        return
    print(f"setup: compiled dispatch hot path at {lib}")


if __name__ == "__main__":
    main()
