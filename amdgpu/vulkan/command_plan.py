"""Planning a Vulkan command buffer: the operations it records (over fixed buffers and
binding slots) and, at finalize, what every replay needs without walking them again.

A `Plan` says which slots are baked into recorded commands (push descriptors, plain
descriptor sets, fills and copies: an instance per distinct buffers there), where each
slot's address goes in the bda binding tables, the least size each slot's buffer must
have, the kinds of work around each barrier, and the parameters (`cb.param`/`cb.scalar`):
scalar ones are push-constant words, baked into an instance when it is recorded (so they
key it); grid ones make their dispatch indirect, its group counts in an instance's
indirect buffer rewritten at submit (`param_words` works both out from the values).
Nothing here calls Vulkan.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from amdgpu.buffer import Buffer
from amdgpu.command_buffer import Param
from amdgpu.device import TimelinePoint
from amdgpu.geometry import MAX_SIZE
from ground.errors import KernelArgumentError

from .executable import Kernel
from .memory import Allocation
from .sync import COMPUTE, TRANSFER


@dataclass(frozen=True)
class BufferRef:
    slot: int  # -1: a fixed buffer
    buffer: Buffer | None
    offset: int  # bytes into the slot's buffer (0 for a fixed buffer)
    nbytes: int | None

    def resolve(self, bound: Sequence[Buffer] | None) -> tuple[object, int, int, int]:
        """(VkBuffer, offset in it, size, device address)."""
        b = self.buffer if self.slot < 0 else bound[self.slot]  # type: ignore[index]
        assert b is not None  # a fixed reference holds its buffer
        size = self.nbytes if self.nbytes is not None else b.nbytes - self.offset
        if self.offset < 0 or size < 0 or self.offset + size > b.nbytes:
            raise KernelArgumentError(
                f"binding {self.slot}: bytes [{self.offset}, {self.offset + size}) are outside "
                f"its buffer of {b.nbytes} bytes; bind a larger buffer"
            )
        return b.handle.buffer, b.offset + self.offset, size, b.address + self.offset


def to_u32(value) -> int:
    """A constant argument as its 32-bit pattern (ints wrap, floats are f32 bits)."""
    if isinstance(value, np.generic):
        if value.dtype.itemsize == 4:
            return int(np.asarray(value).view(np.uint32))
        if value.dtype.kind in "iub":
            return int(value) & 0xFFFFFFFF
        if value.dtype.kind == "f":
            return int(np.asarray(value, dtype=np.float32).view(np.uint32))
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not -(1 << 31) <= value < (1 << 32):
            raise KernelArgumentError(f"constant {value} does not fit in 32 bits")
        return value & 0xFFFFFFFF
    if isinstance(value, float):
        return int(np.asarray(value, dtype=np.float32).view(np.uint32))
    raise KernelArgumentError(
        f"kernel argument {value!r} is neither a buffer nor a 32-bit constant"
    )


# --- the recorded operations -------------------------------------------------------------


@dataclass
class Dispatch:
    kernel: Kernel
    groups: tuple[int, int, int]
    refs: list[BufferRef]
    constants: np.ndarray  # uint32
    table_entry: int = -1  # bda: first u64 entry of this dispatch's binding table
    param_constants: list = field(default_factory=list)  # (constant word, Param)
    grid_params: list = field(default_factory=list)  # (axis, Param): an indirect dispatch
    indirect: int = -1  # its row of the instance's indirect buffer


@dataclass
class Fill:
    ref: BufferRef
    value: int


@dataclass
class Copy:
    dst: BufferRef
    src: BufferRef
    nbytes: int


class Barrier:
    pass


# --- the plan ----------------------------------------------------------------------------


SCALAR_PATCHES = 32  # up to this many table entries, a replay patches them one by one
PACKED_TABLE = 512  # up to this many entries, a replay writes the whole table in one call


@dataclass
class Plan:
    """What finalize works out once for every replay."""

    baked_slots: tuple[int, ...] = ()  # slots whose buffers recorded commands hold
    # bda: (slot, table index or indices, byte offset(s)) written from the slot's address
    bda_patches: list[tuple[int, np.ndarray | int, np.ndarray | int]] = field(
        default_factory=list)
    # the same patches one entry at a time, where there are few (scalar stores beat
    # numpy's fancy indexing there): (slot, table index, byte offset)
    bda_scalar: list[tuple[int, int, int]] | None = None
    bda_fixed: tuple[np.ndarray, np.ndarray] | None = None  # (indices, addresses) fixed
    # the whole table in one struct.pack_into, where it is small: (the packer, per entry
    # the index of its address in bound addresses + fixed addresses, per entry its byte
    # offset, the fixed addresses)
    bda_pack: tuple[struct.Struct, tuple, tuple, tuple] | None = None
    table_entries: int = 0  # u64 entries of an instance's binding table
    min_sizes: tuple[int, ...] = ()  # least bytes of each slot's buffer
    details: dict = field(default_factory=dict)  # what a trace's submission record says
    scalar_params: list[Param] = field(default_factory=list)  # push-constant parameters
    grid_ops: list[Dispatch] = field(default_factory=list)  # dispatches with grid params
    # Barrier mode "narrow": per barrier, its Dependency with slots taken as distinct
    # memory, and with any reference possibly any memory (slots bound to overlapping
    # buffers); alias_sensitive: the two record differently, so a submit checks the bound
    # buffers for overlap and records the second where they share memory.
    dependencies: list = field(default_factory=list)
    dependencies_aliased: list = field(default_factory=list)
    alias_sensitive: bool = False
    fixed_buffers: tuple = ()  # the buffers the recording names directly


def _refs(op) -> list[BufferRef]:
    if isinstance(op, Dispatch):
        return op.refs
    if isinstance(op, Fill):
        return [op.ref]
    if isinstance(op, Copy):
        return [op.dst, op.src]
    return []


def plan(ops: list, slot_count: int) -> Plan:
    """The plan of `ops`; sets each bda dispatch's `table_entry` (identical binding tuples
    share one table, so a chain of N ping-pong dispatches has 2 tables, not N)."""
    baked: set[int] = set()
    tables: dict[tuple, int] = {}
    patch_idx: dict[int, list[int]] = {}
    patch_off: dict[int, list[int]] = {}
    fixed_idx: list[int] = []
    fixed_val: list[int] = []
    entries = 0
    for op in ops:
        if isinstance(op, Dispatch):
            if op.kernel.abi == "bda":
                key = tuple(
                    (r.slot, r.buffer.handle.uid, r.buffer.offset) if r.buffer
                    else (r.slot, 0, r.offset)
                    for r in op.refs
                )
                if key not in tables:
                    tables[key] = entries
                    for i, r in enumerate(op.refs):
                        if r.slot >= 0:
                            patch_idx.setdefault(r.slot, []).append(entries + i)
                            patch_off.setdefault(r.slot, []).append(r.offset)
                        else:
                            fixed_idx.append(entries + i)
                            fixed_val.append(r.buffer.address)  # type: ignore[union-attr]
                    entries += len(op.refs)
                op.table_entry = tables[key]
            elif not op.kernel.update_after_bind:
                baked.update(r.slot for r in op.refs if r.slot >= 0)
        elif isinstance(op, (Fill, Copy)):
            baked.update(r.slot for r in _refs(op) if r.slot >= 0)
    # The least size each slot's buffer must have: every recorded range fits in it.
    need = [0] * slot_count
    for op in ops:
        for r in _refs(op):
            if r.slot >= 0:
                end = r.offset + (op.nbytes if isinstance(op, Copy) else (r.nbytes or 0))
                need[r.slot] = max(need[r.slot], end)
    dispatches = [op for op in ops if isinstance(op, Dispatch)]
    out = Plan(
        baked_slots=tuple(sorted(baked)),
        table_entries=entries,
        min_sizes=tuple(need),
        details={
            "dispatches": len(dispatches),
            "paths": sorted({op.kernel.path for op in dispatches}),
            "kernels": sorted({op.kernel.name for op in dispatches}),
            "bindings": slot_count,
        },
    )
    for slot, idx in sorted(patch_idx.items()):
        offs = patch_off[slot]
        off: np.ndarray | int
        index: np.ndarray | int
        if len(idx) == 1:  # scalar stores are the cheapest
            index, off = idx[0], offs[0]
        else:
            index = np.array(idx, np.intp)
            off = 0 if not any(offs) else np.array(offs, np.uint64)
        out.bda_patches.append((slot, index, off))
    if sum(len(idx) for idx in patch_idx.values()) <= SCALAR_PATCHES:
        out.bda_scalar = [(slot, i, o) for slot, idx in sorted(patch_idx.items())
                          for i, o in zip(idx, patch_off[slot], strict=True)]
    if fixed_idx:
        out.bda_fixed = (np.array(fixed_idx, np.intp), np.array(fixed_val, np.uint64))
    if 0 < entries <= PACKED_TABLE:
        source = [0] * entries
        offset = [0] * entries
        for slot, idx in patch_idx.items():
            for i, o in zip(idx, patch_off[slot], strict=True):
                source[i], offset[i] = slot, o
        for j, i in enumerate(fixed_idx):
            source[i] = slot_count + j
        out.bda_pack = (struct.Struct(f"<{entries}Q"), tuple(source), tuple(offset),
                        tuple(fixed_val))
    scalars: dict[str, Param] = {}
    for op in dispatches:
        for _, p in op.param_constants:
            scalars[p.name] = p
        if op.grid_params:
            op.indirect = len(out.grid_ops)
            out.grid_ops.append(op)
    out.scalar_params = [scalars[n] for n in sorted(scalars)]
    out.dependencies = dependencies(ops, locate_slots)
    out.dependencies_aliased = dependencies(ops, locate_any)
    fixed = {}
    for op in ops:
        for r, _, _ in op_accesses(op):
            if r.slot < 0 and r.buffer is not None:
                fixed[r.buffer.handle.uid, r.buffer.offset, r.buffer.nbytes] = r.buffer
    out.fixed_buffers = tuple(fixed.values())
    buffers = memory_buffers(ops, None)
    out.alias_sensitive = slot_count + len(fixed) > 1 and [
        recorded_form(d, buffers) for d in out.dependencies
    ] != [recorded_form(d, {}) for d in out.dependencies_aliased]
    return out


def param_words(plan: Plan, values: dict,
                limits: tuple[int, int, int]) -> tuple[tuple, np.ndarray | None]:
    """(the scalar parameters as push-constant words, the indirect buffer's group counts),
    every value checked before anything is recorded or submitted (`limits`: the device's
    maxComputeWorkGroupCount)."""
    groups = None
    if plan.grid_ops:
        groups = np.empty((len(plan.grid_ops), 3), np.uint32)
        for row, op in enumerate(plan.grid_ops):
            g = list(op.groups)
            block = op.kernel.workgroup_size
            for axis, p in op.grid_params:
                v = values[p.name]
                n = -(-v // block[axis]) if 1 <= v <= MAX_SIZE else 0
                if not 1 <= n <= limits[axis]:
                    raise KernelArgumentError(
                        f"parameter {p.name!r} = {v} makes kernel {op.kernel.name}'s grid "
                        f"axis {axis} invalid: 1..{min(MAX_SIZE, limits[axis] * block[axis])} "
                        f"work-items ({limits[axis]} workgroups of {block[axis]})"
                    )
                g[axis] = n
            groups[row] = g
    words = []
    for p in plan.scalar_params:
        v = values[p.name]
        try:
            words.append(to_u32(v if p.dtype is None else p.dtype.type(v)))
        except KernelArgumentError:
            raise KernelArgumentError(
                f"parameter {p.name!r} = {v} does not fit a 32-bit push constant"
            ) from None
    return tuple(words), groups


# --- dependencies: what each barrier must order (barrier mode "narrow") ------------------

# Access bits of one operation on one buffer range: reads and writes per kind of work.
COMPUTE_READ, TRANSFER_READ, COMPUTE_WRITE, TRANSFER_WRITE = 1, 2, 4, 8
READS, WRITES = COMPUTE_READ | TRANSFER_READ, COMPUTE_WRITE | TRANSFER_WRITE
END = 1 << 62  # "to the end of the buffer" (a slot bound later, or an unknown alias)


def kinds_of(bits: int) -> int:
    """The kinds of work (sync.COMPUTE | sync.TRANSFER) of access bits."""
    return (bits | bits >> 2) & (COMPUTE | TRANSFER)


def op_accesses(op) -> list[tuple[BufferRef, int | None, int]]:
    """(reference, bytes or None for its whole range, access bits) of one operation. A
    dispatch reads and writes each of its buffers unless the kernel says the binding is
    read-only (the SPIR-V's NonWritable, or IREE's ReadOnly binding flag)."""
    if isinstance(op, Dispatch):
        ro = op.kernel.readonly
        return [
            (r, r.nbytes, COMPUTE_READ if i < len(ro) and ro[i] else COMPUTE_READ | COMPUTE_WRITE)
            for i, r in enumerate(op.refs)
        ]
    if isinstance(op, Fill):
        return [(op.ref, op.ref.nbytes, TRANSFER_WRITE)]
    if isinstance(op, Copy):
        return [(op.src, op.nbytes, TRANSFER_READ), (op.dst, op.nbytes, TRANSFER_WRITE)]
    return []


def locate_slots(ref: BufferRef, nbytes: int | None) -> tuple[object, int, int]:
    """(memory key, first byte, end) of a reference while slots are unbound: a slot is its
    own memory (`aliased_bindings` checks that at submit), a fixed buffer its allocation."""
    if ref.slot >= 0:
        return ("slot", ref.slot), ref.offset, END if nbytes is None else ref.offset + nbytes
    b = ref.buffer
    assert b is not None
    lo = b.offset + ref.offset
    return ("mem", b.handle.uid), lo, lo + (b.nbytes - ref.offset if nbytes is None else nbytes)


def locate_bound(bound: Sequence[Buffer], baked: tuple[int, ...]):
    """`locate_slots`, but the slots baked into this recording are their bound buffers."""
    def locate(ref: BufferRef, nbytes: int | None) -> tuple[object, int, int]:
        if ref.slot >= 0 and ref.slot in baked:
            b = bound[ref.slot]
            lo = b.offset + ref.offset
            return ("mem", b.handle.uid), lo, lo + (
                b.nbytes - ref.offset if nbytes is None else nbytes)
        return locate_slots(ref, nbytes)
    return locate


def memory_buffers(ops: list, bound: Sequence[Buffer] | None) -> dict:
    """The VkBuffer of each ("mem", uid) key the recording's references can name."""
    out = {}
    for op in ops:
        for r, _, _ in op_accesses(op):
            b = r.buffer if r.slot < 0 else (bound[r.slot] if bound is not None else None)
            if b is not None:
                out[("mem", b.handle.uid)] = b.handle.buffer
    return out


def recorded_form(dep: Dependency | None, buffers: dict) -> tuple | None:
    """What a Dependency records as: None (no barrier); ("buffers", src, dst, ranges) with
    one buffer-range barrier per range whose VkBuffer is known (`buffers`); else
    ("global", src, dst, written bits, later bits): one memory barrier (or, with no bits,
    an execution dependency alone)."""
    if dep is None:
        return None
    if dep.ranges and all(r[0] in buffers for r in dep.ranges):
        return ("buffers", dep.src, dep.dst, dep.ranges)
    written = later = 0
    for _, _, _, w, lt in dep.ranges:
        written, later = written | w, later | lt
    return ("global", dep.src, dep.dst, written, later)


def locate_any(ref: BufferRef, nbytes: int | None) -> tuple[object, int, int]:
    """Every reference may be any memory (slots bound to overlapping buffers)."""
    return "any", 0, END


@dataclass(frozen=True)
class Dependency:
    """What one recorded barrier waits for (mode "narrow"): the earlier work of kinds `src`
    (every operation since the previous recorded barrier) before the later work of kinds
    `dst` (every kind that follows in the command buffer), and per memory key that earlier
    work wrote, (key, first byte, end, written bits, bits of the later accesses to that
    key): a memory dependency on that range only. No ranges: an execution dependency
    alone (the earlier work only read what later work writes)."""

    src: int
    dst: int
    ranges: tuple[tuple[object, int, int, int, int], ...] = ()


def dependencies(ops: list, locate=locate_slots) -> list[Dependency | None]:
    """Per barrier of `ops`, the Dependency to record, or None where nothing before it
    conflicts with the work after it (up to the next barrier): that barrier is left out,
    and the next recorded one also orders the work before it. A recorded barrier orders
    everything before it against everything after it that touches the same memory, so
    the work before it needs no further barrier. A barrier next to an empty stretch (the
    start or end, or two barriers in a row) orders against other submissions too: it
    waits for all earlier work and makes every earlier write visible to any later work."""
    segments: list[list[tuple[object, int, int, int]]] = [[]]
    for op in ops:
        if isinstance(op, Barrier):
            segments.append([])
        else:
            segments[-1].extend(locate(r, n) + (bits,) for r, n, bits in op_accesses(op))
    # Per barrier: the kinds and per-key access bits of all the work after it.
    after_kinds: list[int] = [0] * len(segments)
    after_keys: list[dict] = [{} for _ in segments]
    kinds, keys = 0, {}  # type: ignore[var-annotated]
    for j in range(len(segments) - 1, 0, -1):
        for key, _, _, bits in segments[j]:
            kinds |= kinds_of(bits)
            keys[key] = keys.get(key, 0) | bits
        after_kinds[j - 1] = kinds
        after_keys[j - 1] = dict(keys)
    out: list[Dependency | None] = []
    # The work since the last recorded barrier, per memory key: [first byte, end, bits]
    # (a hull: a conflict found through it may be one the exact ranges would not have).
    pending: dict[object, list[int]] = {}
    for j in range(len(segments) - 1):
        for key, lo, hi, bits in segments[j]:
            p = pending.get(key)
            if p is None:
                pending[key] = [lo, hi, bits]
            else:
                p[0], p[1], p[2] = min(p[0], lo), max(p[1], hi), p[2] | bits
        nxt = segments[j + 1]
        if segments[j] and nxt and not _conflict(pending, nxt):
            out.append(None)
            continue
        done = 0
        for _, _, bits in pending.values():
            done |= bits
        src = kinds_of(done) if segments[j] else COMPUTE | TRANSFER
        if not segments[j] or not nxt:  # orders against other submissions too
            dst = after_kinds[j] if nxt else COMPUTE | TRANSFER
            out.append(Dependency(src, dst, (
                ("any", 0, END, WRITES & _bits(src), (READS | WRITES) & _bits(dst)),)))
        else:
            ranges = []
            for key, (lo, hi, bits) in pending.items():
                later = (after_keys[j].get(key, 0) if key != "any"
                         else _or_all(after_keys[j]))
                if bits & WRITES and later:
                    ranges.append((key, lo, hi, bits & WRITES, later))
            out.append(Dependency(src, after_kinds[j], tuple(ranges)))
        pending = {}
    return out


def _bits(kinds: int) -> int:
    """Every access bit of the kinds of work `kinds`."""
    return kinds | kinds << 2


def _or_all(keys: dict) -> int:
    bits = 0
    for b in keys.values():
        bits |= b
    return bits


def _conflict(before: dict, after: list) -> bool:
    """Whether an access of `after` overlaps the work `before` with a write on either side."""
    for key, lo, hi, bits in after:
        for key0, (lo0, hi0, bits0) in before.items():
            if (key == key0 or key == "any" or key0 == "any") and lo < hi0 and lo0 < hi \
                    and (bits | bits0) & WRITES:
                return True
    return False


def aliased_bindings(bindings: Sequence[Buffer], fixed: Sequence[Buffer]) -> bool:
    """Whether any two bound buffers (or a bound and a fixed one) share memory."""
    uids = {b.handle.uid for b in bindings}
    if len(uids) == len(bindings):
        fixed_uids = {b.handle.uid for b in fixed}
        if len(fixed_uids) == len(fixed) and uids.isdisjoint(fixed_uids):
            return False  # every buffer in its own allocation (the usual case): no overlap
    spans = sorted(
        (b.handle.uid, b.offset, b.offset + b.nbytes) for b in (*bindings, *fixed)
    )
    for (u0, _, end0), (u1, lo1, _) in zip(spans, spans[1:], strict=False):
        if u0 == u1 and lo1 < end0:
            return True
    return False


def barrier_sides(ops: list) -> list[tuple[int, int]]:
    """(before, after) kinds of work (sync.COMPUTE | sync.TRANSFER) around each barrier:
    the operations between it and the neighbouring barriers; 0 where that stretch is
    empty (then the barrier also orders against other submissions: any kind)."""
    kinds: list[int] = [0]
    for op in ops:
        if isinstance(op, Barrier):
            kinds.append(0)
        else:
            kinds[-1] |= COMPUTE if isinstance(op, Dispatch) else TRANSFER
    return list(zip(kinds, kinds[1:], strict=False))


@dataclass
class Instance:
    """One recording of a plan: its command buffer and what its replays patch."""

    command_buffer: object
    handle: int
    point: TimelinePoint | None = None
    table: np.ndarray | None = None
    table_words: memoryview | None = None  # the same memory, for scalar stores
    table_allocation: Allocation | None = None
    table_signature: tuple | None = None
    descriptor_pool: object = None
    # update-after-bind descriptor sets: writes rewritten on replay (see finish_late_sets)
    late_writes: object = None
    late_count: int = 0
    late_view: np.ndarray | None = None
    late_patches: list = field(default_factory=list)
    late_signature: tuple | None = None
    keepalive: object = None
    scratch: list = field(default_factory=list)  # cffi objects referenced by the commands
    indirect_allocation: Allocation | None = None  # VkDispatchIndirectCommand per row
    indirect: np.ndarray | None = None  # its (rows, 3) uint32 host view
    indirect_signature: bytes | None = None
