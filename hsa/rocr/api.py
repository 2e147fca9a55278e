"""Typed ctypes bindings of the HSA functions the provider calls.

Every prototype is written from hsa.h / hsa_ext_amd.h: handles (hsa_agent_t, hsa_signal_t,
...) as `c_uint64`, `hsa_status_t` as `c_int32`, hsa_signal_value_t as `c_int64`.
Functions are looked up one by one (`lib[name]`, a fresh function object, so nobody else's
argtypes are touched); a missing required function makes the library unusable
(HsaUnavailable), a missing optional one is recorded in `missing` and reported as a
capability. Functions that return hsa_status_t raise `HsaError` through `errcheck`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import (
    POINTER,
    c_bool,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import TYPE_CHECKING, Any

from ground.errors import HsaError, HsaUnavailable, IllegalInstruction, MemoryFault
from ground.status import (
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
    HSA_STATUS_ERROR_MEMORY_FAULT,
    HSA_STATUS_ERROR_NOT_INITIALIZED,
)

from .structs import (
    HANDLE_ITERATE_CALLBACK,
    QUEUE_ERROR_CALLBACK,
    SYSTEM_EVENT_CALLBACK,
    DispatchTime,
)

STATUS = c_int32
HANDLE = c_uint64
SIGNAL_VALUE = c_int64
P_HANDLE = POINTER(c_uint64)

# name -> (restype, argtypes). restype STATUS means "check it and raise".
REQUIRED: dict[str, tuple[Any, list[Any]]] = {
    "hsa_status_string": (STATUS, [STATUS, POINTER(c_char_p)]),
    "hsa_init": (STATUS, []),
    "hsa_shut_down": (STATUS, []),
    "hsa_system_get_info": (STATUS, [c_int32, c_void_p]),
    "hsa_iterate_agents": (STATUS, [HANDLE_ITERATE_CALLBACK, c_void_p]),
    "hsa_agent_get_info": (STATUS, [HANDLE, c_int32, c_void_p]),
    "hsa_agent_iterate_isas": (STATUS, [HANDLE, HANDLE_ITERATE_CALLBACK, c_void_p]),
    "hsa_isa_get_info_alt": (STATUS, [HANDLE, c_int32, c_void_p]),
    "hsa_amd_agent_iterate_memory_pools": (STATUS, [HANDLE, HANDLE_ITERATE_CALLBACK, c_void_p]),
    "hsa_amd_memory_pool_get_info": (STATUS, [HANDLE, c_int32, c_void_p]),
    "hsa_amd_memory_pool_allocate": (STATUS, [HANDLE, c_size_t, c_uint32, POINTER(c_void_p)]),
    "hsa_amd_memory_pool_free": (STATUS, [c_void_p]),
    "hsa_amd_agents_allow_access": (STATUS, [c_uint32, P_HANDLE, POINTER(c_uint32), c_void_p]),
    "hsa_memory_copy": (STATUS, [c_void_p, c_void_p, c_size_t]),
    "hsa_signal_create": (STATUS, [SIGNAL_VALUE, c_uint32, P_HANDLE, P_HANDLE]),
    "hsa_signal_destroy": (STATUS, [HANDLE]),
    "hsa_signal_load_scacquire": (SIGNAL_VALUE, [HANDLE]),
    "hsa_signal_store_screlease": (None, [HANDLE, SIGNAL_VALUE]),
    "hsa_signal_add_scacq_screl": (None, [HANDLE, SIGNAL_VALUE]),
    "hsa_signal_subtract_scacq_screl": (None, [HANDLE, SIGNAL_VALUE]),
    "hsa_signal_exchange_scacq_screl": (SIGNAL_VALUE, [HANDLE, SIGNAL_VALUE]),
    "hsa_signal_wait_scacquire": (SIGNAL_VALUE, [HANDLE, c_int32, SIGNAL_VALUE, c_uint64, c_int32]),
    "hsa_queue_create": (
        STATUS,
        [
            HANDLE,
            c_uint32,
            c_uint32,
            QUEUE_ERROR_CALLBACK,
            c_void_p,
            c_uint32,
            c_uint32,
            POINTER(c_void_p),
        ],
    ),
    "hsa_queue_destroy": (STATUS, [c_void_p]),
    "hsa_queue_load_write_index_scacquire": (c_uint64, [c_void_p]),
    "hsa_queue_add_write_index_scacq_screl": (c_uint64, [c_void_p, c_uint64]),
    "hsa_queue_store_write_index_screlease": (None, [c_void_p, c_uint64]),
    "hsa_queue_load_read_index_scacquire": (c_uint64, [c_void_p]),
    "hsa_code_object_reader_create_from_memory": (STATUS, [c_void_p, c_size_t, P_HANDLE]),
    "hsa_code_object_reader_destroy": (STATUS, [HANDLE]),
    "hsa_executable_create_alt": (STATUS, [c_int32, c_int32, c_char_p, P_HANDLE]),
    "hsa_executable_load_agent_code_object": (
        STATUS,
        [HANDLE, HANDLE, HANDLE, c_char_p, P_HANDLE],
    ),
    "hsa_executable_freeze": (STATUS, [HANDLE, c_char_p]),
    "hsa_executable_get_symbol_by_name": (STATUS, [HANDLE, c_char_p, P_HANDLE, P_HANDLE]),
    "hsa_executable_symbol_get_info": (STATUS, [HANDLE, c_int32, c_void_p]),
    "hsa_executable_destroy": (STATUS, [HANDLE]),
}

OPTIONAL: dict[str, tuple[Any, list[Any]]] = {
    "hsa_amd_memory_async_copy": (
        STATUS,
        [c_void_p, HANDLE, c_void_p, HANDLE, c_size_t, c_uint32, P_HANDLE, HANDLE],
    ),
    "hsa_amd_signal_wait_any": (
        c_uint32,
        [
            c_uint32,
            P_HANDLE,
            POINTER(c_int32),
            POINTER(SIGNAL_VALUE),
            c_uint64,
            c_int32,
            POINTER(SIGNAL_VALUE),
        ],
    ),
    "hsa_amd_profiling_set_profiler_enabled": (STATUS, [c_void_p, c_int]),
    "hsa_amd_profiling_get_dispatch_time": (STATUS, [HANDLE, HANDLE, POINTER(DispatchTime)]),
    "hsa_amd_profiling_async_copy_enable": (STATUS, [c_bool]),
    "hsa_amd_memory_fill": (STATUS, [c_void_p, c_uint32, c_size_t]),
    "hsa_amd_register_system_event_handler": (STATUS, [SYSTEM_EVENT_CALLBACK, c_void_p]),
    "hsa_amd_agent_memory_pool_get_info": (STATUS, [HANDLE, HANDLE, c_int32, c_void_p]),
    "hsa_amd_memory_lock": (STATUS, [c_void_p, c_size_t, P_HANDLE, c_int, POINTER(c_void_p)]),
    "hsa_amd_memory_unlock": (STATUS, [c_void_p]),
}


def error_for_status(status: int, text: str, call: str | None, address: int = 0) -> HsaError:
    """The most specific HsaError subclass for an hsa_status_t."""
    if status in (HSA_STATUS_ERROR_MEMORY_FAULT, HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION):
        return MemoryFault(status, text, address, call)
    if status == HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION:
        return IllegalInstruction(status, text, call)
    return HsaError(status, text, call)


def _lookup(lib: Any, name: str) -> Any:
    """A fresh function object for `name`, or None when the library lacks it."""
    try:
        return lib[name]
    except (AttributeError, KeyError, TypeError):
        return None


class HsaApi:
    """The bound functions of one libhsa-runtime64, as attributes named like the C ones."""

    if TYPE_CHECKING:  # set from REQUIRED and OPTIONAL in __init__: ctypes functions or None
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, lib: Any, path: str = ""):
        self.lib = lib
        self.path = path or getattr(lib, "_name", "") or "libhsa-runtime64"
        self.missing: dict[str, str] = {}
        absent_required = []
        for table, required in ((REQUIRED, True), (OPTIONAL, False)):
            for name, (restype, argtypes) in table.items():
                fn = _lookup(lib, name)
                if fn is None:
                    if required:
                        absent_required.append(name)
                    self.missing[name] = f"{name} is not exported by {self.path}"
                    setattr(self, name, None)
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
                if restype is STATUS and name != "hsa_status_string" and name != "hsa_init":
                    fn.errcheck = self._errcheck(name)
                setattr(self, name, fn)
        if absent_required:
            raise HsaUnavailable(
                HSA_STATUS_ERROR_NOT_INITIALIZED,
                f"{self.path} lacks {', '.join(absent_required)}: not a usable ROCr library; "
                "install libhsa-runtime64-1 or ROCm, or use --device amdgpu:virtual, "
                "or the Vulkan fallback",
                "load_library",
            )

    def has(self, name: str) -> bool:
        """Whether the library exports `name` (bound or not)."""
        return getattr(self, name, None) is not None or _lookup(self.lib, name) is not None

    def status_string(self, status: int) -> str:
        """ROCr's own text for a status; works before hsa_init."""
        text = c_char_p()
        rc = self.hsa_status_string(int(status), ctypes.byref(text))
        if rc != 0 or not text.value:
            return f"unknown HSA status 0x{int(status):x}"
        return text.value.decode(errors="replace").strip()

    def error(self, status: int, call: str | None, address: int = 0) -> HsaError:
        return error_for_status(status, self.status_string(status), call, address)

    def check(self, status: int, call: str) -> None:
        if status != 0:
            raise self.error(status, call)

    def _errcheck(self, name: str) -> Callable[..., int]:
        def errcheck(result: int, func: Any, args: tuple) -> int:
            # HSA_STATUS_INFO_BREAK (1) is the iteration "stop" answer, not a failure.
            if result != 0 and result != 1:
                raise self.error(result, name)
            return result

        return errcheck
