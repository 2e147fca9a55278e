"""Typed buffer formats: the conversions of buffer_*_format_* and tbuffer_* (gfx11).

A format is the 7-bit unified format of gfx11 (the V#'s FORMAT, word 3 bits 18:12, for
MUBUF; the instruction's format field for MTBUF). Its number -> name table is LLVM's, read
back from `llvm-mc-19` disassembling tbuffer_load_format_x with each value (format 1 is
BUF_FMT_8_UNORM, printed as the default). A name lists its components from the most
significant bits down, as AMD's format names do (2_10_10_10 holds x in bits 9:0 and w in
31:30; Mesa maps R10G10B10A2 to it), so x is the last one listed. No component crosses a
dword.

Loads give each component as a 32-bit register value: float for UNORM (v / (2**n - 1)),
SNORM (max(v / (2**(n-1) - 1), -1)), USCALED/SSCALED (the integer as a float) and FLOAT;
the integer for UINT/SINT (sign-extended). Components the format lacks read as 0, w as 1
(1.0 for the float kinds). The V#'s DST_SEL_X..W (word 3 bits 11:0; 0 -> 0, 1 -> 1,
4..7 -> x..w) then pick each result channel; MTBUF takes the V#'s selects too. D16 forms
convert each channel to 16 bits: f16 for the float kinds, the low 16 bits for integers.
Stores convert back: float -> UNORM/SNORM scaled, clamped and rounded to nearest even,
-> USCALED/SSCALED rounded and clamped to the field, -> 16-bit or 11/10-bit floats rounded to
nearest; UINT/SINT keep the low n bits. Components the store does not supply keep what
memory holds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from hsa.virtual.isa import mem
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup

if TYPE_CHECKING:
    from hsa.virtual.isa.executor import BatchContext

u32, f32 = np.uint32, np.float32

# gfx11 unified buffer formats (LLVM's BUF_FMT_* names, by number)
_NAMES = {
    1: "8_UNORM", 2: "8_SNORM", 3: "8_USCALED", 4: "8_SSCALED", 5: "8_UINT", 6: "8_SINT",
    7: "16_UNORM", 8: "16_SNORM", 9: "16_USCALED", 10: "16_SSCALED", 11: "16_UINT",
    12: "16_SINT", 13: "16_FLOAT", 14: "8_8_UNORM", 15: "8_8_SNORM", 16: "8_8_USCALED",
    17: "8_8_SSCALED", 18: "8_8_UINT", 19: "8_8_SINT", 20: "32_UINT", 21: "32_SINT",
    22: "32_FLOAT", 23: "16_16_UNORM", 24: "16_16_SNORM", 25: "16_16_USCALED",
    26: "16_16_SSCALED", 27: "16_16_UINT", 28: "16_16_SINT", 29: "16_16_FLOAT",
    30: "10_11_11_FLOAT", 31: "11_11_10_FLOAT", 32: "10_10_10_2_UNORM", 33: "10_10_10_2_SNORM",
    34: "10_10_10_2_UINT", 35: "10_10_10_2_SINT", 36: "2_10_10_10_UNORM",
    37: "2_10_10_10_SNORM", 38: "2_10_10_10_USCALED", 39: "2_10_10_10_SSCALED",
    40: "2_10_10_10_UINT", 41: "2_10_10_10_SINT", 42: "8_8_8_8_UNORM", 43: "8_8_8_8_SNORM",
    44: "8_8_8_8_USCALED", 45: "8_8_8_8_SSCALED", 46: "8_8_8_8_UINT", 47: "8_8_8_8_SINT",
    48: "32_32_UINT", 49: "32_32_SINT", 50: "32_32_FLOAT", 51: "16_16_16_16_UNORM",
    52: "16_16_16_16_SNORM", 53: "16_16_16_16_USCALED", 54: "16_16_16_16_SSCALED",
    55: "16_16_16_16_UINT", 56: "16_16_16_16_SINT", 57: "16_16_16_16_FLOAT",
    58: "32_32_32_UINT", 59: "32_32_32_SINT", 60: "32_32_32_FLOAT", 61: "32_32_32_32_UINT",
    62: "32_32_32_32_SINT", 63: "32_32_32_32_FLOAT",
}
FLOAT_KINDS = ("UNORM", "SNORM", "USCALED", "SSCALED", "FLOAT")


class Format:
    """One buffer format: its size and where each component lies."""

    def __init__(self, number: int, name: str) -> None:
        *sizes, kind = name.split("_")
        self.number, self.name, self.kind = number, "BUF_FMT_" + name, kind
        bits = [int(s) for s in reversed(sizes)]  # x first
        self.size = sum(bits) // 8  # bytes of one element
        self.components = []  # (dword, shift, bits)
        pos = 0
        for b in bits:
            self.components.append((pos // 32, pos % 32, b))
            pos += b

    @property
    def floats(self) -> bool:
        return self.kind in FLOAT_KINDS


@cache
def format_of(number: int) -> Format | None:
    name = _NAMES.get(number)
    return Format(number, name) if name else None


_NUMBERS = {name: number for number, name in _NAMES.items()}


def format_by_name(name: str) -> Format | None:
    """The unified format named `name` ("8_8_8_8_UNORM"), None if there is none."""
    number = _NUMBERS.get(name)
    return format_of(number) if number is not None else None


def _small_float_to_f32(v: np.ndarray, mantissa: int) -> np.ndarray:
    """Unsigned 11- or 10-bit floats (5-bit exponent, bias 15) as float32."""
    e = (v >> u32(mantissa)) & u32(31)
    m = (v & u32((1 << mantissa) - 1)).astype(np.float64)
    normal = np.ldexp(1 + m / (1 << mantissa), e.astype(np.int32) - 15)
    sub = np.ldexp(m / (1 << mantissa), -14)
    special = np.where(m == 0, np.inf, np.nan)
    return np.where(e == 31, special, np.where(e == 0, sub, normal)).astype(f32)


def _f32_to_small_float(x: np.ndarray, mantissa: int) -> np.ndarray:
    """float32 -> unsigned 11/10-bit float bits, rounded to nearest even; negatives -> 0,
    past the largest finite value -> infinity."""
    x = np.asarray(x, np.float64)
    nan = np.isnan(x)
    x = np.where(nan | (x < 0), 0.0, x)
    scale = 1 << mantissa
    e = np.maximum(np.frexp(x)[1] - 1, -14)  # subnormals share 2**-14's step
    q = np.rint(np.ldexp(x, mantissa - e))  # the mantissa with its implicit bit, rounded
    # a rounding carry (q == 2 * scale) lands on the next exponent by itself
    bits = np.where(q >= scale, ((e + 15) << mantissa) + q - scale, q)
    bits = np.minimum(bits, 31 << mantissa)  # infinity
    bits = np.where(np.isinf(x), 31 << mantissa, bits)
    return np.where(nan, (31 << mantissa) | 1, bits).astype(np.int64).astype(u32)


def decode(fmt: Format, words: list[np.ndarray]) -> list[np.ndarray]:
    """Element dwords (x's dword first) -> the 4 channels' 32-bit register values."""
    out = []
    for dword, shift, bits in fmt.components:
        raw = (words[dword] >> u32(shift)) & u32((1 << bits) - 1 if bits < 32 else 0xFFFFFFFF)
        sraw = raw.astype(np.int64) - np.where(raw >> u32(bits - 1), 1 << bits, 0)
        kind = fmt.kind
        if kind == "UINT":
            value = raw
        elif kind == "SINT":
            value = sraw.astype(np.int32).view(u32)
        elif kind == "FLOAT":
            if bits == 32:
                value = raw
            elif bits == 16:
                value = raw.astype(np.uint16).view(np.float16).astype(f32).view(u32)
            else:
                value = _small_float_to_f32(raw, bits - 5).view(u32)
        else:
            if kind == "UNORM":
                x = raw / float((1 << bits) - 1)
            elif kind == "SNORM":
                x = np.maximum(sraw / float((1 << (bits - 1)) - 1), -1.0)
            elif kind == "USCALED":
                x = raw.astype(np.float64)
            else:
                x = sraw.astype(np.float64)
            value = x.astype(f32).view(u32)
        out.append(np.asarray(value, u32))
    one = u32(0x3F800000) if fmt.floats else u32(1)
    zero = np.zeros_like(out[0])
    while len(out) < 4:
        out.append(zero + (one if len(out) == 3 else u32(0)))
    return out


def select(channels: list[np.ndarray], word3: np.ndarray, floats: bool) -> list[np.ndarray]:
    """Apply the V#'s DST_SEL_X..W (word3 per lane, bits 11:0) to the 4 channels."""
    one = u32(0x3F800000) if floats else u32(1)
    out = []
    for c in range(4):
        sel = (word3 >> u32(3 * c)) & u32(7)
        value = np.zeros_like(channels[0])
        value = np.where(sel == 1, one, value)
        for k in range(4):
            value = np.where(sel == 4 + k, channels[k], value)
        out.append(value)
    return out


def to_d16(fmt: Format, value: np.ndarray) -> np.ndarray:
    """A channel's 32-bit value as the 16 bits a D16 load keeps."""
    if fmt.floats:
        return value.view(f32).astype(np.float16).view(np.uint16).astype(u32)
    return value & u32(0xFFFF)


def from_d16(fmt: Format, half: np.ndarray) -> np.ndarray:
    """A D16 store's 16-bit channel as the 32-bit value the conversion starts from."""
    half = half & u32(0xFFFF)
    if fmt.floats:
        return half.astype(np.uint16).view(np.float16).astype(f32).view(u32)
    if fmt.kind == "SINT":
        return half.astype(np.uint16).view(np.int16).astype(np.int32).view(u32)
    return half


def encode(fmt: Format, channels: list[np.ndarray], old: list[np.ndarray]) -> list[np.ndarray]:
    """Write the supplied channels (32-bit register values, x first) into the element's
    dwords `old` (the memory's), converted to the format."""
    words = [w.copy() for w in old]
    for (dword, shift, bits), value in zip(fmt.components, channels, strict=False):
        mask = (1 << bits) - 1 if bits < 32 else 0xFFFFFFFF
        kind = fmt.kind
        if kind in ("UINT", "SINT"):
            raw = value & u32(mask)
        elif kind == "FLOAT":
            x = value.view(f32)
            if bits == 32:
                raw = value
            elif bits == 16:
                raw = x.astype(np.float16).view(np.uint16).astype(u32)
            else:
                raw = _f32_to_small_float(x, bits - 5)
        else:
            x = np.nan_to_num(value.view(f32).astype(np.float64), nan=0.0)
            if kind == "UNORM":
                q = np.rint(np.clip(x, 0.0, 1.0) * ((1 << bits) - 1))
            elif kind == "SNORM":
                q = np.rint(np.clip(x, -1.0, 1.0) * ((1 << (bits - 1)) - 1))
            elif kind == "USCALED":
                q = np.clip(np.rint(x), 0, (1 << bits) - 1)
            else:
                q = np.clip(np.rint(x), -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
            raw = (q.astype(np.int64) & mask).astype(u32)
        place = u32(mask) << u32(shift) if bits < 32 else u32(0xFFFFFFFF)
        words[dword] = (words[dword] & ~place) | ((raw.astype(u32) << u32(shift)) & place)
    return words


# --- instructions ------------------------------------------------------------------------------
def _lane_rows(g: WaveGroup, idx: np.ndarray | None) -> np.ndarray:
    """Flat lane indices of the active lanes (all lanes when idx is None)."""
    return np.arange(g.count * g.lanes) if idx is None else idx


def _fetch(ctx: BatchContext, inst: d.Instruction, fmt: Format, addr: np.ndarray
           ) -> list[np.ndarray]:
    if fmt.size < 4:
        return [mem.gather_typed(ctx, inst, addr, np.uint8 if fmt.size == 1 else np.uint16)
                .astype(u32)]
    words = mem.gather_words(ctx, inst, addr, fmt.size // 4)
    return [words[:, k] for k in range(fmt.size // 4)]


def _write(ctx: BatchContext, inst: d.Instruction, fmt: Format, addr: np.ndarray,
           words: list[np.ndarray]) -> None:
    if fmt.size < 4:
        mem.scatter_typed(ctx, inst, addr, words[0].astype(np.uint8 if fmt.size == 1
                                                          else np.uint16))
        return
    for k, w in enumerate(words):
        mem.scatter_typed(ctx, inst, addr + np.uint64(4 * k), w.astype(u32))


def compile_format(inst: d.Instruction, vsharp_format: Callable[[np.ndarray], np.ndarray]
                   ) -> Callable | None:
    """buffer_{load,store}[_d16[_hi]]_format_{x,xy,xyz,xyzw} and the tbuffer_ forms; the
    MUBUF format comes from V# word 3 through `vsharp_format`."""
    name = inst.name
    f = inst.f
    parts = name.split("_")
    if "format" not in parts or parts[1] not in ("load", "store"):
        return None
    store = parts[1] == "store"
    d16, hi = "d16" in parts, "hi" in parts
    n = len(parts[-1])
    if parts[-1] not in ("x", "xy", "xyz", "xyzw") or (hi and n != 1):
        return None
    typed = inst.encoding == "MTBUF"

    def run(g: WaveGroup, ctx: BatchContext) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        word3 = g.s[:, f["srsrc"] + 3].astype(u32)
        numbers = (np.full(g.count, f["format"], u32) if typed else
                   np.asarray(vsharp_format(word3), u32))
        lane_numbers = np.repeat(numbers, g.lanes)
        lane_word3 = np.repeat(word3, g.lanes)
        rows = _lane_rows(g, idx)
        for number in np.unique(numbers[rows // g.lanes]):
            fmt = format_of(int(number))
            group = lane_numbers[rows] == number
            lanes = rows[group]
            if fmt is None:  # BUF_FMT_INVALID and numbers past 63: zeros, stores dropped
                if not store:
                    for k in range(1 if d16 else n):
                        mem._put(g, f["vdata"] + k, lanes, np.zeros(lanes.size, u32))
                continue
            _, addr, ok = mem.buffer_elements(g, inst, fmt.size)
            addr, ok = addr[group], ok[group]
            if store:
                regs = [g.v[f["vdata"] + k].reshape(-1)[lanes] for k in range((n + 1) // 2
                                                                            if d16 else n)]
                if d16:
                    halves = [(regs[c // 2] >> u32(16 * (c % 2))) for c in range(n)]
                    if hi:
                        halves = [regs[0] >> u32(16)]
                    channels = [from_d16(fmt, h) for h in halves]
                else:
                    channels = regs
                if not ok.any():
                    continue
                old = _fetch(ctx, inst, fmt, addr[ok])
                _write(ctx, inst, fmt, addr[ok], encode(fmt, [c[ok] for c in channels], old))
                continue
            words = [np.zeros(lanes.size, u32) for _ in range(max(1, fmt.size // 4))]
            if ok.any():
                for k, w in enumerate(_fetch(ctx, inst, fmt, addr[ok])):
                    words[k][ok] = w
            channels = select(decode(fmt, words), lane_word3[lanes], fmt.floats)
            channels = [np.where(ok, c, u32(0)) for c in channels]
            if not d16:
                for c in range(n):
                    mem._put(g, f["vdata"] + c, lanes, channels[c])
                continue
            halves = [to_d16(fmt, channels[c]) for c in range(n)]
            old0 = g.v[f["vdata"]].reshape(-1)[lanes]
            if hi:  # the high half; the low half is kept
                mem._put(g, f["vdata"], lanes, (old0 & u32(0xFFFF)) | (halves[0] << u32(16)))
                continue
            for k in range((n + 1) // 2):
                low = halves[2 * k]
                if 2 * k + 1 < n:
                    value = low | (halves[2 * k + 1] << u32(16))
                else:  # an odd channel count keeps the last dword's high half
                    keep = g.v[f["vdata"] + k].reshape(-1)[lanes] & u32(0xFFFF0000)
                    value = keep | low
                mem._put(g, f["vdata"] + k, lanes, value)

    return run


_LDS_KINDS = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
              "b32": np.uint32}


def compile_lds_load(inst: d.Instruction, vsharp_format: Callable[[np.ndarray], np.ndarray]
                     ) -> Callable | None:
    """buffer_load_lds_{u8,i8,u16,i16,b32,format_x}: each active lane's element, widened
    to a dword (zero- or sign-extended; format_x converted like buffer_load_format_x), goes
    to LDS at M0[15:0] + the instruction offset + 4 * the lane's id in its wave, not to a
    VGPR (the GCN/RDNA LDS_ADDR = LDSbase + LDS_offset + inst_offset + TID*4). Lanes out
    of the buffer's range write 0."""
    name = inst.name
    f = inst.f
    if not name.startswith("buffer_load_lds_"):
        return None
    suffix = name[len("buffer_load_lds_"):]
    kind = _LDS_KINDS.get(suffix)
    if kind is None and suffix != "format_x":
        return None

    def run(g: WaveGroup, ctx: BatchContext) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        rows = _lane_rows(g, idx)
        word3 = g.s[:, f["srsrc"] + 3].astype(u32)
        values = np.zeros(rows.size, u32)
        if kind is not None:
            size = np.dtype(kind).itemsize
            _, addr, ok = mem.buffer_elements(g, inst, size)
            if ok.any():
                got = mem.gather_typed(ctx, inst, addr[ok], kind)
                values[ok] = got.astype(np.int32).view(u32) if np.dtype(kind).kind == "i" \
                    else got.astype(u32)
        else:
            numbers = np.repeat(np.asarray(vsharp_format(word3), u32), g.lanes)[rows]
            for number in np.unique(numbers):
                fmt = format_of(int(number))
                if fmt is None:
                    continue
                group = numbers == number
                _, addr, ok = mem.buffer_elements(g, inst, fmt.size)
                ok = ok & group
                words = [np.zeros(rows.size, u32) for _ in range(max(1, fmt.size // 4))]
                if ok.any():
                    for k, w in enumerate(_fetch(ctx, inst, fmt, addr[ok])):
                        words[k][ok] = w
                x = select(decode(fmt, words), np.repeat(word3, g.lanes)[rows], fmt.floats)[0]
                values = np.where(ok, x, values)
        m0 = np.repeat(g.s[:, d.M0].astype(np.int64) & 0xFFFF, g.lanes)[rows]
        lds_addr = m0 + f["offset"] + 4 * (rows % g.lanes)
        space, a = ctx.lds_space(g, inst, lds_addr, rows)
        space.scatter(a, values)

    return run
