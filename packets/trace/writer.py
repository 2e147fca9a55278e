"""TraceWriter: the binary trace format written off the publishing thread (framing,
staging slabs, checksum records, the writer thread), and the open writers' fork and exit
handling."""

from __future__ import annotations

import atexit
import io
import mmap
import os
import struct
import threading
import weakref
import zlib

import msgpack
import numpy as np

from ground.errors import AmdgpuError, TraceFormatError

from .format import (
    _BATCH_RECORD,
    _BLOCK_REPLAY,
    _CHECKSUM_RECORD,
    _COMPLETION,
    _FILE_HEADER,
    _KERNEL_SYMBOL,
    _KIND_BATCH,
    _KIND_PACKET,
    _KIND_REPLAY,
    _M64,
    _PACKET_BATCH,
    _PACKET_RECORD,
    _QUEUE_CREATED,
    _QUEUE_ERROR,
    _RECORD_HEADER,
    _VULKAN,
    CHECKSUM_SIZE,
    FILE_FLAG_CHECKSUMS,
    FILE_HEADER_SIZE,
    FLAG_KERNARG,
    FLAG_SYMBOL,
    KIND_CHECKSUM,
    MAGIC,
    PACKET_FIXED_SIZE,
    VERSION,
    Clock,
    RecordKind,
    now_ns,
)
from .records import BlockTemplateRecord, _contiguous

_open_writers: weakref.WeakSet = weakref.WeakSet()


def _pack(kind: int, flags: int, payload: bytes) -> bytes:
    return _RECORD_HEADER.pack(len(payload), kind, flags) + payload


