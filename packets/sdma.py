"""SDMA packets: the ones ROCr's BlitSdma and tinygrad's AMDCopyQueue write into an SDMA
queue (copy linear, constant fill, fence, trap, poll regmem, atomic, timestamp, write, NOP,
the gfx10+ GCR cache request, indirect buffer), as builders and a decoder.

Facts from the Linux kernel's vega10_sdma_pkt_open.h (SDMA 4, gfx9), navi10_sdma_pkt_open.h
(SDMA 5) and sdma_v6_0_0_pkt_open.h (SDMA 6, gfx11; gfx12's SDMA 7 keeps these packets),
checked byte-exact by tests/test_packets_sdma.py with a compiled C oracle. ROCr's
core/inc/sdma_registers.h declares the same dwords (its structs pad every packet to 8 dwords
with zeros, and a zero dword is a one-dword NOP, so a padded packet decodes the same way):

| packet | dwords | fields |
|---|---|---|
| COPY_LINEAR (op 1, sub 0) | 7 | count = bytes - 1, parameter, src lo/hi, dst lo/hi |
| COPY_LINEAR_SUB_WINDOW (op 1, sub 4) | 13 | element, src/dst (lo/hi, x/y, z/pitch, slice), rect |
| CONST_FILL (op 11) | 5 | header.fillsize (2: dword), dst lo/hi, data, count = bytes - 1 |
| FENCE (op 5) | 4 | addr lo/hi, 32-bit data (header.mtype on gfx10+) |
| TRAP (op 6) | 2 | int_context (28 bits): the KFD event id |
| POLL_REGMEM (op 8) | 6 | header.hdp_flush/func/mem_poll, addr lo/hi, value, mask, interval/retry |
| ATOMIC (op 10) | 8 | header.operation (47: ADD64), addr lo/hi, src lo/hi, cmp lo/hi, loop |
| TIMESTAMP (op 13, sub 2) | 3 | addr lo/hi: the 64-bit global timestamp |
| WRITE (op 2, sub 0) | 4 + n | dst lo/hi, count = n - 1, n data dwords |
| GCR_REQ (op 17) | 5 | cache control (SDMA 5+) |
| INDIRECT (op 4) | 6 | header.vmid, IB lo/hi, size in dwords, CSA lo/hi |
| NOP (op 0) | 1 + count | header.count extra dwords |

The copy and fill counts are bytes - 1 on SDMA 4 and later (22 bits before SDMA 6, 30 from
SDMA 6).

COPY_LINEAR_SUB_WINDOW (ROCr's SDMA_PKT_COPY_LINEAR_RECT, what hipMemcpy2D/3D of pitched
memory becomes) copies a rect_x x rect_y x rect_z box of elements of 2**elementsize bytes
between two linear windows: the element (i, j, k) of a window is at address + ((x + i) +
(y + j) * (pitch + 1) + (z + k) * (slice_pitch + 1)) * 2**elementsize; the rect and pitch
fields are counts - 1 (ROCr's BuildCopyRectCommand writes them so). Field widths are the
kernel's headers' for SDMA 4/5/6 (`SUB_WINDOW_FIELDS`); SDMA 7 (gfx12) moved and widened
them (ROCr's SDMA_PKT_COPY_LINEAR_RECT_GFX12; Linux 6.1 has no SDMA 7 header).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ground.errors import PacketError


class Op(IntEnum):
    NOP = 0
    COPY = 1
    WRITE = 2
    INDIRECT = 4
    FENCE = 5
    TRAP = 6
    POLL_REGMEM = 8
    ATOMIC = 10
    CONST_FILL = 11
    TIMESTAMP = 13
    GCR_REQ = 17


SUBOP_COPY_LINEAR = 0
SUBOP_COPY_LINEAR_SUB_WINDOW = 4  # the kernel's SDMA_SUBOP_COPY_LINEAR_SUB_WIND
# the other COPY sub-ops of the kernel's headers, for the refusal's message
COPY_SUBOPS = {1: "tiled", 3: "SOA", 5: "tiled sub-window", 6: "tiled-to-tiled sub-window",
               7: "dirty page", 8: "linear physical"}
SUBOP_TIMESTAMP_GET_GLOBAL = 2
ATOMIC_ADD64 = 47  # ROCr's SDMA_ATOMIC_ADD64 (atomic_op field, header bits 25..31)
ATOMIC_CMPSWAP64 = 40  # TC_OP_ATOMIC_CMPSWAP_RTN_64 (tinygrad's SDMA cmpswap)
FILLSIZE_DWORD = 2
POLL_FUNCTIONS = ("always", "<", "<=", "==", "!=", ">=", ">")


def count_bits(family: str) -> int:
    """Width of the copy/fill byte-count field: 22 bits on SDMA 4/5, 30 from SDMA 6."""
    return 22 if family in ("gfx9", "gfx10") else 30


def max_copy_bytes(family: str) -> int:
    return 1 << count_bits(family)


def _u32(name: str, value: int) -> int:
    value = int(value)
    if not 0 <= value <= 0xFFFF_FFFF:
        raise PacketError(f"SDMA field {name}={value} does not fit 32 bits")
    return value


def _lo_hi(address: int) -> tuple[int, int]:
    address = int(address)
    if not 0 <= address < 1 << 64:
        raise PacketError(f"SDMA address 0x{address:x} does not fit 64 bits")
    return address & 0xFFFF_FFFF, address >> 32


def _count(family: str, size: int, what: str) -> int:
    if not 0 < size <= max_copy_bytes(family):
        raise PacketError(f"SDMA {what} of {size} bytes: one packet moves 1.."
                          f"{max_copy_bytes(family)} bytes on {family}; split it")
    return size - 1


def header(op: int, sub_op: int = 0, extra: int = 0) -> int:
    return (int(op) & 0xFF) | ((sub_op & 0xFF) << 8) | extra


def copy_linear(family: str, dst: int, src: int, size: int) -> list[int]:
    s_lo, s_hi = _lo_hi(src)
    d_lo, d_hi = _lo_hi(dst)
    return [header(Op.COPY, SUBOP_COPY_LINEAR), _count(family, size, "copy"), 0, s_lo, s_hi,
            d_lo, d_hi]


@dataclass(frozen=True)
class SubWindowFields:
    """Bit widths of COPY_LINEAR_SUB_WINDOW's fields: x/y (dwords 3, 8 at bits 0 and 16;
    rect dword 11), z (dwords 4, 9 at bit 0; rect dword 12), pitch (dwords 4, 9 at
    `pitch_shift`), slice pitch (dwords 5, 10 at bit 0)."""

    xy: int
    z: int
    pitch_shift: int
    pitch: int
    slice: int


SUB_WINDOW_FIELDS = {"gfx9": SubWindowFields(14, 11, 13, 19, 28),
                     "gfx10": SubWindowFields(14, 13, 13, 19, 28),
                     "gfx11": SubWindowFields(14, 13, 13, 19, 28),
                     "gfx12": SubWindowFields(16, 14, 16, 16, 32)}


@dataclass(frozen=True)
class Window:
    """One side of a sub-window copy: a dword-aligned base address, the start (x, y, z) and
    the row and slice pitches, all in elements."""

    address: int
    x: int = 0
    y: int = 0
    z: int = 0
    pitch: int = 1
    slice: int = 1


def _field(name: str, value: int, bits: int) -> int:
    if not 0 <= value < 1 << bits:
        raise PacketError(f"SDMA sub-window {name}={value} does not fit {bits} bits")
    return value


def copy_sub_window(family: str, element: int, src: Window, dst: Window,
                    rect: tuple[int, int, int]) -> list[int]:
    """Copy rect = (x, y, z) elements of 2**element bytes from window src to window dst."""
    f = SUB_WINDOW_FIELDS[family]
    if not 0 <= element <= 4:
        raise PacketError(f"SDMA sub-window element size 2**{element}: 1..16 bytes")
    out = [header(Op.COPY, SUBOP_COPY_LINEAR_SUB_WINDOW, element << 29)]
    for side, w in (("src", src), ("dst", dst)):
        if w.address & 3:
            raise PacketError(f"SDMA sub-window {side} address 0x{w.address:x} is not dword "
                              "aligned")
        lo, hi = _lo_hi(w.address)
        out += [lo, hi, _field(f"{side} x", w.x, f.xy) | _field(f"{side} y", w.y, f.xy) << 16,
                _field(f"{side} z", w.z, f.z)
                | _field(f"{side} pitch - 1", w.pitch - 1, f.pitch) << f.pitch_shift,
                _field(f"{side} slice pitch - 1", w.slice - 1, f.slice)]
    x, y, z = rect
    out += [_field("rect x - 1", x - 1, f.xy) | _field("rect y - 1", y - 1, f.xy) << 16,
            _field("rect z - 1", z - 1, f.z)]
    return out


def read_sub_window(family: str, words: Sequence[int] | np.ndarray
                    ) -> tuple[int, Window, Window, tuple[int, int, int]]:
    """(element, src, dst, rect) of the 13-dword COPY_LINEAR_SUB_WINDOW packet `words`."""
    f = SUB_WINDOW_FIELDS[family]
    xy, z = (1 << f.xy) - 1, (1 << f.z) - 1

    def window(i: int) -> Window:
        a, b, c = int(words[i + 2]), int(words[i + 3]), int(words[i + 4])
        return Window(int(words[i + 1]) << 32 | int(words[i]), a & xy, a >> 16 & xy, b & z,
                      (b >> f.pitch_shift & (1 << f.pitch) - 1) + 1,
                      (c & (1 << f.slice) - 1) + 1)

    r = int(words[11])
    return (int(words[0]) >> 29 & 7, window(1), window(6),
            ((r & xy) + 1, (r >> 16 & xy) + 1, (int(words[12]) & z) + 1))


def constant_fill(family: str, dst: int, value: int, size: int) -> list[int]:
    """Fill `size` bytes (a multiple of 4) at `dst` with the dword `value`."""
    if size % 4 or int(dst) % 4:
        raise PacketError(f"SDMA constant fill of {size} bytes at 0x{int(dst):x}: dword fills "
                          "need 4-byte aligned address and size")
    d_lo, d_hi = _lo_hi(dst)
    return [header(Op.CONST_FILL, 0, FILLSIZE_DWORD << 30), d_lo, d_hi, _u32("data", value),
            _count(family, size, "fill")]


def fence(family: str, address: int, value: int) -> list[int]:
    """Write the dword `value` to `address` (gfx10+: mtype 3, uncached, as tinygrad sets)."""
    lo, hi = _lo_hi(address)
    extra = 0 if family == "gfx9" else 3 << 16
    return [header(Op.FENCE, 0, extra), lo, hi, _u32("data", value)]


def trap(int_context: int) -> list[int]:
    if not 0 <= int_context < 1 << 28:
        raise PacketError(f"SDMA trap context {int_context} does not fit 28 bits")
    return [header(Op.TRAP), int_context]


def poll_regmem(address: int, value: int, mask: int = 0xFFFF_FFFF, function: int = 3,
                memory: bool = True, hdp_flush: bool = False, interval: int = 10,
                retry: int = 0xFFF) -> list[int]:
    """Wait until (dword at `address` & mask) <function> value (function 3: ==)."""
    lo, hi = _lo_hi(address)
    extra = (int(hdp_flush) << 26) | ((function & 7) << 28) | (int(memory) << 31)
    return [header(Op.POLL_REGMEM, 0, extra), lo, hi, _u32("value", value),
            _u32("mask", mask), (interval & 0xFFFF) | ((retry & 0xFFF) << 16)]


def hdp_flush() -> list[int]:
    """ROCr's SDMA_PKT_HDP_FLUSH constant {0x8, 0x0, 0x80000000, 0, 0, 0}."""
    return [0x8, 0x0, 0x8000_0000, 0, 0, 0]


