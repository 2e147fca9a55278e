"""`RocrProvider`: the HSA provider interface over the real ROCr library (ctypes).

One provider is one `hsa_init` (ROCr counts them; `shut_down` gives it back). Everything the
provider hands out (queues, signals, allocations, executables, code object readers) is
tracked, so `shut_down` can release what the caller forgot and keep every ctypes callback
alive for as long as ROCr may call it.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from ctypes import byref, c_bool, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any

import numpy as np

from ground.errors import (
    DeviceError,
    DeviceLost,
    HsaError,
    HsaUnavailable,
    MemoryFault,
    QueueError,
    SignalTimeout,
)
from ground.status import (
    HSA_STATUS_ERROR,
    HSA_STATUS_ERROR_INVALID_AGENT,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_INVALID_QUEUE,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
    HSA_STATUS_ERROR_MEMORY_FAULT,
)
from hsa.provider import (
    AgentInfo,
    Capability,
    DeviceType,
    Executable,
    GlobalFlag,
    HsaProvider,
    KernelSymbol,
    LinkInfo,
    LinkType,
    PoolAccess,
    PoolInfo,
    Queue,
    QueueErrorCallback,
    QueueType,
    Segment,
    SignalCondition,
)

from . import structs as S
from .api import HsaApi, error_for_status
from .features import library_capabilities
from .library import NEXT_STEP, LibraryVersion, library_path, library_version, load_library

UINT64_MAX = (1 << 64) - 1

_init_lock = threading.Lock()
# Per loaded library: hsa_init calls this process made that are not shut down yet. ROCr
# forgets its system event handlers when the last one is shut down, so the fault handler is
# registered again whenever a library's count goes from 0 to 1.
_init_counts: dict[int, int] = {}
# Per loaded library: the last GPU memory fault ROCr reported ({agent, address, reason}).
_faults: dict[int, dict[str, int]] = {}
# memory_copy's wait: a slice between looks for a lost agent; the most a copy may take
# (plus its size at the slowest copy engine's speed, the emulated one on a loaded host)
COPY_SLICE_S = 0.25
COPY_TIMEOUT_S = 120.0
COPY_SLOWEST_BYTES_PER_S = 16 << 20

# Per loaded library: agent -> the GPU memory fault that lost it for this process. ROCr's
# VM-fault handler reports one fault per process (its handler returns false, "we are done")
# and amdkfd evicts the process's queues on that GPU (kfd_dqm_evict_pasid): nothing runs
# there again until the last hsa_shut_down closes /dev/kfd. Watchers: (agent, WeakMethod).
_lost: dict[int, dict[int, dict[str, Any]]] = {}
_lost_watchers: dict[int, list[tuple[int, Any]]] = {}
# System event handlers cannot be unregistered: keep their ctypes thunks for the process.
_system_event_thunks: list[Any] = []


def _agent_lost(key: int, agent: int, address: int, reason: int) -> None:
    """ROCr reported a GPU memory fault on `agent` (its event thread): the agent is lost."""
    lost = _lost.setdefault(key, {})
    if agent in lost:
        return
    lost[agent] = {"address": address, "reason": reason}
    for watched, callback in list(_lost_watchers.get(key, [])):
        if watched == agent:
            _call_watcher(callback)


def _call_watcher(callback: Any) -> None:
    method = callback()
    if method is not None:
        method()


def init_count() -> int:
    """How many RocrProviders hold an hsa_init right now."""
    return sum(_init_counts.values())


def _library_key(lib: Any) -> int:
    return int(getattr(lib, "_handle", 0) or id(lib))


def condition_holds(condition: int, value: int, compare: int) -> bool:
    """`value condition compare` as the HSA signal conditions define it (signed 64-bit)."""
    if condition == SignalCondition.EQ:
        return value == compare
    if condition == SignalCondition.NE:
        return value != compare
    if condition == SignalCondition.LT:
        return value < compare
    if condition == SignalCondition.GTE:
        return value >= compare
    raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, f"unknown signal condition {condition}")


def diagnose_init_failure(
    status: int, text: str, kfd: str = "/dev/kfd", dri: str = "/dev/dri"
) -> str:
    """One line: why hsa_init failed here, and what to do instead."""
    if not os.path.exists(kfd):
        cause = (
            f"{kfd} does not exist (no amdgpu kernel driver, no AMD GPU, or a container "
            f"started without --device {kfd})"
        )
    elif not os.access(kfd, os.R_OK | os.W_OK):
        cause = f"no read/write permission on {kfd} (join the 'render' and 'video' groups)"
    else:
        nodes = [os.path.join(dri, n) for n in _listdir(dri) if n.startswith("renderD")]
        if nodes and not any(os.access(n, os.R_OK | os.W_OK) for n in nodes):
            cause = f"no read/write permission on {dri}/renderD* (join the 'render' group)"
        else:
            cause = f"ROCr could not start on {kfd}: {text}"
    return f"{cause}; {NEXT_STEP}"


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _u64_array(values: Sequence[int]) -> ctypes.Array:
    return (c_uint64 * max(1, len(values)))(*[int(v) for v in values])


class RocrQueue(Queue):
    """An AQL queue created by hsa_queue_create; indices go through ROCr's own atomics."""

    def __init__(self, api: HsaApi, address: int, state: dict[str, Any]):
        header = S.HsaQueue.from_address(address)
        self.handle = address
        self.base_address = int(header.base_address or 0)
        self.size = int(header.size)
        self.id = int(header.id)
        self.doorbell_signal = int(header.doorbell_signal)
        self.queue_type = QueueType(header.type)
        self.features = int(header.features)
        ring = (ctypes.c_uint8 * (self.size * 64)).from_address(self.base_address)
        self.ring = np.ctypeslib.as_array(ring)
        self._state = state  # written by the error callback on ROCr's event thread
        self._arg = c_void_p(address)
        self._load_write = api.hsa_queue_load_write_index_scacquire
        self._add_write = api.hsa_queue_add_write_index_scacq_screl
        self._store_write = api.hsa_queue_store_write_index_screlease
        self._load_read = api.hsa_queue_load_read_index_scacquire
        self._store_signal = api.hsa_signal_store_screlease
        # byte 0: destroyed (set by _invalidate), read by native_ops' users in one load
        self.flags = bytearray(8)

    @property
    def destroyed(self) -> bool:
        return bool(self.flags[0])

    @destroyed.setter
    def destroyed(self, value: bool) -> None:
        self.flags[0] = 1 if value else 0

    def native_ops(self) -> dict[str, Any]:
        """What a compiled producer (amdgpu.hsa_backend's hot path) needs to call ROCr's
        hsa_queue_add_write_index_scacq_screl and hsa_signal_store_screlease itself, as
        add_write_index and doorbell do through ctypes (~0.2 us a call): the two functions'
        addresses, this queue's hsa_queue_t address and its doorbell signal. It must read
        `destroyed` (byte 0 of `flags`) first and call the methods once that is true (they
        raise)."""
        return {
            "add_write_fn": ctypes.cast(self._add_write, c_void_p).value,
            "store_signal_fn": ctypes.cast(self._store_signal, c_void_p).value,
            "queue_address": self.handle, "doorbell_signal": self.doorbell_signal,
            "queue": self, "flags": self.flags,
        }

    def load_write_index(self) -> int:
        return self._load_write(self._arg)

    def add_write_index(self, n: int) -> int:
        return self._add_write(self._arg, n)

    def store_write_index(self, value: int) -> None:
        self._store_write(self._arg, value)

    def load_read_index(self) -> int:
        return self._load_read(self._arg)

    def doorbell(self, packet_id: int) -> None:
        self._store_signal(self.doorbell_signal, packet_id)

    @property
    def error(self) -> BaseException | None:
        return self._state.get("error")

    @property
    def amd_queue(self) -> S.AmdQueue:
        """The amd_queue_t behind this queue (read-only use: dispatch ids, properties)."""
        return S.AmdQueue.from_address(self.handle)

    def _invalidate(self) -> None:
        """After hsa_queue_destroy: fail loudly instead of touching freed memory."""

        def destroyed(*_: Any) -> Any:
            raise QueueError(HSA_STATUS_ERROR_INVALID_QUEUE, f"queue {self.id} was destroyed")

        self.destroyed = True
        self._load_write = self._add_write = self._store_write = destroyed
        self._load_read = self._store_signal = destroyed
        self.ring = np.zeros(0, dtype=np.uint8)

    def __repr__(self) -> str:
        return f"RocrQueue(id={self.id}, size={self.size}, handle=0x{self.handle:x})"


