"""HsaDevice's memory: buffers from the agent's pools (coarse-grained, fine-grained,
host), small buffers cut from slabs (amdgpu.suballoc), pinned host arrays, and peer access
between GPU agents of one system; freeing and releasing what buffers hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from amdgpu.buffer import (
    Buffer,
    HostBuffer,
    PinnedBuffer,
    as_host_array,
    check_memory_kind,
)
from amdgpu.hsa_backend.parts import DeviceParts
from amdgpu.suballoc import MIN_BLOCK, Block, SlabAllocator
from ground.errors import DeviceError, KernelArgumentError
from hsa.provider import LinkInfo


class DeviceMemory(DeviceParts):
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
        if not isinstance(peer, DeviceParts) or peer.provider is not self.provider:
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
        return isinstance(peer, DeviceParts) and peer.provider is self.provider and (
            peer.agent.handle == self.agent.handle or peer.agent.handle in self._peers)

    def links(self, peer: Any = None) -> list[LinkInfo]:
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


def _allocation_base(root: Buffer) -> int:
    """The start of the pool allocation holding a root buffer (what allow_access takes)."""
    return int(getattr(root.handle, "base", root.handle))
