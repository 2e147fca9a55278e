"""The GPUs the emulated kernel presents: one `GpuModel` per target with the public values of
a real part, as the amdgpu/KFD driver reports them (sysfs topology, the DRM render node).

Facts come from (named per value below):
- [ids]   libdrm's amdgpu.ids (Debian sid's libdrm-common, /usr/share/libdrm/amdgpu.ids):
          PCI device id, revision and the marketing name libdrm returns for them;
- [kfd]   the kernel's drivers/gpu/drm/amd/amdkfd/kfd_device.c (gfx_target_version per GC IP
          version, SDMA engine split: at most 2 PCIe engines on XGMI parts, the rest XGMI),
          amdgpu_device.c's amdgpu_asic_name[] (the topology node's `name`);
- [spec]  AMD's product pages and whitepapers (CUs, memory, clocks, caches);
- hsa/abi/targets.py (wave size, LDS bytes) and hsa/virtual/provider.py (the CU counts the
  virtual system already uses), so one fact has one source.
Memory clocks are what KFD's mem_banks report (HBM: the pin rate / 4, GDDR6: / 16); MI355X's
is derived from AMD's 8 TB/s over 8192 bits, not read off a card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ground.errors import DeviceError
from hsa.abi.targets import lookup
from hsa.virtual.provider import _COMPUTE_UNITS
from hsa.virtual.topology import XGMI_TARGETS

__all__ = ["GpuModel", "MODELS", "MAX_GPUS", "parse_node"]

MAX_GPUS = 16
_KIB, _GIB = 1024, 1 << 30


@dataclass(frozen=True)
class GpuModel:
    """One GPU as the kernel driver describes it."""

    target: str  # "gfx942"
    marketing_name: str  # what libdrm's amdgpu_get_marketing_name returns [ids]
    gfx_target_version: int  # KFD's encoding: major * 10000 + minor * 100 + stepping [kfd]
    device_id: int  # PCI [ids]
    revision_id: int  # PCI revision, the second key of amdgpu.ids [ids]
    asic_name: str  # the topology node's `name` file [kfd]
    compute_units: int
    simd_per_cu: int
    max_waves_per_simd: int
    shader_engines: int  # over all XCCs
    arrays_per_engine: int
    vram_bytes: int
    memory_width_bits: int
    max_engine_clock_mhz: int
    memory_clock_mhz: int
    sdma_engines: int  # KFD's num_sdma_engines (PCIe)
    sdma_xgmi_engines: int  # KFD's num_sdma_xgmi_engines
    num_xcc: int
    l1_kib: int  # vector L1 (gfx11/12: L0) per CU
    l2_kib: int  # per XCC
    l3_kib: int  # Infinity Cache / MALL; 0 when the part has none
    family_id: int  # AMDGPU_FAMILY_* of amdgpu_drm.h (DEV_INFO's family)
    vendor_id: int = 0x1002

    @property
    def wave_size(self) -> int:
        return lookup(self.target).wave_size

    @property
    def gb_addr_config(self) -> int:
        """GB_ADDR_CONFIG, what DRM's READ_MMR_REG and KFD's GET_TILE_CONFIG report: the
        target's (hsa.abi.targets, which the virtual GPU's tiled image layouts read too), else
        the placeholder the emulated kernel has always reported for that wave size."""
        pinned = lookup(self.target).gb_addr_config
        if pinned is not None:
            return pinned
        return 0x26010042 if self.wave_size == 64 else 0x00000545

    @property
    def lds_bytes(self) -> int:
        return lookup(self.target).lds_size

    @property
    def simd_count(self) -> int:
        """KFD's simd_count: ROCr's compute unit count is simd_count / simd_per_cu."""
        return self.compute_units * self.simd_per_cu

    @property
    def array_count(self) -> int:
        return self.shader_engines * self.arrays_per_engine

    @property
    def cu_per_array(self) -> int:
        return -(-self.compute_units // self.array_count)

    @property
    def xgmi(self) -> bool:
        """Whether GPUs of this target form an XGMI hive (hsa/virtual/topology.py)."""
        return self.target in XGMI_TARGETS

    @property
    def gfx_version(self) -> tuple[int, int, int]:
        v = self.gfx_target_version
        return v // 10000, v // 100 % 100, v % 100


_AMDGPU_FAMILY_AI = 141  # gfx9 dGPUs (amdgpu_drm.h)
_AMDGPU_FAMILY_GC_11_0_0 = 145
_AMDGPU_FAMILY_GC_12_0_0 = 152

MODELS: dict[str, GpuModel] = {m.target: m for m in [
    # One GCD of an MI250X (the unit KFD and ROCr see): 110 CUs, 64 GiB HBM2e on a 4096-bit
    # bus at 3.2 Gbps, 1700 MHz peak engine clock, 8 MiB L2, 16 KiB L1 per CU [spec: AMD
    # Instinct MI250X data sheet]; 5 SDMA instances per GCD [kfd: aldebaran]; "aldebaran".
    GpuModel(
        target="gfx90a", marketing_name="AMD Instinct MI250X / MI250", gfx_target_version=90010,
        device_id=0x740C, revision_id=0x01, asic_name="aldebaran",
        compute_units=_COMPUTE_UNITS["gfx90a"], simd_per_cu=4, max_waves_per_simd=8,
        shader_engines=8, arrays_per_engine=1, vram_bytes=64 * _GIB, memory_width_bits=4096,
        max_engine_clock_mhz=1700, memory_clock_mhz=1600, sdma_engines=2, sdma_xgmi_engines=3,
        num_xcc=1, l1_kib=16, l2_kib=8 * 1024, l3_kib=0, family_id=_AMDGPU_FAMILY_AI),
    # MI300X: 304 CUs on 8 XCDs, 192 GiB HBM3 on 8192 bits at 5.2 Gbps, 2100 MHz, 4 MiB L2 per
    # XCD, 256 MiB Infinity Cache, 32 KiB L1 per CU [spec: AMD CDNA 3 whitepaper, MI300X
    # data sheet]; 16 SDMA instances [kfd: 2 PCIe + 14 XGMI]; GC 9.4.3, rev >= 1 -> 90402.
    GpuModel(
        target="gfx942", marketing_name="AMD Instinct MI300X", gfx_target_version=90402,
        device_id=0x74A1, revision_id=0x00, asic_name="ip discovery",
        compute_units=_COMPUTE_UNITS["gfx942"], simd_per_cu=4, max_waves_per_simd=8,
        shader_engines=32, arrays_per_engine=1, vram_bytes=192 * _GIB, memory_width_bits=8192,
        max_engine_clock_mhz=2100, memory_clock_mhz=1300, sdma_engines=2, sdma_xgmi_engines=14,
        num_xcc=8, l1_kib=32, l2_kib=4 * 1024, l3_kib=256 * 1024, family_id=_AMDGPU_FAMILY_AI),
    # MI355X: 256 CUs on 8 XCDs, 288 GiB HBM3E on 8192 bits (8 TB/s), 2400 MHz, 4 MiB L2 per
    # XCD, 256 MiB Infinity Cache, 32 KiB L1, 160 KiB LDS [spec: AMD CDNA 4 whitepaper, MI355X
    # page]; GC 9.5.0 -> 90500 [kfd].
    GpuModel(
        target="gfx950", marketing_name="AMD Instinct MI355X", gfx_target_version=90500,
        device_id=0x75A3, revision_id=0x00, asic_name="ip discovery",
        compute_units=_COMPUTE_UNITS["gfx950"], simd_per_cu=4, max_waves_per_simd=8,
        shader_engines=32, arrays_per_engine=1, vram_bytes=288 * _GIB, memory_width_bits=8192,
        max_engine_clock_mhz=2400, memory_clock_mhz=2000, sdma_engines=2, sdma_xgmi_engines=14,
        num_xcc=8, l1_kib=32, l2_kib=4 * 1024, l3_kib=256 * 1024, family_id=_AMDGPU_FAMILY_AI),
    # Radeon RX 7900 XTX (Navi 31): 96 CUs (6 SEs x 2 SAs x 8), 24 GiB GDDR6 on 384 bits at
    # 20 Gbps, 2500 MHz boost, 6 MiB L2, 96 MiB Infinity Cache, 32 KiB L0 per CU, 2 SIMD32 per
    # CU with 16 waves each [spec: AMD RDNA 3 whitepaper, RX 7900 XTX page]; 2 SDMA [kfd];
    # GC 11.0.0 -> 110000. (hsa/virtual gives gfx1100 48 CUs, its default for parts it does
    # not model; this is the real card's count.)
    GpuModel(
        target="gfx1100", marketing_name="AMD Radeon RX 7900 XTX", gfx_target_version=110000,
        device_id=0x744C, revision_id=0xC8, asic_name="ip discovery",
        compute_units=96, simd_per_cu=2, max_waves_per_simd=16,
        shader_engines=6, arrays_per_engine=2, vram_bytes=24 * _GIB, memory_width_bits=384,
        max_engine_clock_mhz=2500, memory_clock_mhz=1250, sdma_engines=2, sdma_xgmi_engines=0,
        num_xcc=1, l1_kib=32, l2_kib=6 * 1024, l3_kib=96 * 1024,
        family_id=_AMDGPU_FAMILY_GC_11_0_0),
    # Radeon RX 9070 XT (Navi 48): 64 CUs (4 SEs x 2 SAs x 8), 16 GiB GDDR6 on 256 bits at
    # 20 Gbps, 2970 MHz boost, 8 MiB L2, 64 MiB Infinity Cache [spec: AMD RX 9070 XT page];
    # 2 SDMA [kfd]; GC 12.0.1 -> 120001.
    GpuModel(
        target="gfx1201", marketing_name="AMD Radeon RX 9070 XT", gfx_target_version=120001,
        device_id=0x7550, revision_id=0xC0, asic_name="ip discovery",
        compute_units=_COMPUTE_UNITS["gfx1201"], simd_per_cu=2, max_waves_per_simd=16,
        shader_engines=4, arrays_per_engine=2, vram_bytes=16 * _GIB, memory_width_bits=256,
        max_engine_clock_mhz=2970, memory_clock_mhz=1250, sdma_engines=2, sdma_xgmi_engines=0,
        num_xcc=1, l1_kib=32, l2_kib=8 * 1024, l3_kib=64 * 1024,
        family_id=_AMDGPU_FAMILY_GC_12_0_0),
]}

_ITEM_RE = re.compile(r"^(?:([1-9][0-9]*)x)?([a-z0-9-]+)$")


def _bad(spec: str, why: str) -> DeviceError:
    return DeviceError(f"emulated node {spec!r}: {why}; write it as GPU targets separated by "
                       f"commas, each optionally counted (e.g. gfx90a, 4xgfx90a, "
                       f"2xgfx942,gfx1201), from {', '.join(MODELS)}, 1 to {MAX_GPUS} GPUs")


def parse_node(spec: str) -> list[GpuModel]:
    """The GPUs of a node spec ("gfx90a", "4xgfx90a", "2xgfx942,gfx1201"), in order.
    Raises DeviceError (one line: the cause and the accepted form) for anything else."""
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(str(spec), "no GPU named")
    gpus: list[GpuModel] = []
    for item in spec.strip().lower().split(","):
        m = _ITEM_RE.match(item.strip())
        if not m:
            raise _bad(spec, f"{item.strip()!r} is not a target or COUNTxTARGET")
        count, name = int(m.group(1) or 1), m.group(2)
        try:
            target = lookup(name).name
        except ValueError:
            target = name
        if target not in MODELS:
            raise _bad(spec, f"{name!r} is not an emulated GPU")
        if len(gpus) + count > MAX_GPUS:
            raise _bad(spec, f"more than {MAX_GPUS} GPUs")
        gpus.extend([MODELS[target]] * count)
    return gpus
