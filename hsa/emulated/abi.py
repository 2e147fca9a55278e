"""The amdgpu kernel driver's KFD interface (`linux/kfd_ioctl.h`) as ctypes: every ioctl
argument struct (names as in the header), the request numbers, and the constants a server
of /dev/kfd needs.

Source: the Linux UAPI header include/uapi/linux/kfd_ioctl.h at KFD interface 1.23
(upstream ioctls 0x01..0x28, Linux 7.2 as Debian sid ships it), plus the ROCm DKMS
driver's extra ioctls (0x80..0x85, "non upstream" in ROCm's copy of the header).
tests/test_emulated_abi.py compiles a C oracle against Debian 12's
/usr/include/linux/kfd_ioctl.h (KFD 1.11) and, where the ROCm 6 root filesystem is built,
sid's newer header, and compares every size, offset, request number and constant byte for
byte.

Structs only grow at their end between interface versions (create_queue_args gained
sdma_engine_id in 1.17), so one request number per ioctl is not enough: the kernel
(kfd_chardev.c, kfd_ioctl) looks the handler up by the number's `nr` alone, copies
`_IOC_SIZE(request)` bytes from the caller and zero-fills the rest of its own, larger struct.
`decode` does the same. An unknown nr gets EINVAL, as from the kernel.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import c_int32 as s32
from ctypes import c_uint32 as u32
from ctypes import c_uint64 as u64
from typing import NamedTuple, Self

KFD_IOCTL_MAJOR_VERSION = 1
KFD_IOCTL_MINOR_VERSION = 23  # what the emulated kernel reports through GET_VERSION

# --- linux/ioctl.h (asm-generic): the request number's fields --------------------------------
_IOC_NRBITS, _IOC_TYPEBITS, _IOC_SIZEBITS, _IOC_DIRBITS = 8, 8, 14, 2
_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = _IOC_NRSHIFT + _IOC_NRBITS
_IOC_SIZESHIFT = _IOC_TYPESHIFT + _IOC_TYPEBITS
_IOC_DIRSHIFT = _IOC_SIZESHIFT + _IOC_SIZEBITS
_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2


def _IOC(direction: int, kind: int, nr: int, size: int) -> int:
    return ((direction << _IOC_DIRSHIFT) | (kind << _IOC_TYPESHIFT) | (nr << _IOC_NRSHIFT)
            | (size << _IOC_SIZESHIFT))


def _IOR(kind: int, nr: int, struct: type) -> int:
    return _IOC(_IOC_READ, kind, nr, ctypes.sizeof(struct))


def _IOW(kind: int, nr: int, struct: type) -> int:
    return _IOC(_IOC_WRITE, kind, nr, ctypes.sizeof(struct))


def _IOWR(kind: int, nr: int, struct: type) -> int:
    return _IOC(_IOC_READ | _IOC_WRITE, kind, nr, ctypes.sizeof(struct))


def ioc_nr(request: int) -> int:
    return (request >> _IOC_NRSHIFT) & ((1 << _IOC_NRBITS) - 1)


def ioc_type(request: int) -> int:
    return (request >> _IOC_TYPESHIFT) & ((1 << _IOC_TYPEBITS) - 1)


def ioc_size(request: int) -> int:
    return (request >> _IOC_SIZESHIFT) & ((1 << _IOC_SIZEBITS) - 1)


def ioc_dir(request: int) -> int:
    return (request >> _IOC_DIRSHIFT) & ((1 << _IOC_DIRBITS) - 1)


class KfdArgs(ctypes.Structure):
    """Base of the ioctl argument structs: native layout, as the header's __u32/__u64."""

    def to_bytes(self) -> bytes:
        return bytes(memoryview(self).cast("B"))

    @classmethod
    def from_user(cls, data: bytes) -> Self:
        """The struct from what a caller passed: shorter (an older header's) is zero-filled,
        longer is cut, as the kernel's copy_from_user into its own struct."""
        size = ctypes.sizeof(cls)
        return cls.from_buffer_copy(bytes(data[:size]).ljust(size, b"\0"))


# --- queues ----------------------------------------------------------------------------------
KFD_IOC_QUEUE_TYPE_COMPUTE = 0x0
KFD_IOC_QUEUE_TYPE_SDMA = 0x1
KFD_IOC_QUEUE_TYPE_COMPUTE_AQL = 0x2
KFD_IOC_QUEUE_TYPE_SDMA_XGMI = 0x3
KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID = 0x4
KFD_MAX_QUEUE_PERCENTAGE = 100
KFD_MAX_QUEUE_PRIORITY = 15
KFD_MIN_QUEUE_RING_SIZE = 1024


class kfd_ioctl_get_version_args(KfdArgs):
    _fields_ = [("major_version", u32), ("minor_version", u32)]


class kfd_ioctl_create_queue_args(KfdArgs):
    _fields_ = [
        ("ring_base_address", u64), ("write_pointer_address", u64),
        ("read_pointer_address", u64), ("doorbell_offset", u64),
        ("ring_size", u32), ("gpu_id", u32), ("queue_type", u32), ("queue_percentage", u32),
        ("queue_priority", u32), ("queue_id", u32),
        ("eop_buffer_address", u64), ("eop_buffer_size", u64),
        ("ctx_save_restore_address", u64), ("ctx_save_restore_size", u32),
        ("ctl_stack_size", u32),
        ("sdma_engine_id", u32),  # KFD 1.17
        ("metadata_ring_size", u32),  # KFD 1.22 ("pad" in 1.17..1.21)
    ]


class kfd_ioctl_destroy_queue_args(KfdArgs):
    _fields_ = [("queue_id", u32), ("pad", u32)]


class kfd_ioctl_update_queue_args(KfdArgs):
    _fields_ = [("ring_base_address", u64), ("queue_id", u32), ("ring_size", u32),
                ("queue_percentage", u32), ("queue_priority", u32)]


