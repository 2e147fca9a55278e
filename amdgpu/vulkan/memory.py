"""Allocations behind `amdgpu.Buffer`: one VkBuffer with its own VkDeviceMemory, persistently
mapped when the memory is host-visible (always on lavapipe; device-local host-visible memory
on ReBAR GPUs), or device-local with staging copies otherwise. A Buffer's `handle` is its
root's Allocation; `buffer.offset` is the offset into that VkBuffer."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from ground.errors import VulkanError

from .instance import check, vk

if TYPE_CHECKING:  # pragma: no cover
    from .context import VulkanContext

_uids = itertools.count(1)
_live: dict[int, int] = {}  # uid -> bytes of every Allocation not yet freed (all devices)


def live_allocations() -> dict[int, int]:
    """{uid: bytes} of the VkDeviceMemory allocations not freed yet, in this process."""
    return dict(_live)

# Core Vulkan 1.2 values that the `vulkan` package leaves as None.
BUFFER_USAGE_SHADER_DEVICE_ADDRESS = 0x00020000
MEMORY_ALLOCATE_DEVICE_ADDRESS = 0x2


def int_handle(handle) -> int:
    """A Vulkan handle (cffi pointer) as a Python int."""
    return int(vk.ffi.cast("uintptr_t", handle))


def choose_memory_type(props, type_bits: int, preferences: list[int], avoid: int = 0) -> int:
    """The first memory type allowed by type_bits that has all flags of a preference
    (for each preference, types without any `avoid` flag first)."""
    for wanted in preferences:
        for shunned in (avoid, 0) if avoid else (0,):
            for i in range(props.memoryTypeCount):
                flags = props.memoryTypes[i].propertyFlags
                if type_bits & (1 << i) and (flags & wanted) == wanted and not flags & shunned:
                    return i
    raise VulkanError("no Vulkan memory type fits the buffer; the driver exposes none usable")


class Allocation:
    """A VkBuffer and its memory; shared by a buffer and its views."""

    def __init__(
        self,
        device: VulkanContext,
        nbytes: int,
        *,
        host_visible: bool = False,
        device_local: bool = True,
        extra_usage: int = 0,
    ):
        self.device = device
        self.nbytes = nbytes
        self.uid = next(_uids)
        dev = device.handle
        usage = (
            vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
            | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
            | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
            | extra_usage
        )
        if device.bda_enabled:
            usage |= BUFFER_USAGE_SHADER_DEVICE_ADDRESS
        info = vk.VkBufferCreateInfo(
            size=max(nbytes, 4), usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE
        )
        out = vk.ffi.new("VkBuffer*")
        check(
            vk.lib.vkCreateBuffer(dev, vk.ffi.addressof(info), vk.ffi.NULL, out),
            "vkCreateBuffer",
            f"{nbytes} bytes",
        )
        self.buffer = out[0]
        self.handle = int_handle(self.buffer)
        req = vk.vkGetBufferMemoryRequirements(dev, self.buffer)
        host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        if not host_visible:
            rebar = device.tuning.buffer_memory == "rebar"
            prefs = [local | host, local] if rebar else [local, local | host]
        elif device_local:
            prefs = [local | host, host]
        else:  # host memory first (cached when offered), device-local as the last resort
            cached = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
            prefs = [host | cached, host, local | host]
        if host_visible:
            avoid = 0 if device_local else local
        else:
            avoid = 0 if rebar else vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
        self.memory_type = -1
        flags_info = (
            vk.VkMemoryAllocateFlagsInfo(flags=MEMORY_ALLOCATE_DEVICE_ADDRESS)
            if device.bda_enabled
            else None
        )
        mem = vk.ffi.new("VkDeviceMemory*")
        result, flags = -2, 0
        # Device-local host-visible memory (ReBAR) first; when its heap is full, fall back
        # to the next preference (plain device-local with staging, or host memory).
        for pref in range(len(prefs)):
            try:
                type_index = choose_memory_type(
                    device.memory_properties, req.memoryTypeBits, prefs[pref:], avoid
                )
            except VulkanError:
                break
            flags = device.memory_properties.memoryTypes[type_index].propertyFlags
            self.memory_type = type_index
            alloc = vk.VkMemoryAllocateInfo(
                pNext=flags_info, allocationSize=req.size, memoryTypeIndex=type_index
            )
            result = vk.lib.vkAllocateMemory(dev, vk.ffi.addressof(alloc), vk.ffi.NULL, mem)
            if result == 0:
                break
        if result != 0:
            vk.lib.vkDestroyBuffer(dev, self.buffer, vk.ffi.NULL)
            check(result, "vkAllocateMemory", f"{nbytes} bytes")
        self.memory = mem[0]
        check(vk.lib.vkBindBufferMemory(dev, self.buffer, self.memory, 0), "vkBindBufferMemory")
        self.address = 0
        if device.bda_enabled:
            address_info = vk.VkBufferDeviceAddressInfo(buffer=self.buffer)
            self.address = int(vk.lib.vkGetBufferDeviceAddress(dev, vk.ffi.addressof(address_info)))
        self.host: np.ndarray | None = None
        if flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT:
            ptr = vk.ffi.new("void**")
            check(vk.lib.vkMapMemory(dev, self.memory, 0, req.size, 0, ptr), "vkMapMemory")
            self.host = np.frombuffer(vk.ffi.buffer(ptr[0], max(nbytes, 4)), dtype=np.uint8)
        self.freed = False
        _live[self.uid] = nbytes

    def free(self) -> None:
        if self.freed:
            return
        self.freed = True
        _live.pop(self.uid, None)
        dev = self.device.handle
        self.host = None
        vk.lib.vkDestroyBuffer(dev, self.buffer, vk.ffi.NULL)
        vk.lib.vkFreeMemory(dev, self.memory, vk.ffi.NULL)
