"""The HSA provider over the real ROCr library (libhsa-runtime64) through ctypes.

`load_library()` finds the library (HSA_RUNTIME_PATH, /opt/rocm*/lib, the system path);
`RocrProvider()` initialises it and raises `HsaUnavailable` with the cause and the next
step where it cannot run (no /dev/kfd, no permission, no GPU agent).
"""

from .features import library_capabilities
from .library import LibraryVersion, candidate_paths, library_path, library_version, load_library
from .provider import RocrProvider, RocrQueue, condition_holds, diagnose_init_failure, init_count


def capabilities(library=None) -> dict:
    """Optional features of the ROCr library that `load_library()` finds, without hsa_init.

    Raises HsaUnavailable when no library is found."""
    lib = library if library is not None else load_library()
    path = library_path(lib)
    return library_capabilities(lib, library_version(path) if path else None)


__all__ = [
    "LibraryVersion",
    "RocrProvider",
    "RocrQueue",
    "candidate_paths",
    "capabilities",
    "condition_holds",
    "diagnose_init_failure",
    "init_count",
    "library_capabilities",
    "library_path",
    "library_version",
    "load_library",
]
