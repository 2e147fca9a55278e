"""What the Vulkan backend's parts (memory, executables, lanes, command buffers) need from
their device, as a Protocol: `VulkanDevice` provides it, and the parts are typed against
this instead of importing the device module (which imports them)."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from compiler.spirv import EntryInterface

from .instance import PhysicalDevice
from .sync import Tuning


class VulkanContext(Protocol):
    handle: Any  # VkDevice
    physical: PhysicalDevice
    spec: str
    name: str
    path: str
    descriptor_path: str
    timeout: float
    tuning: Tuning
    bda_enabled: bool
    update_after_bind: bool
    enabled_features: Any
    memory_properties: Any
    push_descriptor_set: Any  # PFN_vkCmdPushDescriptorSetKHR or None
    _closed: bool
    _pool_lock: threading.RLock
    _retired: list

    def _timeline(self, index: int) -> Any: ...

    def allocate_command_buffer(self) -> Any: ...

    def free_command_buffer(self, cb: Any) -> None: ...

    def record_begin_info(self) -> Any: ...

    def dependency_info(self, before: int, after: int) -> Any: ...

    def fits_push_descriptors(self, entry: EntryInterface) -> bool: ...

    def fill(self, *args: Any, **kwargs: Any) -> Any: ...
