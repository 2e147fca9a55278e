"""ctypes mirrors of the ROCr structures and enum values that the provider uses.

Sources: hsa.h, hsa_ext_amd.h, amd_hsa_queue.h, amd_hsa_signal.h (ROCr 5.2.3 headers, same
layouts in ROCr 6.x). `tests/test_rocr_structs.py` compiles a C file against the installed
headers and checks every size, offset and value below against what gcc says.

Opaque handles (hsa_agent_t, hsa_signal_t, ...) are structs of one uint64_t. On x86-64 and
AArch64 such a struct is passed and returned exactly like a uint64_t, so function prototypes
use `c_uint64` for them; the `*Handle` structures exist for the size checks and for arrays.
"""

from __future__ import annotations

import ctypes
from ctypes import c_int32, c_int64, c_uint32, c_uint64, c_void_p

# --- handles -------------------------------------------------------------------------------


class _Handle(ctypes.Structure):
    _fields_ = [("handle", c_uint64)]


class AgentHandle(_Handle):
    """hsa_agent_t."""


class SignalHandle(_Handle):
    """hsa_signal_t."""


class IsaHandle(_Handle):
    """hsa_isa_t."""


class MemoryPoolHandle(_Handle):
    """hsa_amd_memory_pool_t."""


class ExecutableHandle(_Handle):
    """hsa_executable_t."""


class ExecutableSymbolHandle(_Handle):
    """hsa_executable_symbol_t."""


class CodeObjectReaderHandle(_Handle):
    """hsa_code_object_reader_t."""


class LoadedCodeObjectHandle(_Handle):
    """hsa_loaded_code_object_t."""


# --- queues and signals --------------------------------------------------------------------


class HsaQueue(ctypes.Structure):
    """hsa_queue_t (large model, little endian): 40 bytes."""

    _fields_ = [
        ("type", c_uint32),
        ("features", c_uint32),
        ("base_address", c_void_p),
        ("doorbell_signal", c_uint64),
        ("size", c_uint32),
        ("reserved1", c_uint32),
        ("id", c_uint64),
    ]


class AmdQueue(ctypes.Structure):
    """The fields of amd_queue_t (256 bytes, 64-byte aligned) that the driver reads."""

    _fields_ = [
        ("hsa_queue", HsaQueue),
        ("reserved1", c_uint32 * 4),
        ("write_dispatch_id", c_uint64),
        ("group_segment_aperture_base_hi", c_uint32),
        ("private_segment_aperture_base_hi", c_uint32),
        ("max_cu_id", c_uint32),
        ("max_wave_id", c_uint32),
        ("max_legacy_doorbell_dispatch_id_plus_1", c_uint64),
        ("legacy_doorbell_lock", c_uint32),
        ("reserved2", c_uint32 * 9),
        ("read_dispatch_id", c_uint64),
        ("read_dispatch_id_field_base_byte_offset", c_uint32),
        ("compute_tmpring_size", c_uint32),
        ("scratch_resource_descriptor", c_uint32 * 4),
        ("scratch_backing_memory_location", c_uint64),
        ("scratch_backing_memory_byte_size", c_uint64),
        ("scratch_wave64_lane_byte_size", c_uint32),
        ("queue_properties", c_uint32),
        ("reserved3", c_uint32 * 2),
        ("queue_inactive_signal", c_uint64),
        ("reserved4", c_uint32 * 14),
    ]


class AmdSignal(ctypes.Structure):
    """amd_signal_t: 64 bytes; a ROCr hsa_signal_t handle is the address of one."""

    _fields_ = [
        ("kind", c_int64),
        ("value", c_int64),  # union with the hardware doorbell pointer
        ("event_mailbox_ptr", c_uint64),
        ("event_id", c_uint32),
        ("reserved1", c_uint32),
        ("start_ts", c_uint64),
        ("end_ts", c_uint64),
        ("queue_ptr", c_uint64),  # union with reserved2
        ("reserved3", c_uint32 * 2),
    ]


class DispatchTime(ctypes.Structure):
    """hsa_amd_profiling_dispatch_time_t."""

    _fields_ = [("start", c_uint64), ("end", c_uint64)]


class GpuMemoryFaultInfo(ctypes.Structure):
    """hsa_amd_gpu_memory_fault_info_t."""

    _fields_ = [("agent", c_uint64), ("virtual_address", c_uint64), ("fault_reason_mask", c_uint32)]


class AmdEvent(ctypes.Structure):
    """hsa_amd_event_t with its one union member (memory_fault)."""

    _fields_ = [("event_type", c_int32), ("memory_fault", GpuMemoryFaultInfo)]


class MemoryPoolLinkInfo(ctypes.Structure):
    """hsa_amd_memory_pool_link_info_t: one hop from an agent to a pool."""

    _fields_ = [
        ("min_latency", c_uint32),
        ("max_latency", c_uint32),
        ("min_bandwidth", c_uint32),
        ("max_bandwidth", c_uint32),
        ("atomic_support_32bit", ctypes.c_bool),
        ("atomic_support_64bit", ctypes.c_bool),
        ("coherent_support", ctypes.c_bool),
        ("link_type", c_int32),  # hsa_amd_link_info_type_t
        ("numa_distance", c_uint32),
    ]


HSA_AMD_GPU_MEMORY_FAULT_EVENT = 0
AMD_SIGNAL_KIND_USER = 1
AMD_SIGNAL_KIND_DOORBELL = -1

