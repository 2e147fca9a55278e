"""Decode 64-byte AQL packets into dicts with hsa.h field names, encode them back, and
format them as text (one line for logs and traces, several lines for inspection).

A decoded dict always holds "kind" (kernel_dispatch, ext_kernel_dispatch, barrier_and,
barrier_or, agent_dispatch, barrier_value, vendor_specific, invalid or unknown), "type"
(PacketType, or
the raw number), "header", "barrier", "acquire_fence_scope" and "release_fence_scope", then
the hsa.h fields of that packet. Two names differ from hsa.h: the agent dispatch packet's
`type` field is "agent_type" (so "type" stays the packet type), and the vendor header's
`header.AmdFormat` is flattened to "AmdFormat". An ext_kernel_dispatch dict also holds
derived keys (not packet fields): "dims" and "grid_size_x/y/z" (cluster_count x cluster_size
x workgroup_size), so tools can treat both dispatch kinds alike.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

from ground.errors import PacketError

from . import build
from .layout import (
    PACKET_SIZE,
    AmdVendorFormat,
    BarrierValueCondition,
    PacketType,
    decode_header,
)

_KERNEL_DISPATCH = struct.Struct("<HHHHHHIIIIIQQQQ")
_BARRIER = struct.Struct("<HHI5QQQ")
_AGENT_DISPATCH = struct.Struct("<HHIQ4QQQ")
_BARRIER_VALUE = struct.Struct("<HBBIQqqIIQQQ")
_EXT_KERNEL_DISPATCH = struct.Struct("<HBBHHHHIHHBBBBIIQQQQ")

# Packet kinds that launch a kernel (the classic packet and gfx1250's extended one).
DISPATCH_KINDS = ("kernel_dispatch", "ext_kernel_dispatch")

_KINDS = {
    PacketType.KERNEL_DISPATCH: "kernel_dispatch",
    PacketType.BARRIER_AND: "barrier_and",
    PacketType.BARRIER_OR: "barrier_or",
    PacketType.AGENT_DISPATCH: "agent_dispatch",
    PacketType.INVALID: "invalid",
}

# Fields shown in hex by format_packet.
_HEX_FIELDS = {"kernel_object", "kernarg_address", "completion_signal", "return_address",
               "dep_signal",
               "signal", "mask", "header"}


def packet_bytes(data) -> bytes:
    """64 raw bytes from bytes, bytearray, memoryview, a numpy record or a 64-byte array."""
    if isinstance(data, bytes):
        raw = data
    elif isinstance(data, (np.ndarray, np.void)):
        raw = data.tobytes()
    else:
        try:
            raw = bytes(data)
        except TypeError:
            raise PacketError(f"cannot read a packet from {type(data).__name__}") from None
    if len(raw) != PACKET_SIZE:
        raise PacketError(f"a packet is {PACKET_SIZE} bytes, got {len(raw)}")
    return raw


def decode(data) -> dict:
    """Decode one 64-byte packet into a dict (see the module docstring for the keys)."""
    raw = packet_bytes(data)
    header = raw[0] | raw[1] << 8
    fields: dict = {"kind": "unknown", "header": header}
    fields.update(decode_header(header))
    ptype = fields["type"]
    if ptype == PacketType.KERNEL_DISPATCH:
        v = _KERNEL_DISPATCH.unpack(raw)
        fields.update(
            kind="kernel_dispatch", setup=v[1], dims=v[1] & 3,
            workgroup_size_x=v[2], workgroup_size_y=v[3], workgroup_size_z=v[4],
            reserved0=v[5], grid_size_x=v[6], grid_size_y=v[7], grid_size_z=v[8],
            private_segment_size=v[9], group_segment_size=v[10], kernel_object=v[11],
            kernarg_address=v[12], reserved2=v[13], completion_signal=v[14],
        )
    elif ptype in (PacketType.BARRIER_AND, PacketType.BARRIER_OR):
        v = _BARRIER.unpack(raw)
        fields.update(
            kind=_KINDS[ptype], reserved0=v[1], reserved1=v[2], dep_signal=list(v[3:8]),
            reserved2=v[8], completion_signal=v[9],
        )
    elif ptype == PacketType.AGENT_DISPATCH:
        v = _AGENT_DISPATCH.unpack(raw)
        fields.update(
            kind="agent_dispatch", agent_type=v[1], reserved0=v[2], return_address=v[3],
            arg=list(v[4:8]), reserved2=v[8], completion_signal=v[9],
        )
    elif ptype == PacketType.VENDOR_SPECIFIC:
        fields["kind"] = "vendor_specific"
        fields["AmdFormat"] = raw[2]
        fields["reserved"] = raw[3]
        if raw[2] == AmdVendorFormat.EXT_KERNEL_DISPATCH:
            del fields["AmdFormat"], fields["reserved"]
            fields.update(_ext_dispatch_fields(raw))
        elif raw[2] == AmdVendorFormat.PM4_IB:
            # ROCr's PM4_IB packet: an INDIRECT_BUFFER jump at dwords 1-4 (packets.pm4)
            w = struct.unpack_from("<16I", raw)
            fields.update(
                kind="pm4_ib", ib_jump_header=w[1],
                ib_address=(w[3] & 0xFFFF) << 32 | (w[2] & 0xFFFF_FFFC),
                ib_dwords=w[4] & 0xFFFFF, dw_cnt_remain=w[5],
                completion_signal=struct.unpack_from("<Q", raw, 56)[0], raw=raw,
            )
        elif raw[2] == AmdVendorFormat.BARRIER_VALUE:
            v = _BARRIER_VALUE.unpack(raw)
            fields.update(
                kind="barrier_value", reserved0=v[3], signal=v[4], value=v[5], mask=v[6],
                cond=_condition(v[7]), reserved1=v[8], reserved2=v[9], reserved3=v[10],
                completion_signal=v[11],
            )
        else:
            fields["raw"] = raw
    else:
        if ptype == PacketType.INVALID:
            fields["kind"] = "invalid"
        fields["raw"] = raw
    return fields


def _ext_dispatch_fields(raw: bytes) -> dict:
    v = _EXT_KERNEL_DISPATCH.unpack(raw)
    f = dict(
        kind="ext_kernel_dispatch", amd_format=v[1], setup=v[2], dims=v[2] & 3,
        workgroup_size_x=v[3], workgroup_size_y=v[4], workgroup_size_z=v[5], reserved0=v[6],
        cluster_count_x=v[7], cluster_count_y=v[8], cluster_count_z=v[9],
        cluster_size_x=v[10], cluster_size_y=v[11], cluster_size_z=v[12], perf_hint=v[13],
        private_segment_size=v[14], group_segment_size=v[15], kernel_object=v[16],
        kernarg_address=v[17], dep_signal=v[18], completion_signal=v[19],
    )
    for d in "xyz":
        f[f"grid_size_{d}"] = (f[f"cluster_count_{d}"] * f[f"cluster_size_{d}"]
                               * f[f"workgroup_size_{d}"])
    return f


def decode_many(block) -> list[dict]:
    """Decode a block of N packets (structured array, (N, 64) uint8, or N*64 bytes)."""
    raw = block.tobytes() if isinstance(block, np.ndarray) else bytes(block)
    if len(raw) % PACKET_SIZE:
        raise PacketError(f"a packet block is a multiple of 64 bytes, got {len(raw)}")
    return [decode(raw[i:i + PACKET_SIZE]) for i in range(0, len(raw), PACKET_SIZE)]


def encode(fields: dict) -> bytes:
    """Build the packet a `decode` dict describes (reserved fields are written as 0)."""
    kind = fields.get("kind")
    common = {
        "barrier": fields.get("barrier", True),
        "acquire_fence_scope": int(fields.get("acquire_fence_scope", 2)),
        "release_fence_scope": int(fields.get("release_fence_scope", 2)),
    }
    if kind == "kernel_dispatch":
        return build.kernel_dispatch(
            workgroup_size=(fields["workgroup_size_x"], fields.get("workgroup_size_y", 1),
                            fields.get("workgroup_size_z", 1)),
            grid_size=(fields["grid_size_x"], fields.get("grid_size_y", 1),
                       fields.get("grid_size_z", 1)),
            dims=fields.get("dims"),
            private_segment_size=fields.get("private_segment_size", 0),
            group_segment_size=fields.get("group_segment_size", 0),
            kernel_object=fields["kernel_object"],
            kernarg_address=fields["kernarg_address"],
            completion_signal=fields.get("completion_signal", 0),
            **common,
        )
    if kind == "ext_kernel_dispatch":
        return build.ext_kernel_dispatch(
            workgroup_size=tuple(fields.get(f"workgroup_size_{d}", 1) for d in "xyz"),
            cluster_count=tuple(fields.get(f"cluster_count_{d}", 1) for d in "xyz"),
            cluster_size=tuple(fields.get(f"cluster_size_{d}", 1) for d in "xyz"),
            dims=fields.get("dims"),
            private_segment_size=fields.get("private_segment_size", 0),
            group_segment_size=fields.get("group_segment_size", 0),
            kernel_object=fields["kernel_object"],
            kernarg_address=fields["kernarg_address"],
            dep_signal=fields.get("dep_signal", 0),
            completion_signal=fields.get("completion_signal", 0),
            perf_hint=fields.get("perf_hint", 0),
            **common,
        )
    if kind in ("barrier_and", "barrier_or"):
        builder = build.barrier_and if kind == "barrier_and" else build.barrier_or
        return builder(dep_signals=fields.get("dep_signal", ()),
                       completion_signal=fields.get("completion_signal", 0), **common)
    if kind == "agent_dispatch":
        return build.agent_dispatch(
            type=fields["agent_type"], return_address=fields.get("return_address", 0),
            args=fields.get("arg", ()), completion_signal=fields.get("completion_signal", 0),
            **common,
        )
    if kind == "barrier_value":
        return build.barrier_value(
            signal=fields["signal"], value=fields["value"], mask=fields.get("mask", -1),
            cond=int(fields["cond"]), completion_signal=fields.get("completion_signal", 0),
            **common,
        )
    if "raw" in fields:
        return packet_bytes(fields["raw"])
    raise PacketError(f"cannot encode a packet of kind {kind!r}; decode() output expected")


def format_packet(data, multiline: bool = False) -> str:
    """Text form of one packet: one line (default) or one field per line."""
    fields = data if isinstance(data, dict) else decode(data)
    name = _name(fields["type"])
    if fields["kind"] == "barrier_value":
        name = "AMD_BARRIER_VALUE"
    elif fields["kind"] == "ext_kernel_dispatch":
        name = "AMD_EXT_KERNEL_DISPATCH"
    elif fields["kind"] == "pm4_ib":
        name = "AMD_PM4_IB"
    if multiline:
        lines = [f"{name} (header 0x{fields['header']:04x})"]
        for key, value in fields.items():
            if key in ("kind", "type", "header") or (key == "raw" and name == "AMD_PM4_IB"):
                continue
            lines.append(f"  {key}: {_value(key, value)}")
        return "\n".join(lines)
    parts = [name]
    if fields["kind"] in ("invalid", "unknown"):
        return f"{name} header=0x{fields['header']:04x}"
    parts.append("barrier" if fields["barrier"] else "nobarrier")
    parts.append(f"acq={_name(fields['acquire_fence_scope'])}")
    parts.append(f"rel={_name(fields['release_fence_scope'])}")
    kind = fields["kind"]
    if kind == "kernel_dispatch":
        parts += [
            f"dims={fields['dims']}",
            "wg={workgroup_size_x}x{workgroup_size_y}x{workgroup_size_z}".format(**fields),
            "grid={grid_size_x}x{grid_size_y}x{grid_size_z}".format(**fields),
            f"private={fields['private_segment_size']}",
            f"group={fields['group_segment_size']}",
            f"kernel_object=0x{fields['kernel_object']:x}",
            f"kernarg=0x{fields['kernarg_address']:x}",
        ]
    elif kind == "ext_kernel_dispatch":
        parts += [
            f"dims={fields['dims']}",
            "wg={workgroup_size_x}x{workgroup_size_y}x{workgroup_size_z}".format(**fields),
            "clusters={cluster_count_x}x{cluster_count_y}x{cluster_count_z}".format(**fields),
            "cluster={cluster_size_x}x{cluster_size_y}x{cluster_size_z}".format(**fields),
            "grid={grid_size_x}x{grid_size_y}x{grid_size_z}".format(**fields),
            f"private={fields['private_segment_size']}",
            f"group={fields['group_segment_size']}",
            f"kernel_object=0x{fields['kernel_object']:x}",
            f"kernarg=0x{fields['kernarg_address']:x}",
        ]
        if fields["perf_hint"]:
            parts.append(f"perf_hint={fields['perf_hint']}")
        if fields["dep_signal"]:
            parts.append(f"dep_signal=0x{fields['dep_signal']:x}")
    elif kind in ("barrier_and", "barrier_or"):
        deps = [f"0x{d:x}" for d in fields["dep_signal"] if d]
        parts.append(f"deps=[{','.join(deps)}]")
    elif kind == "agent_dispatch":
        parts.append(f"agent_type={fields['agent_type']}")
        parts.append(f"return=0x{fields['return_address']:x}")
        parts.append("args=[" + ",".join(f"0x{a:x}" for a in fields["arg"]) + "]")
    elif kind == "pm4_ib":
        parts.append(f"ib=0x{fields['ib_address']:x} dwords={fields['ib_dwords']}")
    elif kind == "barrier_value":
        parts.append(f"signal=0x{fields['signal']:x}")
        parts.append(f"(value & 0x{fields['mask'] & (2**64 - 1):x}) "
                     f"{_name(fields['cond'])} {fields['value']}")
    else:
        parts.append(f"AmdFormat={fields['AmdFormat']}")
    parts.append(f"completion_signal=0x{fields.get('completion_signal', 0):x}")
    return " ".join(parts)


def format_packets(block, multiline: bool = False) -> Iterable[str]:
    """Text forms of every packet of a block."""
    return [format_packet(f, multiline) for f in decode_many(block)]


def _condition(value: int) -> BarrierValueCondition | int:
    try:
        return BarrierValueCondition(value)
    except ValueError:
        return value


def _name(value) -> str:
    return value.name if hasattr(value, "name") else str(value)


def _value(key: str, value) -> str:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return "[" + ", ".join(f"0x{v:x}" for v in value) + "]"
    if hasattr(value, "name"):
        return f"{value.name} ({int(value)})"
    if key in _HEX_FIELDS and isinstance(value, int):
        return f"0x{value & (2**64 - 1):x}"
    return str(value)
