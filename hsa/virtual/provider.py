"""`VirtualProvider`: a virtual AMD system behind the `HsaProvider` interface.

One CPU agent and one or more GPU agents (targets from `hsa.abi.targets`), the pools
ROCr reports for them, signals as amd_signal_t objects in memory, AQL queues with a packet
processor per queue, a code-object loader, a copy engine and dispatch timestamps. It aims to
be faithful enough that a driver bug shows up as it would on hardware, but as a one-line
error instead of a hang or a GPU reset. What it catches:

- device memory touched by the host (`host_view` refuses coarse-grained memory) or by an
  agent without `agents_allow_access` (MemoryFault in the executor or the copy engine);
- packets: unknown types, AGENT_DISPATCH on a GPU queue, bad dims / sizes, a group or
  private segment size below the kernel's, a misaligned kernarg address, a kernel object
  outside loaded code (queue error state, callback, `queue.error`);
- signals destroyed while a packet uses them; doorbells never rung (the timeout says which
  queue has unrung packets) or rung ahead of the header (a warning after 1 s);
- code objects for another processor or xnack/sramecc setting, or not linked;
- with `overlap="reverse"` (or AMDGPU_VIRTUAL_OVERLAP=reverse): dispatches that lack the
  barrier bit they need, since runs of barrier-less dispatches execute last-first.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence

import numpy as np

from ground.errors import HsaError, MemoryFault, SignalTimeout
from ground.status import (
    HSA_STATUS_ERROR_INVALID_AGENT,
    HSA_STATUS_ERROR_INVALID_ALLOCATION,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
    HSA_STATUS_ERROR_INVALID_QUEUE,
    HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
    HSA_STATUS_ERROR_NOT_INITIALIZED,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES,
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
    PoolAccess,
    PoolInfo,
    Queue,
    QueueErrorCallback,
    QueueType,
    Segment,
    SignalCondition,
)
from hsa.virtual import executor as executor_registry
from hsa.virtual import topology
from hsa.virtual.agents import Agent, Pool
from hsa.virtual.copies import CopyEngine
from hsa.virtual.loader import CodeObjectLoader
from hsa.virtual.memory import MemoryMap
from hsa.virtual.queues import AMD_QUEUE_BYTES, DeviceSide, VirtualQueue
from hsa.virtual.signals import KIND_DOORBELL, W_END_TS, W_QUEUE_PTR, W_START_TS, SignalTable

QUEUE_MIN_SIZE = 0x40
QUEUE_MAX_SIZE = 0x20000
PAGE = 4096
_GIB = 1 << 30

# Compute units of the real parts (ROCr's HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT): MI250X
# (one GCD), MI300X, MI355X, Radeon RX 9070 XT (gfx1201: 64 CUs, AMD's specification);
# other targets get 48 (a Radeon RX 7900 XTX's 96 / 2 WGPs), gfx1250 too: unconfirmed, no
# CU count of the MI455X was found in AMD's announcements, LLVM's AMDGPU tables (AMDGPU.td
# gives no CU count for any target), ROCm sources or public gfx1250 references (searched
# 2026-12; docs/ARCHITECTURE.md says so).
_COMPUTE_UNITS = {"gfx90a": 110, "gfx942": 304, "gfx950": 256, "gfx1201": 64}
_DEFAULT_CUS = 48

# Default xnack/sramecc settings of an agent, as ROCr reports them on a stock install.
_DEFAULT_FEATURES = {"gfx942": ":sramecc+:xnack-", "gfx950": ":sramecc+:xnack-"}

_CPU_HANDLE = 0xA6E0_0000_1000
_AGENT_STRIDE = 0x1000
_POOL_OFFSET = 0x100  # pools of agent A have handles A + 0x100 + i
_INTERNAL_POOL = 0  # signals, queues, code: not counted against a user pool


def _target_facts(name: str) -> tuple[str, str, int, int]:
    """(canonical target id, family, wave size, LDS bytes) for a target name or id."""
    from hsa.abi.targets import TargetId

    tid = TargetId.parse(name)
    target = tid.target
    text = str(tid)
    if ":" not in text and tid.name in _DEFAULT_FEATURES:
        text = tid.name + _DEFAULT_FEATURES[tid.name]
    return text, target.family, target.wave_size, target.lds_size


class VirtualProvider(HsaProvider):
    """An in-process AMD system: `VirtualProvider(gpus=("gfx1100",), compute_units=48)`;
    compute_units=None gives each GPU its real part's count (gfx942: 304)."""

    name = "virtual"

    def __init__(
        self,
        gpus: Sequence[str] = ("gfx1100",),
        compute_units: int | None = None,
        device_memory: int = 16 * _GIB,
        overlap: str | None = None,
        visible_devices: str | None = None,
    ) -> None:
        """`overlap`: how kernel dispatches without the barrier bit run. "serial" (the
        default) runs every packet in order; "reverse" runs each run of such dispatches
        last-first, so a dependency that lacks its barrier bit fails deterministically, as
        it may on hardware. The env var AMDGPU_VIRTUAL_OVERLAP sets the default.
        `gpus` may count targets ("8xgfx942": an MI300X node, XGMI between its GPUs);
        `visible_devices` (default: the env var ROCR_VISIBLE_DEVICES) selects and orders
        GPUs by ordinal or UUID, as ROCr does."""
        overlap = overlap or os.environ.get("AMDGPU_VIRTUAL_OVERLAP", "serial")
        if overlap not in ("serial", "reverse"):
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"overlap={overlap!r}; use 'serial' or 'reverse'",
            )
        self.overlap = overlap
        if isinstance(gpus, str):
            gpus = [g for g in gpus.split(",") if g]
        gpus = topology.expand_gpus(list(gpus))
        if not gpus:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, "a virtual system needs a GPU")
        if len(gpus) > topology.MAX_GPUS:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT,
                           f"{len(gpus)} GPUs: a virtual node has at most {topology.MAX_GPUS}")
        if visible_devices is None:
            visible_devices = os.environ.get("ROCR_VISIBLE_DEVICES")
        self._visible_devices = visible_devices
        self._locked: dict[int, int] = {}  # pinned host address -> its size
        self.memory = MemoryMap()
        self._lock = threading.Lock()
        self._closed = False
        self._agents: dict[int, Agent] = {}
        self._pools: dict[int, Pool] = {}
        self._user_allocs: dict[int, tuple[Pool, int]] = {}  # base -> (pool, rounded size)
        self._queues: dict[int, VirtualQueue] = {}
        self._next_queue_id = 0
        self._build_agents(list(gpus), compute_units, device_memory)
        self._signals = SignalTable(self.memory, owner=_CPU_HANDLE, pool=_INTERNAL_POOL)
        # The parts get what they work with, not the provider: the memory map, the signal
        # table, and lookups of agents and pools (which raise the provider's HsaErrors).
        self._loader = CodeObjectLoader(self.memory, self._agent, self._device_pool_of)
        self._copies = CopyEngine(self._signals, self.memory)
        self._side = DeviceSide(self._signals, self.memory, self.kernel_name,
                                self._loader.kernel_symbol, overlap)

    # --- construction --------------------------------------------------------------------
    def _build_agents(self, gpus: list[str], compute_units: int | None,
                      device_memory: int) -> None:
        try:
            total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total_ram = 16 * _GIB
        cpu = Agent(AgentInfo(
            handle=_CPU_HANDLE, name="Virtual AMD CPU", device_type=DeviceType.CPU, isa="",
            compute_units=os.cpu_count() or 1, node=0, vendor="CPU",
        ))
        system = GlobalFlag.FINE_GRAINED
        self._add_pool(cpu, Segment.GLOBAL, system, total_ram, True, True)
        self._add_pool(cpu, Segment.GLOBAL, system | GlobalFlag.KERNARG_INIT, total_ram, True,
                       True)
        self._agents[cpu.info.handle] = cpu
        uuids = [topology.gpu_uuid(name, i) for i, name in enumerate(gpus)]
        self._gpu_targets: dict[int, str] = {}  # GPU agent handle -> target name
        for i in topology.visible_gpus(uuids, self._visible_devices):
            name = gpus[i]
            try:
                isa, family, wave, lds = _target_facts(name)
            except ValueError as exc:  # CodeObjectError from hsa.abi.targets
                raise HsaError(
                    HSA_STATUS_ERROR_INVALID_ARGUMENT, f"virtual GPU {name!r}: {exc}"
                ) from None
            handle = _CPU_HANDLE + (i + 1) * _AGENT_STRIDE
            gpu = Agent(
                AgentInfo(
                    handle=handle, name=isa.split(":")[0], device_type=DeviceType.GPU,
                    isa=isa, wavefront_size=wave,
                    compute_units=compute_units or _COMPUTE_UNITS.get(
                        isa.split(":")[0], _DEFAULT_CUS),
                    queue_min_size=QUEUE_MIN_SIZE, queue_max_size=QUEUE_MAX_SIZE, node=i + 1,
                    uuid=uuids[i],
                ),
                family=family,
                lds_size=lds,
            )
            self._add_pool(gpu, Segment.GLOBAL, GlobalFlag.COARSE_GRAINED, device_memory, True,
                           False)
            self._add_pool(gpu, Segment.GROUP, GlobalFlag(0), lds, False, False, granule=0)
            # fine-grained VRAM (coherent with the host and peers), as ROCr reports on MI GPUs
            self._add_pool(gpu, Segment.GLOBAL, GlobalFlag.FINE_GRAINED, device_memory, True,
                           False)
            self._agents[handle] = gpu
            self._gpu_targets[handle] = gpu.info.name

    def _add_pool(
        self, agent: Agent, segment: Segment, flags: GlobalFlag, size: int,
        alloc_allowed: bool, by_all: bool, granule: int = PAGE,
    ) -> None:
        handle = agent.info.handle + _POOL_OFFSET + len(agent.pools)
        pool = Pool(PoolInfo(
            handle=handle, agent=agent.info.handle, segment=segment, global_flags=flags,
            size=size, granule=granule, alignment=granule, runtime_alloc_allowed=alloc_allowed,
            accessible_by_all=by_all,
        ))
        agent.pools.append(pool)
        self._pools[handle] = pool

    # --- lookups -------------------------------------------------------------------------
    def _check_open(self, call: str) -> None:
        if self._closed:
            raise HsaError(
                HSA_STATUS_ERROR_NOT_INITIALIZED,
                "the virtual HSA system was shut down; open a new VirtualProvider", call,
            )

    def _agent(self, handle: int, call: str) -> Agent:
        agent = self._agents.get(handle)
        if agent is None:
            self._check_open(call)
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_AGENT,
                f"agent handle 0x{handle:x} is not an agent of this system; take handles "
                "from agents()",
                call,
            )
        return agent

    def _device_pool_of(self, agent: int) -> int:
        for pool in self._agents[agent].pools:
            if pool.info.is_coarse_grained:
                return pool.info.handle
        return _INTERNAL_POOL

    def kernel_name(self, kernel_object: int) -> str:
        """The kernel behind a kernel_object, or its hex address if nothing loaded is there."""
        return self._loader.kernel_name(kernel_object) or f"<kernel at 0x{kernel_object:x}>"

    def executor_families(self) -> list[str]:
        families = sorted({a.family for a in self._agents.values() if a.family})
        out = []
        for fam in families:
            try:
                if executor_registry.has_executor(fam):
                    out.append(fam)
            except Exception:  # a half-written executor package must not break this
                pass
        return out

    # --- runtime -------------------------------------------------------------------------
    def shut_down(self) -> None:
        if self._closed:
            return
        self._closed = True
        for queue in list(self._queues.values()):
            self._destroy_queue(queue)
        self._copies.stop()
        self._loader.release_all()
        self._signals.release_all()
        for base in list(self._user_allocs) + list(self._locked):
            self.memory.free(base)
        self._user_allocs.clear()
        self._locked.clear()

    def __enter__(self) -> VirtualProvider:
        return self

    def __exit__(self, *exc) -> None:
        self.shut_down()

    def capabilities(self) -> dict[str, Capability]:
        caps = {
            "barrier_value": Capability(True),
            "profiling": Capability(True),
            "async_copy": Capability(True),
            "vmem": Capability(False, "the virtual system has no hsa_amd_vmem_* API"),
        }
        available = set(self.executor_families())
        for fam in sorted({a.family for a in self._agents.values() if a.family}):
            caps[f"executor:{fam}"] = (
                Capability(True) if fam in available else Capability(
                    False, f"no ISA executor for {fam} yet: kernel dispatches on a {fam} "
                    "virtual GPU put its queue in the error state")
            )
        return caps

    def version(self) -> str:
        return "1.1 (virtual)"

    # --- agents and pools ----------------------------------------------------------------
    def agents(self) -> list[AgentInfo]:
        self._check_open("hsa_iterate_agents")
        return [a.info for a in self._agents.values()]

    def agent_pools(self, agent: int) -> list[PoolInfo]:
        return [p.info for p in self._agent(agent, "hsa_amd_agent_iterate_memory_pools").pools]

    def memory_pool_allocate(self, pool: int, size: int) -> int:
        call = "hsa_amd_memory_pool_allocate"
        self._check_open(call)
        p = self._pools.get(pool)
        if p is None:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
                f"pool handle 0x{pool:x} is not a pool of this system; take it from "
                "agent_pools()", call,
            )
        info = p.info
        if not info.runtime_alloc_allowed:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ALLOCATION,
                f"pool 0x{pool:x} ({info.segment.name} segment) does not allow runtime "
                "allocation; allocate from a GLOBAL pool", call,
            )
        if size <= 0:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT,
                           f"allocation size {size} must be positive", call)
        if size > info.size:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ALLOCATION,
                f"{size} bytes exceed pool 0x{pool:x}'s size of {info.size} bytes; split "
                "the buffer or use another pool", call,
            )
        rounded = -(-size // info.granule) * info.granule
        with self._lock:
            if p.used + rounded > info.size:
                raise HsaError(
                    HSA_STATUS_ERROR_OUT_OF_RESOURCES,
                    f"pool 0x{pool:x} has {info.size - p.used} of {info.size} bytes left, "
                    f"{rounded} requested; free buffers first", call,
                )
            p.used += rounded
        try:
            alloc = self.memory.allocate(
                rounded, owner=info.agent, pool=pool, alignment=info.alignment,
                accessible_by_all=info.accessible_by_all,
            )
        except MemoryError:
            with self._lock:
                p.used -= rounded
            raise HsaError(
                HSA_STATUS_ERROR_OUT_OF_RESOURCES,
                f"the host has no room for {rounded} bytes of virtual memory", call,
            ) from None
        with self._lock:
            self._user_allocs[alloc.base] = (p, rounded)
        return alloc.base

    def memory_pool_free(self, address: int) -> None:
        call = "hsa_amd_memory_pool_free"
        with self._lock:
            entry = self._user_allocs.pop(address, None)
            if entry is None:
                self._check_open(call)
                raise HsaError(
                    HSA_STATUS_ERROR_INVALID_ALLOCATION,
                    f"0x{address:x} is not the start of a live pool allocation (freed twice, "
                    "or an offset into a buffer?)", call,
                )
            pool, rounded = entry
            pool.used -= rounded
        self.memory.free(address)

    def agents_allow_access(self, agents: Sequence[int], address: int) -> None:
        call = "hsa_amd_agents_allow_access"
        if not agents:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, "no agents given", call)
        handles = [self._agent(a, call).info.handle for a in agents]
        alloc = self._user_alloc_at(address, call)
        alloc.allowed.update(handles)

    def agent_pool_access(self, agent: int, pool: int) -> PoolAccess:
        call = "hsa_amd_agent_memory_pool_get_info"
        ag = self._agent(agent, call)
        p = self._pool(pool, call)
        if p.info.agent == ag.info.handle:
            return PoolAccess.ALLOWED_BY_DEFAULT
        if p.info.segment != Segment.GLOBAL:
            return PoolAccess.NEVER_ALLOWED
        if p.info.accessible_by_all:
            return PoolAccess.ALLOWED_BY_DEFAULT
        return PoolAccess.DISALLOWED_BY_DEFAULT

    def agent_pool_links(self, agent: int, pool: int) -> list[LinkInfo]:
        call = "hsa_amd_agent_memory_pool_get_info"
        ag = self._agent(agent, call)
        p = self._pool(pool, call)
        owner = p.info.agent
        if owner == ag.info.handle or self.agent_pool_access(agent, pool) == \
                PoolAccess.NEVER_ALLOWED:
            return []
        mine, theirs = self._gpu_targets.get(ag.info.handle), self._gpu_targets.get(owner)
        if mine is None or theirs is None:  # the host and a GPU: one PCIe hop either way
            return topology.gpu_to_host()
        return topology.gpu_to_gpu(mine, theirs)

    def _pool(self, pool: int, call: str) -> Pool:
        p = self._pools.get(pool)
        if p is None:
            self._check_open(call)
            raise HsaError(HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
                           f"pool handle 0x{pool:x} is not a pool of this system", call)
        return p

    def memory_lock(self, address: int, size: int, agents: Sequence[int]) -> int:
        """Pins ordinary host memory: the bytes at `address` become an allocation of the
        memory map (the GPU reads and writes them in place; the agent address is the host
        address, as on a large-BAR system with the same virtual address space)."""
        call = "hsa_amd_memory_lock"
        self._check_open(call)
        handles = [self._agent(a, call).info.handle for a in agents]
        if size <= 0 or not address:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT,
                           f"cannot lock {size} bytes at 0x{address:x}", call)
        if self.memory.overlaps(address, size):
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"0x{address:x}..+{size} overlaps memory the system already maps (a pool "
                "allocation or a locked range); lock ordinary host memory once", call)
        data = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))
        self.memory.adopt(address, data, owner=_CPU_HANDLE, pool=_INTERNAL_POOL,
                          allowed={_CPU_HANDLE, *handles})
        with self._lock:
            self._locked[address] = size
        return address

    def memory_unlock(self, address: int) -> None:
        call = "hsa_amd_memory_unlock"
        with self._lock:
            if self._locked.pop(address, None) is None:
                raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT,
                               f"0x{address:x} was not locked (unlocked twice?)", call)
        self.memory.free(address)

    def _user_alloc_at(self, address: int, call: str):
        try:
            alloc = self.memory.find(address)
        except MemoryFault:
            alloc = None
        if alloc is None or alloc.base not in self._user_allocs:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"0x{address:x} is not inside a pool allocation", call,
            )
        return alloc

    def host_view(self, address: int, size: int) -> np.ndarray:
        call = "host_view"
        try:
            alloc = self.memory.find(address, max(size, 1))
        except MemoryFault as exc:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, exc.text, call) from None
        owner = self._agents.get(alloc.owner)
        if owner is not None and owner.info.device_type == DeviceType.GPU:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"0x{address:x} is coarse-grained device memory of {owner.info.name}, which "
                "the host cannot map; copy it with memory_copy or use a fine-grained pool",
                call,
            )
        off = address - alloc.base
        return alloc.data[off : off + size]

    def memory_copy(self, dst: int, src: int, size: int, *, dst_agent: int | None = None,
                    src_agent: int | None = None) -> None:
        call = "hsa_memory_copy"
        self._check_open(call)
        if size == 0:
            return
        if size < 0:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, f"size {size} < 0", call)
        try:
            d = self.memory.view(dst, size)
            s = self.memory.view(src, size)
        except MemoryFault as exc:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, f"{exc.text}; copy within "
                           "allocations", call) from None
        d[:] = s

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
        call = "hsa_amd_memory_async_copy"
        self._check_open(call)
        da = self._agent(dst_agent, call).info.handle
        sa = self._agent(src_agent, call).info.handle
        if size < 0:
            raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, f"size {size} < 0", call)
        if size:
            # the GPU agents of the copy must reach both buffers (hsa_ext_amd.h); the host
            # side of a host<->device copy is the GPU's DMA reaching host memory
            engines = [a for a in dict.fromkeys((da, sa)) if a in self._gpu_targets] or [da]
            for addr, what in ((dst, "destination"), (src, "source")):
                for agent in engines:
                    try:
                        self.memory.find(addr, size, agent)
                    except MemoryFault as exc:
                        raise HsaError(
                            HSA_STATUS_ERROR_INVALID_ARGUMENT,
                            f"{what} {exc.text}; check the range and allow_access for that "
                            "agent", call,
                        ) from None
        deps = tuple(int(s) for s in dep_signals)
        for s in (*deps, completion_signal):
            if s and not self._signals.exists(s):
                raise HsaError(
                    HSA_STATUS_ERROR_INVALID_SIGNAL, f"0x{s:x} is not a live signal", call
                )
        self._copies.submit(dst, src, size, deps, completion_signal)

    # --- signals -------------------------------------------------------------------------
    def signal_create(self, initial_value: int) -> int:
        self._check_open("hsa_signal_create")
        return self._signals.create(initial_value)

    def signal_destroy(self, signal: int) -> None:
        if self._signals.exists(signal) and self._signals.get_word(signal, 0) == KIND_DOORBELL:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_SIGNAL,
                f"signal 0x{signal:x} is a queue's doorbell; destroy the queue instead",
                "hsa_signal_destroy",
            )
        self._signals.destroy(signal)

    def signal_load(self, signal: int) -> int:
        return self._signals.load(signal)

    def signal_store(self, signal: int, value: int) -> None:
        self._signals.store(signal, value)

    def signal_add(self, signal: int, value: int) -> None:
        self._signals.add(signal, value)

    def signal_subtract(self, signal: int, value: int) -> None:
        self._signals.add(signal, -value)

    def signal_exchange(self, signal: int, value: int) -> int:
        return self._signals.exchange(signal, value)

    def signal_cas(self, signal: int, expected: int, value: int) -> int:
        """hsa_signal_cas: store `value` if the signal holds `expected`; return the old
        value."""
        return self._signals.cas(signal, expected, value)

    def signal_wait(
        self, signal: int, condition: SignalCondition, compare: int, timeout_s: float
    ) -> int:
        try:
            return self._signals.wait(signal, condition, compare, timeout_s)
        except SignalTimeout as exc:
            raise self._explain_timeout(exc) from None

    def signal_wait_any(
        self,
        signals: Sequence[int],
        conditions: Sequence[SignalCondition],
        compares: Sequence[int],
        timeout_s: float,
    ) -> int:
        try:
            return self._signals.wait_any(signals, conditions, compares, timeout_s)
        except SignalTimeout as exc:
            raise self._explain_timeout(exc) from None

    def _explain_timeout(self, exc: SignalTimeout) -> SignalTimeout:
        """Add what the virtual system can see to a timeout: queues with packets written
        but never rung, and queues stuck on a packet."""
        hints = []
        for q in list(self._queues.values()):
            written, read = q.load_write_index(), q.load_read_index()
            rung = q.processor._doorbell
            if q.error is not None:
                continue  # already named by the signal's note
            if written > rung + 1:
                hints.append(
                    f"queue {q.id} has packets {rung + 1}..{written - 1} written but the "
                    f"doorbell was rung only up to {rung}"
                )
            elif read <= rung:
                hints.append(f"queue {q.id} is waiting in packet {read}")
        if not hints:
            return exc
        return SignalTimeout(exc.status, f"{exc.text} [{'; '.join(hints)}]", exc.call)

    # --- queues --------------------------------------------------------------------------
    def queue_create(
        self,
        agent: int,
        size: int,
        queue_type: QueueType = QueueType.MULTI,
        callback: QueueErrorCallback | None = None,
    ) -> Queue:
        call = "hsa_queue_create"
        self._check_open(call)
        ag = self._agent(agent, call)
        if ag.info.device_type != DeviceType.GPU:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_AGENT,
                f"agent {ag.info.name} has no AQL queues; create queues on a GPU agent", call,
            )
        if not isinstance(size, int) or size <= 0 or size & (size - 1):
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"queue size {size!r} is not a power of two; use one in "
                f"0x{QUEUE_MIN_SIZE:x}..0x{QUEUE_MAX_SIZE:x}", call,
            )
        if not QUEUE_MIN_SIZE <= size <= QUEUE_MAX_SIZE:
            # ROCr's statuses: INVALID_ARGUMENT below the minimum, OUT_OF_RESOURCES above
            # the maximum (checked on real ROCr 5.2.3 over the emulated driver)
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT if size < QUEUE_MIN_SIZE
                else HSA_STATUS_ERROR_OUT_OF_RESOURCES,
                f"queue size 0x{size:x} is outside {ag.info.name}'s range "
                f"0x{QUEUE_MIN_SIZE:x}..0x{QUEUE_MAX_SIZE:x}", call,
            )
        try:
            qtype = QueueType(queue_type)
        except ValueError:
            raise HsaError(HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
                           f"unknown queue type {queue_type!r}", call) from None
        struct = self.memory.allocate(
            AMD_QUEUE_BYTES, owner=_CPU_HANDLE, pool=_INTERNAL_POOL, alignment=64,
            accessible_by_all=True,
        )
        ring = self.memory.allocate(
            size * 64, owner=_CPU_HANDLE, pool=_INTERNAL_POOL, alignment=PAGE,
            accessible_by_all=True,
        )
        doorbell = self._signals.create(0, kind=KIND_DOORBELL)
        with self._lock:
            queue_id = self._next_queue_id
            self._next_queue_id += 1
        queue = VirtualQueue(self._side, ag, size, queue_id, struct, ring, doorbell, int(qtype),
                             callback)
        self._signals.set_word(doorbell, W_QUEUE_PTR, struct.base)
        self._signals.set_doorbell_hook(doorbell, queue.processor.on_doorbell)
        with self._lock:
            self._queues[queue.handle] = queue
        return queue

    def queue_destroy(self, queue: Queue) -> None:
        call = "hsa_queue_destroy"
        with self._lock:
            live = self._queues.get(getattr(queue, "handle", 0))
            if live is not queue:
                raise HsaError(
                    HSA_STATUS_ERROR_INVALID_QUEUE,
                    f"{queue!r} is not a live queue of this system (destroyed twice?)", call,
                )
            del self._queues[queue.handle]
        self._destroy_queue(live)

    def _destroy_queue(self, queue: VirtualQueue) -> None:
        queue.processor.stop()
        queue.destroyed = True
        if queue.error is None:  # waiters on its unfinished packets learn why in a timeout
            self._signals.annotate(
                queue.processor.pending_completion_signals(),
                f"queue {queue.id} was destroyed before packet {queue.load_read_index()} ran",
            )
        self._signals.set_doorbell_hook(queue.doorbell_signal, None)
        self._signals.destroy(queue.doorbell_signal)
        self._queues.pop(queue.handle, None)
        self.memory.free(queue.base_address)
        self.memory.free(queue.handle)

    def queues(self) -> list[VirtualQueue]:
        return list(self._queues.values())

    def profiling_set_enabled(self, queue: Queue, enabled: bool) -> None:
        if self._queues.get(getattr(queue, "handle", 0)) is not queue:
            raise HsaError(HSA_STATUS_ERROR_INVALID_QUEUE, f"{queue!r} is not a live queue",
                           "hsa_amd_profiling_set_profiler_enabled")
        queue.profiling = bool(enabled)  # type: ignore[attr-defined]

    records_completions = True  # its packet processor writes them (hsa/virtual/queues.py)

    def system_timestamp_ns(self) -> int:
        return time.monotonic_ns()  # the clock of its dispatch timestamps

    def dispatch_time(self, agent: int, signal: int) -> tuple[int, int]:
        call = "hsa_amd_profiling_get_dispatch_time"
        self._agent(agent, call)
        if not self._signals.exists(signal):
            raise HsaError(HSA_STATUS_ERROR_INVALID_SIGNAL,
                           f"0x{signal:x} is not a live signal", call)
        return (self._signals.get_word(signal, W_START_TS),
                self._signals.get_word(signal, W_END_TS))

    # --- executables ---------------------------------------------------------------------
    def code_object_reader_create_from_memory(self, data: bytes) -> int:
        self._check_open("hsa_code_object_reader_create_from_memory")
        return self._loader.reader_create(data)

    def code_object_reader_destroy(self, reader: int) -> None:
        self._loader.reader_destroy(reader)

    def executable_create(self) -> Executable:
        self._check_open("hsa_executable_create_alt")
        return self._loader.executable_create()

    def executable_load_agent_code_object(
        self, executable: Executable, agent: int, reader: int
    ) -> None:
        self._loader.load(executable, agent, reader)

    def executable_freeze(self, executable: Executable) -> None:
        self._loader.freeze(executable)

    def executable_get_symbol_by_name(
        self, executable: Executable, name: str, agent: int
    ) -> KernelSymbol:
        return self._loader.symbol(executable, name, agent)

    def executable_destroy(self, executable: Executable) -> None:
        self._loader.destroy(executable)
