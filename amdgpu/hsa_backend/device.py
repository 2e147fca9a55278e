"""HsaDevice: one GPU agent of an HSA provider (ROCr or the virtual system) as a Device.

Memory: buffers live in the agent's coarse-grained pool; the host reaches them through a
fine-grained staging allocation and `memory_copy` (what ROCr needs for VRAM). Kernel
arguments come from a kernarg-pool ring per lane. Immediate dispatch: one kernarg
`pack_into`, one cached packet template patched with the kernarg address, one publish.
"""

from __future__ import annotations

import threading
import time
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any

import packets
from amdgpu.buffer import Buffer, Lifetime, owner_token
from amdgpu.device import DeviceSpec, TimelinePoint
from amdgpu.hsa_backend import hotpath
from amdgpu.hsa_backend import system as systems
from amdgpu.hsa_backend.command_buffer import HsaCommandBuffer
from amdgpu.hsa_backend.executable import HsaExecutable, HsaKernel
from amdgpu.hsa_backend.lanes import QueueLane, SignalPool
from amdgpu.hsa_backend.loading import DeviceLoading
from amdgpu.hsa_backend.memory import DeviceMemory
from amdgpu.hsa_backend.pm4_replay import default_mode
from amdgpu.hsa_backend.submission import DeviceSubmission
from amdgpu.hsa_backend.transfers import DeviceTransfers
from amdgpu.report import DeviceReport
from amdgpu.suballoc import MAX_BLOCK, Block, SlabAllocator
from ground.errors import DeviceError, DeviceLost, HsaError, HsaUnavailable
from hsa.provider import Capability
from hsa.virtual.topology import expand_gpus

if TYPE_CHECKING:
    from amdgpu.hsa_backend.timing import DispatchTimer

_TRACE = packets.trace.STATE  # `.sink`: the active trace sink or None
HSA_PATHS = ("barrier_value", "profiling", "async_copy")