class kfd_ioctl_set_cu_mask_args(KfdArgs):
    _fields_ = [("queue_id", u32), ("num_cu_mask", u32), ("cu_mask_ptr", u64)]


class kfd_ioctl_get_queue_wave_state_args(KfdArgs):
    _fields_ = [("ctl_stack_address", u64), ("ctl_stack_used_size", u32),
                ("save_area_used_size", u32), ("queue_id", u32), ("pad", u32)]


class kfd_ioctl_get_available_memory_args(KfdArgs):
    _fields_ = [("available", u64), ("gpu_id", u32), ("pad", u32)]


class kfd_dbg_device_info_entry(KfdArgs):
    _fields_ = [
        ("exception_status", u64), ("lds_base", u64), ("lds_limit", u64),
        ("scratch_base", u64), ("scratch_limit", u64), ("gpuvm_base", u64),
        ("gpuvm_limit", u64), ("gpu_id", u32), ("location_id", u32), ("vendor_id", u32),
        ("device_id", u32), ("revision_id", u32), ("subsystem_vendor_id", u32),
        ("subsystem_device_id", u32), ("fw_version", u32), ("gfx_target_version", u32),
        ("simd_count", u32), ("max_waves_per_simd", u32), ("array_count", u32),
        ("simd_arrays_per_engine", u32), ("num_xcc", u32), ("capability", u32),
        ("debug_prop", u32), ("capability2", u32), ("pad", u32),  # KFD 1.20
    ]


# --- memory policy, clocks, apertures ---------------------------------------------------------
KFD_IOC_CACHE_POLICY_COHERENT = 0
KFD_IOC_CACHE_POLICY_NONCOHERENT = 1
KFD_PROC_FLAG_MFMA_HIGH_PRECISION = 1 << 0


class kfd_ioctl_set_memory_policy_args(KfdArgs):
    _fields_ = [("alternate_aperture_base", u64), ("alternate_aperture_size", u64),
                ("gpu_id", u32), ("default_policy", u32), ("alternate_policy", u32),
                ("misc_process_flag", u32)]  # "pad" before KFD 1.18


class kfd_ioctl_get_clock_counters_args(KfdArgs):
    _fields_ = [("gpu_clock_counter", u64), ("cpu_clock_counter", u64),
                ("system_clock_counter", u64), ("system_clock_freq", u64),
                ("gpu_id", u32), ("pad", u32)]


class kfd_process_device_apertures(KfdArgs):
    _fields_ = [("lds_base", u64), ("lds_limit", u64), ("scratch_base", u64),
                ("scratch_limit", u64), ("gpuvm_base", u64), ("gpuvm_limit", u64),
                ("gpu_id", u32), ("pad", u32)]


NUM_OF_SUPPORTED_GPUS = 7


class kfd_ioctl_get_process_apertures_args(KfdArgs):
    _fields_ = [("process_apertures", kfd_process_device_apertures * NUM_OF_SUPPORTED_GPUS),
                ("num_of_nodes", u32), ("pad", u32)]


class kfd_ioctl_get_process_apertures_new_args(KfdArgs):
    _fields_ = [("kfd_process_device_apertures_ptr", u64), ("num_of_nodes", u32),
                ("pad", u32)]


# --- the old debugger interface (deprecated ioctls 0x0D..0x10) --------------------------------
MAX_ALLOWED_NUM_POINTS = 100
MAX_ALLOWED_AW_BUFF_SIZE = 4096
MAX_ALLOWED_WAC_BUFF_SIZE = 128


class kfd_ioctl_dbg_register_args(KfdArgs):
    _fields_ = [("gpu_id", u32), ("pad", u32)]


class kfd_ioctl_dbg_unregister_args(KfdArgs):
    _fields_ = [("gpu_id", u32), ("pad", u32)]


class kfd_ioctl_dbg_address_watch_args(KfdArgs):
    _fields_ = [("content_ptr", u64), ("gpu_id", u32), ("buf_size_in_bytes", u32)]


class kfd_ioctl_dbg_wave_control_args(KfdArgs):
    _fields_ = [("content_ptr", u64), ("gpu_id", u32), ("buf_size_in_bytes", u32)]


KFD_INVALID_FD = 0xFFFFFFFF


class kfd_ioctl_dbg_trap_args_deprecated(KfdArgs):  # ROCm DKMS only
    _fields_ = [("exception_mask", u64), ("ptr", u64), ("pid", u32), ("op", u32),
                ("data1", u32), ("data2", u32), ("data3", u32), ("data4", u32)]


# --- events -----------------------------------------------------------------------------------
KFD_IOC_EVENT_SIGNAL = 0
KFD_IOC_EVENT_NODECHANGE = 1
KFD_IOC_EVENT_DEVICESTATECHANGE = 2
KFD_IOC_EVENT_HW_EXCEPTION = 3
KFD_IOC_EVENT_SYSTEM_EVENT = 4
KFD_IOC_EVENT_DEBUG_EVENT = 5
KFD_IOC_EVENT_PROFILE_EVENT = 6
KFD_IOC_EVENT_QUEUE_EVENT = 7
KFD_IOC_EVENT_MEMORY = 8
KFD_IOC_WAIT_RESULT_COMPLETE = 0
KFD_IOC_WAIT_RESULT_TIMEOUT = 1
KFD_IOC_WAIT_RESULT_FAIL = 2
KFD_SIGNAL_EVENT_LIMIT = 4096
KFD_HW_EXCEPTION_WHOLE_GPU_RESET = 0
KFD_HW_EXCEPTION_PER_ENGINE_RESET = 1
KFD_HW_EXCEPTION_GPU_HANG = 0
KFD_HW_EXCEPTION_ECC = 1
KFD_MEM_ERR_NO_RAS = 0
KFD_MEM_ERR_SRAM_ECC = 1
KFD_MEM_ERR_POISON_CONSUMED = 2
KFD_MEM_ERR_GPU_HANG = 3


