"""Wide wave state: many waves (wave32 or wave64) executed together as numpy arrays.

A `WaveGroup` holds every wave that is at the same program counter: scalar registers
`s[wave, 128]` in the canonical numbering of `operands` (SGPRs 0-105, VCC 106-107, TTMP
108-123, NULL 124, M0 125, EXEC 126-127), SCC per wave, and vector registers
`v[reg, wave, lane]` as uint32 (lanes = the wave size; AccVGPRs, where a family has them,
are rows from 256 on). Lane masks (EXEC, VCC, compare results) are one SGPR in wave32 and
an SGPR pair in wave64. A VGPR read gives a (waves, lanes) array, an SGPR read a (waves, 1)
column, a constant a 0-d value: numpy
broadcasting makes one code path serve all three. Waves split into separate groups when a
scalar branch goes different ways, and merge again when their program counters meet.
"""

from __future__ import annotations

import struct

import numpy as np

from hsa.virtual.isa import operands as d

LANES = 32  # gfx11's wave size; wave state itself carries its own (`WaveGroup.lanes`)
_LANE_BITS = (np.uint32(1) << np.arange(32, dtype=np.uint32)).astype(np.uint32)
_LANE_BITS64 = np.uint64(1) << np.arange(64, dtype=np.uint64)
AGPR_ROW = 256  # v[AGPR_ROW + i] is AccVGPR a[i]

# Apertures the flat address space maps to LDS and scratch (high 32 bits of the address).
SHARED_APERTURE_HI = 0x10000
PRIVATE_APERTURE_HI = 0x20000

_F32_INLINE = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0,
               247: -4.0, 248: 0.15915494309189535}


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _f16_bits(x: float) -> int:
    return int(np.float16(x).view(np.uint16))


_INLINE32 = {c: _f32_bits(x) for c, x in _F32_INLINE.items()}
_INLINE32[248] = 0x3E22F983  # 1/(2*pi) as the hardware encodes it
_INLINE16 = {c: _f16_bits(x) for c, x in _F32_INLINE.items()}
_INLINE16[248] = 0x3118
_INLINE64 = {c: _f64_bits(x) for c, x in _F32_INLINE.items()}
_INLINE64[248] = 0x3FC45F306DC9C882


def inline_constant(code: int, kind: str = "32") -> int | None:
    """Value of an inline-constant operand code; kind "32", "16" (f16 ops) or "64"."""
    if 128 <= code <= 192:
        return code - 128
    if 193 <= code <= 208:
        v = -(code - 192)
        return v & (0xFFFFFFFFFFFFFFFF if kind == "64" else 0xFFFFFFFF)
    if 240 <= code <= 248:
        return (_INLINE16 if kind == "16" else _INLINE64 if kind == "64" else _INLINE32)[code]
    if code in (d.SRC_SHARED_BASE, d.SRC_SHARED_LIMIT, d.SRC_PRIVATE_BASE,
                d.SRC_PRIVATE_LIMIT):  # 32-bit reads give the aperture's high half
        hi = SHARED_APERTURE_HI if code in (d.SRC_SHARED_BASE, d.SRC_SHARED_LIMIT) else (
            PRIVATE_APERTURE_HI)
        low = 0xFFFFFFFF if code in (d.SRC_SHARED_LIMIT, d.SRC_PRIVATE_LIMIT) else 0
        return (hi << 32 | low) if kind == "64" else hi
    return None


class MissingLiteral(ValueError):
    """An operand names the instruction's literal (code 255, or gfx1250's 254) but the
    decoder attached none: a decoder bug, reported as the queue's error, not a TypeError."""

    def __init__(self, code: int) -> None:
        super().__init__(f"operand code {code} reads a literal the decoded instruction "
                         "does not carry (a decoder gap; please report the kernel)")


def join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """uint64 values of (lo, hi) uint32 word pairs of one shape: both interleaved into one
    buffer that is viewed as uint64 (little-endian), two copies instead of four passes."""
    out = np.empty(lo.shape + (2,), dtype=np.uint32)
    out[..., 0] = lo
    out[..., 1] = hi
    return out.view(np.uint64).reshape(lo.shape)


