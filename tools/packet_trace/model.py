"""What the views share: packet type names, a numpy view of packet records, kernel symbol
tables, kernarg decoding by name, dependency matching and time filters."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ground.errors import AmdgpuError
from packets import trace
from packets.layout import AmdVendorFormat, PacketType

# --- packet types ------------------------------------------------------------------------

# Type codes: the header's type byte, plus the AMD vendor packets BARRIER_VALUE and
# EXT_KERNEL_DISPATCH (gfx1250's dispatch packet), and UNKNOWN.
TYPE_NAMES = (
    "vendor_specific", "invalid", "kernel_dispatch", "barrier_and", "agent_dispatch",
    "barrier_or", "barrier_value", "unknown", "ext_kernel_dispatch", "pm4_ib",
)
BARRIER_VALUE_CODE = 6
UNKNOWN_CODE = 7
EXT_DISPATCH_CODE = 8
PM4_IB_CODE = 9
# Codes of the packets that launch a kernel.
DISPATCH_CODES = (int(PacketType.KERNEL_DISPATCH), EXT_DISPATCH_CODE)
TYPE_ALIASES = {
    "dispatch": "kernel_dispatch", "kernel": "kernel_dispatch", "and": "barrier_and",
    "or": "barrier_or", "value": "barrier_value", "agent": "agent_dispatch",
    "ext": "ext_kernel_dispatch", "ext_dispatch": "ext_kernel_dispatch",
    "vendor": "vendor_specific", "pm4": "pm4_ib",
}

# Packet record fields a vectorised view needs: the record of packets.trace.PACKET_RECORD
# with the packet's own fields at their hsa.h offsets (the raw packet starts at byte 48).
_RAW = 48
PACKET_VIEW = np.dtype(
    {
        "names": ["queue_id", "packet_id", "reserve_ns", "publish_ns", "doorbell_ns",
                  "header", "amd_format", "kernel_object", "completion_signal"],
        "formats": ["<u8", "<u8", "<u8", "<u8", "<u8", "<u2", "u1", "<u8", "<u8"],
        "offsets": [8, 16, 24, 32, 40, _RAW, _RAW + 2, _RAW + 32, _RAW + 56],
        "itemsize": trace.PACKET_RECORD.itemsize,
    }
)


def type_codes(header: np.ndarray, amd_format: np.ndarray) -> np.ndarray:
    """Type code (index into TYPE_NAMES) of each packet, from its header and vendor format."""
    code = (header & 0xFF).astype(np.int64)
    code[code > int(PacketType.BARRIER_OR)] = UNKNOWN_CODE
    vendor_value = (code == int(PacketType.VENDOR_SPECIFIC)) & (
        amd_format == int(AmdVendorFormat.BARRIER_VALUE))
    code[vendor_value] = BARRIER_VALUE_CODE
    code[(code == int(PacketType.VENDOR_SPECIFIC)) & (
        amd_format == int(AmdVendorFormat.EXT_KERNEL_DISPATCH))] = EXT_DISPATCH_CODE
    code[(code == int(PacketType.VENDOR_SPECIFIC)) & (
        amd_format == int(AmdVendorFormat.PM4_IB))] = PM4_IB_CODE
    return code


def type_name(fields: dict) -> str:
    """The TYPE_NAMES name of a `packets.decode` dict."""
    kind = fields["kind"]
    return kind if kind in TYPE_NAMES else "unknown"


def normalize_type(name: str) -> str:
    """A --type argument as a TYPE_NAMES name (aliases such as 'dispatch' or 'and' too)."""
    key = name.strip().lower().replace("-", "_")
    key = TYPE_ALIASES.get(key, key)
    if key not in TYPE_NAMES:
        raise AmdgpuError(
            f"unknown packet type {name!r}; use one of: {', '.join(TYPE_NAMES)} "
            f"(or {', '.join(TYPE_ALIASES)})"
        )
    return key


def scope_name(value) -> str:
    """Short fence scope names for tables: none, agent, sys."""
    return {0: "none", 1: "agent", 2: "sys"}.get(int(value), str(int(value)))


# --- kernel symbols and kernarg decoding -------------------------------------------------

@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str  # buffer | value | hidden | dynamic_lds | bytes
    offset: int
    size: int
    type_name: str = ""


@dataclass(frozen=True)
class ArgValue:
    spec: ArgSpec
    value: object  # int, float or bytes
    text: str

    @property
    def hidden(self) -> bool:
        return self.spec.kind == "hidden"


_KIND_ALIASES = {
    "global_buffer": "buffer", "buffer": "buffer", "by_value": "value", "value": "value",
    "dynamic_shared_pointer": "dynamic_lds", "dynamic_lds": "dynamic_lds", "bytes": "bytes",
    "hidden": "hidden",
}
_FLOAT_CODES = {"half": "e", "_float16": "e", "float": "f", "double": "d"}
_INT_CODES = {
    "char": "b", "signed char": "b", "unsigned char": "B", "uchar": "B", "bool": "?",
    "short": "h", "unsigned short": "H", "ushort": "H", "int": "i", "unsigned int": "I",
    "uint": "I", "long": "q", "unsigned long": "Q", "ulong": "Q", "long long": "q",
    "unsigned long long": "Q", "size_t": "Q", "int8_t": "b", "uint8_t": "B", "int16_t": "h",
    "uint16_t": "H", "int32_t": "i", "uint32_t": "I", "int64_t": "q", "uint64_t": "Q",
    "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u8": "B", "u16": "H", "u32": "I",
    "u64": "Q", "f16": "e", "f32": "f", "f64": "d",
}
_UNSIGNED_BY_SIZE = {1: "B", 2: "H", 4: "I", 8: "Q"}


def parse_layout(layout: object) -> list[ArgSpec]:
    """Argument specs from a KERNEL_SYMBOL layout: a list of maps with name, offset, size and
    kind (driver form: buffer|value|bytes|dynamic_lds|hidden) or value_kind (code-object
    form: global_buffer, by_value, hidden_*), optionally type/type_name; or {"args": [...]}.
    Entries that do not fit are skipped (a layout only helps reading, it never fails)."""
    if isinstance(layout, dict):
        layout = layout.get("args", [])
    specs: list[ArgSpec] = []
    if not isinstance(layout, (list, tuple)):
        return specs
    for i, entry in enumerate(layout):
        if not isinstance(entry, dict):
            continue
        try:
            offset, size = int(entry["offset"]), int(entry["size"])
        except (KeyError, TypeError, ValueError):
            continue
        raw_kind = str(entry.get("kind") or entry.get("value_kind") or "bytes")
        name = str(entry.get("name") or "")
        if raw_kind.startswith("hidden_"):
            name, kind = name or raw_kind, "hidden"
        else:
            kind = _KIND_ALIASES.get(raw_kind, "bytes")
        type_name = str(entry.get("type") or entry.get("type_name") or "")
        specs.append(ArgSpec(name or f"arg{i}", kind, offset, size, type_name))
    return sorted(specs, key=lambda s: s.offset)


def decode_kernargs(specs: list[ArgSpec], data: bytes) -> list[ArgValue]:
    """The value of each argument in `data` (args past the end of `data` are left out)."""
    out = []
    for spec in specs:
        chunk = data[spec.offset:spec.offset + spec.size]
        if len(chunk) < spec.size or spec.size <= 0:
            continue
        out.append(_decode_arg(spec, chunk))
    return out


def _decode_arg(spec: ArgSpec, chunk: bytes) -> ArgValue:
    size = spec.size
    if spec.kind == "buffer" and size == 8:
        (v,) = struct.unpack("<Q", chunk)
        return ArgValue(spec, v, f"0x{v:x}")
    t = spec.type_name.replace("const ", "").strip().rstrip("*").strip().lower()
    code = _FLOAT_CODES.get(t) or _INT_CODES.get(t)
    if code and struct.calcsize("<" + code) == size:
        (v,) = struct.unpack("<" + code, chunk)
        if isinstance(v, float):
            return ArgValue(spec, v, repr(v))
        return ArgValue(spec, int(v), str(int(v)))
    code = _UNSIGNED_BY_SIZE.get(size)
    if code is None:
        return ArgValue(spec, chunk, chunk.hex())
    (v,) = struct.unpack("<" + code, chunk)
    if spec.kind == "hidden" and size == 8 and v > 0xFFFF:
        return ArgValue(spec, v, f"0x{v:x}")
    text = str(v)
    if spec.kind == "value" and size == 4 and not t:
        text += _float_hint(chunk, v)
    return ArgValue(spec, v, text)


def _float_hint(chunk: bytes, as_int: int) -> str:
    """An untyped 4-byte value that reads as a plain float (2.0, 0.5) gets a hint."""
    if as_int < 1 << 23:
        return ""
    (f,) = struct.unpack("<f", chunk)
    if not math.isfinite(f) or not 1e-6 <= abs(f) <= 1e9:
        return ""
    short = f"{f:.6g}"
    return f" (f32 {short})" if len(short) <= 8 else ""


class SymbolTable:
    """kernel_object -> (name, arg specs), from KERNEL_SYMBOL records and packet symbols."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.layouts: dict[int, list[ArgSpec]] = {}

    def add(self, record: trace.KernelSymbolRecord) -> None:
        self.names[record.kernel_object] = record.name
        specs = parse_layout(record.layout)
        if specs:
            self.layouts[record.kernel_object] = specs

    def learn(self, kernel_object: int, symbol: str | None) -> None:
        if symbol and kernel_object not in self.names:
            self.names[kernel_object] = symbol

    def name(self, kernel_object: int) -> str:
        return self.names.get(kernel_object) or f"kernel@0x{kernel_object:x}"