class kfd_ioctl_create_event_args(KfdArgs):
    _fields_ = [("event_page_offset", u64), ("event_trigger_data", u32), ("event_type", u32),
                ("auto_reset", u32), ("node_id", u32), ("event_id", u32),
                ("event_slot_index", u32)]


class kfd_ioctl_destroy_event_args(KfdArgs):
    _fields_ = [("event_id", u32), ("pad", u32)]


class kfd_ioctl_set_event_args(KfdArgs):
    _fields_ = [("event_id", u32), ("pad", u32)]


class kfd_ioctl_reset_event_args(KfdArgs):
    _fields_ = [("event_id", u32), ("pad", u32)]


class kfd_memory_exception_failure(KfdArgs):
    _fields_ = [("NotPresent", u32), ("ReadOnly", u32), ("NoExecute", u32),
                ("imprecise", u32)]


class kfd_hsa_memory_exception_data(KfdArgs):
    _fields_ = [("failure", kfd_memory_exception_failure), ("va", u64), ("gpu_id", u32),
                ("ErrorType", u32)]


class kfd_hsa_hw_exception_data(KfdArgs):
    _fields_ = [("reset_type", u32), ("reset_cause", u32), ("memory_lost", u32),
                ("gpu_id", u32)]


class kfd_hsa_signal_event_data(KfdArgs):  # KFD 1.14
    _fields_ = [("last_event_age", u64)]


class _kfd_event_data_union(ctypes.Union):
    _fields_ = [("memory_exception_data", kfd_hsa_memory_exception_data),
                ("hw_exception_data", kfd_hsa_hw_exception_data),
                ("signal_event_data", kfd_hsa_signal_event_data)]


class kfd_event_data(KfdArgs):
    _anonymous_ = ("_data",)
    _fields_ = [("_data", _kfd_event_data_union), ("kfd_event_data_ext", u64),
                ("event_id", u32), ("pad", u32)]


class kfd_ioctl_wait_events_args(KfdArgs):
    _fields_ = [("events_ptr", u64), ("num_events", u32), ("wait_for_all", u32),
                ("timeout", u32), ("wait_result", u32)]


class kfd_ioctl_set_scratch_backing_va_args(KfdArgs):
    _fields_ = [("va_addr", u64), ("gpu_id", u32), ("pad", u32)]


class kfd_ioctl_get_tile_config_args(KfdArgs):
    _fields_ = [("tile_config_ptr", u64), ("macro_tile_config_ptr", u64),
                ("num_tile_configs", u32), ("num_macro_tile_configs", u32), ("gpu_id", u32),
                ("gb_addr_config", u32), ("num_banks", u32), ("num_ranks", u32)]


class kfd_ioctl_set_trap_handler_args(KfdArgs):
    _fields_ = [("tba_addr", u64), ("tma_addr", u64), ("gpu_id", u32), ("pad", u32)]


class kfd_ioctl_acquire_vm_args(KfdArgs):
    _fields_ = [("drm_fd", u32), ("gpu_id", u32)]


# --- memory -----------------------------------------------------------------------------------
KFD_IOC_ALLOC_MEM_FLAGS_VRAM = 1 << 0
KFD_IOC_ALLOC_MEM_FLAGS_GTT = 1 << 1
KFD_IOC_ALLOC_MEM_FLAGS_USERPTR = 1 << 2
KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL = 1 << 3
KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP = 1 << 4
KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE = 1 << 31
KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE = 1 << 30
KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC = 1 << 29
KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE = 1 << 28
KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM = 1 << 27
KFD_IOC_ALLOC_MEM_FLAGS_COHERENT = 1 << 26
KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED = 1 << 25
KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT = 1 << 24
KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS = 1 << 23


class kfd_ioctl_alloc_memory_of_gpu_args(KfdArgs):
    _fields_ = [("va_addr", u64), ("size", u64), ("handle", u64), ("mmap_offset", u64),
                ("gpu_id", u32), ("flags", u32)]


class kfd_ioctl_free_memory_of_gpu_args(KfdArgs):
    _fields_ = [("handle", u64)]


class kfd_ioctl_map_memory_to_gpu_args(KfdArgs):
    _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32),
                ("n_success", u32)]


class kfd_ioctl_unmap_memory_from_gpu_args(KfdArgs):
    _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32),
                ("n_success", u32)]


class kfd_ioctl_alloc_queue_gws_args(KfdArgs):
    _fields_ = [("queue_id", u32), ("num_gws", u32), ("first_gws", u32), ("pad", u32)]


class kfd_ioctl_get_dmabuf_info_args(KfdArgs):
    _fields_ = [("size", u64), ("metadata_ptr", u64), ("metadata_size", u32),
                ("gpu_id", u32), ("flags", u32), ("dmabuf_fd", u32)]


class kfd_ioctl_import_dmabuf_args(KfdArgs):
    _fields_ = [("va_addr", u64), ("handle", u64), ("gpu_id", u32), ("dmabuf_fd", u32)]


class kfd_ioctl_export_dmabuf_args(KfdArgs):  # KFD 1.12
    _fields_ = [("handle", u64), ("flags", u32), ("dmabuf_fd", u32)]


