"""The emulated AMD kernel driver's device server: plays the amdgpu/KFD kernel driver and the
GPU for client processes that run the real ROCm user space over shim/kfd_shim.c.

`python -m hsa.emulated.server [--daemon] [--idle-exit-s S]`, node from AMDGPU_EMULATED_NODE
(default one gfx90a). One server per node spec (a lock in its run directory); it writes the
sysfs topology there, listens on <run dir>/sock, serves each client connection in a thread and
exits once it has had no client for --idle-exit-s seconds. `kill -USR1 PID` writes every
thread's stack to its log, `kill -USR2 PID` where its memory is (RSS, glibc's arenas, and
tracemalloc's top lines when started with PYTHONTRACEMALLOC=1).

Per KFD client (one /dev/kfd open of one process): its own address space (a MemoryMap of the
memfds handed out, at the client's GPU VAs, which libhsakmt keeps equal to its CPU VAs), its
events page, doorbell pages, and queues run by hsa/virtual's PacketProcessor with the ISA
executors. A client that goes away has its queues stopped and its memory dropped; the others
keep running.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import gc
import json
import logging
import mmap
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ground.errors import DeviceError, HsaError, MemoryFault
from ground.status import (
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
)
from hsa.provider import AgentInfo, DeviceType
from hsa.virtual import executor as executor_registry
from hsa.virtual.agents import Agent
from hsa.virtual.memory import Allocation, MemoryMap
from hsa.virtual.queues import DeviceSide, PacketProcessor

from . import abi, build, drm, protocol
from .models import GpuModel, parse_node
from .sysfs import NodeInfo, write_topology

log = logging.getLogger("hsa.emulated.server")

PAGE = 4096
EINVAL, ENOENT, ENOMEM, ENOTTY, EPROTO, EPERM = 22, 2, 12, 25, 71, 1

# amd_queue_t and amd_signal_t offsets (hsa/amd_hsa_queue.h, amd_hsa_signal.h)
Q_SIZE, Q_ID, Q_READ, Q_PROPERTIES, Q_INACTIVE_SIGNAL = 24, 32, 128, 180, 192
PROFILING_BIT = 1 << 3  # AMD_QUEUE_PROPERTIES_ENABLE_PROFILING
S_VALUE, S_MAILBOX, S_EVENT_ID = 8, 16, 24
# queue_inactive_signal codes ROCr maps to HSA statuses (KFD's exception bits)
ERROR_CODES = {
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: 0x20000000,
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: 0x40000000,
}
ERROR_INVALID_PACKET = 32  # everything else: ROCr reports INVALID_PACKET_FORMAT

# linux/kfd_ioctl.h
ALLOC_VRAM, ALLOC_GTT, ALLOC_USERPTR, ALLOC_DOORBELL, ALLOC_MMIO_REMAP = 1, 2, 4, 8, 16
QUEUE_COMPUTE, QUEUE_SDMA, QUEUE_COMPUTE_AQL, QUEUE_SDMA_XGMI = 0, 1, 2, 3
EVENT_MEMORY, EVENT_HW_EXCEPTION = 8, 3
EVENT_SIGNAL = 0xFF  # how the events page marks KFD_IOC_EVENT_SIGNAL (type 0 means free)
HW_EXCEPTION_PER_ENGINE_RESET, HW_EXCEPTION_GPU_HANG = 1, 0
DOORBELL_PAGE = 8192  # gfx9: 1024 queues x 8-byte doorbells per process and GPU
MMAP_TYPE_DOORBELL = 3 << 62
MMAP_TYPE_EVENTS = 2 << 62
MMAP_GPU_ID_SHIFT = 46
# process apertures of a gfx9 KFD (kfd_flat_memory.c, v9)
LDS_BASE, SCRATCH_BASE, APERTURE_SIZE = 1 << 48, 2 << 48, 1 << 32
GPUVM_BASE, GPUVM_LIMIT = 1 << 21, (1 << 47) - 1
IDLE_EXIT_S = 30.0
M_ARENA_MAX = -8  # glibc <malloc.h>
GRACE_S = 30.0  # how long freed memory stays mapped in the server (Server.bury)


def ioctl_name(request: int) -> str:
    """The ioctl's name in linux/kfd_ioctl.h or drm.h (abi.IOCTLS), else its fields."""
    known = abi.decode(request)
    if known is not None:
        return known.name
    if request in (drm.DRM_IOCTL_VERSION, drm.DRM_IOCTL_AMDGPU_INFO):
        return "DRM_IOCTL_VERSION" if request == drm.DRM_IOCTL_VERSION else "DRM_IOCTL_AMDGPU_INFO"
    return (f"type '{chr((request >> 8) & 0xFF)}' nr 0x{request & 0xFF:02x} size "
            f"{(request >> 16) & 0x3FFF}, not in kfd_ioctl.h")


class ServerError(Exception):
    """An ioctl refused: errno to return."""

    def __init__(self, errno: int, why: str = "") -> None:
        super().__init__(why)
        self.errno = errno


def _u32(b: bytes | bytearray, off: int) -> int:
    return int.from_bytes(b[off:off + 4], "little")


def _u64(b: bytes | bytearray, off: int) -> int:
    return int.from_bytes(b[off:off + 8], "little")


def _put32(b: bytearray, off: int, v: int) -> None:
    b[off:off + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")


def _put64(b: bytearray, off: int, v: int) -> None:
    b[off:off + 8] = (v & (2**64 - 1)).to_bytes(8, "little")


# --- the C helpers (shim/devside.c) -------------------------------------------------------
def _load_devside() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build.devside_path()))
    u64, i64 = ctypes.c_uint64, ctypes.c_int64
    lib.devside_watch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p,
                                  ctypes.c_void_p]
    lib.devside_watch.restype = ctypes.c_int
    lib.devside_add.argtypes = [u64, i64]
    lib.devside_add.restype = i64
    lib.devside_load.argtypes = [u64]
    lib.devside_load.restype = i64
    lib.devside_store.argtypes = [u64, i64]
    lib.devside_store.restype = None
    lib.devside_store32.argtypes = [u64, ctypes.c_uint32]
    lib.devside_store32.restype = None
    lib.devside_fire.argtypes = [u64, ctypes.c_uint32]
    lib.devside_fire.restype = None
    return lib


NCACHE = 8  # completion signals a queue's doorbell watch knows (devside.c)


class FastQueue(ctypes.Structure):
    """devside.c's struct fastq: one queue as the doorbell watch sees it, and what it needs
    to retire dependency-free barrier packets without the interpreter (take_barriers)."""

    _fields_ = [("doorbell", ctypes.c_uint64), ("last", ctypes.c_int64),
                ("ring", ctypes.c_uint64), ("mask", ctypes.c_uint64),
                ("read_index", ctypes.c_uint64), ("properties", ctypes.c_uint64),
                ("events", ctypes.c_uint64), ("passed", ctypes.c_int64),
                ("retired", ctypes.c_int64), ("next", ctypes.c_int64),
                ("fast", ctypes.c_int32), ("victim", ctypes.c_int32),
                ("sig_va", ctypes.c_uint64 * NCACHE), ("sig_host", ctypes.c_uint64 * NCACHE),
                ("box_va", ctypes.c_uint64 * NCACHE), ("box_host", ctypes.c_uint64 * NCACHE),
                ("taken", ctypes.c_uint64)]


# --- memory -------------------------------------------------------------------------------
@dataclass
class Bo:
    """One buffer object of a client: its VA range and the memfd mapping behind it."""

    handle: int
    va: int
    size: int
    flags: int
    gpu_id: int
    fd: int  # the memfd (closed once sent, except doorbells kept per GPU)
    key: int  # the mmap offset the client maps it at
    data: np.ndarray
    alloc: Allocation | None = None


def _map_fd(fd: int, size: int, offset: int = 0) -> np.ndarray:
    """`size` bytes of memfd `fd` from `offset`, mapped shared into this process; the mapping
    lives as long as a numpy view of it does."""
    start = offset - offset % PAGE
    length = (offset - start + size + PAGE - 1) // PAGE * PAGE
    mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
    return np.frombuffer(mm, dtype=np.uint8)[offset - start: offset - start + size]


