"""The 64-byte kernel descriptor (`name.kd`, LLVM's AMDHSAKernelDescriptor.h): its fields,
decoded bit fields, and the bits a loader must refuse for a target."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ground.errors import CodeObjectError

_DESCRIPTOR = struct.Struct("<III4xq20xIIIHH4x")
assert _DESCRIPTOR.size == 64


def _bits(value: int, lo: int, width: int) -> int:
    return (value >> lo) & ((1 << width) - 1)


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte kernel descriptor (`name.kd`): raw fields plus decoded bit fields."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int  # relative to the descriptor's own address
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int

    SIZE = 64

    @classmethod
    def from_bytes(cls, data: bytes) -> KernelDescriptor:
        if len(data) < 64:
            raise CodeObjectError(
                f"truncated kernel descriptor: {len(data)} bytes, a descriptor has 64"
            )
        return cls(*_DESCRIPTOR.unpack_from(data, 0))

    def to_bytes(self) -> bytes:
        return _DESCRIPTOR.pack(
            self.group_segment_fixed_size, self.private_segment_fixed_size, self.kernarg_size,
            self.kernel_code_entry_byte_offset, self.compute_pgm_rsrc3, self.compute_pgm_rsrc1,
            self.compute_pgm_rsrc2, self.kernel_code_properties, self.kernarg_preload,
        )

    # kernel_code_properties
    def _prop(self, bit: int) -> bool:
        return bool(self.kernel_code_properties >> bit & 1)

    @property
    def enable_sgpr_private_segment_buffer(self) -> bool:
        return self._prop(0)

    @property
    def enable_sgpr_dispatch_ptr(self) -> bool:
        return self._prop(1)

    @property
    def enable_sgpr_queue_ptr(self) -> bool:
        return self._prop(2)

    @property
    def enable_sgpr_kernarg_segment_ptr(self) -> bool:
        return self._prop(3)

    @property
    def enable_sgpr_dispatch_id(self) -> bool:
        return self._prop(4)

    @property
    def enable_sgpr_flat_scratch_init(self) -> bool:
        return self._prop(5)

    @property
    def enable_sgpr_private_segment_size(self) -> bool:
        return self._prop(6)

    @property
    def wavefront_size32(self) -> bool:
        return self._prop(10)

    @property
    def uses_dynamic_stack(self) -> bool:
        return self._prop(11)

    # compute_pgm_rsrc2
    @property
    def enable_private_segment(self) -> bool:
        """rsrc2 bit 0: the private segment wave offset SGPR is set up (scratch in use)."""
        return bool(self.compute_pgm_rsrc2 & 1)

    @property
    def user_sgpr_count(self) -> int:
        return _bits(self.compute_pgm_rsrc2, 1, 5)

    @property
    def enable_trap_handler(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 6, 1))

    @property
    def enable_sgpr_workgroup_id_x(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 7, 1))

    @property
    def enable_sgpr_workgroup_id_y(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 8, 1))

    @property
    def enable_sgpr_workgroup_id_z(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 9, 1))

    @property
    def enable_sgpr_workgroup_info(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 10, 1))

    @property
    def enable_vgpr_workitem_id(self) -> int:
        """0: X only, 1: X and Y, 2: X, Y and Z work-item ids in VGPRs."""
        return _bits(self.compute_pgm_rsrc2, 11, 2)

    @property
    def granulated_lds_size(self) -> int:
        return _bits(self.compute_pgm_rsrc2, 15, 9)

    # compute_pgm_rsrc1
    @property
    def granulated_workitem_vgpr_count(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 0, 6)

    @property
    def granulated_wavefront_sgpr_count(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 6, 4)

    @property
    def priority(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 10, 2)

    @property
    def float_round_mode_32(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 12, 2)

    @property
    def float_round_mode_16_64(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 14, 2)

    @property
    def float_denorm_mode_32(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 16, 2)

    @property
    def float_denorm_mode_16_64(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 18, 2)

    @property
    def enable_dx10_clamp(self) -> bool:
        """rsrc1 bit 21 (gfx9-gfx11; gfx12 reuses the bit for WG_RR_EN)."""
        return bool(_bits(self.compute_pgm_rsrc1, 21, 1))

    @property
    def enable_ieee_mode(self) -> bool:
        """rsrc1 bit 23 (gfx9-gfx11; gfx12 reuses the bit for DISABLE_PERF)."""
        return bool(_bits(self.compute_pgm_rsrc1, 23, 1))

    # compute_pgm_rsrc3: its layout depends on the family.
    @property
    def accum_offset(self) -> int:
        """gfx90a/gfx942/gfx950: first AGPR-backed VGPR, (rsrc3[5:0] + 1) * 4."""
        return (_bits(self.compute_pgm_rsrc3, 0, 6) + 1) * 4

    @property
    def tg_split(self) -> bool:
        """gfx90a/gfx942/gfx950: rsrc3 bit 16, workgroup may split across CUs."""
        return bool(_bits(self.compute_pgm_rsrc3, 16, 1))

    @property
    def shared_vgpr_count(self) -> int:
        """gfx10/gfx11: rsrc3[3:0], VGPRs shared between wave32 halves of a wave64."""
        return _bits(self.compute_pgm_rsrc3, 0, 4)

    @property
    def workgroup_processor_mode(self) -> bool:
        """rsrc1 bit 29 (gfx10+): WGP mode rather than CU mode."""
        return bool(_bits(self.compute_pgm_rsrc1, 29, 1))

    # kernarg_preload
    @property
    def kernarg_preload_length(self) -> int:
        """Dwords of kernargs preloaded into user SGPRs (gfx90a+/gfx950/gfx12)."""
        return _bits(self.kernarg_preload, 0, 7)

    @property
    def kernarg_preload_offset(self) -> int:
        return _bits(self.kernarg_preload, 7, 9)

    @property
    def user_sgprs_from_properties(self) -> int:
        """User SGPRs implied by kernel_code_properties plus preloaded kernargs."""
        sizes = ((0, 4), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 1))
        return sum(n for bit, n in sizes if self._prop(bit)) + self.kernarg_preload_length

    def fields(self) -> dict[str, int | bool]:
        """Raw and decoded fields, by name, for display and JSON."""
        names = [
            "group_segment_fixed_size", "private_segment_fixed_size", "kernarg_size",
            "kernel_code_entry_byte_offset", "compute_pgm_rsrc1", "compute_pgm_rsrc2",
            "compute_pgm_rsrc3", "kernel_code_properties", "kernarg_preload",
            "enable_sgpr_private_segment_buffer", "enable_sgpr_dispatch_ptr",
            "enable_sgpr_queue_ptr", "enable_sgpr_kernarg_segment_ptr",
            "enable_sgpr_dispatch_id", "enable_sgpr_flat_scratch_init",
            "enable_sgpr_private_segment_size", "wavefront_size32", "uses_dynamic_stack",
            "user_sgpr_count", "enable_private_segment", "enable_trap_handler",
            "enable_sgpr_workgroup_id_x", "enable_sgpr_workgroup_id_y",
            "enable_sgpr_workgroup_id_z", "enable_sgpr_workgroup_info",
            "enable_vgpr_workitem_id", "granulated_lds_size",
            "granulated_workitem_vgpr_count", "granulated_wavefront_sgpr_count",
            "float_round_mode_32", "float_round_mode_16_64", "float_denorm_mode_32",
            "float_denorm_mode_16_64", "enable_dx10_clamp", "enable_ieee_mode",
            "workgroup_processor_mode", "kernarg_preload_length", "kernarg_preload_offset",
            "accum_offset", "tg_split", "shared_vgpr_count",
        ]
        return {name: getattr(self, name) for name in names}



# Kernel descriptor bits that must be 0 (LLVM's AMDHSAKernelDescriptor.h: reserved, or set
# by the packet processor rather than the code object), as (mask, name) per register and
# family. "all": every family this reader knows.
_RSRC1_ZERO = [(0x3 << 10, "PRIORITY"), (1 << 20, "PRIV"), (1 << 22, "DEBUG_MODE"),
               (1 << 24, "BULKY"), (1 << 25, "CDBG_USER"), (0x3 << 27, "RESERVED1")]
# (GRANULATED_WAVEFRONT_SGPR_COUNT is ignored by gfx10+ hardware but real compilers set it:
# hipcc's gfx1100/gfx1030 objects do, so it is not refused.)
_RSRC1_ZERO_BY_FAMILY = {"gfx9": [(0x7 << 29, "RESERVED2")]}
_RSRC2_ZERO = [(1 << 6, "ENABLE_TRAP_HANDLER"), (1 << 13, "ENABLE_EXCEPTION_ADDRESS_WATCH"),
               (1 << 14, "ENABLE_EXCEPTION_MEMORY"), (0x1FF << 15, "GRANULATED_LDS_SIZE"),
               (1 << 31, "RESERVED0")]
_RSRC3_ZERO_BY_FAMILY = {
    "gfx9": [(0x3FF << 6, "RESERVED0"), (0x7FFF << 17, "RESERVED1")],  # gfx90a layout
    "gfx10": [(0xFFFFFFF0, "RESERVED1/2/4/5")],
    "gfx11": [(0x7FFFF << 12, "RESERVED2/3/4")],
    "gfx12": [(0xF, "RESERVED0"), (1 << 12, "RESERVED2"), (0x1FFFF << 14, "RESERVED4")],
}
_PROPERTIES_ZERO = [(0x7 << 7, "RESERVED0"), (0xF << 12, "RESERVED1")]
_RESERVED_BYTES = ((12, 16, "reserved0"), (24, 44, "reserved1"), (60, 64, "reserved3"))
# Addressable VGPRs per work-item and the rsrc1 VGPR encoding granule, by (family, wave32).
_MAX_VGPRS = {"gfx9": 512, "gfx10": 256, "gfx11": 256, "gfx12": 256}


def _check_descriptor_bits(name: str, symbol: str, raw: bytes, d: KernelDescriptor,
                           family: str, processor: str) -> None:
    """Descriptor fields a loader must refuse for the target: reserved bits or bytes set,
    values out of range (an all-ones rsrc1/2/3 would otherwise run with wrong results)."""
    def refuse(what: str) -> CodeObjectError:
        return CodeObjectError(
            f"corrupt kernel descriptor {symbol} (kernel {name!r}): {what} for {processor} "
            f"({family}); the code object is damaged or not built for this target"
        )

    for lo, hi, field_name in _RESERVED_BYTES:
        if any(raw[lo:hi]):
            raise refuse(f"{field_name} (bytes {lo}-{hi - 1}) is not zero")
    checks = (("compute_pgm_rsrc1", d.compute_pgm_rsrc1,
               _RSRC1_ZERO + _RSRC1_ZERO_BY_FAMILY.get(family, [])),
              ("compute_pgm_rsrc2", d.compute_pgm_rsrc2, _RSRC2_ZERO),
              ("compute_pgm_rsrc3", d.compute_pgm_rsrc3, _RSRC3_ZERO_BY_FAMILY.get(family, [])),
              ("kernel_code_properties", d.kernel_code_properties, _PROPERTIES_ZERO))
    for register, value, masks in checks:
        for mask, bits in masks:
            if value & mask:
                raise refuse(f"{register} 0x{value:08x} sets {bits} (mask 0x{mask:08x}), "
                             "which must be 0")
    if family == "gfx9" and d.wavefront_size32:
        raise refuse("kernel_code_properties asks for wave32, which gfx9 does not have")
    if d.enable_vgpr_workitem_id == 3:
        raise refuse("compute_pgm_rsrc2 ENABLE_VGPR_WORKITEM_ID is 3 (undefined)")
    max_vgprs = _MAX_VGPRS.get(family)
    if max_vgprs and processor != "gfx1250":  # gfx1250's larger VGPR file: not tabled here
        granule = 8 if (family == "gfx9" or d.wavefront_size32) else 4
        vgprs = (d.granulated_workitem_vgpr_count + 1) * granule
        if vgprs > max_vgprs:
            raise refuse(f"compute_pgm_rsrc1 GRANULATED_WORKITEM_VGPR_COUNT "
                         f"{d.granulated_workitem_vgpr_count} means {vgprs} VGPRs, more than "
                         f"the {max_vgprs} a work-item can address")
    max_user = 32 if processor == "gfx1250" else 16
    implied = d.user_sgprs_from_properties
    if d.user_sgpr_count > max_user or d.user_sgpr_count < implied:
        raise refuse(f"compute_pgm_rsrc2 USER_SGPR_COUNT {d.user_sgpr_count} is out of range "
                     f"(kernel_code_properties and kernarg preload need {implied}, the "
                     f"hardware has {max_user})")

