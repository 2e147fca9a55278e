"""The virtual AMD system's memory: host memory at real addresses, and the map that every
access by a virtual agent goes through.

Each allocation is a numpy byte array; its device address is its real host address, so
pointers that the driver writes into kernargs and packets are the same numbers the ISA
executor dereferences. An access outside every allocation, or to an allocation the agent
has not been given access to, raises `MemoryFault`, as a GPU's page fault would.
"""

from __future__ import annotations

import bisect
import mmap
import threading
from dataclasses import dataclass, field

import numpy as np

from ground.errors import MemoryFault
from ground.status import HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION

HOST = None  # the "agent" of accesses made by the host itself: never checked
# Allocations this large get their own anonymous mapping, whose pages go back to the kernel
# when the allocation is freed (MADV_DONTNEED: a stale view then reads zeros, never another
# allocation's bytes) and whose address range goes when the last view of it does. From the
# malloc heap (whose thresholds the ISA executor raises, hsa/virtual/isa/heap.py) freed
# rings and kernarg pools stayed in the process: 17 MiB per closed device.
OWN_MAPPING_BYTES = 256 << 10


@dataclass(eq=False)  # identity: the ISA executor keys its program cache weakly by it
class Allocation:
    base: int
    size: int
    data: np.ndarray  # uint8, exactly `size` bytes at address `base`
    owner: int  # agent handle of the owning pool's agent
    pool: int  # pool handle
    allowed: set[int] = field(default_factory=set)  # agents with access
    accessible_by_all: bool = False
    mapping: mmap.mmap | None = None  # its own anonymous mapping (OWN_MAPPING_BYTES)

    @property
    def end(self) -> int:
        return self.base + self.size

    def accessible_to(self, agent: int | None) -> bool:
        return agent is None or self.accessible_by_all or agent in self.allowed

    def typed(self, dtype: np.dtype) -> np.ndarray:
        """The allocation as an array of `dtype` (cached; trailing bytes left out)."""
        views = self.__dict__.setdefault("_typed", {})
        view = views.get(dtype)
        if view is None:
            size = dtype.itemsize
            view = views[dtype] = self.data[: self.size - self.size % size].view(dtype)
        return view


def _fault(address: int, why: str) -> MemoryFault:
    return MemoryFault(
        HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
        f"memory fault at 0x{address:x}: {why}",
        address=address,
    )


