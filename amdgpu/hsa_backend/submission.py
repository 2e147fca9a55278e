"""HsaDevice's submission: immediate dispatch (its launch-cache path; the compiled one is
hotpath.c's Dispatch), command-buffer submit, barriers, timeline points, marks and the
dispatch timer, and waiting for the lanes."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import packets
from amdgpu.buffer import Lifetime
from amdgpu.device import TimelinePoint
from amdgpu.hsa_backend.command_buffer import HsaCommandBuffer
from amdgpu.hsa_backend.executable import HsaKernel
from amdgpu.hsa_backend.lanes import QueueLane
from amdgpu.hsa_backend.parts import DeviceParts
from amdgpu.hsa_backend.pm4_replay import foreign_message
from amdgpu.hsa_backend.tracing import announce
from ground.errors import DeviceError, HsaError, KernelArgumentError

if TYPE_CHECKING:
    from amdgpu.hsa_backend.timing import DispatchTimer

_new_point = object.__new__  # a TimelinePoint without its __init__ call (dispatch)
_TRACE = packets.trace.STATE  # `.sink`: the active trace sink or None


class DeviceSubmission(DeviceParts):
    # --- work ----------------------------------------------------------------------------
    def dispatch(
        self,
        kernel: HsaKernel,
        grid: Any,
        block: Any = None,
        args: Sequence[Any] = (),
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
        *,
        dynamic_lds: int = 0,
        cluster: Any = None,
    ) -> TimelinePoint:
        """Launch `kernel` over `grid` work-items in workgroups of `block`; on gfx1250 in
        clusters of `cluster` workgroups (the extended dispatch packet; 1 by default)."""
        # The hot path: every line here costs on each dispatch (see docs/BENCHMARKS.md #16).
        if kernel.__class__ is not HsaKernel or kernel.device is not self:
            self._refuse_kernel(kernel, lane, wait)
        # The launch cache's fast path, keyed by the lane's index: exact ints only (bool and
        # float sizes compare equal to ints, so they go through launch(), which refuses them).
        launch = (
            kernel._launches.get((grid, block, dynamic_lds, lane))
            if grid.__class__ is int and lane.__class__ is int and cluster is None
            and (block is None or block.__class__ is int) and dynamic_lds.__class__ is int
            else None
        )
        if launch is None:
            ln = self._timeline(lane)
            if ln.failed:
                ln.check()
            if wait:
                self.check_wait(wait)
            launch = kernel.launch(grid, block, dynamic_lds, ln, cluster)
        else:
            ln = launch.lane  # the plan is per lane
            if ln.failed:  # set by the queue's error callback
                ln.check()
            if wait:
                self.check_wait(wait)
        size, explicit, fast, _start, hidden, words, body, header, geom, _ln, publish, _key = launch
        # The kernarg bytes first: a refused argument raises before anything is reserved.
        # (args, launch, bytes, Lifetime.ends): one tuple, so threads see a whole one; its
        # buffers were checked live while no buffer's lifetime has ended since
        last = kernel.last
        if args is last[0] and launch is last[1] and last[3] is Lifetime.ends:
            data = last[2]  # the same tuple again: its bytes are known
        else:
            ends = Lifetime.ends
            try:  # one pack for the explicit args (live buffers of this device), then the
                data = explicit.pack(*fast(args, self._owner_token)) + hidden  # cached hidden bytes
            except (ValueError, TypeError, AttributeError, struct.error):
                # the checked path: converts what it can, else names the bad argument
                g, b, dims = geom
                layout = kernel.layout
                data = layout.struct.pack(*layout.values(
                    args, g, b, dims, dynamic_lds, ln.queue.handle, device=self))
            if type(args) is tuple and kernel.args_cacheable:  # immutable: reusable bytes
                kernel.last = (args, launch, data, ends)
        if wait or ln.aql.watched:  # the mode, set when a timer or trace sink came or went
            return self._dispatch_slow(kernel, ln, data, size, words, body, header, wait)
        # One atomic step under the lane's lock: timeline value, kernarg block, packet,
        # counter (QueueLane.dispatcher: bound once per launch and lane).
        point = _new_point(TimelinePoint)  # TimelinePoint(ln.index, value, ln), cheaper
        point.value = publish(data)
        point.lane = ln.index
        point.timeline = ln
        return point

    def _refuse_kernel(self, kernel: Any, lane: Any, wait: Any) -> None:
        """dispatch's checks in their order (lane, lane error, waits), then the kernel's."""
        ln = self._timeline(lane)
        if ln.failed:
            ln.check()
        if wait:
            self.check_wait(wait)
        raise KernelArgumentError(
            "dispatch wants a Kernel from this device's dev.load(...).kernel(name), "
            f"got {kernel!r}"
        )

    def _dispatch_slow(self, kernel: HsaKernel, ln: QueueLane, data: bytes, size: int,
                       words: memoryview, body: memoryview, header: int,
                       wait: Sequence[TimelinePoint]) -> TimelinePoint:
        """An immediate dispatch with waits, a DispatchTimer or a trace sink active."""
        # Waits on other lanes are built outside this lane's lock (they may publish a proxy
        # barrier on the other lane, under that lane's lock: never two locks at once).
        pre, proxies = ln.prepare_waits(wait) if wait else (None, None)
        with ln.aql as value:  # the lock, the timeline value; the counter moves on success
            off = ln.aql.allocate(size, value)
            ln.kernarg_view[off : off + size] = data  # the whole block in one store
            words[5] = ln.kernarg_address + off  # the launch's packet template, in place
            if proxies:
                ln.hold_proxies(value, proxies)
            pkt = header.to_bytes(4, "little") + body.tobytes()
            if self.timer is not None:  # per-dispatch device time (hsa_backend.timing)
                self.timer.publish(ln, kernel, pkt, pre)
            elif _TRACE.sink is not None:
                self._publish_traced(ln, kernel, pkt, data, pre)
            elif pre is not None:  # the waits and the dispatch: one block, one doorbell
                ln.publish_block(np.concatenate([pre, np.frombuffer(pkt, dtype=pre.dtype)]))
            else:  # (tracing switched off meanwhile)
                ln.publish(pkt)
        return TimelinePoint(ln.index, value, ln)

    def _publish_traced(
        self,
        ln: QueueLane,
        kernel: HsaKernel,
        pkt: bytes,
        kernarg: bytes,
        pre: np.ndarray | None,
    ) -> None:
        """An immediate dispatch while a trace sink is active: the packet record carries
        the kernarg bytes and the kernel name, and the sink knows the kernel's symbol.
        Called with the lane's lock held; `pre`: the wait packets, built before it."""
        sink = _TRACE.sink
        if sink is not None:
            announce(sink, kernel)
        if pre is not None:  # the waits first (their own doorbell), then the dispatch
            ln.publish_block(pre)
        ln.publish(pkt, kernarg=kernarg, symbol=kernel.name)

    def command_buffer(self, mode: str | None = None):
        """A command buffer to record. `mode`: "auto" (PM4 replays on CDNA gfx9, AQL
        elsewhere: see amdgpu/hsa_backend/pm4_replay.py), "pm4" or "aql"; None reads
        AMDGPU_COMMAND_BUFFER (default "auto"). `cb.path` says which was taken, and why
        `cb.path_reason`."""
        self._check_open()
        return HsaCommandBuffer(self, mode)

    def submit(
        self,
        cb: Any,
        bindings: Sequence[Any] = (),
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
        *,
        params: Any = None,
    ) -> TimelinePoint:
        """Replay a finalized command buffer with `bindings` and the values of its
        parameters (`params`: name -> value; no re-record)."""
        ln = self._timeline(lane)
        ln.check()
        if getattr(cb, "device", None) is not self:
            raise DeviceError(foreign_message(cb, self))
        if wait:
            self.check_wait(wait)
        return cb._submit(ln, bindings, wait, params)

    def barrier(self, lane: int = 0, wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """A submission of barrier packets only: advances the lane's timeline once the
        waited-for points (on other lanes) are reached."""
        import packets

        ln = self._timeline(lane)
        ln.check()
        if wait:
            self.check_wait(wait)
        pre, proxies = ln.prepare_waits(wait)
        last = packets.barrier_and_batch(
            dep_signals=(), completion_signal=ln.signal, barrier=True, count=1
        )
        block = (
            last.view(packets.PACKET)
            if pre is None
            else np.concatenate([pre, last.view(packets.PACKET)])
        )
        with ln.aql as value:
            if proxies:
                ln.hold_proxies(value, proxies)
            ln.publish_block(block)
        return TimelinePoint(ln.index, value, ln)

    # --- device timestamps ---------------------------------------------------------------
    def time_dispatches(self):
        """`with dev.time_dispatches() as t:` times every immediate dispatch on the device
        (start/end per packet, on the host clock): t.times, t.per_kernel(). Needs the
        `profiling` path. See amdgpu/hsa_backend/timing.py for how it is batched."""
        from amdgpu.hsa_backend.timing import DispatchTimer

        self._check_open()
        return DispatchTimer(self)

    def set_timer(self, timer: DispatchTimer | None) -> None:
        """Start (a DispatchTimer) or stop (None) timing the immediate dispatches: what
        DispatchTimer's `with` does; every lane's mode changes here (Lane.set_timed), so
        its dispatches and replays take the timed path until it stops."""
        self.timer = timer
        for ln in self.lanes_:
            ln.aql.set_timed(timer is not None)

    def mark(self, lane: int = 0) -> int:
        """A timestamp mark on `lane`: a barrier-AND (barrier bit, no deps) whose completion
        signal (from the pool, not the timeline) records when everything before it on the
        lane completed. Needs the `profiling` path; see `elapsed_ns`."""
        import packets

        if not self.paths["profiling"].available:
            raise DeviceError(
                f"{self.spec} has no profiling timestamps: {self.paths['profiling'].reason}"
            )
        ln = self._timeline(lane)
        ln.check()
        ln.enable_profiling()
        sig = self.signal_pool.take(1)
        with ln.lock:
            ln.publish(packets.barrier_and(dep_signals=(), completion_signal=sig, barrier=True))
        return sig

    def elapsed_ns(self, start_mark: int, end_mark: int, timeout: float | None = None) -> int:
        """Device time between two marks (each the end timestamp of its barrier packet);
        waits for both, then returns their signals to the pool."""
        from hsa.provider import SignalCondition

        timeout = self.default_timeout if timeout is None else timeout
        p = self.provider
        try:
            for sig in (start_mark, end_mark):
                p.signal_wait(sig, SignalCondition.LT, 1, timeout)
            t0 = p.dispatch_time(self.agent.handle, start_mark)[1]
            t1 = p.dispatch_time(self.agent.handle, end_mark)[1]
        finally:
            self.signal_pool.give([start_mark, end_mark])
        return max(0, t1 - t0)

    def _point(self, lane: int) -> TimelinePoint:
        ln = self._timeline(lane)
        return TimelinePoint(ln.index, ln.submitted, ln)

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for every lane; raises the first lane error (QueueError) or SignalTimeout."""
        self._wait_lanes(timeout, skip_reported=False)
        self._release_transfers()
        self._reap_dropped()
        for slabs in getattr(self, "_slabs", {}).values():  # empty slabs past the spares go back
            slabs.trim()

    def _settle(self) -> None:
        """Wait for the lanes before the host touches device memory. A stopped lane whose
        error the caller has already seen is skipped: its work is lost, and the other lanes'
        buffers must stay readable (a fault is reported once, not on every later read)."""
        self._wait_lanes(None, skip_reported=True)

    def _wait_lanes(self, timeout: float | None, skip_reported: bool) -> None:
        timeout = self.default_timeout if timeout is None else timeout
        first_error = None
        for ln in self.lanes_:
            if skip_reported and ln.reported:
                continue
            try:
                ln.check()
                ln.wait(ln.submitted, timeout)
            except HsaError as e:
                first_error = first_error or e
        if first_error is not None:
            raise first_error
