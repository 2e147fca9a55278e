"""amdgpu-direct: an AMD GPU driver over HSA (ROCr), with a virtual AMD system and a
Vulkan fallback.

The lower layers (packets, hsa, compiler) import their error classes from `ground`, never
from here, so this package may import its driver eagerly.
"""

from __future__ import annotations

from amdgpu import errors  # amdgpu.errors.X, as before (the classes live in ground.errors)
from amdgpu.buffer import Buffer
from amdgpu.command_buffer import BindingSlot, CommandBuffer
from amdgpu.device import Device, Lane, TimelinePoint
from amdgpu.program import ProgramRunner
from amdgpu.report import DeviceReport
from amdgpu.selection import devices, open

__all__ = [
    "BindingSlot", "Buffer", "CommandBuffer", "Device", "DeviceReport", "Lane",
    "ProgramRunner", "TimelinePoint", "devices", "errors", "open",
]