# --- SMI events -------------------------------------------------------------------------------
KFD_SMI_EVENT_NONE = 0
KFD_SMI_EVENT_VMFAULT = 1
KFD_SMI_EVENT_THERMAL_THROTTLE = 2
KFD_SMI_EVENT_GPU_PRE_RESET = 3
KFD_SMI_EVENT_GPU_POST_RESET = 4
KFD_SMI_EVENT_MIGRATE_START = 5
KFD_SMI_EVENT_MIGRATE_END = 6
KFD_SMI_EVENT_PAGE_FAULT_START = 7
KFD_SMI_EVENT_PAGE_FAULT_END = 8
KFD_SMI_EVENT_QUEUE_EVICTION = 9
KFD_SMI_EVENT_QUEUE_RESTORE = 10
KFD_SMI_EVENT_UNMAP_FROM_GPU = 11
KFD_SMI_EVENT_PROCESS_START = 12
KFD_SMI_EVENT_PROCESS_END = 13
KFD_SMI_EVENT_ALL_PROCESS = 64
KFD_SMI_EVENT_MSG_SIZE = 96
KFD_MIGRATE_TRIGGER_PREFETCH = 0
KFD_MIGRATE_TRIGGER_PAGEFAULT_GPU = 1
KFD_MIGRATE_TRIGGER_PAGEFAULT_CPU = 2
KFD_MIGRATE_TRIGGER_TTM_EVICTION = 3
KFD_QUEUE_EVICTION_TRIGGER_SVM = 0
KFD_QUEUE_EVICTION_TRIGGER_USERPTR = 1
KFD_QUEUE_EVICTION_TRIGGER_TTM = 2
KFD_QUEUE_EVICTION_TRIGGER_SUSPEND = 3
KFD_QUEUE_EVICTION_CRIU_CHECKPOINT = 4
KFD_QUEUE_EVICTION_CRIU_RESTORE = 5
KFD_SVM_UNMAP_TRIGGER_MMU_NOTIFY = 0
KFD_SVM_UNMAP_TRIGGER_MMU_NOTIFY_MIGRATE = 1
KFD_SVM_UNMAP_TRIGGER_UNMAP_FROM_CPU = 2


class kfd_ioctl_smi_events_args(KfdArgs):
    _fields_ = [("gpuid", u32), ("anon_fd", u32)]


# --- CRIU -------------------------------------------------------------------------------------
KFD_CRIU_OP_PROCESS_INFO = 0
KFD_CRIU_OP_CHECKPOINT = 1
KFD_CRIU_OP_UNPAUSE = 2
KFD_CRIU_OP_RESTORE = 3
KFD_CRIU_OP_RESUME = 4


class kfd_ioctl_criu_args(KfdArgs):
    _fields_ = [("devices", u64), ("bos", u64), ("priv_data", u64), ("priv_data_size", u64),
                ("num_devices", u32), ("num_bos", u32), ("num_objects", u32), ("pid", u32),
                ("op", u32)]


class kfd_criu_device_bucket(KfdArgs):
    _fields_ = [("user_gpu_id", u32), ("actual_gpu_id", u32), ("drm_fd", u32), ("pad", u32)]


class kfd_criu_bo_bucket(KfdArgs):
    _fields_ = [("addr", u64), ("size", u64), ("offset", u64), ("restored_offset", u64),
                ("gpu_id", u32), ("alloc_flags", u32), ("dmabuf_fd", u32), ("pad", u32)]


KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL = 0
KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL = 4


# --- ROCm DKMS only: IPC handles, cross-process copies, SPM, PC sampling ----------------------
class kfd_ioctl_ipc_export_handle_args(KfdArgs):
    _fields_ = [("handle", u64), ("share_handle", u32 * 4), ("gpu_id", u32), ("flags", u32)]


class kfd_ioctl_ipc_import_handle_args(KfdArgs):
    _fields_ = [("handle", u64), ("va_addr", u64), ("mmap_offset", u64),
                ("share_handle", u32 * 4), ("gpu_id", u32), ("flags", u32)]


class kfd_ioctl_cross_memory_copy_deprecated_args(KfdArgs):
    _fields_ = [("pid", u32), ("flags", u32), ("src_mem_range_array", u64),
                ("src_mem_array_size", u64), ("dst_mem_range_array", u64),
                ("dst_mem_array_size", u64), ("bytes_copied", u64)]


class kfd_ioctl_spm_args(KfdArgs):
    _fields_ = [("dest_buf", u64), ("buf_size", u32), ("op", u32), ("timeout", u32),
                ("gpu_id", u32), ("bytes_copied", u32), ("has_data_loss", u32)]


class kfd_pc_sample_info(KfdArgs):
    _fields_ = [("interval", u64), ("interval_min", u64), ("interval_max", u64),
                ("flags", u64), ("method", u32), ("type", u32)]


class kfd_ioctl_pc_sample_args(KfdArgs):
    _fields_ = [("sample_info_ptr", u64), ("num_sample_info", u32), ("op", u32),
                ("gpu_id", u32), ("trace_id", u32), ("flags", u32), ("reserved", u32)]


# --- SVM --------------------------------------------------------------------------------------
KFD_IOCTL_SVM_FLAG_HOST_ACCESS = 0x00000001
KFD_IOCTL_SVM_FLAG_COHERENT = 0x00000002
KFD_IOCTL_SVM_FLAG_HIVE_LOCAL = 0x00000004
KFD_IOCTL_SVM_FLAG_GPU_RO = 0x00000008
KFD_IOCTL_SVM_FLAG_GPU_EXEC = 0x00000010
KFD_IOCTL_SVM_FLAG_GPU_READ_MOSTLY = 0x00000020
KFD_IOCTL_SVM_FLAG_GPU_ALWAYS_MAPPED = 0x00000040
KFD_IOCTL_SVM_FLAG_EXT_COHERENT = 0x00000080
KFD_IOCTL_SVM_OP_SET_ATTR = 0
KFD_IOCTL_SVM_OP_GET_ATTR = 1
KFD_IOCTL_SVM_LOCATION_SYSMEM = 0
KFD_IOCTL_SVM_LOCATION_UNDEFINED = 0xFFFFFFFF
KFD_IOCTL_SVM_ATTR_PREFERRED_LOC = 0
KFD_IOCTL_SVM_ATTR_PREFETCH_LOC = 1
KFD_IOCTL_SVM_ATTR_ACCESS = 2
KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE = 3
KFD_IOCTL_SVM_ATTR_NO_ACCESS = 4
KFD_IOCTL_SVM_ATTR_SET_FLAGS = 5
KFD_IOCTL_SVM_ATTR_CLR_FLAGS = 6
KFD_IOCTL_SVM_ATTR_GRANULARITY = 7


