"""Replay-latency settings of the Vulkan backend, and the pipeline barriers they select.

`Tuning` holds the choices that change what a recorded command buffer asks of the GPU and
how the host waits for it; each has an environment variable (read when a device opens) and
can be changed on `device.tuning` before recording (benchmarks compare them that way):

- AMDGPU_VULKAN_BARRIER: "narrow" (default) records what each `barrier()` is needed for,
  from the recorded operations' buffer ranges (command_plan.dependencies): none where the
  work on either side shares no memory with a write, an execution dependency alone where
  earlier work only read what later work writes, else a memory dependency on the written
  ranges only (a VkBufferMemoryBarrier2 per buffer whose VkBuffer the recording knows,
  else one VkMemoryBarrier2), with the stages and accesses of the work involved; "tight"
  records each `barrier()` with only the stages
  and accesses of the operations on either side of it (compute -> compute: one
  VkMemoryBarrier2 SHADER_STORAGE_WRITE -> SHADER_STORAGE_READ|WRITE between COMPUTE_SHADER
  stages); "compute" the same stages with the generic SHADER_READ/WRITE accesses; "full"
  compute and transfer on both sides, whatever the neighbours (the former behaviour).
- AMDGPU_VULKAN_SPIN_US: how long a host wait polls the timeline value
  (vkGetSemaphoreCounterValue) before it blocks in vkWaitSemaphores. Default 0 on CPU
  devices (lavapipe needs the cores), SPIN_US_GPU elsewhere.
- AMDGPU_VULKAN_SIMULTANEOUS_USE: 1 (default) records with SIMULTANEOUS_USE_BIT.
- AMDGPU_VULKAN_BDA_TABLE: where bda binding tables live: "device" (default: device-local
  host-visible memory first, i.e. ReBAR / BAR, else host memory) or "host".
- AMDGPU_VULKAN_ELIDE: 1 (default) leaves out descriptor binds and push-constant words
  that repeat what the previous dispatch of the same pipeline layout already set.
- AMDGPU_VULKAN_BUFFER_MEMORY: where `device.buffer` memory lives: "rebar" (default:
  device-local host-visible first, written and read through the mapping) or "device"
  (device-local only, staging copies for host access).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ground.errors import VulkanError

from .instance import vk

SPIN_US_GPU = 1000.0
BARRIER_MODES = ("narrow", "tight", "compute", "full")
TABLE_MEMORY = ("device", "host")
BUFFER_MEMORY = ("rebar", "device")

# Kinds of work on one side of a barrier (a bit set).
COMPUTE = 1
TRANSFER = 2
ANY = COMPUTE | TRANSFER  # an empty side: whatever the queue runs before / after


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass
class Tuning:
    barrier: str = "narrow"
    spin_us: float = 0.0
    simultaneous_use: bool = True
    table_memory: str = "device"
    elide: bool = True
    buffer_memory: str = "rebar"

    @classmethod
    def from_env(cls, cpu_device: bool) -> Tuning:
        barrier = os.environ.get("AMDGPU_VULKAN_BARRIER", "narrow").strip().lower()
        if barrier not in BARRIER_MODES:
            raise VulkanError(
                f"AMDGPU_VULKAN_BARRIER={barrier!r} is not one of {BARRIER_MODES}; unset it"
            )
        table = os.environ.get("AMDGPU_VULKAN_BDA_TABLE", "device").strip().lower()
        if table not in TABLE_MEMORY:
            raise VulkanError(
                f"AMDGPU_VULKAN_BDA_TABLE={table!r} is not one of {TABLE_MEMORY}; unset it"
            )
        memory = os.environ.get("AMDGPU_VULKAN_BUFFER_MEMORY", "rebar").strip().lower()
        if memory not in BUFFER_MEMORY:
            raise VulkanError(
                f"AMDGPU_VULKAN_BUFFER_MEMORY={memory!r} is not one of {BUFFER_MEMORY}; unset it"
            )
        spin_text = os.environ.get("AMDGPU_VULKAN_SPIN_US", "")
        try:
            spin = float(spin_text) if spin_text else (0.0 if cpu_device else SPIN_US_GPU)
        except ValueError:
            raise VulkanError(
                f"AMDGPU_VULKAN_SPIN_US={spin_text!r} is not a number of microseconds; unset it"
            ) from None
        return cls(
            barrier=barrier,
            spin_us=max(0.0, spin),
            simultaneous_use=_flag("AMDGPU_VULKAN_SIMULTANEOUS_USE", True),
            table_memory=table,
            elide=_flag("AMDGPU_VULKAN_ELIDE", True),
            buffer_memory=memory,
        )


def barrier_masks(mode: str, before: int, after: int) -> tuple[int, int, int, int]:
    """(srcStageMask, srcAccessMask, dstStageMask, dstAccessMask) of a barrier between
    work of the kinds `before` and `after` (COMPUTE | TRANSFER bit sets)."""
    if mode == "full":
        before = after = ANY
    if mode == "narrow":  # barriers next to an empty side: the "tight" masks
        mode = "tight"
    storage = mode == "tight"
    shader_write = (
        vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT if storage else vk.VK_ACCESS_2_SHADER_WRITE_BIT
    )
    shader_read = (
        vk.VK_ACCESS_2_SHADER_STORAGE_READ_BIT if storage else vk.VK_ACCESS_2_SHADER_READ_BIT
    )
    src_stage = src_access = dst_stage = dst_access = 0
    if before & COMPUTE:
        src_stage |= vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
        src_access |= shader_write
    if before & TRANSFER:
        src_stage |= vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT
        src_access |= vk.VK_ACCESS_2_TRANSFER_WRITE_BIT
    if after & COMPUTE:
        dst_stage |= vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
        dst_access |= shader_read | shader_write
    if after & TRANSFER:
        dst_stage |= vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT
        dst_access |= vk.VK_ACCESS_2_TRANSFER_READ_BIT | vk.VK_ACCESS_2_TRANSFER_WRITE_BIT
    return src_stage, src_access, dst_stage, dst_access


class BarrierCache:
    """One VkDependencyInfo (with its VkMemoryBarrier2) per distinct mask set, kept alive
    for the device's life: recorded command buffers only point at them while recording."""

    def __init__(self) -> None:
        self._infos: dict[tuple[int, int, int, int], object] = {}
        self._by_sides: dict[tuple[str, int, int], object] = {}  # the hot lookup
        self._keep: list = []

    def get(self, mode: str, before: int, after: int):
        info = self._by_sides.get((mode, before, after))
        if info is None:
            info = self._by_sides[(mode, before, after)] = self._make(mode, before, after)
        return info

    def _make(self, mode: str, before: int, after: int):
        masks = barrier_masks(mode, before or ANY, after or ANY)
        info = self._infos.get(masks)
        if info is None:
            ffi = vk.ffi
            mb = ffi.new("VkMemoryBarrier2*")
            mb.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2
            mb.srcStageMask, mb.srcAccessMask, mb.dstStageMask, mb.dstAccessMask = masks
            info = ffi.new("VkDependencyInfo*")
            info.sType = vk.VK_STRUCTURE_TYPE_DEPENDENCY_INFO
            info.memoryBarrierCount = 1
            info.pMemoryBarriers = mb
            self._keep.append(mb)
            self._infos[masks] = info
        return info


