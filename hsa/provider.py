"""The HSA provider interface: the Python face of the HSA API that the driver needs.

Two providers implement it: `hsa.rocr.RocrProvider` (real ROCr through ctypes) and
`hsa.virtual.VirtualProvider` (the in-process virtual AMD system). Method names follow the
HSA functions they wrap (`hsa_signal_create` -> `signal_create`). The driver never knows
which provider it has; `tests/test_provider_conformance.py` runs one suite against both.

Handles are plain ints: an agent handle, a signal handle (in ROCr and in the virtual
system the address of a 64-byte amd_signal_t), a pool handle, a device address. Queues
and executables are small objects, because the driver needs several values from them.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class DeviceType(enum.IntEnum):
    """hsa_device_type_t."""

    CPU = 0
    GPU = 1
    DSP = 2


class SignalCondition(enum.IntEnum):
    """hsa_signal_condition_t."""

    EQ = 0
    NE = 1
    LT = 2
    GTE = 3


class QueueType(enum.IntEnum):
    """hsa_queue_type_t."""

    MULTI = 0
    SINGLE = 1
    COOPERATIVE = 2


class Segment(enum.IntEnum):
    """hsa_amd_segment_t."""

    GLOBAL = 0
    READONLY = 1
    PRIVATE = 2
    GROUP = 3


class GlobalFlag(enum.IntFlag):
    """hsa_amd_memory_pool_global_flag_t."""

    KERNARG_INIT = 1
    FINE_GRAINED = 2
    COARSE_GRAINED = 4


@dataclass(frozen=True)
class AgentInfo:
    """What hsa_agent_get_info tells about one agent."""

    handle: int
    name: str  # "gfx1100" for a GPU, the CPU's marketing name for a CPU
    device_type: DeviceType
    isa: str  # full target id, "gfx942:sramecc+:xnack-"; "" for a CPU agent
    wavefront_size: int = 0
    compute_units: int = 0
    queue_min_size: int = 0
    queue_max_size: int = 0
    node: int = 0
    vendor: str = "AMD"
    uuid: str = ""  # HSA_AMD_AGENT_INFO_UUID: "GPU-<16 hex>" ("" for a CPU agent)


@dataclass(frozen=True)
class PoolInfo:
    """What hsa_amd_memory_pool_get_info tells about one pool."""

    handle: int
    agent: int  # owning agent handle
    segment: Segment
    global_flags: GlobalFlag
    size: int
    granule: int
    alignment: int
    runtime_alloc_allowed: bool
    accessible_by_all: bool

    @property
    def is_kernarg(self) -> bool:
        return self.segment == Segment.GLOBAL and bool(self.global_flags & GlobalFlag.KERNARG_INIT)

    @property
    def is_fine_grained(self) -> bool:
        return bool(self.global_flags & GlobalFlag.FINE_GRAINED)

    @property
    def is_coarse_grained(self) -> bool:
        return bool(self.global_flags & GlobalFlag.COARSE_GRAINED)


class PoolAccess(enum.IntEnum):
    """hsa_amd_memory_pool_access_t (HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS)."""

    NEVER_ALLOWED = 0
    ALLOWED_BY_DEFAULT = 1
    DISALLOWED_BY_DEFAULT = 2


class LinkType(enum.IntEnum):
    """hsa_amd_link_info_type_t."""

    HYPERTRANSPORT = 0
    QPI = 1
    PCIE = 2
    INFINIBAND = 3
    XGMI = 4


@dataclass(frozen=True)
class LinkInfo:
    """One hop of the path from an agent to a pool: hsa_amd_memory_pool_link_info_t
    (HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO; the number of hops is NUM_LINK_HOPS)."""

    link_type: LinkType
    numa_distance: int
    min_latency: int = 0  # ns
    max_latency: int = 0
    min_bandwidth: int = 0  # MB/s
    max_bandwidth: int = 0
    atomic_32bit: bool = False
    atomic_64bit: bool = False
    coherent: bool = False


@dataclass(frozen=True)
class KernelSymbol:
    """hsa_executable_symbol_get_info for a kernel symbol ("name.kd")."""

    name: str
    kernel_object: int  # address of the 64-byte kernel descriptor
    kernarg_segment_size: int
    kernarg_segment_alignment: int
    group_segment_size: int
    private_segment_size: int


@dataclass(frozen=True)
class Capability:
    """An optional feature: whether it is there, and why not when it is not."""

    available: bool
    reason: str = ""


class Queue(abc.ABC):
    """An AQL queue as the driver uses it: ring memory, indices and doorbell.

    `ring` is a writable numpy uint8 view of the `size * 64` bytes at `base_address`, which
    is what `packets.Ring` publishes into.
    """

    handle: int  # address of the hsa_queue_t (amd_queue_t) structure
    base_address: int
    size: int  # in packets, a power of two
    id: int
    doorbell_signal: int
    ring: np.ndarray

    @abc.abstractmethod
    def load_write_index(self) -> int: ...

    @abc.abstractmethod
    def add_write_index(self, n: int) -> int:
        """Atomically add n to the write index; return the old value."""

    @abc.abstractmethod
    def store_write_index(self, value: int) -> None: ...

    @abc.abstractmethod
    def load_read_index(self) -> int: ...

    @abc.abstractmethod
    def doorbell(self, packet_id: int) -> None:
        """Store-release `packet_id` (the id of the last packet written) to the doorbell."""

    @property
    @abc.abstractmethod
    def error(self) -> BaseException | None:
        """The error that stopped this queue, or None while it is healthy."""


@dataclass
class Executable:
    """A frozen (or not yet frozen) executable with the kernels loaded into it."""

    handle: int
    agent: int | None = None
    frozen: bool = False
    kernels: dict[str, KernelSymbol] = field(default_factory=dict)


QueueErrorCallback = Callable[[int, "Queue"], None]  # (hsa status, queue)


class HsaProvider(abc.ABC):
    """The HSA calls the driver needs. Every failure raises `ground.errors.HsaError`."""

    name: str  # "rocr" or "virtual"

    # --- runtime -----------------------------------------------------------------------
    @abc.abstractmethod
    def shut_down(self) -> None:
        """hsa_shut_down: release everything; the provider is unusable afterwards."""

    @abc.abstractmethod
    def capabilities(self) -> dict[str, Capability]:
        """Optional features by name: barrier_value, profiling, async_copy, vmem, ..."""

    @abc.abstractmethod
    def version(self) -> str:
        """Runtime version, e.g. "1.1 (ROCr 5.2.3)" or "virtual"."""

    def agent_lost(self, agent: int) -> dict[str, Any] | None:
        """The GPU memory fault after which `agent` runs no more work in this process
        ({address, reason, ...}; the driver may note its report there), or None. On ROCr
        the kernel driver evicts the process's queues on that GPU for good; the virtual
        system only stops the faulting queue, so it never loses an agent."""
        return None

    def watch_agent_lost(self, agent: int, callback: Any) -> None:
        """Call `callback()` (a weakref.WeakMethod's target, from any thread) once `agent`
        is lost; at once if it is already. Nothing to watch where agents are never lost."""
        return None

    # --- agents and pools ----------------------------------------------------------------
    @abc.abstractmethod
    def agents(self) -> list[AgentInfo]: ...

    def gpu_agents(self) -> list[AgentInfo]:
        return [a for a in self.agents() if a.device_type == DeviceType.GPU]

    def cpu_agents(self) -> list[AgentInfo]:
        return [a for a in self.agents() if a.device_type == DeviceType.CPU]

    @abc.abstractmethod
    def agent_pools(self, agent: int) -> list[PoolInfo]: ...

    @abc.abstractmethod
    def memory_pool_allocate(self, pool: int, size: int) -> int:
        """Returns the device address of a new allocation of at least `size` bytes."""

    @abc.abstractmethod
    def memory_pool_free(self, address: int) -> None: ...

    @abc.abstractmethod
    def agents_allow_access(self, agents: Sequence[int], address: int) -> None: ...

    def agent_pool_access(self, agent: int, pool: int) -> PoolAccess:
        """hsa_amd_agent_memory_pool_get_info(HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS)."""
        raise NotImplementedError(f"{self.name} does not report pool access")

    def agent_pool_links(self, agent: int, pool: int) -> list[LinkInfo]:
        """The hops from `agent` to `pool` (NUM_LINK_HOPS, then LINK_INFO); [] for the
        agent's own pools and for pools it can never reach."""
        raise NotImplementedError(f"{self.name} does not report link info")

    def memory_lock(self, address: int, size: int, agents: Sequence[int]) -> int:
        """hsa_amd_memory_lock: pin `size` bytes of ordinary host memory at `address` for
        `agents`; returns the address the agents use."""
        raise NotImplementedError(f"{self.name} cannot pin host memory")

    def memory_unlock(self, address: int) -> None:
        """hsa_amd_memory_unlock of a host address given to memory_lock."""
        raise NotImplementedError(f"{self.name} cannot pin host memory")

    @abc.abstractmethod
    def host_view(self, address: int, size: int) -> np.ndarray:
        """A writable uint8 numpy view of host-accessible memory (fine-grained, kernarg)."""

    @abc.abstractmethod
    def memory_copy(self, dst: int, src: int, size: int, *, dst_agent: int | None = None,
                    src_agent: int | None = None) -> None:
        """hsa_memory_copy: synchronous copy between any two allocations. Given both sides'
        agents (a GPU, or the CPU for host memory) a provider may copy on its copy engine;
        either way a copy that can no longer complete ends in an error, never a wait
        forever."""

    @abc.abstractmethod
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
        """hsa_amd_memory_async_copy: waits for every dep signal to reach 0, copies, then
        decrements completion_signal by one."""

    # --- signals -------------------------------------------------------------------------
    @abc.abstractmethod
    def signal_create(self, initial_value: int) -> int: ...

    @abc.abstractmethod
    def signal_destroy(self, signal: int) -> None: ...

    @abc.abstractmethod
    def signal_load(self, signal: int) -> int: ...

    @abc.abstractmethod
    def signal_store(self, signal: int, value: int) -> None: ...

    @abc.abstractmethod
    def signal_add(self, signal: int, value: int) -> None: ...

    @abc.abstractmethod
    def signal_subtract(self, signal: int, value: int) -> None: ...

    @abc.abstractmethod
    def signal_exchange(self, signal: int, value: int) -> int:
        """Store value, return the old value."""

    @abc.abstractmethod
    def signal_wait(
        self, signal: int, condition: SignalCondition, compare: int, timeout_s: float
    ) -> int:
        """Wait until `value condition compare` holds; return the value that satisfied it.
        Raises SignalTimeout after timeout_s. Sleeps rather than spins."""

    @abc.abstractmethod
    def signal_wait_any(
        self,
        signals: Sequence[int],
        conditions: Sequence[SignalCondition],
        compares: Sequence[int],
        timeout_s: float,
    ) -> int:
        """Return the index of a signal whose condition holds. Raises SignalTimeout."""

    # --- queues --------------------------------------------------------------------------
    @abc.abstractmethod
    def queue_create(
        self,
        agent: int,
        size: int,
        queue_type: QueueType = QueueType.MULTI,
        callback: QueueErrorCallback | None = None,
    ) -> Queue: ...

    @abc.abstractmethod
    def queue_destroy(self, queue: Queue) -> None: ...

    @abc.abstractmethod
    def profiling_set_enabled(self, queue: Queue, enabled: bool) -> None:
        """hsa_amd_profiling_set_profiler_enabled."""

    @abc.abstractmethod
    def dispatch_time(self, agent: int, signal: int) -> tuple[int, int]:
        """hsa_amd_profiling_get_dispatch_time: (start, end) in nanoseconds of the packet
        whose completion signal this is."""

    @abc.abstractmethod
    def system_timestamp_ns(self) -> int:
        """hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP) in ns: the clock `dispatch_time`
        reads in (host/device clock correlation samples it next to time.monotonic_ns)."""

    # Whether the provider's packet processor writes packet-trace completion records itself.
    records_completions = False

    # --- executables ---------------------------------------------------------------------
    @abc.abstractmethod
    def code_object_reader_create_from_memory(self, data: bytes) -> int: ...

    @abc.abstractmethod
    def code_object_reader_destroy(self, reader: int) -> None: ...

    @abc.abstractmethod
    def executable_create(self) -> Executable: ...

    @abc.abstractmethod
    def executable_load_agent_code_object(
        self, executable: Executable, agent: int, reader: int
    ) -> None: ...

    @abc.abstractmethod
    def executable_freeze(self, executable: Executable) -> None: ...

    @abc.abstractmethod
    def executable_get_symbol_by_name(
        self, executable: Executable, name: str, agent: int
    ) -> KernelSymbol:
        """`name` is the symbol, "saxpy.kd" for a kernel."""

    @abc.abstractmethod
    def executable_destroy(self, executable: Executable) -> None: ...