# --- dependencies ------------------------------------------------------------------------

PacketKey = tuple[int, int]  # (queue id, packet id)


@dataclass(frozen=True)
class Edge:
    source: PacketKey | None  # None: no packet of the trace completes that signal
    target: PacketKey
    signal: int
    kind: str  # barrier_and | barrier_or | barrier_value | ext_kernel_dispatch (dep_signal)


def waited_signals(fields: dict) -> list[int]:
    """The signals a packet waits on (barrier dep signals, a barrier-value signal, the
    dep_signal of a gfx1250 extended dispatch)."""
    kind = fields["kind"]
    if kind == "ext_kernel_dispatch" and fields["dep_signal"]:
        return [fields["dep_signal"]]
    if kind in ("barrier_and", "barrier_or"):
        return [s for s in fields["dep_signal"] if s]
    if kind == "barrier_value" and fields["signal"]:
        return [fields["signal"]]
    return []


class DependencyTracker:
    """Matches waited signals to the latest earlier packet whose completion_signal they are.

    Streams: it keeps one entry per distinct completion signal, not per packet. With timeline
    signals shared by many packets, the latest producer before the waiter is taken."""

    def __init__(self) -> None:
        self.producers: dict[int, tuple[PacketKey, object]] = {}

    def observe(self, key: PacketKey, fields: dict, anchor: object = None) -> list[
            tuple[Edge, object]]:
        """Edges into `key` (each with the producer's anchor), then register `key` as the
        producer of its completion signal (anchor: whatever the caller wants back)."""
        edges = []
        for signal in waited_signals(fields):
            found = self.producers.get(signal)
            edges.append((Edge(found[0] if found else None, key, signal, fields["kind"]),
                          found[1] if found else None))
        done = fields.get("completion_signal", 0)
        if done:
            self.producers[done] = (key, anchor)
        return edges


