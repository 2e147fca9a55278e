"""The files the amdgpu kernel driver exposes, written under a root directory for the
emulated kernel's shim to serve in place of /sys and /proc.

What is written, and who reads it:
- sys/devices/virtual/kfd/kfd/topology (and sys/class/kfd/kfd, a link to it, as on a real
  system): generation_id, system_properties and nodes/N/{gpu_id,name,properties,
  mem_banks/M/properties,caches/C/properties,io_links/L/properties}, in the exact text of
  the kernel's kfd_topology.c ("name value" lines, "%u"/"%llu"). libhsakmt's topology.c
  (Debian 12's 5.2.3, ROCr 6.4's copy inside libhsa-runtime64) parses them with
  sscanf("%s %llu"); every key either parser looks for is present. Node 0 is the CPU; GPU
  nodes 1..N. A GPU links to the CPU over PCIe; GPUs of one XGMI hive (hsa/virtual/
  topology.py decides which) link to each other over XGMI. No p2p_links: libhsakmt then
  routes other GPU pairs through the CPU, as hsa/virtual does.
- sys/module/amdgpu/initstate ("live"), which rocminfo checks; proc/modules, the host's plus
  an amdgpu line;
- sys/class/drm/{renderD<minor>,card<n>} linked into a PCI device directory as the kernel
  lays it out (dev, device/{vendor,device,revision,subsystem_*,class,uevent,...}), for
  libdrm's drmGetDevice and rocm-smi; sys/dev/char/226:<minor> links to them.
- the PCI device's ip_discovery/die/0/<hw_id>/0/{major,minor,revision,hw_id,harvest} for the
  GC, SDMA0 and NBIF blocks (amdgpu_discovery.c's sysfs tree; hw ids from soc15_hw_ip.h):
  tinygrad's KFD interface picks its register and packet tables by these versions.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from dataclasses import dataclass

from hsa.emulated.models import MAX_GPUS, GpuModel
from hsa.provider import LinkInfo, LinkType
from hsa.virtual import topology

__all__ = ["NodeInfo", "write_topology", "TOPOLOGY", "HSA_CAP"]

TOPOLOGY = "sys/devices/virtual/kfd/kfd/topology"
DRM_MAJOR = 226
RENDER_MINOR_BASE = 128

# HSA_CAPABILITY bits (libhsakmt's hsakmttypes.h; the kernel's kfd_topology.h HSA_CAP_*)
HSA_CAP = {
    "QueueSizePowerOfTwo": 1 << 3,
    "QueueSize32bit": 1 << 4,
    "DoorbellType_2_0": 2 << 12,  # DoorbellType (bits 12-13) = 2: gfx9+'s 64-bit doorbells
    "SRAM_EDCSupport": 1 << 26,
}
# KFD's io link types (kfd_crat.h CRAT_IOLINK_TYPE_*) and flags
_IOLINK_TYPE = {LinkType.PCIE: 2, LinkType.XGMI: 11}
_IOLINK_ENABLED = 1 << 0
_IOLINK_NO_ATOMICS_32 = 1 << 2
_IOLINK_NO_ATOMICS_64 = 1 << 3
# Memory heap types and cache type flags (kfd_topology.h)
_HEAP_SYSTEM = 0
_HEAP_FB_PUBLIC = 1
_CACHE_DATA = 1
_CACHE_HSACU = 8
_SIBLING_MAP_BYTES = 32  # CRAT_SIBLINGMAP_SIZE
# Scalar facts the same on every emulated GPU, as the kernel reports them
_MAX_SLOTS_SCRATCH_CU = 32
_NUM_SDMA_QUEUES_PER_ENGINE = 8
_NUM_CP_QUEUES = 24
# global wave sync entries, as a current kernel's kfd_gws_init gives them: gfx9's MEC
# firmware has 64; gfx11 with MES firmware >= 68 and gfx12 report 64 too (GWS no longer
# exists there: the kernel sets the legacy size so runtimes keep offering cooperative launch,
# "drm/amdkfd: enable cooperative launch on gfx12", 2025). HIP reports cooperative launch
# only where a node has them.
_NUM_GWS = 64
# MEC firmware version: below 1000 so ROCr 6.4 leaves its gfx94x async scratch reclaim off
FW_VERSION = 150
SDMA_FW_VERSION = 20
_SIMD_ID_BASE = 0x80000000  # KFD numbers GPU SIMDs from here (kfd_topology.c)


@dataclass
class NodeInfo:
    """One GPU node as written: its sysfs node index (the CPU is 0), KFD gpu_id, render
    node minor (/dev/dri/renderD<minor>) and model."""

    index: int
    gpu_id: int
    drm_render_minor: int
    model: GpuModel

    @property
    def ordinal(self) -> int:
        return self.index - 1

    @property
    def pci_slot(self) -> str:
        return f"0000:{_pci_bus(self.ordinal):02x}:00.0"

    @property
    def location_id(self) -> int:
        return _pci_bus(self.ordinal) << 8  # bus << 8 | device << 3 | function

    @property
    def unique_id(self) -> int:
        """KFD's unique_id, which ROCr shows as the agent's UUID ("GPU-" + 16 hex digits),
        the same as hsa/virtual's."""
        return int(topology.gpu_uuid(self.model.target, self.ordinal)[4:], 16)