class RocrProvider(HsaProvider):
    """HSA through libhsa-runtime64. Raises HsaUnavailable where ROCr cannot start."""

    name = "rocr"

    def __init__(self, library: Any = None, *, require_gpu: bool = True):
        self._lib = library if library is not None else load_library()
        self._path = library_path(self._lib) if isinstance(self._lib, ctypes.CDLL) else ""
        self._version_info = library_version(self._path) if self._path else LibraryVersion(path="")
        self.api = HsaApi(self._lib, self._path)
        self._initialised = False
        status = self.api.hsa_init()
        if status != 0:
            raise HsaUnavailable(
                status,
                diagnose_init_failure(status, self.api.status_string(status)),
                "hsa_init",
            )
        self._key = _library_key(self._lib)
        with _init_lock:
            first = _init_counts.get(self._key, 0) == 0
            _init_counts[self._key] = _init_counts.get(self._key, 0) + 1
        self._initialised = True
        self._queues: dict[int, tuple[RocrQueue, Any]] = {}  # address -> (queue, callback)
        self._retired_thunks: list[Any] = []
        self._signals: set[int] = set()
        self._copy_signals: list[int] = []  # memory_copy's, each free for the next copy
        self._copy_lock = threading.Lock()
        self._allocations: set[int] = set()
        self._readers: dict[int, Any] = {}  # reader -> the bytes ROCr reads from
        self._executables: dict[int, Executable] = {}
        self._agents: list[AgentInfo] | None = None
        self._last_fault = _faults.setdefault(self._key, {})
        self._faults_raised = self._last_fault.get("count", 0)  # faults before us are not ours
        try:
            self._timestamp_hz = self._system_u64(S.HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY) or 10**9
            if first:
                self._install_fault_handler()
            if require_gpu and not self.gpu_agents():
                raise HsaUnavailable(
                    HSA_STATUS_ERROR_INVALID_AGENT,
                    f"ROCr started but found no GPU agent (no supported AMD GPU, or "
                    f"HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES hide them); {NEXT_STEP}",
                    "hsa_iterate_agents",
                )
        except BaseException:
            self.shut_down()
            raise

    # --- runtime ---------------------------------------------------------------------------
    def shut_down(self) -> None:
        if not self._initialised:
            return
        for address, (queue, _callback) in list(self._queues.items()):
            self._call_quietly(self._destroy_queue, address, queue)
        for exe in list(self._executables.values()):
            self._call_quietly(self.api.hsa_executable_destroy, exe.handle)
        for reader in list(self._readers):
            self._call_quietly(self.api.hsa_code_object_reader_destroy, reader)
        for signal in list(self._signals):
            self._call_quietly(self.api.hsa_signal_destroy, signal)
        for address in list(self._allocations):
            self._call_quietly(self.api.hsa_amd_memory_pool_free, address)
        self._executables.clear()
        self._readers.clear()
        self._signals.clear()
        self._copy_signals.clear()
        self._allocations.clear()
        self._initialised = False
        with _init_lock:
            _init_counts[self._key] -= 1
            if not _init_counts[self._key]:  # ROCr closes /dev/kfd: a new process context
                _lost.pop(self._key, None)
        self.api.hsa_shut_down()  # raises HsaError through errcheck

    @staticmethod
    def _call_quietly(fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except HsaError:
            pass  # shut_down releases what it can; ROCr frees the rest in hsa_shut_down

    def capabilities(self) -> dict[str, Capability]:
        return library_capabilities(self._lib, self._version_info)

    def version(self) -> str:
        major = self._system_value(S.HSA_SYSTEM_INFO_VERSION_MAJOR, ctypes.c_uint16)
        minor = self._system_value(S.HSA_SYSTEM_INFO_VERSION_MINOR, ctypes.c_uint16)
        detail = self._version_info.describe()
        build = c_char_p()
        try:
            self.api.hsa_system_get_info(S.HSA_AMD_SYSTEM_INFO_BUILD_VERSION, byref(build))
            if build.value:
                detail += f", build {build.value.decode(errors='replace')}"
        except HsaError:
            pass  # older ROCr: no build string
        return f"{major}.{minor} ({detail})"

    @property
    def library_version(self) -> LibraryVersion:
        return self._version_info

    def _system_value(self, attribute: int, ctype: Any) -> int:
        value = ctype()
        self.api.hsa_system_get_info(attribute, byref(value))
        return int(value.value)

    def _system_u64(self, attribute: int) -> int:
        return self._system_value(attribute, c_uint64)

    def _install_fault_handler(self) -> None:
        """Report GPU memory faults as MemoryFault (ROCr aborts the process without one)."""
        register = self.api.hsa_amd_register_system_event_handler
        if register is None:
            return
        faults = self._last_fault
        key = self._key

        def on_event(event_ptr: int, _data: int) -> int:
            try:
                event = S.AmdEvent.from_address(event_ptr)
                if event.event_type == S.HSA_AMD_GPU_MEMORY_FAULT_EVENT:
                    faults["agent"] = int(event.memory_fault.agent)
                    faults["address"] = int(event.memory_fault.virtual_address)
                    faults["reason"] = int(event.memory_fault.fault_reason_mask)
                    faults["count"] = faults.get("count", 0) + 1
                    _agent_lost(key, faults["agent"], faults["address"], faults["reason"])
            except Exception:  # noqa: BLE001 - never let an exception cross into ROCr
                return HSA_STATUS_ERROR
            return S.HSA_STATUS_SUCCESS

        thunk = S.SYSTEM_EVENT_CALLBACK(on_event)
        _system_event_thunks.append(thunk)
        try:
            register(thunk, None)
        except HsaError:
            pass  # faults then abort inside ROCr, as they would without this provider

    def agent_lost(self, agent: int) -> dict[str, Any] | None:
        return _lost.get(self._key, {}).get(int(agent))

    def watch_agent_lost(self, agent: int, callback: Any) -> None:
        with _init_lock:
            watchers = _lost_watchers.setdefault(self._key, [])
            watchers[:] = [(a, ref) for a, ref in watchers if ref() is not None]
            watchers.append((int(agent), callback))
        if self.agent_lost(agent) is not None:
            _call_watcher(callback)

    @property
    def last_memory_fault(self) -> dict[str, int]:
        """{agent, address, reason} of the last GPU memory fault ROCr reported, or {}."""
        return dict(self._last_fault)

    # --- agents and pools --------------------------------------------------------------------
    def _iterate(self, iterate: Callable[..., int], *args: Any) -> list[int]:
        """Run one of the hsa_*_iterate_* calls and collect the handles it yields."""
        handles: list[int] = []
        failure: list[BaseException] = []

        def collect(handle: int, _data: int) -> int:
            try:
                handles.append(int(handle))
            except BaseException as exc:  # noqa: BLE001 - stop the walk, re-raise below
                failure.append(exc)
                return HSA_STATUS_ERROR
            return S.HSA_STATUS_SUCCESS

        thunk = S.HANDLE_ITERATE_CALLBACK(collect)
        try:
            iterate(*args, thunk, None)
        except HsaError:
            if failure:
                raise failure[0] from None
            raise
        return handles

    def _agent_value(self, agent: int, attribute: int, ctype: Any) -> Any:
        value = ctype()
        self.api.hsa_agent_get_info(agent, attribute, byref(value))
        return value.value

    def _agent_text(self, agent: int, attribute: int) -> str:
        buf = ctypes.create_string_buffer(64)  # char[64] per hsa.h
        self.api.hsa_agent_get_info(agent, attribute, buf)
        return buf.value.decode(errors="replace").strip()

    def _agent_isa(self, agent: int) -> str:
        isas = self._iterate(self.api.hsa_agent_iterate_isas, agent)
        if not isas:
            return ""
        length = c_uint32()
        self.api.hsa_isa_get_info_alt(isas[0], S.HSA_ISA_INFO_NAME_LENGTH, byref(length))
        buf = ctypes.create_string_buffer(length.value + 1)
        self.api.hsa_isa_get_info_alt(isas[0], S.HSA_ISA_INFO_NAME, buf)
        name = buf.value.decode(errors="replace").strip()
        return name[len(S.ISA_NAME_PREFIX) :] if name.startswith(S.ISA_NAME_PREFIX) else name

    def _agent_info(self, agent: int) -> AgentInfo | None:
        kind = self._agent_value(agent, S.HSA_AGENT_INFO_DEVICE, c_uint32)
        if kind not in DeviceType._value2member_map_:
            return None  # a device type this driver cannot use (newer ROCr: AIE = 3)
        device_type = DeviceType(kind)
        name = self._agent_text(agent, S.HSA_AGENT_INFO_NAME)
        if device_type == DeviceType.CPU:
            product = self._optional_text(agent, S.HSA_AMD_AGENT_INFO_PRODUCT_NAME)
            name = product or name
        u32 = c_uint32
        return AgentInfo(
            handle=agent,
            name=name,
            device_type=device_type,
            isa=self._agent_isa(agent) if device_type == DeviceType.GPU else "",
            wavefront_size=self._agent_value(agent, S.HSA_AGENT_INFO_WAVEFRONT_SIZE, u32),
            compute_units=self._agent_value(agent, S.HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, u32),
            queue_min_size=self._agent_value(agent, S.HSA_AGENT_INFO_QUEUE_MIN_SIZE, u32),
            queue_max_size=self._agent_value(agent, S.HSA_AGENT_INFO_QUEUE_MAX_SIZE, u32),
            node=self._agent_value(agent, S.HSA_AGENT_INFO_NODE, u32),
            vendor=self._agent_text(agent, S.HSA_AGENT_INFO_VENDOR_NAME),
            uuid=self._optional_text(agent, S.HSA_AMD_AGENT_INFO_UUID)
            if device_type == DeviceType.GPU else "",
        )

    def _optional_text(self, agent: int, attribute: int) -> str:
        try:
            return self._agent_text(agent, attribute)
        except HsaError:
            return ""

    def agents(self) -> list[AgentInfo]:
        if self._agents is None:
            handles = self._iterate(self.api.hsa_iterate_agents)
            infos = [self._agent_info(h) for h in handles]
            self._agents = [info for info in infos if info is not None]
        return list(self._agents)

    def _pool_value(self, pool: int, attribute: int, ctype: Any) -> Any:
        value = ctype()
        self.api.hsa_amd_memory_pool_get_info(pool, attribute, byref(value))
        return value.value

    def _pool_value_or(self, pool: int, attribute: int, ctype: Any, default: Any) -> Any:
        """Attributes that some pools (group, private) may not answer."""
        try:
            return self._pool_value(pool, attribute, ctype)
        except HsaError:
            return default

    def agent_pools(self, agent: int) -> list[PoolInfo]:
        pools = []
        for pool in self._iterate(self.api.hsa_amd_agent_iterate_memory_pools, agent):
            segment = Segment(self._pool_value(pool, S.HSA_AMD_MEMORY_POOL_INFO_SEGMENT, c_uint32))
            flags = 0
            if segment == Segment.GLOBAL:
                flags = self._pool_value(pool, S.HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, c_uint32)
            pools.append(
                PoolInfo(
                    handle=pool,
                    agent=agent,
                    segment=segment,
                    global_flags=GlobalFlag(flags),
                    size=self._pool_value(pool, S.HSA_AMD_MEMORY_POOL_INFO_SIZE, c_size_t),
                    granule=self._pool_value_or(
                        pool, S.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE, c_size_t, 0
                    ),
                    alignment=self._pool_value_or(
                        pool, S.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT, c_size_t, 0
                    ),
                    runtime_alloc_allowed=bool(
                        self._pool_value(
                            pool, S.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, c_bool
                        )
                    ),
                    accessible_by_all=bool(
                        self._pool_value_or(
                            pool, S.HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL, c_bool, False
                        )
                    ),
                )
            )
        return pools

    # --- memory ----------------------------------------------------------------------------
    def memory_pool_allocate(self, pool: int, size: int) -> int:
        if size <= 0:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"cannot allocate {size} bytes; ask for at least one byte",
                "hsa_amd_memory_pool_allocate",
            )
        ptr = c_void_p()
        self.api.hsa_amd_memory_pool_allocate(pool, size, 0, byref(ptr))
        address = int(ptr.value or 0)
        self._allocations.add(address)
        return address

    def memory_pool_free(self, address: int) -> None:
        self.api.hsa_amd_memory_pool_free(address)
        self._allocations.discard(address)

    def agents_allow_access(self, agents: Sequence[int], address: int) -> None:
        self.api.hsa_amd_agents_allow_access(len(agents), _u64_array(agents), None, address)

    def agent_pool_access(self, agent: int, pool: int) -> PoolAccess:
        get = self._optional("hsa_amd_agent_memory_pool_get_info")
        value = c_uint32()
        get(agent, pool, S.HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, byref(value))
        return PoolAccess(value.value)

    def agent_pool_links(self, agent: int, pool: int) -> list[LinkInfo]:
        get = self._optional("hsa_amd_agent_memory_pool_get_info")
        hops = c_uint32()
        get(agent, pool, S.HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS, byref(hops))
        if not hops.value:
            return []
        infos = (S.MemoryPoolLinkInfo * hops.value)()
        get(agent, pool, S.HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO, infos)
        out = []
        for x in infos:
            kind = LinkType(x.link_type) if x.link_type in LinkType._value2member_map_ else \
                x.link_type
            out.append(LinkInfo(kind, x.numa_distance, x.min_latency, x.max_latency,
                                x.min_bandwidth, x.max_bandwidth, x.atomic_support_32bit,
                                x.atomic_support_64bit, x.coherent_support))
        return out

    def memory_lock(self, address: int, size: int, agents: Sequence[int]) -> int:
        lock = self._optional("hsa_amd_memory_lock")
        ptr = c_void_p()
        lock(address, size, _u64_array(agents), len(agents), byref(ptr))
        return int(ptr.value or 0)

    def memory_unlock(self, address: int) -> None:
        self._optional("hsa_amd_memory_unlock")(address)

    def host_view(self, address: int, size: int) -> np.ndarray:
        if address == 0 or size < 0:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"no host view of {size} bytes at 0x{address:x}",
                "host_view",
            )
        return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))

    def memory_copy(self, dst: int, src: int, size: int, *, dst_agent: int | None = None,
                    src_agent: int | None = None) -> None:
        """A synchronous copy. With both sides' agents, on the copy engine
        (hsa_amd_memory_async_copy) with a wait of our own: ROCr's hsa_memory_copy spins on
        its blit's completion with no end, so a blit that can no longer run (the process's
        queues evicted by a GPU memory fault on another thread, a lost packet) hung the
        calling thread for good, and with it every later copy and code load behind ROCr's
        blit lock. Here such a copy ends in DeviceLost or DeviceError, one line."""
        self._refuse_if_lost(None, "hsa_memory_copy")  # its blit queue may be an evicted one
        if dst_agent is None or src_agent is None or size <= 0 or getattr(
                self.api, "hsa_amd_memory_async_copy", None) is None:
            self.api.hsa_memory_copy(dst, src, size)
            return
        with self._copy_lock:
            signal = self._copy_signals.pop() if self._copy_signals else None
        if signal is None:
            signal = self.signal_create(1)
        else:
            self.signal_store(signal, 1)
        self.memory_async_copy(dst, dst_agent, src, src_agent, size, [], signal)
        self._wait_copy(signal, size, [dst_agent, src_agent])
        with self._copy_lock:
            self._copy_signals.append(signal)

    def _wait_copy(self, signal: int, size: int, agents: list[int]) -> None:
        """Until the copy's signal is 0, in slices: DeviceLost as soon as a GPU memory fault
        stops the agent's queues, DeviceError past COPY_TIMEOUT_S (plus the size at a slow
        copy engine's speed). The signal of a copy that did not end is never reused."""
        wait = self.api.hsa_signal_wait_scacquire
        limit = COPY_TIMEOUT_S + size / COPY_SLOWEST_BYTES_PER_S
        deadline = time.monotonic() + limit
        while True:
            value = wait(signal, int(SignalCondition.EQ), 0, self._ticks(COPY_SLICE_S),
                         S.HSA_WAIT_STATE_BLOCKED)
            if value == 0:
                return
            for agent in agents:
                self._refuse_if_lost(agent, "hsa_amd_memory_async_copy")
            if time.monotonic() >= deadline:
                raise DeviceError(
                    f"hsa_amd_memory_async_copy: a copy of {size} bytes did not complete in "
                    f"{limit:.0f} s (its signal 0x{signal:x} is still {value}): the GPU's copy "
                    "engine stopped; close the device and open it in a new process")

    def _refuse_if_lost(self, agent: int | None, call: str) -> None:
        """DeviceLost instead of a call that needs ROCr's own queues on a lost agent (any
        lost agent where the call does not say which): they were evicted too and would
        never finish."""
        lost = _lost.get(self._key, {})
        fault = lost.get(int(agent)) if agent is not None else next(iter(lost.values()), None)
        if fault is None:
            return
        earlier = fault.get("report") or f"a GPU memory fault at 0x{fault['address']:x}"
        raise DeviceLost(
            f"{call}: the GPU can run nothing more in this process: {earlier} earlier; the "
            "amdgpu kernel driver stops a process's queues after a GPU memory fault: open the "
            "device in a new process")

    def memory_async_copy(
        self,
        dst: int,
        dst_agent: int,
        src: int,
        src_agent: int,
        size: int,
        dep_signals: Sequence[int],
        completion_signal: int,
    ) -> None:
        copy = self._optional("hsa_amd_memory_async_copy")
        # ROCr refuses a non-NULL dep array with a count of 0 (INVALID_ARGUMENT)
        deps = _u64_array(dep_signals) if dep_signals else None
        self._refuse_if_lost(dst_agent, "hsa_amd_memory_async_copy")
        self._refuse_if_lost(src_agent, "hsa_amd_memory_async_copy")
        copy(dst, dst_agent, src, src_agent, size, len(dep_signals), deps, completion_signal)

    def _optional(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.api, name, None)
        if fn is None:
            raise HsaError(
                HSA_STATUS_ERROR,
                f"{name} is not in {self._version_info.describe()}; use a newer ROCr "
                "(HSA_RUNTIME_PATH, /opt/rocm) or check provider.capabilities() first",
                name,
            )
        return fn

    # --- signals ---------------------------------------------------------------------------
    def signal_create(self, initial_value: int) -> int:
        handle = c_uint64()
        self.api.hsa_signal_create(initial_value, 0, None, byref(handle))
        self._signals.add(handle.value)
        return handle.value

    def signal_destroy(self, signal: int) -> None:
        self.api.hsa_signal_destroy(signal)
        self._signals.discard(signal)

    def signal_load(self, signal: int) -> int:
        return self.api.hsa_signal_load_scacquire(signal)

    def signal_store(self, signal: int, value: int) -> None:
        self.api.hsa_signal_store_screlease(signal, value)

    def signal_add(self, signal: int, value: int) -> None:
        self.api.hsa_signal_add_scacq_screl(signal, value)

    def signal_subtract(self, signal: int, value: int) -> None:
        self.api.hsa_signal_subtract_scacq_screl(signal, value)

    def signal_exchange(self, signal: int, value: int) -> int:
        return self.api.hsa_signal_exchange_scacq_screl(signal, value)

    def _ticks(self, seconds: float) -> int:
        if math.isinf(seconds) or seconds * self._timestamp_hz >= UINT64_MAX:
            return UINT64_MAX
        return max(0, int(seconds * self._timestamp_hz))

    def signal_wait(
        self, signal: int, condition: SignalCondition, compare: int, timeout_s: float
    ) -> int:
        value = self.api.hsa_signal_load_scacquire(signal)
        if condition_holds(condition, value, compare):
            return value  # already there: skip the wait machinery
        wait = self.api.hsa_signal_wait_scacquire
        deadline = time.monotonic() + timeout_s
        while True:
            # ROCr may return before the condition holds (spurious wake, timeout hint): loop.
            remaining = deadline - time.monotonic()
            value = wait(
                signal, int(condition), compare, self._ticks(remaining), S.HSA_WAIT_STATE_BLOCKED
            )
            if condition_holds(condition, value, compare):
                return value
            if time.monotonic() >= deadline:
                if self._last_fault.get("count", 0) > self._faults_raised:
                    raise self._fault_during_wait(signal)
                raise SignalTimeout(
                    HSA_STATUS_ERROR,
                    f"signal 0x{signal:x} is {value}, not {SignalCondition(condition).name} "
                    f"{compare}, after {timeout_s:g} s; check the queue for errors or wait longer",
                    "hsa_signal_wait_scacquire",
                )

    def _fault_during_wait(self, signal: int) -> MemoryFault:
        """The first wait to run out after a GPU memory fault says so, with the address."""
        fault = self._last_fault
        self._faults_raised = fault.get("count", 0)
        return MemoryFault(
            HSA_STATUS_ERROR_MEMORY_FAULT,
            f"GPU memory fault at 0x{fault.get('address', 0):x} (reason mask "
            f"0x{fault.get('reason', 0):x}) was reported, and signal 0x{signal:x} did not "
            "complete: check kernel arguments and buffer sizes, then recreate the queue",
            fault.get("address", 0),
            "hsa_signal_wait_scacquire",
        )

    def signal_wait_any(
        self,
        signals: Sequence[int],
        conditions: Sequence[SignalCondition],
        compares: Sequence[int],
        timeout_s: float,
    ) -> int:
        n = len(signals)
        if n == 0 or len(conditions) != n or len(compares) != n:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"signal_wait_any needs as many conditions and compares as signals ({n})",
                "hsa_amd_signal_wait_any",
            )
        wait_any = self.api.hsa_amd_signal_wait_any
        deadline = time.monotonic() + timeout_s
        if wait_any is None:
            return self._poll_any(signals, conditions, compares, deadline, timeout_s)
        sigs = _u64_array(signals)
        conds = (c_int32 * n)(*[int(c) for c in conditions])
        values = (c_int64 * n)(*[int(v) for v in compares])
        satisfying = c_int64()
        while True:
            remaining = deadline - time.monotonic()
            index = wait_any(
                n,
                sigs,
                conds,
                values,
                self._ticks(remaining),
                S.HSA_WAIT_STATE_BLOCKED,
                byref(satisfying),
            )
            if index < n and condition_holds(conditions[index], satisfying.value, compares[index]):
                return int(index)
            if time.monotonic() >= deadline:
                raise self._wait_any_timeout(signals, timeout_s)

    def _poll_any(
        self,
        signals: Sequence[int],
        conditions: Sequence[SignalCondition],
        compares: Sequence[int],
        deadline: float,
        timeout_s: float,
    ) -> int:
        """Fallback without hsa_amd_signal_wait_any: short blocking waits in turn."""
        slice_s = 0.0005
        while True:
            for i, signal in enumerate(signals):
                value = self.api.hsa_signal_load_scacquire(signal)
                if condition_holds(conditions[i], value, compares[i]):
                    return i
            if time.monotonic() >= deadline:
                raise self._wait_any_timeout(signals, timeout_s)
            time.sleep(slice_s)
            slice_s = min(slice_s * 2, 0.01)

    @staticmethod
    def _wait_any_timeout(signals: Sequence[int], timeout_s: float) -> SignalTimeout:
        return SignalTimeout(
            HSA_STATUS_ERROR,
            f"none of {len(signals)} signals met its condition within {timeout_s:g} s; "
            "check the queues for errors or wait longer",
            "hsa_amd_signal_wait_any",
        )

    # --- queues ----------------------------------------------------------------------------
    def queue_create(
        self,
        agent: int,
        size: int,
        queue_type: QueueType = QueueType.MULTI,
        callback: QueueErrorCallback | None = None,
    ) -> Queue:
        # the callback lives in `state`, not in the closure: a destroyed queue's thunk is
        # kept (below), and must not keep the caller's lane and device alive with it
        state: dict[str, Any] = {"callback": callback}
        faults = self._last_fault
        status_string = self.api.status_string

        def on_error(status: int, queue_ptr: int, _data: int) -> None:
            # Runs on ROCr's event thread; exceptions must not escape into C.
            try:
                text = status_string(status)
                call = f"queue {state.get('id', '?')}"
                if status in (
                    HSA_STATUS_ERROR_MEMORY_FAULT,
                    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
                ):
                    error: HsaError = MemoryFault(status, text, faults.get("address", 0), call)
                else:
                    error = error_for_status(status, text, call)
                    if type(error) is HsaError:
                        error = QueueError(status, text, call)
                state["error"] = error
                queue = state.get("queue")
                call_back = state.get("callback")
                if call_back is not None and queue is not None:
                    call_back(status, queue)
            except BaseException as exc:  # noqa: BLE001
                state.setdefault("error", exc)
                state["callback_error"] = exc

        thunk = S.QUEUE_ERROR_CALLBACK(on_error)
        out = c_void_p()
        self.api.hsa_queue_create(
            agent,
            size,
            int(queue_type),
            thunk,
            None,
            S.QUEUE_DEFAULT_SEGMENT_SIZE,
            S.QUEUE_DEFAULT_SEGMENT_SIZE,
            byref(out),
        )
        address = int(out.value or 0)
        queue = RocrQueue(self.api, address, state)
        state["queue"] = queue
        state["id"] = queue.id
        self._queues[address] = (queue, thunk)  # the thunk lives as long as the queue
        return queue

    def queue_destroy(self, queue: Queue) -> None:
        entry = self._queues.get(queue.handle)
        if entry is None or entry[0] is not queue:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_QUEUE,
                f"{queue!r} is not a live queue of this provider",
                "hsa_queue_destroy",
            )
        self._destroy_queue(queue.handle, entry[0])

    def _destroy_queue(self, address: int, queue: RocrQueue) -> None:
        queue.destroyed = True  # compiled producers stop calling ROCr for it directly now
        try:
            self.api.hsa_queue_destroy(address)
        finally:
            queue._invalidate()
            entry = self._queues.pop(address, None)
            if entry is not None:
                # ROCr's event thread may still be inside the callback: keep its thunk.
                self._retired_thunks.append(entry[1])
            queue._state.pop("callback", None)

    def profiling_set_enabled(self, queue: Queue, enabled: bool) -> None:
        self._optional("hsa_amd_profiling_set_profiler_enabled")(queue.handle, int(bool(enabled)))

    def dispatch_time(self, agent: int, signal: int) -> tuple[int, int]:
        times = S.DispatchTime()
        self._optional("hsa_amd_profiling_get_dispatch_time")(agent, signal, byref(times))
        return self._ticks_to_ns(times.start), self._ticks_to_ns(times.end)

    def system_timestamp_ns(self) -> int:
        return self._ticks_to_ns(self._system_u64(S.HSA_SYSTEM_INFO_TIMESTAMP))

    def _ticks_to_ns(self, ticks: int) -> int:
        return ticks * 10**9 // self._timestamp_hz

    # --- executables -----------------------------------------------------------------------
    def code_object_reader_create_from_memory(self, data: bytes) -> int:
        # ROCr reads from this memory until the reader is destroyed: keep our own copy.
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        reader = c_uint64()
        self.api.hsa_code_object_reader_create_from_memory(buf, len(data), byref(reader))
        self._readers[reader.value] = buf
        return reader.value

    def code_object_reader_destroy(self, reader: int) -> None:
        self.api.hsa_code_object_reader_destroy(reader)
        self._readers.pop(reader, None)

    def executable_create(self) -> Executable:
        handle = c_uint64()
        self.api.hsa_executable_create_alt(
            S.HSA_PROFILE_FULL, S.HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, None, byref(handle)
        )
        exe = Executable(handle=handle.value)
        self._executables[exe.handle] = exe
        return exe

    def executable_load_agent_code_object(
        self, executable: Executable, agent: int, reader: int
    ) -> None:
        loaded = c_uint64()
        self._refuse_if_lost(agent, "hsa_executable_load_agent_code_object")
        self.api.hsa_executable_load_agent_code_object(
            executable.handle, agent, reader, None, byref(loaded)
        )
        executable.agent = agent

    def executable_freeze(self, executable: Executable) -> None:
        self._refuse_if_lost(getattr(executable, "agent", None), "hsa_executable_freeze")
        self.api.hsa_executable_freeze(executable.handle, None)
        executable.frozen = True

    def _symbol_value(self, symbol: int, attribute: int, ctype: Any) -> int:
        value = ctype()
        self.api.hsa_executable_symbol_get_info(symbol, attribute, byref(value))
        return int(value.value)

    def executable_get_symbol_by_name(
        self, executable: Executable, name: str, agent: int
    ) -> KernelSymbol:
        symbol = c_uint64()
        agent_arg = c_uint64(agent)
        self.api.hsa_executable_get_symbol_by_name(
            executable.handle, name.encode(), byref(agent_arg), byref(symbol)
        )
        s = symbol.value
        kernel = KernelSymbol(
            name=name,
            kernel_object=self._symbol_value(
                s, S.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, c_uint64
            ),
            kernarg_segment_size=self._symbol_value(
                s, S.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, c_uint32
            ),
            kernarg_segment_alignment=self._symbol_value(
                s, S.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT, c_uint32
            ),
            group_segment_size=self._symbol_value(
                s, S.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, c_uint32
            ),
            private_segment_size=self._symbol_value(
                s, S.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, c_uint32
            ),
        )
        executable.kernels[name] = kernel
        return kernel

    def executable_destroy(self, executable: Executable) -> None:
        self.api.hsa_executable_destroy(executable.handle)
        self._executables.pop(executable.handle, None)

    def __enter__(self) -> RocrProvider:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shut_down()

    def __repr__(self) -> str:
        state = "open" if self._initialised else "shut down"
        return f"RocrProvider({self._version_info.describe()}, {state})"


__all__ = ["RocrProvider", "RocrQueue", "condition_holds", "diagnose_init_failure", "init_count"]