def jsonable(value):
    """msgpack-decoded record content as JSON-able values (bytes as hex, keys as str)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


# --- time filters -----------------------------------------------------------------------

_TIME = re.compile(r"^\s*\+?(\d+(?:\.\d*)?)\s*(ns|us|ms|s)\s*$")
_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class TimeBound:
    ns: int
    relative: bool

    def resolve(self, origin: int) -> int:
        return origin + self.ns if self.relative else self.ns


def parse_time(text: str) -> TimeBound:
    """'123456789' (absolute host ns) or '25us' / '+1.5ms' / '2s' (after the first packet)."""
    text = text.strip()
    if text.isdigit():
        return TimeBound(int(text), False)
    m = _TIME.match(text)
    if not m:
        raise AmdgpuError(
            f"cannot read the time {text!r}: give absolute ns (123456789) or a time after the "
            "first packet with a unit (25us, 1.5ms, 2s)"
        )
    return TimeBound(int(float(m.group(1)) * _UNITS[m.group(2)]), True)


def packet_records(path) -> Iterator[tuple[trace.PacketRecord, SymbolTable]]:
    """Packet records of `path` in order, with the symbol table as known so far."""
    symbols = SymbolTable()
    for rec in trace.read_trace(path):
        if isinstance(rec, trace.KernelSymbolRecord):
            symbols.add(rec)
        elif isinstance(rec, trace.PacketRecord):
            yield rec, symbols