def _pci_bus(ordinal: int) -> int:
    return 0x10 + 0x10 * ordinal


def _gpu_ids(gpus: list[GpuModel]) -> list[int]:
    """KFD's gpu_id: a 16-bit hash of the device (it must fit KFD_MMAP_GPU_ID's 16 bits),
    nonzero and distinct per node."""
    ids: list[int] = []
    for i, model in enumerate(gpus):
        h = hashlib.blake2b(f"{model.target} {i}".encode(), digest_size=2).digest()
        gpu_id = int.from_bytes(h, "little") or 1
        while gpu_id in ids:
            gpu_id = gpu_id % 0xFFFF + 1
        ids.append(gpu_id)
    return ids


def _hive_ids(gpus: list[GpuModel]) -> list[int]:
    """hive_id per GPU: shared by the GPUs of one XGMI hive (two or more of one MI target),
    0 for a GPU in none."""
    out = []
    for model in gpus:
        peers = [g for g in gpus if topology.xgmi_peers(g.target, model.target)]
        if len(peers) > 1:
            digest = hashlib.blake2b(f"hive {model.target}".encode(), digest_size=8).digest()
            out.append(int.from_bytes(digest, "little") | 1)
        else:
            out.append(0)
    return out


def _props(pairs: list[tuple[str, int]]) -> str:
    return "".join(f"{k} {int(v)}\n" for k, v in pairs)


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(path: pathlib.Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def _iolink(node_from: int, node_to: int, link: LinkInfo) -> str:
    flags = _IOLINK_ENABLED
    if not link.atomic_32bit:
        flags |= _IOLINK_NO_ATOMICS_32
    if not link.atomic_64bit:
        flags |= _IOLINK_NO_ATOMICS_64
    return _props([
        ("type", _IOLINK_TYPE[link.link_type]), ("version_major", 0), ("version_minor", 0),
        ("node_from", node_from), ("node_to", node_to), ("weight", link.numa_distance),
        ("min_latency", link.min_latency), ("max_latency", link.max_latency),
        ("min_bandwidth", link.min_bandwidth), ("max_bandwidth", link.max_bandwidth),
        ("recommended_transfer_size", 0), ("recommended_sdma_engine_id_mask", 0),
        ("flags", flags),
    ])


def _cache(processor_id: int, level: int, kib: int, line: int, cus: int) -> str:
    bits = ["1" if i < cus else "0" for i in range(_SIBLING_MAP_BYTES * 8)]
    return _props([
        ("processor_id_low", processor_id), ("level", level), ("size", kib),
        ("cache_line_size", line), ("cache_lines_per_tag", 1), ("association", 16),
        ("latency", 0), ("type", _CACHE_DATA | _CACHE_HSACU),
    ]) + "sibling_map " + ",".join(bits) + "\n"  # last: libhsakmt stops reading here


def _gpu_caches(model: GpuModel, simd_base: int) -> list[str]:
    """L1 (for all CUs), L2 (one per XCC) and the Infinity Cache when the part has one."""
    per_xcc = -(-model.compute_units // model.num_xcc)
    out = [_cache(simd_base, 1, model.l1_kib, 64 if model.wave_size == 64 else 128,
                  model.compute_units)]
    out += [_cache(simd_base + x * per_xcc * model.simd_per_cu, 2, model.l2_kib, 128, per_xcc)
            for x in range(model.num_xcc)]
    if model.l3_kib:
        out.append(_cache(simd_base, 3, model.l3_kib, 64, model.compute_units))
    return out


def total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


def _cpu_node(gpus: list[GpuModel]) -> str:
    return _props([
        ("cpu_cores_count", os.cpu_count() or 1), ("simd_count", 0), ("mem_banks_count", 1),
        ("caches_count", 0), ("io_links_count", len(gpus)), ("cpu_core_id_base", 0),
        ("simd_id_base", 0), ("max_waves_per_simd", 0), ("lds_size_in_kb", 0),
        ("gds_size_in_kb", 0), ("num_gws", 0), ("wave_front_size", 0), ("array_count", 0),
        ("simd_arrays_per_engine", 0), ("cu_per_simd_array", 0), ("simd_per_cu", 0),
        ("max_slots_scratch_cu", 0), ("gfx_target_version", 0), ("vendor_id", 0),
        ("device_id", 0), ("location_id", 0), ("domain", 0), ("drm_render_minor", 0),
        ("hive_id", 0), ("num_sdma_engines", 0), ("num_sdma_xgmi_engines", 0),
        ("num_sdma_queues_per_engine", 0), ("num_cp_queues", 0),
        ("max_engine_clk_ccompute", 2000),
    ])


def _gpu_node(node: NodeInfo, simd_base: int, links: int, caches: int, hive: int) -> str:
    m = node.model
    capability = (HSA_CAP["QueueSizePowerOfTwo"] | HSA_CAP["QueueSize32bit"]
                  | HSA_CAP["DoorbellType_2_0"])
    if m.xgmi:  # the MI parts run with SRAM ECC on: ROCr's ISA name says sramecc+
        capability |= HSA_CAP["SRAM_EDCSupport"]
    return _props([
        ("cpu_cores_count", 0), ("simd_count", m.simd_count), ("mem_banks_count", 1),
        ("caches_count", caches), ("io_links_count", links), ("cpu_core_id_base", 0),
        ("simd_id_base", simd_base), ("max_waves_per_simd", m.max_waves_per_simd),
        ("lds_size_in_kb", m.lds_bytes // 1024), ("gds_size_in_kb", 0),
        ("num_gws", _NUM_GWS),
        ("wave_front_size", m.wave_size), ("array_count", m.array_count),
        ("simd_arrays_per_engine", m.arrays_per_engine),
        ("cu_per_simd_array", m.cu_per_array), ("simd_per_cu", m.simd_per_cu),
        ("max_slots_scratch_cu", _MAX_SLOTS_SCRATCH_CU),
        ("gfx_target_version", m.gfx_target_version), ("vendor_id", m.vendor_id),
        ("device_id", m.device_id), ("location_id", node.location_id), ("domain", 0),
        ("drm_render_minor", node.drm_render_minor), ("hive_id", hive),
        ("num_sdma_engines", m.sdma_engines), ("num_sdma_xgmi_engines", m.sdma_xgmi_engines),
        ("num_sdma_queues_per_engine", _NUM_SDMA_QUEUES_PER_ENGINE),
        ("num_cp_queues", _NUM_CP_QUEUES), ("max_engine_clk_fcompute", m.max_engine_clock_mhz),
        ("local_mem_size", 0),  # KFD prints 0: the size is in mem_banks
        ("fw_version", FW_VERSION), ("capability", capability), ("debug_prop", 0),
        ("sdma_fw_version", SDMA_FW_VERSION), ("unique_id", node.unique_id),
        ("num_xcc", m.num_xcc), ("max_engine_clk_ccompute", 2000),
    ])


def _mem_bank(heap: int, size: int, width: int, clock: int) -> str:
    return _props([("heap_type", heap), ("size_in_bytes", size), ("flags", 0),
                   ("width", width), ("mem_clk_max", clock)])


def _write_drm(root: pathlib.Path, node: NodeInfo) -> None:
    m = node.model
    pci = f"sys/devices/pci0000:00/{node.pci_slot}"
    dev = root / pci
    hexid = f"{m.vendor_id:04X}:{m.device_id:04X}"
    files = {
        "vendor": f"0x{m.vendor_id:04x}", "device": f"0x{m.device_id:04x}",
        "revision": f"0x{m.revision_id:02x}", "subsystem_vendor": f"0x{m.vendor_id:04x}",
        "subsystem_device": f"0x{m.device_id:04x}", "class": "0x038000",
        "uevent": f"DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID={hexid}\nPCI_SUBSYS_ID={hexid}\n"
                  f"PCI_SLOT_NAME={node.pci_slot}\nMODALIAS=pci:v{m.vendor_id:08X}"
                  f"d{m.device_id:08X}sv{m.vendor_id:08X}sd{m.device_id:08X}bc03sc80i00",
        "numa_node": "-1", "enable": "1", "current_link_speed": "16.0 GT/s PCIe",
        "current_link_width": "16", "max_link_speed": "16.0 GT/s PCIe",
        "max_link_width": "16", "unique_id": f"{node.unique_id:016x}",
        "mem_info_vram_total": str(m.vram_bytes), "mem_info_vram_used": "0",
        "mem_info_vis_vram_total": str(m.vram_bytes), "mem_info_vis_vram_used": "0",
        "mem_info_gtt_total": str(total_ram()), "mem_info_gtt_used": "0",
        "gpu_busy_percent": "0", "mem_busy_percent": "0",
    }
    for name, text in files.items():
        _write(dev / name, text + "\n")
    _write_smi(dev, node)
    _write_ip_discovery(dev, m.target)
    _link(dev / "driver", "../../../bus/pci/drivers/amdgpu")
    _link(dev / "subsystem", "../../../bus/pci")
    (root / "sys/bus/pci/drivers/amdgpu").mkdir(parents=True, exist_ok=True)
    _link(root / "sys/bus/pci/devices" / node.pci_slot, f"../../../devices/pci0000:00/"
          f"{node.pci_slot}")
    for name, minor in ((f"renderD{node.drm_render_minor}", node.drm_render_minor),
                        (f"card{node.ordinal}", node.ordinal)):
        _write(dev / "drm" / name / "dev", f"{DRM_MAJOR}:{minor}\n")
        _write(dev / "drm" / name / "uevent", f"MAJOR={DRM_MAJOR}\nMINOR={minor}\n"
               f"DEVNAME=dri/{name}\n")
        _link(dev / "drm" / name / "device", "../../../" + node.pci_slot)
        _link(dev / "drm" / name / "subsystem", "../../../../../class/drm")
        _link(root / "sys/class/drm" / name, f"../../devices/pci0000:00/{node.pci_slot}"
              f"/drm/{name}")
        _link(root / "sys/dev/char" / f"{DRM_MAJOR}:{minor}",
              f"../../devices/pci0000:00/{node.pci_slot}/drm/{name}")


def _write_smi(dev: pathlib.Path, node: NodeInfo) -> None:
    """What rocm-smi (librocm_smi64 5.2) needs to count a card as a GPU: a vbios_version and
    an amdgpu hwmon under the device whose init reads in0_label; the clocks as one DPM
    level each, the model's. No sensor values: the emulated GPU has no temperature, power
    or fan, and rocm-smi shows those as N/A."""
    m = node.model
    _write(dev / "vbios_version", f"EMULATED-{m.target.upper()}\n")  # no BIOS: says so
    _write(dev / "pp_dpm_sclk", f"0: {m.max_engine_clock_mhz}Mhz *\n")
    _write(dev / "pp_dpm_mclk", f"0: {m.memory_clock_mhz}Mhz *\n")
    hwmon = dev / "hwmon" / f"hwmon{node.ordinal}"
    _write(hwmon / "name", "amdgpu\n")
    _write(hwmon / "in0_label", "vddgfx\n")
    _link(hwmon / "device", "../../../" + node.pci_slot)


# soc15_hw_ip.h hardware ids, and each target's IP versions as its discovery table reports
# them (the kernel's amdgpu_discovery.c / gc_*, sdma_v*, nbio_v* files take these versions).
GC_HWID, SDMA0_HWID, NBIF_HWID = 11, 42, 108
IP_VERSIONS: dict[str, dict[int, tuple[int, int, int]]] = {
    "gfx90a": {GC_HWID: (9, 4, 2), SDMA0_HWID: (4, 4, 0), NBIF_HWID: (7, 4, 0)},
    "gfx942": {GC_HWID: (9, 4, 3), SDMA0_HWID: (4, 4, 2), NBIF_HWID: (7, 9, 0)},
    "gfx950": {GC_HWID: (9, 5, 0), SDMA0_HWID: (4, 4, 5), NBIF_HWID: (7, 9, 1)},
    "gfx1100": {GC_HWID: (11, 0, 0), SDMA0_HWID: (6, 0, 0), NBIF_HWID: (4, 3, 0)},
    "gfx1201": {GC_HWID: (12, 0, 1), SDMA0_HWID: (7, 0, 1), NBIF_HWID: (6, 3, 1)},
}


def _write_ip_discovery(dev: pathlib.Path, target: str) -> None:
    """The discovery table's blocks under the PCI device, as amdgpu_discovery.c's sysfs
    (die/<die>/<hw_id>/<instance>/...); only the blocks IP_VERSIONS names."""
    die = dev / "ip_discovery/die/0"
    blocks = IP_VERSIONS.get(target, {})
    _write(die / "num_ips", f"{len(blocks)}\n")
    for hw_id, version in blocks.items():
        for name, value in zip(("major", "minor", "revision"), version, strict=True):
            _write(die / f"{hw_id}/0/{name}", f"{value}\n")
        _write(die / f"{hw_id}/0/hw_id", f"{hw_id}\n")
        _write(die / f"{hw_id}/0/harvest", "0x0\n")


def _write_modules(root: pathlib.Path) -> None:
    try:
        host = pathlib.Path("/proc/modules").read_text()
    except OSError:
        host = ""
    lines = [ln for ln in host.splitlines() if ln and not ln.startswith("amdgpu ")]
    lines.append("amdgpu 15736832 0 - Live 0x0000000000000000")
    _write(root / "proc/modules", "\n".join(lines) + "\n")
    _write(root / "sys/module/amdgpu/initstate", "live\n")
    _write(root / "sys/module/amdgpu/refcnt", "0\n")


def write_topology(root: pathlib.Path, gpus: list[GpuModel]) -> list[NodeInfo]:
    """Write the driver's files for a CPU and `gpus` under `root` (created when missing;
    files of an earlier call are replaced); the GPU nodes written, in order."""
    if not 1 <= len(gpus) <= MAX_GPUS:
        raise ValueError(f"an emulated node has 1 to {MAX_GPUS} GPUs, not {len(gpus)}")
    root = pathlib.Path(root)
    topo = root / TOPOLOGY
    if topo.exists():  # a node count that shrank must not leave old nodes behind
        for path in sorted(topo.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    nodes = [NodeInfo(i + 1, gpu_id, RENDER_MINOR_BASE + i, model)
             for i, (model, gpu_id) in enumerate(zip(gpus, _gpu_ids(gpus), strict=True))]
    hives = _hive_ids(gpus)
    _write(topo / "generation_id", "1\n")
    _write(topo / "system_properties",
           _props([("platform_oem", 0), ("platform_id", 0), ("platform_rev", 0)]))
    _link(root / "sys/class/kfd/kfd", "../../devices/virtual/kfd/kfd")

    cpu = topo / "nodes/0"
    _write(cpu / "gpu_id", "0\n")
    _write(cpu / "name", "\n")
    _write(cpu / "properties", _cpu_node(gpus))
    _write(cpu / "mem_banks/0/properties", _mem_bank(_HEAP_SYSTEM, total_ram(), 64, 3200))
    (cpu / "caches").mkdir(parents=True, exist_ok=True)
    for k, node in enumerate(nodes):
        _write(cpu / f"io_links/{k}/properties", _iolink(0, node.index,
                                                         topology.gpu_to_host()[0]))

    simd_base = _SIMD_ID_BASE
    for node, hive in zip(nodes, hives, strict=True):
        m = node.model
        d = topo / f"nodes/{node.index}"
        links = [(0, topology.gpu_to_host()[0])]
        links += [(peer.index, topology.gpu_to_gpu(m.target, peer.model.target)[0])
                  for peer in nodes
                  if peer is not node and hive and topology.xgmi_peers(m.target,
                                                                      peer.model.target)]
        caches = _gpu_caches(m, simd_base)
        _write(d / "gpu_id", f"{node.gpu_id}\n")
        _write(d / "name", f"{m.asic_name}\n")
        _write(d / "properties", _gpu_node(node, simd_base, len(links), len(caches), hive))
        _write(d / "mem_banks/0/properties", _mem_bank(_HEAP_FB_PUBLIC, m.vram_bytes,
                                                       m.memory_width_bits,
                                                       m.memory_clock_mhz))
        for c, text in enumerate(caches):
            _write(d / f"caches/{c}/properties", text)
        for k, (to, link) in enumerate(links):
            _write(d / f"io_links/{k}/properties", _iolink(node.index, to, link))
        simd_base += m.simd_count
        _write_drm(root, node)
    _write_modules(root)
    return nodes
