"""A content-addressed on-disk cache of kernel bundles.

Location: $AMDGPU_DIRECT_CACHE, else $XDG_CACHE_HOME/amdgpu-direct, else
~/.cache/amdgpu-direct. The key is the sha256 of the source's hash, the compiler versions,
the options and the (sorted) targets, so a change to any of them misses. Entries are written
to a temp file and renamed into place, so concurrent writers and readers never see half a
file; a corrupt entry reads as a miss and is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ground.errors import BundleError

from .bundle import KernelBundle, atomic_write

__all__ = ["KernelCache", "default_cache_dir", "source_hash"]

_SUFFIX = ".kbundle"
_KEY_FORMAT = 1  # bump when the key recipe changes


def default_cache_dir() -> Path:
    override = os.environ.get("AMDGPU_DIRECT_CACHE")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "amdgpu-direct"


def source_hash(source: bytes | str | os.PathLike) -> str:
    """sha256 hex of a source: bytes or text as given; a Path is read."""
    if isinstance(source, os.PathLike):
        data = Path(source).read_bytes()
    elif isinstance(source, str):
        data = source.encode("utf-8")
    else:
        data = bytes(source)
    return hashlib.sha256(data).hexdigest()


def _canonical(value: Any) -> Any:
    """A JSON-stable form: mappings sorted by key, tuples as lists, other objects as str."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


class KernelCache:
    """`key(...)` -> hex digest; `get(key)` -> KernelBundle | None; `put(key, bundle)`."""

    def __init__(self, dir: str | os.PathLike | None = None):  # noqa: A002 (contract name)
        self.dir = Path(dir).expanduser() if dir is not None else default_cache_dir()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"KernelCache({str(self.dir)!r})"

    @staticmethod
    def key(source: bytes | str | os.PathLike, compiler_versions: Mapping | Iterable | str,
            options: Mapping | Iterable | str, targets: Iterable[str]) -> str:
        """sha256 over the source hash, compiler versions, options and targets.

        `source` is the source bytes or text (a Path is read; a 64-hex string is taken as an
        already computed source hash). Targets are sorted: their order does not matter."""
        if isinstance(source, str) and len(source) == 64 and all(
                c in "0123456789abcdef" for c in source):
            src = source
        else:
            src = source_hash(source)
        recipe = {
            "format": _KEY_FORMAT,
            "source": src,
            "compilers": _canonical(compiler_versions),
            "options": _canonical(options),
            "targets": sorted(str(t) for t in targets),
        }
        blob = json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def path_for(self, key: str) -> Path:
        if len(key) < 3 or not all(c in "0123456789abcdef" for c in key):
            raise BundleError(f"bad cache key {key!r}: expected a sha256 hex digest")
        return self.dir / key[:2] / (key + _SUFFIX)

    def get(self, key: str) -> KernelBundle | None:
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        try:
            bundle = KernelBundle.from_bytes(data)
        except BundleError:
            # A corrupt or foreign entry is a miss; drop it so the next put replaces it.
            try:
                path.unlink()
            except OSError:
                pass
            self.misses += 1
            return None
        self.hits += 1
        return bundle

    def put(self, key: str, bundle: KernelBundle) -> Path:
        path = self.path_for(key)
        atomic_write(path, bundle.to_bytes())
        return path

    def __contains__(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def entries(self) -> list[Path]:
        return sorted(self.dir.glob(f"*/*{_SUFFIX}"))

    def clear(self) -> int:
        """Remove every entry; returns how many."""
        n = 0
        for path in self.entries():
            try:
                path.unlink()
                n += 1
            except OSError:
                pass
        return n
