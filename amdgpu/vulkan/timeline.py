"""Lanes: one timeline semaphore each, submissions through vkQueueSubmit2.

A lane is in order: each submission waits on the lane's previous value, plus any points of
other lanes it was given. The VkSubmitInfo2 and its semaphore infos are built once per lane
and only their values are rewritten per submission (cffi attribute stores, no allocation).
A host wait first polls the timeline value for `device.tuning.spin_us` (sync.py), then
blocks in vkWaitSemaphores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from amdgpu.device import TimelinePoint
from ground.errors import KernelArgumentError, SignalTimeout
from packets import trace

from .fast_submit import MODULE as _COMPILED
from .instance import check, vk

if TYPE_CHECKING:  # pragma: no cover
    from .context import VulkanContext

MAX_WAITS = 16
VK_TIMEOUT = 2


def _address(cdata) -> int:
    return int(vk.ffi.cast("uintptr_t", cdata))


class Lane:
    """One timeline semaphore on one VkQueue."""

    def __init__(self, device: VulkanContext, index: int, queue, queue_lock: threading.Lock):
        ffi = vk.ffi
        self.device = device
        self.index = index
        self.queue = queue
        self.queue_lock = queue_lock  # shared by the lanes of one VkQueue
        # submit() fills this lane's reused VkSubmitInfo2, counts its timeline value and
        # calls vkQueueSubmit2 under the queue's lock: one lock a submit, not two (the
        # struct stores it covers for other lanes of the queue take well under 1 us)
        self.lock = queue_lock
        type_info = vk.VkSemaphoreTypeCreateInfo(
            semaphoreType=vk.VK_SEMAPHORE_TYPE_TIMELINE, initialValue=0
        )
        out = ffi.new("VkSemaphore*")
        create_info = vk.VkSemaphoreCreateInfo(pNext=type_info)
        check(
            vk.lib.vkCreateSemaphore(device.handle, ffi.addressof(create_info), ffi.NULL, out),
            "vkCreateSemaphore",
            "timeline",
        )
        self.semaphore = out[0]
        self.submitted = 0
        self.reached = 0  # last value known complete
        # Pre-built submission structures, rewritten in place.
        self._waits = ffi.new("VkSemaphoreSubmitInfo[]", MAX_WAITS)
        for i in range(MAX_WAITS):
            self._waits[i].sType = vk.VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO
            self._waits[i].stageMask = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
        self._signal = ffi.new("VkSemaphoreSubmitInfo*")
        self._signal.sType = vk.VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO
        self._signal.semaphore = self.semaphore
        self._signal.stageMask = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
        self._command = ffi.new("VkCommandBufferSubmitInfo*")
        self._command.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_SUBMIT_INFO
        self._submit = ffi.new("VkSubmitInfo2*")
        self._submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO_2
        self._submit.pWaitSemaphoreInfos = self._waits
        self._submit.pSignalSemaphoreInfos = self._signal
        self._submit.signalSemaphoreInfoCount = 1
        self._submit.pCommandBufferInfos = self._command
        self._in_struct: object = None  # the VkCommandBuffer (cdata) _command holds
        self._wait_sems = ffi.new("VkSemaphore[1]", [self.semaphore])
        self._wait_values = ffi.new("uint64_t[1]")
        self._wait_info = ffi.new("VkSemaphoreWaitInfo*")
        self._wait_info.sType = vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO
        self._wait_info.semaphoreCount = 1
        self._wait_info.pSemaphores = self._wait_sems
        self._wait_info.pValues = self._wait_values
        self._counter = ffi.new("uint64_t*")
        self._signal_info = ffi.new("VkSemaphoreSignalInfo*")
        self._signal_info.sType = vk.VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO
        self._signal_info.semaphore = self.semaphore
        # fast_submit.c's view of this lane: the driver's vkQueueSubmit2 and where the
        # structs above keep what a submission rewrites (None: not built, or destroyed)
        submit2 = 0 if _COMPILED is None else _address(
            vk.lib.vkGetDeviceProcAddr(device.handle, b"vkQueueSubmit2"))
        self._port = None if not submit2 else _COMPILED.Port(  # type: ignore[union-attr]
            submit2, _address(queue), _address(self._submit),
            _address(ffi.addressof(self._submit, "waitSemaphoreInfoCount")),
            _address(ffi.addressof(self._submit, "commandBufferInfoCount")),
            _address(ffi.addressof(self._command, "commandBuffer")),
            _address(ffi.addressof(self._signal, "value")),
            _address(ffi.addressof(self._waits[0], "semaphore")),
            _address(ffi.addressof(self._waits[0], "value")),
            _address(self.semaphore))

    def submit(
        self, command_buffer, waits: Sequence[TimelinePoint] = (), details: dict | None = None
    ) -> TimelinePoint:
        """Submit one VkCommandBuffer (or None: a pure signal) after `waits`; return its point.

        `details` (what was submitted) goes to the packet-trace sink when one is active."""
        lock = self.lock  # acquire/release: cheaper than `with` on CPython 3.11
        lock.acquire()
        try:
            submitted = self.submitted
            count = self._wait_infos(waits) if waits or submitted > self.reached else 0
            value = submitted + 1
            info = self._submit
            info.waitSemaphoreInfoCount = count
            self._signal.value = value
            if command_buffer is not self._in_struct:  # the same one again: already there
                self._set_command(command_buffer)
            result = vk.lib.vkQueueSubmit2(self.queue, 1, info, vk.ffi.NULL)
            if result != 0:
                check(result, "vkQueueSubmit2", f"lane {self.index}, value {value}")
            self.submitted = value
            if trace.STATE.sink is not None or not trace.STATE.env_checked:
                self._trace(command_buffer, count, value, details)
            return TimelinePoint(self.index, value, self)
        finally:
            lock.release()

    def _wait_infos(self, waits: Sequence[TimelinePoint]) -> int:
        """Fill the wait infos: this lane's previous value while it is not reached, then
        the points of other lanes not reached yet; returns how many."""
        count = 0
        w = self._waits
        if self.submitted > self.reached:  # in order: after this lane's previous work
            w[0].semaphore = self.semaphore
            w[0].value = self.submitted
            count = 1
        for point in waits:
            if point.lane == self.index:
                continue  # already ordered
            other = point.timeline
            if other is None or other.device is not self.device:
                other = self.device._timeline(point.lane)
            if point.value <= other.reached:
                continue
            if count >= MAX_WAITS:
                raise KernelArgumentError(f"more than {MAX_WAITS - 1} wait points in one submit")
            w[count].semaphore = other.semaphore
            w[count].value = point.value
            count += 1
        return count

    def _set_command(self, command_buffer) -> None:
        """Put a VkCommandBuffer (None: none, a pure signal) into the reused submit info."""
        if command_buffer is None:
            self._submit.commandBufferInfoCount = 0
        else:
            self._command.commandBuffer = command_buffer
            self._submit.commandBufferInfoCount = 1
        self._in_struct = command_buffer

    def _trace(self, command_buffer, wait_count: int, value: int, details) -> None:
        sink = trace.active_sink()
        if sink is None:
            return
        w = self._waits
        payload = {
            "device": self.device.spec,
            "lane": self.index,
            "signal_value": value,
            "waits": [
                [int(vk.ffi.cast("uintptr_t", w[i].semaphore)), int(w[i].value)]
                for i in range(wait_count)
            ],
            "command_buffer": int(vk.ffi.cast("uintptr_t", command_buffer))
            if command_buffer is not None
            else 0,
        }
        if details:
            payload.update(details)
        sink.vulkan_submission(payload)

    def completed(self) -> int:
        """The lane's completed value (the TimelinePoint protocol)."""
        return self.poll()

    def poll(self) -> int:
        """The lane's completed value (one vkGetSemaphoreCounterValue when work is pending)."""
        if self.reached < self.submitted:
            result = vk.lib.vkGetSemaphoreCounterValue(
                self.device.handle, self.semaphore, self._counter
            )
            if result != 0:
                check(result, "vkGetSemaphoreCounterValue", f"lane {self.index}")
            self.reached = int(self._counter[0])
        return self.reached

    def wait(self, value: int, timeout: float = 10.0) -> None:
        """Block until the lane reaches `value`; SignalTimeout after `timeout` seconds."""
        if value <= self.reached:
            return
        remaining = timeout
        spin = self.device.tuning.spin_us
        if spin > 0:
            seconds = min(spin * 1e-6, timeout)
            if self._spin(value, seconds):
                return
            remaining -= seconds
        self._wait_values[0] = value
        nanoseconds = max(0, int(remaining * 1e9))
        result = vk.lib.vkWaitSemaphores(self.device.handle, self._wait_info, nanoseconds)
        if result == VK_TIMEOUT:
            self.poll()
            raise SignalTimeout(
                VK_TIMEOUT,
                f"lane {self.index} did not reach {value} within {timeout} s (it is at "
                f"{self.reached}); a wait may never be signaled, or the work is too long",
                "vkWaitSemaphores",
            )
        if result != 0:
            check(result, "vkWaitSemaphores", f"lane {self.index}, value {value}")
        self.reached = max(self.reached, value)

    def _spin(self, value: int, seconds: float) -> bool:
        """Poll the timeline for up to `seconds`; True once it reached `value`.

        A blocking vkWaitSemaphores may sleep and be woken late; short GPU work finishes
        sooner than that, so the host first polls the counter (as CUDA's default sync does)."""
        get = vk.lib.vkGetSemaphoreCounterValue
        handle, semaphore, counter = self.device.handle, self.semaphore, self._counter
        deadline = time.perf_counter() + seconds
        while True:
            result = get(handle, semaphore, counter)
            if result != 0:
                check(result, "vkGetSemaphoreCounterValue", f"lane {self.index}")
            reached = int(counter[0])
            if reached >= value:
                self.reached = max(self.reached, reached)
                return True
            if time.perf_counter() >= deadline:
                return False

    def signal_from_host(self, value: int) -> None:
        """Set the timeline to `value` from the host (releases waits on it)."""
        self._signal_info.value = value
        check(vk.lib.vkSignalSemaphore(self.device.handle, self._signal_info), "vkSignalSemaphore")
        self.submitted = max(self.submitted, value)

    def destroy(self) -> None:
        self._port = None
        vk.lib.vkDestroySemaphore(self.device.handle, self.semaphore, vk.ffi.NULL)
