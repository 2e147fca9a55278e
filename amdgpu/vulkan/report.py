"""DeviceReport for `list_devices()`: the driver-wide dataclass of `amdgpu.report`.

Kept as a module of its own so that `amdgpu.vulkan.report.DeviceReport` stays importable.
"""

from __future__ import annotations

from amdgpu.report import DeviceReport

__all__ = ["DeviceReport"]
