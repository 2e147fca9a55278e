"""Publishing packets into AQL queue memory with ROCr's protocol.

1. reserve ids with `add_write_index(n)`;
2. wait until `id + n - read_index <= size` (sleeping briefly; QueueFullError on timeout);
3. write the body (bytes 4..63) while the slot's header is still INVALID;
4. one aligned 32-bit store of `header | setup << 16` (a uint32 element store);
5. ring the doorbell with the id of the last packet.

The ring memory may belong to a real queue (ROCr) or a virtual one; a ring must start with
every slot INVALID (`invalidate_slots`), and the consumer sets a slot back to INVALID before
it advances the read index, so a reserved slot is INVALID until its producer writes it.

A batch (`publish_many`) writes every body, then every header in packet order, then rings
once. A caller that republishes one block (a command buffer's replay) may keep it with
INVALID headers and pass the header words apart (`headers=`): the bodies then go in with
one contiguous copy (two where the batch wraps around the ring end), the headers after.

Each form is written once here: `publish_parts` (one packet; `publish` parses one first),
`publish_ready` / `publish_rows` (a kept block, its first header apart) and `publish_many`
(any block, and every traced publish), over one `_reserve_block` and one `_copy_in`. This
is the packets library's own implementation, in Python, and the HSA backend's where its
compiled hot path is not built; amdgpu/hsa_backend/hotpath.c's Lane is the compiled one
(one `lane_publish` for every form), which tests/test_hot_path.py compares against these.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import numpy as np

from ground.errors import PacketError, QueueFullError

from . import trace as _trace
from .build import invalid
from .decode import packet_bytes
from .layout import INVALID_HEADER, PACKET_SIZE

_STATE = _trace.STATE
_now = time.monotonic_ns
_WORD = struct.Struct("=I")  # native, like the memoryview("I") the header goes through
_INVALID_PACKET = invalid()
_INVALID_TYPE = INVALID_HEADER & 0xFF
# Batches up to these sizes are written with Python slice/element stores; larger ones with
# numpy (whose fixed cost per call is about that of 2 packets' or 8 headers' stores).
_SMALL_BLOCK = 2
_SMALL_HEADERS = 8


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


class Room:
    """Step 2 of the protocol, waiting for room in one AQL queue: the one implementation,
    used by Ring and by the HSA backend's compiled lane (amdgpu/hsa_backend/hotpath.c),
    each of which keeps its own cached indices and asks here only when they say full.
    Reads the queue's indices, never writes anything but its caller's answer."""

    def __init__(self, size: int, load_write_index: Callable[[], int],
                 load_read_index: Callable[[], int], queue_id: int = 0,
                 timeout_s: float = 10.0):
        self.size = size
        self.queue_id = queue_id
        self.timeout_s = timeout_s
        self.load_write_index = load_write_index
        self.load_read_index = load_read_index

    def before_reserve(self, n: int) -> tuple[int, int]:
        """Wait until n more packets fit after the write index (nothing reserved yet, so a
        timeout leaves the queue intact); returns the (write, read) indices seen."""
        deadline = None
        spins = 0
        while True:
            write = self.load_write_index()
            read = self.load_read_index()
            if write + n - read <= self.size:
                return write, read
            if deadline is None:
                deadline = time.monotonic() + self.timeout_s
            elif time.monotonic() > deadline:
                raise QueueFullError(
                    f"queue {self.queue_id}: no room for {n} packet(s) in {self.timeout_s} s "
                    f"(write index {write}, read index {read}, size {self.size}); the packet "
                    "processor is not consuming: check that the queue is running"
                )
            spins = _pause(spins)

    def after_reserve(self, idx: int, n: int) -> int:
        """Wait until the reserved ids idx..idx+n-1 have their slots; returns the read
        index seen."""
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        while True:
            read = self.load_read_index()
            if idx + n - read <= self.size:
                return read
            if time.monotonic() > deadline:
                raise QueueFullError(
                    f"queue {self.queue_id}: packet ids {idx}..{idx + n - 1} were reserved but "
                    f"no room came in {self.timeout_s} s (read index {read}, size {self.size}); "
                    "the queue is stalled: the packet processor is not consuming"
                )
            spins = _pause(spins)


def ready_view(src: memoryview, size: int) -> memoryview:
    """`src` (block_view of packets whose first header is INVALID, given apart), or the
    one PacketError of publish_ready's form (Ring.publish_ready and the compiled lane)."""
    n = src.nbytes >> 6
    if not 0 < n <= size or src[0] != _INVALID_TYPE:
        raise PacketError(
            f"publish_ready takes 1..{size} packets whose first header is INVALID "
            f"(got {n} packets, first type {src[0] if n else None}); use publish_many"
        )
    return src


