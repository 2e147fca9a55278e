"""What HsaDevice's parts share (memory.py, transfers.py, loading.py, submission.py): the
device's state that HsaDevice.__init__ sets up, declared once so that each part, a base
class of HsaDevice, can be read and type-checked on its own."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from amdgpu.device import Device

if TYPE_CHECKING:
    from amdgpu.buffer import Buffer
    from amdgpu.device import TimelinePoint
    from amdgpu.hsa_backend.executable import HsaExecutable, HsaKernel
    from amdgpu.hsa_backend.lanes import QueueLane, SignalPool
    from amdgpu.hsa_backend.timing import DispatchTimer
    from amdgpu.suballoc import SlabAllocator


class DeviceParts(Device):
    """The state of one GPU agent of an HSA provider that every part reads."""

    provider: Any  # hsa.provider.HsaProvider
    agent: Any  # hsa.provider.AgentInfo of this GPU
    lanes_: list[QueueLane]
    signal_pool: SignalPool
    buffer_pool: int  # the agent's coarse-grained pool
    kernarg_pool: int
    host_pool: int  # the system's fine-grained pool
    fine_pool: int | None  # the agent's fine-grained pool, where it has one
    paths: dict[str, Any]  # Capability per path (barrier_value, profiling, async_copy)
    use_barrier_value: bool
    default_timeout: float
    suballocate: int  # the largest buffer cut from a slab (0: none)
    timer: DispatchTimer | None
    _closed: bool
    _slabs: dict[int, SlabAllocator]
    _executables: list[HsaExecutable]
    _peers: set[int]
    _staging_lock: threading.Lock
    _staging_address: int
    _staging_size: int
    _blits: dict[str, HsaKernel] | None  # the library's fill and copy kernels, once built
    _blits_lock: threading.Lock
    _owner_token: Any  # what this device's live buffers carry (buffer.owner_token)
    cpu_agent: int
    capabilities: dict[str, Any]  # the provider's Capability per name

    # --- what one part calls on another (each defined in the part named) -----------------
    def _settle(self) -> None:  # submission.py: the lanes' submitted work has completed
        raise NotImplementedError

    def _point(self, lane: int) -> TimelinePoint:  # submission.py: the lane's latest point
        raise NotImplementedError

    def _write_bytes(self, buf: Buffer, offset: int, data: Any) -> None:  # transfers.py
        raise NotImplementedError

    def _share_with(self, buf: Buffer, agents: Sequence[int]) -> None:  # memory.py
        raise NotImplementedError

    def _buffer_agent(self, buf: Buffer) -> int:  # memory.py: the agent whose memory it is
        raise NotImplementedError

    def can_access_peer(self, peer: Any) -> bool:  # memory.py
        raise NotImplementedError

    def kernel_name(self, kernel_object: int) -> str | None:  # loading.py: for a timer
        raise NotImplementedError

    def _timeline(self, index: int) -> QueueLane:
        """Lane `index`: an AQL queue with its timeline signal and kernarg ring."""
        return self.lanes_[self.check_lane(index)]
