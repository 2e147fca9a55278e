"""The Vulkan fallback behind the driver's Device API (Vulkan 1.3, IREE's SPIR-V ABIs)."""

from amdgpu.buffer import Buffer
from amdgpu.command_buffer import BindingSlot
from amdgpu.device import TimelinePoint

from .command_buffer import CommandBuffer
from .device import VulkanDevice
from .executable import Executable, Kernel, KernelParam
from .instance import list_devices
from .report import DeviceReport

__all__ = [
    "BindingSlot",
    "Buffer",
    "CommandBuffer",
    "DeviceReport",
    "Executable",
    "Kernel",
    "KernelParam",
    "TimelinePoint",
    "VulkanDevice",
    "list_devices",
]
