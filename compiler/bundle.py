"""Kernel bundles: every compiled form of one source, picked per device at load time.

A bundle holds variants: HSACO code objects (one per target id) and SPIR-V modules (one per
Vulkan ABI, "descriptors" or "bda"), plus an optional host `program` (IREE dispatch plan).

File format: one msgpack map {"magic": "amdgpu-direct.bundle", "version": 1, "name",
"source_hash", "variants": [{"kind", "target", "abi", "data", "info"}], "program"}.
A reader refuses a newer version with a message saying so.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from ground.errors import BundleError, CodeObjectError
from hsa.abi import targets as _targets

__all__ = ["Variant", "KernelBundle", "BUNDLE_MAGIC", "BUNDLE_VERSION", "is_bundle"]

BUNDLE_MAGIC = "amdgpu-direct.bundle"
BUNDLE_VERSION = 1
_KINDS = ("hsaco", "spirv")
_ABIS = ("descriptors", "bda")
# msgpack encodes a map {"magic": BUNDLE_MAGIC, ...} starting with these bytes.
_PREFIX = msgpack.packb("magic") + msgpack.packb(BUNDLE_MAGIC)


@dataclass
class Variant:
    """One compiled form: kind "hsaco" (target = target id) or "spirv" (target = "vulkan",
    abi = "descriptors" | "bda")."""

    kind: str
    target: str
    abi: str | None
    data: bytes
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise BundleError(f"variant kind {self.kind!r} is not one of {', '.join(_KINDS)}")
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise BundleError(f"variant data must be bytes, not {type(self.data).__name__}")
        self.data = bytes(self.data)
        if self.kind == "hsaco":
            try:
                self.target = str(_targets.TargetId.parse(self.target))
            except CodeObjectError as exc:
                raise BundleError(f"hsaco variant: {exc}") from None
            if self.abi is not None:
                raise BundleError(f"hsaco variant for {self.target} takes no abi ({self.abi!r})")
        else:
            if self.target != "vulkan":
                raise BundleError(f"spirv variant target must be 'vulkan', not {self.target!r}")
            if self.abi not in _ABIS:
                raise BundleError(
                    f"spirv variant abi {self.abi!r} is not one of {', '.join(_ABIS)}"
                )

    @classmethod
    def from_code_object(cls, data: bytes, info: dict[str, Any] | None = None) -> Variant:
        """An hsaco variant whose target id is read from the code object itself."""
        from hsa.abi.codeobject import read_code_object

        return cls("hsaco", read_code_object(data).target_id, None, bytes(data), dict(info or {}))

    def code_object(self):  # -> hsa.abi.codeobject.CodeObject
        """The parsed code object (hsaco variants only)."""
        if self.kind != "hsaco":
            raise BundleError(f"a {self.kind} variant has no code object")
        from hsa.abi.codeobject import read_code_object

        return read_code_object(self.data)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.target}" + (f" ({self.abi})" if self.abi else "")

    def _key(self) -> tuple[str, str, str | None]:
        return (self.kind, self.target, self.abi)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "abi": self.abi, "data": self.data,
                "info": self.info}


@dataclass
class KernelBundle:
    name: str
    source_hash: str
    variants: list[Variant] = field(default_factory=list)
    program: dict[str, Any] | None = None

    @classmethod
    def from_code_objects(cls, data: bytes, name: str = "code_objects") -> KernelBundle:
        """A bundle of what another compiler produced: one AMDGPU code object, or a clang
        offload bundle (`hipcc --genco`, several targets) with one variant per GPU entry."""
        import hashlib

        from hsa.abi.codeobject import is_offload_bundle, read_offload_bundle

        bundle = cls(name, hashlib.sha256(data).hexdigest())
        if is_offload_bundle(data):
            entries = [v for k, v in read_offload_bundle(data).items() if "amdgcn" in k and v]
            if not entries:
                raise BundleError(f"{name}: the offload bundle holds no AMDGPU code object")
        else:
            entries = [data]
        for entry in entries:
            bundle.add(Variant.from_code_object(entry))
        return bundle

    def add(self, variant: Variant) -> Variant:
        """Add a variant; one of the same kind, target and abi is replaced."""
        self.variants = [v for v in self.variants if v._key() != variant._key()]
        self.variants.append(variant)
        return variant

    @property
    def targets(self) -> list[str]:
        return [v.target for v in self.variants if v.kind == "hsaco"]

    def describe(self) -> str:
        return ", ".join(v.label for v in self.variants) or "no variants"

    def variant_for(self, target_id: str | _targets.TargetId) -> Variant:
        """The hsaco variant that runs on an agent `target_id` (e.g. "gfx942:sramecc+:xnack-").

        A code object built for feature "any" runs on either setting, "on"/"off" must match;
        the exact processor beats a generic target, an exact feature match beats "any".
        "vulkan" picks the SPIR-V variant (descriptors ABI first)."""
        if str(target_id) == "vulkan":
            for abi in _ABIS:
                found = [v for v in self.variants if v.kind == "spirv" and v.abi == abi]
                if found:
                    return found[0]
            raise BundleError(
                f"bundle {self.name!r} has no SPIR-V for vulkan; it has: {self.describe()}; "
                "compile an .mlir source with targets=['vulkan']"
            )
        try:
            agent = _targets.TargetId.parse(target_id)
        except CodeObjectError as exc:
            raise BundleError(str(exc)) from None
        best, best_score = None, -1
        for v in self.variants:
            if v.kind != "hsaco":
                continue
            score = _targets.compatibility_score(v.target, agent)
            if score > best_score:
                best, best_score = v, score
        if best is None:
            raise BundleError(
                f"bundle {self.name!r} has no code object for {agent}; it has: "
                f"{self.describe()}; rebuild with targets=[{agent.name!r}]"
            )
        return best

    def spirv(self, abi: str = "descriptors") -> Variant:
        for v in self.variants:
            if v.kind == "spirv" and v.abi == abi:
                return v
        raise BundleError(
            f"bundle {self.name!r} has no SPIR-V for the {abi!r} ABI; it has: "
            f"{self.describe()}; compile the .mlir source with abi=({abi!r},)"
        )

    # ---- serialisation ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        doc = {
            "magic": BUNDLE_MAGIC,
            "version": BUNDLE_VERSION,
            "name": self.name,
            "source_hash": self.source_hash,
            "variants": [v.to_dict() for v in self.variants],
            "program": self.program,
        }
        try:
            return msgpack.packb(doc, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise BundleError(
                f"bundle {self.name!r} cannot be written: {exc} (info and program must hold "
                "only str, int, float, bool, bytes, lists and dicts)"
            ) from None

    @classmethod
    def from_bytes(cls, data: bytes) -> KernelBundle:
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several types for bad input
            raise BundleError(
                f"not a kernel bundle: not msgpack ({type(exc).__name__})"
            ) from None
        if not isinstance(doc, dict) or doc.get("magic") != BUNDLE_MAGIC:
            raise BundleError(f"not a kernel bundle: no {BUNDLE_MAGIC!r} magic")
        version = doc.get("version")
        if not isinstance(version, int) or version < 1:
            raise BundleError(f"corrupt kernel bundle: version {version!r}")
        if version > BUNDLE_VERSION:
            raise BundleError(
                f"kernel bundle format version {version} is newer than this reader "
                f"({BUNDLE_VERSION}); upgrade amdgpu-direct or rebuild the bundle"
            )
        try:
            variants = [
                Variant(v["kind"], v["target"], v.get("abi"), v["data"], dict(v.get("info") or {}))
                for v in doc["variants"]
            ]
            bundle = cls(str(doc["name"]), str(doc["source_hash"]), variants, doc.get("program"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise BundleError(
                f"corrupt kernel bundle: missing or malformed field {exc}"
            ) from None
        return bundle

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temp file in the same folder, then os.replace)."""
        path = Path(path)
        atomic_write(path, self.to_bytes())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> KernelBundle:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise BundleError(f"cannot read kernel bundle {path}: {exc.strerror}") from None
        return cls.from_bytes(data)


def is_bundle(data: bytes) -> bool:
    """Does `data` look like a kernel bundle (cheap check of the leading magic)?"""
    if data[:1] and 0x80 <= data[0] <= 0x8F:  # fixmap header, then "magic": BUNDLE_MAGIC
        return data[1:1 + len(_PREFIX)] == _PREFIX
    return data[:1] == b"\xde" and data[3:3 + len(_PREFIX)] == _PREFIX  # map16


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
