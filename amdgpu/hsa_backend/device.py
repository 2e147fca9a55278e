"""HsaDevice: one GPU agent of an HSA provider (ROCr or the virtual system) as a Device.

Memory: buffers live in the agent's coarse-grained pool; the host reaches them through a
fine-grained staging allocation and `memory_copy` (what ROCr needs for VRAM). Kernel
arguments come from a kernarg-pool ring per lane. Immediate dispatch: one kernarg
`pack_into`, one cached packet template patched with the kernarg address, one publish.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import packets
from amdgpu.buffer import (
    Buffer,
    HostBuffer,
    Lifetime,
    PinnedBuffer,
    as_host_array,
    check_memory_kind,
    owner_token,
)
from amdgpu.device import Device, DeviceSpec, TimelinePoint
from amdgpu.fill import check_fill_length, fill_pattern
from amdgpu.hsa_backend import hotpath
from amdgpu.hsa_backend import system as systems
from amdgpu.hsa_backend.command_buffer import HsaCommandBuffer, _fill_word
from amdgpu.hsa_backend.executable import HsaExecutable, HsaKernel, load_bundle
from amdgpu.hsa_backend.lanes import QueueLane, SignalPool
from amdgpu.hsa_backend.tracing import announce
from amdgpu.report import DeviceReport
from amdgpu.suballoc import MAX_BLOCK, MIN_BLOCK, Block, SlabAllocator
from ground.errors import DeviceError, HsaError, HsaUnavailable, KernelArgumentError
from hsa.provider import Capability
from hsa.virtual.topology import expand_gpus

if TYPE_CHECKING:
    from amdgpu.hsa_backend.timing import DispatchTimer

_KARG = struct.Struct("<Q")
_new_point = object.__new__  # a TimelinePoint without its __init__ call (dispatch)
_TRACE = packets.trace.STATE  # `.sink`: the active trace sink or None
HSA_PATHS = ("barrier_value", "profiling", "async_copy")


class HsaDevice(Device):
    backend = "hsa"
    driver = "amdgpu"
    timer: DispatchTimer | None = None  # the active one (dev.time_dispatches(), set_timer)

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
            if hotpath.MODULE is not None:
                # dispatch's launch-cache fast path in C (hotpath.c): it calls the method
                # below, unchanged, for everything else, so both give the same results
                self.dispatch = hotpath.MODULE.Dispatch(  # type: ignore[method-assign]
                    self, type(self).dispatch, HsaKernel, TimelinePoint, _TRACE, Lifetime,
                    self._owner_token,
                )
                # and submit's kept-instance short way (HsaCommandBuffer._submit's)
                self.submit = hotpath.MODULE.Submit(  # type: ignore[method-assign]
                    self, type(self).submit, HsaCommandBuffer, Buffer, TimelinePoint, _TRACE,
                    Lifetime,
                )
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
        self._blits: dict[str, HsaKernel] | None = None
        size = max(
            self.agent.queue_min_size or 64,
            min(queue_size, self.agent.queue_max_size or queue_size),
        )
        self.lanes_ = [QueueLane(self, i, size, kernarg_bytes) for i in range(lanes)]

    # --- facts ---------------------------------------------------------------------------
    @property
    def lanes(self) -> int:
        return len(self.lanes_)

    def _timeline(self, index: int) -> QueueLane:
        """Lane `index`: an AQL queue with its timeline signal and kernarg ring."""
        return self.lanes_[self.check_lane(index)]

    # --- memory --------------------------------------------------------------------------
    def buffer(self, array_or_nbytes: Any, dtype: Any = None, memory: str = "device") -> Buffer:
        """Memory of the given size, or holding a copy of the given array. `memory`: "device"
        (the agent's coarse-grained pool), "device-fine" (its fine-grained pool, coherent
        with the host and peers), "host" (the system's fine-grained pool, a HostBuffer the
        GPU reaches directly)."""
        self._check_open()
        check_memory_kind(memory, self.spec)
        nbytes, data = as_host_array(array_or_nbytes, dtype)
        self._reap_dropped()
        if memory == "host":
            return self._host_buffer(nbytes, data)
        pool = self.buffer_pool
        if memory == "device-fine":
            if self.fine_pool is None:
                raise DeviceError(
                    f"{self.spec}: agent {self.name} reports no fine-grained device pool: use "
                    f'memory="device" or memory="host"'
                )
            pool = self.fine_pool
        if 0 < nbytes <= self.suballocate:
            block = self._slab_allocator(pool).take(nbytes)
            address, handle = block.address, block
        else:
            address = handle = self.provider.memory_pool_allocate(pool, max(nbytes, 1))
        buf = Buffer(self, address, nbytes, handle=handle)
        if data is not None and nbytes:
            self._write_bytes(buf, 0, data.reshape(-1).view(np.uint8))
        return buf

    def _slab_allocator(self, pool: int) -> SlabAllocator:
        slabs = self._slabs.get(pool)
        if slabs is None:
            p = self.provider
            slabs = self._slabs[pool] = SlabAllocator(
                lambda n: p.memory_pool_allocate(pool, n), lambda a: p.memory_pool_free(a),
                lambda: self.lanes_, max_block=max(self.suballocate, MIN_BLOCK))
        return slabs

    def allocator_stats(self) -> dict[str, int]:
        """Slabs and blocks of the small-buffer sub-allocator, summed over its pools."""
        out = {"slabs": 0, "slab_bytes": 0, "blocks_in_use": 0, "blocks_waiting_for_gpu": 0,
               "slabs_returned": 0}
        for slabs in self._slabs.values():
            for k, v in slabs.stats().items():
                out[k] += v
        return out

    def host_buffer(self, array_or_nbytes: Any, dtype: Any = None) -> HostBuffer:
        """Pinned host memory from the system's fine-grained pool, reachable by this agent
        (zero-copy: `.array`; kernels and async copies take it like a Buffer)."""
        self._check_open()
        nbytes, data = as_host_array(array_or_nbytes, dtype)
        return self._host_buffer(nbytes, data)

    def _host_buffer(self, nbytes: int, data: np.ndarray | None) -> HostBuffer:
        p = self.provider
        address = p.memory_pool_allocate(self.host_pool, max(nbytes, 1))
        try:
            p.agents_allow_access([self.agent.handle], address)
            view = p.host_view(address, max(nbytes, 1))[:nbytes]
        except BaseException:
            p.memory_pool_free(address)
            raise
        if data is not None and nbytes:
            view[:] = data.reshape(-1).view(np.uint8)
        return HostBuffer(self, address, nbytes, array=view, handle=address)

    def pin(self, array: Any) -> PinnedBuffer:
        """Register an existing C-contiguous numpy array with this agent
        (hsa_amd_memory_lock): async copies to and from it, and kernels, use its bytes in
        place, without staging. `unpin()` releases it; the array stays the caller's."""
        self._check_open()
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or array.nbytes == 0:
            raise KernelArgumentError(
                f"{self.spec}: pin wants a non-empty C-contiguous numpy array, got "
                f"{type(array).__name__}: use np.ascontiguousarray(...) (a copy) first"
            )
        flat = array.reshape(-1).view(np.uint8)
        host = int(flat.ctypes.data)
        pins = self._pins()
        if any(host < b.host_address + b.nbytes and b.host_address < host + flat.size
               for b in pins.values()):
            raise DeviceError(
                f"{self.spec}: the array at 0x{host:x} ({flat.size} bytes) overlaps memory "
                f"already pinned here: unpin that first, or pin the whole array once"
            )
        address = self.provider.memory_lock(host, flat.size, [self.agent.handle])
        buf = PinnedBuffer(self, address, flat.size, array=flat, owner=array, host_address=host)
        pins[id(buf)] = buf
        return buf

    def _pins(self) -> dict:
        pins = self.__dict__.get("_pinned")
        if pins is None:
            pins = self.__dict__["_pinned"] = {}
        return pins

    def pinned_view(self, array: Any) -> Buffer | None:
        """The pinned bytes `array` occupies, as a view of its PinnedBuffer; None when the
        array is not inside memory pinned on this device."""
        pins = self.__dict__.get("_pinned")
        if not pins or not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            return None
        start = int(array.ctypes.data)
        for buf in list(pins.values()):
            if buf.host_address <= start and start + array.nbytes <= buf.host_address + buf.nbytes:
                return buf.view(start - buf.host_address, array.nbytes)
        return None

    def _release_host(self, buf: Buffer) -> None:
        if not self._closed:
            self.provider.memory_pool_free(buf.handle)

    # --- peers (several GPU agents of one system) --------------------------------------------
    def enable_peer_access(self, peer: Any) -> None:
        """Let this device and `peer` (another GPU agent of the same HSA system) reach each
        other's memory: device-to-device copies between them then run on a copy engine
        without a host bounce (each buffer is made visible to the other agent with
        hsa_amd_agents_allow_access when a copy first needs it)."""
        self._check_open()
        if not isinstance(peer, HsaDevice) or peer.provider is not self.provider:
            raise DeviceError(
                f"{self.spec}: peer access needs another GPU agent of the same HSA system, "
                f"not {peer!r}: open both from one system (amdgpu:virtual:8xgfx942:N, amdgpu:N)"
            )
        if peer is self or peer.agent.handle == self.agent.handle:
            return
        for a, b in ((self, peer), (peer, self)):
            access = a.provider.agent_pool_access(a.agent.handle, b.buffer_pool)
            if int(access) == 0:  # HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED
                raise DeviceError(
                    f"{a.spec} can never access {b.spec}'s memory (the runtime reports "
                    f"NEVER_ALLOWED): copy through the host (b.to_numpy, a.buffer)"
                )
        self._peers.add(peer.agent.handle)
        peer._peers.add(self.agent.handle)

    def can_access_peer(self, peer: Any) -> bool:
        return isinstance(peer, HsaDevice) and peer.provider is self.provider and (
            peer.agent.handle == self.agent.handle or peer.agent.handle in self._peers)

    def links(self, peer: Any = None) -> list:
        """The hops from this agent to `peer`'s device memory (or to host memory when
        `peer` is None), as hsa_amd_agent_memory_pool_get_info reports them."""
        pool = self.host_pool if peer is None else peer.buffer_pool
        return self.provider.agent_pool_links(self.agent.handle, pool)

    def _share_with(self, buf: Buffer, agents: Sequence[int]) -> None:
        """hsa_amd_agents_allow_access for `agents` on `buf`'s allocation, once each."""
        root = buf.root
        shared = root.__dict__.setdefault("_shared_with", set())
        if not set(agents) <= shared:
            owner = root.device.agent.handle
            self.provider.agents_allow_access([owner, *agents], _allocation_base(root))
            shared.update(agents)

    def _buffer_agent(self, buf: Buffer) -> int:
        """The agent of one side of a copy: its device's GPU, or the CPU for host memory."""
        if isinstance(buf.root, HostBuffer):
            return self.cpu_agent
        return buf.device.agent.handle

    def copy_async(self, dst: Buffer, src: Buffer, nbytes: int | None = None, *,
                   lane: int = 0, wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """Copy `nbytes` from `src` to `dst` on a copy engine (hsa_amd_memory_async_copy),
        ordered on this device's `lane`; either buffer may live on a peer device (after
        enable_peer_access) or be a HostBuffer. Returns the point the copy completes at."""
        self._check_open()
        nbytes = self.check_copy(dst, src, nbytes)
        self.check_lane(lane)
        self.check_wait(wait)
        self._check_peers(dst, src, "copy_async")
        if not nbytes:
            return self.barrier(lane, list(wait))
        return self._copy_async(dst.view(0, nbytes), src.view(0, nbytes), nbytes, lane,
                                list(wait))

    def _check_peers(self, dst: Buffer, src: Buffer, what: str) -> None:
        for buf in (dst, src):
            owner = buf.device
            if owner is self:
                continue
            if getattr(owner, "provider", None) is not self.provider:
                raise DeviceError(
                    f"{what}: {buf!r} belongs to another system than {self.spec}: copy "
                    f"through the host (to_numpy, then write)"
                )
            if isinstance(buf.root, HostBuffer):  # host memory: every agent may reach it
                self._share_with(buf, [self.agent.handle])
                continue
            if not self.can_access_peer(owner):
                raise DeviceError(
                    f"{what}: {buf!r} is on {owner.spec}, which {self.spec} has no peer "
                    f"access to: call dev.enable_peer_access(peer) first (hwlab devices "
                    f"lists the links)"
                )

    def _copy_async(self, dst: Buffer, src: Buffer, nbytes: int, lane: int,
                    wait: Sequence[TimelinePoint]) -> TimelinePoint:
        """One lane submission done by the copy engine (hsa_amd_memory_async_copy): its
        dependencies are a proxy for the lane's earlier work and one for each waited point
        on another lane; its completion signal is waited on by a barrier-AND that carries
        the lane's timeline signal, so the lane stays in order and its count exact."""
        self._check_open()
        ln = self._timeline(lane)
        ln.check()
        deps: list[int] = []  # other lanes' proxies: prepared outside this lane's lock
        for point in wait:
            tl = point.timeline
            if tl is ln or point.done():
                continue
            if not isinstance(tl, QueueLane) or tl.provider is not self.provider:
                point.wait(self.default_timeout)  # another backend or system: host wait
                continue
            tl.check()
            deps.append(tl.proxy_after())
        done = self.signal_pool.take(1)
        p = self.provider
        dst_agent = self._buffer_agent(dst)
        src_agent = self._buffer_agent(src)
        gpus = [a for a in (dst_agent, src_agent) if a != self.cpu_agent]
        if len(set(gpus)) > 1:  # peer to peer: each agent must reach both buffers
            self._share_with(dst, gpus)
            self._share_with(src, gpus)
        last = packets.barrier_and_batch(
            dep_signals=(done,), completion_signal=ln.signal, barrier=True, count=1
        ).view(packets.PACKET)
        with ln.lock:  # the lane's proxy, the copy and its timeline value: one step
            value = ln.submitted + 1
            if ln.completed() < ln.submitted:
                mine = self.signal_pool.take(1)
                ln.ring.publish(
                    packets.barrier_and(dep_signals=(), completion_signal=mine, barrier=True)
                )
                deps.append(mine)
            try:
                p.memory_async_copy(dst.address, dst_agent, src.address, src_agent, nbytes,
                                    deps, done)
            except BaseException:
                self.signal_pool.give([done])  # the proxies stay out of the pool: still live
                raise
            ln.hold_proxies(value, [*deps, done])
            ln.publish_block(last)
            ln.submitted = value
        return TimelinePoint(ln.index, value, ln)

    def _staging(self, nbytes: int) -> np.ndarray:
        if nbytes > self._staging_size:
            p = self.provider
            if self._staging_address:
                p.memory_pool_free(self._staging_address)
            size = max(nbytes, 1 << 20)
            self._staging_address = p.memory_pool_allocate(self.host_pool, size)
            p.agents_allow_access([self.agent.handle], self._staging_address)
            self._staging_size = size
        return self.provider.host_view(self._staging_address, nbytes)

    def _write_bytes(self, buf: Buffer, offset: int, data: np.ndarray) -> None:
        self._settle()
        with self._staging_lock:
            self._staging(data.size)[:] = data
            self.provider.memory_copy(buf.address + offset, self._staging_address, data.size)

    def _read_bytes(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        self._settle()
        with self._staging_lock:
            view = self._staging(nbytes)
            self.provider.memory_copy(self._staging_address, buf.address + offset, nbytes)
            return view.copy()

    def _free_buffer(self, buf: Buffer) -> None:
        if self._closed:
            return
        if isinstance(buf, PinnedBuffer):  # the lanes may still read or write it
            self._settle()
            self._pins().pop(id(buf), None)
            self.provider.memory_unlock(buf.host_address)
            return
        if isinstance(buf.handle, Block):  # reused once the work submitted so far is done
            self._slab_allocator_of(buf.handle).release(buf.handle)
            return
        self._settle()
        self.provider.memory_pool_free(buf.handle)

    def _slab_allocator_of(self, block: Block) -> SlabAllocator:
        for slabs in self._slabs.values():
            if block.base in slabs.slab_set:
                return slabs
        raise DeviceError(f"{self.spec}: {block!r} is not from this device's slabs")

    def _live_lanes(self) -> list:
        return list(self.lanes_)

    def _release_handle(self, handle: Any) -> None:
        if self._closed:
            return
        if isinstance(handle, Block):
            self._slab_allocator_of(handle).release_idle(handle)
        else:
            self.provider.memory_pool_free(handle)

    def _fill_now(self, address: int, nbytes: int, value: Any) -> None:
        """Host-side fill (the lanes are idle): a pattern in staging, then memory_copy."""
        pattern = fill_pattern(value)
        check_fill_length(pattern, nbytes)
        with self._staging_lock:
            view = self._staging(nbytes)
            view.reshape(-1, pattern.size)[:] = pattern
            self.provider.memory_copy(address, self._staging_address, nbytes)

    def copy(
        self,
        dst: Buffer,
        src: Buffer,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Copy `nbytes` from src to dst. On one device with 4-byte aligned ranges it is the
        library `copy` kernel on `lane` (ordered like a dispatch); otherwise (another
        device of the same system, no kernels) the host copies after waiting for the lanes."""
        nbytes = self.check_copy(dst, src, nbytes)
        other = src.device if src.device is not self else dst.device
        if other is not self and getattr(other, "provider", None) is self.provider:
            # peer to peer on the copy engine, after all the work submitted to the peer
            self.check_wait(wait)
            after = [other._point(i) for i in range(other.lanes)]
            return self.copy_async(dst, src, nbytes, lane=lane, wait=[*wait, *after])
        if (
            src.device is self
            and dst.device is self
            and nbytes
            and not (nbytes | dst.address | src.address) % 4
        ):
            blits = self.blit_kernels()
            if blits is not None:
                n = nbytes // 4
                args = (dst, src, np.uint32(n))
                return self.dispatch(blits["copy"], n, 256, args, lane=lane, wait=wait)
        for point in wait:
            point.wait(self.default_timeout)
        self._settle()
        if other is not self:  # another system: through the host
            data = src.to_numpy()[:nbytes]
            dst.write(data)
            return self._point(lane)
        self.provider.memory_copy(dst.address, src.address, nbytes)
        return self._point(lane)

    def fill(
        self,
        dst: Buffer,
        value: Any,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Fill with a 1-, 2- or 4-byte pattern (the library `fill` kernel where it can do
        it exactly, else on the host after waiting for the lanes)."""
        pattern, nbytes = self.check_fill(dst, value, nbytes)
        word = _fill_word(pattern, nbytes, dst)
        blits = self.blit_kernels() if word is not None else None
        if blits is not None:
            n = nbytes // 4
            args = (dst, word, np.uint32(n))
            return self.dispatch(blits["fill"], n, 256, args, lane=lane, wait=wait)
        for point in wait:
            point.wait(self.default_timeout)
        self._settle()
        self._fill_now(dst.address, nbytes, bytes(pattern))
        return self._point(lane)

    @property
    def runs_kernels(self) -> bool:
        """False only on a virtual agent whose ISA family has no executor yet."""
        try:
            from hsa.abi.targets import lookup

            family = lookup(self.target).family
        except Exception:  # noqa: BLE001 - an unknown target: assume a real agent
            return True
        cap = self.capabilities.get(f"executor:{family}")
        return True if cap is None else cap.available

    def blit_kernels(self) -> dict[str, HsaKernel] | None:
        """The compiler library's `fill` and `copy` kernels for this agent (compiled once,
        cached on disk), or None where kernels cannot run or be built here; fills and
        copies then run on the host."""
        if self._blits is None:
            self._blits = {}
            if self.runs_kernels:
                try:
                    import compiler

                    for name in ("fill", "copy"):
                        bundle = compiler.compile(name, targets=[self.target])
                        self._blits[name] = self.load(bundle).kernel(name)
                except Exception:  # noqa: BLE001 - no clang, no variant: host fallback
                    self._blits = {}
        return self._blits or None

    # --- code ----------------------------------------------------------------------------
    def load(self, bundle: Any) -> HsaExecutable:
        self._check_open()
        exe = load_bundle(self, bundle)
        self._executables.append(exe)
        return exe

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
        size, explicit, fast, _start, hidden, words, body, header, geom, _ln, publish = launch
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
        if wait or self.timer is not None or _TRACE.sink is not None:
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
        with ln.lock:
            value = ln.submitted + 1
            off = ln.kernargs.allocate(size, value)
            ln.kernarg_view[off : off + size] = data  # the whole block in one store
            words[5] = ln.kernarg_address + off  # the launch's packet template, in place
            if proxies:
                ln.hold_proxies(value, proxies)
            if pre is None and self.timer is None and _TRACE.sink is None:
                ln.ring.publish_parts(body, header)  # (tracing switched off meanwhile)
            else:
                pkt = header.to_bytes(4, "little") + body.tobytes()
                if self.timer is not None:  # per-dispatch device time (hsa_backend.timing)
                    self.timer.publish(ln, kernel, pkt, pre)
                elif _TRACE.sink is not None:
                    self._publish_traced(ln, kernel, pkt, data, pre)
                else:
                    assert pre is not None  # no timer or sink: the waits made us come here
                    ln.publish_block(
                        np.concatenate([pre, np.frombuffer(pkt, dtype=pre.dtype)]))
            ln.submitted = value
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
        ln.ring.publish(pkt, kernarg=kernarg, symbol=kernel.name)

    def command_buffer(self):
        self._check_open()
        return HsaCommandBuffer(self)

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
            raise DeviceError("this command buffer was recorded on another device: record it here")
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
        with ln.lock:
            value = ln.submitted + 1
            if proxies:
                ln.hold_proxies(value, proxies)
            ln.publish_block(block)
            ln.submitted = value
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
        DispatchTimer's `with` does; every dispatch then takes the timed path."""
        self.timer = timer

    def kernel_name(self, kernel_object: int) -> str | None:
        """The name of the loaded kernel whose code is at `kernel_object`, else None (a
        queue error names the kernel it stopped at)."""
        for exe in self._executables:
            for k in exe.kernels.values():
                if k.kernel_object == kernel_object:
                    return k.name
        return None

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
            ln.ring.publish(
                packets.barrier_and(dep_signals=(), completion_signal=sig, barrier=True)
            )
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

    # --- lifetime ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError(f"{self.spec} was closed: open it again")

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
            except HsaError:
                pass
        for ln in self.lanes_:
            ln.closed = True  # a cached launch sees it (dispatch checks ln.failed only)
            ln.failed = True
        held = [b for _p, b in self.__dict__.get("_transfers", [])]
        for staging in held + self.__dict__.get("_staging_cache", []):
            try:
                self._land_read(staging)
                if not staging._freed:
                    self.provider.memory_pool_free(staging.handle)
            except HsaError:
                pass
            staging._freed = True
        for pinned in list(self.__dict__.get("_pinned", {}).values()):
            try:
                self.provider.memory_unlock(pinned.host_address)
            except HsaError:
                pass
            pinned._freed = True
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


def _allocation_base(root: Buffer) -> int:
    """The start of the pool allocation holding a root buffer (what allow_access takes)."""
    return int(getattr(root.handle, "base", root.handle))


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
