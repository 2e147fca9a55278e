"""AQL queues of the virtual AMD system and their packet processor.

A queue is an amd_queue_t (256 bytes: hsa_queue_t, write_dispatch_id@56,
read_dispatch_id@128) and a ring of `size` 64-byte slots, both in the memory map, every slot
starting INVALID. The packet processor is one thread per queue, started by the first
doorbell (so creating and destroying a queue costs no thread). It works like the command
processor: take the packet at the read index once the doorbell covers it and its header is
no longer INVALID, run it, record timestamps, set the slot back to INVALID, advance the read
index, then decrement the completion signal through the signal table so waiters wake.

A bad packet, an unsupported packet, or a fault in the ISA executor puts the queue in its
error state: `queue.error` holds the exception, the error callback gets (status, queue),
processing stops, and waiters on the signals of the unfinished packets are woken (their
waits then time out normally, with the queue error quoted in the timeout message).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import packets
from ground.errors import HsaError, PacketError, QueueError, without_frames
from ground.status import (
    HSA_STATUS_ERROR,
    HSA_STATUS_ERROR_EXCEPTION,
    HSA_STATUS_ERROR_INVALID_ISA,
    HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
)
from hsa.provider import Queue
from hsa.virtual import executor as executor_registry
from hsa.virtual.agents import Agent
from hsa.virtual.executor import Dispatch
from hsa.virtual.memory import Allocation
from hsa.virtual.pm4 import Pm4Processor, Pm4Stopped
from hsa.virtual.signals import W_END_TS, W_START_TS, W_VALUE, SignalTable, condition_holds
from packets import AmdVendorFormat, PacketType
from packets import pm4 as pm4_packets

log = logging.getLogger(__name__)

AMD_QUEUE_BYTES = 256
# int64/uint64 word indices in amd_queue_t
_W_BASE, _W_DOORBELL, _W_ID, _W_WRITE, _W_READ = 1, 2, 4, 7, 16

# packet types (hsa.h) and the AMD vendor format of BARRIER_VALUE (hsa_ext_amd.h), as plain
# ints for the hot path
VENDOR_SPECIFIC = int(PacketType.VENDOR_SPECIFIC)
INVALID = int(PacketType.INVALID)
KERNEL_DISPATCH = int(PacketType.KERNEL_DISPATCH)
BARRIER_AND = int(PacketType.BARRIER_AND)
AGENT_DISPATCH = int(PacketType.AGENT_DISPATCH)
BARRIER_OR = int(PacketType.BARRIER_OR)
AMD_BARRIER_VALUE = int(AmdVendorFormat.BARRIER_VALUE)
AMD_EXT_KERNEL_DISPATCH = int(AmdVendorFormat.EXT_KERNEL_DISPATCH)
AMD_PM4_IB = pm4_packets.AMD_AQL_FORMAT_PM4_IB  # ROCr's AMD_AQL_FORMAT_PM4_IB
_TYPE_NAMES = {int(t): t.name for t in PacketType}
_M16, _M32, _M64 = 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF
# CPython 3.10+ with a GIL: see VirtualQueue's write-index methods (3.13t may run without
# one; before 3.10 the interpreter could switch threads between any two instructions)
_GIL_ATOMIC = sys.version_info >= (3, 10) and getattr(sys, "_is_gil_enabled", lambda: True)()

# A queue's doorbell flag word (VirtualQueue.flags, 8 bytes): one byte per state that takes
# a doorbell off its lock-free path, each byte written alone (a one-byte store: threads
# setting different states never race on a read-modify-write), so that the doorbell (this
# module's, and the compiled one of amdgpu.hsa_backend) reads them all in ONE load of bytes
# 0..3 instead of five attributes. Bytes 0 and 1 are kept by the signal table (the doorbell
# signal has waiters / a note: SignalTable.watch); FLAG_WAKE is the processor's.
FLAG_DESTROYED, FLAG_ERROR, FLAG_WAKE = 2, 3, 4
FLAG_BYTES = 8  # (signals.FLAG_WAITERS, FLAG_NOTE are bytes 0 and 1)


@dataclass(frozen=True)
class DeviceSide:
    """What a queue and its packet processor work with, passed in by whoever builds them
    (the virtual provider, the emulated driver) rather than read from its private fields:
    the signal table, the memory the packets and kernels address, the kernel behind a
    kernel_object (name, and symbol for the kernarg alignment; None when unknown), how
    dispatches without the barrier bit run ("reverse", else in order), and where interrupts
    of PM4 run through PM4_IB packets go (hsa.virtual.pm4.Interrupt; None: dropped)."""

    signals: Any  # SignalTable (or the emulated driver's RocrSignals)
    memory: Any  # MemoryMap (or ThunkMemory)
    kernel_name: Callable[[int], str]
    kernel_symbol: Callable[[int], Any]
    overlap: str | None = None
    interrupt: Callable[[Any], None] | None = None


class VirtualQueue(Queue):
    """An AQL queue whose ring and indices live in the virtual system's memory."""

    def __init__(
        self,
        side: DeviceSide,
        agent: Agent,
        size: int,
        queue_id: int,
        struct: Allocation,
        ring: Allocation,
        doorbell_signal: int,
        queue_type: int,
        callback: Callable[[int, Queue], None] | None,
    ) -> None:
        self.handle = struct.base
        self.base_address = ring.base
        self.size = size
        self.id = queue_id
        self.doorbell_signal = doorbell_signal
        self.ring = ring.data
        self.agent = agent.info.handle
        self.queue_type = queue_type
        self.profiling = False
        self._struct = struct
        self._ring_alloc = ring
        # memoryviews, not numpy, for the index words: scalar access is ~5x cheaper
        self._words = memoryview(struct.data).cast("Q")
        self._index_lock = threading.Lock()  # write-index updates without the GIL
        self._error: BaseException | None = None
        self._callback = callback
        # the doorbell's flag word (see FLAG_DESTROYED): bytes 0..3 as one u32, any bit set
        # sends a doorbell to the locked path
        self.flags = bytearray(FLAG_BYTES)
        self._unusual = memoryview(self.flags)[:4].cast("I")
        w = self._words
        w[0] = queue_type | (1 << 32)  # type, features = KERNEL_DISPATCH
        w[_W_BASE] = ring.base
        w[_W_DOORBELL] = doorbell_signal
        w[3] = size  # size u32@24, reserved@28
        w[_W_ID] = queue_id
        ring.data.view(np.uint16)[::32] = INVALID  # every slot's header INVALID
        self.processor = PacketProcessor(side, agent, self, flags=self.flags)
        self._signals = side.signals
        # The doorbell signal's record and value word, for the lock-free doorbell path; its
        # waiters and note go into the flag word.
        self._bell = self._signals.signal(doorbell_signal)
        self._signals.watch(doorbell_signal, self.flags)
        self._bell_words = self._bell.words
        self._bell_value = self._bell.base + W_VALUE

    # --- indices (amd_queue_t write_dispatch_id / read_dispatch_id) -----------------------
    def load_write_index(self) -> int:
        return int(self._words[_W_WRITE])

    # Several producers may reserve at once, so each update of the write index is one
    # atomic read-modify-write. With the GIL, CPython (3.10+) switches threads only at
    # function entry, calls and backward jumps: a body that loads the word, computes with
    # int operators and forward branches only, and stores it, is atomic without a lock
    # (the lock would cost more than the update). Without the GIL a lock does it.
    def _add_write_index_gil(self, n: int) -> int:
        if n.__class__ is not int:
            n = int(n)  # (a call: before the load)
        words = self._words
        old = words[_W_WRITE]
        new = old + n
        if new > _M64 or new < 0:
            new &= _M64
        words[_W_WRITE] = new
        return old

    def _cas_write_index_gil(self, expected: int, value: int) -> int:
        value = int(value) & _M64
        words = self._words
        old = words[_W_WRITE]
        if old == expected:
            words[_W_WRITE] = value
        return old

    def _add_write_index_locked(self, n: int) -> int:
        n = int(n)
        with self._index_lock:
            old = self._words[_W_WRITE]
            self._words[_W_WRITE] = (old + n) & _M64
            return old

    def _cas_write_index_locked(self, expected: int, value: int) -> int:
        value = int(value) & _M64
        with self._index_lock:
            old = self._words[_W_WRITE]
            if old == expected:
                self._words[_W_WRITE] = value
            return old

    if _GIL_ATOMIC:
        add_write_index = _add_write_index_gil
        cas_write_index = _cas_write_index_gil
    else:
        add_write_index = _add_write_index_locked
        cas_write_index = _cas_write_index_locked

    def store_write_index(self, value: int) -> None:
        self._words[_W_WRITE] = int(value) & _M64  # one store: atomic either way

    def load_read_index(self) -> int:
        return int(self._words[_W_READ])

    @property
    def destroyed(self) -> bool:
        """hsa_queue_destroy ran (set by the provider): doorbells take the locked path."""
        return bool(self.flags[FLAG_DESTROYED])

    @destroyed.setter
    def destroyed(self, value: bool) -> None:
        self.flags[FLAG_DESTROYED] = 1 if value else 0

    def _store_read_index(self, value: int) -> None:
        self._words[_W_READ] = value

    def doorbell(self, packet_id: int) -> None:
        """Store `packet_id` into the doorbell signal (hsa_signal_store_relaxed).

        The common case takes no lock: the value goes into the signal's memory, the
        processor's highest rung id is raised with one atomic C call, and the processor is
        woken only if it sleeps (or has not started). Anything unusual (a waiter on the
        doorbell signal itself, a note, a failed or destroyed queue, a value outside int64)
        takes the signal table's locked path, hook included: all four are bytes of the
        flag word, read here in one load."""
        if packet_id.__class__ is not int:
            packet_id = int(packet_id)
        if self._unusual[0]:
            self._signals.store(self.doorbell_signal, packet_id)
            if self._error is not None:  # packets rung after the failure: say why they wait
                self.processor.annotate_pending()
            return
        try:
            self._bell_words[self._bell_value] = packet_id
        except (OverflowError, ValueError):
            self._signals.store(self.doorbell_signal, packet_id)
            return
        proc = self.processor
        raise_rung(proc._rung, packet_id)
        if self.flags[FLAG_WAKE]:  # read after the rung is raised (see PacketProcessor)
            proc.wake()

    def native_ops(self) -> dict[str, Any] | None:
        """What a compiled producer (amdgpu.hsa_backend's hot path) needs to do
        add_write_index(1) and doorbell()'s common case itself, on the same memory and
        objects as the two methods above: the write-index and doorbell words (buffers and
        byte offsets; the read index's offset in the write index's words, for the room
        check), the flag word (`flags`: bytes 0..3 zero for the lock-free path,
        FLAG_WAKE for a wake; `flag_unusual_bytes`, `flag_wake`: their offsets), the
        processor (its `wake`) and its rung word (an int64 raised to max(rung, id) under
        the GIL, as raise_rung does). None where the write index is not GIL-atomic (a
        free-threaded Python): then it calls the methods."""
        if not _GIL_ATOMIC:
            return None
        proc = self.processor
        return {
            "index_words": self._words, "index_offset": _W_WRITE * 8,
            "read_offset": _W_READ * 8,  # the read index, in the same words: room checks
            "bell_words": self._bell_words, "bell_offset": self._bell_value * 8,
            "queue": self, "flags": self.flags, "flag_unusual_bytes": 4, "flag_wake": FLAG_WAKE,
            "processor": proc, "rung": proc._rung,
        }

    @property
    def error(self) -> BaseException | None:
        return self._error

    @error.setter
    def error(self, exc: BaseException) -> None:
        """The packet processor's failure: kept, and doorbells take the locked path (which
        notes the failure on the packets rung after it)."""
        self._error = exc
        self.flags[FLAG_ERROR] = 1

    def __repr__(self) -> str:
        state = "error" if self._error else ("destroyed" if self.destroyed else "ok")
        return f"<VirtualQueue id={self.id} size={self.size} at 0x{self.handle:x} {state}>"