def atomic(address: int, source: int, compare: int = 0, operation: int = ATOMIC_ADD64,
           loop_interval: int = 0) -> list[int]:
    lo, hi = _lo_hi(address)
    src_lo, src_hi = _lo_hi(source & ((1 << 64) - 1))
    cmp_lo, cmp_hi = _lo_hi(compare & ((1 << 64) - 1))
    return [header(Op.ATOMIC, 0, (operation & 0x7F) << 25), lo, hi, src_lo, src_hi, cmp_lo,
            cmp_hi, loop_interval & 0x1FFF]


def timestamp(address: int) -> list[int]:
    """Write the 64-bit global timestamp to `address` (8-byte aligned)."""
    lo, hi = _lo_hi(address)
    if lo & 7:
        raise PacketError(f"SDMA timestamp address 0x{address:x} is not 8-byte aligned")
    return [header(Op.TIMESTAMP, SUBOP_TIMESTAMP_GET_GLOBAL), lo, hi]


def write(address: int, values: Sequence[int]) -> list[int]:
    if not values:
        raise PacketError("SDMA write of no dwords")
    lo, hi = _lo_hi(address)
    return [header(Op.WRITE), lo, hi, len(values) - 1, *(_u32("data", v) for v in values)]


def gcr(control: int = 0) -> list[int]:
    """GCR_REQ (SDMA 5+): a cache write-back/invalidate request (no-op in the virtual GPU)."""
    return [header(Op.GCR_REQ), 0, (control & 0xFFFF) << 16, (control >> 16) & 0x7, 0]


