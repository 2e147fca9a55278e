"""ELF64 for AMDGPU code objects: header checks, sections, PT_LOAD segments, symbols, RELA
relocations, notes, and the target id that e_flags encode."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ground.errors import CodeObjectError
from hsa.abi import targets as _targets

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

