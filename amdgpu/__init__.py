"""amdgpu-direct: an AMD GPU driver over HSA (ROCr), with a virtual AMD system and a
Vulkan fallback.

The driver's names are loaded on first use, so that `import amdgpu.errors` (which every
layer may do) does not import the driver itself.
"""

from __future__ import annotations

import importlib

_LAZY = {
    # name -> module that defines it
    "open": "amdgpu.selection",
    "devices": "amdgpu.selection",
    "Device": "amdgpu.device",
    "Buffer": "amdgpu.buffer",
    "CommandBuffer": "amdgpu.command_buffer",
    "BindingSlot": "amdgpu.command_buffer",
    "TimelinePoint": "amdgpu.device",
    "Lane": "amdgpu.device",
    "DeviceReport": "amdgpu.report",
    "ProgramRunner": "amdgpu.program",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'amdgpu' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
