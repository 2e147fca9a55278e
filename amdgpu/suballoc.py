"""Sub-allocation of small buffers: slabs from one memory pool, cut into blocks of one size
class each, reused only once the GPU is done with them.

A buffer of at most `max_block` bytes takes a block of the smallest power-of-two class that
holds it (256 bytes at least, so blocks keep the alignment kernels and copies want). A slab
is one pool allocation (`slab_bytes`, 2 MiB by default: a large-page multiple on ROCr), so
10,000 small buffers make a handful of HSA allocations instead of 10,000.

Reuse follows the timeline. A block given back (`release`) carries the lanes' submitted
values at that moment; it returns to its free list only once every lane has completed them,
so work submitted before the free can still use the memory. Lanes' values only grow, so the
queue of released blocks is in completion order: `take` moves blocks over from its head and
stops at the first one still in use.

Slabs go back to the pool early. A slab whose every block is free (given back and past its
timeline points, so no submitted work can touch it) is an empty slab; each size class keeps
`spare_slabs` of them (1 by default, so a buffer allocated and freed over and over at a
slab's edge does not make an HSA call each time) and frees the others at once
(`hsa_amd_memory_pool_free`). Released blocks still waiting for the GPU are looked at on
every `take` and on `trim()`, which the device calls from `synchronize`. Whatever is left is
freed when the allocator closes.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import Any

MIN_BLOCK = 256
MAX_BLOCK = 64 << 10
SLAB_BYTES = 2 << 20


class Block:
    """One block: `address`, its size class and its slab's `base` (what allow_access and
    the pool know)."""

    __slots__ = ("address", "size", "base")

    def __init__(self, address: int, size: int, base: int):
        self.address = address
        self.size = size
        self.base = base

    def __repr__(self) -> str:
        return f"Block(0x{self.address:x}, {self.size} bytes, slab 0x{self.base:x})"


def size_class(nbytes: int) -> int:
    """The block size for a buffer of `nbytes` (a power of two, MIN_BLOCK at least)."""
    return max(MIN_BLOCK, 1 << max(nbytes - 1, 0).bit_length())


class SlabAllocator:
    """Blocks of one memory pool. `allocate(nbytes) -> address` and `free(address)` are the
    pool's calls (hsa_amd_memory_pool_allocate / _free); `lanes()` the device's lanes
    (`.submitted`, `.completed()`)."""

    def __init__(
        self,
        allocate: Callable[[int], int],
        free: Callable[[int], None],
        lanes: Callable[[], Sequence[Any]],
        *,
        max_block: int = MAX_BLOCK,
        slab_bytes: int = SLAB_BYTES,
        spare_slabs: int = 1,
    ):
        if max_block > slab_bytes:
            raise ValueError("a block must fit in a slab")
        if spare_slabs < 0:
            raise ValueError("spare_slabs counts empty slabs kept per size class: 0 or more")
        self._allocate = allocate
        self._free = free
        self._lanes = lanes
        self.max_block = max_block
        self.slab_bytes = slab_bytes
        self._lock = threading.Lock()
        self._free_blocks: dict[int, list[Block]] = collections.defaultdict(list)
        self._released: collections.deque[tuple[Block, list]] = collections.deque()
        self.slabs: list[int] = []
        self.slab_set: set[int] = set()
        self.taken = 0  # blocks handed out and not given back
        self.spare_slabs = spare_slabs
        self._busy: dict[int, int] = {}  # slab base -> its blocks not on a free list
        self._size_of: dict[int, int] = {}  # slab base -> its size class
        self._empty: dict[int, list[int]] = collections.defaultdict(list)  # class -> slabs
        self.returned = 0  # slabs given back to the pool before close

    def fits(self, nbytes: int) -> bool:
        return 0 < nbytes <= self.max_block

    def take(self, nbytes: int) -> Block:
        """A block for `nbytes`: a free one, one whose release the lanes have passed, or one
        of a new slab (the only HSA call)."""
        size = size_class(nbytes)
        with self._lock:
            self._collect()
            free = self._free_blocks[size]
            if not free:
                self._grow(size)
            self.taken += 1
            block = free.pop()
            busy = self._busy[block.base]
            if busy == 0:
                self._empty[size].remove(block.base)
            self._busy[block.base] = busy + 1
            return block

    def release(self, block: Block) -> None:
        """Give `block` back; it is reused after the work submitted so far completes."""
        marks = [(ln, ln.submitted) for ln in self._lanes()]
        with self._lock:
            self.taken -= 1
            if all(ln.completed() >= value for ln, value in marks):
                self._put_back(block)
                self._return_empty()
            else:
                self._released.append((block, marks))

    def release_idle(self, block: Block) -> None:
        """Give back a block that no submitted work uses (a dropped buffer, reaped)."""
        with self._lock:
            self.taken -= 1
            self._put_back(block)
            self._return_empty()

    def trim(self) -> None:
        """Move released blocks the lanes have passed to their free lists and give back the
        empty slabs beyond the spares (the device calls this from synchronize)."""
        with self._lock:
            self._collect()

    def _put_back(self, block: Block) -> None:
        self._free_blocks[block.size].append(block)
        busy = self._busy[block.base] - 1
        self._busy[block.base] = busy
        if busy == 0:
            self._empty[block.size].append(block.base)

    def _collect(self) -> None:
        released = self._released
        while released:
            block, marks = released[0]
            if not all(ln.completed() >= value for ln, value in marks):
                break  # later releases carry values at least as high: none is done either
            released.popleft()
            self._put_back(block)
        self._return_empty()

    def _return_empty(self) -> None:
        """Free the empty slabs of each size class beyond `spare_slabs` (the oldest stay)."""
        for size, empty in self._empty.items():
            while len(empty) > self.spare_slabs:
                base = empty.pop()
                self._free_blocks[size] = [b for b in self._free_blocks[size] if b.base != base]
                self.slabs.remove(base)
                self.slab_set.discard(base)
                del self._busy[base], self._size_of[base]
                self._free(base)
                self.returned += 1

    def _grow(self, size: int) -> None:
        base = self._allocate(self.slab_bytes)
        self.slabs.append(base)
        self.slab_set.add(base)
        self._busy[base] = 0
        self._size_of[base] = size
        self._empty[size].append(base)
        # handed out from the slab's start: pop() takes from the end of the list
        self._free_blocks[size].extend(
            Block(base + off, size, base)
            for off in range(self.slab_bytes - size, -1, -size)
        )

    def close(self) -> None:
        """Free every slab (the device has waited for its lanes)."""
        with self._lock:
            slabs, self.slabs = self.slabs, []
            self.slab_set.clear()
            self._free_blocks.clear()
            self._released.clear()
            self._busy.clear()
            self._size_of.clear()
            self._empty.clear()
        for base in slabs:
            self._free(base)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "slabs": len(self.slabs),
                "slab_bytes": len(self.slabs) * self.slab_bytes,
                "blocks_in_use": self.taken,
                "blocks_waiting_for_gpu": len(self._released),
                "slabs_returned": self.returned,
            }
