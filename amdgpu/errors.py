"""The error classes of amdgpu-direct, as the public API names them (`amdgpu.errors.X`).

They are defined in `ground.errors`, below every layer; this module re-exports them so that
users' `import amdgpu.errors` and `except amdgpu.errors.DeviceError` keep working.
"""

from ground.errors import (
    AmdgpuError,
    BufferRangeError,
    BufferStateError,
    BundleError,
    CodeObjectError,
    CompileError,
    DeviceError,
    DeviceLost,
    HsaError,
    HsaUnavailable,
    IllegalInstruction,
    KernelArgumentError,
    MemoryFault,
    PacketError,
    QueueError,
    QueueFullError,
    SignalTimeout,
    TraceFormatError,
    VulkanError,
)

__all__ = [
    "AmdgpuError", "BufferRangeError", "BufferStateError", "BundleError", "CodeObjectError",
    "CompileError",
    "DeviceError", "DeviceLost", "HsaError", "HsaUnavailable", "IllegalInstruction",
    "KernelArgumentError",
    "MemoryFault", "PacketError", "QueueError", "QueueFullError", "SignalTimeout",
    "TraceFormatError", "VulkanError",
]
