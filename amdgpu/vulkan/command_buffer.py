"""Command buffers: record once, replay with new bindings without re-recording.

Recording (`dispatch`, `fill`, `copy`, `barrier`) only stores operations; Vulkan commands
are written into a VkCommandBuffer when an *instance* is first needed. An instance is a
VkCommandBuffer plus what it reads at execution time:
- `bda` dispatches: a binding table (u64 device addresses) in persistently mapped memory.
  The command buffer pushes the table's address; replay rewrites only table entries, with
  numpy, and submits. Identical binding tuples share one table (a chain of N ping-pong
  dispatches has 2 tables, not N).
- `descriptor_sets` on a device with descriptorBindingStorageBufferUpdateAfterBind:
  update-after-bind sets, one per distinct binding refs; replay patches their
  VkDescriptorBufferInfo array with numpy and makes one vkUpdateDescriptorSets call.
- otherwise (push descriptors, which live in the command buffer; plain descriptor sets,
  whose update would invalidate it) descriptors are baked at record time, so an instance
  is keyed by the buffers bound to the slots they use: replay with the same buffers reuses
  it, new buffers record a new instance (kept in a small LRU, so ping-ponging is free
  after two). Fills and copies on a binding slot are keyed the same way.
Several submissions may be in flight: each takes an idle instance of its key (or records
one more, up to MAX_IN_FLIGHT), recycled when its timeline value completes.
Recording follows `device.tuning` (sync.py): each `barrier()` gets only the stages and
accesses of the work between it and its neighbouring barriers, and descriptor binds and
push-constant words that repeat the previous dispatch's (same pipeline layout) are left out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from amdgpu.buffer import Buffer
from amdgpu.command_buffer import BindingSlot
from amdgpu.command_buffer import CommandBuffer as CommandBufferAPI
from amdgpu.device import TimelinePoint
from amdgpu.errors import DeviceError, KernelArgumentError, VulkanError
from amdgpu.fill import fill_word

from .executable import POOL_UPDATE_AFTER_BIND, Kernel
from .instance import check, vk
from .memory import Allocation
from .sync import COMPUTE, TRANSFER

if TYPE_CHECKING:  # pragma: no cover
    from .device import VulkanDevice

MAX_IN_FLIGHT = 4  # instances per key
_BUFFER_INFO = np.dtype([("buffer", "<u8"), ("offset", "<u8"), ("range", "<u8")])
MAX_KEYS = 8  # distinct binding keys kept recorded per command buffer


@dataclass(frozen=True)
class BufferRef:
    slot: int  # -1: a fixed buffer
    buffer: Buffer | None
    offset: int  # bytes into the slot's buffer (0 for a fixed buffer)
    nbytes: int | None

    def resolve(self, bound: Sequence[Buffer] | None) -> tuple[object, int, int, int]:
        """(VkBuffer, offset in it, size, device address)."""
        b = self.buffer if self.slot < 0 else bound[self.slot]  # type: ignore[index]
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


@dataclass
class _Dispatch:
    kernel: Kernel
    groups: tuple[int, int, int]
    refs: list[BufferRef]
    constants: np.ndarray  # uint32
    table_entry: int = -1  # bda: first u64 entry of this dispatch's binding table


@dataclass
class _Fill:
    ref: BufferRef
    value: int


@dataclass
class _Copy:
    dst: BufferRef
    src: BufferRef
    nbytes: int


class _Barrier:
    pass


@dataclass
class _Instance:
    command_buffer: object
    handle: int
    point: TimelinePoint | None = None
    table: np.ndarray | None = None
    table_allocation: Allocation | None = None
    table_signature: tuple | None = None
    descriptor_pool: object = None
    # update-after-bind descriptor sets: writes rewritten on replay (see _finish_late_sets)
    late_writes: object = None
    late_count: int = 0
    late_view: np.ndarray | None = None
    late_patches: list = field(default_factory=list)
    late_signature: tuple | None = None
    keepalive: object = None
    scratch: list = field(default_factory=list)  # cffi objects referenced by the commands


class _BindState:
    """What the previous dispatch of one pipeline layout left bound while recording."""

    __slots__ = ("layout", "descriptors", "push_row")

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, layout) -> None:
        self.layout = layout
        self.descriptors: list | None = None  # descriptor sets, or push-descriptor buffers
        self.push_row: int | None = None  # row of push_rows last pushed


class CommandBuffer(CommandBufferAPI):
    """A recorded sequence of dispatches, fills, copies and barriers over binding slots."""

    def __init__(self, device: VulkanDevice):
        self.device = device
        self.ops: list = []
        self.finalized = False
        self.slot_count = 0
        self.record_count = 0
        self.last_handle = 0  # VkCommandBuffer handle of the last submission
        self._instances: OrderedDict[tuple, list[_Instance]] = OrderedDict()
        # One submission at a time picks an idle instance, rewrites its address table or
        # descriptors and marks it in flight: a second thread then never takes the same
        # instance and rewrites the table under the first one's submission.
        self._submit_lock = threading.Lock()
        self._baked_slots: tuple[int, ...] = ()
        self._bda_patches: list[tuple[int, np.ndarray | int, np.ndarray | int]] = []
        self._bda_fixed: tuple[np.ndarray, np.ndarray] | None = None
        self._table_entries = 0
        self._details: dict = {}
        self._min_sizes: tuple[int, ...] = ()
        self._barrier_cache: dict[str, list] = {}  # barrier mode -> VkDependencyInfo each

    # --- recording ------------------------------------------------------------------------
    def _ref(self, arg) -> BufferRef:
        if isinstance(arg, BindingSlot):
            self.slot_count = max(self.slot_count, arg.index + 1)
            return BufferRef(arg.index, None, arg.offset, arg.nbytes)
        if isinstance(arg, Buffer):
            if arg.device is not self.device:
                raise DeviceError(
                    f"{arg!r} belongs to another device: use a buffer of {self.device.spec}"
                )
            arg._check_alive()
            return BufferRef(-1, arg, 0, arg.nbytes)
        raise KernelArgumentError(f"{arg!r} is not a buffer or a binding slot")

    def _check_open(self) -> None:
        self.check_recording()

    @property
    def finalized_(self) -> bool:
        return self.finalized

    def dispatch(self, kernel: Kernel, grid, block=None, args: Sequence = ()) -> None:
        """Record a dispatch; grid in work-items, args = buffers/slots then 32-bit constants."""
        self._dispatch_groups(kernel, kernel.groups(grid, block), args)

    def _dispatch_groups(self, kernel: Kernel, groups, args: Sequence) -> None:
        self._check_open()
        if kernel.executable.device is not self.device:
            raise KernelArgumentError(f"kernel {kernel.name} belongs to another device")
        refs, constants = [], []
        for arg in args:
            if isinstance(arg, (BindingSlot, Buffer)):
                refs.append(self._ref(arg))
            else:
                constants.append(to_u32(arg))
        if len(refs) != kernel.binding_count or len(constants) != kernel.constant_count:
            raise KernelArgumentError(
                f"kernel {kernel.name} takes {kernel.binding_count} buffers then "
                f"{kernel.constant_count} constants; got {len(refs)} buffers and "
                f"{len(constants)} constants"
            )
        self.ops.append(_Dispatch(kernel, tuple(groups), refs, np.array(constants, np.uint32)))

    def fill(self, buffer, value, nbytes: int | None = None) -> None:
        """Fill the buffer (or slot) with `value`'s 1-, 2- or 4-byte pattern (`amdgpu.fill`).
        vkCmdFillBuffer writes whole 32-bit words: the start and length must be multiples
        of 4 bytes (a DeviceError says so; `dev.fill` fills other ranges on the host)."""
        pattern, nbytes = self.check_fill(buffer, value, nbytes)
        ref = self._ref(buffer)
        if nbytes is not None:
            ref = BufferRef(ref.slot, ref.buffer, ref.offset, nbytes)
        start = ref.offset + (ref.buffer.offset if ref.buffer is not None else 0)
        if start % 4 or (nbytes is not None and nbytes % 4):
            raise DeviceError(
                f"a Vulkan command-buffer fill covers whole 32-bit words: start {start} and "
                f"length {nbytes} must be multiples of 4 (use dev.fill for other ranges)"
            )
        self.ops.append(_Fill(ref, fill_word(pattern)))

    def copy(self, dst, src, nbytes: int) -> None:
        nbytes = self.check_copy(dst, src, nbytes)
        self.ops.append(_Copy(self._ref(dst), self._ref(src), nbytes))

    def barrier(self) -> None:
        """Order everything before against everything after (compute and transfer)."""
        self._check_open()
        self.ops.append(_Barrier())

    def finalize(self) -> CommandBuffer:
        """Close recording and plan the binding tables; the first bda instance is recorded.
        Finalizing again returns the same command buffer."""
        if self.finalized:
            return self
        self.finalized = True
        baked: set[int] = set()
        tables: dict[tuple, int] = {}
        patch_idx: dict[int, list[int]] = {}
        patch_off: dict[int, list[int]] = {}
        fixed_idx: list[int] = []
        fixed_val: list[int] = []
        entries = 0
        for op in self.ops:
            if isinstance(op, _Dispatch):
                if op.kernel.abi == "bda":
                    key = tuple(
                        (r.slot, r.buffer.handle.uid, r.buffer.offset)
                        if r.buffer
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
            elif isinstance(op, _Fill):
                if op.ref.slot >= 0:
                    baked.add(op.ref.slot)
            elif isinstance(op, _Copy):
                baked.update(r.slot for r in (op.dst, op.src) if r.slot >= 0)
        self._baked_slots = tuple(sorted(baked))
        # The least size each slot's buffer must have: every recorded range fits in it.
        need = [0] * self.slot_count
        for op in self.ops:
            refs = (
                op.refs
                if isinstance(op, _Dispatch)
                else [op.ref]
                if isinstance(op, _Fill)
                else [op.dst, op.src]
                if isinstance(op, _Copy)
                else []
            )
            for r in refs:
                if r.slot >= 0:
                    end = r.offset + (r.nbytes or 0)
                    if isinstance(op, _Copy):
                        end = r.offset + op.nbytes
                    need[r.slot] = max(need[r.slot], end)
        self._min_sizes = tuple(need)
        self._details = {
            "dispatches": sum(isinstance(op, _Dispatch) for op in self.ops),
            "paths": sorted({op.kernel.path for op in self.ops if isinstance(op, _Dispatch)}),
            "kernels": sorted({op.kernel.name for op in self.ops if isinstance(op, _Dispatch)}),
            "bindings": self.slot_count,
        }
        self._table_entries = entries
        for slot, idx in sorted(patch_idx.items()):
            offs = patch_off[slot]
            off: np.ndarray | int
            index: np.ndarray | int
            if len(idx) == 1:  # scalar stores are the cheapest
                index, off = idx[0], offs[0]
            else:
                index = np.array(idx, np.intp)
                off = 0 if not any(offs) else np.array(offs, np.uint64)
            self._bda_patches.append((slot, index, off))
        if fixed_idx:
            self._bda_fixed = (np.array(fixed_idx, np.intp), np.array(fixed_val, np.uint64))
        if not self._baked_slots:
            # Nothing depends on the bound buffers at record time: record now.
            self._instances[()] = [self._record(None)]
        return self

    # --- instances ------------------------------------------------------------------------
    def _record(self, bound: Sequence[Buffer] | None) -> _Instance:
        device = self.device
        ffi, lib = vk.ffi, vk.lib
        cb = device.allocate_command_buffer()
        inst = _Instance(cb, int(ffi.cast("uintptr_t", cb)))
        if self._table_entries:
            alloc = Allocation(
                device,
                self._table_entries * 8,
                host_visible=True,
                device_local=device.tuning.table_memory == "device",
            )
            if alloc.host is None:
                raise VulkanError("binding tables need host-visible memory; none found")
            inst.table_allocation = alloc
            inst.table = alloc.host[: self._table_entries * 8].view(np.uint64)
            inst.table[:] = 0
            if self._bda_fixed is not None:
                inst.table[self._bda_fixed[0]] = self._bda_fixed[1]
        sets_needed = 0
        descriptors_needed = 0
        for op in self.ops:
            if isinstance(op, _Dispatch) and op.kernel.path == "descriptor_sets":
                sets_needed += len(op.kernel.set_layouts)
                descriptors_needed += max(1, len(op.refs))
        if sets_needed:
            sizes = vk.VkDescriptorPoolSize(
                type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=descriptors_needed
            )
            out = ffi.new("VkDescriptorPool*")
            late = any(isinstance(op, _Dispatch) and op.kernel.update_after_bind for op in self.ops)
            pool_info = vk.VkDescriptorPoolCreateInfo(
                flags=POOL_UPDATE_AFTER_BIND if late else 0,
                maxSets=sets_needed,
                poolSizeCount=1,
                pPoolSizes=[sizes],
            )
            check(
                lib.vkCreateDescriptorPool(
                    device.handle,
                    ffi.addressof(pool_info),
                    ffi.NULL,
                    out,
                ),
                "vkCreateDescriptorPool",
            )
            inst.descriptor_pool = out[0]
        check(lib.vkBeginCommandBuffer(cb, device.record_begin_info()), "vkBeginCommandBuffer")
        bound_pipeline = None
        tuning = device.tuning
        barriers = iter(self._barrier_infos())
        # What the previous dispatch left bound, for leaving out repeats (tuning.elide):
        # the layout they were made with, the descriptor binding, the pushed constant row.
        state = _BindState()
        set_cache: dict[tuple, object] = {}
        keep = inst.scratch
        table_address = inst.table_allocation.address if inst.table_allocation else 0
        # All push-constant data of the recording in one array: one row per dispatch
        # (vkCmdPushConstants copies it, but keep it alive with the instance anyway).
        dispatches = [op for op in self.ops if isinstance(op, _Dispatch)]
        width = max((op.kernel.push_size // 4 for op in dispatches), default=0)
        push_rows = np.zeros((len(dispatches), max(width, 1)), np.uint32)
        for row, op in enumerate(dispatches):
            if op.kernel.path == "bda":
                if op.refs:
                    address = table_address + 8 * op.table_entry
                    push_rows[row, 0], push_rows[row, 1] = address & 0xFFFFFFFF, address >> 32
                push_rows[row, 8 : 8 + len(op.constants)] = op.constants
            else:
                push_rows[row, : len(op.constants)] = op.constants
        push_base = ffi.cast("char*", ffi.from_buffer(push_rows))
        keep.append((push_rows, push_base))
        stride = push_rows.strides[0]
        # Per dispatch after the first: (first word, word count) that differ from the row
        # before, in one vectorized pass (used while the pipeline layout stays the same).
        changed = push_rows[1:] != push_rows[:-1]
        first_word = changed.argmax(axis=1)
        last_word = push_rows.shape[1] - 1 - changed[:, ::-1].argmax(axis=1)
        push_ranges = [(0, 0)] + [
            (f, last - f + 1) if any_ else (0, 0)
            for any_, f, last in zip(
                changed.any(axis=1).tolist(), first_word.tolist(), last_word.tolist(), strict=True
            )
        ]
        compute_stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
        bind_point = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        row = 0
        late_entries: list[tuple[object, int, BufferRef]] = []
        for op in self.ops:
            if isinstance(op, _Dispatch):
                k = op.kernel
                if k.pipeline is not bound_pipeline:
                    lib.vkCmdBindPipeline(cb, bind_point, k.pipeline)
                    bound_pipeline = k.pipeline
                if not tuning.elide or k.pipeline_layout is not state.layout:
                    state.reset(k.pipeline_layout)
                if k.update_after_bind:
                    self._bind_late_sets(inst, cb, k, op.refs, set_cache, late_entries, state)
                elif k.path != "bda":
                    resolved = [r.resolve(bound) for r in op.refs]  # type: ignore[arg-type]
                    self._bind_descriptors(inst, cb, k, resolved, set_cache, state)
                if k.push_size:
                    first, count = 0, k.push_size // 4
                    if state.push_row is not None:  # the row before, same layout
                        first, count = push_ranges[row]
                    if count:
                        lib.vkCmdPushConstants(
                            cb,
                            k.pipeline_layout,
                            compute_stage,
                            4 * first,
                            4 * count,
                            push_base + row * stride + 4 * first,
                        )
                    state.push_row = row
                row += 1
                lib.vkCmdDispatch(cb, *op.groups)
            elif isinstance(op, _Barrier):
                lib.vkCmdPipelineBarrier2(cb, next(barriers))
            elif isinstance(op, _Fill):
                buf, off, size, _ = op.ref.resolve(bound)  # type: ignore[arg-type]
                if off % 4 or size % 4:  # a slot's range, known only now
                    raise DeviceError(
                        f"a Vulkan fill covers whole 32-bit words: the bound range [{off}, "
                        f"{off + size}) must start and end on multiples of 4"
                    )
                if size:
                    lib.vkCmdFillBuffer(cb, buf, off, size, op.value)
            elif isinstance(op, _Copy):
                dbuf, doff, _, _ = op.dst.resolve(bound)  # type: ignore[arg-type]
                sbuf, soff, _, _ = op.src.resolve(bound)  # type: ignore[arg-type]
                region = ffi.new(
                    "VkBufferCopy*", {"srcOffset": soff, "dstOffset": doff, "size": op.nbytes}
                )
                keep.append(region)
                lib.vkCmdCopyBuffer(cb, sbuf, dbuf, 1, region)
        check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
        if late_entries:
            self._finish_late_sets(inst, late_entries)
        self.record_count += 1
        return inst

    def _barrier_infos(self) -> list:
        """The VkDependencyInfo of each barrier, in order, under the device's barrier mode
        (worked out once per mode: the operations do not change after finalize)."""
        mode = self.device.tuning.barrier
        infos = self._barrier_cache.get(mode)
        if infos is None:
            memo: dict[tuple[int, int], object] = {}
            infos = []
            for side in self._barrier_sides():
                info = memo.get(side)
                if info is None:
                    info = memo[side] = self.device.dependency_info(*side)
                infos.append(info)
            self._barrier_cache[mode] = infos
        return infos

    def _barrier_sides(self) -> list[tuple[int, int]]:
        """(before, after) kinds of work (sync.COMPUTE | sync.TRANSFER) around each barrier:
        the operations between it and the neighbouring barriers; 0 where that stretch is
        empty (then the barrier also orders against other submissions: any kind)."""
        kinds: list[int] = [0]
        for op in self.ops:
            if isinstance(op, _Barrier):
                kinds.append(0)
            else:
                kinds[-1] |= COMPUTE if isinstance(op, _Dispatch) else TRANSFER
        return list(zip(kinds, kinds[1:], strict=False))

    def _bind_descriptors(
        self, inst: _Instance, cb, kernel: Kernel, resolved, set_cache, state: _BindState
    ) -> None:
        ffi, lib = vk.ffi, vk.lib
        if not kernel.set_layouts:
            return
        if kernel.path == "push_descriptors":
            if resolved == state.descriptors:  # cffi handles compare by address
                return
            state.descriptors = resolved
        infos = ffi.new("VkDescriptorBufferInfo[]", max(1, len(resolved)))
        for i, (buf, off, size, _) in enumerate(resolved):
            infos[i].buffer = buf
            infos[i].offset = off
            infos[i].range = size
        # binding i of the kernel is the i-th (set, binding) in sorted order
        order = sorted(kernel.descriptor_bindings)
        inst.scratch.append(infos)
        if kernel.path == "push_descriptors":
            writes = ffi.new("VkWriteDescriptorSet[]", len(order))
            for i, (_, binding) in enumerate(order):
                w = writes[i]
                w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                w.dstBinding = binding
                w.descriptorCount = 1
                w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                w.pBufferInfo = infos + i
            inst.scratch.append(writes)
            self.device.push_descriptor_set(
                cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline_layout, 0, len(order), writes
            )
            return
        sets = []
        for s, layout in enumerate(kernel.set_layouts):
            members = [i for i, (ss, _) in enumerate(order) if ss == s]
            key = (
                int(ffi.cast("uintptr_t", layout)),
                tuple(
                    (int(ffi.cast("uintptr_t", resolved[i][0])), resolved[i][1], resolved[i][2])
                    for i in members
                ),
            )
            ds = set_cache.get(key)
            if ds is None:
                ds = self._allocate_set(inst, layout)
                if members:
                    writes = ffi.new("VkWriteDescriptorSet[]", len(members))
                    for j, i in enumerate(members):
                        w = writes[j]
                        w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                        w.dstSet = ds
                        w.dstBinding = order[i][1]
                        w.descriptorCount = 1
                        w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                        w.pBufferInfo = infos + i
                    lib.vkUpdateDescriptorSets(
                        self.device.handle, len(members), writes, 0, ffi.NULL
                    )
                set_cache[key] = ds
            sets.append(ds)
        self._bind_sets(inst, cb, kernel, sets, state)

    @staticmethod
    def _bind_sets(inst: _Instance, cb, kernel: Kernel, sets: list, state: _BindState) -> None:
        """Bind `sets` unless the previous dispatch left exactly these bound."""
        if sets == state.descriptors:  # cffi handles compare by address
            return
        state.descriptors = sets
        handles = vk.ffi.new("VkDescriptorSet[]", sets)
        inst.scratch.append(handles)
        vk.lib.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE,
                                       kernel.pipeline_layout, 0, len(sets), handles, 0,
                                       vk.ffi.NULL)

    def _allocate_set(self, inst: _Instance, layout):
        """One descriptor set of `layout` from the instance's descriptor pool."""
        ffi, lib = vk.ffi, vk.lib
        out = ffi.new("VkDescriptorSet*")
        alloc = ffi.new("VkDescriptorSetAllocateInfo*")
        alloc.sType = vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO
        alloc.descriptorPool = inst.descriptor_pool
        alloc.descriptorSetCount = 1
        alloc.pSetLayouts = ffi.new("VkDescriptorSetLayout[1]", [layout])
        check(lib.vkAllocateDescriptorSets(self.device.handle, alloc, out),
              "vkAllocateDescriptorSets")
        return out[0]

    def _bind_late_sets(
        self, inst: _Instance, cb, kernel: Kernel, refs, set_cache, entries, state: _BindState
    ) -> None:
        """Bind update-after-bind sets, one per distinct binding refs; contents come later."""
        ffi = vk.ffi
        order = sorted(kernel.descriptor_bindings)
        sets = []
        for s, layout in enumerate(kernel.set_layouts):
            members = [i for i, (ss, _) in enumerate(order) if ss == s]
            key = (
                "late",
                int(ffi.cast("uintptr_t", layout)),
                tuple(
                    (refs[i].slot, id(refs[i].buffer), refs[i].offset, refs[i].nbytes)
                    for i in members
                ),
            )
            ds = set_cache.get(key)
            if ds is None:
                ds = set_cache[key] = self._allocate_set(inst, layout)
                entries.extend((ds, order[i][1], refs[i]) for i in members)
            sets.append(ds)
        self._bind_sets(inst, cb, kernel, sets, state)

    def _finish_late_sets(self, inst: _Instance, entries) -> None:
        """One VkWriteDescriptorSet per late descriptor, over one VkDescriptorBufferInfo
        array that replay patches with numpy; fixed buffers are written now."""
        ffi = vk.ffi
        n = len(entries)
        infos = ffi.new("VkDescriptorBufferInfo[]", n)
        writes = ffi.new("VkWriteDescriptorSet[]", n)
        view = np.frombuffer(ffi.buffer(infos), dtype=_BUFFER_INFO)
        by_slot: dict[int, list[tuple[int, int, int]]] = {}
        for i, (ds, binding, ref) in enumerate(entries):
            w = writes[i]
            w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
            w.dstSet = ds
            w.dstBinding = binding
            w.descriptorCount = 1
            w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            w.pBufferInfo = infos + i
            if ref.slot < 0:
                buf, off, size, _ = ref.resolve(None)
                view[i] = (int(ffi.cast("uintptr_t", buf)), off, size)
            else:
                size = -1 if ref.nbytes is None else ref.nbytes
                by_slot.setdefault(ref.slot, []).append((i, ref.offset, size))
        inst.late_writes, inst.late_count, inst.late_view = writes, n, view
        inst.scratch.append(infos)
        inst.late_patches = [
            (
                slot,
                np.array([e[0] for e in items], np.intp),
                np.array([e[1] for e in items], np.int64),
                np.array([e[2] for e in items], np.int64),
            )
            for slot, items in sorted(by_slot.items())
        ]

    def _write_late_sets(self, inst: _Instance, bindings: Sequence[Buffer]) -> None:
        view = inst.late_view
        for slot, index, offset, size in inst.late_patches:
            b = bindings[slot]
            whole = b.nbytes - offset
            sizes = np.where(size < 0, whole, size)
            if (offset < 0).any() or (offset + sizes > b.nbytes).any():
                raise KernelArgumentError(
                    f"binding {slot}: a recorded range exceeds its buffer of {b.nbytes} bytes; "
                    "bind a larger buffer"
                )
            view["buffer"][index] = b.handle.handle
            view["offset"][index] = b.offset + offset
            view["range"][index] = sizes
        vk.lib.vkUpdateDescriptorSets(
            self.device.handle, inst.late_count, inst.late_writes, 0, vk.ffi.NULL
        )

    def _free_instance(self, inst: _Instance) -> None:
        device = self.device
        device.free_command_buffer(inst.command_buffer)
        if inst.descriptor_pool is not None:
            vk.lib.vkDestroyDescriptorPool(device.handle, inst.descriptor_pool, vk.ffi.NULL)
        if inst.table_allocation is not None:
            inst.table_allocation.free()
        inst.scratch.clear()

    def _acquire(self, key: tuple, bound: Sequence[Buffer]) -> _Instance:
        pool = self._instances.get(key)
        if pool is None:
            while len(self._instances) >= MAX_KEYS:  # evict the least recently used key
                _, old = self._instances.popitem(last=False)
                for inst in old:
                    if inst.point is not None:
                        inst.point.wait(self.device.timeout)
                    self._free_instance(inst)
            pool = self._instances[key] = []
        else:
            self._instances.move_to_end(key)
        for inst in pool:
            p = inst.point
            if p is None or p.value <= self.device.lane(p.lane).poll():
                return inst
        if len(pool) < MAX_IN_FLIGHT:
            with self.device._pool_lock:  # recording uses the device's command pool
                inst = self._record(bound)
            pool.append(inst)
            return inst
        inst = pool.pop(0)  # the oldest: wait for it and reuse it
        pool.append(inst)
        if inst.point is not None:
            inst.point.wait(self.device.timeout)
        return inst

    def submit(self, bindings: Sequence[Buffer], lane: int, wait) -> TimelinePoint:
        if not self.finalized:
            self.check_finalized()
        self.check_bindings(bindings, self.slot_count)
        for b, need in zip(bindings, self._min_sizes, strict=True):
            if b.nbytes < need:
                raise KernelArgumentError(
                    f"binding {b!r} is smaller than the {need} bytes the command buffer "
                    "recorded for its slot; bind a larger buffer"
                )
        if self._baked_slots:
            key = tuple(
                (bindings[s].handle.uid, bindings[s].offset, bindings[s].nbytes)
                for s in self._baked_slots
            )
        else:
            key = ()
        with self._submit_lock:
            return self._submit_instance(key, bindings, lane, wait)

    def _submit_instance(self, key: tuple, bindings: Sequence[Buffer], lane: int,
                         wait) -> TimelinePoint:
        inst = self._acquire(key, bindings)
        if inst.late_count:
            signature = tuple((b.handle.uid, b.offset, b.nbytes) for b in bindings)
            if signature != inst.late_signature:
                self._write_late_sets(inst, bindings)
                inst.late_signature = signature
        if self._bda_patches:
            addresses = tuple(b.address for b in bindings)
            if addresses != inst.table_signature:
                table = inst.table
                for slot, index, offset in self._bda_patches:
                    table[index] = addresses[slot] + offset
                inst.table_signature = addresses
        point = self.device.lane(lane).submit(inst.command_buffer, wait, self._details)
        inst.point = point
        inst.keepalive = bindings
        self.last_handle = inst.handle
        return point

    def release(self) -> None:
        """Free every recorded instance (waits for those in flight)."""
        with self._submit_lock:
            for pool in self._instances.values():
                for inst in pool:
                    if inst.point is not None:
                        inst.point.wait(self.device.timeout)
                    self._free_instance(inst)
            self._instances.clear()

    def __del__(self) -> None:
        # A dropped command buffer hands its instances to the device, which frees them
        # once their submissions have completed (no waiting inside the garbage collector).
        try:
            instances = [i for pool in self._instances.values() for i in pool]
            self._instances.clear()
            if instances and not self.device._closed:
                self.device._retired.append((self, instances))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
