"""The ISA executor core: runs a kernel dispatch as wide numpy wave state.

`Executor(family).run(dispatch, memory)` reads the kernel descriptor at `kernel_object`, sets
up every wave of a batch of workgroups the way the hardware initialises them (user SGPRs in
kernel_code_properties order, workgroup ids after `user_sgpr_count`, packed work-item ids in
v0, EXEC for partial waves), then executes instruction by instruction for all waves that
share a program counter. Decoded and compiled instructions are cached per code address
within its code allocation (dropped when the code is unloaded and its allocation freed) and
checked against the code bytes on each dispatch. A `Family` supplies the decoder
(and the family's name for messages); everything else here is shared by the families.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ground.errors import HsaError, IllegalInstruction, MemoryFault
from ground.status import (
    HSA_STATUS_ERROR_EXCEPTION,
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
)
from hsa.virtual.executor import Dispatch, ShaderRegisters
from hsa.virtual.isa import gws, mem, salu, sfloat, valu, vop3p
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.heap import keep_freed_memory
from hsa.virtual.isa.state import PRIVATE_APERTURE_HI, SHARED_APERTURE_HI, WaveGroup
from hsa.virtual.memory import Allocation, MemoryMap

NSGPR = 128
BATCH_BYTES = 256 << 20  # VGPR and scratch state per batch of workgroups
MAX_STEPS = 10_000_000  # instructions per group run before we call it a hang
CODE_WINDOW = 1 << 20  # bytes of code around the entry that a program may reach


@dataclass(frozen=True)
class Descriptor:
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    entry_offset: int
    rsrc1: int
    rsrc2: int
    rsrc3: int
    properties: int
    kernarg_preload: int = 0  # gfx940+: KERNARG_PRELOAD_SPEC_LENGTH | OFFSET << 7

    @classmethod
    def from_bytes(cls, b: bytes) -> Descriptor:
        g, p, k = struct.unpack_from("<III", b, 0)
        entry = struct.unpack_from("<q", b, 16)[0]
        r3, r1, r2 = struct.unpack_from("<III", b, 44)
        props, preload = struct.unpack_from("<HH", b, 56)
        return cls(g, p, k, entry, r1, r2, r3, props, preload)

    @classmethod
    def from_registers(cls, regs: ShaderRegisters, wave_size: int) -> Descriptor:
        """What a PM4 dispatch's shader registers say (no fixed segment sizes: they come
        from the dispatch; no user-SGPR enables: the registers give the values)."""
        return cls(0, 0, 0, 0, regs.rsrc1, regs.rsrc2, regs.rsrc3,
                   (1 << 10) if wave_size == 32 else 0)

    @property
    def wave_size(self) -> int:
        return 32 if self.properties >> 10 & 1 else 64

    @property
    def vgprs(self) -> int:  # wave32: granules of 8
        return min(256, ((self.rsrc1 & 0x3F) + 1) * 8)

    @property
    def user_sgpr_count(self) -> int:
        return (self.rsrc2 >> 1) & 0x1F


# --- compiled programs ------------------------------------------------------------------------
SIMPLE, CONTROL, MEMORY = 0, 1, 2
SYNC = 3  # a control op that needs the batch's context (global wave sync)


@dataclass
class Compiled:
    inst: d.Instruction
    kind: int
    fn: Callable | None
    error: str | None = None

    def __post_init__(self) -> None:
        self.size = self.inst.size


@dataclass(frozen=True)
class Family:
    """What an encoding family plugs into the core."""

    name: str  # "gfx11", for messages
    decode_one: Callable[[tuple[int, ...], int, int], d.Instruction]  # (words, index, pc)
    wave_sizes: tuple[int, ...] = (32,)
    # rows of v[] a wave needs (VGPRs, and AccVGPRs from row 256 where the family has them)
    vgpr_rows: Callable[[Descriptor], int] = lambda desc: desc.vgprs
    kernarg_preload: bool = False  # gfx940+ firmware preloads kernargs into user SGPRs
    # the private segment buffer V# the hardware gives (non-architected scratch), or None
    private_buffer: Callable[[int], tuple[int, int, int, int]] | None = None
    # Instruction -> Compiled for the family's own instructions and renames (default: the
    # core's compile_instruction)
    compile: Callable[[d.Instruction], Compiled] | None = None
    # architected SGPRs (gfx12): writes the TTMP registers of each wave, called with
    # (s rows of the waves, dispatch, workgroup x, y, z of each wave, wave index in its group)
    init_sgprs: Callable | None = None
    # gfx1250's s_set_vgpr_msb: (decoded instruction, mode) -> the instruction with the
    # mode's VGPR bank bits added to its VGPR operands, or None where the family cannot
    # apply them to that encoding (see WaveGroup.vgpr_msb)
    vgpr_msb: Callable[[d.Instruction, int], d.Instruction | None] | None = None


@dataclass
class Program:
    family: Family
    entry: int
    start: int  # address of code[0]: the code object's allocation (functions before entry)
    snapshot: np.ndarray  # the code words of that allocation
    code: tuple[int, ...]
    cache: dict[int, Compiled] = field(default_factory=dict)
    code_base: int = 0  # the loaded code object's vaddr 0: PCs in messages are offsets from it
    # the instructions compiled under a non-zero VGPR bank select (s_set_vgpr_msb), by mode
    mode_caches: dict[int, dict[int, Compiled]] = field(default_factory=dict)

    def cache_for(self, msb: int) -> dict[int, Compiled]:
        return self.cache if msb == 0 else self.mode_caches.setdefault(msb, {})

    def ends_at(self, pc: int) -> bool:
        """Whether the instruction at `pc` is s_endpgm (a wave there has nothing left to
        do, so it needs no state and no merge with the waves that meet it there)."""
        c = self.at(pc)
        return c.fn is not None and c.inst.name in ("s_endpgm", "s_endpgm_saved")

    def at(self, pc: int, msb: int = 0) -> Compiled:
        cache = self.cache_for(msb)
        c = cache.get(pc)
        if c is None:
            index = (pc - self.start) // 4
            if index < 0 or index >= len(self.code):
                inst = d.Instruction(pc, 4, "UNKNOWN", 0, "<outside code>", {}, None, (0,))
            else:
                inst = self.family.decode_one(self.code, index, pc)
            banked: d.Instruction | None = inst
            if msb and inst.name not in ("<unknown>", "<outside code>"):
                banked = (self.family.vgpr_msb(inst, msb) if self.family.vgpr_msb
                          else None)
            if banked is None:
                c = Compiled(inst, SIMPLE, None, f"VGPR bank select 0x{msb:02x} "
                             f"(s_set_vgpr_msb) on a {inst.encoding} instruction")
            else:
                c = (self.family.compile or compile_instruction)(banked)
            cache[pc] = c
        return c


# Encodings only graphics shaders use: the executor names them instead of guessing.
GRAPHICS = {
    "VINTERP": "parameter interpolation", "LDSDIR": "LDS parameter/direct load",
    "EXP": "export to colour/position targets",
}
# Image formats (gfx9/gfx11 MIMG, gfx12 VIMAGE/VSAMPLE): compute kernels use them for
# textures and images, which the virtual GPU does not model yet.
IMAGES = ("MIMG", "VIMAGE", "VSAMPLE")


def compile_instruction(inst: d.Instruction) -> Compiled:
    enc = inst.encoding
    fn = None
    kind = SIMPLE
    if enc in GRAPHICS:
        return Compiled(inst, SIMPLE, None, f"{enc} is a graphics-only encoding: "
                        f"{GRAPHICS[enc]}; a compute kernel cannot use it")
    if enc in IMAGES:
        return Compiled(inst, SIMPLE, None, f"{enc} image instruction (opcode {inst.op}): "
                        "image loads, stores, samples and atomics are not modelled by the "
                        "virtual GPU yet")
    if inst.name == "<outside code>":
        return Compiled(inst, SIMPLE, None, "execution ran past the end of the code object's "
                        "code: the kernel has no s_endpgm on this path (a compiler can leave "
                        "a body it proved unreachable empty: look at the kernel's symbol size)")
    if inst.name == "<unknown>":
        words = " ".join(f"{w:08x}" for w in inst.words)
        why = inst.f.get("invalid")
        what = f"invalid encoding: {why}" if why else "unknown opcode"
        return Compiled(inst, SIMPLE, None, f"{what}, words {words}")
    if inst.name.startswith("ds_gws_"):
        gws_fn = gws.compile_gws(inst)
        return Compiled(inst, SYNC, gws_fn, None if gws_fn else "not implemented")
    cache_op = mem.compile_cache_control(inst)
    if cache_op is not None:
        return Compiled(inst, MEMORY, cache_op)
    if enc == "SOPP" or (enc == "SOP1" and inst.name in (
            "s_getpc_b64", "s_setpc_b64", "s_swappc_b64", "s_add_pc_i64", "s_barrier_signal")):
        return Compiled(inst, CONTROL, control_fn(inst))
    if enc in ("SOP1", "SOP2", "SOPC", "SOPK"):
        fn = salu.compile_salu(inst)
    elif enc == "VOP3" and inst.name.startswith("v_s_"):  # gfx12: VALU op, SGPR result
        fn = sfloat.compile_v_s(inst)
    elif enc in ("VOP1", "VOP2", "VOPC", "VOP3"):
        fn = valu.compile_alu(inst)
    elif enc in ("VOP3P", "VOPD"):
        fn = vop3p.compile(inst)
    elif enc == "SMEM":
        fn, kind = mem.compile_smem(inst), MEMORY
    elif enc in ("FLAT", "GLOBAL", "SCRATCH"):
        fn, kind = mem.compile_flat(inst), MEMORY
    elif enc in ("MUBUF", "MTBUF"):
        fn, kind = mem.compile_mubuf(inst), MEMORY
    elif enc == "DS":
        fn, kind = mem.compile_ds(inst), MEMORY
    return Compiled(inst, kind, fn, None if fn else "not implemented")


# Control results: list of (wave selection or None for all, next pc); END = the waves finish.
END = -1
BARRIER = gws.GWS_BARRIER  # -2: a wave waits at a barrier (s_barrier, ds_gws_barrier)
# -4: s_sleep: the waves give the other groups a turn. Code sleeps in a spin-wait on memory
# another wave will write (HIP 6's grid.sync: a counter in the cooperative launch's
# workspace): run on, the lowest-pc group would spin forever ahead of the wave it waits for.
SLEEP = -4


def control_fn(inst: d.Instruction) -> Callable | None:
    name = inst.name
    nxt = inst.pc + inst.size
    simm = inst.f.get("simm16", 0)
    target = nxt + 4 * (simm - 0x10000 if simm & 0x8000 else simm)
    if name == "s_endpgm" or name == "s_endpgm_saved":
        return lambda g: END
    if name == "s_branch":
        return lambda g: target
    if name in ("s_barrier", "s_barrier_wait"):  # gfx12 splits it: signal, then wait
        return lambda g: BARRIER
    if name == "s_barrier_signal" or name.startswith("s_wait_") or name.startswith(
            "s_prefetch_"):  # gfx12's split counters: memory is complete when issued here
        return lambda g: nxt
    if name.startswith("s_cbranch_"):
        cond = name[len("s_cbranch_"):]
        tests = {
            "scc0": lambda g: ~g.scc, "scc1": lambda g: g.scc.copy(),
            "vccz": lambda g: g.mask_zero(d.VCC_LO), "vccnz": lambda g: ~g.mask_zero(d.VCC_LO),
            "execz": lambda g: g.mask_zero(d.EXEC_LO),
            "execnz": lambda g: ~g.mask_zero(d.EXEC_LO),
        }
        test = tests.get(cond)
        if test is None:
            return None

        def branch(g: WaveGroup):
            taken = np.asarray(test(g), bool)
            if taken.all():
                return target
            if not taken.any():
                return nxt
            return [(taken, target), (~taken, nxt)]

        return branch
    if name == "s_getpc_b64":
        def getpc(g: WaveGroup):
            g.swrite(inst.f["sdst"], np.uint64(nxt), wide=True)
            return nxt
        return getpc
    if name in ("s_setpc_b64", "s_swappc_b64"):
        def setpc(g: WaveGroup):
            dest = np.asarray(g.sread(inst.f["ssrc0"], inst.literal, wide=True), np.uint64)
            if name == "s_swappc_b64":
                g.swrite(inst.f["sdst"], np.uint64(nxt), wide=True)
            uniq = np.unique(dest)
            if uniq.size == 1:
                return int(uniq[0])
            return [(dest == u, int(u)) for u in uniq]
        return setpc
    if name == "s_add_pc_i64":  # gfx1250's long branch: the next instruction's address + S0
        def addpc(g: WaveGroup):
            offset = np.asarray(g.sread(inst.f["ssrc0"], inst.literal, wide=True), np.uint64)
            dest = offset + np.uint64(nxt)  # modulo 2**64: a signed offset
            uniq = np.unique(dest)
            if uniq.size == 1:
                return int(uniq[0])
            return [(dest == u, int(u)) for u in uniq]
        return addpc
    if name == "s_trap":
        def trap(g: WaveGroup):
            raise TrapRaised(simm & 0xFF)
        return trap
    if name == "s_sendmsg" or name == "s_sendmsghalt":
        return lambda g: nxt  # MSG_DEALLOC_VGPRS and friends: nothing to do here
    if name == "s_sleep":
        return lambda g: SLEEP
    if name in ("s_nop", "s_waitcnt", "s_waitcnt_depctr", "s_delay_alu", "s_clause",
                "s_set_inst_prefetch_distance", "s_setprio", "s_icache_inv",
                "s_code_end", "s_wait_idle", "s_denorm_mode", "s_round_mode", "s_ttracedata",
                "s_incperflevel", "s_decperflevel", "s_wakeup"):
        return lambda g: nxt
    return None


def _workitem_ids(v0: np.ndarray, sx: np.ndarray, sy: np.ndarray, sz: np.ndarray,
                  wave_wg: np.ndarray, wave_in_wg: np.ndarray) -> np.ndarray:
    """Write the packed work-item ids (x | y << 10 | z << 20) of every lane into v0
    (waves, lanes) and return the (waves, lanes) mask of lanes that hold a work-item.
    Workgroups of one actual size share their waves' ids, so each distinct size (the full
    one, and the partial ones at the grid's edges) is computed once and gathered by wave."""
    lanes = v0.shape[1]
    shapes, which = np.unique(np.stack([sx, sy, sz], axis=1), axis=0, return_inverse=True)
    which = which.reshape(-1)[wave_wg]
    valid = np.empty(v0.shape, dtype=bool)
    for i, (ax, ay, az) in enumerate(shapes.tolist()):
        items = ax * ay * az
        flat = np.arange(-(-items // lanes) * lanes).reshape(-1, lanes)
        ok = flat < items
        ids = np.where(ok, flat % ax | (flat // ax % ay) << 10 | (flat // (ax * ay)) << 20,
                       0).astype(np.uint32)
        if len(shapes) == 1:
            v0[...] = ids[wave_in_wg]
            valid[...] = ok[wave_in_wg]
        else:
            sel = which == i
            v0[sel] = ids[wave_in_wg[sel]]
            valid[sel] = ok[wave_in_wg[sel]]
    return valid


def _cluster_order(counts: tuple[int, ...], cluster: tuple[int, ...], batch: int
                   ) -> tuple[np.ndarray, int]:
    """Workgroup order and batch size of a dispatch. With gfx1250 workgroup clusters, the
    workgroups of a cluster run in one batch (a batch's barriers wait for all its waves, so
    the cluster barrier, s_barrier_wait -3, holds every workgroup of the cluster): order by
    cluster, batches of whole clusters."""
    n_wg = counts[0] * counts[1] * counts[2]
    size = cluster[0] * cluster[1] * cluster[2]
    if size <= 1:
        return np.arange(n_wg), batch
    wg = np.arange(n_wg)
    x, y, z = wg % counts[0], (wg // counts[0]) % counts[1], wg // (counts[0] * counts[1])
    per = [-(-c // s) for c, s in zip(counts, cluster, strict=True)]
    cid = ((z // cluster[2]) * per[1] + y // cluster[1]) * per[0] + x // cluster[0]
    inner = ((z % cluster[2]) * cluster[1] + y % cluster[1]) * cluster[0] + x % cluster[0]
    return np.lexsort((inner, cid)), max(size, batch // size * size)


def _round16(n: int) -> int:
    return (n + 15) & ~15


class TrapRaised(Exception):
    """s_trap: the wave asked for the trap handler (e.g. __builtin_trap, a failed assert)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# --- the per-batch context -------------------------------------------------------------------
class BatchContext:
    """What the memory instructions of one batch of workgroups need."""

    def __init__(self, dispatch: Dispatch, memory: MemoryMap, lds_size: int, n_wg: int,
                 private_size: int, n_lanes: int) -> None:
        self.memory = memory
        self.agent = dispatch.agent
        self.kernel_name = dispatch.kernel_name
        self.code_base = 0  # set per program: see `where`
        self.lds_size = lds_size
        # sizes rounded to 16 bytes so that aligned accesses can index typed views
        self.lds = np.zeros(_round16(lds_size * n_wg + 16), dtype=np.uint8)
        self.private_size = private_size
        self.scratch = np.zeros(_round16(private_size * n_lanes + 16), dtype=np.uint8)
        self.wave_wg = np.zeros(0, np.int64)  # batch wave index -> workgroup index in batch
        self.whole_dispatch = True  # every workgroup of the dispatch is in this batch
        self.gws: dict[int, dict[str, int]] = {}  # global wave sync resources (isa.gws)
        self.lane_instructions = 0

    def where(self, inst: d.Instruction) -> str:
        """Where an instruction is, as llvm-objdump shows it: its offset in the code object,
        with the kernel's name and the mnemonic."""
        return (f"kernel {self.kernel_name} at code-object offset "
                f"0x{inst.pc - self.code_base:x} ({inst.name})")

    def lds_space(self, g: WaveGroup, inst: d.Instruction, addr: np.ndarray,
                  idx: np.ndarray | None) -> tuple[mem.ByteSpace, np.ndarray]:
        base = self._lds_base(g)
        if idx is not None:
            base = base[idx]
        return mem.ByteSpace(self, inst, self.lds, base, self.lds_size, fault=False,
                             wrap32=True, align=self.lds_size & -self.lds_size
                             ), np.asarray(addr, dtype=np.int64)

    def _lds_base(self, g: WaveGroup) -> np.ndarray:
        """Each lane's workgroup's LDS byte offset (computed once per group)."""
        base = g.memo.get("lds_base")
        if base is None:
            base = g.memo["lds_base"] = np.repeat(self.wave_wg[g.waves] * self.lds_size,
                                                  g.lanes)
        return base

    def lds_gather(self, g: WaveGroup, addr: np.ndarray, offset: int,
                   dtype: np.dtype) -> np.ndarray | None:
        """The `dtype` element at every lane's addr + offset (`addr`: all the group's lanes'
        32-bit address words) when each is in range and aligned to its size: one OR of the
        addresses bounds and aligns them all, then one shift and one add of the lanes'
        bases give each lane's element, and one gather from the LDS view that starts at
        `offset` reads them. None otherwise: ByteSpace.gather then wraps, zeroes
        out-of-range lanes and reads unaligned elements.

        The positions and the OR depend on the address words alone: a group keeps them
        with a copy of the words they came from (a few, by element size and the words'
        place in the registers) and reuses them while the words are the same, compared in
        full: a GEMM reads a tile with one address register and many offsets."""
        size = dtype.itemsize
        if offset < 0 or self.lds_size % size or size & (size - 1):
            return None
        shift = size.bit_length() - 1
        kept = g.memo.setdefault("lds_positions", {})
        key = (shift, addr.__array_interface__["data"][0], addr.shape)
        hit = kept.get(key)
        if hit is not None and np.array_equal(hit[0], addr):
            _, either, pos = hit
        else:
            either = int(np.bitwise_or.reduce(addr, axis=None)) if addr.size else 0
            pos = None
            if not either & (size - 1) and either + size <= self.lds_size:
                pos = np.right_shift(addr.reshape(-1), shift, dtype=np.int64)
                pos += self._lds_base(g) >> shift
            if key not in kept and len(kept) >= 8:
                kept.pop(next(iter(kept)))
            kept[key] = (addr.copy(), either, pos)
        if pos is None or (either | offset) & (size - 1) or either + offset + size > self.lds_size:
            return None
        # every position + offset // size is inside the batch's LDS (checked above)
        return np.take(self.lds.view(dtype)[offset >> shift:], pos, mode="clip")

    def scratch_space(self, g: WaveGroup, inst: d.Instruction,
                      idx: np.ndarray | None) -> mem.ByteSpace:
        base = g.memo.get("scratch_base")
        if base is None:  # each lane's private segment: computed once per group
            lane = (g.waves[:, None] * g.lanes + np.arange(g.lanes)).reshape(-1)
            base = g.memo["scratch_base"] = lane * self.private_size
        if idx is not None:
            base = base[idx]
        return mem.ByteSpace(self, inst, self.scratch, base,
                             self.private_size, fault=True,
                             align=self.private_size & -self.private_size)

    def scratch_rows(self, g: WaveGroup, offset: int, nwords: int) -> np.ndarray | None:
        """Every lane's `nwords` dwords at private address `offset` (a wave-uniform scratch
        access: no VGPR or SGPR address, clang's spills) as one writable (lanes, nwords)
        strided view of the scratch: each lane's private segment is the next one's
        neighbour when the group's waves are one run of the batch. None when they are
        not, or the dwords are not all inside the segment and aligned (the general path
        then faults or reads them)."""
        size = self.private_size
        if offset < 0 or (offset | size) & 3 or offset + 4 * nwords > size:
            return None
        first = g.memo.get("scratch_run")
        if first is None:  # the first wave of a run of consecutive waves, or -1
            w = g.waves
            first = g.memo["scratch_run"] = int(w[0]) if w.size and int(w[-1]) - int(
                w[0]) == w.size - 1 and bool(np.all(np.diff(w) == 1)) else -1
        if first < 0:
            return None
        lanes = g.count * g.lanes
        start = first * g.lanes * size + offset
        return np.lib.stride_tricks.as_strided(
            self.scratch[start:].view(np.uint32), (lanes, nwords), (size, 4))

    def space_for(self, g: WaveGroup, inst: d.Instruction, seg: str, addr: np.ndarray,
                  idx: np.ndarray | None) -> mem.Space:
        if seg == "SCRATCH":
            return self.scratch_space(g, inst, idx)
        if seg == "FLAT" and addr.size:
            hi = addr >> np.uint64(32)
            kinds = set(np.unique(hi).tolist())
            apertures = kinds & {SHARED_APERTURE_HI, PRIVATE_APERTURE_HI}
            if not apertures:
                return mem.GlobalSpace(self, inst)
            lanes = (np.arange(g.count * g.lanes) if idx is None else idx)
            parts: list[tuple[np.ndarray, mem.Space]] = []
            for ap in kinds:
                mask = hi == ap
                sub = lanes[mask]
                space: mem.Space
                if ap == SHARED_APERTURE_HI:
                    space, _ = self.lds_space(g, inst, addr[mask], sub)
                elif ap == PRIVATE_APERTURE_HI:
                    space = self.scratch_space(g, inst, sub)
                else:
                    space = mem.GlobalSpace(self, inst)
                parts.append((mask, space))
            # LDS and scratch take 32-bit offsets within the aperture
            addr[...] = np.where(np.isin(hi, list(apertures)), addr & np.uint64(0xFFFFFFFF), addr)
            return parts[0][1] if len(parts) == 1 else mem.MixedSpace(parts)
        return mem.GlobalSpace(self, inst)


# --- the executor ------------------------------------------------------------------------------
class Executor:
    """Executes one family's kernel dispatches against a MemoryMap."""

    def __init__(self, family: Family) -> None:
        keep_freed_memory()  # wide temporaries: no page faults on every instruction
        self.isa = family
        self.family = family.name
        # code allocation -> entry -> Program, weakly keyed: the programs of code that was
        # unloaded (its allocation freed from the memory map) go with it, so a long run that
        # loads code at new addresses does not grow (issue 35).
        self._programs: weakref.WeakKeyDictionary[Allocation, dict[int, Program]] = (
            weakref.WeakKeyDictionary())
        self.last_lane_instructions = 0
        self.last_instructions = 0

    # program cache
    def program(self, entry: int, memory: MemoryMap, agent: int) -> Program:
        try:
            alloc = memory.find(entry, 4, agent)
        except MemoryFault as e:
            raise MemoryFault(HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
                              f"kernel code at 0x{entry:x} is not mapped for the agent: "
                              f"{e.text}; load the code object before dispatching",
                              address=entry) from None
        start = max(alloc.base, entry - CODE_WINDOW)
        start += (entry - start) % 4
        end = min(alloc.end, entry + CODE_WINDOW)
        n = (end - start) // 4
        snapshot = alloc.data[start - alloc.base: start - alloc.base + 4 * n].view("<u4")
        programs = self._programs.get(alloc)
        if programs is None:
            programs = self._programs[alloc] = {}
        prog = programs.get(entry)
        if prog is not None and prog.snapshot.size == n and np.array_equal(prog.snapshot,
                                                                             snapshot):
            return prog
        snap = snapshot.copy()
        prog = Program(self.isa, entry, start, snap, tuple(snap.tolist()), code_base=alloc.base)
        programs[entry] = prog
        return prog

    def cached_programs(self) -> int:
        """How many compiled programs the cache holds (those of live code allocations)."""
        return sum(len(p) for p in list(self._programs.values()))

    def run(self, dispatch: Dispatch, memory: MemoryMap) -> None:
        if dispatch.registers is not None:  # PM4: the shader registers, no descriptor
            desc = Descriptor.from_registers(dispatch.registers, dispatch.wavefront_size)
        else:
            desc_bytes = memory.read(dispatch.kernel_object, 64, dispatch.agent)
            desc = Descriptor.from_bytes(desc_bytes)
        lanes = desc.wave_size
        if lanes not in self.isa.wave_sizes:
            if lanes == 64:
                raise IllegalInstruction(
                    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                    f"kernel {dispatch.kernel_name} is compiled for wave64; the virtual "
                    f"{self.family} executor runs wave32 code only; compile with "
                    f"-mwavefrontsize32 (the {self.family} default)")
            raise IllegalInstruction(
                HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                f"kernel {dispatch.kernel_name} is compiled for wave32; {self.family} "
                "runs wave64 code only; compile it for this target without "
                "-mwavefrontsize32")
        entry = dispatch.kernel_object + desc.entry_offset
        prog = self.program(entry, memory, dispatch.agent)
        if min(int(x) for x in dispatch.grid_size) <= 0:
            return  # an empty grid launches no waves
        wg_size = tuple(max(1, int(x)) for x in dispatch.workgroup_size)
        grid = tuple(int(x) for x in dispatch.grid_size)
        counts = tuple(-(-grid[i] // wg_size[i]) for i in range(3))
        n_wg = counts[0] * counts[1] * counts[2]
        waves_per_wg = -(-(wg_size[0] * wg_size[1] * wg_size[2]) // lanes)
        lane_bytes = 4 * self.isa.vgpr_rows(desc) + max(dispatch.private_segment_size,
                                                        desc.private_segment_fixed_size)
        per_wg = max(1, waves_per_wg * lanes * lane_bytes)
        batch = max(1, BATCH_BYTES // per_wg)
        order, batch = _cluster_order(counts, tuple(int(c) for c in dispatch.cluster_size),
                                      batch)
        self.last_lane_instructions = 0
        self.last_instructions = 0
        with np.errstate(all="ignore"):
            for first in range(0, n_wg, batch):
                wgs = order[first:first + batch]
                self._run_batch(dispatch, memory, desc, prog, wgs, counts, wg_size, grid)

    def _run_batch(self, dispatch: Dispatch, memory: MemoryMap, desc: Descriptor,
                   prog: Program, wgs: np.ndarray, counts, wg_size, grid) -> None:
        LANES = desc.wave_size  # noqa: N806  (the wave size of this dispatch)
        # workgroup coordinates and actual (partial) sizes
        gx = wgs % counts[0]
        gy = (wgs // counts[0]) % counts[1]
        gz = wgs // (counts[0] * counts[1])
        sx = np.minimum(wg_size[0], grid[0] - gx * wg_size[0])
        sy = np.minimum(wg_size[1], grid[1] - gy * wg_size[1])
        sz = np.minimum(wg_size[2], grid[2] - gz * wg_size[2])
        items = sx * sy * sz
        nwaves = -(-items // LANES)
        wave_wg = np.repeat(np.arange(wgs.size), nwaves)
        starts = np.cumsum(nwaves) - nwaves
        wave_in_wg = np.arange(wave_wg.size) - starts[wave_wg]
        W = wave_wg.size
        private = max(dispatch.private_segment_size, desc.private_segment_fixed_size)
        lds_size = max(dispatch.group_segment_size, desc.group_segment_fixed_size)
        ctx = BatchContext(dispatch, memory, lds_size, wgs.size, private, W * LANES)
        ctx.code_base = prog.code_base
        ctx.wave_wg = wave_wg
        ctx.whole_dispatch = wgs.size == counts[0] * counts[1] * counts[2]

        v = np.zeros((self.isa.vgpr_rows(desc), W, LANES), dtype=np.uint32)
        valid = _workitem_ids(v[0], sx, sy, sz, wave_wg, wave_in_wg)

        s = np.zeros((W, NSGPR), dtype=np.uint32)
        k = 0

        def put64(value: int) -> None:
            nonlocal k
            s[:, k] = value & 0xFFFFFFFF
            s[:, k + 1] = (value >> 32) & 0xFFFFFFFF
            k += 2

        props = desc.properties
        if dispatch.registers is not None:  # PM4: s0.. = COMPUTE_USER_DATA_0.., as written
            k = desc.user_sgpr_count
            s[:, :k] = np.array(dispatch.registers.user_data[:k], dtype=np.uint32)
            props = 0
        if props & 1:  # private segment buffer V#: not used with architected flat scratch
            if self.isa.private_buffer is not None:
                s[:, k: k + 4] = self.isa.private_buffer(private)
            k += 4
        if props & 2:
            put64(dispatch.packet_address)
        if props & 4:
            put64(dispatch.queue_address)
        if props & 8:
            put64(dispatch.kernarg_address)
        if props & 16:
            put64(dispatch.dispatch_id)
        if props & 32:  # flat scratch init: architected on gfx11, left zero
            k += 2
        if props & 64:
            s[:, k] = private
            k += 1
        preload = desc.kernarg_preload & 0x7F if self.isa.kernarg_preload else 0
        entry = prog.entry
        if preload:  # what gfx940+ firmware does: kernarg dwords into the next user SGPRs,
            # and start past the 256-byte preamble that loads them for older firmware
            first = (desc.kernarg_preload >> 7) * 4
            raw = memory.read(dispatch.kernarg_address + first, 4 * preload, dispatch.agent)
            s[:, k: k + preload] = np.frombuffer(raw, "<u4")
            k += preload
            entry += 256
        k = max(k, desc.user_sgpr_count)
        for bit, coord in ((7, gx), (8, gy), (9, gz)):
            if desc.rsrc2 >> bit & 1:
                s[:, k] = coord[wave_wg].astype(np.uint32)
                k += 1
        if desc.rsrc2 >> 10 & 1:  # workgroup info
            k += 1
        if desc.rsrc2 & 1:  # private segment wave byte offset: scratch is per lane here
            s[:, k] = 0
            k += 1
        if self.isa.init_sgprs is not None:
            self.isa.init_sgprs(s, dispatch, gx[wave_wg], gy[wave_wg], gz[wave_wg],
                                wave_in_wg)
        scc = np.zeros(W, dtype=bool)
        group = WaveGroup(s, v, scc, np.arange(W), entry)
        group.write_lane_mask(d.EXEC_LO, valid)
        self._schedule([group], prog, ctx)
        self.last_lane_instructions += ctx.lane_instructions

    # --- scheduling -------------------------------------------------------------------------
    def _schedule(self, groups: list[WaveGroup], prog: Program, ctx: BatchContext) -> None:
        """Run the group with the lowest pc until every wave ended. Groups that meet at one
        pc merge; s_barrier holds a group until every live wave waits at a barrier (a
        superset of "every wave of its workgroup"), then all continue after it."""
        while True:
            live = [g for g in groups if not g.done]
            if not live:
                return
            if all(g.waiting for g in live):
                for g in live:
                    g.waiting = False
                    g.pc += 4  # s_barrier is one dword
            groups = self._merge(live, prog)
            ready = [x for x in groups if not x.waiting]
            awake = [x for x in ready if not x.sleeping]
            if not awake:  # every runnable group slept: all of them get their turn again
                for x in ready:
                    x.sleeping = False
                awake = ready
            g = min(awake, key=lambda x: x.pc)
            others = [x for x in groups if x is not g]
            groups = others + self._run_group(g, prog, ctx, others)

    @staticmethod
    def _merge(groups: list[WaveGroup], prog: Program) -> list[WaveGroup]:
        by_pc: dict[tuple[int, bool, int], list[WaveGroup]] = {}
        for g in groups:
            by_pc.setdefault((g.pc, g.waiting, g.vgpr_msb), []).append(g)
        out = []
        for (pc, waiting, _msb), gs in by_pc.items():
            if len(gs) > 1 and not waiting and prog.ends_at(pc):
                out.extend(gs)  # all end at the next step: merging would only copy them
                continue
            m = gs[0] if len(gs) == 1 else WaveGroup.merge(gs)
            m.waiting = waiting
            out.append(m)
        return out

    def _run_group(self, g: WaveGroup, prog: Program, ctx: BatchContext,
                   others: list[WaveGroup]) -> list[WaveGroup]:
        """Run `g` until it ends, waits at a barrier, splits, or meets another group's pc.
        Returns the group(s) it became."""
        other_pcs = {x.pc for x in others}
        min_other = min(other_pcs) if other_pcs else None
        steps_done = [0]
        try:
            return self._steps(g, prog, ctx, others, min_other, steps_done)
        finally:  # count what ran, also when an instruction faults
            ctx.lane_instructions += steps_done[0] * g.count * g.lanes
            self.last_instructions += steps_done[0]

    def _steps(self, g: WaveGroup, prog: Program, ctx: BatchContext, others: list[WaveGroup],
               min_other: int | None, steps_done: list[int]) -> list[WaveGroup]:
        cache = prog.cache_for(g.vgpr_msb)
        steps = 0
        try:
            while True:
                c = cache.get(g.pc) or prog.at(g.pc, g.vgpr_msb)
                if c.fn is None:
                    raise self._illegal(c, ctx)
                steps += 1
                try:
                    if c.kind == SIMPLE:
                        c.fn(g)
                        g.pc += c.size
                        if g.pc == min_other:  # fell through onto a group: merge with it
                            return [g]
                        continue
                    if c.kind == MEMORY:
                        c.fn(g, ctx)
                        g.pc += c.size
                        if g.pc == min_other:
                            return [g]
                        continue
                    result = c.fn(g, ctx) if c.kind == SYNC else c.fn(g)
                    cache = prog.cache_for(g.vgpr_msb)  # s_set_vgpr_msb is a control op
                except HsaError:
                    raise
                except gws.GwsError as e:
                    raise IllegalInstruction(
                        HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                        f"{e} ({ctx.where(c.inst)})") from None
                except TrapRaised as e:  # what ROCr reports for a wave that traps
                    raise HsaError(
                        HSA_STATUS_ERROR_EXCEPTION,
                        f"kernel {ctx.kernel_name} executed s_trap {e.code} at code-object "
                        f"offset 0x{c.inst.pc - ctx.code_base:x} (__builtin_trap or a failed "
                        "device assert); the queue is in its error state") from None
                except Exception as e:  # a gap in the semantics: a clean queue error
                    raise self._failed(c, ctx, e) from e
                if isinstance(result, list):  # divergent scalar branch
                    # waves that branch to s_endpgm end there: no copy of their state (a
                    # bounds check's `if (x >= width) return;` over a big grid)
                    return [g.take(sel, pc) for sel, pc in result if not prog.ends_at(pc)]
                if result == END:
                    g.done = True
                    return [g]
                if result == SLEEP:
                    g.pc += c.size
                    if any(not x.waiting for x in others):
                        g.sleeping = True
                        return [g]
                    continue
                if result == BARRIER:
                    if not others:
                        g.pc += c.size
                        continue
                    g.waiting = True
                    g.pc += c.size - 4  # released at pc + 4 (s_barrier's size)
                    return [g]
                jumped = result != g.pc + c.size
                g.pc = result
                if jumped and min_other is not None and g.pc >= min_other:
                    return [g]  # let the scheduler merge or run the group behind
                if steps > MAX_STEPS:
                    raise IllegalInstruction(
                        HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                        f"kernel {ctx.kernel_name} ran more than {MAX_STEPS} instructions "
                        f"(pc at code-object offset 0x{g.pc - ctx.code_base:x}); it does not "
                        "terminate in the virtual "
                        f"{self.family} executor")
        finally:
            steps_done[0] = steps

    def _failed(self, c: Compiled, ctx: BatchContext, e: Exception) -> IllegalInstruction:
        inst, fam = c.inst, self.family
        return IllegalInstruction(
            HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
            f"unsupported use of {fam} instruction {inst.name} ({inst.encoding}) in "
            f"{ctx.where(inst)}: {type(e).__name__}: {e}; the virtual {fam} executor cannot "
            "run it")

    def _illegal(self, c: Compiled, ctx: BatchContext) -> IllegalInstruction:
        inst, fam = c.inst, self.family
        if inst.name == "<outside code>":
            return IllegalInstruction(
                HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
                f"kernel {ctx.kernel_name} at code-object offset 0x{inst.pc - ctx.code_base:x}: "
                f"{c.error}")
        return IllegalInstruction(
            HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
            f"unsupported {fam} instruction {inst.name} ({inst.encoding}) in "
            f"{ctx.where(inst)}; the virtual {fam} executor does not implement it "
            f"({c.error})")
