"""Publishing packets into AQL queue memory with ROCr's protocol.

1. reserve ids with `add_write_index(n)`;
2. wait until `id + n - read_index <= size` (sleeping briefly; QueueFullError on timeout);
3. write each body (bytes 4..63) while the slot's header is still INVALID (a single
   publish relies on the slot being INVALID already; a batch stores INVALID first);
4. one aligned 32-bit store of `header | setup << 16` per packet (a uint32 element store);
5. ring the doorbell with the id of the last packet.

The ring memory may belong to a real queue (ROCr) or a virtual one; a ring must start with
every slot INVALID (`invalidate_slots`), and the consumer sets a slot back to INVALID before
it advances the read index.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import numpy as np

from amdgpu.errors import PacketError, QueueFullError

from . import trace as _trace
from .build import invalid
from .decode import packet_bytes
from .layout import INVALID_HEADER, PACKET_SIZE

_STATE = _trace.STATE
_now = time.monotonic_ns
_WORD = struct.Struct("=I")  # native, like the memoryview("I") the header goes through
_INVALID_PACKET = invalid()


def invalidate_slots(ring: np.ndarray) -> None:
    """Set every 64-byte slot of `ring` to an INVALID packet (a fresh queue's state)."""
    slots = _as_bytes(ring).reshape(-1, PACKET_SIZE)
    slots[:] = np.frombuffer(_INVALID_PACKET, np.uint8)


def _as_bytes(ring: np.ndarray) -> np.ndarray:
    if not isinstance(ring, np.ndarray):
        raise PacketError(f"ring must be a numpy array over queue memory, got {type(ring)}")
    if not ring.flags.c_contiguous:
        raise PacketError("ring memory must be one contiguous block")
    return ring.reshape(-1).view(np.uint8)


class Ring:
    """A producer's view of one AQL queue: `publish` and `publish_many`.

    Thread safe for several producers as long as `add_write_index` is atomic (the index
    callables are the queue's own). `timeout_s` bounds each wait for room.
    """

    def __init__(
        self,
        ring: np.ndarray,
        size: int,
        load_write_index: Callable[[], int],
        add_write_index: Callable[[int], int],
        load_read_index: Callable[[], int],
        doorbell: Callable[[int], None],
        queue_id: int = 0,
        timeout_s: float = 10.0,
    ):
        if size <= 0 or size & (size - 1):
            raise PacketError(f"ring size {size} is not a power of two; AQL queues need one")
        u8 = _as_bytes(ring)
        if u8.nbytes < size * PACKET_SIZE:
            raise PacketError(
                f"ring memory holds {u8.nbytes} bytes; {size} packets need {size * PACKET_SIZE}"
            )
        u8 = u8[: size * PACKET_SIZE]
        if u8.ctypes.data % 4:
            raise PacketError("ring memory is not 4-byte aligned; headers need aligned stores")
        self.size = size
        self.queue_id = queue_id
        self.timeout_s = timeout_s
        self._mask = size - 1
        self._bytes = u8
        self._mv = memoryview(u8)
        # 32-bit header stores go through a memoryview of native uint32: an aligned 4-byte
        # store, cheaper from Python than a numpy element assignment.
        self._header_words = memoryview(u8).cast("I")
        self._words = u8.view(np.uint32).reshape(size, PACKET_SIZE // 4)
        self._load_write_index = load_write_index
        self._add_write_index = add_write_index
        self._load_read_index = load_read_index
        self._doorbell = doorbell
        # Cached indices: `_read` is a value once observed (read indices only grow), `_hint`
        # our latest reservation end; both only avoid index loads, never replace them.
        self._read = load_read_index()
        self._hint = load_write_index()
        _trace.active_sink()  # AMDGPU_TRACE creates its writer here, at first use

    # --- publishing ----------------------------------------------------------------------

    def publish(self, packet, *, kernarg: bytes | None = None, symbol: str | None = None) -> int:
        """Publish one 64-byte packet; returns its packet id. `kernarg` and `symbol` only
        enrich the trace record when a sink is active."""
        sink = _STATE.sink
        if sink is not None:
            t_reserve = _now()
        if type(packet) is not bytes or len(packet) != PACKET_SIZE:
            packet = packet_bytes(packet)  # raises PacketError for a wrong size
        # Reserve (the common case inline: room known from the cached read index).
        if self._hint - self._read >= self.size:
            self._wait_unreserved(1)
        idx = self._add_write_index(1)
        if idx >= self._hint:
            self._hint = idx + 1
        if idx - self._read >= self.size:
            self._wait_reserved(idx, 1)
        off = (idx & self._mask) << 6
        # The slot's header is INVALID (queues start so; the consumer resets a slot before it
        # advances the read index): write the body around it, then the one 32-bit store.
        self._mv[off + 4:off + PACKET_SIZE] = packet[4:]
        self._header_words[off >> 2] = _WORD.unpack_from(packet)[0]
        if sink is None:
            self._doorbell(idx)
            return idx
        t_publish = _now()
        self._doorbell(idx)
        sink.record_packet(self.queue_id, idx, t_reserve, t_publish, _now(), packet,
                           kernarg, symbol)
        return idx

    def publish_many(self, block: np.ndarray) -> int:
        """Publish N packets (a structured array, PACKET array or (N, 64) uint8) with one
        doorbell; returns the id of the first. Wraps around the ring end in two slices."""
        sink = _STATE.sink
        if sink is not None:
            t_reserve = _now()
        words = _packet_words(block)
        n = words.shape[0]
        if n == 0:
            return self._load_write_index()
        if n > self.size:
            raise PacketError(
                f"{n} packets do not fit a ring of {self.size}; publish them in chunks"
            )
        idx = self._reserve(n)
        start = idx & self._mask
        first = min(n, self.size - start)
        ring = self._words
        # Bodies while the headers stay INVALID, then the header words in packet order.
        ring[start:start + first, 0] = INVALID_HEADER
        ring[start:start + first, 1:] = words[:first, 1:]
        if first < n:
            ring[: n - first, 0] = INVALID_HEADER
            ring[: n - first, 1:] = words[first:, 1:]
        ring[start:start + first, 0] = words[:first, 0]
        if first < n:
            ring[: n - first, 0] = words[first:, 0]
        last = idx + n - 1
        if sink is None:
            self._doorbell(last)
            return idx
        t_publish = _now()
        self._doorbell(last)
        sink.record_packets(self.queue_id, idx, t_reserve, t_publish, _now(),
                            words.view(np.uint8))
        return idx

    # --- room ----------------------------------------------------------------------------

    def _reserve(self, n: int) -> int:
        size = self.size
        if self._hint + n - self._read > size:
            # Possibly full: wait before reserving so that a timeout leaves the queue intact.
            self._wait_unreserved(n)
        idx = self._add_write_index(n)
        end = idx + n
        if end > self._hint:
            self._hint = end
        if end - self._read > size:
            self._wait_reserved(idx, n)
        return idx

    def _wait_unreserved(self, n: int) -> None:
        deadline = None
        spins = 0
        while True:
            write = self._load_write_index()
            read = self._read = self._load_read_index()
            self._hint = max(self._hint, write)
            if write + n - read <= self.size:
                return
            if deadline is None:
                deadline = time.monotonic() + self.timeout_s
            elif time.monotonic() > deadline:
                raise QueueFullError(
                    f"queue {self.queue_id}: no room for {n} packet(s) in {self.timeout_s} s "
                    f"(write index {write}, read index {read}, size {self.size}); the packet "
                    "processor is not consuming: check that the queue is running"
                )
            spins = _pause(spins)

    def _wait_reserved(self, idx: int, n: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        while True:
            read = self._read = self._load_read_index()
            if idx + n - read <= self.size:
                return
            if time.monotonic() > deadline:
                raise QueueFullError(
                    f"queue {self.queue_id}: packet ids {idx}..{idx + n - 1} were reserved but "
                    f"no room came in {self.timeout_s} s (read index {read}, size {self.size}); "
                    "the queue is stalled: the packet processor is not consuming"
                )
            spins = _pause(spins)


def _pause(spins: int) -> int:
    """A short back-off: yield the first few times, then sleep up to 1 ms."""
    if spins < 16:
        time.sleep(0)
    else:
        time.sleep(min(1e-3, 2e-5 * (spins - 15)))
    return spins + 1


def _packet_words(block) -> np.ndarray:
    """An (N, 16) uint32 view (or copy) of a block of packets."""
    if isinstance(block, (bytes, bytearray, memoryview)):
        arr = np.frombuffer(block, np.uint8)
    elif isinstance(block, np.ndarray):
        arr = np.ascontiguousarray(block).reshape(-1).view(np.uint8)
    else:
        raise PacketError(f"a packet block is a numpy array or bytes, got {type(block)}")
    if arr.nbytes % PACKET_SIZE:
        raise PacketError(f"a packet block is a multiple of 64 bytes, got {arr.nbytes}")
    if arr.ctypes.data % 4:
        arr = arr.copy()
    return arr.view("<u4").reshape(-1, PACKET_SIZE // 4)
