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

from pathlib import Path
from types import ModuleType

from amdgpu import c_extension

ROOT = c_extension.ROOT
SOURCE = Path(__file__).with_suffix(".c")
ENV_VAR = "AMDGPU_PYTHON_HOT_PATH"  # "1": use the Python steps even when the build exists


def library_path() -> Path:
    return c_extension.library_path("hotpath", "_hotpath")


def is_stale(lib: Path) -> bool:
    """True when `lib` is missing or was built from another hotpath.c (by content: git
    checkouts and rebases move mtimes)."""
    return c_extension.is_stale(lib, SOURCE)


def build(out: Path | None = None) -> Path:
    """Compile hotpath.c into `out` (default: library_path()); RuntimeError with gcc's
    first line of complaint when it cannot."""
    return c_extension.build(SOURCE, out or library_path(), "the hot path")


def _load() -> tuple[ModuleType | None, str]:
    return c_extension.load("amdgpu.hsa_backend._hotpath", library_path(), SOURCE, ENV_VAR)


MODULE, why_not = _load()
if MODULE is not None:  # the compiled lanes' traced mode follows the trace sink
    import packets.trace

    packets.trace.watch_sink(MODULE.set_traced)


def status() -> str:
    """One line: which hot path the HSA backend uses."""
    return "compiled (hotpath.c)" if MODULE is not None else f"Python ({why_not})"


def main() -> None:
    c_extension.setup(SOURCE, library_path(), "the dispatch hot path",
                      "the HSA backend uses its Python steps")


if __name__ == "__main__":
    main()
