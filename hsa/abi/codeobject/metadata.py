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


