"""The DRM render node's answers (/dev/dri/renderD<minor>) for an emulated GPU: what the amdgpu
kernel driver replies to the queries libdrm_amdgpu makes when ROCr (through libhsakmt) opens
a GPU.

What is asked (libdrm's amdgpu_device_initialize and amdgpu_query_gpu_info_init, called by
libhsakmt's topology.c and fmm.c, and by ROCr's GpuAgent for gpu_counter_freq):
DRM_IOCTL_VERSION (twice: lengths, then strings; libdrm_amdgpu wants major 3),
DRM_IOCTL_AMDGPU_INFO with ACCEL_WORKING, DEV_INFO, and READ_MMR_REG of GB_ADDR_CONFIG
(0x263e, the only register read for gfx9 and later). Also answered, for tools such as
rocm-smi and amdgpu_top, and asked by ROCr 6.4 (HW_IP_INFO of GFX, seen with sid's rocminfo):
HW_IP_COUNT, HW_IP_INFO, FW_VERSION, VRAM_GTT, MEMORY and the
usage counters. Anything else fails with EINVAL, as the kernel's amdgpu_info_ioctl does.

The layouts are ctypes structs named as in libdrm's amdgpu_drm.h / drm.h (newest fields
included); tests/test_emulated_drm.py checks them byte for byte against Debian 12's
libdrm-dev headers and, once the ROCm 6 root filesystem exists, sid's.

The interface for the device server: `answer(request, arg, node)` is the ioctl argument as
the kernel leaves it (what is copied back to the caller's struct), `pointer_writes(request,
arg, node)` the (address, bytes) the kernel stores through pointers inside it (INFO's
return_pointer, VERSION's name/date/desc buffers). Both raise OSError(errno) for a request
the kernel refuses; the server returns -errno.
"""

from __future__ import annotations

import ctypes
import errno
from ctypes import c_char_p, c_int, c_size_t
from ctypes import c_uint32 as u32
from ctypes import c_uint64 as u64

from hsa.emulated import abi
from hsa.emulated.sysfs import FW_VERSION, SDMA_FW_VERSION, NodeInfo, total_ram

__all__ = ["answer", "pointer_writes", "DRM_IOCTL_VERSION", "DRM_IOCTL_AMDGPU_INFO"]

# The driver's identity (amdgpu_drv.c): KMS 3.x; libdrm_amdgpu refuses anything else.
DRIVER_NAME, DRIVER_DATE, DRIVER_DESC = b"amdgpu", b"20150101", b"AMD GPU"
KMS_VERSION = (3, 61, 0)
GPU_COUNTER_KHZ = 100_000  # the 100 MHz reference clock: ROCr's wallclock frequency
GB_ADDR_CONFIG = 0x263E  # mmGB_ADDR_CONFIG (its value: GpuModel.gb_addr_config)
# VA layout the kernel reports (amdgpu_kms.c, amdgpu_vm.h): 2 MiB reserved at the bottom,
# the low half below the GMC hole, the high half above it.
VA_RESERVED_BOTTOM = 1 << 21
GMC_HOLE_START = 0x0000_8000_0000_0000
GMC_HOLE_END = 0xFFFF_8000_0000_0000


class drm_version(ctypes.Structure):
    _fields_ = [("version_major", c_int), ("version_minor", c_int),
                ("version_patchlevel", c_int), ("name_len", c_size_t), ("name", c_char_p),
                ("date_len", c_size_t), ("date", c_char_p), ("desc_len", c_size_t),
                ("desc", c_char_p)]


class _mode_crtc(ctypes.Structure):
    _fields_ = [("id", u32), ("_pad", u32)]


class _query_hw_ip(ctypes.Structure):
    _fields_ = [("type", u32), ("ip_instance", u32)]


class _read_mmr_reg(ctypes.Structure):
    _fields_ = [("dword_offset", u32), ("count", u32), ("instance", u32), ("flags", u32)]