class kfd_ioctl_svm_attribute(KfdArgs):
    _fields_ = [("type", u32), ("value", u32)]


class kfd_ioctl_svm_args(KfdArgs):
    """Followed in memory by `nattr` kfd_ioctl_svm_attribute (the header's flexible
    `attrs[]`, at offset sizeof(kfd_ioctl_svm_args)); the request's size covers only this."""

    _fields_ = [("start_addr", u64), ("size", u64), ("op", u32), ("nattr", u32)]


class kfd_ioctl_set_xnack_mode_args(KfdArgs):
    _fields_ = [("xnack_enabled", s32)]


# --- the debugger interface (KFD 1.13): runtime enable and dbg trap ---------------------------
KFD_DBG_TRAP_OVERRIDE_OR = 0
KFD_DBG_TRAP_OVERRIDE_REPLACE = 1
KFD_DBG_TRAP_MASK_FP_INVALID = 1
KFD_DBG_TRAP_MASK_FP_INPUT_DENORMAL = 2
KFD_DBG_TRAP_MASK_FP_DIVIDE_BY_ZERO = 4
KFD_DBG_TRAP_MASK_FP_OVERFLOW = 8
KFD_DBG_TRAP_MASK_FP_UNDERFLOW = 16
KFD_DBG_TRAP_MASK_FP_INEXACT = 32
KFD_DBG_TRAP_MASK_INT_DIVIDE_BY_ZERO = 64
KFD_DBG_TRAP_MASK_DBG_ADDRESS_WATCH = 128
KFD_DBG_TRAP_MASK_DBG_MEMORY_VIOLATION = 256
KFD_DBG_TRAP_MASK_TRAP_ON_WAVE_START = 1 << 30
KFD_DBG_TRAP_MASK_TRAP_ON_WAVE_END = 1 << 31
KFD_DBG_TRAP_ADDRESS_WATCH_MODE_READ = 0
KFD_DBG_TRAP_ADDRESS_WATCH_MODE_NONREAD = 1
KFD_DBG_TRAP_ADDRESS_WATCH_MODE_ATOMIC = 2
KFD_DBG_TRAP_ADDRESS_WATCH_MODE_ALL = 3
KFD_DBG_TRAP_WAVE_LAUNCH_MODE_NORMAL = 0
KFD_DBG_TRAP_WAVE_LAUNCH_MODE_HALT = 1
KFD_DBG_TRAP_WAVE_LAUNCH_MODE_DEBUG = 3
KFD_DBG_TRAP_FLAG_SINGLE_MEM_OP = 1
KFD_DBG_TRAP_FLAG_SINGLE_ALU_OP = 2
KFD_DBG_TRAP_FLAG_LDS_OUT_OF_ADDR_RANGE = 4
EC_NONE = 0
EC_QUEUE_WAVE_ABORT = 1
EC_QUEUE_WAVE_TRAP = 2
EC_QUEUE_WAVE_MATH_ERROR = 3
EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION = 4
EC_QUEUE_WAVE_MEMORY_VIOLATION = 5
EC_QUEUE_WAVE_APERTURE_VIOLATION = 6
EC_QUEUE_PACKET_DISPATCH_DIM_INVALID = 16
EC_QUEUE_PACKET_DISPATCH_GROUP_SEGMENT_SIZE_INVALID = 17
EC_QUEUE_PACKET_DISPATCH_CODE_INVALID = 18
EC_QUEUE_PACKET_RESERVED = 19
EC_QUEUE_PACKET_UNSUPPORTED = 20
EC_QUEUE_PACKET_DISPATCH_WORK_GROUP_SIZE_INVALID = 21
EC_QUEUE_PACKET_DISPATCH_REGISTER_INVALID = 22
EC_QUEUE_PACKET_VENDOR_UNSUPPORTED = 23
EC_QUEUE_PREEMPTION_ERROR = 30
EC_QUEUE_NEW = 31
EC_DEVICE_QUEUE_DELETE = 32
EC_DEVICE_MEMORY_VIOLATION = 33
EC_DEVICE_RAS_ERROR = 34
EC_DEVICE_FATAL_HALT = 35
EC_DEVICE_NEW = 36
EC_PROCESS_RUNTIME = 48
EC_PROCESS_DEVICE_REMOVE = 49
EC_MAX = 50


def KFD_EC_MASK(code: int) -> int:
    return 1 << (code - 1)


DEBUG_RUNTIME_STATE_DISABLED = 0
DEBUG_RUNTIME_STATE_ENABLED = 1
DEBUG_RUNTIME_STATE_ENABLED_BUSY = 2
DEBUG_RUNTIME_STATE_ENABLED_ERROR = 3
KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK = 1
KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK = 2
KFD_DBG_QUEUE_ERROR_BIT = 30
KFD_DBG_QUEUE_INVALID_BIT = 31
KFD_DBG_QUEUE_ERROR_MASK = 1 << KFD_DBG_QUEUE_ERROR_BIT
KFD_DBG_QUEUE_INVALID_MASK = 1 << KFD_DBG_QUEUE_INVALID_BIT
KFD_IOC_DBG_TRAP_ENABLE = 0
KFD_IOC_DBG_TRAP_DISABLE = 1
KFD_IOC_DBG_TRAP_SEND_RUNTIME_EVENT = 2
KFD_IOC_DBG_TRAP_SET_EXCEPTIONS_ENABLED = 3
KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_OVERRIDE = 4
KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_MODE = 5
KFD_IOC_DBG_TRAP_SUSPEND_QUEUES = 6
KFD_IOC_DBG_TRAP_RESUME_QUEUES = 7
KFD_IOC_DBG_TRAP_SET_NODE_ADDRESS_WATCH = 8
KFD_IOC_DBG_TRAP_CLEAR_NODE_ADDRESS_WATCH = 9
KFD_IOC_DBG_TRAP_SET_FLAGS = 10
KFD_IOC_DBG_TRAP_QUERY_DEBUG_EVENT = 11
KFD_IOC_DBG_TRAP_QUERY_EXCEPTION_INFO = 12
KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT = 13
KFD_IOC_DBG_TRAP_GET_DEVICE_SNAPSHOT = 14