class MemoryMap:
    """All allocations of one virtual system, looked up by address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Sorted bases and their allocations, as ONE tuple replaced (never mutated) under the
        # lock, so that lookups from executor threads read a consistent pair without locking.
        self._index: tuple[list[int], list[Allocation]] = ([], [])

    # --- allocation ----------------------------------------------------------------------
    def allocate(
        self,
        size: int,
        *,
        owner: int,
        pool: int,
        alignment: int = 4096,
        accessible_by_all: bool = False,
    ) -> Allocation:
        if size <= 0:
            raise ValueError("allocation size must be positive")
        mapping = None
        if size >= OWN_MAPPING_BYTES:
            extra = alignment if alignment > mmap.PAGESIZE else 0
            mapping = mmap.mmap(-1, size + extra)  # zero-filled, page-aligned
            raw = np.frombuffer(mapping, dtype=np.uint8)
        else:
            raw = np.zeros(size + alignment, dtype=np.uint8)
        start = (-raw.ctypes.data) % alignment
        data = raw[start : start + size]
        alloc = Allocation(
            base=data.ctypes.data,
            size=size,
            data=data,
            owner=owner,
            pool=pool,
            allowed={owner},
            accessible_by_all=accessible_by_all,
            mapping=mapping,
        )
        with self._lock:
            bases, allocs = self._index
            i = bisect.bisect_left(bases, alloc.base)
            self._index = (bases[:i] + [alloc.base] + bases[i:], allocs[:i] + [alloc] + allocs[i:])
        return alloc

    def adopt(self, base: int, data: np.ndarray, *, owner: int, pool: int,
              allowed: set[int]) -> Allocation:
        """Map memory the system did not allocate (pinned host memory: `data` views it at
        `base`). ValueError when it overlaps an allocation."""
        alloc = Allocation(base=base, size=data.size, data=data, owner=owner, pool=pool,
                           allowed=set(allowed))
        with self._lock:
            bases, allocs = self._index
            i = bisect.bisect_left(bases, base)
            if (i > 0 and allocs[i - 1].end > base) or (i < len(bases) and bases[i] < alloc.end):
                raise ValueError(f"0x{base:x}..+{data.size} overlaps an allocation")
            self._index = (bases[:i] + [base] + bases[i:], allocs[:i] + [alloc] + allocs[i:])
        return alloc

    def overlaps(self, base: int, size: int) -> bool:
        bases, allocs = self._index
        i = bisect.bisect_left(bases, base)
        return (i > 0 and allocs[i - 1].end > base) or (i < len(bases) and bases[i] < base + size)

    def free(self, base: int) -> Allocation:
        with self._lock:
            bases, allocs = self._index
            i = bisect.bisect_left(bases, base)
            if i == len(bases) or bases[i] != base:
                raise KeyError(base)
            alloc = allocs[i]
            self._index = (bases[:i] + bases[i + 1 :], allocs[:i] + allocs[i + 1 :])
        if alloc.mapping is not None:
            alloc.mapping.madvise(mmap.MADV_DONTNEED)
        return alloc

    def allocations(self) -> list[Allocation]:
        return list(self._index[1])

    # --- lookup --------------------------------------------------------------------------
    def find(self, address: int, size: int = 1, agent: int | None = HOST) -> Allocation:
        """The allocation holding [address, address + size), checked for `agent`."""
        bases, allocs = self._index
        i = bisect.bisect_right(bases, address) - 1
        if i < 0 or address + size > allocs[i].end:
            raise _fault(address, f"{size} bytes outside every allocation")
        alloc = allocs[i]
        if not alloc.accessible_to(agent):
            raise _fault(address, f"allocation at 0x{alloc.base:x} is not mapped for agent {agent}")
        return alloc

    def view(self, address: int, size: int, agent: int | None = HOST) -> np.ndarray:
        """A writable uint8 view of `size` bytes at `address` (one allocation)."""
        alloc = self.find(address, size, agent)
        off = address - alloc.base
        return alloc.data[off : off + size]

    def read(self, address: int, size: int, agent: int | None = HOST) -> bytes:
        return self.view(address, size, agent).tobytes()

    def write(self, address: int, data: bytes | np.ndarray, agent: int | None = HOST) -> None:
        buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else (
            np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        )
        self.view(address, buf.size, agent)[:] = buf

    # --- per-lane access for the ISA executor --------------------------------------------
    def gather(
        self, addresses: np.ndarray, dtype: np.dtype, agent: int | None = HOST
    ) -> np.ndarray:
        """Load one `dtype` value from each address (any alignment, any array shape); the
        result has the shape of `addresses`."""
        dtype = np.dtype(dtype)
        addresses = np.asarray(addresses, dtype=np.uint64)
        shape = addresses.shape
        flat = addresses.reshape(-1)
        if flat.size == 0:
            return np.empty(shape, dtype=dtype)
        size = dtype.itemsize
        fast = self._one_allocation(flat, size, agent)
        if fast is not None:  # the common case: every lane in one buffer
            alloc, off, either = fast
            if size == 1:
                out = alloc.data[off].view(dtype)
            elif _is_pow2(size) and not either & (size - 1):
                out = alloc.typed(dtype)[off >> _SHIFT[size]]
            else:
                out = _gather_one(alloc.data, off.astype(np.int64), dtype)
            return out.reshape(shape)
        out = np.empty(flat.size, dtype=dtype)
        for alloc, idx, offsets in self._group(flat, size, agent):
            out[idx] = _gather_one(alloc.data, offsets, dtype)
        return out.reshape(shape)

    def scatter(
        self, addresses: np.ndarray, values: np.ndarray, agent: int | None = HOST
    ) -> None:
        """Store values[i] at addresses[i] (`values` broadcasts to the shape of
        `addresses`); later lanes win when addresses repeat."""
        values = np.asarray(values)
        dtype = values.dtype
        addresses = np.asarray(addresses, dtype=np.uint64)
        flat = addresses.reshape(-1)
        if flat.size == 0:
            return
        if values.shape != addresses.shape:
            values = np.broadcast_to(values, addresses.shape)
        values = values.reshape(-1)
        size = dtype.itemsize
        fast = self._one_allocation(flat, size, agent)
        if fast is not None:
            alloc, off, either = fast
            if size == 1:
                alloc.data[off] = values.view(np.uint8)
            elif _is_pow2(size) and not either & (size - 1):
                alloc.typed(dtype)[off >> _SHIFT[size]] = values
            else:
                _scatter_one(alloc.data, off.astype(np.int64), values)
            return
        for alloc, idx, offsets in self._group(flat, size, agent):
            _scatter_one(alloc.data, offsets, values[idx])

    def _one_allocation(self, addresses: np.ndarray, itemsize: int, agent: int | None):
        """(allocation, int64 byte offsets, their bitwise OR) when every lane lies in the
        allocation of the first lane and the agent may access it; None otherwise (take the
        general path)."""
        alloc = self._try_find(int(addresses[0]))
        if alloc is None:
            return None
        # int64 offsets index numpy arrays without a conversion pass; a lane below the base
        # is negative (or, past 2**63, wraps to a huge value)
        off = addresses.view(np.int64) - np.int64(alloc.base)
        # One reduction for bounds and alignment: every offset <= their OR, so when the OR
        # fits, all lanes fit; only otherwise is the exact maximum needed. A negative
        # offset makes the OR negative.
        either = int(np.bitwise_or.reduce(off))
        limit = alloc.size - itemsize
        if either < 0 or (either > limit and int(off.max()) > limit):
            return None
        if not alloc.accessible_to(agent):
            self.find(int(addresses[0]), itemsize, agent)  # raises the access fault
        return alloc, off, either

    def _group(self, addresses: np.ndarray, itemsize: int, agent: int | None):
        """Split lane addresses by allocation: [(allocation, lane index, byte offsets)].
        Raises MemoryFault for the first lane outside every allocation."""
        lo = int(addresses.min())
        hi = int(addresses.max())
        alloc = self._try_find(lo)
        if alloc is not None and hi + itemsize <= alloc.end:  # the common case: one buffer
            if not alloc.accessible_to(agent):
                self.find(lo, itemsize, agent)  # raises the access fault
            return [(alloc, slice(None), (addresses - np.uint64(alloc.base)).astype(np.int64))]
        groups = []
        remaining = np.arange(addresses.size)
        while remaining.size:
            first = int(addresses[remaining[0]])
            alloc = self.find(first, itemsize, agent)
            a = addresses[remaining]
            inside = (a >= alloc.base) & (a + np.uint64(itemsize) <= np.uint64(alloc.end))
            lanes = remaining[inside]
            offsets = (addresses[lanes] - np.uint64(alloc.base)).astype(np.int64)
            groups.append((alloc, lanes, offsets))
            remaining = remaining[~inside]
        return groups

    def _try_find(self, address: int) -> Allocation | None:
        bases, allocs = self._index
        i = bisect.bisect_right(bases, address) - 1
        if i < 0:
            return None
        alloc = allocs[i]
        return alloc if address < alloc.end else None


_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4, 32: 5, 64: 6}


def _is_pow2(size: int) -> bool:
    return size in _SHIFT


def _windows(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`data` as one `dtype` value at every byte offset: a view whose item i is the
    itemsize bytes at offset i, so that an unaligned access of many lanes (a dwordx4 load at
    a dword address: a convolution's window) is one item gather or scatter, not an index
    per byte (x16 the index array, byte copies)."""
    return np.ndarray((data.size - dtype.itemsize + 1,), dtype=dtype, buffer=data,
                      strides=(1,))


def _gather_one(data: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    size = dtype.itemsize
    if size == 1:
        return data[offsets].view(dtype)
    if not np.any(offsets % size):  # aligned: index a typed view
        usable = data[: data.size - data.size % size].view(dtype)
        return usable[offsets // size]
    return _windows(data, dtype)[offsets]


def _scatter_one(data: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> None:
    size = values.dtype.itemsize
    if size == 1:
        data[offsets] = values.view(np.uint8)
        return
    if not np.any(offsets % size):
        data[: data.size - data.size % size].view(values.dtype)[offsets // size] = values
        return
    # overlapping windows: a later lane's bytes win, as with one store after another
    _windows(data, values.dtype)[offsets] = values
