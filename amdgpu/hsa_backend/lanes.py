"""Queue lanes: one HSA queue, one timeline signal and one kernarg ring each.

Timeline model (decrement to the signal, HSA's convention). Each lane owns one signal
created at TIMELINE_START (2**62). Every submission on a lane is one timeline value
(1, 2, 3, ...): its last packet carries the lane signal as completion signal, so the packet
processor decrements the signal by one when the submission completes. The lane has
completed value v when `signal <= TIMELINE_START - v`:

- a host waits with `signal_wait(signal, LT, TIMELINE_START - v + 1)`;
- the first packet of each submission has the barrier bit (a lane is in order, like a
  stream), and so has the signal-carrying last packet (or a trailing barrier-AND takes the
  signal), so decrements happen in submission order and the count is exact;
- another lane waits for value v with an AMD BARRIER_VALUE packet
  (`signal LT TIMELINE_START - v + 1`) where the agent has it; otherwise with a BARRIER-AND
  on a proxy signal: the waited-on lane gets a barrier-AND packet (barrier bit, no deps)
  whose completion signal is a fresh pool signal set to 1; the waiting lane's barrier-AND
  waits for it to reach 0. The proxy completes no earlier than value v (it may be later,
  which is safe: the waited-on lane's queued work can only wait on points that already
  exist, so no cycle forms). Nothing assumes FIFO order between lanes.

Kernarg blocks come from the lane's `KernargRing`, tagged with the value that frees them.
A queue error is kept by the lane: the next call on the lane, and `synchronize`, raise a
QueueError with the queue's status; other lanes keep working.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

import packets
from amdgpu.hsa_backend import hotpath
from amdgpu.hsa_backend.kernargs import KernargRing
from amdgpu.hsa_backend.python_lane import PythonLane
from ground.errors import (
    DeviceError,
    DeviceLost,
    HsaError,
    MemoryFault,
    QueueError,
    SignalTimeout,
)
from ground.status import HSA_STATUS_ERROR, HSA_STATUS_ERROR_MEMORY_FAULT
from hsa.provider import QueueType, SignalCondition

TIMELINE_START = 1 << 62
WAIT_SLICE_S = 0.05  # host waits look at the queue's error state this often
MAX_DEPS = 5  # dep_signal slots of one barrier-AND packet
_TRACE = packets.trace.STATE  # `.sink`: the active trace sink or None


_PC_SITE = re.compile(r"code-object offset (0x[0-9a-f]+) \(([^)]+)\)")


def fault_text(fault: MemoryFault) -> str:
    """A memory fault in one form on every provider: the address, and the code-object offset
    of the faulting instruction where the provider knows it (the virtual GPU's executor
    says "code-object offset 0x... (mnemonic)"; ROCr reports the address only)."""
    text = f"memory fault at address 0x{fault.address:x}"
    site = _PC_SITE.search(fault.text or "")
    if site:
        text += f", code-object offset {site[1]} ({site[2]})"
    return text + "; check the kernel's buffer sizes and arguments"


class LaneHost(Protocol):
    """What a lane and a dispatch timer need from their device (HsaDevice provides it);
    typed here so that neither imports the device module."""

    provider: Any
    agent: Any
    spec: str
    kernarg_pool: int
    signal_pool: SignalPool
    default_timeout: float
    use_barrier_value: bool
    paths: dict[str, Any]
    lanes_: list[QueueLane]
    timer: Any

    def kernel_name(self, kernel_object: int) -> str | None: ...

    def set_timer(self, timer: Any) -> None: ...


class SignalPool:
    """Reusable signals for proxy barriers (one provider)."""

    def __init__(self, provider: Any):
        self.provider = provider
        self._free: list[int] = []
        self._all: list[int] = []
        self._lock = threading.Lock()

    def take(self, initial: int = 1) -> int:
        with self._lock:
            sig = self._free.pop() if self._free else None
        if sig is None:
            sig = self.provider.signal_create(initial)
            self._all.append(sig)
        else:
            self.provider.signal_store(sig, initial)
        return sig

    def give(self, signals: Sequence[int]) -> None:
        with self._lock:
            self._free.extend(signals)

    def destroy(self) -> None:
        for sig in self._all:
            try:
                self.provider.signal_destroy(sig)
            except HsaError:
                pass
        self._all.clear()
        self._free.clear()


class KeptBlocks:
    """Kernarg blocks kept across submissions (a command buffer's replay instances), in
    the lane's kernarg allocation after its ring: first fit over a sorted free list. A
    block given back waits until the lane has completed the last value that reads it."""

    ALIGN = 256

    def __init__(self, start: int, end: int, completed: Any):
        self._free: list[list[int]] = [[start, end]]  # [start, end) runs, sorted
        self._pending: list[tuple[int, int, int]] = []  # (offset, nbytes, value)
        self._completed = completed
        self._lock = threading.Lock()  # given back from finalizers, on any thread

    def take(self, nbytes: int) -> int | None:
        """The offset (from the lane's kernarg_address) of `nbytes`, or None if full."""
        nbytes = -(-max(nbytes, 1) // self.ALIGN) * self.ALIGN
        with self._lock:
            if self._pending:
                done = self._completed()
                for item in [x for x in self._pending if x[2] <= done]:
                    self._pending.remove(item)
                    self._insert(item[0], item[1])
            for run in self._free:
                if run[1] - run[0] >= nbytes:
                    start = run[0]
                    run[0] += nbytes
                    if run[0] == run[1]:
                        self._free.remove(run)
                    return start
        return None

    def give(self, offset: int, nbytes: int, value: int) -> None:
        """Return a block once the lane has completed `value`."""
        nbytes = -(-max(nbytes, 1) // self.ALIGN) * self.ALIGN
        with self._lock:
            self._pending.append((offset, nbytes, value))

    def _insert(self, start: int, nbytes: int) -> None:
        end = start + nbytes
        runs = self._free
        i = 0
        while i < len(runs) and runs[i][0] < start:
            i += 1
        runs.insert(i, [start, end])
        if i + 1 < len(runs) and runs[i + 1][0] == end:  # merge with the next run
            runs[i][1] = runs.pop(i + 1)[1]
        if i > 0 and runs[i - 1][1] == start:  # and with the previous one
            runs[i - 1][1] = runs.pop(i)[1]


def _native_ops(queue: Any) -> dict | None:
    """The queue's native_ops() (hsa.virtual.queues.VirtualQueue, RocrQueue): its write
    index and doorbell for the compiled Lane to do natively; None where it has none."""
    native = getattr(queue, "native_ops", None)
    return native() if native is not None else None


class QueueLane:
    """An HSA queue with its timeline signal and kernarg ring."""

    # read on every immediate dispatch: slots, which the compiled hot path (hotpath.c's
    # Dispatch) reads at their offsets instead of looking them up by name
    __slots__ = ("index", "failed", "__dict__", "__weakref__")

    def __init__(self, device: LaneHost, index: int, queue_size: int, kernarg_bytes: int):
        self.device = device
        self.index = index
        p = self.provider = device.provider
        self._error_status: int | None = None
        self.failed = False  # slots (see __slots__), read on every dispatch
        self.closed = False
        # one token per thread inside wait(): close() destroys the timeline signal only once
        # they have left (ROCr asserts on a destroyed signal: the process aborts)
        self.waiting: list[object] = []
        self.queue = p.queue_create(
            device.agent.handle, queue_size, QueueType.MULTI, self._on_error
        )
        q = self.queue
        self.signal = p.signal_create(TIMELINE_START)
        self._proxy_lock = threading.Lock()  # _held_proxies: appended and released anywhere
        self._completed = 0  # highest value seen complete
        # proxies held until this lane's value passes: [(value, [signals])]
        self._held_proxies: list[tuple[int, list[int]]] = []
        # One kernarg-pool allocation: the ring the submissions take their blocks from,
        # then as many bytes again for the kept blocks of command-buffer replays (KeptBlocks)
        total = 2 * kernarg_bytes
        self.kernarg_address = p.memory_pool_allocate(device.kernarg_pool, total)
        p.agents_allow_access([device.agent.handle], self.kernarg_address)
        self.kernarg_memory = p.host_view(self.kernarg_address, total)
        self.kernarg_view = memoryview(self.kernarg_memory)  # for pack_into / slice stores
        ring = self.kernarg_memory[:kernarg_bytes]
        ring.fill(0)  # touch every page now, not on the first dispatches
        self.kept = KeptBlocks(kernarg_bytes, total, self.completed)
        # The lane's submission, chosen once here, owning the AQL ring's indices, the
        # kernarg ring, the lock and the timeline counter: the compiled Lane (hotpath.c:
        # the one publish sequence) where the module is built, else PythonLane (the same
        # methods over packets.Ring and KernargRing).
        self.aql: Any
        if hotpath.MODULE is not None:
            packets.trace.active_sink()  # AMDGPU_TRACE creates its writer at first use
            self.aql = hotpath.MODULE.Lane(
                q.ring.reshape(-1).view(np.uint8), q.size, q.add_write_index, q.doorbell,
                packets.ring.Room(q.size, q.load_write_index, q.load_read_index, q.id),
                q.load_write_index(), q.load_read_index(), _native_ops(q),
                ring, self.kernarg_address, KernargRing.capacity_for(ring.size),
                self.completed, self.wait, packets.ring,
            )
        else:
            self.aql = PythonLane(q, self.kernarg_address, ring, self.completed, self.wait)
        # Held for each submission's one atomic step (timeline value, kernarg block, packet
        # write, counter update): threads may share a lane. Never held while taking another
        # lane's lock (cross-lane waits are prepared before it). `with lane.aql as value:`
        # takes it for one submission and moves the counter.
        self.lock = self.aql.lock
        self.submit_block = self.aql.submit_block
        self.submit_rows = self.aql.submit_rows

    # --- errors --------------------------------------------------------------------------
    def _on_error(self, status: int, queue: Any) -> None:
        self._error_status = int(status)
        self.failed = True

    # A kept block published under the lane's lock (its first header INVALID, given apart):
    # submit_block(block, first_header) -> first id; submit_rows(block, first_header,
    # kernarg_base, kernarg_offsets, signal_row, signal) -> first id sets each row's kernarg
    # address and the completion signal on the way (packets.Ring.publish_ready/_rows).
    submit_block: Callable[..., int]
    submit_rows: Callable[..., int]

    @property
    def submitted(self) -> int:
        """The timeline value of the latest submission (the Lane's counter)."""
        return self.aql.submitted

    failed: bool  # True once the queue reported an error (dispatch checks only this)
    closed = False  # the device was closed (failed is set too)
    profiling = False  # the queue records dispatch timestamps (enable_profiling)

    def enable_profiling(self) -> None:
        """Have the queue record each dispatch's start and end time (idempotent)."""
        if not self.profiling:
            self.provider.profiling_set_enabled(self.queue, True)
            self.profiling = True

    @property
    def doorbells(self) -> int:
        """Doorbell rings on this lane (tests and stats read it)."""
        return self.aql.doorbells

    _fault: MemoryFault | None = None  # a fault a wait saw before the queue callback did

    def error(self) -> QueueError | None:
        cause = self.queue.error
        if not isinstance(cause, MemoryFault) and self._fault is not None:
            cause = self._fault
        if cause is None and self._error_status is None:
            return None
        status = getattr(cause, "status", None) or self._error_status or HSA_STATUS_ERROR
        if isinstance(cause, MemoryFault):
            text = fault_text(cause)
        else:
            text = getattr(cause, "text", None) or str(cause or "queue error")
        pid, what = self._stop_site()
        site = f" at packet {pid} ({what})" if pid is not None else ""
        if self.provider.agent_lost(self.device.agent.handle) is not None:
            after = ("the amdgpu kernel driver stopped all of this process's queues on the GPU: "
                     "open the device in a new process")
        else:
            after = "its work is lost, other lanes still run: open the device again to reset it"
        err = QueueError(
            status,
            f"lane {self.index} of {self.device.spec} (queue {self.queue.id}) stopped"
            f"{site}: {text}; "
            f"{after}",
        )
        if not self._error_traced and pid is not None:
            self._trace_error(pid, what, text, status, cause)
        err.__cause__ = cause if isinstance(cause, BaseException) else None
        return err

    def _stop_site(self) -> tuple[int | None, str]:
        """(packet id, 'kernel K' or the packet type): the packet at the queue's read index,
        which a stopped packet processor leaves at the packet it could not finish (ROCr's
        and the virtual one alike); the kernel named from this device's executables."""
        try:
            pid = int(self.queue.load_read_index())
            if pid >= self.queue.load_write_index():
                return None, ""
            slot = (pid & (self.queue.size - 1)) * 64
            raw = bytes(np.asarray(self.queue.ring).view(np.uint8)[slot:slot + 64])
        except Exception:  # noqa: BLE001 - a queue torn down meanwhile: no site, same error
            return None, ""
        kind = raw[0]
        if kind != int(packets.PacketType.KERNEL_DISPATCH):
            return pid, {3: "barrier_and", 5: "barrier_or", 0: "vendor packet"}.get(
                kind, "packet")
        obj = int.from_bytes(raw[32:40], "little")
        name = self.device.kernel_name(obj)
        return pid, f"kernel {name}" if name else f"kernel object 0x{obj:x}"

    _error_traced = False

    def _trace_error(self, pid: int, what: str, text: str, status: int, cause: Any) -> None:
        """A QUEUE_ERROR record on the faulting packet, once per lane, for an active sink."""
        sink = packets.trace.active_sink()
        record = getattr(sink, "queue_error", None)
        if record is None:
            return
        self._error_traced = True
        info = {"text": text, "status": int(status), "site": what}
        if what.startswith("kernel "):
            info["kernel"] = what[len("kernel "):]
        if isinstance(cause, MemoryFault):
            info["address"] = int(cause.address)
        record(self.queue.id, pid, info)

    def check(self) -> None:
        if self.closed:
            raise DeviceError(f"{self.device.spec} was closed: open it again")
        lost = self.provider.agent_lost(self.device.agent.handle)
        if lost is not None and "report" in lost:  # the fault was reported: no more work
            self.failed = True
            raise DeviceLost(
                f"{self.device.spec} can run nothing more in this process: {lost['report']} "
                "earlier; the amdgpu kernel driver stops a process's queues after a GPU "
                "memory fault: open the device in a new process")
        if lost is not None and self._fault is None:
            # the process's one GPU memory fault (ROCr): the first lane to look reports it
            self._fault = MemoryFault(
                HSA_STATUS_ERROR_MEMORY_FAULT,
                f"GPU memory fault at 0x{lost['address']:x} "
                f"(reason mask 0x{lost.get('reason', 0):x})", lost["address"])
        if (self.queue.error is not None or self._error_status is not None
                or self._fault is not None):
            self.failed = True
            self.reported = True
            err = self.error()
            assert err is not None  # each condition above gives error() a cause
            if lost is not None:
                lost.setdefault("report", self._lost_report(err))
            try:
                raise err
            finally:  # its traceback holds this frame: a local naming it would be a cycle
                del err

    def _lost_report(self, err: QueueError) -> str:
        """'memory fault at address 0x10 (kernel oob)': the fault a later DeviceLost names."""
        cause = err.__cause__
        text = fault_text(cause) if isinstance(cause, MemoryFault) else err.text
        text = text.split(";")[0]  # the fault, without its advice
        _pid, what = self._stop_site()
        return f"{text} in {what}" if what else text

    reported = False  # check() has raised this lane's error to the caller at least once

    # --- timeline ------------------------------------------------------------------------
    def completed(self) -> int:
        """The highest completed timeline value (reads the signal)."""
        if self.closed:  # its signal is gone, or about to go
            return self._completed
        value = TIMELINE_START - self.provider.signal_load(self.signal)
        if value > self._completed:
            self._completed = value
            self._release_proxies(value)
        return self._completed

    def wait(self, value: int, timeout: float = 10.0) -> None:
        """Block until `value` completed. SignalTimeout after `timeout`; QueueError if the
        lane stopped."""
        if value <= self._completed:
            return
        if value > self.submitted:
            raise SignalTimeout(
                HSA_STATUS_ERROR,
                f"lane {self.index} of {self.device.spec} has submitted only {self.submitted} "
                f"value(s), value {value} never comes: wait on a point that was submitted",
            )
        token = object()
        self.waiting.append(token)  # before check() sees `closed`: see close()
        try:
            self._wait(value, timeout)
        finally:
            self.waiting.remove(token)

    def _wait(self, value: int, timeout: float) -> None:
        compare = TIMELINE_START - value + 1
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.check()
                raise SignalTimeout(
                    HSA_STATUS_ERROR,
                    f"lane {self.index} of {self.device.spec} did not reach value {value} in "
                    f"{timeout} s (completed {self.completed()}): a kernel may hang or wait "
                    f"on a point that never completes",
                )
            try:
                self.provider.signal_wait(
                    self.signal, SignalCondition.LT, compare, min(remaining, WAIT_SLICE_S)
                )
            except SignalTimeout:
                continue
            except MemoryFault as fault:  # ROCr: the fault handler saw it first
                self._fault = fault
                self.check()
            if self.completed() >= value:
                return

    # --- cross-lane waits ----------------------------------------------------------------
    def wait_packets(self, points: Sequence[Any], value: int) -> np.ndarray | None:
        """prepare_waits, its proxies held until this lane reaches `value` (single-threaded
        callers; a submission under the lane lock prepares first, then holds)."""
        pre, proxies = self.prepare_waits(points)
        if proxies:
            self.hold_proxies(value, proxies)
        return pre

    def hold_proxies(self, value: int, proxies: list[int]) -> None:
        """Keep proxy signals until this lane's timeline passes `value` (the submission
        their wait packets start)."""
        with self._proxy_lock:
            self._held_proxies.append((value, proxies))

    def prepare_waits(self, points: Sequence[Any]) -> tuple[np.ndarray | None, list[int]]:
        """Barrier packets that make this lane wait for `points` (other lanes, same
        provider), and the proxy signals they wait on (for hold_proxies); points on this
        lane or already complete need none. Points from another provider (a Vulkan device)
        are waited for on the host. Call it without holding this lane's lock."""
        dev = self.device
        value_waits: list[tuple[int, int]] = []
        proxies: list[int] = []
        for point in points:
            lane = getattr(point, "timeline", None)
            if lane is self:
                continue  # a lane is in order
            if not isinstance(lane, QueueLane) or lane.provider is not self.provider:
                point.wait(dev.default_timeout)  # another backend or system: host wait
                continue
            if point.value <= lane._completed or lane.completed() >= point.value:
                continue
            lane.check()
            if dev.use_barrier_value:
                value_waits.append((lane.signal, TIMELINE_START - point.value + 1))
            else:
                proxies.append(lane.proxy_after())
        if not value_waits and not proxies:
            return None, proxies
        blocks = []
        if value_waits:
            sig, cmp = zip(*value_waits, strict=False)
            blocks.append(
                packets.barrier_value_batch(
                    signal=np.array(sig, np.uint64),
                    value=np.array(cmp, np.int64),
                    mask=-1,
                    cond=packets.BarrierValueCondition.LT,
                    barrier=True,
                )
            )
        for i in range(0, len(proxies), MAX_DEPS):
            deps = proxies[i : i + MAX_DEPS]
            blocks.append(packets.barrier_and_batch(dep_signals=deps, barrier=True, count=1))
        return np.concatenate([b.view(packets.PACKET) for b in blocks]), proxies

    def proxy_after(self) -> int:
        """A pool signal that reaches 0 once everything submitted on this lane so far is
        complete: a barrier-AND (barrier bit, no deps) carrying it as completion signal."""
        sig = self.device.signal_pool.take(1)
        with self.lock:
            self.publish(packets.barrier_and(dep_signals=(), completion_signal=sig, barrier=True))
        return sig

    def _release_proxies(self, value: int) -> None:
        with self._proxy_lock:
            held = self._held_proxies
            while held and held[0][0] <= value:
                self.device.signal_pool.give(held.pop(0)[1])

    # --- publishing ----------------------------------------------------------------------
    def dispatcher(self, size: int, words: memoryview, header: int) -> Any:
        """The untraced immediate-dispatch step of one launch (HsaKernel.launch keeps it
        in the launch plan): `publish(data)` takes the lane's lock, the timeline value, a
        kernarg block of `size` bytes and stores `data` into it, patches the packet
        template (`words`) with its address, publishes the template with `header`, counts
        the submission, and returns its timeline value: the Lane's publisher (a compiled
        Publisher, hotpath.c's lane_submit; or PythonLane's closure)."""
        return self.aql.publisher(size, words, header)

    def publish(self, packet: Any, kernarg: bytes | None = None,
                symbol: str | None = None) -> int:
        """One ready packet (a barrier; a dispatch whose trace record carries `kernarg` and
        `symbol`): its first id. Under the caller's hold of the lane's lock, or as another
        producer (a test's gate: the write index is multi-producer safe)."""
        if type(packet) is not bytes:
            packet = packets.packet_bytes(packet)
        sink = _TRACE.sink
        if sink is None:
            return self.aql.submit_block(packet)
        idx, t_reserve, t_publish, t_doorbell = self.aql.submit_timed(packet)
        sink.record_packet(self.queue.id, idx, t_reserve, t_publish, t_doorbell, packet,
                           kernarg, symbol)
        return idx

    def publish_block(self, block: Any, headers: Any = None, record: Any = None,
                      record_args: tuple = ()) -> int:
        """Publish a packet block (chunked if it exceeds the ring) and ring the doorbell;
        returns the first packet's id (the chunks are consecutive: the caller holds the
        lane's lock). `headers`: the header words, apart, when `block` holds INVALID
        headers (a command buffer's reused block; see packets.Ring.publish_many). While a
        trace sink is active the block is recorded (`record(queue_id, first, reserve_ns,
        publish_ns, doorbell_ns, *record_args)` where given: packets.ring.record_published)."""
        n = len(block) >> 6 if isinstance(block, (bytes, bytearray)) else len(block)
        if headers is not None and not isinstance(headers, np.ndarray):
            headers = np.asarray(headers, np.uint32)
        size = self.queue.size
        if n > size:
            step = size // 2
            first = -1
            for i in range(0, n, step):
                chunk = block[i : i + step]
                if headers is not None and i:  # each chunk's first header INVALID in it
                    chunk = chunk.copy()
                    chunk.view(np.uint32).reshape(len(chunk), 16)[0, 0] = packets.INVALID_HEADER
                idx = self.publish_block(chunk, None if headers is None else headers[i : i + step])
                first = idx if first < 0 else first
            return first
        sink = _TRACE.sink
        if sink is None:
            return self.aql.submit_block(block, None, headers)
        idx, *times = self.aql.submit_timed(block, None, headers)
        packets.ring.record_published(sink, self.queue.id, idx, times,
                                      packets.ring.block_view(block), headers, record,
                                      record_args)
        return idx

    def destroy(self) -> None:
        p = self.provider
        for call in (
            lambda: p.queue_destroy(self.queue),
            lambda: p.signal_destroy(self.signal),
            lambda: p.memory_pool_free(self.kernarg_address),
        ):
            try:
                call()
            except HsaError:
                pass
