"""Recording a planned command buffer into a VkCommandBuffer: one *instance*, the
VkCommandBuffer plus what it reads at execution time (binding table, descriptor pool and
sets, push-constant rows with the scalar parameters' words, the indirect buffer of the
dispatches whose grid is a parameter). Follows `device.tuning` (sync.py): each barrier gets only the
stages and accesses of its neighbouring work, and descriptor binds and push-constant words
that repeat the previous dispatch's (same pipeline layout) are left out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from amdgpu.buffer import Buffer
from ground.errors import DeviceError, VulkanError

from .command_bindings import (
    BindState,
    allocate_table,
    bind_descriptors,
    bind_late_sets,
    finish_late_sets,
)
from .command_plan import Barrier, BufferRef, Copy, Dispatch, Fill, Instance, Plan
from .executable import POOL_UPDATE_AFTER_BIND
from .instance import check, vk
from .memory import Allocation

if TYPE_CHECKING:  # pragma: no cover
    from .context import VulkanContext


def _descriptor_pool(device: VulkanContext, ops: list):
    """A pool for every descriptor set the dispatches of `ops` bind, or None."""
    ffi, lib = vk.ffi, vk.lib
    sets_needed = 0
    descriptors_needed = 0
    for op in ops:
        if isinstance(op, Dispatch) and op.kernel.path == "descriptor_sets":
            sets_needed += len(op.kernel.set_layouts)
            descriptors_needed += max(1, len(op.refs))
    if not sets_needed:
        return None
    sizes = vk.VkDescriptorPoolSize(
        type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=descriptors_needed
    )
    out = ffi.new("VkDescriptorPool*")
    late = any(isinstance(op, Dispatch) and op.kernel.update_after_bind for op in ops)
    pool_info = vk.VkDescriptorPoolCreateInfo(
        flags=POOL_UPDATE_AFTER_BIND if late else 0,
        maxSets=sets_needed,
        poolSizeCount=1,
        pPoolSizes=[sizes],
    )
    check(lib.vkCreateDescriptorPool(device.handle, ffi.addressof(pool_info), ffi.NULL, out),
          "vkCreateDescriptorPool")
    return out[0]


_INDIRECT_USAGE = 0x100  # VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT


def _push_rows(dispatches: list[Dispatch], table_address: int,
               scalar_words: dict[str, int]) -> np.ndarray:
    """All push-constant data of the recording in one array, one row per dispatch (the
    scalar parameters' words in their constants)."""
    width = max((op.kernel.push_size // 4 for op in dispatches), default=0)
    rows = np.zeros((len(dispatches), max(width, 1)), np.uint32)
    for row, op in enumerate(dispatches):
        if op.kernel.path == "bda":
            if op.refs:
                address = table_address + 8 * op.table_entry
                rows[row, 0], rows[row, 1] = address & 0xFFFFFFFF, address >> 32
            rows[row, 8 : 8 + len(op.constants)] = op.constants
        else:
            rows[row, : len(op.constants)] = op.constants
        base = 8 if op.kernel.path == "bda" else 0
        for word, p in op.param_constants:
            rows[row, base + word] = scalar_words.get(p.name, 0)
    return rows


def _push_ranges(rows: np.ndarray) -> list[tuple[int, int]]:
    """Per dispatch after the first: (first word, word count) that differ from the row
    before, in one vectorized pass (used while the pipeline layout stays the same)."""
    changed = rows[1:] != rows[:-1]
    first_word = changed.argmax(axis=1)
    last_word = rows.shape[1] - 1 - changed[:, ::-1].argmax(axis=1)
    return [(0, 0)] + [
        (f, last - f + 1) if any_ else (0, 0)
        for any_, f, last in zip(
            changed.any(axis=1).tolist(), first_word.tolist(), last_word.tolist(), strict=True
        )
    ]


def record(device: VulkanContext, ops: list, plan: Plan, barriers: list,
           bound: Sequence[Buffer] | None, words: tuple = ()) -> Instance:
    """A new instance of `ops` over the `bound` buffers (None: nothing is baked), with
    `words` for the plan's scalar parameters. `barriers`: the VkDependencyInfo of each
    barrier, in order."""
    ffi, lib = vk.ffi, vk.lib
    cb = device.allocate_command_buffer()
    inst = Instance(cb, int(ffi.cast("uintptr_t", cb)))
    if plan.grid_ops:
        ind = Allocation(device, 12 * len(plan.grid_ops), host_visible=True,
                         device_local=False, extra_usage=_INDIRECT_USAGE)
        if ind.host is None:
            raise VulkanError("indirect dispatches need host-visible memory; none found")
        inst.indirect_allocation = ind
        inst.indirect = ind.host[: 12 * len(plan.grid_ops)].view(np.uint32).reshape(-1, 3)
        inst.indirect[:] = [op.groups for op in plan.grid_ops]
    scalar_words = {p.name: w for p, w in zip(plan.scalar_params, words, strict=False)}
    if plan.table_entries:
        allocate_table(device, inst, plan)
    inst.descriptor_pool = _descriptor_pool(device, ops)
    check(lib.vkBeginCommandBuffer(cb, device.record_begin_info()), "vkBeginCommandBuffer")
    bound_pipeline = None
    tuning = device.tuning
    next_barrier = iter(barriers)
    # What the previous dispatch left bound, for leaving out repeats (tuning.elide):
    # the layout they were made with, the descriptor binding, the pushed constant row.
    state = BindState()
    set_cache: dict[tuple, object] = {}
    keep = inst.scratch
    table_address = inst.table_allocation.address if inst.table_allocation else 0
    # vkCmdPushConstants copies the rows, but they stay alive with the instance anyway.
    push_rows = _push_rows([op for op in ops if isinstance(op, Dispatch)], table_address,
                           scalar_words)
    push_base = ffi.cast("char*", ffi.from_buffer(push_rows))
    keep.append((push_rows, push_base))
    stride = push_rows.strides[0]
    push_ranges = _push_ranges(push_rows)
    compute_stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
    bind_point = vk.VK_PIPELINE_BIND_POINT_COMPUTE
    row = 0
    late_entries: list[tuple[object, int, BufferRef]] = []
    for op in ops:
        if isinstance(op, Dispatch):
            k = op.kernel
            if k.pipeline is not bound_pipeline:
                lib.vkCmdBindPipeline(cb, bind_point, k.pipeline)
                bound_pipeline = k.pipeline
            if not tuning.elide or k.pipeline_layout is not state.layout:
                state.reset(k.pipeline_layout)
            if k.update_after_bind:
                bind_late_sets(device, inst, cb, k, op.refs, set_cache, late_entries, state)
            elif k.path != "bda":
                resolved = [r.resolve(bound) for r in op.refs]
                bind_descriptors(device, inst, cb, k, resolved, set_cache, state)
            if k.push_size:
                first, count = 0, k.push_size // 4
                if state.push_row is not None:  # the row before, same layout
                    first, count = push_ranges[row]
                if count:
                    lib.vkCmdPushConstants(cb, k.pipeline_layout, compute_stage, 4 * first,
                                           4 * count, push_base + row * stride + 4 * first)
                state.push_row = row
            row += 1
            if op.indirect >= 0:  # group counts from the indirect buffer (parameters)
                lib.vkCmdDispatchIndirect(cb, inst.indirect_allocation.buffer,  # type: ignore[union-attr]
                                          12 * op.indirect)
            else:
                lib.vkCmdDispatch(cb, *op.groups)
        elif isinstance(op, Barrier):
            info = next(next_barrier)
            if info is not None:  # None: nothing on either side needs it (mode "narrow")
                lib.vkCmdPipelineBarrier2(cb, info)
        elif isinstance(op, Fill):
            buf, off, size, _ = op.ref.resolve(bound)
            if off % 4 or size % 4:  # a slot's range, known only now
                raise DeviceError(
                    f"a Vulkan fill covers whole 32-bit words: the bound range [{off}, "
                    f"{off + size}) must start and end on multiples of 4"
                )
            if size:
                lib.vkCmdFillBuffer(cb, buf, off, size, op.value)
        elif isinstance(op, Copy):
            dbuf, doff, _, _ = op.dst.resolve(bound)
            sbuf, soff, _, _ = op.src.resolve(bound)
            region = ffi.new(
                "VkBufferCopy*", {"srcOffset": soff, "dstOffset": doff, "size": op.nbytes}
            )
            keep.append(region)
            lib.vkCmdCopyBuffer(cb, sbuf, dbuf, 1, region)
    check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
    if late_entries:
        finish_late_sets(inst, late_entries)
    return inst


def free_instance(device: VulkanContext, inst: Instance) -> None:
    device.free_command_buffer(inst.command_buffer)
    if inst.descriptor_pool is not None:
        vk.lib.vkDestroyDescriptorPool(device.handle, inst.descriptor_pool, vk.ffi.NULL)
    if inst.table_allocation is not None:
        inst.table = inst.table_words = None  # views of the memory freed next
        inst.table_allocation.free()
    if inst.indirect_allocation is not None:
        inst.indirect_allocation.free()
        inst.indirect = None
    inst.scratch.clear()
