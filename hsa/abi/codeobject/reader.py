"""The code-object reader: one pass over ELF, metadata and descriptors into a CodeObject,
checking that they agree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ground.errors import CodeObjectError
from hsa.abi import targets as _targets

from .bundle import (
    _COMPRESSED_OFFLOAD_MAGIC,
    _OFFLOAD_MAGIC,
    _unwrap_offload_bundle,
)
from .descriptor import (
    KernelDescriptor,
    _check_descriptor_bits,
)
from .elf import (
    ABI_VERSION_TO_CODE_OBJECT,
    EF_AMDGPU_GENERIC_VERSION_SHIFT,
    EF_AMDGPU_MACH,
    ET_DYN,
    ET_REL,
    NT_AMDGPU_METADATA,
    SHT_DYNSYM,
    SHT_NOTE,
    SHT_RELA,
    SHT_SYMTAB,
    ElfSymbol,
    LoadSegment,
    Relocation,
    _check_header,
    _notes,
    _relocations,
    _Section,
    _sections,
    _segments,
    _symbols,
    target_id_from_flags,
)
from .metadata import (
    KernelInfo,
    _check_name,
    _decode_metadata,
    _field,
    _kernel_args,
    _reqd_size,
    check_arg_layout,
)


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
             processor: str = "", version: int = 5) -> dict[str, KernelInfo]:
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
        check_arg_layout(info.args, info.kernarg_segment_size, info.kernarg_segment_align,
                         version, where)
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
        family = _targets.lookup(target_id).family
    except CodeObjectError:  # a processor this project has no table for: fields unchecked
        family = None
    else:  # a known processor: e_flags must not claim features it lacks (xnack on gfx1250)
        try:
            _targets.TargetId.parse(target_id)
        except CodeObjectError as e:
            raise CodeObjectError(f"corrupt ELF: e_flags 0x{e_flags:x} give {e}") from None
    kernels = _kernels(meta, data, e_type, symbols, sections, loads, family,
                       target_id.split(":", 1)[0], version)
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