def _new_memfd(name: str, size: int) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, max(PAGE, (size + PAGE - 1) // PAGE * PAGE))
    return fd


def _host(alloc: Allocation) -> int:
    """The server's address of an allocation's first byte."""
    addr = alloc.__dict__.get("_host")
    if addr is None:
        addr = alloc.__dict__["_host"] = alloc.data.ctypes.data
    return addr


class ClientMemory(MemoryMap):
    """A client's address space: its BOs at their VAs."""

    def address(self, va: int, size: int = 8) -> int:
        alloc = self.find(va, size)
        return _host(alloc) + (va - alloc.base)

    def holds(self, va: int, size: int = 1) -> bool:
        try:
            self.find(va, size)
            return True
        except MemoryFault:
            return False


class ClientSignals:
    """What PacketProcessor needs of a signal table, over ROCr's amd_signal_t objects in the
    client's memory; completion events go to the client's events page."""

    def __init__(self, client: Client) -> None:
        self.lock = threading.Lock()
        self._client = client
        self._memory = client.memory
        self._lib = client.server.lib

    def exists(self, handle: int) -> bool:
        return handle != 0 and self._memory.holds(handle, 64)

    def _addr(self, handle: int, offset: int, call: str) -> int:
        try:
            return self._memory.address(handle + offset)
        except MemoryFault:
            raise HsaError(HSA_STATUS_ERROR_INVALID_SIGNAL,
                           f"0x{handle:x} is not in any allocation of this client", call) from None

    def value(self, handle: int) -> int:
        return self._lib.devside_load(self._addr(handle, S_VALUE, "signal load"))

    def _fire(self, handle: int) -> None:
        """The CP's end-of-packet interrupt: event id into the mailbox, then the event."""
        lib = self._lib
        event_id = lib.devside_load(self._addr(handle, S_EVENT_ID, "signal")) & 0xFFFFFFFF
        if not event_id:
            return  # a signal without an event (ROCr's default signals): nobody sleeps on it
        mailbox = lib.devside_load(self._addr(handle, S_MAILBOX, "signal"))
        if mailbox:
            try:
                lib.devside_store(self._memory.address(mailbox), event_id)
            except MemoryFault:
                log.warning("signal 0x%x: event mailbox 0x%x is not mapped", handle, mailbox)
        self._client.fire(event_id)

    def add(self, handle: int, delta: int) -> None:
        self._lib.devside_add(self._addr(handle, S_VALUE, "signal add"), delta)
        self._fire(handle)

    def store(self, handle: int, value: int) -> None:
        self._lib.devside_store(self._addr(handle, S_VALUE, "signal store"), value)
        self._fire(handle)

    def set_word(self, handle: int, word: int, value: int) -> None:
        self._lib.devside_store(self._addr(handle, 8 * word, "signal timestamp"),
                                value - (1 << 64) if value >= 1 << 63 else value)

    def wait_until(self, handles: Sequence[int], test: Callable[[list[int]], object],
                   timeout_s: float | None, *, call: str, describe: Callable[[list[int]], str],
                   cv: threading.Condition | None = None,
                   stop: Callable[[], bool] | None = None) -> object:
        """Poll the signals' values (the client writes them without telling anyone) with a
        growing sleep, until test() answers, stop() is true or the deadline passes."""
        addresses = [self._addr(h, S_VALUE, call) for h in handles]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 20e-6
        load = self._lib.devside_load
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

    def annotate(self, handles: Sequence[int], note: str) -> None:
        pass  # ROCr keeps its own waiters

    def wake_all(self) -> None:
        pass


# --- queues -------------------------------------------------------------------------------
def _family(target: str) -> str:
    return "gfx9" if target.startswith("gfx9") else target[:5]  # gfx11 / gfx12


class ServerQueue:
    """What PacketProcessor reads of its queue, over the ring and amd_queue_t ROCr made in
    the client's memory."""

    evicted = False  # the process had a GPU VM fault on this node: doorbells do nothing

    def __init__(self, client: Client, queue_id: int, node: NodeInfo, ring: int,
                 read_ptr: int, write_ptr: int, doorbell: int, ring_bytes: int = 0) -> None:
        memory = client.memory
        self.kfd_id = queue_id
        self.client = client
        self.node = node
        self.handle = read_ptr - Q_READ  # amd_queue_t: read_dispatch_id is at +128
        self._struct = memory.view(self.handle, 256)
        # the CP takes the ring's size from CREATE_QUEUE (the HQD), not from amd_queue_t:
        # ROCr fills hsa_queue_t.size too, tinygrad's AQL queue leaves it 0
        self.size = ring_bytes // 64 if ring_bytes else int(
            self._struct[Q_SIZE:Q_SIZE + 4].view(np.uint32)[0])
        self.base_address = ring
        self.ring = memory.view(ring, self.size * 64)
        self._read = memory.view(read_ptr, 8).view(np.uint64)
        self._write = memory.view(write_ptr, 8).view(np.uint64)
        self.doorbell = doorbell  # the server's address of its doorbell slot
        self.fast = FastQueue(doorbell=doorbell, last=-1, ring=memory.address(ring),
                              mask=self.size - 1, read_index=memory.address(read_ptr),
                              properties=memory.address(self.handle + Q_PROPERTIES),
                              events=client.events_addr, passed=-1, retired=0, next=0, fast=1)
        self._cached: dict[int, int] = {}  # completion signal -> its mailbox, as in `fast`
        self._error: BaseException | None = None
        self._callback = self._on_error
        self.destroyed = False
        agent = Agent(info=AgentInfo(handle=node.index, name=node.model.target,
                                      device_type=DeviceType.GPU, isa=node.model.target),
                       family=_family(node.model.target), lds_size=node.model.lds_bytes)
        self.processor = _Processor(client.side, agent, self, client.executor(agent.family))
        self.processor.check_kernarg_alignment = False  # the hardware CP does not check it

    @property
    def id(self) -> int:
        """ROCr's own queue id (hsa_queue_t.id)."""
        return int(self._struct[Q_ID:Q_ID + 8].view(np.uint64)[0])

    @property
    def profiling(self) -> bool:
        return bool(int(self._struct[Q_PROPERTIES:Q_PROPERTIES + 4].view(np.uint32)[0])
                    & PROFILING_BIT)

    def load_write_index(self) -> int:
        return int(self._write[0])

    def state(self) -> dict:
        """Where the queue stands (status): a stuck one has write > read while its processor
        sleeps, or a doorbell beyond what the processor was given."""
        proc, fast = self.processor, self.fast
        return {"kfd_id": self.kfd_id, "read": int(self._read[0]),
                "write": self.load_write_index(),
                "doorbell": int(self.client.server.lib.devside_load(self.doorbell)),
                "rung": proc._rung[0], "processor_read": proc._read,
                "processor": ("stopped" if proc._stop else "sleeping" if proc.needs_wake
                              else "running"),
                "watch": {"last": fast.last, "passed": fast.passed, "retired": fast.retired,
                          "next": fast.next, "fast": fast.fast},
                "evicted": self.evicted, "destroyed": self.destroyed}

    def _store_read_index(self, value: int) -> None:
        self._read[0] = value

    @property
    def error(self) -> BaseException | None:
        return self._error

    @error.setter
    def error(self, exc: BaseException) -> None:  # the packet processor's failure
        self._error = exc

    def ring_doorbell(self, value: int) -> None:
        if value < 0 or self.destroyed or self.evicted:
            return
        proc = self.processor
        taken = self.fast.next  # packets the doorbell watch retired itself (devside.c)
        if taken > proc._read:  # the processor had finished all it was given: it sleeps
            proc._read = taken
        proc.ring(value)

    def retired(self, next_packet: int, completion: int) -> None:
        """The processor finished a packet (its signal too): the doorbell watch may take
        the next ones; it learns the completion signal's server address for them."""
        fast = self.fast
        if completion and completion not in self._cached and not self.destroyed:
            memory = self.client.memory
            try:
                host = memory.address(completion)
                mailbox = int(self.client.server.lib.devside_load(host + S_MAILBOX))
                box = memory.address(mailbox) if mailbox else 0
            except MemoryFault:
                pass
            else:
                i = fast.victim
                fast.victim = (i + 1) % NCACHE
                self._cached.pop(fast.sig_va[i], None)
                fast.sig_va[i] = 0  # the watch never sees a half-written entry
                fast.sig_host[i], fast.box_va[i], fast.box_host[i] = host, mailbox, box
                fast.sig_va[i] = completion
                self._cached[completion] = mailbox
        fast.retired = next_packet

    def forget_signals(self) -> None:
        """Memory was freed: no cached signal address may outlive it."""
        for i in range(NCACHE):
            self.fast.sig_va[i] = 0
        self._cached.clear()

    def _on_error(self, status: int, _queue: Any) -> None:
        """The CP's queue error: a code into queue_inactive_signal and its event."""
        self.fast.fast = 0  # the queue is stopped: the doorbell watch takes nothing more
        exc = self._error
        log.warning("client %d: %s", self.client.pid, exc)
        if isinstance(exc, MemoryFault):
            # a GPU VM fault (gfx9 without XNACK, and every target here): amdkfd's interrupt
            # handler evicts the process's queues (stopped above) and signals its memory
            # events (kfd_signal_vm_fault_event); the CP never writes queue_inactive_signal,
            # so ROCr's VM-fault handler is the one report, as on a real GPU
            self.client.memory_fault(int(getattr(exc, "address", 0)), self.node.gpu_id)
            return
        code = ERROR_CODES.get(status, ERROR_INVALID_PACKET)
        inactive = int(self._struct[Q_INACTIVE_SIGNAL:Q_INACTIVE_SIGNAL + 8].view(np.uint64)[0])
        if inactive:
            try:
                self.client.signals.store(inactive, code)
            except HsaError:
                log.warning("queue %d: queue_inactive_signal 0x%x is not live", self.id, inactive)