class _Stopped(Exception):
    """The queue is being destroyed: leave the processor loop."""


class PacketProcessor:
    """The per-queue thread that consumes AQL packets."""

    # A misaligned kernarg_address is refused (the HSA ABI's 16 bytes): the project's own
    # packet builders must not make one. The emulated kernel's queues play the hardware CP,
    # which does not check (tinygrad's 8-byte-aligned kernargs run on real GPUs).
    check_kernarg_alignment = True

    def __init__(self, side: DeviceSide, agent: Agent, queue: Any,
                 executor: Any = None, flags: bytearray | None = None) -> None:
        """`executor`: the ISA executor to run kernels on; None: the family's shared one
        (hsa.virtual.executor.executor_for), at the first dispatch. `flags`: the queue's
        doorbell flag word, whose FLAG_WAKE byte this processor keeps (None: a word of its
        own, for a queue without one)."""
        self.side = side
        self.memory = side.memory
        self.agent = agent
        self.queue = queue
        self.signals: SignalTable = side.signals
        self.cv = threading.Condition(self.signals.lock)
        # The highest packet id rung so far, an int64 word: doorbells raise it with
        # raise_rung (one step under the GIL), so concurrent doorbells never lower it (a
        # lost update would strand packets); compiled producers raise the same word.
        self._rung = memoryview(bytearray(8)).cast("q")
        self._rung[0] = -1
        # FLAG_WAKE: set while the thread sleeps for a doorbell or has not started: only
        # then does a doorbell take the lock to wake it. The thread sets it (under the lock)
        # before its last look at `_rung`, and a doorbell raises `_rung` before it reads the
        # flag, so one of the two always sees the other.
        self._flags = flags if flags is not None else bytearray(FLAG_BYTES)
        self._flags[FLAG_WAKE] = 1
        self._read = 0
        self._stop = False
        self._failed = False
        self._failure_note = ""
        self._thread: threading.Thread | None = None
        self._executor: Any = executor
        self._pm4: Pm4Processor | None = None  # this queue's PM4 register state, on first use
        self._ring64 = memoryview(queue.ring).cast("Q")
        self._ring16 = memoryview(queue.ring).cast("H")
        self._mask = queue.size - 1

    @property
    def _doorbell(self) -> int:
        """The highest packet id rung so far (-1: none)."""
        return self._rung[0]

    @property
    def needs_wake(self) -> bool:
        """The thread sleeps for a doorbell or has not started: a doorbell must wake it."""
        return bool(self._flags[FLAG_WAKE])

    # --- control -------------------------------------------------------------------------
    def on_doorbell(self, value: int) -> None:
        """The doorbell signal's store hook (a store through the signal table): called with
        the signal-table lock held."""
        raise_rung(self._rung, value)
        if self._flags[FLAG_WAKE]:
            self._wake_locked()

    def ring(self, value: int) -> None:
        """A doorbell up to packet `value` from outside the signal table (a queue whose
        doorbell is not one of its signals): the rung raised, the thread woken if it
        sleeps."""
        raise_rung(self._rung, value)
        if self._flags[FLAG_WAKE]:  # after the raise (see FLAG_WAKE)
            self.wake()

    def wake(self) -> None:
        """Start or wake the thread after a doorbell (takes the signal-table lock)."""
        with self.signals.lock:
            self._wake_locked()

    def _wake_locked(self) -> None:
        if self._stop:
            self._flags[FLAG_WAKE] = 0  # nobody to wake any more: doorbells stay lock-free
            return
        if self._thread is None:
            self._flags[FLAG_WAKE] = 0
            self._thread = threading.Thread(
                target=self._run, name=f"virtual-aql-queue-{self.queue.id}", daemon=True
            )
            self._thread.start()
        self.cv.notify()

    def stop(self, join_timeout_s: float = 10.0) -> None:
        with self.signals.lock:
            self._stop = True
            self._flags[FLAG_WAKE] = 0
            self.cv.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(join_timeout_s)
            if t.is_alive():
                log.warning("queue %d: processor still busy after %.0f s (a long kernel?); "
                            "left to finish as a daemon thread", self.queue.id, join_timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _stopped(self) -> bool:
        return self._stop

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        rung = self._rung
        try:
            while True:
                if rung[0] < self._read:
                    with self.signals.lock:
                        # flag first, then the last look (see FLAG_WAKE)
                        self._flags[FLAG_WAKE] = 1
                        while not self._stop and rung[0] < self._read:
                            self.cv.wait()
                        self._flags[FLAG_WAKE] = 0
                        if self._stop:
                            return
                while self._read <= rung[0] and not self._stop:
                    self._process(self._read)
                if self._stop:
                    return
        except _Stopped:
            return
        except HsaError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug in the executor or here: still fail the queue
            log.exception("queue %d: internal error in the packet processor", self.queue.id)
            error = QueueError(
                HSA_STATUS_ERROR_EXCEPTION,
                f"queue {self.queue.id}: packet processor crashed at packet {self._read}: "
                f"{type(exc).__name__}: {exc}; report this as a bug in hsa.virtual",
            )
            error.__cause__ = exc
            self._fail(error)

    def _wait_for_header(self, slot: int) -> int:
        """The slot's 32-bit header|setup word, once it is no longer INVALID. Publishers do
        not notify header stores (only the doorbell), so poll with a growing sleep."""
        word = self._ring64[slot * 8] & _M32
        if word & 0xFF != INVALID:
            return word
        delay = 0.00005
        warn_at = time.monotonic() + 1.0
        while word & 0xFF == INVALID:
            if self._stop:
                raise _Stopped
            time.sleep(delay)
            delay = min(delay * 2, 0.005)
            word = self._ring64[slot * 8] & _M32
            if warn_at and time.monotonic() > warn_at:
                warn_at = 0
                log.warning(
                    "queue %d: the doorbell covers packet %d but its slot is still INVALID "
                    "after 1 s; ring the doorbell with the last packet id written (not the "
                    "write index), and write the header last", self.queue.id, self._read,
                )
        return word

    def _process(self, packet_id: int) -> None:
        slot = packet_id & self._mask
        self._wait_for_header(slot)
        words = self._ring64[slot * 8 : slot * 8 + 8].tolist()
        ptype = words[0] & 0xFF
        if ptype == KERNEL_DISPATCH and self.side.overlap == "reverse":
            group = self._overlap_group(packet_id, slot, words)
            if len(group) > 1:
                self._run_overlapped(group)
                return
        completion = words[7]
        profiling = self.queue.profiling and completion != 0
        sink = _active_sink()
        start = time.monotonic_ns() if profiling or sink is not None else 0
        self._execute(packet_id, slot, words)
        if profiling or sink is not None:
            end = time.monotonic_ns()
            if profiling:
                self._timestamps(completion, start, end)
            if sink is not None:  # packet-trace: when the virtual agent ran this packet
                sink.completion(self.queue.id, packet_id, start, end)
        self._retire(packet_id, slot, completion)

    def _execute(self, packet_id: int, slot: int, words: list[int]) -> None:
        ptype = words[0] & 0xFF
        if ptype == BARRIER_AND or ptype == BARRIER_OR:
            self._barrier(packet_id, ptype, words)
        elif ptype == KERNEL_DISPATCH:
            self._dispatch(packet_id, slot, words)
        elif ptype == VENDOR_SPECIFIC:
            amd_format = (words[0] >> 16) & 0xFF
            if amd_format == AMD_EXT_KERNEL_DISPATCH:
                self._ext_dispatch(packet_id, slot, words)
                return
            if amd_format == AMD_PM4_IB:
                self._pm4_ib(packet_id, words)
                return
            if amd_format != AMD_BARRIER_VALUE:
                raise self._bad_packet(
                    packet_id, words,
                    f"vendor-specific packet with AmdFormat {amd_format} (PM4_IB=1, "
                    "BARRIER_VALUE=2 and EXT_KERNEL_DISPATCH=3 are known)",
                )
            self._barrier_value(packet_id, words)
        elif ptype == AGENT_DISPATCH:
            raise self._bad_packet(
                packet_id, words,
                f"AGENT_DISPATCH packet on a queue of GPU agent {self.agent.info.name}, which "
                "runs only kernel-dispatch and barrier packets; send agent dispatches to a CPU "
                "agent queue",
            )
        else:
            raise self._bad_packet(packet_id, words, f"unknown packet type {ptype}")

    def _retire(self, packet_id: int, slot: int, completion: int) -> None:
        # Release the slot and advance the read index before signalling, so that a host
        # that wakes on the completion signal already sees room in the ring.
        self._ring16[slot * 32] = INVALID
        self._read = packet_id + 1
        self.queue._store_read_index(packet_id + 1)
        if completion:
            try:
                self.signals.add(completion, -1)
            except HsaError as exc:
                raise self._signal_error(
                    packet_id, "completion_signal", completion, exc
                ) from exc

    # --- overlap: dispatches without the barrier bit may run concurrently on hardware ----
    def _overlap_group(
        self, packet_id: int, slot: int, words: list[int]
    ) -> list[tuple[int, int, list[int]]]:
        """The dispatch at packet_id plus the published dispatches right after it whose
        barrier bit is clear: hardware may run all of them at once."""
        group = [(packet_id, slot, words)]
        pid = packet_id + 1
        while pid <= self._rung[0] and len(group) < self.queue.size:
            s = pid & self._mask
            w0 = int(self._ring64[s * 8])
            if w0 & 0xFF != KERNEL_DISPATCH or (w0 >> 8) & 1:
                break
            group.append((pid, s, self._ring64[s * 8 : s * 8 + 8].tolist()))
            pid += 1
        return group

    def _run_overlapped(self, group: list[tuple[int, int, list[int]]]) -> None:
        """Run the group last-first (the order a missing barrier bit can produce on
        hardware, made deterministic), then retire the packets in order."""
        times = {}
        for pid, slot, words in reversed(group):
            start = time.monotonic_ns()
            self._dispatch(pid, slot, words)
            times[pid] = (start, time.monotonic_ns())
        sink = _active_sink()
        for pid, slot, words in group:
            completion = words[7]
            if completion and self.queue.profiling:
                self._timestamps(completion, *times[pid])
            if sink is not None:
                sink.completion(self.queue.id, pid, *times[pid])
            self._retire(pid, slot, completion)

    # --- packet kinds --------------------------------------------------------------------
    def _barrier(self, packet_id: int, ptype: int, words: list[int]) -> None:
        live = [d for d in words[1:6] if d]
        if ptype == BARRIER_AND:  # hsa.h: a 0 handle is a satisfied dependency
            if live:
                self._wait_signals(packet_id, live, _all_zero, ptype)
        else:  # hsa.h: a 0 handle is a dependency never satisfied; with no live handle the
            # packet blocks its queue for good, as on hardware (until the queue is destroyed)
            self._wait_signals(packet_id, live, _any_zero, ptype)

    def _barrier_value(self, packet_id: int, words: list[int]) -> None:
        signal = words[1]
        value = _s64(words[2])
        mask = _s64(words[3])
        cond = words[4] & _M32
        if cond > 3:
            raise self._bad_packet(packet_id, words, f"BARRIER_VALUE condition {cond} (0..3)")
        if signal == 0:
            # no dependency: HIP 6's CLR sends these (signal 0, mask 0, EQ 0) as a plain
            # fence with a completion signal; the CP treats a null signal as satisfied, as
            # BARRIER_AND does its null dep_signals
            return

        def test(values: list[int]) -> bool | None:
            return True if condition_holds(values[0] & mask, cond, value) else None

        self._wait_signals(packet_id, [signal], test, VENDOR_SPECIFIC)

    def _wait_signals(
        self, packet_id: int, handles: list[int], test: Callable, ptype: int
    ) -> None:
        if not handles:  # nothing can ever satisfy it: sleep until destroyed
            with self.signals.lock:
                while not self._stop:
                    self.cv.wait()
            raise _Stopped
        try:
            result = self.signals.wait_until(
                handles, test, None, call=_TYPE_NAMES.get(ptype, "packet"),
                describe=lambda v: "", cv=self.cv, stop=self._stopped,
            )
        except HsaError as exc:
            bad = next((h for h in handles if not self.signals.exists(h)), 0)
            raise self._signal_error(packet_id, "dependency signal", bad, exc) from exc
        if result is None:
            raise _Stopped

    def _pm4_ib(self, packet_id: int, words: list[int]) -> None:
        """ROCr's PM4_IB vendor packet: the command processor runs the PM4 indirect buffer
        its INDIRECT_BUFFER jump names (hsa/virtual/pm4.py), with this queue's registers."""
        try:
            address, dwords = pm4_packets.parse_pm4_ib_aql_packet(_packet_bytes(words))
        except PacketError as exc:
            raise self._bad_packet(packet_id, words, str(exc)) from None
        proc = self._pm4
        if proc is None:
            info = self.agent.info
            proc = self._pm4 = Pm4Processor(
                self.memory, target=info.isa, agent=info.handle, interrupt=self.side.interrupt,
                label=f"queue {self.queue.id}", queue_address=self.queue.handle,
                lds_size=self.agent.lds_size, stop=self._stopped, overlap=self.side.overlap)
        proc.label = f"queue {self.queue.id} packet {packet_id}"
        try:
            proc.run_ib(address, dwords)
        except Pm4Stopped:
            raise _Stopped from None

    def _ext_dispatch(self, packet_id: int, slot: int, words: list[int]) -> None:
        """gfx1250's extended dispatch packet: ROCr's rules, then dep_signal (0: none) must
        reach 0, then the grid of cluster_count x cluster_size x workgroup_size runs."""
        if self.agent.info.isa.split(":")[0] != "gfx1250":
            raise self._bad_packet(
                packet_id, words,
                f"EXT_KERNEL_DISPATCH packet on a queue of {self.agent.info.isa} agent "
                f"{self.agent.info.name}; only gfx1250 runs it: use a classic "
                "KERNEL_DISPATCH packet",
            )
        pkt = packets.decode(_packet_bytes(words))
        xyz = "xyz"
        wg = tuple(pkt[f"workgroup_size_{d}"] for d in xyz)
        size = tuple(pkt[f"cluster_size_{d}"] for d in xyz)
        try:
            packets.ext_dispatch_check(pkt["setup"], wg,
                                       tuple(pkt[f"cluster_count_{d}"] for d in xyz), size,
                                       pkt["reserved0"])
        except PacketError as exc:
            raise self._bad_packet(packet_id, words, str(exc)) from None
        if pkt["dep_signal"]:
            self._wait_signals(packet_id, [pkt["dep_signal"]], _all_zero, VENDOR_SPECIFIC)
        self._dispatch(packet_id, slot, words, pkt, size)

    def _dispatch(self, packet_id: int, slot: int, words: list[int], pkt: dict | None = None,
                  cluster_size: tuple[int, int, int] = (1, 1, 1)) -> None:
        # Barriers take a fast path on raw words; a dispatch is decoded by the packets layer
        # (a few microseconds, small next to running the kernel).
        if pkt is None:
            pkt = packets.decode(_packet_bytes(words))
        dims = pkt["setup"] & 0x3
        wg = (pkt["workgroup_size_x"], pkt["workgroup_size_y"], pkt["workgroup_size_z"])
        grid = (pkt["grid_size_x"], pkt["grid_size_y"], pkt["grid_size_z"])
        private_size, group_size = pkt["private_segment_size"], pkt["group_segment_size"]
        kernel_object, kernarg = pkt["kernel_object"], pkt["kernarg_address"]
        problems = []
        if dims < 1:
            problems.append(f"setup dimensions {dims} (1..3)")
        else:
            for d in range(3):
                if d < dims and (wg[d] == 0 or grid[d] == 0):
                    problems.append(f"dimension {d} has workgroup {wg[d]} grid {grid[d]}")
                if d >= dims and (wg[d] != 1 or grid[d] != 1):
                    problems.append(
                        f"unused dimension {d} must have workgroup and grid size 1, "
                        f"has {wg[d]} and {grid[d]}"
                    )
        if wg[0] * wg[1] * wg[2] > 1024:
            problems.append(f"workgroup {wg[0]}x{wg[1]}x{wg[2]} exceeds 1024 work-items")
        if kernel_object == 0:
            problems.append("kernel_object is 0")
        lds = self.agent.lds_size
        if group_size > lds:
            problems.append(f"group_segment_size {group_size} exceeds the {lds}-byte LDS")
        if problems:
            raise self._bad_packet(packet_id, words, "; ".join(problems))

        memory = self.memory
        kd = memory.view(kernel_object, 64, self.agent.info.handle)  # faults like the CP
        kd_words = kd.view(np.uint32)
        fixed_group, fixed_private = int(kd_words[0]), int(kd_words[1])
        # The CP takes the wave size from the descriptor (kernel_code_properties bit 10,
        # gfx10+); gfx9 always runs wave64.
        if self.agent.family == "gfx9":
            wave = 64
        else:
            wave = 32 if (int(kd.view(np.uint16)[28]) >> 10) & 1 else 64
        name = self.side.kernel_name(kernel_object)
        symbol = self.side.kernel_symbol(kernel_object)
        align = max(16, symbol.kernarg_segment_alignment) if symbol else 16
        if kernarg % align and self.check_kernarg_alignment:
            raise self._bad_packet(
                packet_id, words,
                f"kernarg_address 0x{kernarg:x} of kernel {name} is not {align}-byte aligned "
                "(the kernarg segment alignment); allocate kernargs from the kernarg pool at "
                "that alignment",
            )
        if group_size < fixed_group or private_size < fixed_private:
            raise self._bad_packet(
                packet_id, words,
                f"kernel {name} needs group_segment_size >= {fixed_group} and "
                f"private_segment_size >= {fixed_private} (its symbol's sizes), the packet "
                f"gives {group_size} and {private_size}; copy them from the kernel symbol",
            )
        executor = self._executor
        if executor is None:
            family = self.agent.family
            try:
                executor = executor_registry.executor_for(family)
            except Exception as exc:  # a broken executor package: a queue error, not a crash
                raise QueueError(
                    HSA_STATUS_ERROR_INVALID_ISA,
                    f"queue {self.queue.id}: the {family} ISA executor failed to load "
                    f"({type(exc).__name__}: {exc}); fix hsa.virtual.{family}",
                ) from exc
            if executor is None:
                raise QueueError(
                    HSA_STATUS_ERROR_INVALID_ISA,
                    f"queue {self.queue.id}: no ISA executor for family {family} "
                    f"({self.agent.info.name}) to run kernel {name}; the virtual GPU runs "
                    f"{', '.join(executor_registry.supported_families()) or 'no family yet'}"
                    " kernels only: use a virtual GPU of one (amdgpu:virtual:gfx1100)",
                )
            self._executor = executor
        dispatch = Dispatch(
            packet_address=self.queue.base_address + slot * 64,
            queue_address=self.queue.handle,
            dispatch_id=packet_id,
            dims=dims,
            workgroup_size=wg,
            grid_size=grid,
            private_segment_size=private_size,
            group_segment_size=group_size,
            kernel_object=kernel_object,
            kernarg_address=kernarg,
            agent=self.agent.info.handle,
            target=self.agent.info.isa,
            wavefront_size=wave,
            kernel_name=name,
            cluster_size=cluster_size,
        )
        executor.run(dispatch, memory)

    # --- errors --------------------------------------------------------------------------
    def _bad_packet(self, packet_id: int, words: list[int], why: str) -> QueueError:
        return QueueError(
            HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
            f"queue {self.queue.id} packet {packet_id}: {why} [{_describe(words)}]; fix the "
            "packet builder, the queue is now in its error state",
        )

    def _signal_error(
        self, packet_id: int, what: str, handle: int, exc: HsaError
    ) -> QueueError:
        return QueueError(
            HSA_STATUS_ERROR_INVALID_SIGNAL,
            f"queue {self.queue.id} packet {packet_id}: {what} 0x{handle:x} is not a live "
            f"signal ({exc.text}); keep signals alive until their packets complete",
        )

    def _fail(self, exc: HsaError) -> None:
        queue = self.queue
        self._failed = True
        self._failure_note = f"queue {queue.id} stopped at packet {self._read}: {exc}"
        # kept without its frames: they hold this processor (a cycle through queue.error)
        # and the executor's wave state, megabytes a failed queue would keep
        queue.error = without_frames(exc)
        status = getattr(exc, "status", HSA_STATUS_ERROR)
        # The completion signals of the failed packet and of every packet published after it
        # will never be decremented: say so in the timeout of anyone waiting on them.
        self.annotate_pending()
        self.signals.wake_all()
        if queue._callback is not None:
            try:
                queue._callback(status, queue)
            except Exception:
                log.exception("queue %d: the error callback raised", queue.id)

    def annotate_pending(self) -> None:
        """After a failure: note it on the completion signals of every unconsumed packet."""
        if self._failure_note:
            self.signals.annotate(self.pending_completion_signals(), self._failure_note)

    def pending_completion_signals(self) -> list[int]:
        """Completion signals of the packets written but not consumed."""
        pending = []
        write = self.queue.load_write_index()
        for pid in range(self._read, min(write, self._read + self.queue.size)):
            s = self._ring64[(pid & self._mask) * 8 + 7]
            if s:
                pending.append(s)
        return pending

    def _timestamps(self, completion: int, start: int, end: int) -> None:
        try:
            self.signals.set_word(completion, W_START_TS, start)
            self.signals.set_word(completion, W_END_TS, end)
        except HsaError:
            pass  # reported when the completion signal is decremented


_active_sink = packets.trace.active_sink
_I64_MAX = (1 << 63) - 1
_RUNG_LOCK = threading.Lock()  # raise_rung without the GIL


def _raise_rung_gil(rung: memoryview, value: int) -> None:
    if value > _I64_MAX:
        value = _I64_MAX
    if value > rung[0]:  # load, compare, store: no call or backward jump between them
        rung[0] = value


def _raise_rung_locked(rung: memoryview, value: int) -> None:
    with _RUNG_LOCK:
        _raise_rung_gil(rung, value)


# raise_rung(rung, id): rung[0] = max(rung[0], id), atomically: under the GIL the body runs
# without a thread switch (as VirtualQueue's write-index methods), else under a lock
raise_rung = _raise_rung_gil if _GIL_ATOMIC else _raise_rung_locked


def _all_zero(values: list[int]) -> bool | None:
    return True if all(v == 0 for v in values) else None


def _any_zero(values: list[int]) -> bool | None:
    return True if any(v == 0 for v in values) else None


def _s64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _packet_bytes(words: list[int]) -> bytes:
    return b"".join(int(w).to_bytes(8, "little") for w in words)


def _describe(words: list[int]) -> str:
    raw = _packet_bytes(words)
    try:
        return packets.format_packet(raw)
    except Exception:  # a packet too broken to format: show its bytes
        header = words[0] & _M16
        return f"header 0x{header:04x} ({_TYPE_NAMES.get(header & 0xFF, 'unknown')}) " + \
            raw.hex()
