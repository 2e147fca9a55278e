"""Optional ROCr features, told by symbol lookup (and the ROCm version where no symbol can).

Works on a library that was never initialised, so `amdgpu.devices()` can report the HSA
paths of a machine without a GPU.
"""

from __future__ import annotations

from typing import Any

from hsa.provider import Capability

from .library import LibraryVersion

# capability -> (symbols that must all exist, what it is for)
SYMBOL_FEATURES: dict[str, tuple[tuple[str, ...], str]] = {
    "async_copy": (("hsa_amd_memory_async_copy",), "SDMA/blit copies with signal dependencies"),
    "async_copy_on_engine": (
        ("hsa_amd_memory_async_copy_on_engine",),
        "copies on a chosen SDMA engine",
    ),
    "profiling": (
        ("hsa_amd_profiling_set_profiler_enabled", "hsa_amd_profiling_get_dispatch_time"),
        "per-dispatch start/end timestamps",
    ),
    "signal_wait_any": (
        ("hsa_amd_signal_wait_any",),
        "blocking wait on several signals (else the provider polls)",
    ),
    "memory_fill": (("hsa_amd_memory_fill",), "memset of device memory"),
    "memory_fault_handler": (
        ("hsa_amd_register_system_event_handler",),
        "GPU memory faults reported as MemoryFault instead of aborting the process",
    ),
    "vmem": (
        (
            "hsa_amd_vmem_address_reserve",
            "hsa_amd_vmem_handle_create",
            "hsa_amd_vmem_map",
            "hsa_amd_vmem_set_access",
        ),
        "virtual memory reservations and mappings",
    ),
    "queue_get_info": (("hsa_amd_queue_get_info",), "queue introspection"),
    "queue_priority": (("hsa_amd_queue_set_priority",), "queue priorities"),
    "queue_cu_mask": (("hsa_amd_queue_cu_set_mask",), "compute-unit masks per queue"),
    "signal_value_pointer": (("hsa_amd_signal_value_pointer",), "direct signal value access"),
    "svm": (("hsa_amd_svm_attributes_set", "hsa_amd_svm_prefetch_async"), "shared virtual memory"),
    "dmabuf_export": (("hsa_amd_portable_export_dmabuf",), "dma-buf export of allocations"),
}

# Code object v6 (and generic targets) load in ROCr 6.3 and later.
CODE_OBJECT_V6_ROCM = (6, 3)


def _exists(lib: Any, name: str) -> bool:
    try:
        lib[name]
    except (AttributeError, KeyError, TypeError):
        return False
    return True


def library_capabilities(lib: Any, version: LibraryVersion | None = None) -> dict[str, Capability]:
    """Every optional feature of `lib` (a CDLL, or anything indexable by symbol name)."""
    where = version.path if version and version.path else getattr(lib, "_name", "the library")
    rocr = version.describe() if version else "ROCr"
    caps: dict[str, Capability] = {}
    for feature, (symbols, purpose) in SYMBOL_FEATURES.items():
        missing = [s for s in symbols if not _exists(lib, s)]
        if missing:
            caps[feature] = Capability(
                False,
                f"{', '.join(missing)} not in {rocr}; {purpose}: use a newer ROCr "
                "(/opt/rocm or HSA_RUNTIME_PATH)",
            )
        else:
            caps[feature] = Capability(True, f"{', '.join(symbols)} ({purpose})")
    caps["barrier_value"] = Capability(
        True, "AMD vendor packet BARRIER_VALUE (hsa_ext_amd.h), processed by GPU agents"
    )
    rocm = version.rocm_tuple if version else ()
    if not rocm:
        caps["code_object_v6"] = Capability(
            False, f"ROCm version of {where} unknown; v6 code objects need ROCr 6.3+"
        )
    elif rocm[:2] >= CODE_OBJECT_V6_ROCM:
        caps["code_object_v6"] = Capability(True, f"{rocr} loads code object v6")
    else:
        caps["code_object_v6"] = Capability(
            False, f"{rocr} loads code objects up to v5; compile with code_object_version=5"
        )
    return caps