class drm_amdgpu_query_fw(ctypes.Structure):
    _fields_ = [("fw_type", u32), ("ip_instance", u32), ("index", u32), ("_pad", u32)]


class _vbios_info(ctypes.Structure):
    _fields_ = [("type", u32), ("offset", u32)]


class _type_only(ctypes.Structure):
    _fields_ = [("type", u32)]


class _info_query(ctypes.Union):
    _fields_ = [("mode_crtc", _mode_crtc), ("query_hw_ip", _query_hw_ip),
                ("read_mmr_reg", _read_mmr_reg), ("query_fw", drm_amdgpu_query_fw),
                ("vbios_info", _vbios_info), ("sensor_info", _type_only),
                ("video_cap", _type_only)]


class drm_amdgpu_info(ctypes.Structure):
    _anonymous_ = ("_query",)
    _fields_ = [("return_pointer", u64), ("return_size", u32), ("query", u32),
                ("_query", _info_query)]


class drm_amdgpu_info_device(ctypes.Structure):
    _fields_ = [
        ("device_id", u32), ("chip_rev", u32), ("external_rev", u32), ("pci_rev", u32),
        ("family", u32), ("num_shader_engines", u32), ("num_shader_arrays_per_engine", u32),
        ("gpu_counter_freq", u32), ("max_engine_clock", u64), ("max_memory_clock", u64),
        ("cu_active_number", u32), ("cu_ao_mask", u32), ("cu_bitmap", (u32 * 4) * 4),
        ("enabled_rb_pipes_mask", u32), ("num_rb_pipes", u32), ("num_hw_gfx_contexts", u32),
        ("pcie_gen", u32),  # "_pad" in older headers
        ("ids_flags", u64), ("virtual_address_offset", u64), ("virtual_address_max", u64),
        ("virtual_address_alignment", u32), ("pte_fragment_size", u32),
        ("gart_page_size", u32), ("ce_ram_size", u32), ("vram_type", u32),
        ("vram_bit_width", u32), ("vce_harvest_config", u32),
        ("gc_double_offchip_lds_buf", u32), ("prim_buf_gpu_addr", u64),
        ("pos_buf_gpu_addr", u64), ("cntl_sb_buf_gpu_addr", u64), ("param_buf_gpu_addr", u64),
        ("prim_buf_size", u32), ("pos_buf_size", u32), ("cntl_sb_buf_size", u32),
        ("param_buf_size", u32), ("wave_front_size", u32), ("num_shader_visible_vgprs", u32),
        ("num_cu_per_sh", u32), ("num_tcc_blocks", u32), ("gs_vgt_table_depth", u32),
        ("gs_prim_buffer_depth", u32), ("max_gs_waves_per_vgt", u32),
        ("pcie_num_lanes", u32),  # "_pad1" in older headers
        ("cu_ao_bitmap", (u32 * 4) * 4), ("high_va_offset", u64), ("high_va_max", u64),
        ("pa_sc_tile_steering_override", u32), ("tcc_disabled_mask", u64),
        ("min_engine_clock", u64), ("min_memory_clock", u64),
        ("tcp_cache_size", u32), ("num_sqc_per_wgp", u32), ("sqc_data_cache_size", u32),
        ("sqc_inst_cache_size", u32), ("gl1c_cache_size", u32), ("gl2c_cache_size", u32),
        ("mall_size", u64), ("enabled_rb_pipes_mask_hi", u32), ("shadow_size", u32),
        ("shadow_alignment", u32), ("csa_size", u32), ("csa_alignment", u32),
        ("userq_ip_mask", u32), ("pad", u32),
    ]


class drm_amdgpu_info_hw_ip(ctypes.Structure):
    _fields_ = [("hw_ip_version_major", u32), ("hw_ip_version_minor", u32),
                ("capabilities_flags", u64), ("ib_start_alignment", u32),
                ("ib_size_alignment", u32), ("available_rings", u32),
                ("ip_discovery_version", u32)]  # "_pad" in older headers


