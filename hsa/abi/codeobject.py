"""Read AMDGPU code objects (ELF64, HSA OS ABI, code object v4/v5/v6) without running them.

`read_code_object(data)` parses the ELF headers, program segments, symbol tables, RELA
relocations, the NT_AMDGPU_METADATA note (msgpack) and every kernel's 64-byte descriptor,
and checks the descriptor against the metadata. Both linked objects (.hsaco/.co, ET_DYN)
and relocatable ones (.o, ET_REL) are read; a clang offload bundle (`hipcc --genco`) holding
one AMDGPU object is unwrapped.

Every problem raises CodeObjectError with one line naming it: not ELF, not AMDGPU, not the HSA
OS ABI, unsupported code object version, truncated (with the offset), corrupt metadata,
metadata and descriptor disagree. A small own parser (struct) keeps errors precise and the
read fast (the virtual loader reads every object it loads).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from amdgpu.errors import CodeObjectError
from hsa.abi import targets as _targets

__all__ = [
    "CodeObject",
    "KernelInfo",
    "KernelArg",
    "KernelDescriptor",
    "LoadSegment",
    "ElfSymbol",
    "Relocation",
    "read_code_object",
    "read_offload_bundle",
    "target_id_from_flags",
    "EM_AMDGPU",
    "ELFOSABI_AMDGPU_HSA",
    "NT_AMDGPU_METADATA",
]

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
NT_AMDGPU_METADATA = 32
ET_REL, ET_DYN = 1, 3
PT_LOAD, PT_NOTE = 1, 4
SHT_SYMTAB, SHT_NOTE, SHT_RELA, SHT_DYNSYM, SHT_NOBITS = 2, 7, 4, 11, 8

EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
EF_AMDGPU_GENERIC_VERSION_SHIFT = 24
_FEATURE_V4 = {0x000: None, 0x100: "any", 0x200: "off", 0x300: "on"}  # None: unsupported

#: EI_ABIVERSION -> code object version (AMDGPUUsage).
ABI_VERSION_TO_CODE_OBJECT = {2: 4, 3: 5, 4: 6}
_OLD_ABI_VERSION = {0: "2 or 3", 1: "3"}

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
_NOTE = struct.Struct("<III")

_SYM_TYPES = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 5: "COMMON",
              6: "TLS", 10: "AMDGPU_HSA_KERNEL"}
_SYM_BINDINGS = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}

#: AMDGPU relocation types (AMDGPUUsage "Relocation Records").
RELOCATION_TYPES = {0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI",
                    3: "R_AMDGPU_ABS64", 4: "R_AMDGPU_REL32", 5: "R_AMDGPU_REL64",
                    6: "R_AMDGPU_ABS32", 7: "R_AMDGPU_GOTPCREL", 8: "R_AMDGPU_GOTPCREL32_LO",
                    9: "R_AMDGPU_GOTPCREL32_HI", 10: "R_AMDGPU_REL32_LO",
                    11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64", 14: "R_AMDGPU_REL16"}

#: The most virtual address space a code object may ask for: larger means a corrupt
#: p_memsz/p_vaddr, not a kernel's code and data (a loader reserves the whole span at once).
MAX_IMAGE_BYTES = 1 << 32
#: Zero-filled bytes a segment may add past its file bytes beyond the SHT_NOBITS sections it
#: holds (alignment padding between sections).
_BSS_SLACK = 1 << 16
#: The longest kernel name the reader accepts (symbol names are C strings, kept short).
MAX_KERNEL_NAME = 1024

_OFFLOAD_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_COMPRESSED_OFFLOAD_MAGIC = b"CCOB"


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadSegment:
    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int  # PF_X=1, PF_W=2, PF_R=4

    @property
    def executable(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True)
class ElfSymbol:
    name: str
    value: int
    size: int
    type: str  # "FUNC", "OBJECT", "NOTYPE", ...
    binding: str  # "LOCAL", "GLOBAL", "WEAK"
    shndx: int


@dataclass(frozen=True)
class Relocation:
    offset: int  # r_offset: a vaddr (ET_DYN) or an offset in `section` (ET_REL)
    type: int  # R_AMDGPU_* value; see `type_name`
    symbol: str  # "" for none
    symbol_value: int
    addend: int
    section: str = ""  # the RELA section it came from, e.g. ".rela.dyn"

    @property
    def type_name(self) -> str:
        return RELOCATION_TYPES.get(self.type, f"R_AMDGPU_{self.type}")


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


@dataclass(frozen=True)
class KernelArg:
    name: str | None
    type_name: str | None
    offset: int
    size: int
    value_kind: str  # by_value, global_buffer, dynamic_shared_pointer, hidden_*, ...
    address_space: str | None
    actual_access: str | None
    is_hidden: bool
    is_const: bool = False


@dataclass(frozen=True)
class KernelInfo:
    name: str
    symbol: str  # "name.kd"
    args: list[KernelArg]
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    wavefront_size: int
    sgpr_count: int
    vgpr_count: int
    max_flat_workgroup_size: int
    reqd_workgroup_size: tuple[int, int, int] | None
    uniform_work_group_size: bool
    descriptor: KernelDescriptor
    descriptor_address: int  # vaddr of name.kd (section offset in an ET_REL object)
    agpr_count: int = 0
    sgpr_spill_count: int = 0
    vgpr_spill_count: int = 0
    uses_dynamic_stack: bool = False
    language: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def explicit_args(self) -> list[KernelArg]:
        return [a for a in self.args if not a.is_hidden]

    @property
    def hidden_args(self) -> list[KernelArg]:
        return [a for a in self.args if a.is_hidden]

    @property
    def hidden_args_offset(self) -> int:
        """Offset where the hidden (implicit) arguments start: after the explicit ones,
        aligned to 8 (the first hidden arg's offset when the kernel lists any)."""
        hidden = self.hidden_args
        if hidden:
            return min(a.offset for a in hidden)
        end = max((a.offset + a.size for a in self.explicit_args), default=0)
        return (end + 7) & ~7

    @property
    def kernel_code_address(self) -> int:
        """vaddr of the kernel's first instruction (descriptor address + entry offset)."""
        return self.descriptor_address + self.descriptor.kernel_code_entry_byte_offset


@dataclass(frozen=True)
class CodeObject:
    target_id: str  # "gfx942:sramecc+:xnack-"
    mach: int
    code_object_version: int  # 4 | 5 | 6
    kernels: dict[str, KernelInfo]
    segments: list[LoadSegment]
    symbols: dict[str, ElfSymbol]
    relocations: list[Relocation]
    data: bytes = field(repr=False)
    elf_type: int = ET_DYN  # ET_DYN (linked) or ET_REL (relocatable .o)
    e_flags: int = 0
    generic_version: int = 0  # v6 generic targets: EF_AMDGPU_GENERIC_VERSION
    metadata: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def target(self) -> _targets.TargetId:
        return _targets.TargetId.parse(self.target_id)

    @property
    def processor(self) -> str:
        return self.target_id.split(":", 1)[0]

    @property
    def is_relocatable(self) -> bool:
        return self.elf_type == ET_REL

    @property
    def image_size(self) -> int:
        """Bytes of virtual address space the PT_LOAD segments span (from vaddr 0)."""
        return max((s.vaddr + s.memsz for s in self.segments), default=0)

    def read(self, vaddr: int, size: int) -> bytes:
        """File bytes at a virtual address (zero-fill past a segment's filesz)."""
        for seg in self.segments:
            if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.memsz:
                start = seg.offset + (vaddr - seg.vaddr)
                avail = max(0, min(size, seg.filesz - (vaddr - seg.vaddr)))
                return self.data[start:start + avail] + bytes(size - avail)
        raise CodeObjectError(
            f"address 0x{vaddr:x}+{size} lies in no PT_LOAD segment of this code object"
        )


# --------------------------------------------------------------------------------------------
# Target id from e_flags
# --------------------------------------------------------------------------------------------
def target_id_from_flags(e_flags: int, fallback_name: str | None = None) -> str:
    """The target id string e_flags encodes (code object v4+), e.g. "gfx942:sramecc+:xnack-".

    `fallback_name` names the processor when EF_AMDGPU_MACH is not in our registry
    (taken from the metadata's amdhsa.target)."""
    mach = e_flags & EF_AMDGPU_MACH
    target = _targets.by_mach(mach)
    if target is not None:
        name = target.name
    elif fallback_name:
        name = fallback_name
    else:
        raise CodeObjectError(
            f"unknown EF_AMDGPU_MACH 0x{mach:x} and no amdhsa.target in the metadata; "
            f"known targets: {', '.join(_targets.TARGETS)}"
        )
    out = name
    sramecc = _FEATURE_V4[(e_flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 2]
    xnack = _FEATURE_V4[e_flags & EF_AMDGPU_FEATURE_XNACK_V4]
    for feat, value in (("sramecc", sramecc), ("xnack", xnack)):
        if value in ("on", "off"):
            out += f":{feat}{'+' if value == 'on' else '-'}"
    return out


# --------------------------------------------------------------------------------------------
# Offload bundles (hipcc --genco)
# --------------------------------------------------------------------------------------------
def is_offload_bundle(data: bytes) -> bool:
    """Does `data` start like a clang offload bundle (plain or compressed)?"""
    return data.startswith((_OFFLOAD_MAGIC, _COMPRESSED_OFFLOAD_MAGIC))


def read_offload_bundle(data: bytes) -> dict[str, bytes]:
    """Entries of a clang offload bundle, {bundle entry id: bytes}. Entry ids look like
    "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"."""
    if data[:4] == _COMPRESSED_OFFLOAD_MAGIC:
        raise CodeObjectError(
            "compressed clang offload bundle (CCOB): unbundle it first with "
            "`clang-offload-bundler --unbundle` or rebuild without --offload-compress"
        )
    if not data.startswith(_OFFLOAD_MAGIC):
        raise CodeObjectError("not a clang offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic)")
    pos = len(_OFFLOAD_MAGIC)
    (count,) = _unpack(struct.Struct("<Q"), data, pos, "offload bundle header")
    pos += 8
    if count > 4096:
        raise CodeObjectError(f"corrupt offload bundle: {count} entries claimed")
    entries: dict[str, bytes] = {}
    for _ in range(count):
        offset, size, id_len = _unpack(struct.Struct("<QQQ"), data, pos, "offload bundle entry")
        pos += 24
        if pos + id_len > len(data):
            raise CodeObjectError(f"truncated offload bundle: entry id at offset 0x{pos:x}")
        entry_id = data[pos:pos + id_len].decode("utf-8", "replace")
        pos += id_len
        if offset + size > len(data):
            raise CodeObjectError(
                f"truncated offload bundle: entry {entry_id!r} at offset 0x{offset:x} "
                f"size {size} runs past the end ({len(data)} bytes)"
            )
        entries[entry_id] = bytes(data[offset:offset + size])
    return entries


def _unwrap_offload_bundle(data: bytes) -> bytes:
    entries = read_offload_bundle(data)
    gpu = {k: v for k, v in entries.items() if "amdgcn" in k and v}
    if len(gpu) == 1:
        return next(iter(gpu.values()))
    if not gpu:
        raise CodeObjectError(
            f"clang offload bundle holds no AMDGPU code object (entries: {', '.join(entries)})"
        )
    raise CodeObjectError(
        f"clang offload bundle holds {len(gpu)} AMDGPU code objects "
        f"({', '.join(gpu)}); pick one with hsa.abi.codeobject.read_offload_bundle"
    )


# --------------------------------------------------------------------------------------------
# ELF parsing
# --------------------------------------------------------------------------------------------
def _unpack(st: struct.Struct, data: bytes, offset: int, what: str) -> tuple:
    if offset < 0 or offset + st.size > len(data):
        raise CodeObjectError(
            f"truncated {what} at offset 0x{offset:x}: needs {st.size} bytes, "
            f"the file has {len(data)}"
        )
    return st.unpack_from(data, offset)


@dataclass
class _Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int

    def body(self, data: bytes) -> bytes:
        if self.type == SHT_NOBITS:
            return b""
        if self.offset + self.size > len(data):
            raise CodeObjectError(
                f"truncated section {self.name or self.index!s} at offset 0x{self.offset:x}: "
                f"{self.size} bytes run past the end of the file ({len(data)} bytes)"
            )
        return data[self.offset:self.offset + self.size]


def _cstr(table: bytes, offset: int) -> str:
    if offset >= len(table):
        return ""
    end = table.find(b"\0", offset)
    raw = table[offset:] if end < 0 else table[offset:end]
    return raw.decode("utf-8", "replace")


def _check_header(data: bytes) -> tuple:
    if len(data) < 4 or data[:4] != b"\x7fELF":
        head = bytes(data[:4])
        raise CodeObjectError(
            f"not an ELF file (starts with {head!r}); expected an AMDGPU code object "
            "(.hsaco/.co/.o) or a kernel bundle"
        )
    if len(data) < _EHDR.size:
        raise CodeObjectError(
            f"truncated ELF header at offset 0x0: {len(data)} bytes, an ELF64 header has 64"
        )
    hdr = _EHDR.unpack_from(data, 0)
    ident = hdr[0]
    if ident[4] != 2 or ident[5] != 1:
        raise CodeObjectError(
            f"not an AMDGPU code object: ELF class {ident[4]} / data {ident[5]} "
            "(AMDGPU code objects are ELF64 little-endian)"
        )
    if hdr[2] != EM_AMDGPU:
        raise CodeObjectError(
            f"not an AMDGPU code object: e_machine {hdr[2]} (expected {EM_AMDGPU}, EM_AMDGPU)"
        )
    if ident[7] != ELFOSABI_AMDGPU_HSA:
        raise CodeObjectError(
            f"not the HSA OS ABI: EI_OSABI {ident[7]} (expected {ELFOSABI_AMDGPU_HSA}, "
            "ELFOSABI_AMDGPU_HSA); compile for the amdgcn-amd-amdhsa triple"
        )
    abi = ident[8]
    if abi not in ABI_VERSION_TO_CODE_OBJECT:
        old = _OLD_ABI_VERSION.get(abi)
        what = f"code object v{old}" if old else f"EI_ABIVERSION {abi}"
        raise CodeObjectError(
            f"unsupported code object version: {what} (EI_ABIVERSION {abi}); this reader "
            "supports v4, v5 and v6: recompile with -mcode-object-version=5"
        )
    if hdr[1] not in (ET_REL, ET_DYN):
        raise CodeObjectError(
            f"not an AMDGPU code object: e_type {hdr[1]} (expected ET_DYN or ET_REL)"
        )
    return hdr


def _sections(data: bytes, shoff: int, shentsize: int, shnum: int, shstrndx: int
              ) -> list[_Section]:
    if shnum == 0:
        return []
    if shentsize != _SHDR.size:
        raise CodeObjectError(f"corrupt ELF: e_shentsize {shentsize} (expected 64)")
    end = shoff + shnum * shentsize
    if end > len(data):
        raise CodeObjectError(
            f"truncated section header table at offset 0x{shoff:x}: {shnum} headers "
            f"need {shnum * shentsize} bytes, the file has {len(data)}"
        )
    raw = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names = b""
    if 0 < shstrndx < shnum:
        s = raw[shstrndx]
        if s[4] + s[5] > len(data):
            raise CodeObjectError(
                f"truncated section .shstrtab at offset 0x{s[4]:x}: {s[5]} bytes run "
                f"past the end of the file ({len(data)} bytes)"
            )
        names = data[s[4]:s[4] + s[5]]
    return [
        _Section(i, _cstr(names, r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[9])
        for i, r in enumerate(raw)
    ]


def _segments(data: bytes, phoff: int, phentsize: int, phnum: int,
              sections: list[_Section] | None = None
              ) -> tuple[list[LoadSegment], list[tuple[int, int]]]:
    if phnum == 0:
        return [], []
    if phentsize != _PHDR.size:
        raise CodeObjectError(f"corrupt ELF: e_phentsize {phentsize} (expected 56)")
    if phoff + phnum * phentsize > len(data):
        raise CodeObjectError(
            f"truncated program header table at offset 0x{phoff:x}: {phnum} headers "
            f"need {phnum * phentsize} bytes, the file has {len(data)}"
        )
    loads, notes = [], []
    for i in range(phnum):
        p_type, p_flags, off, vaddr, _paddr, filesz, memsz, _align = _PHDR.unpack_from(
            data, phoff + i * phentsize)
        if p_type in (PT_LOAD, PT_NOTE) and off + filesz > len(data):
            raise CodeObjectError(
                f"truncated segment {i} at offset 0x{off:x}: {filesz} bytes run past the "
                f"end of the file ({len(data)} bytes)"
            )
        if p_type == PT_LOAD:
            if filesz > memsz:
                raise CodeObjectError(
                    f"corrupt ELF: segment {i} at offset 0x{off:x} has filesz {filesz} > "
                    f"memsz {memsz}"
                )
            _check_segment_size(i, off, vaddr, filesz, memsz, sections or [])
            loads.append(LoadSegment(vaddr, memsz, off, filesz, p_flags))
        elif p_type == PT_NOTE:
            notes.append((off, filesz))
    return loads, notes


def _check_segment_size(i: int, off: int, vaddr: int, filesz: int, memsz: int,
                        sections: list[_Section]) -> None:
    """What a loader checks before it reserves address space: the segment ends below
    MAX_IMAGE_BYTES, and its zero-filled tail (memsz - filesz) is what its SHT_NOBITS
    sections need (when the object has section headers)."""
    if vaddr + memsz > MAX_IMAGE_BYTES:
        raise CodeObjectError(
            f"corrupt ELF: segment {i} at offset 0x{off:x} spans 0x{vaddr:x}+0x{memsz:x}, past "
            f"the {MAX_IMAGE_BYTES >> 30} GiB a code object may map; its p_memsz or p_vaddr "
            "is damaged"
        )
    if not sections or memsz <= filesz:
        return
    bss = sum(s.size for s in sections if s.type == SHT_NOBITS and s.flags & 2  # SHF_ALLOC
              and vaddr <= s.addr < vaddr + memsz)
    if memsz - filesz > bss + _BSS_SLACK:
        raise CodeObjectError(
            f"corrupt ELF: segment {i} at offset 0x{off:x} has p_memsz 0x{memsz:x}, "
            f"0x{memsz - filesz:x} bytes past its p_filesz 0x{filesz:x}, but its SHT_NOBITS "
            f"sections hold 0x{bss:x}; its p_memsz is damaged"
        )


def _symbols(data: bytes, sections: list[_Section], sec: _Section) -> list[ElfSymbol]:
    body = sec.body(data)
    strtab = b""
    if 0 < sec.link < len(sections):
        strtab = sections[sec.link].body(data)
    out = []
    for off in range(0, len(body) - _SYM.size + 1, _SYM.size):
        st_name, info, _other, shndx, value, size = _SYM.unpack_from(body, off)
        out.append(ElfSymbol(
            _cstr(strtab, st_name), value, size,
            _SYM_TYPES.get(info & 0xF, str(info & 0xF)),
            _SYM_BINDINGS.get(info >> 4, str(info >> 4)), shndx))
    return out


def _relocations(data: bytes, sections: list[_Section], sec: _Section,
                 cache: dict[int, list[ElfSymbol]]) -> list[Relocation]:
    body = sec.body(data)
    syms: list[ElfSymbol] = []
    if 0 < sec.link < len(sections) and sections[sec.link].type in (SHT_SYMTAB, SHT_DYNSYM):
        if sec.link not in cache:
            cache[sec.link] = _symbols(data, sections, sections[sec.link])
        syms = cache[sec.link]
    out = []
    for off in range(0, len(body) - _RELA.size + 1, _RELA.size):
        r_offset, r_info, addend = _RELA.unpack_from(body, off)
        index, rtype = r_info >> 32, r_info & 0xFFFFFFFF
        sym = syms[index] if 0 < index < len(syms) else None
        out.append(Relocation(r_offset, rtype, sym.name if sym else "",
                              sym.value if sym else 0, addend, sec.name))
    return out


def _notes(blob: bytes, base: int) -> list[tuple[str, int, bytes]]:
    """(name, type, desc) of each note in a note section/segment (4-byte alignment)."""
    out = []
    pos = 0
    while pos + 12 <= len(blob):
        namesz, descsz, ntype = _NOTE.unpack_from(blob, pos)
        name_at = pos + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        end = desc_at + ((descsz + 3) & ~3)
        if desc_at + descsz > len(blob):
            raise CodeObjectError(
                f"truncated note at offset 0x{base + pos:x}: its {descsz}-byte body runs "
                "past the end of the note section"
            )
        name = blob[name_at:name_at + namesz].rstrip(b"\0").decode("utf-8", "replace")
        out.append((name, ntype, blob[desc_at:desc_at + descsz]))
        pos = end
    return out


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------
_MISSING = object()


def _field(d: dict, key: str, kind: type | tuple, where: str, default: Any = _MISSING) -> Any:
    value = d.get(key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise CodeObjectError(f"corrupt metadata: {where} has no {key}")
        return default
    if kind is int and isinstance(value, bool):
        ok = False
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise CodeObjectError(
            f"corrupt metadata: {where} {key} is {type(value).__name__} {value!r:.40}, "
            f"expected {getattr(kind, '__name__', kind)}"
        )
    return value


def _decode_metadata(desc: bytes) -> dict[str, Any]:
    try:
        meta = msgpack.unpackb(desc, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several types for bad input
        raise CodeObjectError(
            f"corrupt metadata: NT_AMDGPU_METADATA is not valid msgpack ({type(exc).__name__}:"
            f" {str(exc).splitlines()[0] if str(exc) else 'no detail'})"
        ) from None
    if not isinstance(meta, dict):
        raise CodeObjectError(
            f"corrupt metadata: the root is a {type(meta).__name__}, expected a map"
        )
    return meta


def _kernel_args(kmeta: dict, where: str) -> list[KernelArg]:
    raw_args = _field(kmeta, ".args", list, where, [])
    args = []
    for i, a in enumerate(raw_args):
        if not isinstance(a, dict):
            raise CodeObjectError(f"corrupt metadata: {where} arg {i} is not a map")
        aw = f"{where} arg {i}"
        kind = _field(a, ".value_kind", str, aw)
        offset = _field(a, ".offset", int, aw)
        size = _field(a, ".size", int, aw)
        if offset < 0 or size < 0:
            raise CodeObjectError(f"corrupt metadata: {aw} has offset {offset} size {size}")
        args.append(KernelArg(
            name=_field(a, ".name", str, aw, None),
            type_name=_field(a, ".type_name", str, aw, None),
            offset=offset,
            size=size,
            value_kind=kind,
            address_space=_field(a, ".address_space", str, aw, None),
            actual_access=_field(a, ".actual_access", str, aw, None),
            is_hidden=kind.startswith("hidden_"),
            is_const=bool(a.get(".is_const", False)),
        ))
    return args


def _reqd_size(kmeta: dict, where: str) -> tuple[int, int, int] | None:
    value = kmeta.get(".reqd_workgroup_size")
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise CodeObjectError(
            f"corrupt metadata: {where} .reqd_workgroup_size is {value!r:.40}, expected 3 ints"
        )
    return (value[0], value[1], value[2])


def _check_name(name: str, where: str) -> None:
    """Kernel and symbol names are C strings: no NUL, no control characters, not empty."""
    bad = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if not name or bad is not None or len(name) > MAX_KERNEL_NAME:
        why = ("is empty" if not name else f"holds the control character {bad!r}"
               if bad is not None else f"is {len(name)} characters long (limit "
               f"{MAX_KERNEL_NAME})")
        raise CodeObjectError(f"corrupt metadata: {where} {name[:40]!r} {why}")


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


def _check_descriptor(info: KernelInfo) -> None:
    d = info.descriptor
    pairs = [
        ("kernarg_segment_size", info.kernarg_segment_size, "kernarg_size", d.kernarg_size),
        ("group_segment_fixed_size", info.group_segment_fixed_size,
         "group_segment_fixed_size", d.group_segment_fixed_size),
        ("private_segment_fixed_size", info.private_segment_fixed_size,
         "private_segment_fixed_size", d.private_segment_fixed_size),
        ("wavefront_size", info.wavefront_size, "wavefront_size32",
         32 if d.wavefront_size32 else 64),
    ]
    for meta_name, meta_value, desc_name, desc_value in pairs:
        if meta_value != desc_value:
            raise CodeObjectError(
                f"metadata and descriptor disagree: kernel {info.name!r} .{meta_name} is "
                f"{meta_value} but {info.symbol} {desc_name} gives {desc_value}; "
                "the code object is corrupt or was patched by hand"
            )


def _check_code_entry(info: KernelInfo, loads: list[LoadSegment]) -> None:
    entry = info.kernel_code_address
    if not any(s.executable and s.vaddr <= entry < s.vaddr + s.memsz for s in loads):
        raise CodeObjectError(
            f"corrupt ELF: kernel {info.name!r} code entry 0x{entry:x} ({info.symbol} at "
            f"0x{info.descriptor_address:x} + kernel_code_entry_byte_offset "
            f"{info.descriptor.kernel_code_entry_byte_offset}) lies in no executable segment"
        )


def _descriptor_offset(sym: ElfSymbol, elf_type: int, sections: list[_Section],
                       loads: list[LoadSegment], size: int) -> int:
    """File offset of a symbol's `size` bytes."""
    if elf_type == ET_REL or not loads:
        if not 0 < sym.shndx < len(sections):
            raise CodeObjectError(
                f"corrupt ELF: symbol {sym.name} has section index {sym.shndx}"
            )
        sec = sections[sym.shndx]
        base = sym.value - (sec.addr if elf_type != ET_REL else 0)
        if base < 0 or base + size > sec.size:
            raise CodeObjectError(
                f"corrupt ELF: symbol {sym.name} (0x{sym.value:x}) lies outside its section "
                f"{sec.name}"
            )
        return sec.offset + base
    for seg in loads:
        if seg.vaddr <= sym.value and sym.value + size <= seg.vaddr + seg.filesz:
            return seg.offset + (sym.value - seg.vaddr)
    raise CodeObjectError(
        f"corrupt ELF: kernel descriptor {sym.name} at 0x{sym.value:x} lies in no loaded "
        "segment"
    )


def _kernels(meta: dict, data: bytes, elf_type: int, symbols: dict[str, ElfSymbol],
             sections: list[_Section], loads: list[LoadSegment], family: str | None = None,
             processor: str = "") -> dict[str, KernelInfo]:
    raw = _field(meta, "amdhsa.kernels", list, "the root", [])
    kernels: dict[str, KernelInfo] = {}
    for i, k in enumerate(raw):
        if not isinstance(k, dict):
            raise CodeObjectError(f"corrupt metadata: amdhsa.kernels[{i}] is not a map")
        name = _field(k, ".name", str, f"amdhsa.kernels[{i}]")
        _check_name(name, f"amdhsa.kernels[{i}] .name")
        where = f"kernel {name!r}"
        symbol = _field(k, ".symbol", str, where, name + ".kd")
        _check_name(symbol, f"{where} .symbol")
        sym = symbols.get(symbol)
        if sym is None:
            raise CodeObjectError(
                f"corrupt metadata: {where} names descriptor symbol {symbol!r}, "
                "which the symbol table lacks"
            )
        offset = _descriptor_offset(sym, elf_type, sections, loads, KernelDescriptor.SIZE)
        if offset + 64 > len(data):
            raise CodeObjectError(
                f"truncated kernel descriptor {symbol} at offset 0x{offset:x}: "
                f"the file has {len(data)} bytes"
            )
        descriptor = KernelDescriptor.from_bytes(data[offset:offset + 64])
        info = KernelInfo(
            name=name,
            symbol=symbol,
            args=_kernel_args(k, where),
            kernarg_segment_size=_field(k, ".kernarg_segment_size", int, where),
            kernarg_segment_align=_field(k, ".kernarg_segment_align", int, where),
            group_segment_fixed_size=_field(k, ".group_segment_fixed_size", int, where),
            private_segment_fixed_size=_field(k, ".private_segment_fixed_size", int, where),
            wavefront_size=_field(k, ".wavefront_size", int, where),
            sgpr_count=_field(k, ".sgpr_count", int, where),
            vgpr_count=_field(k, ".vgpr_count", int, where),
            max_flat_workgroup_size=_field(k, ".max_flat_workgroup_size", int, where),
            reqd_workgroup_size=_reqd_size(k, where),
            uniform_work_group_size=bool(k.get(".uniform_work_group_size", False)),
            descriptor=descriptor,
            descriptor_address=sym.value,
            agpr_count=_field(k, ".agpr_count", int, where, 0),
            sgpr_spill_count=_field(k, ".sgpr_spill_count", int, where, 0),
            vgpr_spill_count=_field(k, ".vgpr_spill_count", int, where, 0),
            uses_dynamic_stack=bool(k.get(".uses_dynamic_stack", False)),
            language=_field(k, ".language", str, where, None),
            metadata=k,
        )
        if info.wavefront_size not in (32, 64):
            raise CodeObjectError(
                f"corrupt metadata: {where} .wavefront_size is {info.wavefront_size}"
            )
        for arg in info.args:
            if arg.offset + arg.size > info.kernarg_segment_size:
                raise CodeObjectError(
                    f"corrupt metadata: {where} arg at offset {arg.offset} size {arg.size} "
                    f"ends past .kernarg_segment_size {info.kernarg_segment_size}"
                )
        _check_descriptor(info)
        if family is not None:
            _check_descriptor_bits(name, symbol, data[offset:offset + 64], descriptor, family,
                                   processor)
        if elf_type == ET_DYN:
            _check_code_entry(info, loads)
        if name in kernels:
            raise CodeObjectError(f"corrupt metadata: kernel {name!r} listed twice")
        kernels[name] = info
    return kernels


def _processor_in(meta_target: object) -> str | None:
    """The processor in an amdhsa.target string: "amdgcn-amd-amdhsa--gfx942:xnack-" (LLVM)
    or "amdgpu9.42-amd-amdhsa-unknown-gfx942" (IREE) both give "gfx942"."""
    if not isinstance(meta_target, str):
        return None
    head = meta_target.split(":", 1)[0]
    at = head.rfind("gfx")
    return head[at:] if at >= 0 and len(head) > at + 3 else None


def read_code_object(data: bytes | bytearray | memoryview) -> CodeObject:
    """Parse an AMDGPU code object. Raises CodeObjectError with one line on any problem."""
    data = bytes(data)
    if data.startswith(_OFFLOAD_MAGIC) or data[:4] == _COMPRESSED_OFFLOAD_MAGIC:
        data = _unwrap_offload_bundle(data)
    hdr = _check_header(data)
    (ident, e_type, _machine, _version, _entry, phoff, shoff, e_flags, _ehsize,
     phentsize, phnum, shentsize, shnum, shstrndx) = hdr
    version = ABI_VERSION_TO_CODE_OBJECT[ident[8]]
    sections = _sections(data, shoff, shentsize, shnum, shstrndx)
    loads, note_segments = _segments(data, phoff, phentsize, phnum, sections)
    if e_type == ET_DYN and not loads:
        raise CodeObjectError("corrupt ELF: a linked code object without PT_LOAD segments")

    # Symbols: .dynsym first (what the loader sees), then .symtab fills in the rest.
    symbols: dict[str, ElfSymbol] = {}
    sym_cache: dict[int, list[ElfSymbol]] = {}
    for wanted in (SHT_DYNSYM, SHT_SYMTAB):
        for sec in sections:
            if sec.type == wanted:
                sym_cache[sec.index] = _symbols(data, sections, sec)
                for sym in sym_cache[sec.index]:
                    if sym.name and (sym.name not in symbols
                                     or symbols[sym.name].binding == "LOCAL"):
                        symbols[sym.name] = sym

    relocations: list[Relocation] = []
    for sec in sections:
        if sec.type == SHT_RELA:
            relocations.extend(_relocations(data, sections, sec, sym_cache))

    # Notes: from note sections, or from PT_NOTE segments when sections are stripped.
    blobs = [(s.body(data), s.offset) for s in sections if s.type == SHT_NOTE]
    if not blobs:
        blobs = [(data[off:off + size], off) for off, size in note_segments]
    metadata_desc = None
    for blob, base in blobs:
        for name, ntype, desc in _notes(blob, base):
            if name == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
                metadata_desc = desc
                break
        if metadata_desc is not None:
            break
    if metadata_desc is None:
        raise CodeObjectError(
            "corrupt metadata: no NT_AMDGPU_METADATA note (owner AMDGPU, type 32); "
            "the object was stripped or built for code object v2/v3"
        )
    meta = _decode_metadata(metadata_desc)

    meta_target = meta.get("amdhsa.target")
    meta_name = _processor_in(meta_target)
    target_id = target_id_from_flags(e_flags, meta_name)
    if meta_name and meta_name != target_id.split(":", 1)[0]:
        raise CodeObjectError(
            f"corrupt metadata: amdhsa.target {meta_target!r} names {meta_name} but e_flags "
            f"(EF_AMDGPU_MACH 0x{e_flags & 0xFF:x}) say {target_id.split(':', 1)[0]}"
        )
    try:
        family = _targets.TargetId.parse(target_id).target.family
    except CodeObjectError:  # a processor this project has no table for: fields unchecked
        family = None
    kernels = _kernels(meta, data, e_type, symbols, sections, loads, family,
                       target_id.split(":", 1)[0])
    return CodeObject(
        target_id=target_id,
        mach=e_flags & EF_AMDGPU_MACH,
        code_object_version=version,
        kernels=kernels,
        segments=loads,
        symbols=symbols,
        relocations=relocations,
        data=data,
        elf_type=e_type,
        e_flags=e_flags,
        generic_version=(e_flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT) & 0xFF if version >= 6
        else 0,
        metadata=meta,
    )
