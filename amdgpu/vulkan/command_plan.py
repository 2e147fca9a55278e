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


@dataclass
class Plan:
    """What finalize works out once for every replay."""

    baked_slots: tuple[int, ...] = ()  # slots whose buffers recorded commands hold
    # bda: (slot, table index or indices, byte offset(s)) written from the slot's address
    bda_patches: list[tuple[int, np.ndarray | int, np.ndarray | int]] = field(
        default_factory=list)
    bda_fixed: tuple[np.ndarray, np.ndarray] | None = None  # (indices, addresses) fixed
    table_entries: int = 0  # u64 entries of an instance's binding table
    min_sizes: tuple[int, ...] = ()  # least bytes of each slot's buffer
    details: dict = field(default_factory=dict)  # what a trace's submission record says
    scalar_params: list[Param] = field(default_factory=list)  # push-constant parameters
    grid_ops: list[Dispatch] = field(default_factory=list)  # dispatches with grid params


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
    if fixed_idx:
        out.bda_fixed = (np.array(fixed_idx, np.intp), np.array(fixed_val, np.uint64))
    scalars: dict[str, Param] = {}
    for op in dispatches:
        for _, p in op.param_constants:
            scalars[p.name] = p
        if op.grid_params:
            op.indirect = len(out.grid_ops)
            out.grid_ops.append(op)
    out.scalar_params = [scalars[n] for n in sorted(scalars)]
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