class HsaDevice(DeviceSubmission, DeviceTransfers, DeviceMemory, DeviceLoading):
    """One GPU agent on the HSA path. `HsaDevice(...)` makes a CompiledHsaDevice (below)
    where the compiled hot path is loaded, else an HsaDevice, whose dispatch and submit
    are DeviceSubmission's Python methods: the choice is made once, per device."""

    backend = "hsa"
    driver = "amdgpu"
    timer: DispatchTimer | None = None  # the active one (dev.time_dispatches(), set_timer)

    def __new__(cls, *args: Any, **kwargs: Any) -> HsaDevice:
        if cls is HsaDevice and hotpath.MODULE is not None and _COMPILED is not None:
            cls = _COMPILED
        return super().__new__(cls)

    def __init__(
        self,
        spec: DeviceSpec,
        *,
        lanes: int = 2,
        queue_size: int = 8192,
        kernarg_bytes: int = 4 << 20,
        use_barrier_value: bool | None = None,
        default_timeout: float = 10.0,
        suballocate: int | None = None,
    ):
        self._spec = spec
        self.spec = str(spec)
        self.timer = None  # an instance attribute: the compiled hot path reads __dict__
        self._system_key = spec.system
        self.provider = systems.acquire(self._system_key)
        self._closed = False
        self._owner_token = owner_token(self)  # what its live buffers carry (Lifetime.owner)
        self.lanes_: list[QueueLane] = []
        try:
            self._setup(spec, lanes, queue_size, kernarg_bytes, use_barrier_value, default_timeout)
            self._slabs: dict[int, SlabAllocator] = {}  # pool -> small-buffer blocks
            # The largest buffer cut from a slab (0: none). On by default on ROCr, where each
            # pool allocation is a kernel call; off on the virtual and emulated systems, whose
            # memory map checks every buffer's own bounds (a slab would hide an overrun).
            if suballocate is None:
                suballocate = MAX_BLOCK if spec.provider == "rocr" else 0
            self.suballocate = int(suballocate)
        except BaseException:
            self.close()
            raise

    def _setup(self, spec, lanes, queue_size, kernarg_bytes, use_barrier_value, default_timeout):
        p = self.provider
        gpus = p.gpu_agents()
        if spec.uuid:
            found = [i for i, a in enumerate(gpus) if a.uuid.lower() == spec.uuid.lower()]
            if not found:
                have = ", ".join(a.uuid or "?" for a in gpus) or "none"
                raise DeviceError(
                    f"{self.spec}: no GPU agent of the {p.name} system has UUID {spec.uuid} "
                    f"(visible: {have}); check ROCR_VISIBLE_DEVICES or `hwlab devices`"
                )
            spec = DeviceSpec(spec.backend, spec.provider, spec.gpus, found[0], spec.uuid)
        if spec.index >= len(gpus):
            raise DeviceError(
                f"{self.spec}: the {p.name} system has {len(gpus)} GPU agent(s): use an index "
                f"below {len(gpus)} (amdgpu.devices() lists them)"
            )
        self.agent = gpus[spec.index]
        self.index = spec.index
        self.uuid = self.agent.uuid
        self._peers: set[int] = set()  # agent handles with peer access (enable_peer_access)
        self.isa = self.agent.isa
        self.target = self.agent.isa.split(":")[0]
        self.name = self.agent.name
        self.default_timeout = default_timeout
        caps = p.capabilities()
        self.capabilities = caps
        self.paths = {
            k: caps.get(k, Capability(False, "the provider does not report it")) for k in HSA_PATHS
        }
        if use_barrier_value is None:
            use_barrier_value = self.paths["barrier_value"].available
        self.use_barrier_value = bool(use_barrier_value)
        self.buffer_pool, self.kernarg_pool, self.host_pool = _pick_pools(p, self.agent)
        self.fine_pool = _fine_device_pool(p, self.agent)  # None where the agent has none
        self.cpu_agent = p.cpu_agents()[0].handle
        self.signal_pool = SignalPool(p)
        self._staging_address = 0
        self._staging_size = 0
        # One staging buffer serves every synchronous host<->device copy: one thread at a
        # time fills it, copies and reads it back (buffer(), write(), to_numpy(), fills).
        self._staging_lock = threading.Lock()
        self._executables: list[HsaExecutable] = []
        self._blits = None
        self._blits_lock = threading.Lock()  # the first fill/copy of several threads builds once
        size = max(
            self.agent.queue_min_size or 64,
            min(queue_size, self.agent.queue_max_size or queue_size),
        )
        self.lanes_ = [QueueLane(self, i, size, kernarg_bytes) for i in range(lanes)]
        # a GPU memory fault on ROCr loses the agent for this process (hsa/rocr/provider.py):
        # every lane fails, so even a cached launch's fast path stops to say so
        p.watch_agent_lost(self.agent.handle, weakref.WeakMethod(self._agent_lost))

    def _agent_lost(self) -> None:
        for ln in self.lanes_:
            ln.failed = True

    # --- facts ---------------------------------------------------------------------------
    @property
    def lanes(self) -> int:
        return len(self.lanes_)

    # --- lifetime ------------------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Wait up to `timeout` for each lane, then release queues, memory and signals
        (work still queued after that is dropped with its queue)."""
        if self._closed:
            return
        self._closed = True
        for ln in self.lanes_:
            try:
                if ln.queue.error is None and timeout > 0:
                    ln.wait(ln.submitted, timeout)
            except (HsaError, DeviceLost):
                pass
        for ln in self.lanes_:
            ln.closed = True  # a cached launch sees it (dispatch checks ln.failed only)
            ln.failed = True
        # Threads still inside a lane's wait() leave within one wait slice, once they see
        # `closed`; their signals must outlive them (ROCr aborts on a destroyed signal).
        deadline = time.monotonic() + 5.0
        while any(ln.waiting for ln in self.lanes_) and time.monotonic() < deadline:
            time.sleep(0.005)
        held = [b for _p, b in self.__dict__.get("_transfers", [])]
        for staging in held + self.__dict__.get("_staging_cache", []):
            try:
                self._land_read(staging)
                if not staging._freed:
                    self.provider.memory_pool_free(staging.handle)
            except HsaError:
                pass
            staging.mark_released()
        for pinned in list(self.__dict__.get("_pinned", {}).values()):
            try:
                self.provider.memory_unlock(pinned.host_address)
            except HsaError:
                pass
            pinned.mark_released()
        for handle, _root in self._take_unreleased():  # buffers still held, or not reaped
            if not isinstance(handle, Block):  # blocks go with their slabs, below
                try:
                    self.provider.memory_pool_free(handle)
                except HsaError:
                    pass
        for slabs in getattr(self, "_slabs", {}).values():
            try:
                slabs.close()
            except HsaError:
                pass
        for ln in self.lanes_:
            ln.destroy()
        if getattr(self, "signal_pool", None) is not None:
            self.signal_pool.destroy()
        for exe in getattr(self, "_executables", []):
            try:
                exe.destroy()
            except HsaError:
                pass
        if getattr(self, "_staging_address", 0):
            try:
                self.provider.memory_pool_free(self._staging_address)
            except HsaError:
                pass
        systems.release(self._system_key)

    def report(self) -> DeviceReport:
        return _agent_report(self.provider, self._spec, self.agent)


def _fine_device_pool(p: Any, agent: Any) -> int | None:
    """The agent's own fine-grained global pool that allows runtime allocation, if any."""
    for x in p.agent_pools(agent.handle):
        if x.segment == 0 and x.runtime_alloc_allowed and x.is_fine_grained:
            return x.handle
    return None