class kfd_runtime_info(KfdArgs):
    _fields_ = [("r_debug", u64), ("runtime_state", u32), ("ttmp_setup", u32)]


class kfd_ioctl_runtime_enable_args(KfdArgs):
    _fields_ = [("r_debug", u64), ("mode_mask", u32), ("capabilities_mask", u32)]


class kfd_queue_snapshot_entry(KfdArgs):
    _fields_ = [("exception_status", u64), ("ring_base_address", u64),
                ("write_pointer_address", u64), ("read_pointer_address", u64),
                ("ctx_save_restore_address", u64), ("queue_id", u32), ("gpu_id", u32),
                ("ring_size", u32), ("queue_type", u32), ("ctx_save_restore_area_size", u32),
                ("reserved", u32)]


class _wave_state(KfdArgs):
    _fields_ = [("control_stack_offset", u32), ("control_stack_size", u32),
                ("wave_state_offset", u32), ("wave_state_size", u32)]


class kfd_context_save_area_header(KfdArgs):
    _fields_ = [("wave_state", _wave_state), ("debug_offset", u32), ("debug_size", u32),
                ("err_payload_addr", u64), ("err_event_id", u32), ("reserved1", u32)]


class kfd_ioctl_dbg_trap_enable_args(KfdArgs):
    _fields_ = [("exception_mask", u64), ("rinfo_ptr", u64), ("rinfo_size", u32),
                ("dbg_fd", u32)]


class kfd_ioctl_dbg_trap_send_runtime_event_args(KfdArgs):
    _fields_ = [("exception_mask", u64), ("gpu_id", u32), ("queue_id", u32)]


class kfd_ioctl_dbg_trap_set_exceptions_enabled_args(KfdArgs):
    _fields_ = [("exception_mask", u64)]


class kfd_ioctl_dbg_trap_set_wave_launch_override_args(KfdArgs):
    _fields_ = [("override_mode", u32), ("enable_mask", u32), ("support_request_mask", u32),
                ("pad", u32)]


class kfd_ioctl_dbg_trap_set_wave_launch_mode_args(KfdArgs):
    _fields_ = [("launch_mode", u32), ("pad", u32)]


class kfd_ioctl_dbg_trap_suspend_queues_args(KfdArgs):
    _fields_ = [("exception_mask", u64), ("queue_array_ptr", u64), ("num_queues", u32),
                ("grace_period", u32)]


class kfd_ioctl_dbg_trap_resume_queues_args(KfdArgs):
    _fields_ = [("queue_array_ptr", u64), ("num_queues", u32), ("pad", u32)]


class kfd_ioctl_dbg_trap_set_node_address_watch_args(KfdArgs):
    _fields_ = [("address", u64), ("mode", u32), ("mask", u32), ("gpu_id", u32), ("id", u32)]


class kfd_ioctl_dbg_trap_clear_node_address_watch_args(KfdArgs):
    _fields_ = [("gpu_id", u32), ("id", u32)]


class kfd_ioctl_dbg_trap_set_flags_args(KfdArgs):
    _fields_ = [("flags", u32), ("pad", u32)]


class kfd_ioctl_dbg_trap_query_debug_event_args(KfdArgs):
    _fields_ = [("exception_mask", u64), ("gpu_id", u32), ("queue_id", u32)]


class kfd_ioctl_dbg_trap_query_exception_info_args(KfdArgs):
    _fields_ = [("info_ptr", u64), ("info_size", u32), ("source_id", u32),
                ("exception_code", u32), ("clear_exception", u32)]


class kfd_ioctl_dbg_trap_queue_snapshot_args(KfdArgs):
    _fields_ = [("exception_mask", u64), ("snapshot_buf_ptr", u64), ("num_queues", u32),
                ("entry_size", u32)]


class kfd_ioctl_dbg_trap_device_snapshot_args(KfdArgs):
    _fields_ = [("exception_mask", u64), ("snapshot_buf_ptr", u64), ("num_devices", u32),
                ("entry_size", u32)]


class _dbg_trap_op_args(ctypes.Union):
    _fields_ = [
        ("enable", kfd_ioctl_dbg_trap_enable_args),
        ("send_runtime_event", kfd_ioctl_dbg_trap_send_runtime_event_args),
        ("set_exceptions_enabled", kfd_ioctl_dbg_trap_set_exceptions_enabled_args),
        ("launch_override", kfd_ioctl_dbg_trap_set_wave_launch_override_args),
        ("launch_mode", kfd_ioctl_dbg_trap_set_wave_launch_mode_args),
        ("suspend_queues", kfd_ioctl_dbg_trap_suspend_queues_args),
        ("resume_queues", kfd_ioctl_dbg_trap_resume_queues_args),
        ("set_node_address_watch", kfd_ioctl_dbg_trap_set_node_address_watch_args),
        ("clear_node_address_watch", kfd_ioctl_dbg_trap_clear_node_address_watch_args),
        ("set_flags", kfd_ioctl_dbg_trap_set_flags_args),
        ("query_debug_event", kfd_ioctl_dbg_trap_query_debug_event_args),
        ("query_exception_info", kfd_ioctl_dbg_trap_query_exception_info_args),
        ("queue_snapshot", kfd_ioctl_dbg_trap_queue_snapshot_args),
        ("device_snapshot", kfd_ioctl_dbg_trap_device_snapshot_args),
    ]