def _packb(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _packet_tail(kernarg, symbol) -> tuple[int, bytes]:
    """Flags and the variable part of a packet record (kernarg, then symbol)."""
    flags = 0
    tail = b""
    if kernarg is not None:
        flags |= FLAG_KERNARG
        kernarg = bytes(kernarg)
        tail += struct.pack("<I", len(kernarg)) + kernarg
    if symbol is not None:
        flags |= FLAG_SYMBOL
        name = symbol.encode()
        tail += struct.pack("<H", len(name)) + name
    return flags, tail


def _packet_raw(raw) -> bytes:
    data = raw.tobytes() if isinstance(raw, np.ndarray) else bytes(raw)
    if len(data) != 64:
        raise TraceFormatError(f"a packet record holds 64 packet bytes, got {len(data)}")
    return data


class TraceWriter:
    """A thread-safe sink writing the binary trace format to `path`, off the publishing thread.

    The publishing thread only frames records in memory; a daemon writer thread (started at
    its first wake) hands them to the kernel with `os.writev`, the GIL released meanwhile.
    - A packet record (and every other small record) is one struct pack into a `bytes`,
      appended to a list: `list.append` is atomic, so producers take no lock and keep order.
    - A PACKET_BATCH record is framed in a staging slab (`slab_bytes`, 1 MiB, its pages
      mapped in advance): one `pack_into` of its 56-byte head and one copy of the raw
      packets, under a short lock, then a memoryview of it joins the list. The caller may
      reuse its block at once. Slabs are reused once written; a batch larger than a slab is
      copied into a `bytes` of its own.
    The writer thread wakes when `wake_slabs` slabs are full or `buffer_records` records are
    queued, then at least every IDLE_WRITE_S. Each wake takes the GIL a few times, which
    costs a busy publishing thread a thread switch each, so wakes are rare and writes large.
    Memory stays bounded: with `max_slabs` slabs waiting, or 4 * `buffer_records` records
    queued, the producer writes the queue itself (back-pressure when the disk is slower than
    the producers). `flush()` writes every record offered before it, so a reader sees it;
    `close()` stops the thread and writes the rest (it also runs at exit). A write error
    (disk full) is raised by the next `flush()` or `close()`; later records are dropped.
    """

    BUFFER_RECORDS = 16384  # queued records that wake the writer thread
    SLAB_BYTES = 1 << 20  # staging slab for batch records
    WAKE_SLABS = 4  # full slabs that wake the writer thread
    MAX_SLABS = 16  # staged bytes bound: MAX_SLABS * SLAB_BYTES
    BACKLOG = 4  # times buffer_records: beyond, producers write themselves
    IDLE_WRITE_S = 0.5  # the running thread writes what waits at least this often

    def __init__(self, path: str | os.PathLike, buffer_records: int = BUFFER_RECORDS,
                 slab_bytes: int = SLAB_BYTES, max_slabs: int = MAX_SLABS,
                 wake_slabs: int = WAKE_SLABS):
        self.path = os.fspath(path)
        self._file: io.FileIO | None = open(self.path, "wb", buffering=0)  # noqa: SIM115
        self._fd = self._file.fileno()
        self._pieces: list = []  # framed records (bytes, memoryview), in order
        self._tuples = False  # once True, _pieces may hold block replays as field tuples
        self._dropped: str | None = None  # a replay tuple that did not pack (next flush says)
        self._limit = max(1, buffer_records)
        self._write_lock = threading.Lock()  # one drain at a time: keeps the file in order
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._error: OSError | None = None
        # Staging slabs (see the class docstring). The slab lock covers reserving room,
        # copying and appending, so every piece of a slab is queued before it is sealed.
        self._slab_lock = threading.Lock()
        self._slab_bytes = max(256, slab_bytes)
        self._max_slabs = max(2, max_slabs)
        self._wake_slabs = max(1, min(wake_slabs, self._max_slabs - 1))
        self._slabs_made = 0
        self._sealed: list = []  # full slabs, in order, whose pieces may still be queued
        self._free: list = []  # slabs ready for (re)use, their pages already mapped
        # Enough slabs mapped from the start to reach the first wake (and one more), so the
        # publishing thread does not map pages; later spares are mapped at drains.
        self._slab = self._make_slab()
        self._slab_view = memoryview(self._slab)
        self._slab_pos = 0
        self._free.extend(self._make_slab() for _ in range(self._wake_slabs))
        header = _FILE_HEADER.pack(MAGIC, VERSION, FILE_HEADER_SIZE, FILE_FLAG_CHECKSUMS)
        _write_all(self._fd, [header])
        # The first checksum record covers the header too (its flags and version included):
        # (bytes, crc32) of what was written since the last checksum record.
        self._unsummed: tuple[int, int] | None = (len(header), zlib.crc32(header))
        _open_writers.add(self)

    # --- producers (the publishing threads) ---------------------------------------------

    def record_packet(self, queue_id, packet_id, reserve_ns, publish_ns, doorbell_ns, raw,
                      kernarg=None, symbol=None) -> None:
        """`raw` is the 64-byte packet as bytes (what Ring passes); other buffers are copied."""
        pieces = self._pieces
        if type(raw) is not bytes or len(raw) != 64:
            raw = _packet_raw(raw)
        if kernarg is None and symbol is None:
            pieces.append(_PACKET_RECORD.pack(PACKET_FIXED_SIZE, _KIND_PACKET, 0, queue_id,
                                              packet_id, reserve_ns, publish_ns, doorbell_ns,
                                              raw))
        else:
            flags, tail = _packet_tail(kernarg, symbol)
            pieces.append(_PACKET_RECORD.pack(PACKET_FIXED_SIZE + len(tail), _KIND_PACKET,
                                              flags, queue_id, packet_id, reserve_ns,
                                              publish_ns, doorbell_ns, raw) + tail)
        if len(pieces) >= self._limit:
            self._kick()

    def record_packets(self, queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                       block) -> None:
        """One PACKET_BATCH record: its 56-byte head, then the N raw packets as they are
        (copied here: the caller may reuse `block` as soon as this returns)."""
        if type(block) is not np.ndarray or not block.flags.c_contiguous:
            block = _contiguous(block)
        nbytes = block.nbytes
        if nbytes & 63:
            raise TraceFormatError(f"a packet batch is a multiple of 64 bytes, got {nbytes}")
        size = _BATCH_RECORD.size + nbytes
        if size > self._slab_bytes:  # larger than a slab: a bytes object of its own
            self._pieces.append(b"".join((
                _BATCH_RECORD.pack(_PACKET_BATCH.size + nbytes, _KIND_BATCH, 0, queue_id,
                                   first_id, reserve_ns, publish_ns, doorbell_ns,
                                   nbytes >> 6, 0), block)))
            self._kick()
            return
        with self._slab_lock:
            pos = self._slab_pos
            if pos + size > self._slab_bytes:
                self._next_slab()
                pos = 0
            slab = self._slab
            _BATCH_RECORD.pack_into(slab, pos, _PACKET_BATCH.size + nbytes, _KIND_BATCH, 0,
                                    queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                                    nbytes >> 6, 0)
            slab[pos + _BATCH_RECORD.size:pos + size] = block.reshape(-1).view(np.uint8)
            self._slab_pos = pos + size
            self._pieces.append(self._slab_view[pos:pos + size])

    def _next_slab(self) -> None:
        """Seal the current slab (its pieces are all queued) and take a free one; with none
        free and the bound reached, write the queue here (back-pressure). Slab lock held."""
        self._sealed.append(self._slab)
        if len(self._sealed) >= self._wake_slabs:
            self._kick()
        free = self._free
        if not free and self._slabs_made >= self._max_slabs:
            self._drain()  # writes every sealed slab, which frees them
        slab = free.pop() if free else self._make_slab()
        self._slab = slab
        self._slab_view = memoryview(slab)
        self._slab_pos = 0

    def _make_slab(self) -> np.ndarray:
        """A staging slab with its pages mapped now: a page fault costs microseconds on a
        VM, and a fresh 64 KB copy would take 16 of them on the publishing thread."""
        self._slabs_made += 1
        if _MAP_POPULATE:  # the kernel maps every page in one call, the GIL released
            return np.frombuffer(mmap.mmap(-1, self._slab_bytes, flags=_MAP_POPULATE),
                                 np.uint8)
        slab = np.empty(self._slab_bytes, np.uint8)
        slab.fill(0)
        return slab

    def block_template(self, template: BlockTemplateRecord) -> None:
        """One BLOCK_TEMPLATE record (once per template per sink: not a hot path)."""
        self._put(_pack(RecordKind.BLOCK_TEMPLATE, 0, template.to_payload()))

    def block_replay(self, queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                     template_id, kernarg_base, signal, bindings) -> None:
        """One BLOCK_REPLAY record: a fixed head and the binding addresses. Queued as a tuple
        of its fields (`bindings` a tuple of ints, kept as is): the writer thread packs it,
        so the publishing thread pays one tuple and one append."""
        self._tuples = True  # (set before the append: a drain then looks for tuples)
        pieces = self._pieces
        pieces.append((queue_id, first_id, reserve_ns, publish_ns, doorbell_ns, template_id,
                       kernarg_base, signal, bindings))
        if len(pieces) >= self._limit:
            self._kick()

    def queue_created(self, queue_id: int, info: dict | None = None) -> None:
        self._put(_pack(RecordKind.QUEUE_CREATED, 0,
                        _QUEUE_CREATED.pack(queue_id, now_ns()) + _packb(info or {})))

    def kernel_symbol(self, kernel_object: int, name: str, layout: object = None) -> None:
        self._put(_pack(RecordKind.KERNEL_SYMBOL, 0, _KERNEL_SYMBOL.pack(kernel_object)
                        + _packb({"name": name, "layout": layout})))

    def completion(self, queue_id: int, packet_id: int, start_ns: int, end_ns: int,
                   clock: int = Clock.HOST_NS) -> None:
        self._put(_pack(RecordKind.COMPLETION, 0,
                        _COMPLETION.pack(queue_id, packet_id, start_ns, end_ns, clock, 0)))

    def vulkan_submission(self, payload: dict) -> None:
        self._put(_pack(RecordKind.VULKAN_SUBMISSION, 0,
                        _VULKAN.pack(now_ns()) + _packb(payload)))

    def queue_error(self, queue_id: int, packet_id: int, info: dict) -> None:
        self._put(_pack(RecordKind.QUEUE_ERROR, 0,
                        _QUEUE_ERROR.pack(queue_id, packet_id, now_ns()) + _packb(info)))

    def _put(self, packed: bytes) -> None:
        pieces = self._pieces
        pieces.append(packed)
        if len(pieces) >= self._limit:
            self._kick()

    def _kick(self) -> None:
        """Wake the writer thread, or write here when the queue is past its bound (or the
        writer is closed, so that the queue does not grow forever)."""
        if len(self._pieces) >= self.BACKLOG * self._limit or self._file is None:
            self._drain()
            return
        thread = self._thread
        if thread is None or not thread.is_alive():  # lazily; again in a forked child
            self._start_thread()
        self._wake.set()

    # --- the writer thread ---------------------------------------------------------------

    def _start_thread(self) -> None:
        with self._write_lock:
            if self._stopping or self._file is None:
                return
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._run, name=f"TraceWriter({self.path})",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.IDLE_WRITE_S)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        with self._write_lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        # Slabs sealed before the snapshot below have every piece in it (or written before).
        sealed = self._sealed
        done = len(sealed)
        pieces = self._pieces
        n = len(pieces)
        if n:
            batch = pieces[:n]
            del pieces[:n]  # appends made meanwhile stay queued
            if self._tuples:  # block replays queued as field tuples (sticky: producers race)
                batch = [self._pack_tuple(p) if p.__class__ is tuple else p for p in batch]
            if self._file is not None and self._error is None:  # else: closed or failed,
                try:  # drop rather than grow forever
                    _write_all(self._fd, _with_checksum(batch, self._unsummed))
                except OSError as e:
                    self._error = e
                self._unsummed = None  # written, or lost: no header-only checksum later
            del batch
        elif (self._unsummed is not None and self._stopping and self._file is not None
              and self._error is None):
            try:  # closing with no record written: a checksum of the header alone
                _write_all(self._fd, _with_checksum([], self._unsummed))
                self._unsummed = None
            except OSError as e:
                self._error = e
        if done:
            self._free.extend(sealed[:done])
            del sealed[:done]
        elif not self._free and self._slabs_made < self._max_slabs and self._file is not None:
            # A spare, mapped off the publishing thread. Not waiting for the slab lock: a
            # producer holding it may be waiting for this drain (back-pressure).
            if self._slab_lock.acquire(blocking=False):
                try:
                    self._free.append(self._make_slab())
                finally:
                    self._slab_lock.release()

    def _pack_tuple(self, fields: tuple) -> bytes:
        try:
            return _pack_replay(*fields)
        except (TypeError, ValueError, OverflowError, struct.error) as e:
            self._dropped = f"a block_replay record was dropped ({e})"
            return b""

    def _raise_error(self) -> None:
        dropped = self._dropped
        if dropped is not None:
            self._dropped = None
            raise AmdgpuError(f"trace {self.path}: {dropped}: pass integer addresses and ids")
        e = self._error
        if e is not None:
            self._error = None
            raise AmdgpuError(
                f"trace {self.path}: writing records failed ({e.strerror or e}); records "
                "after the failure were dropped: free disk space or trace to another path"
            ) from e

    # --- flush and close -----------------------------------------------------------------

    def flush(self) -> None:
        """Write every record offered before this call; a reader sees them afterwards."""
        self._drain()
        self._raise_error()

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._write_lock:
            self._drain_locked()
            if self._file is not None:
                self._file.close()
                self._file = None
        _open_writers.discard(self)
        self._raise_error()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_MAP_POPULATE = (mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
                 if hasattr(mmap, "MAP_POPULATE") and hasattr(mmap, "MAP_ANONYMOUS") else 0)
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 1024


