"""The emulated AMD kernel driver: our libhsakmt.so.1 under the real ROCr, and its GPU.

`start()` loads build/emulated/libhsakmt.so.1 with RTLD_GLOBAL before libhsa-runtime64 is
loaded, so the dynamic linker binds ROCr's 42 hsaKmt* imports (SONAME libhsakmt.so.1,
version HSAKMT_1) to it, and starts the device side: one Python thread that waits in
`hsakmt_emu_poll` (C, off the GIL) for queue creations, doorbell writes and queue
destructions. Each AQL queue ROCr creates gets hsa/virtual's own `PacketProcessor` over
ROCr's ring and amd_queue_t, with two adapters: `RocrSignals` (ROCr's amd_signal_t: value
@8, the CP's end-of-packet event through event_mailbox_ptr @16 / event_id @24) and
`ThunkMemory` (the thunk's allocations as the MemoryMap the ISA executors read).

A queue error goes where the CP puts it: an error code in the queue's
`queue_inactive_signal` (amd_queue_t @192), whose event wakes ROCr's handler, which calls
the user's queue callback; a memory fault also fires the VM-fault event.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ground.errors import HsaError, HsaUnavailable, MemoryFault
from ground.status import (
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
    HSA_STATUS_ERROR_NOT_INITIALIZED,
)
from hsa.provider import AgentInfo, DeviceType
from hsa.virtual.memory import Allocation, MemoryMap
from hsa.virtual.queues import DeviceSide, PacketProcessor

from . import build

log = logging.getLogger(__name__)

IDENTITY = b"amdgpu-direct emulated libhsakmt 2"
DEFAULT_ISA = "gfx90a"
SUPPORTED_ISAS = ("gfx90a",)  # ROCr 5.2 takes gfx9/gfx10 nodes; the executor is gfx9's
NEXT_STEP = "use --device amdgpu:virtual instead"
MAX_GPUS = 16  # GPU nodes the thunk exposes at most (hsakmt_emu.c's MAX_GPUS)
GPUS_ENV = "AMDGPU_EMULATED_GPUS"  # the thunk reads the GPU node count from it at OpenKFD

# amd_queue_t and amd_signal_t offsets (hsa/amd_hsa_queue.h, amd_hsa_signal.h)
Q_SIZE, Q_READ, Q_PROPERTIES, Q_INACTIVE_SIGNAL = 24, 128, 180, 192
Q_ID = 32  # hsa_queue_t.id (u64): ROCr's queue id, what hsa_queue_t users and traces see
PROFILING_BIT = 1 << 3  # AMD_QUEUE_PROPERTIES_ENABLE_PROFILING
S_VALUE, S_MAILBOX, S_EVENT_ID = 8, 16, 24
# queue_inactive_signal codes ROCr maps to HSA statuses (KFD's exception bits)
ERROR_CODES = {
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: 0x20000000,
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: 0x40000000,
}
ERROR_INVALID_PACKET = 32  # everything else: ROCr reports INVALID_PACKET_FORMAT


class _Note(ctypes.Structure):
    _fields_ = [
        ("queue_id", ctypes.c_uint64),
        ("kind", ctypes.c_uint64),
        ("value", ctypes.c_int64),
        ("ring", ctypes.c_uint64),
        ("ring_bytes", ctypes.c_uint64),
        ("read_ptr", ctypes.c_uint64),
        ("write_ptr", ctypes.c_uint64),
        ("node", ctypes.c_uint64),
    ]


NOTE_NEW, NOTE_DOORBELL, NOTE_DESTROY = 1, 2, 3


def _unavailable(why: str) -> HsaUnavailable:
    return HsaUnavailable(HSA_STATUS_ERROR_NOT_INITIALIZED, f"{why}; {NEXT_STEP}", "emulated")


# --- ELF: does a ROCr link libhsakmt dynamically? ---------------------------------------
def needed_libraries(path: str) -> list[str] | None:
    """DT_NEEDED entries of an ELF64 little-endian shared object (None if unreadable)."""
    import struct

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _flags, off, vaddr, _paddr, filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((vaddr, off, filesz))
        elif p_type == 2:
            dynamic = (off, filesz)
    if dynamic is None:
        return None

    def file_offset(vaddr: int) -> int:
        for v, off, size in loads:
            if v <= vaddr < v + size:
                return vaddr - v + off
        return -1

    needed, strtab = [], 0
    off, size = dynamic
    for j in range(0, size, 16):
        tag, val = struct.unpack_from("<qQ", data, off + j)
        if tag == 0:
            break
        if tag == 1:
            needed.append(val)
        elif tag == 5:
            strtab = file_offset(val)
    if strtab < 0:
        return None
    names = []
    for n in needed:
        end = data.index(b"\0", strtab + n)
        names.append(data[strtab + n : end].decode(errors="replace"))
    return names


def check_rocr_links_thunk(rocr_path: str) -> None:
    """ROCm 6.3+ links the thunk into libhsa-runtime64: our libhsakmt cannot stand in."""
    needed = needed_libraries(rocr_path)
    if needed is not None and not any(n.startswith("libhsakmt.so") for n in needed):
        raise _unavailable(
            f"{rocr_path} links the thunk statically (ROCm 6.3 or later), so the emulated "
            "driver's libhsakmt.so.1 cannot stand in for /dev/kfd; point HSA_RUNTIME_PATH at "
            "a ROCr with a separate libhsakmt (Debian's libhsa-runtime64-1 5.2.3)"
        )


def _loaded_objects() -> list[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return sorted({line.split()[-1] for line in f if "/" in line})
    except OSError:
        return []


# --- the device side's view of ROCr's signals and memory --------------------------------
class RocrSignals:
    """What PacketProcessor needs of a signal table, over ROCr's amd_signal_t objects."""

    def __init__(self, lib: ctypes.CDLL, memory: ThunkMemory) -> None:
        self.lock = threading.Lock()
        self._lib = lib
        self._memory = memory
        self._add = lib.hsakmt_emu_atomic_add
        self._load = lib.hsakmt_emu_load
        self._store = lib.hsakmt_emu_store
        self._interrupt = lib.hsakmt_emu_interrupt

    def exists(self, handle: int) -> bool:
        return handle != 0 and self._memory.holds(handle, 64)

    def _check(self, handle: int, call: str) -> None:
        if not self.exists(handle):
            raise HsaError(HSA_STATUS_ERROR_INVALID_SIGNAL,
                           f"0x{handle:x} is not in any allocation of the emulated driver", call)

    def value(self, handle: int) -> int:
        return self._load(handle + S_VALUE)

    def _fire(self, handle: int) -> None:
        """The CP's end-of-packet interrupt: event id into the mailbox, then the event."""
        mailbox = ctypes.c_uint64.from_address(handle + S_MAILBOX).value
        if mailbox:
            event_id = ctypes.c_uint32.from_address(handle + S_EVENT_ID).value
            self._store(mailbox, event_id)
            self._interrupt(event_id)

    def add(self, handle: int, delta: int) -> None:
        self._check(handle, "signal add")
        self._add(handle + S_VALUE, delta)
        self._fire(handle)

    def store(self, handle: int, value: int) -> None:
        self._check(handle, "signal store")
        self._store(handle + S_VALUE, value)
        self._fire(handle)

    def set_word(self, handle: int, word: int, value: int) -> None:
        self._check(handle, "signal timestamp")
        ctypes.c_uint64.from_address(handle + 8 * word).value = value & (2**64 - 1)

    def wait_until(
        self,
        handles: Sequence[int],
        test: Callable[[list[int]], object],
        timeout_s: float | None,
        *,
        call: str,
        describe: Callable[[list[int]], str],
        cv: threading.Condition | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> object:
        """Poll the signals' values (ROCr writes them without telling anyone) with a
        growing sleep, until test() answers, stop() is true or the deadline passes."""
        for h in handles:
            self._check(h, call)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 20e-6
        addresses = [h + S_VALUE for h in handles]
        load = self._load
        while True:
            result = test([load(a) for a in addresses])
            if result is not None:
                return result
            if stop is not None and stop():
                return None
            if deadline is not None and time.monotonic() > deadline:
                raise HsaError(HSA_STATUS_ERROR_INVALID_SIGNAL, f"{call}: timed out", call)
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    # failure bookkeeping of the virtual table: ROCr keeps its own waiters
    def annotate(self, handles: Sequence[int], note: str) -> None:
        pass

    def wake_all(self) -> None:
        pass


class ThunkMemory(MemoryMap):
    """The thunk's allocations as a MemoryMap: each is adopted on first access (a numpy
    view of its real address), and the index is dropped whenever the thunk frees one or
    changes its mapping. With several GPU nodes an allocation is reachable by the agents
    (GPU node numbers) it is mapped to (hsaKmtMapMemoryToGPUNodes: the owner at allocation,
    peers after hsa_amd_agents_allow_access), so a peer access without it faults as on
    KFD; with one GPU every allocation is reachable, as before."""

    def __init__(self, lib: ctypes.CDLL, agent: int) -> None:
        super().__init__()
        self._lib = lib
        self._agent = agent
        self._generation = lib.hsakmt_emu_generation()

    def _sync(self) -> None:
        generation = self._lib.hsakmt_emu_generation()
        if generation != self._generation:
            with self._lock:
                self._index = ([], [])
                self._generation = generation

    def _adopt(self, address: int) -> Allocation | None:
        base, size, node = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint32()
        mapped = ctypes.c_uint32()
        if not self._lib.hsakmt_emu_find(address, ctypes.byref(base), ctypes.byref(size),
                                         ctypes.byref(node), ctypes.byref(mapped)):
            return None
        import bisect

        data = np.ctypeslib.as_array((ctypes.c_uint8 * size.value).from_address(base.value))
        several = self._lib.hsakmt_emu_gpu_count() > 1
        allowed = {n for n in range(1, MAX_GPUS + 1) if mapped.value >> n & 1}
        alloc = Allocation(base=base.value, size=size.value, data=data, owner=int(node.value),
                           pool=0, allowed=allowed, accessible_by_all=not several)
        with self._lock:
            bases, allocs = self._index
            i = bisect.bisect_left(bases, alloc.base)
            if i < len(bases) and bases[i] == alloc.base:
                return allocs[i]
            self._index = (bases[:i] + [alloc.base] + bases[i:], allocs[:i] + [alloc] + allocs[i:])
        return alloc

    def holds(self, address: int, size: int = 1) -> bool:
        try:
            self.find(address, size)
            return True
        except MemoryFault:
            return False

    def find(self, address: int, size: int = 1, agent: int | None = None) -> Allocation:
        self._sync()
        try:
            return super().find(address, size, agent)
        except MemoryFault:
            if self._adopt(address) is None:
                raise
            return super().find(address, size, agent)

    def _try_find(self, address: int) -> Allocation | None:
        self._sync()
        return super()._try_find(address) or self._adopt(address)


# --- queues -----------------------------------------------------------------------------
class EmulatedPacketProcessor(PacketProcessor):
    """hsa/virtual's packet processor over ROCr's queues. The one packet ROCr sends that the
    virtual system's own driver never does, the vendor-specific PM4-IB packet of
    hsa_executable_freeze (AqlQueue::ExecutePM4: ACQUIRE_MEM to invalidate the instruction
    cache), runs on the base class's PM4 command processor (hsa/virtual/pm4.py)."""


@dataclass
class _Agent:
    """What PacketProcessor reads of its agent."""

    info: AgentInfo
    family: str
    lds_size: int


class EmulatedQueue:
    """What PacketProcessor reads of its queue, over the ring and amd_queue_t ROCr made."""

    def __init__(self, device: EmulatedDevice, queue_id: int, ring: int, read_ptr: int,
                 write_ptr: int, node: int = 1) -> None:
        self.kfd_id = queue_id  # the thunk's (KFD's) queue id: doorbells, notes
        self.node = node  # the GPU node ROCr created it on (hsaKmtCreateQueue)
        self.handle = read_ptr - Q_READ  # amd_queue_t: read_dispatch_id is at +128
        self._rocr_id = ctypes.c_uint64.from_address(self.handle + Q_ID)
        self.base_address = ring
        self.size = ctypes.c_uint32.from_address(self.handle + Q_SIZE).value
        self.ring = np.ctypeslib.as_array((ctypes.c_uint8 * (self.size * 64)).from_address(ring))
        self._read = ctypes.c_uint64.from_address(read_ptr)
        self._write = ctypes.c_uint64.from_address(write_ptr)
        self._properties = ctypes.c_uint32.from_address(self.handle + Q_PROPERTIES)
        self._device = device
        self._error: BaseException | None = None
        self._callback = self._on_error
        self.destroyed = False
        self.processor = EmulatedPacketProcessor(device.side, device.agent_of(node), self)

    @property
    def id(self) -> int:
        """ROCr's own id (hsa_queue_t.id), as RocrQueue.id reads it: the packet processor
        stamps completion records with it. The KFD ids restart with every ROCr session in
        the process while ROCr's keep counting, so the two differ after the first. Read
        from the queue each time: ROCr fills it in around hsaKmtCreateQueue."""
        return int(self._rocr_id.value)

    @property
    def profiling(self) -> bool:
        return bool(self._properties.value & PROFILING_BIT)

    def load_write_index(self) -> int:
        return self._write.value

    def _store_read_index(self, value: int) -> None:
        self._read.value = value

    @property
    def error(self) -> BaseException | None:
        return self._error

    def _on_error(self, status: int, _queue: Any) -> None:
        """The CP's queue error: a code into queue_inactive_signal and its event."""
        exc = self._error
        log.warning("emulated GPU: %s", exc)
        if isinstance(exc, MemoryFault):
            self._device.lib.hsakmt_emu_memory_fault(int(getattr(exc, "address", 0)), 0,
                                                     self.node)
        code = ERROR_CODES.get(status, ERROR_INVALID_PACKET)
        inactive = ctypes.c_uint64.from_address(self.handle + Q_INACTIVE_SIGNAL).value
        if inactive:
            try:
                self._device._signals.store(inactive, code)
            except HsaError:
                log.warning("queue %d: queue_inactive_signal 0x%x is not live", self.id, inactive)


class EmulatedDevice:
    """The GPU behind the thunk: the device thread and one packet processor per queue.
    Builds the `DeviceSide` its queues' PacketProcessors work with (signals, memory, names)."""


    def __init__(self, lib: ctypes.CDLL, isa: str = DEFAULT_ISA) -> None:
        self.lib = lib
        self._isa = isa
        self._agents: dict[int, _Agent] = {}
        self.agent = self.agent_of(1)  # the first GPU node's
        self.memory = ThunkMemory(lib, 1)
        self._signals = RocrSignals(lib, self.memory)
        self._loader = _NoSymbols()
        self.side = DeviceSide(self._signals, self.memory, self.kernel_name,
                               self._loader.kernel_symbol)
        self._queues: dict[int, EmulatedQueue] = {}
        self._held: dict[int, int] | None = None  # hold(): queue id -> last doorbell value
        self._thread = threading.Thread(target=self._run, name="emulated-amdgpu-device",
                                        daemon=True)
        self._thread.start()

    def agent_of(self, node: int) -> _Agent:
        """What the packet processors of GPU node `node` run as: its handle is the node
        number, the agent ThunkMemory checks mappings for."""
        agent = self._agents.get(node)
        if agent is None:
            info = AgentInfo(handle=node, name=self._isa, device_type=DeviceType.GPU,
                             isa=self._isa)
            agent = self._agents[node] = _Agent(info=info, family="gfx9", lds_size=64 * 1024)
        return agent

    def hold(self) -> None:
        """Benchmarks: stop passing doorbells to the packet processors (they sleep), so a
        timed publishing loop measures host time only, for any producer (ours or HIP)."""
        self._held = {}

    def release(self) -> None:
        """Pass on the doorbells rung while held; processing resumes."""
        held, self._held = self._held or {}, None
        for qid, value in held.items():
            self._ring(qid, value)

    def _ring(self, qid: int, value: int) -> None:
        queue = self._queues.get(qid)
        if queue is not None and value >= 0:
            proc = queue.processor
            _raise_to(proc._rung, value)
            if proc._needs_wake:
                proc.wake()

    def kernel_name(self, kernel_object: int) -> str:
        return f"0x{kernel_object:x}"

    def _run(self) -> None:
        notes = (_Note * 64)()
        poll = self.lib.hsakmt_emu_poll
        while True:
            n = poll(notes, 64, 200)
            for i in range(n):
                note = notes[i]
                try:
                    self._handle(note)
                except Exception:  # the device thread must outlive any one queue's trouble
                    log.exception("emulated GPU: handling a note for queue %d", note.queue_id)

    def _handle(self, note: _Note) -> None:
        qid = int(note.queue_id)
        if note.kind == NOTE_NEW:
            self._queues[qid] = EmulatedQueue(self, qid, note.ring, note.read_ptr, note.write_ptr,
                                              int(note.node) or 1)
        elif note.kind == NOTE_DOORBELL:
            held = self._held
            if held is not None:
                held[qid] = max(held.get(qid, -1), int(note.value))
            else:
                self._ring(qid, int(note.value))
        elif note.kind == NOTE_DESTROY:
            queue = self._queues.pop(qid, None)
            if queue is not None:
                queue.destroyed = True
                queue.processor.stop(join_timeout_s=4.0)
            self.lib.hsakmt_emu_detach(qid)


class _NoSymbols:
    def kernel_symbol(self, kernel_object: int) -> None:
        return None


def _raise_to(heap: list[int], value: int) -> None:
    import heapq

    heapq.heappushpop(heap, value)


# --- starting it ------------------------------------------------------------------------
_lock = threading.Lock()
_device: EmulatedDevice | None = None


def _bind(lib: ctypes.CDLL) -> None:
    lib.hsakmt_emu_identity.restype = ctypes.c_char_p
    lib.hsakmt_emu_enable.argtypes = [ctypes.c_int]
    lib.hsakmt_emu_enable.restype = None
    lib.hsakmt_emu_poll.argtypes = [ctypes.POINTER(_Note), ctypes.c_int, ctypes.c_uint32]
    lib.hsakmt_emu_poll.restype = ctypes.c_int
    lib.hsakmt_emu_detach.argtypes = [ctypes.c_uint64]
    lib.hsakmt_emu_detach.restype = None
    lib.hsakmt_emu_interrupt.argtypes = [ctypes.c_uint32]
    lib.hsakmt_emu_memory_fault.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
    lib.hsakmt_emu_find.argtypes = [ctypes.c_uint64] + [ctypes.c_void_p] * 4
    lib.hsakmt_emu_gpu_count.restype = ctypes.c_uint32
    lib.hsakmt_emu_generation.restype = ctypes.c_uint64
    lib.hsakmt_emu_atomic_add.argtypes = [ctypes.c_uint64, ctypes.c_int64]
    lib.hsakmt_emu_atomic_add.restype = ctypes.c_int64
    lib.hsakmt_emu_load.argtypes = [ctypes.c_uint64]
    lib.hsakmt_emu_load.restype = ctypes.c_int64
    lib.hsakmt_emu_store.argtypes = [ctypes.c_uint64, ctypes.c_int64]
    lib.hsakmt_emu_store.restype = None


_lib: ctypes.CDLL | None = None


def preload(rocr_path: str | None = None) -> ctypes.CDLL:
    """Load the thunk with RTLD_GLOBAL, switched off, before anything loads ROCr: ROCr then
    binds to it, and behaves as without /dev/kfd until `start()` switches it on.
    hsa.rocr.load_library() calls this where /dev/kfd does not exist. `rocr_path`: the
    libhsa-runtime64 that will be loaded, checked for a separate libhsakmt."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        ours = os.path.realpath(build.library_path())
        other = [p for p in _loaded_objects() if os.path.basename(p).startswith("libhsakmt.so")
                 and os.path.realpath(p) != ours]
        if other:
            raise _unavailable(
                f"this process loaded ROCr over {other[0]} before the emulated driver; open "
                "amdgpu:emulated before any other ROCr device, or in a new process")
        if rocr_path:
            check_rocr_links_thunk(os.path.realpath(rocr_path))
        path = build.ensure_built()
        try:
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            _bind(lib)
            identity = lib.hsakmt_emu_identity()
        except (OSError, AttributeError) as exc:
            raise _unavailable(f"the emulated driver's {path} does not load ({exc}); rebuild it "
                               "with scripts/setup.sh") from exc
        if identity != IDENTITY:
            raise _unavailable(f"{path} is not the emulated driver this package expects "
                               f"({identity!r}); rebuild it with scripts/setup.sh")
        lib.hsakmt_emu_enable(0)  # off until start(): ROCr then fails as without /dev/kfd
        _lib = lib
        return lib


def serve_embedded(library: str) -> None:
    """The device side for a program that loaded the thunk by itself (a C program run with
    LD_LIBRARY_PATH=build/emulated): called by the thunk's embedded Python, inside
    hsaKmtOpenKFD. Starts the device thread and returns."""
    global _lib, _device
    with _lock:
        if _device is not None:
            return
        lib = ctypes.CDLL(library)  # already loaded: the same handle
        _bind(lib)
        _lib = lib
        _device = EmulatedDevice(lib, os.environ.get("AMDGPU_EMULATED_ISA", DEFAULT_ISA))


def start(isa: str = DEFAULT_ISA, rocr_path: str | None = None, gpus: int = 1) -> EmulatedDevice:
    """Load the thunk (before ROCr), switch it on and start the device side; idempotent.
    `gpus`: how many GPU nodes the thunk exposes at ROCr's next hsa_init (1..16).

    Raises HsaUnavailable with one line naming the cause: an ISA the emulated driver does
    not offer, a thunk that cannot be built or loaded, a ROCr already loaded over another
    libhsakmt, or a ROCr with the thunk linked in."""
    global _device
    if isa not in SUPPORTED_ISAS:
        raise _unavailable(
            f"the emulated driver offers {', '.join(SUPPORTED_ISAS)}, not {isa!r} (ROCr 5.2 "
            "accepts gfx9/gfx10 nodes, and the ISA executor for them is gfx9's)")
    if not 1 <= gpus <= MAX_GPUS:
        raise _unavailable(f"the emulated driver exposes 1 to {MAX_GPUS} GPU nodes, not {gpus}")
    lib = preload(rocr_path)
    with _lock:
        if _device is not None and _device.agent.info.name != isa:
            raise _unavailable(
                f"the emulated driver of this process already runs a {_device.agent.info.name}; "
                f"one process has one emulated GPU, so {isa} needs a new process")
        os.environ["AMDGPU_EMULATED_ISA"] = isa
        os.environ[GPUS_ENV] = str(gpus)  # read at ROCr's next first hsa_init (OpenKFD)
        # No SDMA engine is emulated: ROCr copies with its blit kernels instead.
        os.environ.setdefault("HSA_ENABLE_SDMA", "0")
        lib.hsakmt_emu_enable(1)
        if _device is None:
            _device = EmulatedDevice(lib, isa)
        return _device


def stop() -> None:
    """Switch the thunk off again (after the last emulated hsa_init is shut down), so that
    a later plain ROCr start in this process fails as it would without /dev/kfd."""
    if _lib is not None:
        _lib.hsakmt_emu_enable(0)


def device() -> EmulatedDevice | None:
    """The running emulated device of this process, if started."""
    return _device
