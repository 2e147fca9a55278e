"""VulkanDevice: the driver's Device API over Vulkan 1.3 (the fallback behind amdgpu.open)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from amdgpu.buffer import Buffer, HostBuffer, Lifetime, as_host_array, check_memory_kind
from amdgpu.device import Device, TimelinePoint
from compiler.spirv import EntryInterface
from ground.errors import DeviceError, KernelArgumentError, VulkanError
from packets import trace

from .command_buffer import CommandBuffer, to_u32
from .executable import PATHS, Executable, Kernel
from .fast_submit import MODULE as _COMPILED
from .instance import PUSH_DESCRIPTOR_EXT, PhysicalDevice, check, physical_devices, vk
from .memory import Allocation
from .sync import ANY, BarrierCache, Tuning
from .timeline import Lane

LANES = 4
IMMEDIATE_CACHE = 256

# Optional shader features IREE kernels may use; enabled when the device has them.
_CORE_FEATURES = ("shaderInt64", "shaderInt16", "shaderFloat64")
_V11_FEATURES = ("storageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess")
_V12_FEATURES = (
    "shaderFloat16",
    "shaderInt8",
    "storageBuffer8BitAccess",
    "uniformAndStorageBuffer8BitAccess",
    "vulkanMemoryModel",
    "vulkanMemoryModelDeviceScope",
    "subgroupBroadcastDynamicId",
)
_V13_FEATURES = ("maintenance4", "subgroupSizeControl", "computeFullSubgroups")


def _no_device_message(devices: list[PhysicalDevice], index: int) -> str:
    if not devices:
        return (
            "no Vulkan device found; install a Vulkan driver (mesa-vulkan-drivers gives "
            "lavapipe) or use amdgpu:virtual"
        )
    listing = "; ".join(pd.describe() for pd in devices)
    if index >= len(devices):
        return f"no Vulkan device vulkan:{index}; devices: {listing}"
    return (
        f"vulkan:{index} cannot run the Vulkan backend (needs Vulkan 1.3 with "
        f"timelineSemaphore, scalarBlockLayout, synchronization2); devices: {listing}"
    )


class VulkanDevice(Device):
    """A Vulkan 1.3 device behind the same API as the HSA backend."""

    backend = "vulkan"
    driver = "vulkan"
    target = "vulkan"

    def __init__(self, index: int = 0, path: str | None = None, *, timeout: float = 10.0):
        if path is not None and (path == "vulkan" or path.startswith("vulkan:")):
            path = None  # a device spec passed where the path goes: no path forced
        devices = physical_devices()
        if index < 0 or index >= len(devices) or not devices[index].available:
            raise VulkanError(_no_device_message(devices, index))
        pd = self.physical = devices[index]
        self.index = index
        self.spec = f"vulkan:{index}"
        self.name = pd.name
        self.timeout = timeout
        self.paths = pd.path_capabilities()
        self.versions = {"api": pd.api, "driver": pd.driver, "subgroup": pd.subgroup}
        # The compute stage's default subgroup size and operations (VkSubgroupFeatureFlagBits
        # names): the SPIR-V target enables subgroup shuffles / arithmetic from them.
        self.subgroup_size, self.subgroup_ops = pd.subgroup_size, pd.subgroup_ops
        if path is not None and path not in PATHS:
            raise VulkanError(f"unknown Vulkan dispatch path {path!r}; use one of {PATHS}")
        for name in ("bda", "push_descriptors"):
            if path == name and not self.paths[name].available:
                raise VulkanError(
                    f"path {name!r} is not available on {self.spec}: "
                    f"{self.paths[name].reason}; use path=None to pick the best one"
                )
        if path is None:
            path = (
                "bda"
                if self.paths["bda"].available
                else "push_descriptors"
                if self.paths["push_descriptors"].available
                else "descriptor_sets"
            )
        self.path = path
        self.descriptor_path = (
            "push_descriptors"
            if path != "descriptor_sets" and self.paths["push_descriptors"].available
            else "descriptor_sets"
        )
        self.bda_enabled = self.paths["bda"].available
        cpu = vk.vkGetPhysicalDeviceProperties(pd.handle).deviceType == (
            vk.VK_PHYSICAL_DEVICE_TYPE_CPU
        )
        self.tuning = Tuning.from_env(cpu_device=cpu)
        self._closed = False
        self._create_device()
        self.memory_properties = vk.vkGetPhysicalDeviceMemoryProperties(pd.handle)
        self._lanes: list[Lane | None] = [None] * LANES
        self._immediate: OrderedDict[tuple, CommandBuffer] = OrderedDict()
        self._executables: list[Executable] = []
        self._command_buffers: weakref.WeakSet = weakref.WeakSet()
        self._retired: list = []  # (command buffer, instances) dropped while maybe in flight

    # --- set-up ---------------------------------------------------------------------------
    def _create_device(self) -> None:
        pd = self.physical
        ffi, lib = vk.ffi, vk.lib
        # Query optional features, then enable the supported subset plus the required ones.
        q13 = vk.VkPhysicalDeviceVulkan13Features()
        q12 = vk.VkPhysicalDeviceVulkan12Features(pNext=q13)
        q11 = vk.VkPhysicalDeviceVulkan11Features(pNext=q12)
        q = vk.VkPhysicalDeviceFeatures2(pNext=q11)
        vk.vkGetPhysicalDeviceFeatures2(pd.handle, q)
        f13 = vk.VkPhysicalDeviceVulkan13Features(synchronization2=1)
        f12 = vk.VkPhysicalDeviceVulkan12Features(
            pNext=f13,
            timelineSemaphore=1,
            scalarBlockLayout=1,
            bufferDeviceAddress=1 if self.bda_enabled else 0,
        )
        f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12)
        f2 = vk.VkPhysicalDeviceFeatures2(pNext=f11)
        enabled = {"timelineSemaphore", "scalarBlockLayout", "synchronization2"}
        if self.bda_enabled:
            enabled.add("bufferDeviceAddress")
        for target, source, names in (
            (f2.features, q.features, _CORE_FEATURES),
            (f11, q11, _V11_FEATURES),
            (f12, q12, _V12_FEATURES),
            (f13, q13, _V13_FEATURES),
        ):
            for name in names:
                value = getattr(source, name)
                setattr(target, name, value)
                if value:
                    enabled.add(name)
        # Update-after-bind descriptor sets let replay rewrite descriptors without
        # re-recording (AMDGPU_VULKAN_UPDATE_AFTER_BIND=0 turns it off; =force uses it
        # without the feature, for testing on drivers that read descriptors late).
        mode = os.environ.get("AMDGPU_VULKAN_UPDATE_AFTER_BIND", "1")
        self.update_after_bind = mode == "force" or (mode != "0" and pd.update_after_bind)
        if pd.update_after_bind and mode != "0":
            f12.descriptorBindingStorageBufferUpdateAfterBind = 1
            enabled.add("descriptorBindingStorageBufferUpdateAfterBind")
        self.enabled_features = enabled
        self.queue_family, family_queues = self._queue_family()
        self.queue_count = max(1, min(family_queues, 2))
        priorities = [1.0] * self.queue_count
        queue_info = vk.VkDeviceQueueCreateInfo(
            queueFamilyIndex=self.queue_family,
            queueCount=self.queue_count,
            pQueuePriorities=priorities,
        )
        extensions = [PUSH_DESCRIPTOR_EXT] if self.paths["push_descriptors"].available else []
        info = vk.VkDeviceCreateInfo(
            pNext=f2,
            queueCreateInfoCount=1,
            pQueueCreateInfos=[queue_info],
            enabledExtensionCount=len(extensions),
            ppEnabledExtensionNames=extensions or None,
        )
        out = ffi.new("VkDevice*")
        check(
            lib.vkCreateDevice(pd.handle, ffi.addressof(info), ffi.NULL, out),
            "vkCreateDevice",
            self.name,
        )
        self.handle = out[0]
        self.queues = []
        for i in range(self.queue_count):
            qout = ffi.new("VkQueue*")
            lib.vkGetDeviceQueue(self.handle, self.queue_family, i, qout)
            self.queues.append((qout[0], threading.Lock()))
        pool = ffi.new("VkCommandPool*")
        pool_info = vk.VkCommandPoolCreateInfo(queueFamilyIndex=self.queue_family)
        check(
            lib.vkCreateCommandPool(self.handle, ffi.addressof(pool_info), ffi.NULL, pool),
            "vkCreateCommandPool",
        )
        self.command_pool = pool[0]
        # the command pool: allocation, freeing and recording (a re-entrant lock: recording
        # allocates its command buffer)
        self._pool_lock = threading.RLock()
        self._immediate_lock = threading.Lock()  # the immediate-dispatch cache
        self._alloc_info = ffi.new("VkCommandBufferAllocateInfo*")
        self._alloc_info.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
        self._alloc_info.commandPool = self.command_pool
        self._alloc_info.level = vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY
        self._alloc_info.commandBufferCount = 1
        # SIMULTANEOUS_USE_BIT is never needed for correctness (an instance is not
        # resubmitted while pending), but NVIDIA's vkQueueSubmit2 of large recorded command
        # buffers measured cheaper with it (H200, 1000 dispatches: 41 -> 13 us host time).
        self.begin_info = self._begin_info(vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT)
        self._begin_plain = self._begin_info(0)
        self._barriers = BarrierCache()
        # The former all-purpose barrier (compute and transfer on both sides).
        self.barrier_info = self._barriers.get("full", ANY, ANY)
        self.push_descriptor_set = None
        if self.paths["push_descriptors"].available:
            fn = lib.vkGetDeviceProcAddr(self.handle, b"vkCmdPushDescriptorSetKHR")
            if fn != ffi.NULL:
                self.push_descriptor_set = ffi.cast("PFN_vkCmdPushDescriptorSetKHR", fn)

    def _queue_family(self) -> tuple[int, int]:
        """(family index, queue count): the probed compute family (a compute-only one when
        there is one), or AMDGPU_VULKAN_QUEUE_FAMILY=N (any family with compute)."""
        pd = self.physical
        text = os.environ.get("AMDGPU_VULKAN_QUEUE_FAMILY", "")
        if not text:
            return pd.compute_family, pd.compute_queue_count
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd.handle)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not text.isdigit() or int(text) not in compute:
            raise VulkanError(
                f"AMDGPU_VULKAN_QUEUE_FAMILY={text!r} is not a queue family with compute on "
                f"{self.spec} (those are {compute}); unset it"
            )
        index = int(text)
        return index, int(families[index].queueCount)

    @staticmethod
    def _begin_info(flags: int):
        info = vk.ffi.new("VkCommandBufferBeginInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        info.flags = flags
        return info

    def record_begin_info(self):
        """The VkCommandBufferBeginInfo that recordings use under the current tuning."""
        return self.begin_info if self.tuning.simultaneous_use else self._begin_plain

    def dependency_info(self, before: int, after: int):
        """The VkDependencyInfo of a barrier between work of kinds `before` and `after`
        (sync.COMPUTE | sync.TRANSFER; 0 = unknown) under the current tuning."""
        return self._barriers.get(self.tuning.barrier, before, after)

    def fits_push_descriptors(self, entry: EntryInterface) -> bool:
        """IREE's rule: one set (set 0) within maxPushDescriptors."""
        return (
            self.push_descriptor_set is not None
            and {b.set for b in entry.bindings} <= {0}
            and len(entry.bindings) <= self.physical.max_push_descriptors
        )

    def allocate_command_buffer(self):
        out = vk.ffi.new("VkCommandBuffer*")
        with self._pool_lock:
            check(
                vk.lib.vkAllocateCommandBuffers(self.handle, self._alloc_info, out),
                "vkAllocateCommandBuffers",
            )
        return out[0]

    def free_command_buffer(self, cb) -> None:
        with self._pool_lock:
            vk.lib.vkFreeCommandBuffers(
                self.handle, self.command_pool, 1, vk.ffi.new("VkCommandBuffer[1]", [cb])
            )

    # --- lanes ----------------------------------------------------------------------------
    @property
    def lanes(self) -> int:
        """How many lanes (independent in-order timelines) this device offers."""
        return LANES

    def _timeline(self, index: int) -> Lane:
        """Lane `index`: its timeline (`submitted`, `wait`, `poll`)."""
        lane = self._lanes[self.check_lane(index)]
        if lane is None:
            self._check_open()
            queue, lock = self.queues[index % self.queue_count]
            lane = self._lanes[index] = Lane(self, index, queue, lock)
        return lane

    def signal(self, point: TimelinePoint) -> None:
        """Advance a lane's timeline to `point.value` from the host."""
        self._timeline(point.lane).signal_from_host(point.value)

    def wait(self, point: TimelinePoint, timeout: float | None = None) -> None:
        self._timeline(point.lane).wait(point.value, self.timeout if timeout is None else timeout)

    def synchronize(self, timeout: float = 10.0) -> None:
        """Wait until every lane has finished its submitted work (SignalTimeout after timeout)."""
        deadline = time.monotonic() + timeout
        for lane in self._lanes:
            if lane is not None and lane.submitted > lane.reached:
                lane.wait(lane.submitted, max(0.0, deadline - time.monotonic()))
        self._release_transfers()
        self._reap_dropped()

    def settle(self) -> None:
        """Wait for pending work before the host touches memory."""
        for lane in self._lanes:
            if lane is not None and lane.submitted > lane.poll():
                lane.wait(lane.submitted, self.timeout)

    # --- memory ---------------------------------------------------------------------------
    def buffer(self, array_or_nbytes, dtype=None, memory: str = "device") -> Buffer:
        """A buffer of `nbytes` (items of `dtype` when given), or a copy of an array.
        `memory`: "device" (device-local), "device-fine" (device-local and host-visible
        where offered, else host-visible), "host" (host-visible memory: a HostBuffer)."""
        self._check_open()
        check_memory_kind(memory, self.spec)
        nbytes, array = as_host_array(array_or_nbytes, dtype)
        self._reap_dropped()
        if memory == "host":
            return self._host_buffer(nbytes, array)
        allocation = Allocation(self, nbytes, host_visible=memory == "device-fine")
        buf = Buffer(self, allocation.address, nbytes, handle=allocation)
        if array is not None and nbytes:
            self._write_bytes(buf, 0, array.reshape(-1).view(np.uint8))
        return buf

    def host_buffer(self, array_or_nbytes, dtype=None) -> HostBuffer:
        """Host-visible coherent memory the device reads and writes (`.array`: zero-copy);
        transfers to and from it are vkCmdCopyBuffer on a lane."""
        self._check_open()
        nbytes, array = as_host_array(array_or_nbytes, dtype)
        return self._host_buffer(nbytes, array)

    def _host_buffer(self, nbytes: int, array) -> HostBuffer:
        allocation = Allocation(self, nbytes, host_visible=True, device_local=False)
        view = allocation.host[:nbytes]  # type: ignore[index]
        if array is not None and nbytes:
            view[:] = array.reshape(-1).view(np.uint8)
        return HostBuffer(self, allocation.address, nbytes, array=view, handle=allocation)

    def _release_host(self, buf: Buffer) -> None:
        buf.handle.free()

    def _write_bytes(self, buf: Buffer, offset: int, data: np.ndarray) -> None:
        """Buffer.write: after pending work, into mapped memory or through staging."""
        self.settle()
        allocation: Allocation = buf.handle
        start = buf.offset + offset
        if allocation.host is not None:
            allocation.host[start : start + data.nbytes] = data
        else:
            self._staged_copy_in(allocation, start, data)

    def _read_bytes(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        """Buffer.to_numpy: after pending work, a host copy of the bytes."""
        self.settle()
        allocation: Allocation = buf.handle
        start = buf.offset + offset
        if allocation.host is not None:
            return allocation.host[start : start + nbytes].copy()
        return self._staged_copy_out(allocation, start, nbytes)

    def _free_buffer(self, buf: Buffer) -> None:
        self.settle()
        buf.handle.free()

    def _live_lanes(self) -> list:
        return [lane for lane in self._lanes if lane is not None]

    def _release_handle(self, handle) -> None:
        if not self._closed:
            handle.free()

    def _one_off(self, record) -> None:
        cb = self.allocate_command_buffer()
        try:
            check(vk.lib.vkBeginCommandBuffer(cb, self.begin_info), "vkBeginCommandBuffer")
            record(cb)
            check(vk.lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
            self._timeline(0).submit(cb).wait(self.timeout)
        finally:
            self.free_command_buffer(cb)

    def _staged_copy_in(self, allocation: Allocation, start: int, data: np.ndarray) -> None:
        staging = Allocation(self, data.nbytes, host_visible=True)
        try:
            staging.host[: data.nbytes] = data  # type: ignore[index]
            region = vk.ffi.new(
                "VkBufferCopy*", {"srcOffset": 0, "dstOffset": start, "size": data.nbytes}
            )
            self._one_off(
                lambda cb: vk.lib.vkCmdCopyBuffer(cb, staging.buffer, allocation.buffer, 1, region)
            )
        finally:
            staging.free()

    def _staged_copy_out(self, allocation: Allocation, start: int, nbytes: int) -> np.ndarray:
        staging = Allocation(self, nbytes, host_visible=True)
        try:
            region = vk.ffi.new(
                "VkBufferCopy*", {"srcOffset": start, "dstOffset": 0, "size": nbytes}
            )
            self._one_off(
                lambda cb: vk.lib.vkCmdCopyBuffer(cb, allocation.buffer, staging.buffer, 1, region)
            )
            return staging.host[:nbytes].copy()  # type: ignore[index]
        finally:
            staging.free()

    # --- kernels and work -----------------------------------------------------------------
    def load(self, bundle) -> Executable:
        """Pipelines for the bundle's SPIR-V (the variant of this device's path)."""
        self._check_open()
        exe = Executable(self, bundle)
        self._executables.append(exe)
        return exe

    def command_buffer(self) -> CommandBuffer:
        self._check_open()
        if self._retired:
            self._free_retired(wait=False)
        cb = CommandBuffer(self)
        self._command_buffers.add(cb)
        return cb

    def _free_retired(self, wait: bool) -> None:
        """Free the instances of dropped command buffers whose submissions completed."""
        keep = []
        for owner, instances in self._retired:
            pending = []
            for inst in instances:
                p = inst.point
                if p is not None and p.value > self._timeline(p.lane).poll():
                    if not wait:
                        pending.append(inst)
                        continue
                    p.wait(self.timeout)
                owner._free_instance(inst)
            if pending:
                keep.append((owner, pending))
        self._retired = keep

    def submit(
        self,
        cb: CommandBuffer,
        bindings: Sequence[Buffer] = (),
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
        *,
        params=None,
    ) -> TimelinePoint:
        """Replay a recorded command buffer with these buffers in its binding slots and
        `params` (name -> value) for its parameters."""
        if getattr(cb, "device", None) is not self:
            raise DeviceError("this command buffer was recorded on another device: record it here")
        if wait:
            self.check_wait(wait)
        return cb.submit(bindings, lane, wait, params)

    if _COMPILED is not None:  # the same-buffers replay compiled, then the method above
        submit = _COMPILED.Submit(submit, Lifetime, TimelinePoint, trace.STATE,  # type: ignore[assignment]
                                  check)

    def fill(
        self,
        dst: Buffer,
        value,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Fill with `value`'s pattern: vkCmdFillBuffer for whole 32-bit words, else on the
        host after the lanes (and the points in `wait`) are done."""
        pattern, nbytes = self.check_fill(dst, value, nbytes)
        if (dst.offset | nbytes) % 4 == 0:
            return super().fill(dst, value, nbytes, lane, wait)
        self.check_wait(wait)
        for point in wait:
            point.wait(self.timeout)
        if nbytes:
            dst.write(np.tile(pattern, nbytes // pattern.size))
        return self.barrier(lane)

    def dispatch(
        self,
        kernel: Kernel,
        grid,
        block=None,
        args: Sequence = (),
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Run one kernel now (asynchronously); returns its timeline point."""
        if not isinstance(kernel, Kernel) or kernel.executable.device is not self:
            raise KernelArgumentError(
                "dispatch wants a Kernel from this device's dev.load(...).kernel(name), "
                f"got {kernel!r}"
            )
        if not isinstance(args, (list, tuple)):
            raise KernelArgumentError(
                f"args must be a list or tuple, got {type(args).__name__}"
            )
        if wait:
            self.check_wait(wait)
        groups = kernel.groups(grid, block)
        buffers = [a for a in args if isinstance(a, Buffer)]
        constants = tuple(to_u32(a) for a in args if not isinstance(a, Buffer))
        key = (kernel.uid, groups, constants, len(buffers))
        cb = self._immediate.get(key)
        if cb is None:
            old = None
            with self._immediate_lock:
                cb = self._immediate.get(key)
                if cb is None:
                    cb = CommandBuffer(self)
                    slots = [cb.binding(i) for i in range(len(buffers))]
                    cb._dispatch_groups(kernel, groups, [*slots, *constants])
                    cb.finalize()
                    self._immediate[key] = cb
                    if len(self._immediate) > IMMEDIATE_CACHE:
                        _, old = self._immediate.popitem(last=False)
            if old is not None:
                old.release()  # under its own submit lock: waits for a submit in progress
        return cb.submit(buffers, lane, wait)

    # --- life -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise VulkanError(f"{self.spec} is closed; open a new device")

    def close(self) -> None:
        if self._closed:
            return
        self.synchronize(self.timeout)
        check(vk.lib.vkDeviceWaitIdle(self.handle), "vkDeviceWaitIdle")
        self._free_retired(wait=True)
        self._release_transfers(all_done=True)
        for allocation, _root in self._take_unreleased():  # buffers still held, or not reaped
            allocation.free()
        for cb in [*self._immediate.values(), *list(self._command_buffers)]:
            cb.release()
        for exe in self._executables:
            exe.close()
        for lane in self._lanes:
            if lane is not None:
                lane.destroy()
        vk.lib.vkDestroyCommandPool(self.handle, self.command_pool, vk.ffi.NULL)
        vk.lib.vkDestroyDevice(self.handle, vk.ffi.NULL)
        self._closed = True

    def __enter__(self) -> VulkanDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VulkanDevice({self.spec}, {self.name!r}, path={self.path})"