class _RingQueue:
    """What a KFD SDMA or PM4 queue shares: its doorbell slot in the watch's table, its ring
    engine run by a RingWorker (hsa/virtual/ring_worker.py) that the doorbells wake, and an
    eviction after the process's GPU VM fault that makes later doorbells do nothing."""

    evicted = False  # the process had a GPU VM fault on this node: doorbells do nothing
    worker: Any

    def __init__(self, client: Client, queue_id: int, node: NodeInfo, doorbell: int) -> None:
        self.kfd_id = queue_id
        self.client = client
        self.node = node
        self.doorbell = doorbell
        self.fast = FastQueue(doorbell=doorbell, last=-1, passed=-1, retired=0, next=0, fast=0)
        self.destroyed = False
        self.processor = self  # what Client.close and DESTROY_QUEUE stop

    def ring_doorbell(self, value: int) -> None:
        if value >= 0 and not self.destroyed and not self.evicted:
            self.worker.ring_doorbell(value)

    def stop(self, join_timeout_s: float = 4.0) -> None:
        self.destroyed = True
        self.worker.stop(join_timeout_s)


class SdmaQueue(_RingQueue):
    """A KFD SDMA queue (ROCr's BlitSdma copies and fills): its ring runs on hsa/virtual's
    SdmaEngine, woken by doorbells (the new write pointer, in bytes); a TRAP packet fires the
    client's event, as the SDMA interrupt does; a bad packet or address stops the queue, as
    on the GPU (a memory fault is the VM fault: the memory events)."""

    def __init__(self, client: Client, queue_id: int, node: NodeInfo, ring: int,
                 ring_bytes: int, read_ptr: int, write_ptr: int, doorbell: int) -> None:
        from hsa.virtual.ring_worker import RingWorker
        from hsa.virtual.sdma import SdmaEngine

        super().__init__(client, queue_id, node, doorbell)
        engine = SdmaEngine(client.memory, ring, ring_bytes, read_ptr, write_ptr,
                            target=node.model.target, agent=node.index,
                            interrupt=lambda irq: client.fire(irq.context),
                            label=f"client {client.pid} SDMA queue {queue_id}")
        self.worker = RingWorker(engine, name=f"sdma-{queue_id}", on_error=self._on_error)

    def _on_error(self, exc: HsaError) -> None:
        log.warning("client %d: %s", self.client.pid, exc)
        if isinstance(exc, MemoryFault):
            self.client.memory_fault(int(getattr(exc, "address", 0) or 0), self.node.gpu_id)
            return
        # A packet the engine does not run (e.g. a tiled copy). A real engine would hang
        # until the driver resets it and raises the HW-exception event, which ROCr 5.2 does
        # not listen to: its copy would wait forever. So the process hears it twice: the
        # line (on its stderr, as there is no dmesg to read) and the VM-fault event at the
        # ring's address, on which ROCr reports a fault and aborts instead of hanging.
        tell_process(self.client.pid, f"amdgpu emulated kernel: {exc}")
        self.client.memory_fault(self.worker.engine.base, self.node.gpu_id)


def tell_process(pid: int, line: str) -> None:
    """Write one line to the process's standard error (best effort: it may be gone)."""
    try:
        with open(f"/proc/{pid}/fd/2", "a") as err:
            err.write(line.rstrip("\n") + "\n")
    except OSError as e:
        log.warning("client %d: could not write to its stderr: %s", pid, e)


class Pm4Queue(_RingQueue):
    """A KFD PM4 compute queue (KFD_IOC_QUEUE_TYPE_COMPUTE; tinygrad's AMD backend): its ring
    runs on hsa/virtual's command processor (Pm4Processor over a Pm4Ring, 64-bit read and
    write pointers counting dwords) in a RingWorker thread, woken by doorbells (the new write
    pointer, in dwords). RELEASE_MEM's interrupt fires the event its INT_CTXID names; a
    context id that names none (gfx9 streams send 0) fires every signal event, as KFD's scan
    of the signal page does for an interrupt without a valid id (a spurious wake is harmless:
    waiters check their memory). A fault stops the queue as on the GPU: a memory fault is the
    VM fault (memory events), any other (a malformed packet, with its dword offset in the
    server log) raises KFD's HW exception event, as a hung queue's reset does."""

    def __init__(self, client: Client, queue_id: int, node: NodeInfo, ring: int,
                 ring_bytes: int, read_ptr: int, write_ptr: int, doorbell: int) -> None:
        from hsa.virtual.pm4 import Pm4Processor, Pm4Ring
        from hsa.virtual.ring_worker import RingWorker

        super().__init__(client, queue_id, node, doorbell)
        label = f"client {client.pid} PM4 queue {queue_id}"
        cp = Pm4Processor(client.memory, target=node.model.target, agent=node.index,
                          interrupt=self._interrupt, label=label,
                          lds_size=node.model.lds_bytes)
        self.ring = Pm4Ring(cp, ring, ring_bytes, read_ptr, write_ptr)
        self.worker = RingWorker(self.ring, name=f"pm4-{queue_id}", on_error=self._on_error)

    def _interrupt(self, irq: Any) -> None:
        events = self.client.events
        types = events[protocol.EVENTS_TYPE:protocol.EVENTS_TYPE + protocol.MAX_EVENTS]
        if 0 < irq.context < protocol.MAX_EVENTS and types[irq.context]:
            self.client.fire(irq.context)
            return
        for event_id in np.flatnonzero(types == EVENT_SIGNAL):
            self.client.fire(int(event_id))

    def _on_error(self, exc: HsaError) -> None:
        log.warning("%s", exc)  # names the client, queue, ring/IB and dword offset
        if isinstance(exc, MemoryFault):
            self.client.memory_fault(int(getattr(exc, "address", 0) or 0), self.node.gpu_id)
            return
        record = bytearray(16)  # kfd_hsa_hw_exception_data
        _put32(record, 0, HW_EXCEPTION_PER_ENGINE_RESET)
        _put32(record, 4, HW_EXCEPTION_GPU_HANG)
        _put32(record, 12, self.node.gpu_id)
        events = self.client.events
        events[protocol.EVENTS_HW_EXCEPTION:protocol.EVENTS_HW_EXCEPTION + 16] = np.frombuffer(
            bytes(record), np.uint8)
        types = events[protocol.EVENTS_TYPE:protocol.EVENTS_TYPE + protocol.MAX_EVENTS]
        for event_id in np.flatnonzero(types == EVENT_HW_EXCEPTION):
            self.client.fire(int(event_id))



def _state(q: ServerQueue) -> dict:
    """A queue's state for status, or what kept it from being read: status must answer."""
    try:
        return q.state()
    except Exception as exc:  # noqa: BLE001 - a status reader gets the error, not a hang-up
        return {"kfd_id": q.kfd_id, "error": f"{type(exc).__name__}: {exc}"}


class _Processor(PacketProcessor):
    """hsa/virtual's packet processor, telling its queue each packet it finished (for the
    doorbell watch's barriers: ServerQueue.retired)."""

    def _retire(self, packet_id: int, slot: int, completion: int) -> None:
        super()._retire(packet_id, slot, completion)
        self.queue.retired(packet_id + 1, completion)


class DoorbellWatch:
    """One thread that waits in devside_poll (C, off the interpreter lock) for doorbell
    writes of every live queue of every client, and passes them to the queues."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._queues: list[ServerQueue] = []
        self._lock = threading.Lock()
        self._kick = ctypes.c_int(0)
        self._allow = ctypes.c_int(1)  # 0 while held: barriers too wait for release()
        self._stop = False
        self._held: dict[ServerQueue, int] | None = None
        self._thread = threading.Thread(target=self._run, name="doorbells", daemon=True)
        self._thread.start()

    def add(self, queue: ServerQueue) -> None:
        with self._lock:
            self._queues = [*self._queues, queue]
            self._kick.value = 1

    def remove(self, queue: ServerQueue) -> None:
        with self._lock:
            self._queues = [q for q in self._queues if q is not queue]
            self._kick.value = 1

    def _run(self) -> None:
        out = (ctypes.c_int * 64)()
        kick, allow = ctypes.byref(self._kick), ctypes.byref(self._allow)
        while not self._stop:
            with self._lock:
                queues = self._queues
                self._kick.value = 0
            n = len(queues)
            table = (ctypes.POINTER(FastQueue) * max(n, 1))(
                *[ctypes.pointer(q.fast) for q in queues])
            while not self._kick.value and not self._stop:
                k = self._lib.devside_watch(table, n, out, 64, 200, 300, kick, allow)
                for i in range(k):
                    self._rung(queues[out[i]])

    def _rung(self, q: ServerQueue) -> None:
        # not inline in _run: a local there kept the last queue rung (and its client's
        # objects and mappings) alive until the next doorbell, after its client had gone
        held = self._held
        if held is not None:
            held[q] = q.fast.last
        else:
            self._pass(q, q.fast.last)

    def _pass(self, q: ServerQueue, value: int) -> None:
        try:
            q.ring_doorbell(value)
        except Exception:  # the watch must outlive any one queue's trouble
            log.exception("doorbell of queue %d", q.kfd_id)

    def hold(self) -> None:
        """Benchmarks: keep doorbells from the packet processors (they sleep), so a timed
        publishing loop measures the host's cost only."""
        self._allow.value = 0
        self._held = {}

    def release(self) -> None:
        """Pass on the doorbells rung while held; processing resumes."""
        held, self._held = self._held or {}, None
        for q, value in held.items():
            self._pass(q, value)
        self._allow.value = 1