class kfd_ioctl_dbg_trap_args(KfdArgs):
    _anonymous_ = ("_op",)
    _fields_ = [("pid", u32), ("op", u32), ("_op", _dbg_trap_op_args)]


# --- profiler control (KFD 1.23) -------------------------------------------------------------
KFD_IOC_PROFILER_VERSION_NUM = 1
KFD_IOC_PROFILER_PMC = 0
KFD_IOC_PROFILER_VERSION = 2
KFD_IOC_PROFILER_PTL_CONTROL = 3


class kfd_ioctl_pmc_settings(KfdArgs):
    _fields_ = [("gpu_id", u32), ("lock", u32), ("perfcount_enable", u32)]


class kfd_ioctl_ptl_control(KfdArgs):
    _fields_ = [("gpu_id", u32), ("enable", u32)]


class _profiler_op_args(ctypes.Union):
    _fields_ = [("pmc", kfd_ioctl_pmc_settings), ("ptl", kfd_ioctl_ptl_control),
                ("version", u32)]


class kfd_ioctl_profiler_args(KfdArgs):
    _anonymous_ = ("_op",)
    _fields_ = [("op", u32), ("_op", _profiler_op_args)]


class kfd_ioctl_create_process_args(KfdArgs):
    """AMDKFD_IOC_CREATE_PROCESS (KFD 1.19) takes no argument (_IO): an empty struct."""


# --- mmap offsets (kfd_priv.h, not UAPI: the kernel's own encoding of the offsets it hands out
# in create_queue's doorbell_offset, create_event's event_page_offset and alloc's
# mmap_offset; libhsakmt only passes them back to mmap on /dev/kfd) ----------------------------
KFD_MMAP_TYPE_SHIFT = 62
KFD_MMAP_TYPE_MASK = 0x3 << KFD_MMAP_TYPE_SHIFT
KFD_MMAP_TYPE_DOORBELL = 0x3 << KFD_MMAP_TYPE_SHIFT
KFD_MMAP_TYPE_EVENTS = 0x2 << KFD_MMAP_TYPE_SHIFT
KFD_MMAP_TYPE_RESERVED_MEM = 0x1 << KFD_MMAP_TYPE_SHIFT
KFD_MMAP_TYPE_MMIO = 0x0 << KFD_MMAP_TYPE_SHIFT
KFD_MMAP_GPU_ID_SHIFT = 46
KFD_MMAP_GPU_ID_MASK = ((1 << 16) - 1) << KFD_MMAP_GPU_ID_SHIFT


def KFD_MMAP_GPU_ID(gpu_id: int) -> int:
    return (gpu_id << KFD_MMAP_GPU_ID_SHIFT) & KFD_MMAP_GPU_ID_MASK


def KFD_MMAP_GET_GPU_ID(offset: int) -> int:
    return (offset & KFD_MMAP_GPU_ID_MASK) >> KFD_MMAP_GPU_ID_SHIFT


# --- request numbers --------------------------------------------------------------------------
AMDKFD_IOCTL_BASE = ord("K")


_R, _W, _WR = _IOR, _IOW, _IOWR


def _IO(kind: int, nr: int, struct: type) -> int:
    return _IOC(_IOC_NONE, kind, nr, 0)

_STRUCTS: dict[int, type] = {}  # request -> struct, named below


def _ioctl(macro: Callable[[int, int, type], int], nr: int, struct: type) -> int:
    request = macro(AMDKFD_IOCTL_BASE, nr, struct)
    _STRUCTS[request] = struct
    return request


