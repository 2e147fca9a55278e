"""How a recorded Vulkan command buffer reaches its buffers: one strategy per kernel path.

- `bda`: a binding table of u64 device addresses in host-visible memory, whose address the
  command buffer pushes; replay rewrites only table entries (`patch_table`).
- `push_descriptors`: descriptors pushed into the command buffer itself, so baked at
  record time (an instance per distinct buffers); a push that repeats the previous
  dispatch's is left out.
- `descriptor_sets`: sets from the instance's pool, written at record time and shared by
  dispatches with the same buffers; with update-after-bind (`late_*`) they are bound
  empty and written at submit, replay patching their VkDescriptorBufferInfo array with
  numpy and making one vkUpdateDescriptorSets call.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import add
from typing import TYPE_CHECKING

import numpy as np

from amdgpu.buffer import Buffer
from ground.errors import KernelArgumentError, VulkanError

from .executable import Kernel
from .instance import check, vk
from .memory import Allocation

if TYPE_CHECKING:  # pragma: no cover
    from .command_plan import BufferRef, Instance, Plan
    from .context import VulkanContext

_BUFFER_INFO = np.dtype([("buffer", "<u8"), ("offset", "<u8"), ("range", "<u8")])


class BindState:
    """What the previous dispatch of one pipeline layout left bound while recording."""

    __slots__ = ("layout", "descriptors", "push_row")

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, layout) -> None:
        self.layout = layout
        self.descriptors: list | None = None  # descriptor sets, or push-descriptor buffers
        self.push_row: int | None = None  # row of push_rows last pushed


# --- bda: binding tables -----------------------------------------------------------------


def allocate_table(device: VulkanContext, inst: Instance, plan: Plan) -> None:
    """The instance's binding table (host visible), fixed buffers' addresses written."""
    alloc = Allocation(device, plan.table_entries * 8, host_visible=True,
                       device_local=device.tuning.table_memory == "device")
    if alloc.host is None:
        raise VulkanError("binding tables need host-visible memory; none found")
    inst.table_allocation = alloc
    inst.table = alloc.host[: plan.table_entries * 8].view(np.uint64)
    inst.table_words = memoryview(inst.table)
    inst.table[:] = 0
    if plan.bda_fixed is not None:
        inst.table[plan.bda_fixed[0]] = plan.bda_fixed[1]


def patch_table(inst: Instance, plan: Plan, bindings: Sequence[Buffer],
                addresses: tuple | None = None) -> None:
    """Write the bound buffers' addresses (`addresses`, when the caller has them) into the
    table (skipped when they repeat)."""
    if addresses is None:
        addresses = tuple(b.address for b in bindings)
    if addresses != inst.table_signature:
        table = inst.table
        assert table is not None  # the instance of a plan with table entries has one
        if plan.bda_pack is not None:  # every entry, bound and fixed, in one C call
            packer, source, offsets, fixed = plan.bda_pack
            values = addresses + fixed if fixed else addresses
            packer.pack_into(table, 0, *map(add, map(values.__getitem__, source), offsets))
        elif plan.bda_scalar is not None:
            words = inst.table_words  # a memoryview: its item stores beat numpy's
            assert words is not None
            for slot, i, off in plan.bda_scalar:
                words[i] = addresses[slot] + off
        else:
            for slot, index, offset in plan.bda_patches:
                table[index] = addresses[slot] + offset
        inst.table_signature = addresses


# --- descriptors written at record time (push descriptors, plain sets) -------------------


def bind_descriptors(device: VulkanContext, inst: Instance, cb, kernel: Kernel, resolved,
                     set_cache: dict, state: BindState) -> None:
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
        device.push_descriptor_set(
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
            ds = allocate_set(device, inst, layout)
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
                lib.vkUpdateDescriptorSets(device.handle, len(members), writes, 0, ffi.NULL)
            set_cache[key] = ds
        sets.append(ds)
    bind_sets(inst, cb, kernel, sets, state)


def bind_sets(inst: Instance, cb, kernel: Kernel, sets: list, state: BindState) -> None:
    """Bind `sets` unless the previous dispatch left exactly these bound."""
    if sets == state.descriptors:  # cffi handles compare by address
        return
    state.descriptors = sets
    handles = vk.ffi.new("VkDescriptorSet[]", sets)
    inst.scratch.append(handles)
    vk.lib.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE,
                                   kernel.pipeline_layout, 0, len(sets), handles, 0,
                                   vk.ffi.NULL)


def allocate_set(device: VulkanContext, inst: Instance, layout):
    """One descriptor set of `layout` from the instance's descriptor pool."""
    ffi, lib = vk.ffi, vk.lib
    out = ffi.new("VkDescriptorSet*")
    alloc = ffi.new("VkDescriptorSetAllocateInfo*")
    alloc.sType = vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO
    alloc.descriptorPool = inst.descriptor_pool
    alloc.descriptorSetCount = 1
    alloc.pSetLayouts = ffi.new("VkDescriptorSetLayout[1]", [layout])
    check(lib.vkAllocateDescriptorSets(device.handle, alloc, out), "vkAllocateDescriptorSets")
    return out[0]


# --- update-after-bind sets: written at submit -------------------------------------------


def bind_late_sets(device: VulkanContext, inst: Instance, cb, kernel: Kernel,
                   refs: list[BufferRef], set_cache: dict, entries: list,
                   state: BindState) -> None:
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
            ds = set_cache[key] = allocate_set(device, inst, layout)
            entries.extend((ds, order[i][1], refs[i]) for i in members)
        sets.append(ds)
    bind_sets(inst, cb, kernel, sets, state)


def finish_late_sets(inst: Instance, entries: list) -> None:
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


def write_late_sets(device: VulkanContext, inst: Instance, bindings: Sequence[Buffer]) -> None:
    """Point the late descriptors at the bound buffers (skipped when they repeat)."""
    signature = tuple((b.handle.uid, b.offset, b.nbytes) for b in bindings)
    if signature == inst.late_signature:
        return
    view = inst.late_view
    assert view is not None
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
    vk.lib.vkUpdateDescriptorSets(device.handle, inst.late_count, inst.late_writes, 0,
                                  vk.ffi.NULL)
    inst.late_signature = signature