# --- SVM attributes -----------------------------------------------------------------------
@dataclass
class SvmRange:
    """One page range's attributes (kfd_svm.c's struct svm_range, the parts ioctls see)."""

    start: int
    end: int
    preferred: int = 0xFFFFFFFF  # KFD_IOCTL_SVM_LOCATION_UNDEFINED
    prefetch: int = 0xFFFFFFFF
    granularity: int = 9
    flags: int = 0x3  # HOST_ACCESS | COHERENT (svm_range_set_default_attributes)


class SvmRanges:
    """A process's SVM attribute ranges, split where SET_ATTR ranges begin and end."""

    def __init__(self) -> None:
        self._ranges: list[SvmRange] = []  # sorted, disjoint

    def set(self, start: int, end: int, attrs: list[tuple[int, int]]) -> None:
        out: list[SvmRange] = []
        at = start
        for r in self._ranges:
            if r.end <= start or r.start >= end:
                out.append(r)
                continue
            if r.start < start:  # the part before stays as it was
                out.append(SvmRange(**{**r.__dict__, "end": start}))
            if at < r.start:  # a gap inside the range: a new range with the defaults
                out.append(SvmRange(at, r.start))
            out.append(SvmRange(**{**r.__dict__, "start": max(r.start, start),
                                   "end": min(r.end, end)}))
            if r.end > end:
                out.append(SvmRange(**{**r.__dict__, "start": end}))
            at = min(r.end, end)
        if at < end:
            out.append(SvmRange(at, end))
        out.sort(key=lambda r: r.start)
        for r in out:
            if r.start >= start and r.end <= end:
                _apply_svm(r, attrs)
        self._ranges = out

    def get(self, start: int, end: int, attrs: list[tuple[int, int]],
            gpu_index: Callable[[int], int]) -> list[tuple[int, int]]:
        """svm_range_get_attr: the attributes merged over every range in [start, end);
        defaults where none; GPU access is never granted here."""
        for kind, _value in attrs:
            if kind in (abi.KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE, abi.KFD_IOCTL_SVM_ATTR_NO_ACCESS) \
                    or kind > abi.KFD_IOCTL_SVM_ATTR_GRANULARITY:
                raise ServerError(EINVAL, f"SVM attribute {kind} cannot be read")
        hits = [r for r in self._ranges if r.start < end and r.end > start]
        undefined = abi.KFD_IOCTL_SVM_LOCATION_UNDEFINED
        if not hits:
            preferred, prefetch, granularity, flags_and = undefined, undefined, 9, 0x3
            flags_or = flags_and
        else:
            preferred = prefetch = undefined
            granularity, flags_and, flags_or = 0xFF, 0xFFFFFFFF, 0
            same_pref = same_fetch = True
            for i, r in enumerate(hits):
                if same_pref:
                    if r.preferred == undefined or (i and preferred != r.preferred):
                        preferred, same_pref = undefined, False
                    else:
                        preferred = r.preferred
                if same_fetch:
                    if r.prefetch == undefined or (i and prefetch != r.prefetch):
                        prefetch, same_fetch = undefined, False
                    else:
                        prefetch = r.prefetch
                flags_and &= r.flags
                flags_or |= r.flags
                granularity = min(granularity, r.granularity)
        out = []
        for kind, value in attrs:
            if kind == abi.KFD_IOCTL_SVM_ATTR_PREFERRED_LOC:
                value = preferred
            elif kind == abi.KFD_IOCTL_SVM_ATTR_PREFETCH_LOC:
                value = prefetch
            elif kind == abi.KFD_IOCTL_SVM_ATTR_ACCESS:
                gpu_index(value)  # EINVAL for a gpu_id no node has
                kind = abi.KFD_IOCTL_SVM_ATTR_NO_ACCESS
            elif kind == abi.KFD_IOCTL_SVM_ATTR_SET_FLAGS:
                value = flags_and
            elif kind == abi.KFD_IOCTL_SVM_ATTR_CLR_FLAGS:
                value = ~flags_or & 0xFFFFFFFF
            else:
                value = granularity
            out.append((kind, value))
        return out


def _apply_svm(r: SvmRange, attrs: list[tuple[int, int]]) -> None:
    """svm_range_apply_attrs, less GPU access (refused before; NO_ACCESS is what every GPU
    has already)."""
    for kind, value in attrs:
        if kind == abi.KFD_IOCTL_SVM_ATTR_PREFERRED_LOC:
            r.preferred = value
        elif kind == abi.KFD_IOCTL_SVM_ATTR_PREFETCH_LOC:
            r.prefetch = value
        elif kind == abi.KFD_IOCTL_SVM_ATTR_SET_FLAGS:
            r.flags |= value
        elif kind == abi.KFD_IOCTL_SVM_ATTR_CLR_FLAGS:
            r.flags &= ~value & 0xFFFFFFFF
        elif kind == abi.KFD_IOCTL_SVM_ATTR_GRANULARITY:
            r.granularity = min(value, 0x3F)