def stages(kinds: int) -> int:
    """The pipeline stages of kinds of work (COMPUTE | TRANSFER)."""
    out = 0
    if kinds & COMPUTE:
        out |= vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
    if kinds & TRANSFER:
        out |= vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT
    return out


def accesses(bits: int) -> int:
    """The access flags of command_plan's access bits (compute/transfer reads/writes)."""
    out = 0
    if bits & 1:
        out |= vk.VK_ACCESS_2_SHADER_STORAGE_READ_BIT
    if bits & 2:
        out |= vk.VK_ACCESS_2_TRANSFER_READ_BIT
    if bits & 4:
        out |= vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT
    if bits & 8:
        out |= vk.VK_ACCESS_2_TRANSFER_WRITE_BIT
    return out


def dependency_struct(form: tuple, buffers: dict):
    """(VkDependencyInfo, what it points at) of a command_plan.recorded_form."""
    ffi = vk.ffi
    info = ffi.new("VkDependencyInfo*")
    info.sType = vk.VK_STRUCTURE_TYPE_DEPENDENCY_INFO
    if form[0] == "buffers":
        _, src, dst, ranges = form
        barriers = ffi.new("VkBufferMemoryBarrier2[]", len(ranges))
        for b, (key, lo, hi, written, later) in zip(barriers, ranges, strict=True):
            b.sType = vk.VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER_2
            b.srcStageMask, b.dstStageMask = stages(src), stages(dst)
            b.srcAccessMask, b.dstAccessMask = accesses(written), accesses(later)
            b.srcQueueFamilyIndex = b.dstQueueFamilyIndex = vk.VK_QUEUE_FAMILY_IGNORED
            b.buffer = buffers[key]
            b.offset, b.size = lo, hi - lo
        info.bufferMemoryBarrierCount = len(ranges)
        info.pBufferMemoryBarriers = barriers
        # The execution dependency for what only the ranges' barriers do not name (earlier
        # reads of other buffers that later work overwrites): no memory access, all memory.
        exe = ffi.new("VkMemoryBarrier2*")
        exe.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2
        exe.srcStageMask, exe.dstStageMask = stages(src), stages(dst)
        info.memoryBarrierCount = 1
        info.pMemoryBarriers = exe
        return info, (barriers, exe)
    _, src, dst, written, later = form
    mb = ffi.new("VkMemoryBarrier2*")
    mb.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2
    mb.srcStageMask, mb.dstStageMask = stages(src), stages(dst)
    mb.srcAccessMask, mb.dstAccessMask = accesses(written), accesses(later)
    info.memoryBarrierCount = 1
    info.pMemoryBarriers = mb
    return info, mb
