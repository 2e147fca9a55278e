"""Memory instructions: SMEM, GLOBAL/FLAT/SCRATCH, MUBUF, DS, on wide wave state.

Global memory goes through the virtual system's MemoryMap with the dispatch's agent, so an
access outside every allocation (or to memory not mapped for the agent) raises MemoryFault,
re-raised here with the kernel name and PC. LDS is one byte array per workgroup of the
batch; scratch is one byte array per lane. Both are bounds-checked the way the hardware does
it: an LDS access out of range reads 0 and drops stores; scratch out of range faults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from ground.errors import MemoryFault
from ground.status import HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.atomics import atomic_fn as _atomic_fn
from hsa.virtual.isa.atomics import atomic_rmw
from hsa.virtual.isa.state import WaveGroup, join64
from hsa.virtual.memory import MemoryMap


class Space(Protocol):
    """Where the lanes of one memory instruction read and write: global memory (GlobalSpace),
    LDS or scratch (ByteSpace), or a flat access's mix of them (MixedSpace)."""

    def gather(self, addr: np.ndarray, dtype: np.dtype) -> np.ndarray: ...

    def gather_words(self, addr: np.ndarray, n: int) -> np.ndarray: ...

    def scatter(self, addr: np.ndarray, values: np.ndarray) -> None: ...


class MemoryContext(Protocol):
    """What the memory instructions of one batch of workgroups need from it (the executor's
    batch context provides it): the memory map and agent of global accesses, the LDS and
    scratch spaces, and where an instruction is, for fault messages."""

    memory: MemoryMap
    agent: int

    def where(self, inst: d.Instruction) -> str: ...

    def lds_space(self, g: WaveGroup, inst: d.Instruction, addr: np.ndarray,
                  idx: np.ndarray | None) -> tuple[ByteSpace, np.ndarray]: ...

    def lds_gather(self, g: WaveGroup, addr: np.ndarray, offset: int,
                   dtype: np.dtype) -> np.ndarray | None: ...

    def scratch_space(self, g: WaveGroup, inst: d.Instruction,
                      idx: np.ndarray | None) -> ByteSpace: ...

    def scratch_rows(self, g: WaveGroup, offset: int, nwords: int) -> np.ndarray | None: ...

    def space_for(self, g: WaveGroup, inst: d.Instruction, seg: str, addr: np.ndarray,
                  idx: np.ndarray | None) -> Space: ...

u32, u64 = np.uint32, np.uint64
_U32 = np.dtype(u32)
_LANE = np.arange(64)


def _fault(ctx: MemoryContext, inst: d.Instruction, address: int, why: str) -> MemoryFault:
    return MemoryFault(
        HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
        f"memory fault in {ctx.where(inst)}: address 0x{address:x}"
        f" ({why}); check the kernel's buffer sizes and arguments",
        address=address,
    )


def gather_words(ctx: MemoryContext, inst: d.Instruction, addresses: np.ndarray,
                 nwords: int) -> np.ndarray:
    """(n,) byte addresses -> (n, nwords) uint32 from global memory."""
    try:
        if nwords == 1:
            return ctx.memory.gather(addresses, _U32, ctx.agent).reshape(-1, 1)
        out = ctx.memory.gather(addresses, np.dtype((np.void, 4 * nwords)), ctx.agent)
        return np.ascontiguousarray(out).view("<u4").reshape(-1, nwords)
    except MemoryFault as e:
        raise _fault(ctx, inst, e.address, str(e.text)) from None


def gather_typed(ctx: MemoryContext, inst: d.Instruction, addresses: np.ndarray,
                 dtype) -> np.ndarray:
    try:
        return ctx.memory.gather(addresses, dtype, ctx.agent)
    except MemoryFault as e:
        raise _fault(ctx, inst, e.address, str(e.text)) from None


def scatter_typed(ctx: MemoryContext, inst: d.Instruction, addresses: np.ndarray,
                  values: np.ndarray) -> None:
    try:
        ctx.memory.scatter(addresses, values, ctx.agent)
    except MemoryFault as e:
        raise _fault(ctx, inst, e.address, str(e.text)) from None


# --- cache control and fences ----------------------------------------------------------------
# The virtual GPU has no caches: every load reads, and every store and atomic writes, the
# one memory that the host and all agents share, when the instruction executes, and a
# wave's instructions execute in program order. So at any point there is no dirty line to
# write back and no stale line to invalidate: each of these completes at once with its
# memory-model effect already true (a release's prior writes are visible at system scope,
# an acquire's later reads see every completed write). Names by family, as LLVM's
# AMDGPU memory model (AMDGPUUsage, "Memory Model") emits them for fences and atomics:
CACHE_CONTROL: dict[str, str] = {
    # gfx9 (gfx90a, gfx940/942/950)
    "buffer_wbl2": "write back the L2 (agent/system-scope release)",
    "buffer_invl2": "invalidate the L2 of non-local memory (gfx90a system-scope acquire)",
    "buffer_inv": "invalidate the caches of its scope (sc0/sc1: gfx940 acquire)",
    "buffer_wbinvl1": "write back and invalidate the vector L1 (agent-scope acquire)",
    "buffer_wbinvl1_vol": "invalidate the vector L1's volatile lines",
    "s_dcache_wb": "write back the scalar cache",
    "s_dcache_wb_vol": "write back the scalar cache's volatile lines",
    "s_dcache_inv": "invalidate the scalar cache",
    "s_dcache_inv_vol": "invalidate the scalar cache's volatile lines",
    "s_dcache_discard": "discard scalar cache lines (their data is then undefined: keeping "
                        "memory's is one valid outcome)",
    "s_dcache_discard_x2": "discard scalar cache lines (as s_dcache_discard)",
    # gfx11
    "buffer_gl0_inv": "invalidate the GL0 (per-CU vector cache)",
    "buffer_gl1_inv": "invalidate the GL1 (shader-array cache)",
    "s_gl1_inv": "invalidate the GL1 from the scalar unit",
    # gfx12 (gfx1201, gfx1250)
    "global_inv": "invalidate the caches of its scope (acquire)",
    "global_wb": "write back the caches of its scope (release)",
    "global_wbinv": "write back and invalidate the caches of its scope (acq_rel)",
}


