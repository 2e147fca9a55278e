"""Finding and loading libhsa-runtime64, and telling which ROCr it is.

Search order: `HSA_RUNTIME_PATH` (a directory or the library file itself), then
`/opt/rocm*/lib` (newest version first, then the unversioned /opt/rocm), then the dynamic
linker's own search path (Debian's libhsa-runtime64-1 lives there).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ground.errors import HsaUnavailable
from ground.status import HSA_STATUS_ERROR_NOT_INITIALIZED

SONAMES = ("libhsa-runtime64.so.1", "libhsa-runtime64.so")
ENV_VAR = "HSA_RUNTIME_PATH"
NEXT_STEP = "use --device amdgpu:virtual, or the Vulkan fallback"

_cache: dict[tuple[str | None, str], ctypes.CDLL] = {}


def _version_key(path: str) -> tuple[int, ...]:
    """(6, 2, 0) for /opt/rocm-6.2.0; () for /opt/rocm, which sorts after every version."""
    match = re.search(r"(\d+(?:\.\d+)*)$", path.rstrip("/"))
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def candidate_paths(env: Mapping[str, str] | None = None, opt_root: str = "/opt") -> list[str]:
    """Every place `load_library` tries, in order. Bare sonames go to the dynamic linker."""
    env = os.environ if env is None else env
    paths: list[str] = []
    override = env.get(ENV_VAR)
    if override:
        if os.path.isdir(override):
            for sub in ("", "lib", "lib64"):
                paths += [os.path.join(override, sub, name) for name in SONAMES]
        else:
            paths.append(override)
    roots = glob.glob(os.path.join(opt_root, "rocm*"))
    roots.sort(key=lambda r: (_version_key(r) != (), _version_key(r)), reverse=True)
    for root in roots:
        paths += [os.path.join(root, "lib", name) for name in SONAMES]
    paths += list(SONAMES)
    seen: set[str] = set()
    unique = []
    for p in paths:
        key = os.path.realpath(p) if os.sep in p else p
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def load_library(env: Mapping[str, str] | None = None, opt_root: str = "/opt") -> ctypes.CDLL:
    """The first libhsa-runtime64 that loads; raises HsaUnavailable when none does.

    A bad `HSA_RUNTIME_PATH` (no library there, or one that does not load) falls back to the
    other places; the error, if everything fails, names what each attempt said.
    """
    env = os.environ if env is None else env
    key = (env.get(ENV_VAR), opt_root)
    if key in _cache:
        return _cache[key]
    failures: list[str] = []
    for path in candidate_paths(env, opt_root):
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            failures.append(f"{path}: {exc}")
            continue
        if not hasattr(lib, "hsa_init"):
            failures.append(f"{path}: no hsa_init symbol")
            continue
        _cache[key] = lib
        return lib
    where = f"; {ENV_VAR}={env[ENV_VAR]} has no usable library" if env.get(ENV_VAR) else ""
    tried = f" ({'; '.join(failures)})" if failures else ""
    raise HsaUnavailable(
        HSA_STATUS_ERROR_NOT_INITIALIZED,
        f"libhsa-runtime64 not found{where}{tried}; install libhsa-runtime64-1 or ROCm, "
        f"or {NEXT_STEP}",
        "load_library",
    )


def first_existing(paths: list[str]) -> str | None:
    """The first candidate that is a file (bare sonames are the dynamic linker's)."""
    return next((p for p in paths if os.sep in p and os.path.exists(p)), None)


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def library_path(lib: ctypes.CDLL) -> str:
    """The file a loaded library came from (dladdr on hsa_init), resolved through links."""
    name = getattr(lib, "_name", None) or ""
    try:
        libc = ctypes.CDLL(None)
        dladdr = libc.dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        address = ctypes.cast(lib["hsa_init"], ctypes.c_void_p).value
        if dladdr(address, ctypes.byref(info)) and info.dli_fname:
            name = info.dli_fname.decode()
    except (AttributeError, OSError, TypeError):
        pass
    return os.path.realpath(name) if os.sep in name else name


@dataclass(frozen=True)
class LibraryVersion:
    """What can be told about a libhsa-runtime64 without initialising it."""

    path: str
    soname_version: str = ""  # "1.5.0" from libhsa-runtime64.so.1.5.0
    rocm_version: str = ""  # "5.2.3", from the ROCm directory or the Debian package
    source: str = ""  # where rocm_version came from

    @property
    def rocm_tuple(self) -> tuple[int, ...]:
        return _version_key(self.rocm_version.split("-")[0]) if self.rocm_version else ()

    def describe(self) -> str:
        parts = [f"ROCr {self.rocm_version}" if self.rocm_version else "ROCr (version unknown)"]
        if self.soname_version:
            parts.append(f"libhsa-runtime64.so.{self.soname_version}")
        return ", ".join(parts)


def _debian_package_version(package: str, status_file: str) -> str:
    try:
        with open(status_file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    for stanza in text.split("\n\n"):
        if re.search(rf"^Package: {re.escape(package)}$", stanza, re.M):
            match = re.search(r"^Version: (\S+)$", stanza, re.M)
            if match:
                return match.group(1)
    return ""


def library_version(path: str, dpkg_status: str = "/var/lib/dpkg/status") -> LibraryVersion:
    """ROCm version of the library at `path`, from /opt/rocm-X.Y.Z, .info/version or dpkg."""
    real = os.path.realpath(path)
    soname = re.search(r"\.so\.(\d+(?:\.\d+)*)$", real)
    soname_version = soname.group(1) if soname else ""
    rocm_dir = re.search(r"/rocm-(\d+(?:\.\d+)+)/", real)
    if rocm_dir:
        return LibraryVersion(real, soname_version, rocm_dir.group(1), "directory")
    lib_dir = os.path.dirname(real)
    for info in (os.path.join(lib_dir, "..", ".info", "version"),):
        try:
            with open(info, encoding="utf-8") as f:
                return LibraryVersion(real, soname_version, f.read().strip(), info)
        except OSError:
            pass
    if real.startswith("/usr/lib"):
        version = _debian_package_version("libhsa-runtime64-1", dpkg_status)
        if version:
            upstream = re.sub(r"^\d+:", "", version).split("-")[0]
            return LibraryVersion(real, soname_version, upstream, f"dpkg {version}")
    return LibraryVersion(real, soname_version)