def indirect(address: int, dwords: int, vmid: int = 0) -> list[int]:
    lo, hi = _lo_hi(address)
    return [header(Op.INDIRECT, 0, (vmid & 0xF) << 16), lo, hi, dwords, 0, 0]


def nop(dwords: int = 1) -> list[int]:
    if dwords < 1:
        raise PacketError(f"an SDMA NOP fills at least 1 dword, not {dwords}")
    return [header(Op.NOP, 0, (dwords - 1) << 16), *([0] * (dwords - 1))]


def as_bytes(dwords: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(dwords)}I", *dwords)


# --- decoding --------------------------------------------------------------------------------
_FIXED = {Op.COPY: 7, Op.INDIRECT: 6, Op.FENCE: 4, Op.TRAP: 2, Op.POLL_REGMEM: 6,
          Op.ATOMIC: 8, Op.CONST_FILL: 5, Op.TIMESTAMP: 3, Op.GCR_REQ: 5}


def packet_size(dwords: Sequence[int] | np.ndarray, offset: int) -> int:
    """Dwords of the SDMA packet at `offset` (PacketError for an unknown opcode/sub-op)."""
    h = int(dwords[offset])
    op, sub = h & 0xFF, (h >> 8) & 0xFF
    if op == Op.NOP:
        return 1 + ((h >> 16) & 0x3FFF)
    if op == Op.WRITE:
        if offset + 3 >= len(dwords):
            return 4
        return 4 + (int(dwords[offset + 3]) & 0xFFFFF) + 1
    if op == Op.COPY and sub == SUBOP_COPY_LINEAR_SUB_WINDOW:
        return 13
    if op == Op.COPY and sub != SUBOP_COPY_LINEAR:
        kind = COPY_SUBOPS.get(sub, "unknown")
        raise PacketError(f"SDMA dword {offset}: COPY sub-op {sub} ({kind} copy) is not "
                          "modeled (linear copies, sub-op 0, and linear sub-windows, sub-op 4, "
                          "are)")
    if op == Op.TIMESTAMP and sub != SUBOP_TIMESTAMP_GET_GLOBAL:
        raise PacketError(f"SDMA dword {offset}: TIMESTAMP sub-op {sub} (GET_GLOBAL, 2, is "
                          "modeled)")
    size = _FIXED.get(op)  # type: ignore[call-overload]
    if size is None:
        raise PacketError(f"SDMA dword {offset}: opcode {op} (header 0x{h:08x}) is not one "
                          f"the virtual SDMA engine runs ({', '.join(o.name for o in Op)})")
    return size


@dataclass(frozen=True)
class SdmaPacket:
    offset: int
    op: int
    body: tuple[int, ...]  # the dwords after the header
    header: int

    @property
    def name(self) -> str:
        try:
            return Op(self.op).name
        except ValueError:
            return f"OP_{self.op}"


def decode(dwords: Sequence[int] | np.ndarray) -> list[SdmaPacket]:
    out, i, n = [], 0, len(dwords)
    while i < n:
        size = packet_size(dwords, i)
        if i + size > n:
            raise PacketError(f"SDMA dword {i}: packet 0x{int(dwords[i]):08x} needs {size} "
                              f"dwords, the stream has {n - i} left")
        h = int(dwords[i])
        out.append(SdmaPacket(i, h & 0xFF, tuple(int(x) for x in dwords[i + 1:i + size]), h))
        i += size
    return out