def _pick_pools(p: Any, agent: Any) -> tuple[int, int, int]:
    """(device buffer pool, kernarg pool, host fine-grained pool) for a GPU agent."""
    gpu_pools = [
        x for x in p.agent_pools(agent.handle) if x.segment == 0 and x.runtime_alloc_allowed
    ]
    device = next((x for x in gpu_pools if x.is_coarse_grained), None) or (
        gpu_pools[0] if gpu_pools else None
    )
    cpu_pools = [
        x
        for a in p.cpu_agents()
        for x in p.agent_pools(a.handle)
        if x.segment == 0 and x.runtime_alloc_allowed
    ]
    kernarg = next((x for x in cpu_pools if x.is_kernarg), None)
    host = next((x for x in cpu_pools if x.is_fine_grained and not x.is_kernarg), None) or kernarg
    if device is None or kernarg is None or host is None:
        raise DeviceError(
            f"agent {agent.name} lacks a device, kernarg or host memory pool: the HSA runtime "
            f"is incomplete here; use amdgpu:virtual or Vulkan"
        )
    return device.handle, kernarg.handle, host.handle


def _agent_report(p: Any, spec: DeviceSpec, agent: Any) -> DeviceReport:
    caps = p.capabilities()
    paths = {
        k: caps.get(k, Capability(False, "the provider does not report it")) for k in HSA_PATHS
    }
    extra = {k: v for k, v in caps.items() if k.startswith("executor:")}
    paths.update(extra)
    # how command buffers replay by default: one PM4_IB packet, or AQL (pm4_replay.py)
    path, why = default_mode(agent.isa.split(":")[0])
    paths["pm4_command_buffers"] = Capability(path == "pm4", why)
    return DeviceReport(
        spec=str(spec),
        backend="hsa",
        name=agent.name,
        target=agent.isa.split(":")[0],
        available=True,
        reason="",
        paths=paths,
        versions={"hsa": p.version(), "provider": p.name},
        topology=topology_of(p, agent),
    )


_SEGMENTS = {0: "global", 1: "readonly", 2: "private", 3: "group"}


def _pool_kind(pool: Any) -> str:
    if pool.segment != 0:
        return _SEGMENTS.get(int(pool.segment), str(pool.segment))
    if pool.is_kernarg:
        return "kernarg"
    return "coarse" if pool.is_coarse_grained else "fine" if pool.is_fine_grained else "global"