def rows_view(src: memoryview, size: int, k: int, signal_row: int) -> memoryview:
    """publish_rows's block (a block_view), or its one PacketError (Ring and the compiled
    lane)."""
    n = src.nbytes >> 6
    if not 0 < n <= size or src[0] != _INVALID_TYPE or not (k <= n and 0 <= signal_row < n):
        raise PacketError(
            f"publish_rows takes 1..{size} packets whose first header is INVALID, "
            f"at most one kernarg offset per packet and a signal row among them (got "
            f"{n} packets, first type {src[0] if n else None}, {k} offsets, signal row "
            f"{signal_row})"
        )
    return src


def many_view(src: memoryview, size: int, headers=None) -> memoryview:
    """publish_many's block (a block_view; 0 packets allowed), or its one PacketError."""
    n = src.nbytes >> 6
    if n > size:
        raise PacketError(f"{n} packets do not fit a ring of {size}; publish them in chunks")
    if headers is not None and (len(headers) != n or (n and src[0] != _INVALID_TYPE)):
        raise PacketError(
            f"publish_many(block, headers=...) takes N header words ({len(headers)} for "
            f"{n} packets) and a block whose headers are INVALID (they go in last); "
            "pass the block alone otherwise"
        )
    return src


def record_published(sink, queue_id: int, first: int, times, src, headers=None,
                     record=None, record_args=()) -> None:
    """The trace record of a published block (`times`: reserve, publish and doorbell ns):
    `record(queue_id, first, *times, *record_args)` where the caller records its own way,
    else the packets as they went out. One form for Ring and the HSA backend's lanes."""
    if record is not None:
        record(queue_id, first, *times, *record_args)
        return
    rows = np.frombuffer(src, np.uint8)
    if headers is not None:  # the record holds the packets as published
        rows = rows.copy()
        rows.view(np.uint32)[::16] = headers
    sink.record_packets(queue_id, first, *times, rows)


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
        self._ring_bytes = size * PACKET_SIZE
        self._words = u8.view(np.uint32).reshape(size, PACKET_SIZE // 4)
        # the last block given to publish_many and its byte view (a replayed command buffer
        # publishes the same array each time; making the view costs more than the copy)
        self._last: tuple = (None, None)
        self.doorbells = 0  # doorbells rung through this ring (tests and stats read it)
        self._load_write_index = load_write_index
        self._add_write_index = add_write_index
        self._doorbell = doorbell
        self.room = Room(size, load_write_index, load_read_index, queue_id, timeout_s)
        # Cached indices: `_read` is a value once observed (read indices only grow), `_hint`
        # our latest reservation end; both only avoid index loads, never replace them.
        self._read = load_read_index()
        self._hint = load_write_index()
        _trace.active_sink()  # AMDGPU_TRACE creates its writer here, at first use

    # --- publishing ----------------------------------------------------------------------

    def publish(self, packet, *, kernarg: bytes | None = None, symbol: str | None = None) -> int:
        """Publish one 64-byte packet; returns its packet id. `kernarg` and `symbol` only
        enrich the trace record when a sink is active."""
        if type(packet) is not bytes or len(packet) != PACKET_SIZE:
            packet = packet_bytes(packet)  # raises PacketError for a wrong size
        return self.publish_parts(packet[4:], _WORD.unpack_from(packet)[0], kernarg, symbol)

    def publish_parts(self, body, header: int, kernarg: bytes | None = None,
                      symbol: str | None = None) -> int:
        """`publish` of a packet kept as its 60 bytes after the header word (any buffer:
        a cached launch keeps a memoryview of its packet template) and the 32-bit header
        word (`header | setup << 16`): the single-packet form of the publish sequence."""
        sink = _STATE.sink
        if sink is not None:  # traced: the batch form, recorded with the kernarg and symbol
            packet = _WORD.pack(header) + bytes(body)
            return self.publish_many(packet, None, sink.record_packet, (packet, kernarg, symbol))
        # Reserve (the common case inline: room known from the cached read index).
        if self._hint - self._read >= self.size:
            self._wait_unreserved(1)
        idx = self._add_write_index(1)
        if idx >= self._hint:
            self._hint = idx + 1
        if idx - self._read >= self.size:
            self._read = self.room.after_reserve(idx, 1)
        off = (idx & self._mask) << 6
        # The slot's header is INVALID (queues start so; the consumer resets a slot before it
        # advances the read index): write the body around it, then the one 32-bit store.
        self._mv[off + 4:off + PACKET_SIZE] = body
        self._header_words[off >> 2] = header
        self.doorbells += 1
        self._doorbell(idx)
        return idx

    def publish_ready(self, block: np.ndarray, first_header: int) -> int:
        """Publish N packets held in `block` as they go out, except the first, whose header
        is INVALID there and `first_header` here; returns the id of the first. One copy of
        the whole block (two on wrap), then the one header store: an in-order packet
        processor reaches packets 2..N only through packet 1, whose header is written after
        every other byte, so the other headers need no store of their own (the doorbell
        comes last, as always). The fast form for a block published again and again (a
        command buffer's); `publish_many` does the rest (traced, wait packets in front)."""
        src = ready_view(self._kept_view(block), self.size)
        n = src.nbytes >> 6
        idx = self._reserve_block(n)
        off = self._copy_in(src, idx)
        self._header_words[off >> 2] = first_header
        self.doorbells += 1
        self._doorbell(idx + n - 1)
        return idx

    def publish_rows(self, block: np.ndarray, first_header: int, kernarg_base: int,
                     kernarg_offsets: np.ndarray, signal_row: int, signal: int) -> int:
        """`publish_ready` of `block` as the ring receives it with two fields set on the way,
        `block` itself unchanged: the kernarg_address (u64 word 5) of its first
        len(kernarg_offsets) rows, kernarg_base + kernarg_offsets[i], and the
        completion_signal (u64 word 7) of row `signal_row`. One packet block then serves
        every kernarg block it is replayed with (a command buffer's kept instances): no
        copy of the block per instance, and the one the ring reads from stays in the
        cache. The fields are set before the first header is stored, like the rest."""
        k = len(kernarg_offsets)
        src = rows_view(block_view(block), self.size, k, signal_row)
        n = src.nbytes >> 6
        idx = self._reserve_block(n)
        off = self._copy_in(src, idx)
        words = self._bytes.view(np.uint64).reshape(self.size, 8)
        start = idx & self._mask
        first = min(k, self.size - start)
        base = np.uint64(kernarg_base)
        np.add(kernarg_offsets[:first], base, out=words[start:start + first, 5])
        if first < k:
            np.add(kernarg_offsets[first:], base, out=words[:k - first, 5])
        words[(idx + signal_row) & self._mask, 7] = signal
        self._header_words[off >> 2] = first_header
        self.doorbells += 1
        self._doorbell(idx + n - 1)
        return idx

    def _kept_view(self, block) -> memoryview:
        """`block` as bytes; the last block's view is kept (a command buffer republishes one
        block, and making the view costs more than the copy)."""
        last = self._last  # (block, view): one tuple, so threads never see a mixed pair
        if block is last[0]:
            return last[1]
        src = block_view(block)
        if _is_view_of(src, block):
            # a view, not a copy: stays right however the array's contents change
            # (bytearrays are not kept: a held view would stop them from resizing)
            self._last = (block, src)
        return src

    def _copy_in(self, src: memoryview, idx: int) -> int:
        """`src` into the ring from packet id `idx` on (two copies where it wraps); returns
        the byte offset of its first slot."""
        off = (idx & self._mask) << 6
        nbytes = src.nbytes
        mv = self._mv
        tail = self._ring_bytes - off
        if nbytes <= tail:
            mv[off:off + nbytes] = src
        else:
            mv[off:] = src[:tail]
            mv[:nbytes - tail] = src[tail:]
        return off

    def _reserve_block(self, n: int) -> int:
        """Ids for n packets, with room for them (publish_ready's reservation)."""
        if self._hint + n - self._read > self.size:
            self._wait_unreserved(n)
        idx = self._add_write_index(n)
        last_id = idx + n - 1
        if last_id >= self._hint:
            self._hint = last_id + 1
        if last_id - self._read >= self.size:
            self._read = self.room.after_reserve(idx, n)
        return idx

    def _wait_unreserved(self, n: int) -> None:
        write, self._read = self.room.before_reserve(n)
        self._hint = max(self._hint, write)

    @property
    def hint(self) -> int:
        """The end of this producer's latest reservation as it knows it (tests compare)."""
        return self._hint

    def publish_many(self, block, headers=None, record=None, record_args=()) -> int:
        """Publish N packets (a structured array, PACKET array, (N, 64) uint8, or bytes) with
        one doorbell; returns the id of the first. Wraps around the ring end.

        `headers`: the N 32-bit header words (`header | setup << 16`, a uint32 array or a
        list) when `block` holds the packets with INVALID headers: the fast form for a
        block that is published again and again. The block may be reused or changed as soon
        as this returns.

        `record`: while a trace sink is active, called instead of the sink's
        `record_packets` with (queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
        *record_args): a caller that traces the block its own way (a command buffer replay:
        `sink.block_replay`, its template recorded once) and so spares the packet copy."""
        sink = _STATE.sink
        if sink is None:
            return self._publish_block(many_view(self._kept_view(block), self.size, headers),
                                       headers, None)
        times = [_now(), 0, 0]
        src = many_view(self._kept_view(block), self.size, headers)
        idx = self._publish_block(src, headers, times)
        record_published(sink, self.queue_id, idx, times, src, headers, record, record_args)
        return idx

    def publish_timed(self, block, headers=None) -> tuple[int, int, int, int]:
        """publish_many without a trace record: (first id, reserve, publish and doorbell
        times in monotonic ns), for a caller that records it (record_published)."""
        times = [_now(), 0, 0]
        src = many_view(self._kept_view(block), self.size, headers)
        idx = self._publish_block(src, headers, times)
        return idx, times[0], times[1], times[2]

    def _publish_block(self, src: memoryview, headers, times: list | None) -> int:
        """The checked block `src` published (publish_many's steps); `times` gets the
        publish and doorbell times."""
        nbytes = src.nbytes
        n = nbytes >> 6
        if n == 0:
            return self.room.load_write_index()
        # Possibly full: _reserve_block waits before reserving, so that a timeout leaves
        # the queue intact.
        idx = self._reserve_block(n)
        last_id = idx + n - 1
        if headers is None:
            self._write_packets(src, n, idx)
        elif n <= _SMALL_HEADERS and nbytes <= self._ring_bytes - ((idx & self._mask) << 6):
            # no wrap, few headers: one copy, then the header stores (_write_bodies...)
            off = (idx & self._mask) << 6
            self._mv[off:off + nbytes] = src
            hw = self._header_words
            word = off >> 2
            for h in headers:
                hw[word] = h
                word += 16
        else:
            self._write_bodies_then_headers(src, n, idx, headers)
        self.doorbells += 1
        if times is not None:
            times[1] = _now()
        self._doorbell(last_id)
        if times is not None:
            times[2] = _now()
        return idx

    def _write_packets(self, src: memoryview, n: int, idx: int) -> None:
        """Every body (the headers stay INVALID), then every header, in packet order."""
        mask = self._mask
        if n <= _SMALL_BLOCK:  # a few slice stores cost less than numpy's per-call overhead
            mv, hw, word = self._mv, self._header_words, _WORD.unpack_from
            for i in range(n):
                off = ((idx + i) & mask) << 6
                mv[off + 4:off + PACKET_SIZE] = src[(i << 6) + 4:(i + 1) << 6]
            for i in range(n):
                hw[((idx + i) & mask) << 4] = word(src, i << 6)[0]
            return
        words = np.frombuffer(src, np.uint32).reshape(n, PACKET_SIZE // 4)
        ring = self._words
        start = idx & mask
        first = min(n, self.size - start)
        ring[start:start + first, 1:] = words[:first, 1:]
        if first < n:
            ring[:n - first, 1:] = words[first:, 1:]
        ring[start:start + first, 0] = words[:first, 0]
        if first < n:
            ring[:n - first, 0] = words[first:, 0]

    def _write_bodies_then_headers(self, src: memoryview, n: int, idx: int, headers) -> None:
        """`src` has INVALID headers: one contiguous copy (two on wrap), then the headers."""
        self._copy_in(src, idx)
        if n <= _SMALL_HEADERS:
            hw, mask = self._header_words, self._mask
            if type(headers) is not list:
                headers = headers.tolist()
            for i, h in enumerate(headers):
                hw[((idx + i) & mask) << 4] = h
            return
        ring = self._words
        start = idx & self._mask
        first = min(n, self.size - start)
        ring[start:start + first, 0] = headers[:first]
        if first < n:
            ring[:n - first, 0] = headers[first:]


def _pause(spins: int) -> int:
    """A short back-off: yield the first few times, then sleep up to 1 ms."""
    if spins < 16:
        time.sleep(0)
    else:
        time.sleep(min(1e-3, 2e-5 * (spins - 15)))
    return spins + 1


def _is_view_of(src: memoryview, block: object) -> bool:
    """`src` reads `block`'s own memory (a numpy array's, not a copy): it can be kept."""
    return type(block) is np.ndarray and (src.obj is block or getattr(src.obj, "base", None)
                                          is block)


def block_view(block) -> memoryview:
    """A flat byte view of a block of packets (a copy only if it is not contiguous)."""
    if isinstance(block, np.ndarray):
        if not block.flags.c_contiguous:
            block = np.ascontiguousarray(block)
        if block.dtype.names is not None:  # a structured dtype exports a long format string
            block = block.view(np.uint8)
        try:
            src = memoryview(block).cast("B")
        except (TypeError, ValueError):
            src = memoryview(block.reshape(-1).view(np.uint8))
    elif isinstance(block, (bytes, bytearray, memoryview)):
        src = memoryview(block)
        if not src.c_contiguous:
            src = memoryview(src.tobytes())
        src = src.cast("B") if src.format != "B" or src.ndim != 1 else src
    else:
        raise PacketError(f"a packet block is a numpy array or bytes, got {type(block)}")
    if src.nbytes % PACKET_SIZE:
        raise PacketError(f"a packet block is a multiple of 64 bytes, got {src.nbytes}")
    return src