AMDKFD_IOC_GET_VERSION = _ioctl(_R, 0x01, kfd_ioctl_get_version_args)
AMDKFD_IOC_CREATE_QUEUE = _ioctl(_WR, 0x02, kfd_ioctl_create_queue_args)
AMDKFD_IOC_DESTROY_QUEUE = _ioctl(_WR, 0x03, kfd_ioctl_destroy_queue_args)
AMDKFD_IOC_SET_MEMORY_POLICY = _ioctl(_W, 0x04, kfd_ioctl_set_memory_policy_args)
AMDKFD_IOC_GET_CLOCK_COUNTERS = _ioctl(_WR, 0x05, kfd_ioctl_get_clock_counters_args)
AMDKFD_IOC_GET_PROCESS_APERTURES = _ioctl(_R, 0x06, kfd_ioctl_get_process_apertures_args)
AMDKFD_IOC_UPDATE_QUEUE = _ioctl(_W, 0x07, kfd_ioctl_update_queue_args)
AMDKFD_IOC_CREATE_EVENT = _ioctl(_WR, 0x08, kfd_ioctl_create_event_args)
AMDKFD_IOC_DESTROY_EVENT = _ioctl(_W, 0x09, kfd_ioctl_destroy_event_args)
AMDKFD_IOC_SET_EVENT = _ioctl(_W, 0x0A, kfd_ioctl_set_event_args)
AMDKFD_IOC_RESET_EVENT = _ioctl(_W, 0x0B, kfd_ioctl_reset_event_args)
AMDKFD_IOC_WAIT_EVENTS = _ioctl(_WR, 0x0C, kfd_ioctl_wait_events_args)
AMDKFD_IOC_DBG_REGISTER_DEPRECATED = _ioctl(_W, 0x0D, kfd_ioctl_dbg_register_args)
AMDKFD_IOC_DBG_UNREGISTER_DEPRECATED = _ioctl(_W, 0x0E, kfd_ioctl_dbg_unregister_args)
AMDKFD_IOC_DBG_ADDRESS_WATCH_DEPRECATED = _ioctl(_W, 0x0F, kfd_ioctl_dbg_address_watch_args)
AMDKFD_IOC_DBG_WAVE_CONTROL_DEPRECATED = _ioctl(_W, 0x10, kfd_ioctl_dbg_wave_control_args)
AMDKFD_IOC_SET_SCRATCH_BACKING_VA = _ioctl(_WR, 0x11, kfd_ioctl_set_scratch_backing_va_args)
AMDKFD_IOC_GET_TILE_CONFIG = _ioctl(_WR, 0x12, kfd_ioctl_get_tile_config_args)
AMDKFD_IOC_SET_TRAP_HANDLER = _ioctl(_W, 0x13, kfd_ioctl_set_trap_handler_args)
AMDKFD_IOC_GET_PROCESS_APERTURES_NEW = _ioctl(_WR, 0x14, kfd_ioctl_get_process_apertures_new_args)
AMDKFD_IOC_ACQUIRE_VM = _ioctl(_W, 0x15, kfd_ioctl_acquire_vm_args)
AMDKFD_IOC_ALLOC_MEMORY_OF_GPU = _ioctl(_WR, 0x16, kfd_ioctl_alloc_memory_of_gpu_args)
AMDKFD_IOC_FREE_MEMORY_OF_GPU = _ioctl(_W, 0x17, kfd_ioctl_free_memory_of_gpu_args)
AMDKFD_IOC_MAP_MEMORY_TO_GPU = _ioctl(_WR, 0x18, kfd_ioctl_map_memory_to_gpu_args)
AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU = _ioctl(_WR, 0x19, kfd_ioctl_unmap_memory_from_gpu_args)
AMDKFD_IOC_SET_CU_MASK = _ioctl(_W, 0x1A, kfd_ioctl_set_cu_mask_args)
AMDKFD_IOC_GET_QUEUE_WAVE_STATE = _ioctl(_WR, 0x1B, kfd_ioctl_get_queue_wave_state_args)
AMDKFD_IOC_GET_DMABUF_INFO = _ioctl(_WR, 0x1C, kfd_ioctl_get_dmabuf_info_args)
AMDKFD_IOC_IMPORT_DMABUF = _ioctl(_WR, 0x1D, kfd_ioctl_import_dmabuf_args)
AMDKFD_IOC_ALLOC_QUEUE_GWS = _ioctl(_WR, 0x1E, kfd_ioctl_alloc_queue_gws_args)
AMDKFD_IOC_SMI_EVENTS = _ioctl(_WR, 0x1F, kfd_ioctl_smi_events_args)
AMDKFD_IOC_SVM = _ioctl(_WR, 0x20, kfd_ioctl_svm_args)
AMDKFD_IOC_SET_XNACK_MODE = _ioctl(_WR, 0x21, kfd_ioctl_set_xnack_mode_args)
AMDKFD_IOC_CRIU_OP = _ioctl(_WR, 0x22, kfd_ioctl_criu_args)
AMDKFD_IOC_AVAILABLE_MEMORY = _ioctl(_WR, 0x23, kfd_ioctl_get_available_memory_args)
AMDKFD_IOC_EXPORT_DMABUF = _ioctl(_WR, 0x24, kfd_ioctl_export_dmabuf_args)
AMDKFD_IOC_RUNTIME_ENABLE = _ioctl(_WR, 0x25, kfd_ioctl_runtime_enable_args)
AMDKFD_IOC_DBG_TRAP = _ioctl(_WR, 0x26, kfd_ioctl_dbg_trap_args)
AMDKFD_IOC_CREATE_PROCESS = _ioctl(_IO, 0x27, kfd_ioctl_create_process_args)
AMDKFD_IOC_PROFILER = _ioctl(_WR, 0x28, kfd_ioctl_profiler_args)
AMDKFD_COMMAND_START = 0x01
AMDKFD_COMMAND_END = 0x29
# ROCm's DKMS driver only (its header's "non-upstream ioctls"); upstream kernels answer EINVAL
AMDKFD_IOC_IPC_IMPORT_HANDLE = _ioctl(_WR, 0x80, kfd_ioctl_ipc_import_handle_args)
AMDKFD_IOC_IPC_EXPORT_HANDLE = _ioctl(_WR, 0x81, kfd_ioctl_ipc_export_handle_args)
AMDKFD_IOC_DBG_TRAP_DEPRECATED = _ioctl(_WR, 0x82, kfd_ioctl_dbg_trap_args_deprecated)
AMDKFD_IOC_CROSS_MEMORY_COPY_DEPRECATED = _ioctl(
    _WR, 0x83, kfd_ioctl_cross_memory_copy_deprecated_args)
AMDKFD_IOC_RLC_SPM = _ioctl(_WR, 0x84, kfd_ioctl_spm_args)
AMDKFD_IOC_PC_SAMPLE = _ioctl(_WR, 0x85, kfd_ioctl_pc_sample_args)
AMDKFD_COMMAND_START_2 = 0x80
AMDKFD_COMMAND_END_2 = 0x86

#: request number -> (name, argument struct), every ioctl above
IOCTLS: dict[int, tuple[str, type]] = {
    value: (name, _STRUCTS[value]) for name, value in list(globals().items())
    if name.startswith("AMDKFD_IOC_")
}
#: the request's nr -> (name, argument struct): how the kernel looks a request up
IOCTLS_BY_NR: dict[int, tuple[str, type]] = {ioc_nr(k): v for k, v in IOCTLS.items()}


class Request(NamedTuple):
    """A decoded /dev/kfd request: what the kernel's dispatch table says, and how many bytes
    the caller's struct has (its header's size, which may be older and shorter)."""

    name: str
    struct: type[KfdArgs]
    user_size: int


def decode(request: int) -> Request | None:
    """The ioctl a request number means, looked up by nr as kfd_ioctl() does; None for a
    number no kernel knows (answer EINVAL)."""
    if ioc_type(request) != AMDKFD_IOCTL_BASE:
        return None
    found = IOCTLS_BY_NR.get(ioc_nr(request))
    if found is None:
        return None
    return Request(found[0], found[1], ioc_size(request))
