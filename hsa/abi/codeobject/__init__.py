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

One module per part of the format: `elf` (headers, segments, symbols, relocations, notes,
e_flags), `descriptor` (the kernel descriptor and its refused bits), `metadata` (the msgpack
note, kernel arguments and records), `bundle` (clang offload bundles) and `reader` (the pass
that puts them together). Every public name is re-exported here:
`hsa.abi.codeobject.X` is the import path to use.
"""

from .bundle import (
    is_offload_bundle,
    read_offload_bundle,
)
from .descriptor import (
    KernelDescriptor,
)
from .elf import (
    ABI_VERSION_TO_CODE_OBJECT,
    EF_AMDGPU_FEATURE_SRAMECC_V4,
    EF_AMDGPU_FEATURE_XNACK_V4,
    EF_AMDGPU_GENERIC_VERSION_SHIFT,
    EF_AMDGPU_MACH,
    ELFOSABI_AMDGPU_HSA,
    EM_AMDGPU,
    ET_DYN,
    ET_REL,
    MAX_IMAGE_BYTES,
    NT_AMDGPU_METADATA,
    PT_LOAD,
    PT_NOTE,
    RELOCATION_TYPES,
    SHT_DYNSYM,
    SHT_NOBITS,
    SHT_NOTE,
    SHT_RELA,
    SHT_SYMTAB,
    ElfSymbol,
    LoadSegment,
    Relocation,
    target_id_from_flags,
)
from .metadata import (
    MAX_KERNEL_NAME,
    KernelArg,
    KernelInfo,
)
from .reader import (
    CodeObject,
    read_code_object,
)

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
    "is_offload_bundle",
    "target_id_from_flags",
    "ABI_VERSION_TO_CODE_OBJECT",
    "EF_AMDGPU_FEATURE_SRAMECC_V4",
    "EF_AMDGPU_FEATURE_XNACK_V4",
    "EF_AMDGPU_GENERIC_VERSION_SHIFT",
    "EF_AMDGPU_MACH",
    "ELFOSABI_AMDGPU_HSA",
    "EM_AMDGPU",
    "ET_DYN",
    "ET_REL",
    "MAX_IMAGE_BYTES",
    "MAX_KERNEL_NAME",
    "NT_AMDGPU_METADATA",
    "PT_LOAD",
    "PT_NOTE",
    "RELOCATION_TYPES",
    "SHT_DYNSYM",
    "SHT_NOBITS",
    "SHT_NOTE",
    "SHT_RELA",
    "SHT_SYMTAB",
]