def compile_cache_control(inst: d.Instruction) -> Callable | None:
    """A cache write-back/invalidate: complete when issued (see CACHE_CONTROL), or None."""
    if inst.name not in CACHE_CONTROL:
        return None
    return _cache_control


def _cache_control(g: WaveGroup, ctx: MemoryContext) -> None:
    return None


# --- SMEM ----------------------------------------------------------------------------------
def compile_smem(inst: d.Instruction) -> Callable | None:
    name = inst.name
    if name.startswith("s_prefetch_"):  # a hint: nothing to fetch ahead
        return lambda g, ctx: None
    f = inst.f
    small = _SMEM_SMALL.get(name.replace("s_buffer_load_", "s_load_"))
    if small is not None:  # gfx12 s_load_u8/i8/u16/i16: one zero/sign-extended dword
        return _smem_small(inst, name.startswith("s_buffer"), *small)
    if not (name.startswith("s_load_b") or name.startswith("s_buffer_load_b")):
        return None
    nwords = int(name.rsplit("_b", 1)[1]) // 32

    def run(g: WaveGroup, ctx: MemoryContext) -> None:
        offset = np.uint64(f["offset"] & 0xFFFFFFFFFFFFFFFF) if f["offset"] >= 0 else None
        base = g.s[:, f["sbase"]].astype(u64) | (g.s[:, f["sbase"] + 1].astype(u64) << u64(32))
        if name.startswith("s_buffer"):
            base = base & u64(0xFFFFFFFFFFFF)
        addr = base + u64(f["offset"] & 0xFFFFFFFF) if offset is not None else (
            base - u64(-f["offset"]))
        if f["soffset"] != d.NULL:
            addr = addr + np.asarray(g.sread(f["soffset"], None), u64)
        addr = addr & u64(~3 & 0xFFFFFFFFFFFFFFFF)  # SMEM ignores the two low address bits
        first = addr[0]
        if np.all(addr == first):
            words = gather_words(ctx, inst, np.array([first], u64), nwords)
            g.s[:, f["sdata"]: f["sdata"] + nwords] = words[0]
        else:
            words = gather_words(ctx, inst, addr, nwords)
            g.s[:, f["sdata"]: f["sdata"] + nwords] = words

    return run


# gfx12 sub-dword scalar loads: (bytes, numpy type of the value)
_SMEM_SMALL = {"s_load_u8": (1, np.uint8), "s_load_i8": (1, np.int8),
               "s_load_u16": (2, np.uint16), "s_load_i16": (2, np.int16)}


def _smem_small(inst: d.Instruction, buffer: bool, nbytes: int, kind) -> Callable:
    f = inst.f

    def run(g: WaveGroup, ctx: MemoryContext) -> None:
        base = g.s[:, f["sbase"]].astype(u64) | (g.s[:, f["sbase"] + 1].astype(u64) << u64(32))
        if buffer:
            base = base & u64(0xFFFFFFFFFFFF)
        addr = (base.astype(np.int64) + f["offset"]).astype(u64)
        if f["soffset"] != d.NULL:
            addr = addr + np.asarray(g.sread(f["soffset"], None), u64)
        values = ctx.memory.gather(addr, kind, ctx.agent)
        g.s[:, f["sdata"]] = np.asarray(values).astype(np.int64).astype(u32)

    return run


# --- per-lane helpers ------------------------------------------------------------------------
def _active(g: WaveGroup) -> np.ndarray | None:
    """Flat indices of active lanes, or None when all are active."""
    if g.exec_all():
        return None
    return np.flatnonzero(g.exec_mask())


