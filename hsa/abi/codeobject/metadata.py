"""The NT_AMDGPU_METADATA note (msgpack, AMDGPUUsage "Code Object V4+ Metadata"): decoding,
typed field reads with one-line errors, kernel arguments and kernel records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from ground.errors import CodeObjectError

from .descriptor import KernelDescriptor

#: The longest kernel name the reader accepts (symbol names are C strings, kept short).
MAX_KERNEL_NAME = 1024

#: The .value_kind strings LLVM's metadata verifier accepts (AMDGPUMetadataVerifier.cpp).
VALUE_KINDS = frozenset({
    "by_value", "global_buffer", "dynamic_shared_pointer", "sampler", "image", "pipe",
    "queue", "hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z",
    "hidden_group_size_x", "hidden_group_size_y", "hidden_group_size_z",
    "hidden_remainder_x", "hidden_remainder_y", "hidden_remainder_z",
    "hidden_global_offset_x", "hidden_global_offset_y", "hidden_global_offset_z",
    "hidden_grid_dims", "hidden_none", "hidden_printf_buffer", "hidden_hostcall_buffer",
    "hidden_heap_v1", "hidden_default_queue", "hidden_completion_action",
    "hidden_multigrid_sync_arg", "hidden_dynamic_lds_size", "hidden_private_base",
    "hidden_shared_base", "hidden_queue_ptr",
})

#: Code object v5+ implicit arguments: (offset from the start of the hidden block, size),
#: AMDGPUUsage's "Code Object V5 Kernel Argument Metadata" table. hidden_none pads.
V5_HIDDEN_LAYOUT: dict[str, tuple[int, int]] = {
    "hidden_block_count_x": (0, 4), "hidden_block_count_y": (4, 4),
    "hidden_block_count_z": (8, 4), "hidden_group_size_x": (12, 2),
    "hidden_group_size_y": (14, 2), "hidden_group_size_z": (16, 2),
    "hidden_remainder_x": (18, 2), "hidden_remainder_y": (20, 2),
    "hidden_remainder_z": (22, 2), "hidden_global_offset_x": (40, 8),
    "hidden_global_offset_y": (48, 8), "hidden_global_offset_z": (56, 8),
    "hidden_grid_dims": (64, 2), "hidden_printf_buffer": (72, 8),
    "hidden_hostcall_buffer": (80, 8), "hidden_multigrid_sync_arg": (88, 8),
    "hidden_heap_v1": (96, 8), "hidden_default_queue": (104, 8),
    "hidden_completion_action": (112, 8), "hidden_dynamic_lds_size": (120, 4),
    "hidden_private_base": (192, 4), "hidden_shared_base": (196, 4),
    "hidden_queue_ptr": (200, 8),
}

#: Sizes every code object version gives these kinds (v4 lists fewer hidden kinds, all
#: 8-byte pointers or offsets); kinds not here have free sizes (by_value, hidden_none).
_FIXED_SIZES: dict[str, tuple[int, ...]] = {
    **{kind: (size,) for kind, (_off, size) in V5_HIDDEN_LAYOUT.items()},
    "global_buffer": (4, 8),  # 8; 4 for a pointer into a 32-bit address space
    "dynamic_shared_pointer": (4, 8),
    "sampler": (8,), "image": (8,), "pipe": (8,), "queue": (8,),
}

#: Address spaces whose pointers are 32-bit (a global_buffer argument in any other is 8).
_SHORT_POINTER_SPACES = ("local", "private", "region")

#: by_value arguments whose .type_name is a C scalar must have that scalar's size.
SCALAR_SIZES: dict[str, int] = {
    **dict.fromkeys(("char", "signed char", "unsigned char", "uchar", "bool", "int8_t",
                     "uint8_t"), 1),
    **dict.fromkeys(("short", "unsigned short", "ushort", "int16_t", "uint16_t", "half",
                     "_Float16"), 2),
    **dict.fromkeys(("int", "unsigned int", "uint", "int32_t", "uint32_t", "float"), 4),
    **dict.fromkeys(("long", "unsigned long", "ulong", "long long", "unsigned long long",
                     "size_t", "int64_t", "uint64_t", "double"), 8),
}


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




_CORRUPT = "corrupt metadata (rebuild the code object)"


def _describe(arg: KernelArg, index: int) -> str:
    return f"arg {index} ({arg.value_kind}, offset {arg.offset}, size {arg.size})"


def check_arg_layout(args: list[KernelArg], segment_size: int, segment_align: int,
                     version: int, where: str) -> None:
    """The kernel's argument records must describe one consistent kernarg segment: known
    kinds with their sizes, inside the segment, naturally aligned where the ABI fixes the
    size, not overlapping, hidden arguments after the explicit ones and (v5+) at their
    places in the implicit-argument block. A driver fills the block from these records, so
    a wrong one would write a value where the kernel reads another."""
    if segment_align <= 0 or segment_align & (segment_align - 1):
        raise CodeObjectError(
            f"{_CORRUPT}: {where} .kernarg_segment_align {segment_align} is not a "
            f"power of two")
    for i, a in enumerate(args):
        what = f"{_CORRUPT}: {where} {_describe(a, i)}"
        if a.value_kind not in VALUE_KINDS:
            raise CodeObjectError(f"{what}: unknown .value_kind (LLVM's AMDGPUUsage lists "
                                  f"the kinds)")
        sizes = _FIXED_SIZES.get(a.value_kind)
        if a.value_kind == "global_buffer" and a.address_space not in _SHORT_POINTER_SPACES:
            sizes = (8,)
        if sizes is not None and a.size not in sizes:
            raise CodeObjectError(
                f"{what}: a {a.value_kind} argument is {' or '.join(map(str, sizes))} bytes")
        if sizes is not None and a.offset % a.size:
            raise CodeObjectError(f"{what}: not aligned to its size")
        if a.value_kind == "by_value" and a.type_name:
            scalar = SCALAR_SIZES.get(a.type_name.replace("const ", "").strip())
            if scalar is not None and scalar != a.size:
                raise CodeObjectError(
                    f"{what}: its type {a.type_name!r} is {scalar} bytes")
        if a.offset + a.size > segment_size:
            raise CodeObjectError(f"{what}: ends past .kernarg_segment_size {segment_size}")
    ordered = sorted(((a.offset, i, a) for i, a in enumerate(args) if a.size),
                     key=lambda t: (t[0], t[1]))
    for (_o, i, a), (_o2, j, b) in zip(ordered, ordered[1:], strict=False):
        if b.offset < a.offset + a.size:
            raise CodeObjectError(
                f"{_CORRUPT}: {where} {_describe(b, j)} overlaps {_describe(a, i)}")
    explicit_end = max((a.offset + a.size for a in args if not a.is_hidden), default=0)
    for i, a in enumerate(args):
        if a.is_hidden and a.size == 0:
            raise CodeObjectError(f"{_CORRUPT}: {where} hidden {_describe(a, i)} has no bytes")
    hidden = [(i, a) for i, a in enumerate(args) if a.is_hidden]
    for i, a in hidden:
        if a.offset < explicit_end:
            raise CodeObjectError(
                f"{_CORRUPT}: {where} hidden {_describe(a, i)} lies before the end of "
                f"the explicit arguments ({explicit_end})")
    if version < 5:
        return
    base = None
    for i, a in hidden:
        place = V5_HIDDEN_LAYOUT.get(a.value_kind)
        if place is None:
            continue
        start = a.offset - place[0]
        if base is None:
            base, first = start, (i, a)
        elif start != base:
            raise CodeObjectError(
                f"{_CORRUPT}: {where} hidden {_describe(a, i)} is not at +{place[0]} of "
                f"the implicit-argument block that {_describe(first[1], first[0])} places at "
                f"{base} (code object v5 layout)")
    if base is not None and (base < explicit_end or base % 8):
        why = ("before the end of the explicit arguments" if base < explicit_end
               else "not 8-byte aligned")
        raise CodeObjectError(f"{_CORRUPT}: {where} the implicit-argument block starts at "
                              f"{base}, {why} (code object v5 layout)")