class drm_amdgpu_info_firmware(ctypes.Structure):
    _fields_ = [("ver", u32), ("feature", u32)]


class drm_amdgpu_info_vram_gtt(ctypes.Structure):
    _fields_ = [("vram_size", u64), ("vram_cpu_accessible_size", u64), ("gtt_size", u64)]


class drm_amdgpu_heap_info(ctypes.Structure):
    _fields_ = [("total_heap_size", u64), ("usable_heap_size", u64), ("heap_usage", u64),
                ("max_allocation", u64)]


class drm_amdgpu_memory_info(ctypes.Structure):
    _fields_ = [("vram", drm_amdgpu_heap_info), ("cpu_accessible_vram", drm_amdgpu_heap_info),
                ("gtt", drm_amdgpu_heap_info)]


# --- request numbers (drm.h: DRM_IOCTL_BASE 'd', driver commands from DRM_COMMAND_BASE) -------
DRM_IOCTL_BASE = ord("d")
DRM_COMMAND_BASE = 0x40
DRM_AMDGPU_INFO = 0x05
DRM_IOCTL_VERSION = abi._IOWR(DRM_IOCTL_BASE, 0x00, drm_version)
DRM_IOCTL_AMDGPU_INFO = abi._IOW(DRM_IOCTL_BASE, DRM_COMMAND_BASE + DRM_AMDGPU_INFO,
                                 drm_amdgpu_info)

AMDGPU_INFO_ACCEL_WORKING = 0x00
AMDGPU_INFO_HW_IP_INFO = 0x02
AMDGPU_INFO_HW_IP_COUNT = 0x03
AMDGPU_INFO_FW_VERSION = 0x0E
AMDGPU_INFO_FW_GFX_MEC = 0x08
AMDGPU_INFO_FW_SDMA = 0x0B
AMDGPU_INFO_VRAM_USAGE = 0x10
AMDGPU_INFO_GTT_USAGE = 0x11
AMDGPU_INFO_VRAM_GTT = 0x14
AMDGPU_INFO_READ_MMR_REG = 0x15
AMDGPU_INFO_DEV_INFO = 0x16
AMDGPU_INFO_VIS_VRAM_USAGE = 0x17
AMDGPU_INFO_MEMORY = 0x19
AMDGPU_HW_IP_GFX = 0
AMDGPU_HW_IP_COMPUTE = 1
AMDGPU_HW_IP_DMA = 2
HW_IP_TYPES = 10  # AMDGPU_HW_IP_NUM of sid's header (GFX .. VPE); Debian 12's has 9
AMDGPU_VRAM_TYPE_HBM = 6
AMDGPU_VRAM_TYPE_GDDR6 = 9
AMDGPU_FAMILY_AI = 141
AMDGPU_FAMILY_GC_11_0_0 = 145
AMDGPU_FAMILY_GC_12_0_0 = 152

# the SDMA IP generation beside each GC major (the kernel's IP discovery tables): SDMA 4.4 on
# gfx9.4, 6.0 on gfx11, 7.0 on gfx12
_SDMA_VERSION = {9: (4, 4), 11: (6, 0), 12: (7, 0)}
_COMPUTE_RINGS = 8


def _refuse(why: str) -> OSError:
    return OSError(errno.EINVAL, why)