def _with_checksum(pieces: list, before: tuple[int, int] | None = None) -> list:
    """`pieces` followed by the CHECKSUM record covering them (written in the same writev, so
    the covered bytes are the ones just before it even if another process appends too).
    Many pieces are joined first (as _write_all would): one crc32 call, the GIL released
    for its length; a slab piece is summed where it lies. `before`: (count, crc32) of bytes
    already written that this checksum covers too (the file header, for the first one)."""
    if len(pieces) >= _IOV_MAX:
        pieces = [b"".join(pieces)]
    total, crc = before or (0, 0)
    crc32 = zlib.crc32
    for piece in pieces:
        crc = crc32(piece, crc)
        total += len(piece)
    pieces.append(_CHECKSUM_RECORD.pack(CHECKSUM_SIZE, KIND_CHECKSUM, 0, total, crc, 0))
    return pieces



def _write_all(fd: int, pieces: list) -> None:
    """Write `pieces` in order: one `writev` for up to IOV_MAX pieces (batches staged in
    slabs are written from the slab), else one join and one write (many small records: a
    join costs less than a Python pass over them, and the GIL is taken back once)."""
    if len(pieces) > _IOV_MAX:
        pieces = [b"".join(pieces)]
    total = sum(map(len, pieces)) if len(pieces) > 1 else len(pieces[0])
    writev = getattr(os, "writev", None)
    done = writev(fd, pieces) if writev is not None else 0
    if done == total:
        return
    data = memoryview(b"".join(pieces))[done:]  # rare: a short write
    while data:
        data = data[os.write(fd, data):]


_REPLAY_PACKERS: dict = {}


def _pack_replay(queue_id, first_id, reserve_ns, publish_ns, doorbell_ns, template_id,
                 kernarg_base, signal, bindings) -> bytes:
    n = len(bindings)
    packer = _REPLAY_PACKERS.get(n) or _replay_packer(n)
    return packer(_BLOCK_REPLAY.size + 8 * n, _KIND_REPLAY, 0, queue_id, first_id, reserve_ns,
                  publish_ns, doorbell_ns, template_id, kernarg_base & _M64, signal & _M64, n,
                  0, *(b & _M64 for b in bindings))


def _replay_packer(bindings: int):
    """`pack` of a whole BLOCK_REPLAY record (header, head, `bindings` u64), cached."""
    packer = struct.Struct(f"<IHHQQQQQQQQII{bindings}Q").pack
    _REPLAY_PACKERS[bindings] = packer
    return packer


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: fresh locks, and a writer thread of
    its own when it next needs one."""
    for writer in list(_open_writers):
        writer._write_lock = threading.Lock()
        writer._slab_lock = threading.Lock()
        writer._wake = threading.Event()
        writer._thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_writers() -> None:
    for writer in list(_open_writers):
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - at exit, a failing close must not hide others
            pass