# --- enum values ---------------------------------------------------------------------------
# hsa_system_info_t
HSA_SYSTEM_INFO_VERSION_MAJOR = 0  # uint16_t
HSA_SYSTEM_INFO_VERSION_MINOR = 1  # uint16_t
HSA_SYSTEM_INFO_TIMESTAMP = 2  # uint64_t
HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY = 3  # uint64_t, Hz
HSA_AMD_SYSTEM_INFO_BUILD_VERSION = 0x200  # const char*

# hsa_agent_info_t and hsa_amd_agent_info_t
HSA_AGENT_INFO_NAME = 0  # char[64]
HSA_AGENT_INFO_VENDOR_NAME = 1  # char[64]
HSA_AGENT_INFO_WAVEFRONT_SIZE = 6  # uint32_t
HSA_AGENT_INFO_QUEUE_MIN_SIZE = 13  # uint32_t
HSA_AGENT_INFO_QUEUE_MAX_SIZE = 14  # uint32_t
HSA_AGENT_INFO_NODE = 16  # uint32_t
HSA_AGENT_INFO_DEVICE = 17  # hsa_device_type_t
HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT = 0xA002  # uint32_t
HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xA009  # char[64]
HSA_AMD_AGENT_INFO_UUID = 0xA011  # char[21]: "GPU-" + 16 hex digits

# hsa_amd_agent_memory_pool_info_t
HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS = 0  # hsa_amd_memory_pool_access_t
HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS = 1  # uint32_t
HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO = 2  # hsa_amd_memory_pool_link_info_t[hops]

# hsa_isa_info_t
HSA_ISA_INFO_NAME_LENGTH = 0  # uint32_t
HSA_ISA_INFO_NAME = 1  # char[NAME_LENGTH]

# hsa_amd_memory_pool_info_t
HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0  # hsa_amd_segment_t
HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1  # uint32_t
HSA_AMD_MEMORY_POOL_INFO_SIZE = 2  # size_t
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5  # bool
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE = 6  # size_t
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT = 7  # size_t
HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL = 15  # bool

# hsa_executable_symbol_info_t
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE = 11  # uint32_t
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT = 12  # uint32_t
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE = 13  # uint32_t
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE = 14  # uint32_t
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT = 22  # uint64_t

# hsa_profile_t, hsa_default_float_rounding_mode_t, hsa_wait_state_t
HSA_PROFILE_BASE = 0
HSA_PROFILE_FULL = 1
HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT = 0
HSA_WAIT_STATE_BLOCKED = 0
HSA_WAIT_STATE_ACTIVE = 1

# hsa_queue_feature_t
HSA_QUEUE_FEATURE_KERNEL_DISPATCH = 1
HSA_QUEUE_FEATURE_AGENT_DISPATCH = 2

# hsa_status_t values the iteration callbacks return
HSA_STATUS_SUCCESS = 0
HSA_STATUS_INFO_BREAK = 0x1

# Prefix of every ISA name ROCr reports: "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-".
ISA_NAME_PREFIX = "amdgcn-amd-amdhsa--"

# hsa_queue_create: UINT32_MAX segment sizes mean "the runtime's default".
QUEUE_DEFAULT_SEGMENT_SIZE = 0xFFFFFFFF

# --- callback prototypes -------------------------------------------------------------------
# hsa_status_t (*)(hsa_agent_t, void*) and the same shape for ISAs and memory pools.
HANDLE_ITERATE_CALLBACK = ctypes.CFUNCTYPE(c_int32, c_uint64, c_void_p)
# void (*)(hsa_status_t status, hsa_queue_t* source, void* data)
QUEUE_ERROR_CALLBACK = ctypes.CFUNCTYPE(None, c_int32, c_void_p, c_void_p)
# hsa_status_t (*)(const hsa_amd_event_t* event, void* data)
SYSTEM_EVENT_CALLBACK = ctypes.CFUNCTYPE(c_int32, c_void_p, c_void_p)

# Every value and layout above, by the C name that `tests/test_rocr_structs.py` compares.
STRUCTS: dict[str, type[ctypes.Structure]] = {
    "hsa_agent_t": AgentHandle,
    "hsa_signal_t": SignalHandle,
    "hsa_isa_t": IsaHandle,
    "hsa_amd_memory_pool_t": MemoryPoolHandle,
    "hsa_executable_t": ExecutableHandle,
    "hsa_executable_symbol_t": ExecutableSymbolHandle,
    "hsa_code_object_reader_t": CodeObjectReaderHandle,
    "hsa_loaded_code_object_t": LoadedCodeObjectHandle,
    "hsa_queue_t": HsaQueue,
    "amd_queue_t": AmdQueue,
    "amd_signal_t": AmdSignal,
    "hsa_amd_profiling_dispatch_time_t": DispatchTime,
    "hsa_amd_gpu_memory_fault_info_t": GpuMemoryFaultInfo,
    "hsa_amd_event_t": AmdEvent,
    "hsa_amd_memory_pool_link_info_t": MemoryPoolLinkInfo,
}


def constants() -> dict[str, int]:
    """Every HSA_/AMD_ enum constant of this module, by its C name."""
    return {
        name: value
        for name, value in globals().items()
        if name.startswith(("HSA_", "AMD_")) and isinstance(value, int)
    }
