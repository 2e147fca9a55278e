"""compiler: kernel bundles and the two front ends (clang, IREE).

    bundle = compiler.compile("saxpy", targets=["gfx1100", "vulkan"])   # library name
    bundle = compiler.compile("kernels/fill.cl", targets=["gfx942", "gfx1100"])

`.mlir` sources go through IREE (one HSACO per AMD target id, SPIR-V per Vulkan ABI, and the
host `program`); `.cl` sources go through clang (HSACO only). Results are cached on disk
(compiler.cache.KernelCache) under a key of the source, the header, the compiler versions,
the options and the targets. Submodules load lazily so that importing `compiler` does not
start IREE. The code-object reader and the target table are ABI and live below the HSA
layer, in `hsa.abi`; `compiler.read_code_object` and `compiler.lookup` re-export them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ground.errors import CompileError

if TYPE_CHECKING:
    from .bundle import KernelBundle
    from .cache import KernelCache

__all__ = [
    "compile",
    "resolve_targets",
    "DEFAULT_TARGETS",
    "FRONTEND_FORMAT",
    "KernelBundle",
    "Variant",
    "KernelCache",
    "read_code_object",
    "lookup",
    "TargetId",
]

#: Targets compiled when none are named: the five AMD targets the project tests, + Vulkan.
DEFAULT_TARGETS = ("gfx950", "gfx1250", "gfx1100", "gfx942", "gfx1201", "vulkan")
#: Bump when the variant `info` or `program` layout changes: old cache entries then miss.
FRONTEND_FORMAT = 3

_LAZY = {
    "KernelBundle": ("bundle", "KernelBundle"),
    "Variant": ("bundle", "Variant"),
    "KernelCache": ("cache", "KernelCache"),
    "read_code_object": ("hsa.abi.codeobject", "read_code_object"),
    "lookup": ("hsa.abi.targets", "lookup"),
    "TargetId": ("hsa.abi.targets", "TargetId"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        if "." not in module:
            module = f"{__name__}.{module}"
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")


def resolve_targets(targets: Iterable[str] | str | None) -> tuple[list[str], bool]:
    """Canonical AMD target ids (aliases resolved, order kept, duplicates dropped) and
    whether "vulkan" was asked for. Accepts a comma-separated string too."""
    from hsa.abi.targets import TargetId

    if targets is None:
        targets = DEFAULT_TARGETS
    if isinstance(targets, str):
        targets = [t for t in targets.split(",") if t.strip()]
    amd: list[str] = []
    vulkan = False
    for raw in targets:
        text = str(raw).strip()
        if text.lower() in ("vulkan", "spirv", "spir-v"):
            vulkan = True
            continue
        try:
            tid = str(TargetId.parse(text))
        except Exception as exc:  # CodeObjectError: unknown target, bad feature
            raise CompileError(f"{exc}; or use 'vulkan'") from None
        if tid not in amd:
            amd.append(tid)
    if not amd and not vulkan:
        raise CompileError("no targets given; name gfx targets (e.g. gfx1100) and/or 'vulkan'")
    return amd, vulkan


def _resolve_source(source: str | os.PathLike) -> tuple[Path, str, str]:
    """(path, bundle name, kind "mlir"|"opencl") of a file path or library kernel name."""
    from . import library

    if isinstance(source, os.PathLike) or (isinstance(source, str) and (
            os.path.exists(source) or source.endswith((".cl", ".mlir")))):
        path = Path(source)
        if not path.is_file():
            raise CompileError(f"source {str(path)!r} does not exist; check the path")
        suffix = path.suffix.lower()
        if suffix == ".mlir":
            return path, path.stem, "mlir"
        if suffix in (".cl", ".ocl"):
            return path, path.stem, "opencl"
        raise CompileError(f"{path.name}: unknown source kind {suffix!r}; use .mlir or .cl")
    name = str(source)
    if name == "chain":
        name = f"chain_{library.CHAIN_DEFAULT}"
    return library.path(name), name, library.kind(name)


def _open_cache(cache: bool | str | os.PathLike | KernelCache | None) -> KernelCache | None:
    from .cache import KernelCache

    if cache is None or cache is False:
        return None
    if cache is True:
        return KernelCache()
    if isinstance(cache, KernelCache):
        return cache
    return KernelCache(cache)


def compile(  # noqa: A001 - the contract's name
    source: str | os.PathLike,
    targets: Iterable[str] | str | None = None,
    *,
    abi: Sequence[str] | str = ("descriptors", "bda"),
    code_object_version: int = 5,
    cache: bool | str | os.PathLike | KernelCache | None = True,
    vulkan_target: str | None = None,
    defines: dict[str, str | int] | None = None,
) -> KernelBundle:
    """Compile a source file (.mlir, .cl) or a library kernel name into a KernelBundle.

    targets: target names, aliases or target ids ("gfx942:xnack-", "cdna3") plus "vulkan"
    (MLIR only); None means DEFAULT_TARGETS (Vulkan is skipped for OpenCL C then).
    abi: the Vulkan dispatch ABIs to build ("descriptors", "bda").
    code_object_version: 5 (default) or 6 (OpenCL C only; IREE emits v5).
    cache: True (the default on-disk cache), False, a folder, or a KernelCache.
    vulkan_target: "portable" (default) or an IREE Vulkan target name (MLIR only).
    defines: -D macros for OpenCL C.
    Raises CompileError (diagnostics on `.diagnostics`) or BundleError.
    """
    from . import iree as iree_frontend
    from .bundle import KernelBundle, Variant
    from .cache import KernelCache, source_hash

    path, name, kind = _resolve_source(source)
    amd, vulkan = resolve_targets(targets)
    abis = (abi,) if isinstance(abi, str) else tuple(abi)
    for a in abis:
        if a not in iree_frontend.VULKAN_ABIS:
            raise CompileError(f"unknown Vulkan ABI {a!r}; use 'descriptors' and/or 'bda'")
    if kind == "opencl":
        if vulkan and targets is not None:
            raise CompileError(
                f"{path.name}: OpenCL C compiles to AMD code objects only, not Vulkan; "
                "drop 'vulkan' from the targets or write the kernel in MLIR"
            )
        vulkan = False
        if not amd:
            raise CompileError(f"{path.name}: no AMD targets to compile OpenCL C for")
        if vulkan_target is not None:
            raise CompileError("vulkan_target applies to MLIR sources only")
    elif defines:
        raise CompileError("defines apply to OpenCL C sources only")
    if not vulkan:
        abis = ()
    vulkan_target = vulkan_target or iree_frontend.DEFAULT_VULKAN_TARGET

    text = path.read_bytes()
    src_hash = source_hash(text)
    store = _open_cache(cache)
    if kind == "opencl":
        from . import clang

        versions = {"clang": clang.clang_version()}
        options = {"kind": kind, "cov": code_object_version, "defines": defines or {},
                   "header": source_hash(clang.HEADER.read_bytes()), "format": FRONTEND_FORMAT}
    else:
        versions = {"iree": iree_frontend.iree_version()}
        options = {"kind": kind, "cov": code_object_version, "vulkan_target": vulkan_target,
                   "format": FRONTEND_FORMAT}
        if re.search(rb"\bf64\b", text):  # compiled without IREE's f64 demotion since then
            options["f64"] = "kept"
    # One cache entry per (source, options, single target): bundles for overlapping target
    # sets share work, and only the missing targets are compiled.
    wanted = [(t, None) for t in amd] + [("vulkan", a) for a in abis]
    found: dict[tuple[str, str | None], KernelBundle] = {}
    keys = {}
    for target, vk_abi in wanted:
        label = target if vk_abi is None else f"vulkan:{vk_abi}"
        keys[(target, vk_abi)] = KernelCache.key(src_hash, versions, options, [label])
        if store is not None:
            hit = store.get(keys[(target, vk_abi)])
            if hit is not None and len(hit.variants) == 1:
                found[(target, vk_abi)] = hit
    missing = [w for w in wanted if w not in found]
    if missing:
        fresh = KernelBundle(name, src_hash)
        programs: dict[tuple[str, str | None], dict | None] = {}
        if kind == "opencl":
            _build_opencl(fresh, path, [t for t, _ in missing], code_object_version, defines,
                          Variant)
        else:
            try:
                result = iree_frontend.compile_mlir(
                    path, [t for t, a in missing if a is None],
                    vulkan_abis=[a for _, a in missing if a is not None],
                    vulkan_target=vulkan_target, code_object_version=code_object_version,
                )
            except CompileError:
                # Only Vulkan ABIs were missing and another ABI came from the cache: the
                # failing one is left out, as compile_mlir does when it builds both.
                if any(a is None for _, a in missing) or not any(a for _, a in found):
                    raise
                result = iree_frontend.IreeResult()
            for v in result.variants:
                fresh.add(Variant(v.kind, v.target, v.abi, v.data, v.info))
                programs[(v.target, v.abi)] = v.program
        for variant in fresh.variants:
            program = programs.get((variant.target, variant.abi))
            one = KernelBundle(name, src_hash, [variant], program)
            found[(variant.target, variant.abi)] = one
            if store is not None:
                store.put(keys[(variant.target, variant.abi)], one)
    bundle = KernelBundle(name, src_hash)
    for want in wanted:
        part = found.get(want)
        if part is None:  # a Vulkan ABI that did not build while another one did
            continue
        bundle.add(part.variants[0])
        if bundle.program is None:
            bundle.program = part.program
    if kind == "opencl" and not any(v.info.get("kernels") for v in bundle.variants):
        # an empty or helper-only file would give a bundle that nothing can run
        raise CompileError(f"{path.name} defines no __kernel function; add one and compile again")
    return bundle


def _build_opencl(bundle, path: Path, targets: list[str], cov: int, defines, variant_cls) -> None:
    from hsa.abi.codeobject import read_code_object

    from . import clang

    for target in targets:
        warnings: list[str] = []
        data = clang.compile_opencl(path, target, code_object_version=cov, defines=defines,
                                    warnings=warnings)
        co = read_code_object(data)
        info = {
            "compiler": clang.clang_version(), "source": path.name,
            "code_object_version": co.code_object_version,
            "kernels": sorted(co.kernels), "warnings": warnings,
        }
        bundle.add(variant_cls("hsaco", target, None, data, info))