def topology_of(p: Any, agent: Any) -> dict:
    """An agent's pools and its links to every other agent's device memory and to host
    memory, from hsa_amd_agent_memory_pool_get_info (NUM_LINK_HOPS, LINK_INFO, ACCESS)."""
    pools = [
        {"kind": _pool_kind(x), "bytes": int(x.size), "alloc": bool(x.runtime_alloc_allowed)}
        for x in p.agent_pools(agent.handle)
    ]
    links = []
    for other in p.agents():
        if other.handle == agent.handle:
            continue
        target = next((x for x in p.agent_pools(other.handle)
                       if x.segment == 0 and x.runtime_alloc_allowed
                       and (x.is_coarse_grained or other.device_type == 0)
                       and not x.is_kernarg), None)
        if target is None:
            continue
        try:
            access = p.agent_pool_access(agent.handle, target.handle)
            hops = p.agent_pool_links(agent.handle, target.handle)
        except (HsaError, NotImplementedError):
            continue
        links.append({
            "to": other.uuid or ("cpu" if other.device_type == 0 else other.name),
            "node": int(other.node),
            "access": getattr(access, "name", str(access)).lower(),
            "hops": len(hops),
            "type": "+".join(getattr(h.link_type, "name", str(h.link_type)) for h in hops)
            or "-",
            "numa_distance": sum(h.numa_distance for h in hops),
            "max_bandwidth_mbps": min((h.max_bandwidth for h in hops), default=0),
        })
    return {"uuid": agent.uuid, "node": int(agent.node), "pools": pools, "links": links}


def _rocr_library_facts() -> tuple[dict[str, str], dict[str, Capability]]:
    """(versions, paths) of the libhsa-runtime64 ROCr would use, read without hsa_init, so
    that the report of a machine where ROCr cannot start still names the ROCr build and
    what its library offers. Empty where there is no library."""
    try:
        import hsa.rocr as rocr

        lib = rocr.load_library()
        path = rocr.library_path(lib)
        version = rocr.library_version(path) if path else None
        caps = rocr.capabilities(lib)
    except (HsaError, ImportError, OSError, AttributeError):
        return {}, {}
    versions = {"rocr": version.describe() if version else "unknown", "library": str(path)}
    paths = {k: caps[k] for k in ("barrier_value", "profiling", "async_copy") if k in caps}
    return versions, paths


def hsa_reports(system_key: str) -> list[DeviceReport]:
    """DeviceReports for every GPU agent of an HSA system (or one saying why none)."""
    provider = "rocr" if system_key == "rocr" else "virtual"
    gpus = tuple(expand_gpus(system_key.split(":", 1)[1].split(","))) if provider == "virtual" \
        else ()
    try:
        p = systems.acquire(system_key)
    except HsaUnavailable as e:
        versions, paths = _rocr_library_facts() if provider == "rocr" else ({}, {})
        return [DeviceReport("amdgpu", "hsa", "ROCr GPU agent", "", False, str(e), paths, versions)]
    except (HsaError, ImportError, OSError) as e:
        spec = "amdgpu" if provider == "rocr" else "amdgpu:virtual"
        return [DeviceReport(spec, "hsa", "", "", False, f"{type(e).__name__}: {e}")]
    try:
        out = []
        agents = p.gpu_agents()
        for i, agent in enumerate(agents):
            out.append(_agent_report(p, DeviceSpec("hsa", provider, gpus, i), agent))
        if not out:
            out.append(DeviceReport("amdgpu", "hsa", "", "", False, "ROCr found no GPU agent"))
        return out
    finally:
        systems.release(system_key)


def _compiled_class(hot: ModuleType) -> type[HsaDevice]:
    """HsaDevice with the compiled hot path `hot` (hotpath.c) as its dispatch and submit."""

    class CompiledHsaDevice(HsaDevice):
        """HsaDevice with its two hot entries compiled (hotpath.c), as methods of the class:
        `dispatch` (the launch-cache fast path) and `submit` (a kept replay instance's
        short way, HsaCommandBuffer._submit's). Each calls DeviceSubmission's Python
        method, unchanged, for every call it does not take (a first launch, waits, a timer
        or trace sink, a failed lane, arguments its converters refuse), so both give the
        same results."""

        dispatch = hot.Dispatch(DeviceSubmission.dispatch, HsaKernel, TimelinePoint, Lifetime,
                                QueueLane)
        submit = hot.Submit(
            DeviceSubmission.submit, HsaCommandBuffer, Buffer, TimelinePoint, Lifetime)

    return CompiledHsaDevice


# chosen once, here: HsaDevice(...) makes one of these where the hot path is loaded
_COMPILED = None if hotpath.MODULE is None else _compiled_class(hotpath.MODULE)