def _sel(x: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    flat = x.reshape(-1)
    return flat if idx is None else flat[idx]


def _lanes(g: WaveGroup, value) -> np.ndarray:
    return np.broadcast_to(value, (g.count, g.lanes))


def _put(g: WaveGroup, reg: int, idx: np.ndarray | None, values: np.ndarray) -> None:
    target = g.v[reg]
    if idx is None:
        target.reshape(-1)[:] = values
    elif target.flags.c_contiguous:
        target.reshape(-1)[idx] = values
    else:
        rows, lanes = np.divmod(idx, g.lanes)
        target[rows, lanes] = values


# Load/store kinds by the suffix of the mnemonic: (dtype, dwords, d16 mode); dtype None:
# `dwords` raw dwords (b64 and wider, atomics)
Access = tuple[type[np.integer] | None, int, str | None]
_LOADS: dict[str, Access] = {
    "u8": (np.uint8, 1, None), "i8": (np.int8, 1, None), "u16": (np.uint16, 1, None),
    "i16": (np.int16, 1, None), "b32": (np.uint32, 1, None), "b64": (None, 2, None),
    "b96": (None, 3, None), "b128": (None, 4, None),
    "d16_u8": (np.uint8, 1, "lo"), "d16_i8": (np.int8, 1, "lo"), "d16_b16": (np.uint16, 1, "lo"),
    "d16_hi_u8": (np.uint8, 1, "hi"), "d16_hi_i8": (np.int8, 1, "hi"),
    "d16_hi_b16": (np.uint16, 1, "hi"),
}
_STORES: dict[str, Access] = {
    "b8": (np.uint8, 1, None), "b16": (np.uint16, 1, None), "b32": (np.uint32, 1, None),
    "b64": (None, 2, None), "b96": (None, 3, None), "b128": (None, 4, None),
    "d16_hi_b8": (np.uint8, 1, "hi"), "d16_hi_b16": (np.uint16, 1, "hi"),
}

# DS spells its d16 forms after the type ("ds_load_u16_d16_hi", not "..._d16_hi_b16").
_DS_LOADS: dict[str, Access] = {
    **_LOADS,
    "u16_d16": (np.uint16, 1, "lo"), "u16_d16_hi": (np.uint16, 1, "hi"),
    "u8_d16": (np.uint8, 1, "lo"), "u8_d16_hi": (np.uint8, 1, "hi"),
    "i8_d16": (np.int8, 1, "lo"), "i8_d16_hi": (np.int8, 1, "hi"),
}
_DS_STORES: dict[str, Access] = {
    **_STORES, "b16_d16_hi": (np.uint16, 1, "hi"), "b8_d16_hi": (np.uint8, 1, "hi")}


def _load_into(g: WaveGroup, vdst: int, idx: np.ndarray | None, kind: Access,
               fetch: Callable[[np.dtype], np.ndarray],
               fetch_words: Callable[[int], np.ndarray]) -> None:
    dtype, nwords, d16 = kind
    if dtype is None or dtype == np.uint32:
        words = fetch_words(nwords)
        for k in range(nwords):
            _put(g, vdst + k, idx, words[:, k])
        return
    _put_typed(g, vdst, idx, dtype, d16, fetch(np.dtype(dtype)))


def _put_typed(g: WaveGroup, vdst: int, idx: np.ndarray | None, dtype: type[np.integer],
               d16: str | None, values: np.ndarray) -> None:
    """Loaded sub-dword `dtype` values into VGPR `vdst`: sign- or zero-extended, or into
    its low/high half (d16)."""
    if idx is None and g.v[vdst].flags.c_contiguous:
        # one pass: the cast (sign- or zero-extending) writes the register, or its half
        reg = g.v[vdst].reshape(-1)
        if d16 is not None:
            reg = reg.view(np.uint16).reshape(-1, 2)[:, 0 if d16 == "lo" else 1]
        np.copyto(reg, values.reshape(-1), casting="unsafe")
        return
    if np.dtype(dtype).kind == "i":
        bits = values.astype(np.int32).view(u32)
    else:
        bits = values.astype(u32)
    if d16 == "lo":
        old = _sel(g.v[vdst], idx)
        bits = (old & u32(0xFFFF0000)) | (bits & u32(0xFFFF))
    elif d16 == "hi":
        old = _sel(g.v[vdst], idx)
        bits = (old & u32(0xFFFF)) | (bits << u32(16))
    _put(g, vdst, idx, bits)


def _store_values(g: WaveGroup, vdata: int, idx: np.ndarray | None,
                  kind: Access) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """(typed values, or None for multi-dword) and the list of dword arrays."""
    dtype, nwords, d16 = kind
    words = [_sel(g.v[vdata + k], idx) for k in range(nwords)]
    if dtype is None:
        return None, words
    bits = words[0]
    if d16 == "hi":
        bits = bits >> u32(16)
    return bits.astype(dtype), words


# --- GLOBAL / FLAT / SCRATCH -----------------------------------------------------------------
_WIDE = ("u64", "i64", "b64", "f64")


def _lanes64(g: WaveGroup, reg: int, idx) -> np.ndarray:
    return _sel(g.v[reg], idx).astype(u64) | (_sel(g.v[reg + 1], idx).astype(u64) << u64(32))


def run_atomic(g: WaveGroup, space, addr: np.ndarray, idx, op: str, data: int, vdst: int,
               returns: bool) -> None:
    """A global/flat/buffer atomic <op> (add_u32, cmpswap_b64, ...) for the active lanes."""
    wide = op.endswith(_WIDE)
    nregs = 2 if wide else 1
    values = _lanes64(g, data, idx) if wide else _sel(g.v[data], idx)
    compare = None
    fn = None
    if op.startswith("cmpswap"):  # data = {new value, compare value}
        compare = _lanes64(g, data + 2, idx) if wide else _sel(g.v[data + 1], idx)
    else:
        fn = _atomic_fn(op)
    dtype = np.dtype(u64 if wide else u32)
    old = atomic_rmw(lambda a: space.gather(a, dtype), lambda a, v: space.scatter(a, v),
                     addr, values, fn, compare, float_compare=op == "cmpswap_f32", op=op,
                     returns=returns)
    if returns:  # the values the lanes saw (atomic_rmw may compute them even when not asked)
        assert old is not None  # atomic_rmw gives them whenever `returns`
        if nregs == 1:
            _put(g, vdst, idx, old)
        else:
            _put(g, vdst, idx, (old & u64(0xFFFFFFFF)).astype(u32))
            _put(g, vdst + 1, idx, (old >> u64(32)).astype(u32))


def _known_atomic(op: str) -> bool:
    return op.startswith("cmpswap_") or _atomic_fn(op) is not None


def compile_flat(inst: d.Instruction) -> Callable | None:
    name = inst.name
    f = inst.f
    seg = inst.encoding  # FLAT, GLOBAL, SCRATCH
    prefix, _, rest = name.partition("_")
    op, _, suffix = rest.partition("_")
    if op == "prefetch":  # gfx1250 global/flat_prefetch: a hint
        return lambda g, ctx: None
    to_lds = op == "load" and suffix.startswith("lds_")  # gfx9: loads straight to LDS
    if to_lds:
        suffix = suffix[4:]
    to_lds = to_lds or (op == "load" and bool(f.get("lds")))  # gfx90a: the lds bit
    if op == "load":
        kind = _LOADS.get(suffix)
    elif op == "store":
        kind = _STORES.get(suffix)
    elif op == "atomic" and _known_atomic(suffix):
        kind = (None, 2 if suffix.endswith(_WIDE) else 1, None)
    else:
        return None
    if kind is None:
        return None
    atomic_op = suffix
    # gfx1250 scale_offset: the VGPR offset counts elements of the access's size
    scale = 1
    if f.get("scale_offset"):
        scale = np.dtype(kind[0]).itemsize if kind[0] is not None else 4 * kind[1]

    def addresses(g: WaveGroup, ctx: MemoryContext, idx) -> np.ndarray:
        off = f["offset"]
        if seg == "SCRATCH":
            a = np.zeros(1, dtype=np.int64)
            if f["saddr"] != d.NULL:
                a = a + np.asarray(g.s[:, f["saddr"]], np.int64)[:, None]
            if f["sve"]:
                a = a + g.v[f["addr"]].astype(np.int64) * scale
            return _sel(np.broadcast_to(a + off, (g.count, g.lanes)).copy(), idx)
        # the active lanes' registers first: a few lanes of a big group (a divergent
        # branch, clang's one-lane-a-wave atomics) cost a few lanes' arithmetic
        if seg == "GLOBAL" and f["saddr"] != d.NULL:
            base = g.s[:, f["saddr"]].astype(u64) | (g.s[:, f["saddr"] + 1].astype(u64) << u64(32))
            if idx is None:
                a = (base[:, None] + g.v[f["addr"]].astype(u64) * u64(scale)).reshape(-1)
            else:
                a = base[idx // g.lanes] + _sel(g.v[f["addr"]], idx).astype(u64) * u64(scale)
        else:  # the register pair's words interleaved and viewed as u64: two copies
            a = join64(_sel(g.v[f["addr"]], idx), _sel(g.v[f["addr"] + 1], idx))
        if off:  # a signed offset, modulo 2**64 (a is this call's own array)
            a += u64(off % (1 << 64))
        return a

    # a wave-uniform scratch dword access (no VGPR or SGPR address: clang's spills)
    uniform = (seg == "SCRATCH" and f["saddr"] == d.NULL and not f["sve"] and not to_lds
               and op in ("load", "store") and kind[0] in (None, np.uint32)
               and kind[2] is None)

    def run(g: WaveGroup, ctx: MemoryContext) -> None:
        idx = _active(g)
        if idx is not None and idx.size == 0:
            return
        if uniform and idx is None:
            rows = ctx.scratch_rows(g, f["offset"], kind[1])
            if rows is not None:  # every lane's dwords: one strided copy each
                for k in range(kind[1]):
                    if op == "load":
                        _put(g, f["vdst"] + k, None, rows[:, k])
                    else:
                        rows[:, k] = g.v[f["data"] + k].reshape(-1)
                return
        addr = addresses(g, ctx, idx)
        space = ctx.space_for(g, inst, seg, addr, idx)
        if to_lds:
            dtype, nwords, _ = kind
            if dtype is None or dtype == np.uint32:
                got = space.gather_words(addr, nwords)
                values = [got[:, k] for k in range(nwords)]
            else:
                values = [space.gather(addr, np.dtype(dtype))]
            size = np.dtype(dtype).itemsize if dtype is not None else 4 * nwords
            _load_to_lds(g, ctx, inst, idx, values, size)
        elif op == "load":
            _load_into(g, f["vdst"], idx, kind, lambda dt: space.gather(addr, dt),
                       lambda n: space.gather_words(addr, n))
        elif op == "store":
            typed, words = _store_values(g, f["data"], idx, kind)
            if typed is not None:
                space.scatter(addr, typed)
                return
            if isinstance(space, ByteSpace):
                where = space.word_index(addr, tuple(range(0, 4 * len(words), 4)))
                if where is not None:  # scratch/LDS, all in range: one scatter of every dword
                    space.data.view(u32)[where] = np.stack(words)
                    return
            for k, w in enumerate(words):
                space.scatter(addr + type(addr[0])(4 * k) if addr.size else addr, w)
        else:
            run_atomic(g, space, addr, idx, atomic_op, f["data"], f["vdst"], bool(f["glc"]))

    return run


class GlobalSpace:
    def __init__(self, ctx: MemoryContext, inst: d.Instruction) -> None:
        self.ctx, self.inst = ctx, inst

    def gather(self, addr, dtype):
        return gather_typed(self.ctx, self.inst, addr, dtype)

    def gather_words(self, addr, n):
        return gather_words(self.ctx, self.inst, addr, n)

    def scatter(self, addr, values):
        scatter_typed(self.ctx, self.inst, addr, values)


class MixedSpace:
    """A flat access whose lanes point into different apertures (global, LDS, scratch):
    each part serves its own lanes, in lane order of the access."""

    def __init__(self, parts: list[tuple[np.ndarray, Space]]) -> None:
        self.parts = parts

    def _check(self, addr) -> None:
        if np.asarray(addr).size != self.parts[0][0].size:  # atomics combine lanes by address
            raise NotImplementedError("atomics through flat pointers into mixed apertures")

    def gather(self, addr, dtype):
        self._check(addr)
        out = np.zeros(np.asarray(addr).size, dtype=dtype)
        for mask, space in self.parts:
            out[mask] = space.gather(np.asarray(addr)[mask], dtype)
        return out

    def gather_words(self, addr, n):
        self._check(addr)
        out = np.zeros((np.asarray(addr).size, n), dtype=u32)
        for mask, space in self.parts:
            out[mask] = space.gather_words(np.asarray(addr)[mask], n)
        return out

    def scatter(self, addr, values):
        self._check(addr)
        for mask, space in self.parts:
            space.scatter(np.asarray(addr)[mask], np.asarray(values)[mask])


class ByteSpace:
    """LDS or scratch: one flat byte array; `base` maps each lane to its region. LDS
    addresses are 32-bit (`wrap32`): the hardware forms vaddr + offset modulo 2^32, and
    clang relies on it (tile[63 - l] is (0 - l) + offset:252)."""

    def __init__(self, ctx: MemoryContext, inst: d.Instruction, data: np.ndarray,
                 base: np.ndarray, limit: int, fault: bool, wrap32: bool = False,
                 align: int = 1) -> None:
        self.ctx, self.inst, self.data, self.base, self.limit = ctx, inst, data, base, limit
        self.fault, self.wrap32 = fault, wrap32
        self.align = align  # a power of two dividing every lane's base

    def _index(self, addr: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(byte position per lane, in range per lane or _ALL, the OR of the in-range
        addresses when every lane is in range else -1: its low bits say the alignment)."""
        a = np.asarray(addr)
        if a.dtype != np.int64:
            a = a.astype(np.int64)
        if a.size:
            # the common case, one reduction: every address <= their OR, and a negative
            # one makes the OR negative; only when the OR does not fit, the exact bounds
            either = int(np.bitwise_or.reduce(a))
            if 0 <= either and (either + size <= self.limit or (
                    int(a.max()) + size <= self.limit and int(a.min()) >= 0)):
                return self.base + a, _ALL, either
        a = a.copy() if a is addr else a
        if self.wrap32:
            a &= 0xFFFFFFFF
        ok = (a >= 0) & (a + size <= self.limit)
        if self.fault and not np.all(ok):
            bad = int(a[~ok][0])
            raise _fault(self.ctx, self.inst, bad & 0xFFFFFFFF,
                         f"outside the {self.limit}-byte private segment of the work-item")
        return np.where(ok, self.base + a, 0), ok, -1

    def _aligned(self, either: int, size: int) -> bool:
        return size in _SHIFT and either >= 0 and not either & (size - 1) and (
            self.align % size == 0)

    def absolute(self, addr: np.ndarray, size: int) -> tuple[ByteSpace, np.ndarray]:
        """The same bytes addressed by absolute position (for atomics, which combine lanes
        of different workgroups by address): (space, positions; -1 where out of range)."""
        pos, ok, _ = self._index(addr, size)
        flat = ByteSpace(self.ctx, self.inst, self.data, np.zeros(1, np.int64),
                         self.data.size, self.fault)
        return flat, pos if ok is _ALL else np.where(ok, pos, -1)

    def gather(self, addr, dtype):
        dtype = np.dtype(dtype)
        size = dtype.itemsize
        pos, ok, either = self._index(addr, size)
        if size == 1:
            raw = self.data.view(dtype)[pos]
        elif self._aligned(either, size) or (
                size in _SHIFT and pos.size and not int(np.bitwise_or.reduce(pos)) & (size - 1)):
            raw = self.data.view(dtype)[pos >> _SHIFT[size]]  # aligned: a typed view
        else:
            idx = pos[:, None] + np.arange(size)
            raw = self.data[idx].reshape(-1).view(dtype).copy()
        if ok is not _ALL and not ok.all():
            raw[~ok] = 0
        return raw

    def gather_words(self, addr, n):
        a = np.asarray(addr).astype(np.int64)
        if n == 1:
            return self.gather(a, u32).reshape(-1, 1)
        pos, ok, either = self._index(a, 4 * n)
        if ok is _ALL and (self._aligned(either, 4) or (
                pos.size and not int(np.bitwise_or.reduce(pos)) & 3)):
            # every lane's n words in range and dword-aligned: one gather of (lanes, n)
            return self.data.view(u32)[(pos >> 2)[:, None] + np.arange(n)]
        return np.stack([self.gather(a + 4 * k, u32) for k in range(n)], axis=1)

    def word_index(self, addr, byte_offsets: tuple[int, ...]) -> np.ndarray | None:
        """(len(byte_offsets), lanes) positions in the space's dword view of each lane's
        dword at addr + offset, when every one is in range and dword-aligned; else None
        (use gather/scatter, which zero or drop out-of-range lanes)."""
        lo, hi = min(byte_offsets), max(byte_offsets) + 4
        if lo < 0 or any(o & 3 for o in byte_offsets):
            return None
        a = np.asarray(addr)
        pos, ok, either = self._index(a + lo if lo else a, hi - lo)
        if ok is not _ALL or not self._aligned(either, 4):
            return None
        words = np.asarray(byte_offsets, np.int64)[:, None] - lo >> 2
        return words + (pos >> 2)[None, :]

    def scatter(self, addr, values):
        values = np.asarray(values)
        size = values.dtype.itemsize
        pos, ok, either = self._index(addr, size)
        if ok is not _ALL and not ok.all():
            pos, values = pos[ok], values[ok]
        if size == 1:
            self.data.view(values.dtype)[pos] = values
            return
        if self._aligned(either, size) or (
                size in _SHIFT and pos.size and not int(np.bitwise_or.reduce(pos)) & (size - 1)):
            self.data.view(values.dtype)[pos >> _SHIFT[size]] = values
            return
        idx = pos[:, None] + np.arange(size)
        self.data[idx.reshape(-1)] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)


_ALL = np.ones(0, bool)  # _index's "every lane in range"
_SHIFT = {2: 1, 4: 2, 8: 3, 16: 4}


# --- MUBUF -------------------------------------------------------------------------------------
_FORMAT_AS_DWORDS = {"format_x": "b32", "format_xy": "b64", "format_xyz": "b96",
                     "format_xyzw": "b128"}


# base[47:32] of the private segment buffer V# the virtual GPU hands gfx9 kernels
PRIVATE_VSHARP_HI = 0xFFFF


def private_vsharp(private_size: int) -> tuple[int, int, int, int]:
    """The 4 SGPRs of the private segment buffer: base marker, no stride, all records."""
    return (0, PRIVATE_VSHARP_HI, 0xFFFFFFFF, 1 << 23)  # word 3: ADD_TID_ENABLE


def _buffer_operands(g: WaveGroup, inst: d.Instruction) -> tuple:
    """V# words 0-1, base, stride, num_records (per wave) and per-lane offset, index,
    soffset of a MUBUF/MTBUF instruction."""
    f = inst.f
    r = f["srsrc"]
    w0, w1, w2 = (g.s[:, r + k].astype(u64) for k in range(3))
    if f.get("vsharp57"):  # gfx1250: base [56:0], num_records [101:57], stride [121:108]
        w3 = g.s[:, r + 3].astype(u64)
        base = w0 | ((w1 & u64(0x1FFFFFF)) << u64(32))
        num_records = (w1 >> u64(25)) | (w2 << u64(7)) | ((w3 & u64(0x3F)) << u64(39))
        stride = (w3 >> u64(12)) & u64(0x3FFF)
    else:
        base = w0 | ((w1 & u64(0xFFFF)) << u64(32))
        stride = (w1 >> u64(16)) & u64(0x3FFF)
        num_records = w2
    soff = (np.asarray(g.sread(f["soffset"], inst.literal), u64)
            if f["soffset"] != d.NULL else u64(0))
    offset = np.zeros((g.count, g.lanes), dtype=u64) + u64(f["offset"])
    vreg = f["vaddr"]
    index = np.zeros((g.count, g.lanes), dtype=u64)
    if f["idxen"]:
        index = index + g.v[vreg].astype(u64)
        vreg += 1
    if f["offen"]:
        offset = offset + g.v[vreg].astype(u64)
    offset &= u64(0xFFFFFFFF)  # the buffer offset is 32-bit: -16 + 16 is 0, not 2**32
    soff = np.broadcast_to(np.asarray(soff, u64).reshape(-1, 1) if np.ndim(soff) else soff,
                           (g.count, 1))
    return w0, w1, base, stride, num_records, offset, index, soff


def buffer_elements(g: WaveGroup, inst: d.Instruction, size: int
                    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(active lanes, byte address per active lane, in range per active lane) of a
    `size`-byte element access through the instruction's V#."""
    _, _, base, stride, num_records, offset, index, soff = _buffer_operands(g, inst)
    idx = _active(g)
    structured = (stride != 0)[:, None]
    in_range_s = ((index < num_records[:, None]) & (offset + u64(size) <= stride[:, None])
                  if np.any(structured) else None)
    ok = _in_range(offset, 0, size, num_records, structured, in_range_s)
    addr = base[:, None] + stride[:, None] * index + offset + soff
    return idx, _sel(addr, idx), _sel(ok, idx)


def compile_mubuf(inst: d.Instruction) -> Callable | None:
    """MUBUF (buffer_*) and MTBUF (tbuffer_*) instructions through V# descriptors."""
    name = inst.name
    f = inst.f
    parts = name.split("_", 2)
    if len(parts) < 3:  # no buffer_<op>_<type> access (cache control is CACHE_CONTROL's)
        return None
    _, op, suffix = parts
    if "format" in suffix:  # formatted access: 32-bit components only (raw dwords)
        dwords = _FORMAT_AS_DWORDS.get(suffix)
        if dwords is None:
            return None
        suffix = dwords
    if op == "load":
        kind = _LOADS.get(suffix)
    elif op == "store":
        kind = _STORES.get(suffix)
    elif op == "atomic" and _known_atomic(suffix):
        kind = (None, 2 if suffix.endswith(_WIDE) else 1, None)
    else:
        return None
    if kind is None:
        return None
    size = np.dtype(kind[0]).itemsize if kind[0] is not None else 4 * kind[1]

    def run(g: WaveGroup, ctx: MemoryContext) -> None:
        idx = _active(g)
        if idx is not None and idx.size == 0:
            return
        w0, w1, base, stride, num_records, offset, index, soff = _buffer_operands(g, inst)
        if op in ("load", "store") and np.all((w1 & u64(0xFFFF)) == PRIVATE_VSHARP_HI) and (
                np.all(w0 == 0)):
            # the private segment buffer (gfx9 non-architected scratch): swizzled per lane,
            # so a lane's byte offset is offset + soffset / 64 (soffset is wave-scaled)
            addr = _sel(offset + soff // u64(64), idx)
            space = ctx.scratch_space(g, inst, idx)
            if op == "load":
                _load_into(g, f["vdata"], idx, kind, lambda dt: space.gather(addr, dt),
                           lambda n: space.gather_words(addr, n))
            else:
                typed, words = _store_values(g, f["vdata"], idx, kind)
                if typed is not None:
                    space.scatter(addr, typed)
                else:
                    for k, w in enumerate(words):
                        space.scatter(addr + u64(4 * k), w)
            return
        structured = (stride != 0)[:, None]
        if np.any(structured):
            # in range when index < num_records and offset < stride
            in_range_s = (index < num_records[:, None]) & (offset + u64(size) <= stride[:, None])
        else:
            in_range_s = None
        addr = base[:, None] + stride[:, None] * index + offset + soff
        flat_addr = _sel(addr, idx)
        nwords = max(1, size // 4)
        if op == "atomic":  # out-of-range lanes do nothing and return 0
            ok = _sel(_in_range(offset, 0, size, num_records, structured, in_range_s), idx)
            lanes = np.arange(g.count * g.lanes) if idx is None else idx
            run_atomic(g, GlobalSpace(ctx, inst), flat_addr[ok], lanes[ok], suffix,
                       f["vdata"], f["vdata"], bool(f["glc"]))
            if f["glc"] and not ok.all():
                for k in range(nwords):
                    _put(g, f["vdata"] + k, lanes[~ok], np.zeros((~ok).sum(), u32))
            return
        if op == "load" and (kind[0] is None or kind[0] == np.uint32) and not f.get("lds"):
            ok = _sel(_in_range(offset, 0, size, num_records, structured, in_range_s), idx)
            if ok.all():  # every lane's dwords in range: one gather of (lanes, dwords)
                got = gather_words(ctx, inst, flat_addr, nwords)
                for k in range(nwords):
                    _put(g, f["vdata"] + k, idx, got[:, k])
                return
        if op == "load":
            values_words = []
            for k in range(nwords if kind[0] is None or kind[0] == np.uint32 else 1):
                ok = _in_range(offset, k, size if nwords == 1 else 4, num_records, structured,
                               in_range_s)
                okf = _sel(ok, idx)
                a = flat_addr + u64(4 * k)
                out = np.zeros(a.size, dtype=u32 if kind[0] is None else kind[0])
                if np.any(okf):
                    if kind[0] is None:
                        out[okf] = gather_typed(ctx, inst, a[okf], u32)
                    else:
                        out[okf] = gather_typed(ctx, inst, a[okf], kind[0])
                values_words.append(out)
            if f.get("lds"):  # gfx9 "lds": the data goes to LDS, not to VGPRs
                _load_to_lds(g, ctx, inst, idx, values_words, size)
            elif kind[0] is None or kind[0] == np.uint32:
                for k, w in enumerate(values_words):
                    _put(g, f["vdata"] + k, idx, w.astype(u32))
            else:
                _put_typed(g, f["vdata"], idx, kind[0], kind[2], values_words[0])
        else:
            typed, words = _store_values(g, f["vdata"], idx, kind)
            chunks = [typed] if typed is not None else words
            for k, w in enumerate(chunks):
                ok = _sel(_in_range(offset, k, w.dtype.itemsize, num_records, structured,
                                    in_range_s), idx)
                if np.any(ok):
                    scatter_typed(ctx, inst, (flat_addr + u64(4 * k))[ok], w[ok])

    return run


def _load_to_lds(g: WaveGroup, ctx: MemoryContext, inst: d.Instruction, idx,
                 values_words: list[np.ndarray], size: int) -> None:
    """A buffer load with the lds bit (gfx9; 12 and 16 bytes a lane on gfx950): lane l's
    `size` bytes go to LDS at M0 + the instruction offset + l * size."""
    lane = np.broadcast_to(np.arange(g.lanes, dtype=np.int64), (g.count, g.lanes))
    m0 = np.broadcast_to(g.s[:, d.M0].astype(np.int64)[:, None], (g.count, g.lanes))
    lds_addr = _sel(m0 + inst.f["offset"] + lane * size, idx)
    space, addr = ctx.lds_space(g, inst, lds_addr, idx)
    for k, w in enumerate(values_words):
        space.scatter(addr + 4 * k, w)


def _in_range(offset, k, size, num_records, structured, in_range_s):
    raw = offset + u64(4 * k + size) <= num_records[:, None]
    if in_range_s is None:
        return raw
    return np.where(structured, in_range_s, raw)


# --- DS (LDS) ----------------------------------------------------------------------------------
def compile_ds(inst: d.Instruction) -> Callable | None:
    name = inst.name
    f = inst.f
    offset = f["offset0"] | (f["offset1"] << 8)
    parts = name.split("_")
    if name in ("ds_nop",):
        return lambda g, ctx: None
    if name.startswith("ds_load_2addr") or name.startswith("ds_store_2addr"):
        width = 8 if name.endswith("b64") else 4
        stride = width * (64 if "stride64" in name else 1)
        is_load = parts[1] == "load"

        nw = width // 4
        offsets = tuple(o * stride + 4 * j for o in (f["offset0"], f["offset1"])
                        for j in range(nw))

        def run2(g: WaveGroup, ctx: MemoryContext) -> None:
            idx = _active(g)
            space, addr = ctx.lds_space(g, inst, _sel(g.v[f["addr"]], idx), idx)
            where = space.word_index(addr, offsets)
            if where is not None:  # one gather / scatter of every dword of every lane
                words = space.data.view(u32)
                if is_load:
                    dst = g.v[f["vdst"]: f["vdst"] + len(offsets)]
                    if idx is None and dst.flags.c_contiguous:  # straight into the VGPRs
                        np.take(words, where, out=dst.reshape(where.shape), mode="clip")
                        return
                    got = words[where]
                    for k in range(len(offsets)):
                        _put(g, f["vdst"] + k, idx, got[k])
                else:
                    words[where] = np.stack([
                        _sel(g.v[(f["data0"] if k < nw else f["data1"]) + k % nw], idx)
                        for k in range(len(offsets))])
                return
            for k, off in enumerate((f["offset0"] * stride, f["offset1"] * stride)):
                if is_load:
                    words = space.gather_words(addr + off, nw)
                    for j in range(nw):
                        _put(g, f["vdst"] + k * nw + j, idx, words[:, j])
                else:
                    src = f["data0"] if k == 0 else f["data1"]
                    for j in range(nw):
                        space.scatter(addr + off + 4 * j, _sel(g.v[src + j], idx))

        return run2
    if parts[1] == "load":
        suffix = "_".join(parts[2:])
        load_kind = _DS_LOADS.get(suffix)
        if load_kind is None:
            return None

        load_dtype, _, load_d16 = load_kind

        def load(g: WaveGroup, ctx: MemoryContext) -> None:
            idx = _active(g)
            if idx is None and load_dtype is not None:  # every lane: the common case
                values = ctx.lds_gather(g, g.v[f["addr"]], offset, np.dtype(load_dtype))
                if values is not None:
                    _put_typed(g, f["vdst"], None, load_dtype, load_d16, values)
                    return
            # the offset added in the same pass as the widening
            space, a = ctx.lds_space(
                g, inst, np.add(_sel(g.v[f["addr"]], idx), offset, dtype=np.int64), idx)
            _load_into(g, f["vdst"], idx, load_kind, lambda dt: space.gather(a, dt),
                       lambda n: space.gather_words(a, n))

        return load
    if parts[1] == "store":
        suffix = "_".join(parts[2:])
        kind = _DS_STORES.get(suffix)
        if kind is None:
            return None

        def store(g: WaveGroup, ctx: MemoryContext) -> None:
            idx = _active(g)
            space, addr = ctx.lds_space(g, inst, _sel(g.v[f["addr"]], idx), idx)
            typed, words = _store_values(g, f["data0"], idx, kind)
            if typed is not None:
                space.scatter(addr + offset, typed)
            else:
                for k, w in enumerate(words):
                    space.scatter(addr + offset + 4 * k, w)

        return store
    if name in ("ds_swizzle_b32", "ds_bpermute_b32", "ds_permute_b32"):
        return lambda g, ctx: _ds_lane_op(g, inst, name, offset)
    if name in ("ds_append", "ds_consume"):
        return lambda g, ctx: _ds_append(g, ctx, inst, offset, name == "ds_consume")
    # LDS atomics: ds_<op>[_rtn]_<type>, 32- and 64-bit
    rtn = "rtn" in parts
    core = "_".join(p for p in parts[1:] if p != "rtn")
    cmpstore = core.startswith("cmpstore_")
    mskor = core.startswith("mskor_")  # old = (old & ~data0) | data1
    fn = None if cmpstore or mskor else _atomic_fn(core)
    if fn is None and not (cmpstore or mskor):
        return None
    wide = core.endswith(_WIDE)
    dtype = np.dtype(u64 if wide else u32)

    def lanes(g: WaveGroup, reg: int, idx) -> np.ndarray:
        return _lanes64(g, reg, idx) if wide else _sel(g.v[reg], idx)

    def atomic(g: WaveGroup, ctx: MemoryContext) -> None:
        idx = _active(g)
        space, addr = ctx.lds_space(g, inst, _sel(g.v[f["addr"]], idx), idx)
        flat, pos = space.absolute(addr + offset, dtype.itemsize)
        inside = pos >= 0  # out-of-range LDS atomics do nothing and return 0
        data0 = lanes(g, f["data0"], idx)[inside]
        # ds_cmpstore: data0 = the new value, data1 = the compare value
        compare = lanes(g, f["data1"], idx)[inside] if cmpstore else None
        op = fn
        if mskor:  # the values are lane numbers, so that each lane's pair is found
            clear, setv = data0, lanes(g, f["data1"], idx)[inside]
            data0 = np.arange(clear.size, dtype=dtype)

            def op(old, k):
                k = np.asarray(k).astype(np.int64)
                return (old & ~clear[k]) | setv[k]
        seen = atomic_rmw(lambda x: flat.gather(x, dtype), flat.scatter, pos[inside], data0,
                          op, compare, float_compare=core.endswith(("f32", "f64")),
                          op="" if mskor else core, returns=rtn)
        if not rtn:
            return
        old = np.zeros(pos.size, dtype)
        old[inside] = seen
        if rtn and wide:
            _put(g, f["vdst"], idx, (old & u64(0xFFFFFFFF)).astype(u32))
            _put(g, f["vdst"] + 1, idx, (old >> u64(32)).astype(u32))
        elif rtn:
            _put(g, f["vdst"], idx, old)

    return atomic


def _ds_append(g: WaveGroup, ctx: MemoryContext, inst: d.Instruction, offset: int,
               consume: bool) -> None:
    """ds_append / ds_consume: per wave, the LDS dword at M0[15:0] + offset grows (shrinks)
    by the number of active lanes; every active lane gets the value from before. Waves
    take their turn in wave order."""
    f = inst.f
    ex = g.exec_mask()
    counts = ex.sum(axis=1).astype(np.int64)
    lane_addr = np.broadcast_to(((g.s[:, d.M0].astype(np.int64) & 0xFFFF) + offset)[:, None],
                                ex.shape).reshape(-1)
    space, addr = ctx.lds_space(g, inst, lane_addr, None)
    flat, pos = space.absolute(addr, 4)
    pos = pos.reshape(ex.shape)[:, 0]
    result = np.zeros(g.count, u32)
    for w in range(g.count):
        if counts[w] == 0 or pos[w] < 0:
            continue  # no active lane, or outside the LDS: nothing changes, 0 returned
        p = pos[w:w + 1]
        old = flat.gather(p, np.dtype(u32))[0]
        result[w] = old
        new = (int(old) - int(counts[w]) if consume else int(old) + int(counts[w])) & 0xFFFFFFFF
        flat.scatter(p, np.array([new], u32))
    g.vwrite(f["vdst"], np.broadcast_to(result[:, None], ex.shape))


def _ds_lane_op(g: WaveGroup, inst: d.Instruction, name: str, offset: int) -> None:
    f = inst.f
    ex = g.exec_mask()
    if name == "ds_swizzle_b32":
        src = g.v[f["addr"]]
        if offset & 0x8000:  # quad permute mode
            lane = _LANE[:g.lanes]
            srcl = (lane & ~3) + ((offset >> (2 * (lane & 3))) & 3)
        else:  # bitmask mode within groups of 32
            and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
            lane = _LANE[:g.lanes]
            srcl = (lane & ~31) | (((lane & and_m) | or_m) ^ xor_m)
        value = src[:, srcl]
        value = np.where(ex[:, srcl], value, u32(0))
        g.vwrite(f["vdst"], value)
        return
    addr = (g.v[f["addr"]] + u32(offset)) >> u32(2)
    lane = (addr & u32(g.lanes - 1)).astype(np.int64)
    data = g.v[f["data0"]]
    if name == "ds_bpermute_b32":  # dst[i] = data[addr[i]]
        value = np.take_along_axis(data, lane, axis=1)
        value = np.where(np.take_along_axis(ex, lane, axis=1), value, u32(0))
        g.vwrite(f["vdst"], value)
    else:  # ds_permute_b32: dst[addr[i]] = data[i]
        out = np.zeros_like(data)
        rows = np.repeat(np.arange(g.count), g.lanes).reshape(g.count, g.lanes)
        out[rows[ex], lane[ex]] = data[ex]
        g.vwrite(f["vdst"], out)