def _dev_info(node: NodeInfo) -> drm_amdgpu_info_device:
    m = node.model
    info = drm_amdgpu_info_device()
    info.device_id, info.pci_rev, info.external_rev = m.device_id, m.revision_id, 0
    info.family = m.family_id
    info.num_shader_engines = m.shader_engines
    info.num_shader_arrays_per_engine = m.arrays_per_engine
    info.gpu_counter_freq = GPU_COUNTER_KHZ
    info.max_engine_clock = m.max_engine_clock_mhz * 1000  # kHz
    info.max_memory_clock = m.memory_clock_mhz * 1000
    info.min_engine_clock, info.min_memory_clock = 500_000, 100_000
    info.cu_active_number = m.compute_units
    # the active CUs, array by array, in the 4x4 table's 16 slots (parts with more arrays,
    # MI300X's 32, fold into them as the kernel's table does)
    left = m.compute_units
    for slot in range(16):
        take = min(m.cu_per_array, left)
        info.cu_bitmap[slot // 4][slot % 4] |= (1 << take) - 1
        left -= take
    info.num_hw_gfx_contexts = 8
    info.pcie_gen, info.pcie_num_lanes = 4, 16
    info.virtual_address_offset = VA_RESERVED_BOTTOM
    info.virtual_address_max = GMC_HOLE_START - VA_RESERVED_BOTTOM
    info.virtual_address_alignment = 4096
    info.pte_fragment_size = 2 << 20
    info.gart_page_size = 4096
    info.vram_type = AMDGPU_VRAM_TYPE_HBM if m.xgmi else AMDGPU_VRAM_TYPE_GDDR6
    info.vram_bit_width = m.memory_width_bits
    info.wave_front_size = m.wave_size
    info.num_shader_visible_vgprs = 256 if m.wave_size == 64 else 1536
    info.num_cu_per_sh = m.cu_per_array
    info.num_tcc_blocks = m.l2_kib // 256
    info.high_va_offset = GMC_HOLE_END
    info.high_va_max = GMC_HOLE_END | (GMC_HOLE_START - VA_RESERVED_BOTTOM)
    if m.family_id >= AMDGPU_FAMILY_GC_11_0_0:  # "only set on gfx11+"
        info.tcp_cache_size = m.l1_kib
        info.gl2c_cache_size = m.l2_kib
        info.mall_size = m.l3_kib * 1024
    return info


def _hw_ip(node: NodeInfo, ip_type: int) -> drm_amdgpu_info_hw_ip:
    """As amdgpu_hw_ip_info: a type the kernel knows but the GPU lacks (GFX on the Instinct
    parts, the video engines everywhere here) is all zeros, no rings, not an error."""
    if not 0 <= ip_type < HW_IP_TYPES:
        raise _refuse(f"hardware IP type {ip_type} does not exist")
    m = node.model
    gc_major, gc_minor, _ = m.gfx_version
    out = drm_amdgpu_info_hw_ip()
    if ip_type == AMDGPU_HW_IP_GFX and not m.xgmi:  # the Radeon parts draw; MI parts cannot
        out.hw_ip_version_major, out.hw_ip_version_minor = gc_major, gc_minor
        out.ib_start_alignment = out.ib_size_alignment = 32
        out.available_rings = 1
    elif ip_type == AMDGPU_HW_IP_COMPUTE:
        out.hw_ip_version_major, out.hw_ip_version_minor = gc_major, gc_minor
        out.ib_start_alignment = out.ib_size_alignment = 32
        out.available_rings = (1 << _COMPUTE_RINGS) - 1
    elif ip_type == AMDGPU_HW_IP_DMA:
        out.hw_ip_version_major, out.hw_ip_version_minor = _SDMA_VERSION[gc_major]
        out.ib_start_alignment, out.ib_size_alignment = 256, 4
        out.available_rings = (1 << m.sdma_engines + m.sdma_xgmi_engines) - 1
    if out.available_rings:
        out.ip_discovery_version = ((out.hw_ip_version_major << 16)
                                    | (out.hw_ip_version_minor << 8))
    return out


def _heap(size: int) -> drm_amdgpu_heap_info:
    return drm_amdgpu_heap_info(size, size, 0, size * 3 // 4)


def _info_reply(info: drm_amdgpu_info, node: NodeInfo) -> bytes:
    """The bytes the kernel writes to return_pointer (before cutting to return_size)."""
    m, q = node.model, info.query
    if q == AMDGPU_INFO_ACCEL_WORKING:
        return bytes(u32(1))
    if q == AMDGPU_INFO_DEV_INFO:
        return bytes(_dev_info(node))
    if q == AMDGPU_INFO_READ_MMR_REG:
        reg = info.read_mmr_reg
        if reg.dword_offset != GB_ADDR_CONFIG or reg.count != 1:
            raise _refuse(f"register 0x{reg.dword_offset:x} (x{reg.count}) is not readable")
        return bytes(u32(m.gb_addr_config))
    if q == AMDGPU_INFO_HW_IP_COUNT:
        return bytes(u32(1 if _hw_ip(node, info.query_hw_ip.type).available_rings else 0))
    if q == AMDGPU_INFO_HW_IP_INFO:
        if info.query_hw_ip.ip_instance != 0:
            raise _refuse("one instance per hardware IP")
        return bytes(_hw_ip(node, info.query_hw_ip.type))
    if q == AMDGPU_INFO_FW_VERSION:
        fw = {AMDGPU_INFO_FW_GFX_MEC: FW_VERSION, AMDGPU_INFO_FW_SDMA: SDMA_FW_VERSION}
        if info.query_fw.fw_type not in fw:
            raise _refuse(f"no firmware of type {info.query_fw.fw_type}")
        return bytes(drm_amdgpu_info_firmware(fw[info.query_fw.fw_type], 0))
    if q == AMDGPU_INFO_VRAM_GTT:
        return bytes(drm_amdgpu_info_vram_gtt(m.vram_bytes, m.vram_bytes, total_ram()))
    if q == AMDGPU_INFO_MEMORY:
        return bytes(drm_amdgpu_memory_info(_heap(m.vram_bytes), _heap(m.vram_bytes),
                                            _heap(total_ram())))
    if q in (AMDGPU_INFO_VRAM_USAGE, AMDGPU_INFO_VIS_VRAM_USAGE, AMDGPU_INFO_GTT_USAGE):
        return bytes(u64(0))
    raise _refuse(f"AMDGPU_INFO query 0x{q:x} is not answered")


def _version_fields() -> tuple[tuple[str, bytes], ...]:
    return (("name", DRIVER_NAME), ("date", DRIVER_DATE), ("desc", DRIVER_DESC))


def answer(request: int, arg: bytes, node: NodeInfo) -> bytes:
    """The ioctl argument after the kernel ran `request` on this GPU's render node."""
    if request == DRM_IOCTL_VERSION:
        version = drm_version.from_buffer_copy(bytes(arg).ljust(ctypes.sizeof(drm_version),
                                                                b"\0"))
        version.version_major, version.version_minor, version.version_patchlevel = KMS_VERSION
        for field, value in _version_fields():  # the full length, whatever was copied
            setattr(version, f"{field}_len", len(value))
        return bytes(version)
    if request == DRM_IOCTL_AMDGPU_INFO:
        pointer_writes(request, arg, node)  # the same refusals
        return bytes(arg)
    raise OSError(errno.ENOTTY, f"render node request 0x{request:08x} is not emulated")


def pointer_writes(request: int, arg: bytes, node: NodeInfo) -> list[tuple[int, bytes]]:
    """(address, bytes) the kernel stores through the pointers inside the argument."""
    if request == DRM_IOCTL_VERSION:
        raw = bytes(arg).ljust(ctypes.sizeof(drm_version), b"\0")
        lengths = drm_version.from_buffer_copy(raw)
        out = []
        for field, value in _version_fields():
            size = getattr(lengths, f"{field}_len")
            address = int.from_bytes(raw[getattr(drm_version, field).offset:][:8], "little")
            if address and size:
                out.append((address, value[:size]))
        return out
    if request == DRM_IOCTL_AMDGPU_INFO:
        info = drm_amdgpu_info.from_buffer_copy(bytes(arg).ljust(ctypes.sizeof(
            drm_amdgpu_info), b"\0"))
        if not info.return_pointer or not info.return_size:
            raise _refuse("AMDGPU_INFO needs return_pointer and return_size")
        return [(info.return_pointer, _info_reply(info, node)[:info.return_size])]
    raise OSError(errno.ENOTTY, f"render node request 0x{request:08x} is not emulated")