class WaveGroup:
    """Waves that execute in lockstep at one program counter."""

    __slots__ = ("s", "v", "scc", "waves", "pc", "_exec", "_exec_all", "done", "waiting",
                 "sleeping", "lanes", "memo", "vgpr_msb")

    def __init__(self, s: np.ndarray, v: np.ndarray, scc: np.ndarray, waves: np.ndarray,
                 pc: int) -> None:
        self.s = s
        self.v = v
        self.scc = scc
        self.waves = waves
        self.pc = pc
        self._exec: np.ndarray | None = None
        self._exec_all = False
        self.done = False
        self.waiting = False
        self.sleeping = False  # gave the other groups a turn at s_sleep (a spin-wait loop)
        self.lanes = v.shape[2]
        # values that depend only on which waves are in the group (per-lane LDS bases...),
        # computed once by whoever needs them; a split or merge makes a new group
        self.memo: dict = {}
        # gfx1250's VGPR bank select (s_set_vgpr_msb): 2 bits each for src0, src1, src2 and
        # the destination, [7:0]; zero on entry (LLVM's ABI), zero on other families
        self.vgpr_msb = 0

    @property
    def count(self) -> int:
        return self.s.shape[0]

    # --- EXEC ----------------------------------------------------------------------------
    def exec_mask(self) -> np.ndarray:
        """(waves, lanes) bool of active lanes."""
        if self._exec is None:
            self._exec = self.lane_mask(d.EXEC_LO)
            self._exec_all = bool(self._exec.all())
        return self._exec

    def exec_all(self) -> bool:
        self.exec_mask()
        return self._exec_all

    def exec_changed(self) -> None:
        self._exec = None

    # --- scalar operands -----------------------------------------------------------------
    def sread(self, code: int, literal: int | None, wide: bool = False):
        """A scalar source: (waves,) uint32 (uint64 when wide) or a numpy scalar."""
        if code < 128:
            if wide:
                lo = self.s[:, code].astype(np.uint64)
                return lo | (self.s[:, code + 1].astype(np.uint64) << np.uint64(32))
            return self.s[:, code]
        if code == d.LITERAL:
            if literal is None:
                raise MissingLiteral(code)
            return np.uint64(literal) if wide else np.uint32(literal)
        if code == d.LITERAL64:
            if literal is None:
                raise MissingLiteral(code)
            return np.uint64(literal) if wide else np.uint32(literal & 0xFFFFFFFF)
        if code == d.SCC:
            return self.scc.astype(np.uint64 if wide else np.uint32)
        if code == d.VCCZ:
            return self.mask_zero(d.VCC_LO).astype(np.uint32)
        if code == d.EXECZ:
            return self.mask_zero(d.EXEC_LO).astype(np.uint32)
        value = inline_constant(code, "64" if wide else "32")
        if value is None:
            raise KeyError(code)
        return np.uint64(value) if wide else np.uint32(value)

    def swrite(self, code: int, value, wide: bool = False) -> None:
        if code == d.NULL:
            return
        if wide:
            value = np.asarray(value, dtype=np.uint64)
            self.s[:, code] = (value & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            self.s[:, code + 1] = (value >> np.uint64(32)).astype(np.uint32)
            if code in (d.EXEC_LO, d.EXEC_HI - 1):
                self._exec = None
        else:
            self.s[:, code] = value
        if code in (d.EXEC_LO, d.EXEC_HI):
            self._exec = None

    # --- vector operands -----------------------------------------------------------------
    def vread(self, code: int, literal: int | None, kind: str = "32"):
        """A vector-ALU source as uint32: (waves, 32), (waves, 1) or a 0-d value.
        kind "64" returns uint64 of a register pair (or 64-bit constant)."""
        wide = kind == "64"
        if code >= d.VGPR0:
            r = code - d.VGPR0
            if wide:
                return join64(self.v[r], self.v[r + 1])
            return self.v[r]
        if code < 128:
            if wide:
                lo = self.s[:, code].astype(np.uint64)
                return (lo | (self.s[:, code + 1].astype(np.uint64) << np.uint64(32)))[:, None]
            return self.s[:, code][:, None]
        if code == d.LITERAL:
            if literal is None:
                raise MissingLiteral(code)
            if wide:  # a 64-bit float literal is the high half; integers zero-extend
                return np.uint64(literal)
            return np.uint32(literal)
        if code == d.LITERAL64:
            if literal is None:
                raise MissingLiteral(code)
            return np.uint64(literal) if wide else np.uint32(literal & 0xFFFFFFFF)
        if code == d.SCC:
            c = self.scc.astype(np.uint64 if wide else np.uint32)
            return c[:, None]
        value = inline_constant(code, kind)
        if value is None:
            raise KeyError(code)
        return np.uint64(value) if wide else np.uint32(value)

    def vwrite(self, reg: int, value, mask: np.ndarray | None = None) -> None:
        """Write a uint32 value to VGPR `reg` for active lanes (or `mask`)."""
        if mask is None:
            if self.exec_all():
                self.v[reg][...] = value
                return
            mask = self.exec_mask()
        np.copyto(self.v[reg], value, where=mask, casting="unsafe")

    def vwrite64(self, reg: int, value, mask: np.ndarray | None = None) -> None:
        value = np.asarray(value, dtype=np.uint64)
        if value.ndim == 0:
            self.vwrite(reg, np.uint32(int(value) & 0xFFFFFFFF), mask)
            self.vwrite(reg + 1, np.uint32(int(value) >> 32), mask)
            return
        # the halves as strided views of the little-endian words: no shift/mask temporaries
        halves = np.ascontiguousarray(value).view(np.uint32).reshape(value.shape + (2,))
        self.vwrite(reg, halves[..., 0], mask)
        self.vwrite(reg + 1, halves[..., 1], mask)

    # --- lane masks in SGPRs ---------------------------------------------------------------
    def lane_mask(self, code: int) -> np.ndarray:
        """(waves, lanes) bool of the lane mask in SGPR `code` (VCC_LO, EXEC_LO, ...): one
        SGPR in wave32, the pair code, code+1 in wave64."""
        n = self.lanes
        if code == d.NULL:
            return np.zeros((self.count, n), dtype=bool)
        if n == 64:
            if code >= 128:
                value64 = np.uint64(inline_constant(code, "64") or 0)
                return np.broadcast_to((value64 & _LANE_BITS64) != 0, (self.count, n))
        elif code >= 128:
            value = inline_constant(code) or 0
            return np.broadcast_to((np.uint32(value) & _LANE_BITS) != 0, (self.count, n))
        # the SGPR (pair)'s little-endian bytes unpacked, lowest bit first: one byte a lane
        # written, not a 64-bit AND and compare per lane (x10: every VCC carry-in)
        words = np.ascontiguousarray(self.s[:, code: code + n // 32])
        return np.unpackbits(words.view(np.uint8), axis=1, bitorder="little").view(bool)

    def mask_zero(self, code: int) -> np.ndarray:
        """(waves,) bool: the lane mask at `code` (one SGPR or a wave64 pair) is zero."""
        if self.lanes == 64:
            return (self.s[:, code] == 0) & (self.s[:, code + 1] == 0)
        return self.s[:, code] == 0

    def write_lane_mask(self, code: int, mask: np.ndarray) -> None:
        """Store (waves, lanes) bool as the lane mask at SGPR `code` (a pair in wave64)."""
        if code == d.NULL:
            return
        words = self.pack(np.ascontiguousarray(mask))
        if self.lanes == 64:
            words = words.reshape(-1, 2)
            self.s[:, code] = words[:, 0]
            self.s[:, code + 1] = words[:, 1]
        else:
            self.s[:, code] = words
        if code in (d.EXEC_LO, d.EXEC_HI, d.EXEC_LO - 1):
            self._exec = None

    @staticmethod
    def pack(mask: np.ndarray) -> np.ndarray:
        """(waves, 32) bool -> (waves,) uint32 lane masks; (waves, 64) -> (waves * 2,)
        uint32, low words first."""
        return np.packbits(mask, axis=1, bitorder="little").view("<u4").reshape(-1)

    # --- split / merge ---------------------------------------------------------------------
    def take(self, select: np.ndarray, pc: int) -> WaveGroup:
        # np.take along the wave axis copies each wave's rows once into a C-contiguous
        # array; a boolean index there (v[:, select]) gave a strided result that then
        # needed a second copy: x4 the time on a big group (a 1024x1024 grid's bounds check)
        index = np.flatnonzero(select)
        g = WaveGroup(self.s[index], np.take(self.v, index, axis=1), self.scc[index],
                      self.waves[index], pc)
        g.vgpr_msb = self.vgpr_msb
        return g

    @staticmethod
    def merge(groups: list[WaveGroup]) -> WaveGroup:
        """One group of the waves of `groups`, in wave order (so that the lanes of an atomic
        are always applied in work-item order, whatever paths the waves took)."""
        groups = sorted(groups, key=lambda x: int(x.waves[0]))
        waves = np.concatenate([x.waves for x in groups])
        s = np.concatenate([x.s for x in groups])
        v = np.concatenate([x.v for x in groups], axis=1)
        scc = np.concatenate([x.scc for x in groups])
        if waves.size > 1 and not np.all(waves[1:] > waves[:-1]):  # interleaved pieces
            order = np.argsort(waves, kind="stable")
            waves, s, scc = waves[order], s[order], scc[order]
            v = np.take(v, order, axis=1)  # C-contiguous, as v[:, order] is not
        g = WaveGroup(s, v, scc, waves, groups[0].pc)
        g.vgpr_msb = groups[0].vgpr_msb  # the scheduler merges groups of one mode only
        return g