# --- clients ------------------------------------------------------------------------------
class Client:
    """One process's /dev/kfd: its address space, events, doorbells and queues."""

    def __init__(self, server: Server, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.memory = ClientMemory()
        self.bos: dict[int, Bo] = {}
        self._next_handle = 1
        self._lock = threading.Lock()
        self.events_fd = _new_memfd("amdgpu-events", protocol.EVENTS_PAGE_BYTES)
        self.events = _map_fd(self.events_fd, protocol.EVENTS_PAGE_BYTES)
        self.events_addr = self.events.ctypes.data
        self.has_events_page = False
        self.doorbells: dict[int, tuple[int, np.ndarray]] = {}  # gpu_id -> (memfd, page)
        self.queues: dict[int, ServerQueue] = {}
        self.evicted_nodes: set[int] = set()  # gpu_ids whose queues a VM fault evicted
        self.signals = ClientSignals(self)
        self.svm = SvmRanges()
        self._executors: dict[str, Any] = {}
        self.side = DeviceSide(self.signals, self.memory, lambda ko: f"0x{ko:x}",
                               lambda ko: None)

    def executor(self, family: str) -> Any:
        """This process's ISA executor of `family` (None: the queue finds none and says so
        at its first dispatch): one of its own, so the programs it caches by code address
        go with the client (the shared one kept every client's, ~0.5 MiB a minute in a
        soak)."""
        if family not in self._executors:
            try:
                self._executors[family] = executor_registry.new_executor(family)
            except Exception:  # a broken executor package: the queue reports it
                self._executors[family] = None
        return self._executors[family]

    # events
    def fire(self, event_id: int) -> None:
        if 0 < event_id < protocol.MAX_EVENTS:
            self.server.lib.devside_fire(self.events_addr, event_id)

    def memory_fault(self, address: int, gpu_id: int) -> None:
        """KFD's GPU VM fault: the fault data, then every memory event of the process."""
        record = bytearray(32)
        _put32(record, 0, 1)  # failure.NotPresent
        _put64(record, 16, address)
        _put32(record, 24, gpu_id)
        self.events[protocol.EVENTS_FAULT:protocol.EVENTS_FAULT + 32] = np.frombuffer(
            bytes(record), np.uint8)
        types = self.events[protocol.EVENTS_TYPE:protocol.EVENTS_TYPE + protocol.MAX_EVENTS]
        for event_id in np.flatnonzero(types == EVENT_MEMORY):
            self.fire(int(event_id))
        self.evict(gpu_id)

    def evict(self, gpu_id: int) -> None:
        """After a VM fault amdkfd evicts every queue the process has on that GPU
        (kfd_dqm_evict_pasid) and a queue it creates there later is never mapped: the
        doorbells of all of them do nothing from now on."""
        self.evicted_nodes.add(gpu_id)
        for q in list(self.queues.values()):
            if q.node.gpu_id == gpu_id:
                q.evicted = True
                q.fast.fast = 0  # the doorbell watch takes nothing more either

    # memory
    def new_handle(self) -> int:
        with self._lock:
            h = self._next_handle
            self._next_handle += 1
        return h

    def add_bo(self, bo: Bo, allowed: set[int]) -> None:
        several = len(self.server.nodes) > 1
        bo.alloc = self.memory.adopt(bo.va, bo.data, owner=self.server.node_of(bo.gpu_id),
                                     pool=0, allowed=allowed)
        bo.alloc.accessible_by_all = not several
        self.bos[bo.handle] = bo

    def close(self) -> str:
        """The process is gone: stop its queues, drop its memory (mappings end with the last
        numpy view of them)."""
        for q in list(self.queues.values()):
            q.fast.fast = 0
            self.server.doorbell_watch.remove(q)
            q.destroyed = True
            q.processor.stop(join_timeout_s=2.0)
        nbytes = sum(bo.size for bo in self.bos.values())
        summary = (f"client {self.pid} gone: {len(self.queues)} queue(s) stopped, "
                   f"{len(self.bos)} allocation(s) ({nbytes >> 20} MiB) freed")
        self.queues.clear()
        for bo in self.bos.values():
            if bo.alloc is not None:
                try:
                    self.memory.free(bo.va)
                except KeyError:
                    pass
        self.server.bury([bo.data for bo in self.bos.values()] +
                         [page for _fd, page in self.doorbells.values()] + [self.events])
        self.bos.clear()
        for fd, _page in self.doorbells.values():
            os.close(fd)
        self.doorbells.clear()
        os.close(self.events_fd)
        return summary


# --- the ioctls ---------------------------------------------------------------------------
@dataclass
class Answer:
    args: bytes
    writes: list[tuple[int, bytes]] = field(default_factory=list)
    fds: list[tuple[int, int, int]] = field(default_factory=list)  # (mmap offset, size, fd)
    close_after: list[int] = field(default_factory=list)


class Kfd:
    """The KFD ioctls of one client (linux/kfd_ioctl.h, version 1.8)."""

    def __init__(self, server: Server, client: Client) -> None:
        self.server = server
        self.client = client

    def handle(self, nr: int, args: bytearray, extra: bytes, fds: list[int]) -> Answer:
        method = getattr(self, f"nr_{nr:02x}", None)
        if method is None:
            raise ServerError(EINVAL, "unknown")
        return method(args, extra, fds) or Answer(bytes(args))

    def nr_01(self, a: bytearray, extra: bytes, fds: list[int]) -> None:  # GET_VERSION
        _put32(a, 0, 1)
        _put32(a, 4, 9)  # 1.9: AVAILABLE_MEMORY (libhsakmt checks the minor before asking)

    def nr_04(self, a, extra, fds):  # SET_MEMORY_POLICY
        self.server.node(_u32(a, 16))

    def nr_07(self, a, extra, fds):  # UPDATE_QUEUE
        pass

    def nr_11(self, a, extra, fds):  # SET_SCRATCH_BACKING_VA
        pass

    def nr_12(self, a, extra, fds):  # GET_TILE_CONFIG (kfd_ioctl_get_tile_config)
        # gfx9 and later have no tile mode tables to copy (the kernel's are all zero; none is
        # copied here); ROCr's image manager hands gb_addr_config to addrlib, which lays out
        # tiled images by it; num_banks/num_ranks are not set from gfx9 on (0)
        node = self.server.node(_u32(a, 24))
        _put32(a, 16, 0)
        _put32(a, 20, 0)
        _put32(a, 28, node.model.gb_addr_config)
        _put32(a, 32, 0)
        _put32(a, 36, 0)

    def nr_13(self, a, extra, fds):  # SET_TRAP_HANDLER
        pass

    def nr_15(self, a, extra, fds):  # ACQUIRE_VM (drm_fd: the shim sent the render minor)
        node = self.server.node(_u32(a, 4))
        if _u32(a, 0) != node.drm_render_minor:
            raise ServerError(EINVAL, "the render node is not this GPU's")

    def nr_1a(self, a, extra, fds):  # SET_CU_MASK
        pass

    def nr_1e(self, a, extra, fds):  # ALLOC_QUEUE_GWS
        pass

    def nr_1f(self, a, extra, fds):  # SMI_EVENTS: the shim makes the fd (it never reports)
        self.server.node(_u32(a, 0))

    def nr_20(self, a, extra, fds):  # SVM: the attributes, as kfd_svm.c keeps them
        """AMDKFD_IOC_SVM (the shim sends the attrs[] after the args): SET_ATTR records
        locations, flags and granularity per page range, GET_ATTR answers them merged over
        the range as svm_range_get_attr does. GPU access (ACCESS, ACCESS_IN_PLACE) is
        refused: the emulated GPU reaches only memory allocated or registered through KFD
        (the topology does not claim SVM), so a range is never mapped for it."""
        start, size, op, nattr = _u64(a, 0), _u64(a, 8), _u32(a, 16), _u32(a, 20)
        if start % PAGE or size % PAGE or not start or not size:
            raise ServerError(EINVAL, "SVM range not page-aligned or empty")
        if len(a) < 24 + 8 * nattr:
            raise ServerError(EINVAL, "SVM attributes missing")
        attrs = [(_u32(a, 24 + 8 * i), _u32(a, 28 + 8 * i)) for i in range(nattr)]
        ranges = self.client.svm
        if op == abi.KFD_IOCTL_SVM_OP_SET_ATTR:
            self._svm_check(attrs)
            ranges.set(start, start + size, attrs)
        elif op == abi.KFD_IOCTL_SVM_OP_GET_ATTR:
            for i, (kind, value) in enumerate(ranges.get(start, start + size, attrs,
                                                         self._svm_gpu)):
                _put32(a, 24 + 8 * i, kind)
                _put32(a, 28 + 8 * i, value)
        else:
            raise ServerError(EINVAL, f"SVM op {op}")

    def _svm_gpu(self, gpu_id: int) -> int:
        return self.server.node(gpu_id).index

    def _svm_check(self, attrs: list[tuple[int, int]]) -> None:
        """svm_range_check_attr, and the refusal of GPU access."""
        sysmem, undefined = abi.KFD_IOCTL_SVM_LOCATION_SYSMEM, abi.KFD_IOCTL_SVM_LOCATION_UNDEFINED
        for kind, value in attrs:
            if kind == abi.KFD_IOCTL_SVM_ATTR_PREFERRED_LOC:
                if value not in (sysmem, undefined):
                    self._svm_gpu(value)
            elif kind == abi.KFD_IOCTL_SVM_ATTR_PREFETCH_LOC:
                if value != sysmem:
                    self._svm_gpu(value)
            elif kind in (abi.KFD_IOCTL_SVM_ATTR_ACCESS, abi.KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE):
                self._svm_gpu(value)
                raise ServerError(EPERM, "GPU access to SVM ranges is not emulated (the "
                                         "topology does not claim SVM): allocate the memory "
                                         "through KFD or register it (userptr)")
            elif kind == abi.KFD_IOCTL_SVM_ATTR_NO_ACCESS:
                self._svm_gpu(value)
            elif kind not in (abi.KFD_IOCTL_SVM_ATTR_SET_FLAGS, abi.KFD_IOCTL_SVM_ATTR_CLR_FLAGS,
                              abi.KFD_IOCTL_SVM_ATTR_GRANULARITY):
                raise ServerError(EINVAL, f"unknown SVM attribute {kind}")

    def nr_21(self, a, extra, fds):  # SET_XNACK_MODE: off, and it stays off
        if int.from_bytes(a[0:4], "little", signed=True) > 0:
            raise ServerError(EINVAL, "XNACK is off on the emulated GPU")
        _put32(a, 0, 0)

    def nr_23(self, a, extra, fds):  # AVAILABLE_MEMORY: VRAM not yet allocated on the GPU
        node = self.server.node(_u32(a, 8))
        with self.server._lock:
            clients = list(self.server.clients.values())
        used = sum(bo.size for c in clients for bo in list(c.bos.values())
                   if bo.gpu_id == node.gpu_id and bo.flags & ALLOC_VRAM)
        _put64(a, 0, max(0, node.model.vram_bytes - used))

    def nr_14(self, a, extra, fds):  # GET_PROCESS_APERTURES_NEW
        ptr, count = _u64(a, 0), _u32(a, 8)
        nodes = self.server.nodes
        if count == 0 or ptr == 0:
            _put32(a, 8, len(nodes))
            return None
        out = bytearray()
        for n in nodes[:count]:
            for v in (LDS_BASE, LDS_BASE + APERTURE_SIZE - 1, SCRATCH_BASE,
                      SCRATCH_BASE + APERTURE_SIZE - 1, GPUVM_BASE, GPUVM_LIMIT):
                out += v.to_bytes(8, "little")
            out += n.gpu_id.to_bytes(4, "little") + bytes(4)
        _put32(a, 8, min(count, len(nodes)))
        return Answer(bytes(a), writes=[(ptr, bytes(out))])

    # memory
    def nr_16(self, a, extra, fds):  # ALLOC_MEMORY_OF_GPU
        client = self.client
        va, size, offset_in = _u64(a, 0), _u64(a, 8), _u64(a, 24)
        gpu_id, flags = _u32(a, 32), _u32(a, 36)
        node = self.server.node(gpu_id)
        if size == 0:
            raise ServerError(EINVAL, "size 0")
        handle = client.new_handle()
        if flags & ALLOC_USERPTR:
            if not fds or len(extra) < 8:
                raise ServerError(EINVAL, "userptr without its memfd")
            fd = fds.pop(0)
            try:
                data = _map_fd(fd, size, _u64(extra, 0))
            finally:
                os.close(fd)
            bo = Bo(handle, va, size, flags, gpu_id, -1, offset_in, data)
            client.add_bo(bo, {node.index})
            _put64(a, 16, handle)
            return Answer(bytes(a))
        if flags & ALLOC_DOORBELL:
            fd, page = self._doorbell_page(gpu_id)
            client.__dict__.setdefault("doorbells_sent", set()).add(gpu_id)
            bo = Bo(handle, va, size, flags, gpu_id, -1, offset_in, page[:size])
            client.add_bo(bo, {node.index})
            _put64(a, 16, handle)
            key = MMAP_TYPE_DOORBELL | gpu_id << MMAP_GPU_ID_SHIFT  # what libhsakmt maps
            return Answer(bytes(a), fds=[(key, DOORBELL_PAGE, fd)])
        try:
            fd = _new_memfd(f"amdgpu-bo-{handle}", size)
            # amdgpu BOs and their GPU mappings are whole pages (amdgpu_bo_create aligns the
            # size): a kernel may read past a 12-byte buffer's end within its page
            data = _map_fd(fd, (size + PAGE - 1) // PAGE * PAGE)
        except OSError as exc:
            raise ServerError(ENOMEM, str(exc)) from None
        key = handle << 12
        bo = Bo(handle, va, size, flags, gpu_id, fd, key, data)
        client.add_bo(bo, {node.index})
        _put64(a, 16, handle)
        _put64(a, 24, key)
        return Answer(bytes(a), fds=[(key, (size + PAGE - 1) // PAGE * PAGE, fd)],
                      close_after=[fd])

    def _doorbell_page(self, gpu_id: int) -> tuple[int, np.ndarray]:
        page = self.client.doorbells.get(gpu_id)
        if page is None:
            fd = _new_memfd(f"amdgpu-doorbells-{gpu_id:x}", DOORBELL_PAGE)
            page = self.client.doorbells[gpu_id] = (fd, _map_fd(fd, DOORBELL_PAGE))
        return page

    def nr_17(self, a, extra, fds):  # FREE_MEMORY_OF_GPU
        bo = self.client.bos.pop(_u64(a, 0), None)
        if bo is None:
            raise ServerError(EINVAL, "no such buffer")
        for q in list(self.client.queues.values()):
            if isinstance(q, ServerQueue):
                q.forget_signals()
        self.client.memory.free(bo.va)
        self.server.bury([bo.data])

    def _mapping(self, a: bytearray, extra: bytes, on: bool) -> None:
        bo = self.client.bos.get(_u64(a, 0))
        if bo is None or bo.alloc is None:
            raise ServerError(EINVAL, "no such buffer")
        n = _u32(a, 16)
        ids = [_u32(extra, 4 * i) for i in range(min(n, len(extra) // 4))]
        nodes = {self.server.node(g).index for g in ids}
        if on:
            bo.alloc.allowed |= nodes
        else:
            bo.alloc.allowed -= nodes
        _put32(a, 20, len(ids))

    def nr_18(self, a, extra, fds):  # MAP_MEMORY_TO_GPU
        self._mapping(a, extra, True)

    def nr_19(self, a, extra, fds):  # UNMAP_MEMORY_FROM_GPU
        self._mapping(a, extra, False)

    # queues
    def nr_02(self, a, extra, fds):  # CREATE_QUEUE
        client = self.client
        ring, write_ptr, read_ptr = _u64(a, 0), _u64(a, 8), _u64(a, 16)
        gpu_id, qtype = _u32(a, 36), _u32(a, 40)
        node = self.server.node(gpu_id)
        if qtype not in (QUEUE_COMPUTE, QUEUE_COMPUTE_AQL, QUEUE_SDMA, QUEUE_SDMA_XGMI):
            raise ServerError(EINVAL, f"queue type {qtype} is not a KFD queue type (PM4 compute "
                                      "0, SDMA 1, AQL compute 2, SDMA XGMI 3)")
        _fd, page = self._doorbell_page(gpu_id)
        with client._lock:
            used = {q.kfd_id for q in client.queues.values()}
            qid = next(i for i in range(1024) if i not in used)
        slot = page.ctypes.data + qid * 8
        self.server.lib.devside_store(slot, -1)
        try:
            if qtype == QUEUE_COMPUTE_AQL:
                queue: Any = ServerQueue(client, qid, node, ring, read_ptr, write_ptr, slot,
                                         _u32(a, 32))
            elif qtype == QUEUE_COMPUTE:
                queue = Pm4Queue(client, qid, node, ring, _u32(a, 32), read_ptr, write_ptr, slot)
            else:
                queue = SdmaQueue(client, qid, node, ring, _u32(a, 32), read_ptr, write_ptr,
                                  slot)
        except (MemoryFault, ValueError) as exc:
            raise ServerError(EINVAL, f"queue memory: {exc}") from None
        if gpu_id in client.evicted_nodes:
            queue.evicted = True
            queue.fast.fast = 0
        client.queues[qid] = queue
        self.server.doorbell_watch.add(queue)
        _put32(a, 52, qid)
        _put64(a, 24, MMAP_TYPE_DOORBELL | gpu_id << MMAP_GPU_ID_SHIFT | qid * 8)
        return self._doorbell_mapping(a, gpu_id)

    def _doorbell_mapping(self, a: bytearray, gpu_id: int) -> Answer:
        """CREATE_QUEUE's doorbell_offset is an mmap offset of /dev/kfd (KFD maps the process's
        doorbell pages there); libhsakmt maps them after an ALLOC_MEMORY_OF_GPU of doorbell
        type, tinygrad straight from this offset: the first queue on a GPU sends the page."""
        sent = self.client.__dict__.setdefault("doorbells_sent", set())
        if gpu_id in sent:
            return Answer(bytes(a))
        sent.add(gpu_id)
        fd, _page = self._doorbell_page(gpu_id)
        key = MMAP_TYPE_DOORBELL | gpu_id << MMAP_GPU_ID_SHIFT
        return Answer(bytes(a), fds=[(key, DOORBELL_PAGE, fd)])

    def nr_03(self, a, extra, fds):  # DESTROY_QUEUE
        queue = self.client.queues.pop(_u32(a, 0), None)
        if queue is None:
            raise ServerError(EINVAL, "no such queue")
        queue.fast.fast = 0
        self.server.doorbell_watch.remove(queue)
        queue.destroyed = True
        queue.processor.stop(join_timeout_s=4.0)

    # events
    def nr_08(self, a, extra, fds):  # CREATE_EVENT
        client = self.client
        with client._lock:
            types = client.events[protocol.EVENTS_TYPE:protocol.EVENTS_TYPE + protocol.MAX_EVENTS]
            free = np.flatnonzero(types[1:] == 0)
            if free.size == 0:
                raise ServerError(ENOMEM, "all 4095 events in use")
            eid = int(free[0]) + 1
            etype = _u32(a, 12)
            types[eid] = etype if etype else 0xFF  # 0 means free: signal events are 0xFF
            client.events[protocol.EVENTS_AUTO_RESET + eid] = 1 if _u32(a, 16) else 0
            words = client.events[:protocol.EVENTS_PAGE_BYTES].view(np.uint32)
            words[protocol.EVENTS_SIGNALED // 4 + eid] = 0  # a reused id starts unsignaled
            words[protocol.EVENTS_CONSUMED // 4 + eid] = words[protocol.EVENTS_FIRED // 4 + eid]
        if _u64(a, 0) or client.has_events_page:
            # the process has an events page (libhsakmt passes its handle once): each
            # event's slot in it is the CP's mailbox (HWData2), as KFD's signal page
            client.has_events_page = True
            _put64(a, 0, MMAP_TYPE_EVENTS)
        _put32(a, 8, eid)  # event_trigger_data
        _put32(a, 24, eid)
        _put32(a, 28, eid)  # event_slot_index
        return None

    def nr_09(self, a, extra, fds):  # DESTROY_EVENT
        eid = _u32(a, 0)
        if not 0 < eid < protocol.MAX_EVENTS:
            raise ServerError(EINVAL, "no such event")
        self.client.events[protocol.EVENTS_TYPE + eid] = 0


class Render:
    """The render node's DRM ioctls libdrm makes (amdgpu_device_initialize)."""

    def __init__(self, server: Server, minor: int) -> None:
        self.server = server
        self.minor = minor

    def handle(self, request: int, args: bytearray, extra: bytes) -> Answer:
        nr = request & 0xFF
        if nr == 0x05:  # DRM_IOCTL_GET_CLIENT: the one client, authenticated
            if _u32(args, 0) != 0:
                raise ServerError(EINVAL, "no such client")
            _put32(args, 4, 1)
            return Answer(bytes(args))
        node = self.server.node_by_minor(self.minor)
        try:
            out = drm.answer(request, bytes(args), node)
            writes = drm.pointer_writes(request, bytes(args), node)
        except OSError as exc:
            raise ServerError(exc.errno or EINVAL, "unknown" if exc.errno == EINVAL else
                              str(exc)) from None
        return Answer(out, writes)


# --- the server ---------------------------------------------------------------------------
class Server:
    def __init__(self, spec: str, run: Path, idle_exit_s: float = IDLE_EXIT_S) -> None:
        self.spec = spec
        self.run = run
        self.idle_exit_s = idle_exit_s
        self.gpus: list[GpuModel] = parse_node(spec)
        for tree in ("sys", "proc", "dev"):  # an earlier server's, maybe of older code
            shutil.rmtree(run / tree, ignore_errors=True)
        self.nodes: list[NodeInfo] = write_topology(run, self.gpus)
        (run / "sys/module/amdgpu/holders").mkdir(parents=True, exist_ok=True)  # lsmod reads it
        for path in ("dev/kfd", *(f"dev/dri/renderD{n.drm_render_minor}" for n in self.nodes)):
            (run / path).parent.mkdir(parents=True, exist_ok=True)
            (run / path).touch()
        self._by_gpu = {n.gpu_id: n for n in self.nodes}
        self.lib = _load_devside()
        self.doorbell_watch = DoorbellWatch(self.lib)
        self.clients: dict[int, Client] = {}
        self._lock = threading.Lock()
        self._connections = 0
        self._idle_since = time.monotonic()
        self._said: set[tuple[int, int]] = set()
        self._graveyard: list[tuple[float, np.ndarray]] = []

    def bury(self, arrays: list[np.ndarray]) -> None:
        """Keep freed mappings for a while before they are unmapped: the C helpers (the
        doorbell watch, signal atomics) may hold a raw address into them for a moment after
        the Python side let go, and a packet processor may still finish a kernel."""
        now = time.monotonic()
        with self._lock:
            self._graveyard = [(t, a) for t, a in self._graveyard if now - t < GRACE_S]
            self._graveyard.extend((now, a) for a in arrays)

    def node(self, gpu_id: int) -> NodeInfo:
        node = self._by_gpu.get(gpu_id)
        if node is None:
            raise ServerError(EINVAL, f"no GPU with gpu_id {gpu_id}")
        return node

    def node_by_minor(self, minor: int) -> NodeInfo:
        return next(n for n in self.nodes if n.drm_render_minor == minor)

    def node_of(self, gpu_id: int) -> int:
        return self.node(gpu_id).index

    def unknown(self, kind: str, request: int) -> None:
        key = (0, request)
        if key not in self._said:
            self._said.add(key)
            log.warning("unhandled %s ioctl 0x%08x (%s): EINVAL", kind, request,
                        ioctl_name(request))

    def inject_fault(self, pid: int, address: int) -> None:
        """Tests: client `pid` takes a GPU memory fault at `address` on each GPU it has
        queues on, as if one of its kernels had made it (its queues there stop for good)."""
        with self._lock:
            clients = [c for c in self.clients.values() if c.pid == pid]
        for client in clients:
            gpus = {q.node.gpu_id for q in list(client.queues.values())}
            for gpu_id in sorted(gpus):
                log.warning("client %d: injected GPU memory fault at 0x%x on GPU 0x%x", pid,
                            address, gpu_id)
                client.memory_fault(address, gpu_id)

    def status(self) -> dict:
        with self._lock:
            clients = list(self.clients.values())
        return {"node": self.spec, "pid": os.getpid(),
                # freed mappings kept for GRACE_S (each holds a descriptor: Python's mmap
                # keeps a duplicate of the memfd)
                "buried": len(self._graveyard),
                "clients": [{"pid": c.pid, "allocations": len(c.bos),
                             "bytes": sum(b.size for b in c.bos.values()),
                             "queues": len(c.queues),
                             # barrier packets the doorbell watch retired without Python
                             "barriers_taken": sum(int(q.fast.taken)
                                                   for q in list(c.queues.values())),
                             "aql": [_state(q) for q in list(c.queues.values())
                                     if isinstance(q, ServerQueue)]}
                            for c in clients]}

    # connections
    def serve_forever(self, listener: socket.socket) -> None:
        listener.settimeout(1.0)
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                with self._lock:
                    idle = self._connections == 0 and (
                        time.monotonic() - self._idle_since > self.idle_exit_s)
                if idle:
                    log.info("no client for %.0f s: exiting", self.idle_exit_s)
                    return
                continue
            with self._lock:
                self._connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        # the session's client, known here even when the session ends in an exception (a
        # client killed with a reply unread ends in ECONNRESET: it was once never closed,
        # its queues ran on and status listed the dead process)
        opened: list[Client] = []
        client: Client | None = None
        try:
            self._session(conn, opened)
        except (ConnectionError, EOFError):
            pass  # the client went away
        except Exception:
            log.exception("connection of client %s failed", opened[0].pid if opened else "?")
        finally:
            conn.close()
            client = opened[0] if opened else None
            if client is not None:
                with self._lock:
                    self.clients.pop(id(client), None)
                log.info(client.close())
                opened.clear()
                client = None
                _give_back_freed_memory()
            with self._lock:
                self._connections -= 1
                if self._connections == 0:
                    self._idle_since = time.monotonic()

    def _session(self, conn: socket.socket, opened: list[Client]) -> None:
        head, fds = _recv_head(conn)
        op, kind, minor, _arglen, _extralen, version, pid = head
        if op in (protocol.OP_HOLD, protocol.OP_RELEASE):
            if op == protocol.OP_HOLD:
                self.doorbell_watch.hold()
            else:
                self.doorbell_watch.release()
            op = protocol.OP_STATUS
        if op == protocol.OP_FAULT:
            self.inject_fault(pid, minor)
            op = protocol.OP_STATUS
        if op == protocol.OP_STATUS:
            body = json.dumps(self.status()).encode()
            conn.sendall(protocol.REPLY.pack(0, len(body), 0, 0) + body)
            return
        if op != protocol.OP_HELLO:
            return
        if version != protocol.VERSION:
            log.warning("client %d speaks protocol %d, this server %d: refused", pid, version,
                        protocol.VERSION)
            _send(conn, -EPROTO, Answer(b""))
            return
        client = None
        if kind == protocol.KIND_KFD:
            client = Client(self, pid)
            opened.append(client)
            with self._lock:
                self.clients[id(client)] = client
            log.info("client %d opened /dev/kfd", pid)
            _send(conn, 0, Answer(b"", fds=[(0, protocol.EVENTS_PAGE_BYTES, client.events_fd)]))
            handler: Any = Kfd(self, client)
        else:
            if not any(n.drm_render_minor == minor for n in self.nodes):
                _send(conn, -ENOENT, Answer(b""))
                return
            _send(conn, 0, Answer(b""))
            handler = Render(self, int(minor))
        while True:
            try:
                head, fds = _recv_head(conn)
            except EOFError:
                return
            op, kind, request, arglen, extralen, _nfds, _pid = head
            args = bytearray(_recv_exact(conn, arglen))
            extra = _recv_exact(conn, extralen)
            try:
                if (request >> 8) & 0xFF == ord("K") and isinstance(handler, Kfd):
                    answer = handler.handle(request & 0xFF, args, extra, fds)
                elif isinstance(handler, Render):
                    answer = handler.handle(request, args, extra)
                else:
                    raise ServerError(ENOTTY, "unknown")
                ret = 0
            except ServerError as exc:
                if str(exc) == "unknown":
                    self.unknown("KFD" if kind == protocol.KIND_KFD else "DRM", request)
                else:
                    log.info("client %d: %s refused: %s", pid, ioctl_name(request), exc)
                ret, answer = -exc.errno, Answer(bytes(args))
            except MemoryFault as exc:
                log.info("client %d: %s: %s", pid, ioctl_name(request), exc)
                ret, answer = -EINVAL, Answer(bytes(args))
            finally:
                for fd in fds:
                    os.close(fd)
            _send(conn, ret, answer)
            for fd in answer.close_after:
                os.close(fd)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _recv_head(conn: socket.socket) -> tuple[tuple, list[int]]:
    size = protocol.REQUEST.size
    data, fds, _flags, _addr = socket.recv_fds(conn, size, 4)
    if not data:
        raise EOFError
    if len(data) < size:
        data += _recv_exact(conn, size - len(data))
    return protocol.REQUEST.unpack(data), list(fds)


def _send(conn: socket.socket, ret: int, answer: Answer) -> None:
    body = bytearray(protocol.REPLY.pack(ret, len(answer.args), len(answer.writes),
                                         len(answer.fds)))
    body += answer.args
    for addr, data in answer.writes:
        body += protocol.WRITE.pack(addr, len(data), 0) + data
    for key, size, _fd in answer.fds:
        body += protocol.KEY.pack(key, size)
    fds = [fd for _k, _s, fd in answer.fds]
    if fds:
        socket.send_fds(conn, [bytes(body)], fds)
    else:
        conn.sendall(body)


# --- starting -----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hsa.emulated.server",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon", action="store_true",
                        help="detach; return once the socket listens")
    parser.add_argument("--idle-exit-s", type=float, default=IDLE_EXIT_S,
                        help="exit after this long without a client (default %(default)s)")
    parser.add_argument("--if-absent", action="store_true",
                        help="exit quietly when a server for the node already runs")
    opts = parser.parse_args(argv)
    spec = os.environ.get(protocol.NODE_ENV) or protocol.DEFAULT_NODE
    try:
        parse_node(spec)
    except (ValueError, DeviceError) as exc:
        print(f"amdgpu emulated kernel: {exc}", file=sys.stderr)
        return 2
    run = protocol.run_dir(spec)
    run.mkdir(parents=True, exist_ok=True)
    if opts.if_absent:
        lock = _lock(run)
        if lock is None:
            return 0
        os.close(lock)
    if opts.daemon:
        return _daemonize(spec, run, opts.idle_exit_s)
    return _serve(spec, run, opts.idle_exit_s)


def _lock(run: Path) -> int | None:
    fd = os.open(run / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _holder(run: Path) -> str:
    try:
        return (run / "lock").read_text().strip() or "?"
    except OSError:
        return "?"


def _one_malloc_arena() -> None:
    """Every thread of the server allocates from glibc's main arena. glibc gives a thread
    that allocates while others do an arena of its own (up to 8 per core), and the ISA
    executor raises the trim threshold so freed memory stays mapped (hsa/virtual/isa/heap.py):
    each arena kept the peak of the threads that used it. The server makes a thread per
    connection and per queue of every client, so with clients coming and going it grew
    an arena of ~11 MiB, nearly all free, whenever more threads than before worked at once
    (an hour's soak: 73 -> 269 MiB, Python's own objects flat). The threads run under the
    interpreter lock, so one arena costs them next to no waiting. Before any thread starts:
    an arena made earlier stays."""
    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):
        pass  # not glibc: its allocator, its rules


def _give_back_freed_memory() -> None:
    """A client has gone, the server's idle point: its objects are collected now, and the
    heap pages its work freed go back to the kernel. A client's objects hold each other
    (queues, signals, the client), so only the cycle collector frees them and the mappings
    they view; its thresholds count objects, not the megabytes and descriptors behind them,
    so dead clients piled up between full collections (a 6-minute soak: 5 of 7 Client
    objects dead, the server's descriptors 110 -> 190 beyond the freed mappings it keeps on
    purpose). The executor's raised trim threshold (for one dispatch's temporaries) would
    keep the freed heap for good: malloc_trim."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc


def _serve(spec: str, run: Path, idle_exit_s: float, ready_fd: int | None = None) -> int:
    _one_malloc_arena()
    lock = _lock(run)
    if lock is None:
        print(f"amdgpu emulated kernel: a device server for node {spec} already runs (pid "
              f"{_holder(run)}, {run}); use it, or stop it first", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    import faulthandler
    import signal

    faulthandler.enable(all_threads=True)  # a fatal signal: every thread's stack to the log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: stacks to the log
    signal.signal(signal.SIGUSR2, lambda *_: log.info("memory: %s", _memory_report()))
    path = run / "sock"
    _log_termination(path)  # before any other thread: they all inherit the blocked mask
    server = Server(spec, run, idle_exit_s)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    log.info("device server for %s (pid %d) listening on %s", spec, os.getpid(), path)
    if ready_fd is not None:
        os.write(ready_fd, b"1")
        os.close(ready_fd)
    try:
        server.serve_forever(listener)
    finally:
        path.unlink(missing_ok=True)
    return 0


def _memory_report() -> str:
    """kill -USR2: where the server's memory is (RSS; glibc's arenas from malloc_info:
    bytes the arenas hold from the kernel and bytes free in them; tracemalloc's top
    lines when the server runs with PYTHONTRACEMALLOC)."""
    import re
    import tracemalloc

    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * PAGE
    parts = [f"rss {rss >> 20} MiB, threads {threading.active_count()}"]
    try:
        libc = ctypes.CDLL(None)
        buf, size = ctypes.c_char_p(), ctypes.c_size_t()
        libc.open_memstream.restype = ctypes.c_void_p
        stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        xml = ctypes.string_at(buf, size.value).decode()
        libc.free(buf)
        heaps = []
        for part in xml.split('<heap nr="')[1:]:
            part = part.split("</heap>")[0]
            free = sum(int(v) for v in re.findall(r'<total type="(?:fast|rest)"[^>]*size="(\d+)"',
                                                   part))
            cur = re.search(r'<system type="current" size="(\d+)"', part)
            nr = part.split('"')[0]
            heaps.append(f"{nr}:{int(cur[1]) >> 20 if cur else '?'}M/"
                         f"{free >> 20}Mfree")
        parts.append("arenas " + " ".join(heaps))
        tail = xml[xml.rfind("</heap>"):]
        parts.append("total " + " ".join(f"{k}={int(v) >> 20}M" for k, v in re.findall(
            r'<(?:total|system) type="(\w+)"[^>]*size="(\d+)"', tail)))
    except (OSError, AttributeError) as exc:
        parts.append(f"no malloc_info: {exc}")
    objects = gc.get_objects()
    from hsa.virtual.isa.executor import Program

    count = {kind: sum(isinstance(o, kind) for o in objects)
             for kind in (Client, ServerQueue, _RingQueue, Bo, Program)}
    parts.append("objects: " + ", ".join(f"{k.__name__} {n}" for k, n in count.items()))
    del objects
    if tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot()
        stats = snap.statistics("lineno")
        parts.append(f"traced {sum(s.size for s in stats) >> 20} MiB; top: " + "; ".join(
            f"{s.traceback[0].filename.rsplit('/', 2)[-1]}:{s.traceback[0].lineno} "
            f"{s.size >> 10} KiB x{s.count}" for s in stats[:12]))
        first = _FIRST_SNAPSHOT.setdefault("snapshot", snap)
        if first is not snap:
            parts.append("grown since the first report: " + "; ".join(
                f"{s.traceback[0].filename.rsplit('/', 2)[-1]}:{s.traceback[0].lineno} "
                f"{s.size_diff / 1024:+.0f} KiB {s.count_diff:+d}"
                for s in snap.compare_to(first, "lineno")[:12]))
    return " | ".join(parts)


_FIRST_SNAPSHOT: dict[str, Any] = {}  # _memory_report's first tracemalloc snapshot


def _log_termination(sock: Path) -> None:
    """A server ended by SIGTERM, SIGINT or SIGHUP says so in its log, with the sender (a
    soak once lost its server with nothing logged: `pkill -f hsa.emulated.server` from
    another session would look exactly like that). The signals are blocked in every thread
    and taken by one that waits for them (sigwaitinfo gives the sender's pid)."""
    import signal

    wanted = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

    def wait() -> None:
        info = signal.sigwaitinfo(wanted)
        try:
            sender = Path(f"/proc/{info.si_pid}/cmdline").read_bytes().replace(b"\0", b" ")
            who = sender.decode(errors="replace").strip()[:200]
        except OSError:
            who = "gone"
        log.warning("terminated by %s from pid %d (%s): exiting", signal.Signals(
            info.si_signo).name, info.si_pid, who)
        sock.unlink(missing_ok=True)
        logging.shutdown()
        os._exit(128 + info.si_signo)

    threading.Thread(target=wait, name="termination", daemon=True).start()


def _daemonize(spec: str, run: Path, idle_exit_s: float) -> int:
    """Fork a detached server (log: <run>/server.log) and return once it listens, or with
    its one-line refusal."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setsid()
        if os.fork():
            os._exit(0)
        logfd = os.open(run / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(logfd, 1)
        os.dup2(logfd, 2)
        code = 1
        try:
            code = _serve(spec, run, idle_exit_s, ready_fd=w)
        except BaseException:
            logging.getLogger().exception("device server failed")
        os._exit(code)
    os.close(w)
    os.waitpid(pid, 0)
    ready = os.read(r, 1)
    os.close(r)
    if ready == b"1":
        return 0
    if (run / "lock").exists() and _holder(run) not in ("?", ""):
        return 0  # another server got there first: it serves this node
    print(f"amdgpu emulated kernel: the device server for {spec} did not start; see "
          f"{run}/server.log", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
