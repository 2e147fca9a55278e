"""Packet trace records: a versioned, streamable binary format, a sink API and a reader.

Layout (little-endian; docs/TRACE_FORMAT.md is the full description):

    file header, 16 bytes: magic b"AMDGPUTR", u16 version, u16 header size (16), u32 flags
    then records:          u32 payload length, u16 kind, u16 flags, payload

Every published packet is offered to the active sink (`set_sink`, `active_sink`); with no
sink the ring pays one attribute check. `AMDGPU_TRACE=path` installs a `TraceWriter` sink
the first time a ring is created or `active_sink()` is called; it frames records on the
publishing thread and writes them on a thread of its own (`flush()` before reading a trace
that is still open). `read_trace(path)` streams records one at a time and raises
`TraceFormatError` naming the byte offset of a truncated or corrupt record.

Version 2 adds BLOCK_TEMPLATE and BLOCK_REPLAY: a packet block published again and again
(a command buffer's) is recorded once, then each publish as a small fixed record (queue,
ids, timestamps, kernarg base, signal, binding addresses); readers expand a replay into
the packet records it stands for, kernarg bytes included. Version-1 files still read.

Every write of a TraceWriter ends with a CHECKSUM record: the CRC32 of the file bytes since
the previous one (or the header), computed on the writer thread. Readers check them and
raise TraceFormatError("trace damaged between byte X and Y: checksum mismatch ...") when
bytes changed after they were written; files without checksum records read unverified.
A TraceWriter sets FILE_FLAG_CHECKSUMS in the file header and its first checksum covers the
header too: in such a file (or once a checksum record has been read) the stream is
checksummed, and a record of an unknown kind or bytes after the last checksum record are
damage (a damaged checksum record's header), never skipped or read unverified.
"""

from __future__ import annotations

import atexit
import io
import mmap
import os
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import msgpack
import numpy as np

from amdgpu.errors import AmdgpuError, TraceFormatError

MAGIC = b"AMDGPUTR"
VERSION = 2  # 2: BLOCK_TEMPLATE / BLOCK_REPLAY records (a v1 reader would drop their packets)
SUPPORTED_VERSIONS = (1, 2)
# Next steps appended to the reader's errors (the records before the bad one are intact).
NEXT_STEP_CUT_SHORT = "; the recording stopped early: records before it are intact, or record again"
NEXT_STEP_DAMAGED = "; the file is damaged: records before it are intact, or record again"
_FILE_HEADER = struct.Struct("<8sHHI")
_RECORD_HEADER = struct.Struct("<IHH")
FILE_HEADER_SIZE = _FILE_HEADER.size  # 16
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 8
MAX_PAYLOAD = 64 << 20  # a larger length field means a corrupt file, not a big record
# File header flags. FILE_FLAG_CHECKSUMS: every write ends with a checksum record, the first
# covering the file header as well; a reader holds every byte of the file to them.
FILE_FLAG_CHECKSUMS = 1
KNOWN_FILE_FLAGS = FILE_FLAG_CHECKSUMS


class RecordKind(IntEnum):
    PACKET = 1
    QUEUE_CREATED = 2
    KERNEL_SYMBOL = 3
    COMPLETION = 4
    VULKAN_SUBMISSION = 5
    PACKET_BATCH = 6  # N packets published with one doorbell; read back as N packet records
    BLOCK_TEMPLATE = 7  # a command buffer's packet block and kernarg template, once per sink
    BLOCK_REPLAY = 8  # one submission of a template; read back as its N packet records
    CHECKSUM = 9  # CRC32 of the file bytes since the previous checksum record; not yielded
    QUEUE_ERROR = 10  # a queue stopped at a packet (a fault): where and why, once per queue


class Clock(IntEnum):
    """Time base of a completion record's timestamps."""

    HOST_NS = 0  # time.monotonic_ns (CLOCK_MONOTONIC), like packet records
    DEVICE_NS = 1  # device timestamps converted to ns (hsa_amd_profiling_get_dispatch_time)


_KIND_PACKET = int(RecordKind.PACKET)  # a plain int: enum lookups cost in the hot path

# Packet record flags.
FLAG_KERNARG = 1  # u32 length + kernarg bytes follow the fixed part
FLAG_SYMBOL = 2  # u16 length + UTF-8 kernel symbol follow (after the kernarg, if any)

_PACKET_FIXED = struct.Struct("<QQQQQ64s")  # queue id, packet id, 3 timestamps, raw packet
_PACKET_RECORD = struct.Struct("<IHHQQQQQ64s")  # record header + fixed part: 112 bytes
PACKET_FIXED_SIZE = _PACKET_FIXED.size  # 104
PACKET_RECORD = np.dtype(
    [
        ("length", "<u4"),
        ("kind", "<u2"),
        ("flags", "<u2"),
        ("queue_id", "<u8"),
        ("packet_id", "<u8"),
        ("reserve_ns", "<u8"),
        ("publish_ns", "<u8"),
        ("doorbell_ns", "<u8"),
        ("raw", "V64"),
    ]
)
_QUEUE_CREATED = struct.Struct("<QQ")  # queue id, time ns; msgpack info follows
_KERNEL_SYMBOL = struct.Struct("<Q")  # kernel_object; msgpack {"name", "layout"} follows
_COMPLETION = struct.Struct("<QQQQII")  # queue id, packet id, start, end, clock, reserved
_VULKAN = struct.Struct("<Q")  # time ns; msgpack payload follows
_QUEUE_ERROR = struct.Struct("<QQQ")  # queue id, packet id, time ns; msgpack info follows
# queue id, first packet id, 3 timestamps, count, reserved; count * 64 raw bytes follow
_PACKET_BATCH = struct.Struct("<QQQQQII")
_BATCH_RECORD = struct.Struct("<IHHQQQQQII")  # record header + batch head: 56 bytes
_KIND_BATCH = 6  # RecordKind.PACKET_BATCH, a plain int for the hot path
# template id, N packets, D dispatch rows, K kernarg template bytes, S patch sites, signal
# row (-1: none), reserved; then the arrays (see BlockTemplateRecord.to_payload)
_BLOCK_TEMPLATE = struct.Struct("<QIIIIii")
# queue id, first packet id, 3 timestamps, template id, kernarg base, completion signal,
# B bindings, reserved; then B u64 binding addresses
_BLOCK_REPLAY = struct.Struct("<QQQQQQQQII")
_KIND_REPLAY = 8  # RecordKind.BLOCK_REPLAY, a plain int for the hot path
# byte count covered, CRC32 (zlib.crc32) of those bytes, reserved
_CHECKSUM = struct.Struct("<QII")
_CHECKSUM_RECORD = struct.Struct("<IHHQII")  # record header + checksum payload: 24 bytes
KIND_CHECKSUM = 9  # RecordKind.CHECKSUM, a plain int for readers' loops
CHECKSUM_SIZE = _CHECKSUM.size  # 16
CHECKSUM_RECORD_SIZE = _CHECKSUM_RECORD.size  # 24: what each writer drain adds to the file
_M64 = (1 << 64) - 1

now_ns = time.monotonic_ns


# --- records -----------------------------------------------------------------------------


@dataclass(slots=True)
class PacketRecord:
    queue_id: int
    packet_id: int
    reserve_ns: int
    publish_ns: int
    doorbell_ns: int
    raw: bytes
    kernarg: bytes | None = None
    symbol: str | None = None
    offset: int = -1  # byte offset of the record in its file (-1 when not read from one)

    def decode(self) -> dict:
        from .decode import decode

        return decode(self.raw)


@dataclass(slots=True)
class QueueCreatedRecord:
    queue_id: int
    time_ns: int
    info: dict = field(default_factory=dict)
    offset: int = -1


@dataclass(slots=True)
class KernelSymbolRecord:
    kernel_object: int
    name: str
    layout: object = None  # arg layout (msgpack-able: list of dicts, dict, ...)
    offset: int = -1


@dataclass(slots=True)
class CompletionRecord:
    queue_id: int
    packet_id: int
    start_ns: int
    end_ns: int
    clock: int = Clock.HOST_NS
    offset: int = -1


@dataclass(slots=True)
class VulkanSubmissionRecord:
    time_ns: int
    payload: dict = field(default_factory=dict)
    offset: int = -1


@dataclass(slots=True)
class QueueErrorRecord:
    """A queue stopped at `packet_id`; info: text, kernel, address, status (what is known)."""

    queue_id: int
    packet_id: int
    time_ns: int
    info: dict = field(default_factory=dict)
    offset: int = -1


@dataclass(slots=True)
class UnknownRecord:
    """A record of a kind this reader does not know (a newer writer): kept, not fatal."""

    kind: int
    flags: int
    payload: bytes
    offset: int = -1


@dataclass(slots=True)
class BlockReplayRecord:
    """One submission of a block template (what the driver changed in it this time).
    Readers expand it into its packet records; `read_trace(path, expand=False)` yields it."""

    queue_id: int
    first_id: int  # packet id of the block's first packet
    reserve_ns: int
    publish_ns: int
    doorbell_ns: int
    template_id: int
    kernarg_base: int  # address of this submission's copy of the kernarg template
    signal: int  # completion signal of the template's signal row
    bindings: tuple  # binding addresses (ints) the kernarg patch sites index
    offset: int = -1


@dataclass(slots=True)
class BlockTemplateRecord:
    """A packet block that is published again and again (a command buffer segment), with
    what a submission patches in it. Queue independent; written once per sink.

    - `block`: the N packets as published (headers in place), N * 64 bytes;
    - rows 0..D-1 are dispatches: their kernarg_address is the replay's `kernarg_base` +
      `kernarg_offsets[i]`, their kernarg bytes are `kernarg_sizes[i]` bytes from that
      offset of the patched kernarg template;
    - `signal_row` (-1: none) takes the replay's completion signal;
    - `kernarg`: the kernarg template (K bytes) a submission copies to `kernarg_base`; at
      byte `site_offsets[j]` it holds the u64 `bindings[site_bindings[j]] + site_addends[j]`
      (a negative binding index counts from the end of the replay's bindings: the driver
      puts the queue address last, for hidden_queue_ptr).
    """

    template_id: int
    block: bytes
    kernarg_offsets: np.ndarray  # uint64, D
    kernarg_sizes: np.ndarray  # uint32, D
    signal_row: int = -1
    kernarg: bytes = b""
    site_offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    site_bindings: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    site_addends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    offset: int = -1

    @classmethod
    def build(cls, template_id: int, block, kernarg_offsets=(), kernarg_sizes=(),
              signal_row: int = -1, kernarg: bytes = b"", site_offsets=(), site_bindings=(),
              site_addends=()) -> BlockTemplateRecord:
        """A template from any array-likes, checked (raises TraceFormatError)."""
        raw = _contiguous(block).reshape(-1).view(np.uint8).tobytes()
        rec = cls(int(template_id), raw, np.array(kernarg_offsets, np.uint64).reshape(-1),
                  np.array(kernarg_sizes, np.uint32).reshape(-1), int(signal_row),
                  bytes(kernarg), np.array(site_offsets, np.uint32).reshape(-1),
                  np.array(site_bindings, np.int32).reshape(-1),
                  np.array(site_addends, np.uint64).reshape(-1))
        try:
            rec.check()
        except ValueError as e:
            raise TraceFormatError(f"block template {template_id}: {e}") from None
        return rec

    @property
    def count(self) -> int:
        return len(self.block) >> 6

    @property
    def dispatches(self) -> int:
        return int(self.kernarg_offsets.shape[0])

    def check(self) -> None:
        """Raise ValueError when the parts do not fit together."""
        n, d, k = self.count, self.dispatches, len(self.kernarg)
        if len(self.block) & 63:
            raise ValueError(f"a packet block is a multiple of 64 bytes, got {len(self.block)}")
        if d > n or self.kernarg_sizes.shape[0] != d:
            raise ValueError(f"{d} kernarg offsets and {self.kernarg_sizes.shape[0]} sizes "
                             f"for {n} packets")
        if d and int((self.kernarg_offsets + self.kernarg_sizes).max()) > k:
            raise ValueError(f"a dispatch's kernargs run past the {k}-byte kernarg template")
        if not -1 <= self.signal_row < n:
            raise ValueError(f"signal row {self.signal_row} outside the {n} packets")
        s = self.site_offsets.shape[0]
        if self.site_bindings.shape[0] != s or self.site_addends.shape[0] != s:
            raise ValueError("patch-site arrays of different lengths")
        if s and int(self.site_offsets.max()) + 8 > k:
            raise ValueError(f"a patch site lies past the {k}-byte kernarg template")

    # --- the binary form -----------------------------------------------------------------

    def to_payload(self) -> bytes:
        """Head, block (N*64), kernarg offsets (D u64), site addends (S u64), site offsets
        (S u32), site bindings (S i32), kernarg sizes (D u32), kernarg template (K)."""
        head = _BLOCK_TEMPLATE.pack(self.template_id, self.count, self.dispatches,
                                    len(self.kernarg), self.site_offsets.shape[0],
                                    self.signal_row, 0)
        return b"".join((head, self.block, self.kernarg_offsets.astype("<u8").tobytes(),
                         self.site_addends.astype("<u8").tobytes(),
                         self.site_offsets.astype("<u4").tobytes(),
                         self.site_bindings.astype("<i4").tobytes(),
                         self.kernarg_sizes.astype("<u4").tobytes(), self.kernarg))

    @classmethod
    def from_payload(cls, payload: bytes, offset: int = -1) -> BlockTemplateRecord:
        """Raises ValueError or struct.error when the payload does not parse."""
        tid, n, d, k, s, signal_row, _ = _BLOCK_TEMPLATE.unpack_from(payload)
        want = _BLOCK_TEMPLATE.size + 64 * n + 12 * d + 16 * s + k
        if len(payload) != want:
            raise ValueError(f"block template of {n} packets, {d} dispatches, {s} sites and "
                             f"{k} kernarg bytes needs {want} bytes, has {len(payload)}")
        pos = _BLOCK_TEMPLATE.size

        def take(dtype: str, count: int) -> np.ndarray:
            nonlocal pos
            arr = np.frombuffer(payload, dtype, count, pos).astype(dtype[1:])
            pos += arr.nbytes
            return arr

        block = payload[pos:pos + 64 * n]
        pos += 64 * n
        offsets, addends = take("<u8", d), take("<u8", s)
        sites, bindings, sizes = take("<u4", s), take("<i4", s), take("<u4", d)
        rec = cls(tid, block, offsets, sizes, signal_row, payload[pos:pos + k], sites,
                  bindings, addends, offset)
        rec.check()
        return rec

    # --- expanding a replay --------------------------------------------------------------

    def patched_kernarg(self, bindings) -> bytes:
        """The kernarg template with every patch site filled from `bindings`."""
        if not self.site_offsets.shape[0]:
            return self.kernarg
        index = self.site_bindings.astype(np.int64)
        nb = len(bindings)
        if int(index.max()) >= nb or int(index.min()) < -nb:
            raise ValueError(f"template {self.template_id} patches binding "
                             f"{int(index.max()) if int(index.max()) >= nb else int(index.min())}"
                             f", the replay has {nb} binding(s)")
        table = np.array([b & _M64 for b in bindings], np.uint64)
        data = bytearray(self.kernarg)
        words = np.frombuffer(data, np.uint8)
        values = (table[index] + self.site_addends).astype("<u8")
        # sites may be at any 8-byte-multiple offset: a (S, 8) byte scatter
        pos = self.site_offsets.astype(np.int64)[:, None] + np.arange(8)
        words[pos] = values.view(np.uint8).reshape(-1, 8)
        return bytes(data)

    def patched_words(self, kernarg_base: int, signal: int) -> np.ndarray:
        """The N packets of a replay as an (N, 8) uint64 array."""
        words = np.frombuffer(self.block, "<u8").reshape(-1, 8).copy()
        d = self.dispatches
        if d:
            words[:d, 5] = self.kernarg_offsets + np.uint64(kernarg_base & _M64)
        if self.signal_row >= 0:
            words[self.signal_row, 7] = signal & _M64
        return words

    def packet_records(self, replay: BlockReplayRecord) -> list[PacketRecord]:
        """The packet records `replay` stands for, kernarg bytes on the dispatch rows."""
        raw = self.patched_words(replay.kernarg_base, replay.signal).tobytes()
        kernarg = self.patched_kernarg(replay.bindings) if self.dispatches else b""
        offs, sizes = self.kernarg_offsets.tolist(), self.kernarg_sizes.tolist()
        d = len(offs)
        q, first = replay.queue_id, replay.first_id
        t0, t1, t2, at = replay.reserve_ns, replay.publish_ns, replay.doorbell_ns, replay.offset
        return [PacketRecord(q, first + i, t0, t1, t2, raw[i << 6:(i + 1) << 6],
                             kernarg[offs[i]:offs[i] + sizes[i]] if i < d else None, None, at)
                for i in range(self.count)]

    def packet_rows(self, replay: BlockReplayRecord) -> np.ndarray:
        """The packets of `replay` as fixed PACKET_RECORD rows (no kernargs: scan's form)."""
        n = self.count
        rows = np.zeros(n, PACKET_RECORD)
        rows["length"] = PACKET_FIXED_SIZE
        rows["kind"] = _KIND_PACKET
        rows["queue_id"] = replay.queue_id
        rows["packet_id"] = np.arange(replay.first_id, replay.first_id + n, dtype=np.uint64)
        rows["reserve_ns"] = replay.reserve_ns
        rows["publish_ns"] = replay.publish_ns
        rows["doorbell_ns"] = replay.doorbell_ns
        rows["raw"] = self.patched_words(replay.kernarg_base, replay.signal).view("V64")[:, 0]
        return rows


Record = (PacketRecord | QueueCreatedRecord | KernelSymbolRecord | CompletionRecord
          | VulkanSubmissionRecord | BlockTemplateRecord | BlockReplayRecord | QueueErrorRecord
          | UnknownRecord)


# --- sinks -------------------------------------------------------------------------------


class TraceSink(Protocol):
    """What a ring and the driver call. Timestamps are host `time.monotonic_ns()`."""

    def record_packet(self, queue_id: int, packet_id: int, reserve_ns: int, publish_ns: int,
                      doorbell_ns: int, raw: bytes, kernarg: bytes | None = None,
                      symbol: str | None = None) -> None: ...

    def record_packets(self, queue_id: int, first_id: int, reserve_ns: int, publish_ns: int,
                       doorbell_ns: int, block: np.ndarray) -> None: ...

    # Optional (a sink without them gets replays as record_packets): a packet block that
    # is published again and again, once, then per publish only what changed.
    def block_template(self, template: BlockTemplateRecord) -> None: ...

    def block_replay(self, queue_id: int, first_id: int, reserve_ns: int, publish_ns: int,
                     doorbell_ns: int, template_id: int, kernarg_base: int, signal: int,
                     bindings: tuple) -> None: ...

    def queue_created(self, queue_id: int, info: dict) -> None: ...

    def kernel_symbol(self, kernel_object: int, name: str, layout: object = None) -> None: ...

    def completion(self, queue_id: int, packet_id: int, start_ns: int, end_ns: int,
                   clock: int = Clock.HOST_NS) -> None: ...

    def vulkan_submission(self, payload: dict) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


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


KNOWN_KINDS = frozenset(int(k) for k in RecordKind)


def check_checksum_record(offset: int, length: int, flags: int) -> None:
    """A checksum record's header: exactly 16 payload bytes and flags 0 (no later checksum
    covers these bytes, so they are checked for what they must be)."""
    if length != CHECKSUM_SIZE or flags:
        raise TraceFormatError(
            f"corrupt trace: record at byte offset {offset} (kind {KIND_CHECKSUM}) does not "
            f"parse: a checksum record of {length} bytes with flags {flags:#x} (a checksum "
            f"record is {CHECKSUM_SIZE} bytes, flags 0){NEXT_STEP_DAMAGED}"
        )


def unknown_kind(offset: int, kind: int) -> TraceFormatError:
    """An unknown record kind inside a checksummed trace: a damaged record header (perhaps a
    checksum record's, which would leave the bytes it covers unverified), not a newer
    writer's record (a new kind comes with a new format version)."""
    return TraceFormatError(
        f"trace damaged at byte offset {offset}: record kind {kind} is unknown in a trace "
        f"with checksums (a damaged record header){NEXT_STEP_DAMAGED}"
    )


def uncovered_tail(start: int, end: int) -> TraceFormatError:
    """Bytes after the last checksum record of a checksummed trace: every write ends with
    one, so they are a damaged checksum record or a write cut short, and unverified."""
    return TraceFormatError(
        f"trace damaged between byte {start} and {end}: no checksum record covers these "
        f"bytes (a damaged checksum record, or a write cut short); records before byte "
        f"{start} are intact, or record again"
    )


def damaged_between(start: int, end: int, detail: str) -> TraceFormatError:
    """The error for bytes [start, end) that a checksum record says are not as written."""
    next_step = NEXT_STEP_DAMAGED.replace("the file is damaged: records before it",
                                          f"records before byte {start}")
    return TraceFormatError(
        f"trace damaged between byte {start} and {end}: checksum mismatch ({detail}){next_step}"
    )


def check_span(start: int, end: int, crc: int, payload: bytes) -> None:
    """Raise `damaged_between` unless CHECKSUM `payload` (the record at byte `end`) holds
    the byte count end - start and `crc`, the CRC32 of bytes [start, end)."""
    count, want, reserved = _CHECKSUM.unpack_from(payload)
    if reserved != 0:  # the checksum record's own bytes: no later checksum covers them
        raise damaged_between(start, end, f"the checksum record's reserved word is {reserved:#x}")
    if count != end - start:
        raise damaged_between(start, end, f"the checksum record covers {count} bytes, "
                                          f"{end - start} precede it")
    if want != crc:
        raise damaged_between(start, end, f"crc32 {crc:#010x}, recorded {want:#010x}")


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


def _contiguous(block) -> np.ndarray:
    if isinstance(block, (bytes, bytearray, memoryview)):
        return np.frombuffer(block, np.uint8)
    return np.ascontiguousarray(block)


class MemorySink:
    """A sink that keeps record objects in a list (tests, tools, in-process inspection)."""

    def __init__(self) -> None:
        self.records: list = []
        self.templates: dict[int, BlockTemplateRecord] = {}
        self._lock = threading.Lock()

    def record_packet(self, queue_id, packet_id, reserve_ns, publish_ns, doorbell_ns, raw,
                      kernarg=None, symbol=None) -> None:
        rec = PacketRecord(queue_id, packet_id, reserve_ns, publish_ns, doorbell_ns,
                           bytes(raw), None if kernarg is None else bytes(kernarg), symbol)
        with self._lock:
            self.records.append(rec)

    def record_packets(self, queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                       block) -> None:
        raw = np.ascontiguousarray(block).view(np.uint8).reshape(-1, 64)
        recs = [PacketRecord(queue_id, first_id + i, reserve_ns, publish_ns, doorbell_ns,
                             raw[i].tobytes()) for i in range(raw.shape[0])]
        with self._lock:
            self.records.extend(recs)

    def block_template(self, template: BlockTemplateRecord) -> None:
        """Kept (as read_trace yields it), and used to expand later replays."""
        with self._lock:
            self.templates[template.template_id] = template
            self.records.append(template)

    def block_replay(self, queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                     template_id, kernarg_base, signal, bindings) -> None:
        """Expanded at once into the packet records it stands for (as read_trace does)."""
        template = self.templates.get(template_id)
        if template is None:
            raise TraceFormatError(f"block replay of template {template_id}, which this sink "
                                   "was not given: call block_template first")
        replay = BlockReplayRecord(queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                                   template_id, kernarg_base, signal, tuple(bindings))
        recs = template.packet_records(replay)
        with self._lock:
            self.records.extend(recs)

    def queue_created(self, queue_id: int, info: dict | None = None) -> None:
        self._add(QueueCreatedRecord(queue_id, now_ns(), dict(info or {})))

    def kernel_symbol(self, kernel_object: int, name: str, layout: object = None) -> None:
        self._add(KernelSymbolRecord(kernel_object, name, layout))

    def completion(self, queue_id, packet_id, start_ns, end_ns, clock=Clock.HOST_NS) -> None:
        self._add(CompletionRecord(queue_id, packet_id, start_ns, end_ns, clock))

    def vulkan_submission(self, payload: dict) -> None:
        self._add(VulkanSubmissionRecord(now_ns(), dict(payload)))

    def queue_error(self, queue_id: int, packet_id: int, info: dict) -> None:
        self._add(QueueErrorRecord(queue_id, packet_id, now_ns(), dict(info)))

    def _add(self, rec) -> None:
        with self._lock:
            self.records.append(rec)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# --- the active sink ---------------------------------------------------------------------


class _TraceState:
    """Module state read by rings on every publish: `STATE.sink` is the one check."""

    __slots__ = ("sink", "env_checked")

    def __init__(self) -> None:
        self.sink: TraceSink | None = None
        self.env_checked = False


STATE = _TraceState()
_open_writers: weakref.WeakSet = weakref.WeakSet()
_env_lock = threading.Lock()


def set_sink(sink: TraceSink | None) -> TraceSink | None:
    """Install `sink` (None turns tracing off); returns the previous sink, not closed."""
    previous = STATE.sink
    STATE.env_checked = True  # an explicit choice wins over AMDGPU_TRACE
    STATE.sink = sink
    return previous


def active_sink() -> TraceSink | None:
    """The sink packets go to, creating the AMDGPU_TRACE writer on first use."""
    if not STATE.env_checked:
        _sink_from_env()
    return STATE.sink


def _sink_from_env() -> None:
    with _env_lock:
        if STATE.env_checked:
            return
        path = os.environ.get("AMDGPU_TRACE")
        if path:
            try:
                STATE.sink = TraceWriter(path)
            except OSError as e:
                STATE.env_checked = True
                raise AmdgpuError(
                    f"AMDGPU_TRACE={path}: cannot create the trace file ({e.strerror}); "
                    "fix the path or unset AMDGPU_TRACE"
                ) from None
        STATE.env_checked = True


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


# --- reading -----------------------------------------------------------------------------


def read_trace(path: str | os.PathLike, expand: bool = True) -> Iterator[Record]:
    """Stream the records of a trace file, one at a time (the file is never loaded whole).
    A packet batch or a block replay comes as the packet records it stands for;
    `expand=False` yields block replays as BlockReplayRecord instead."""
    with open(path, "rb") as f:
        yield from TraceReader(f, expand)


class TraceReader:
    """Iterates the records of a binary file object; `version` is known after __init__.
    `templates` holds the block templates read so far (by template id)."""

    def __init__(self, stream: io.BufferedIOBase, expand: bool = True):
        self._stream = stream
        self.expand = expand
        self.templates: dict[int, BlockTemplateRecord] = {}
        head = stream.read(FILE_HEADER_SIZE)
        if len(head) < FILE_HEADER_SIZE:
            raise TraceFormatError(
                f"truncated trace: file header ends at byte offset {len(head)} "
                f"(needs {FILE_HEADER_SIZE} bytes){NEXT_STEP_CUT_SHORT}"
            )
        magic, version, header_size, self.flags = _FILE_HEADER.unpack(head)
        if magic != MAGIC:
            raise TraceFormatError(
                f"not an amdgpu-direct trace: magic {magic!r} at byte offset 0, "
                f"expected {MAGIC!r}; pass a file written by packet-trace record or AMDGPU_TRACE"
            )
        if version not in SUPPORTED_VERSIONS:
            raise TraceFormatError(
                f"trace format version {version} is not supported by this reader "
                f"(supports {', '.join(map(str, SUPPORTED_VERSIONS))}); "
                "read it with the amdgpu-direct that wrote it"
            )
        if header_size < FILE_HEADER_SIZE:
            raise TraceFormatError(
                f"corrupt trace: header size {header_size} at byte offset 10{NEXT_STEP_DAMAGED}"
            )
        extra = header_size - FILE_HEADER_SIZE  # a later v1 writer may add header fields
        more = stream.read(extra) if extra else b""
        if len(more) < extra:
            raise TraceFormatError(
                f"truncated trace: file header ends before {header_size}{NEXT_STEP_CUT_SHORT}"
            )
        if self.flags & ~KNOWN_FILE_FLAGS:
            raise TraceFormatError(
                f"corrupt trace: file header flags {self.flags:#x} at byte offset 12 set bits "
                f"this format does not define{NEXT_STEP_DAMAGED}"
            )
        self.version = version
        self.offset = header_size
        # Checksum state: a checksummed file's first checksum covers its header too.
        self.checksummed = bool(self.flags & FILE_FLAG_CHECKSUMS)
        self.verified = 0  # bytes [0, verified) were checked against a checksum record
        self._span_start = 0 if self.checksummed else header_size
        self._crc = zlib.crc32(more, zlib.crc32(head)) if self.checksummed else 0

    def __iter__(self) -> Iterator[Record]:
        read = self._stream.read
        crc32 = zlib.crc32
        crc = self._crc  # CRC32 of the bytes since the previous checksum record
        span_start = self._span_start
        while True:
            offset = self.offset
            head = read(RECORD_HEADER_SIZE)
            if not head:
                if self.checksummed and span_start < offset:
                    raise uncovered_tail(span_start, offset)
                return
            if len(head) < RECORD_HEADER_SIZE:
                raise TraceFormatError(
                    f"truncated trace: record header at byte offset {offset} has "
                    f"{len(head)} of {RECORD_HEADER_SIZE} bytes{NEXT_STEP_CUT_SHORT}"
                )
            length, kind, flags = _RECORD_HEADER.unpack(head)
            if length > MAX_PAYLOAD:
                raise TraceFormatError(
                    f"corrupt trace: record at byte offset {offset} claims {length} bytes "
                    f"(limit {MAX_PAYLOAD}){NEXT_STEP_DAMAGED}"
                )
            payload = read(length)
            if len(payload) < length:
                raise TraceFormatError(
                    f"truncated trace: record at byte offset {offset} (kind {kind}) has "
                    f"{len(payload)} of {length} payload bytes{NEXT_STEP_CUT_SHORT}"
                )
            self.offset = offset + RECORD_HEADER_SIZE + length
            if kind == KIND_CHECKSUM:  # verifies the bytes before it; not yielded
                check_checksum_record(offset, length, flags)
                check_span(span_start, offset, crc, payload)
                crc = 0
                span_start = self.verified = self.offset
                self.checksummed = True
                continue
            if self.checksummed and kind not in KNOWN_KINDS:
                raise unknown_kind(offset, kind)
            crc = crc32(payload, crc32(head, crc))
            try:
                if kind == _KIND_BATCH:
                    out = parse_batch(payload, offset)
                elif kind == _KIND_REPLAY and self.expand:
                    replay = _parse_replay(payload, offset)
                    out = self.template_of(replay).packet_records(replay)
                else:
                    rec = _parse(kind, flags, payload, offset)
                    if kind == RecordKind.BLOCK_TEMPLATE:
                        self.templates[rec.template_id] = rec
                    out = (rec,)
            except (struct.error, ValueError, TypeError, KeyError, UnicodeDecodeError,
                    msgpack.UnpackException) as e:
                raise TraceFormatError(
                    f"corrupt trace: record at byte offset {offset} (kind {kind}) does not "
                    f"parse: {e}{NEXT_STEP_DAMAGED}"
                ) from None
            yield from out

    def template_of(self, replay: BlockReplayRecord) -> BlockTemplateRecord:
        """The template `replay` refers to (ValueError when no earlier record defined it)."""
        template = self.templates.get(replay.template_id)
        if template is None:
            raise ValueError(f"it replays block template {replay.template_id}, which no "
                             "earlier record defines")
        return template


def _parse(kind: int, flags: int, payload: bytes, offset: int) -> Record:
    if kind == RecordKind.PACKET:
        qid, pid, t0, t1, t2, raw = _PACKET_FIXED.unpack_from(payload)
        pos = PACKET_FIXED_SIZE
        kernarg = symbol = None
        if flags & FLAG_KERNARG:
            (n,) = struct.unpack_from("<I", payload, pos)
            kernarg = payload[pos + 4:pos + 4 + n]
            if len(kernarg) != n:
                raise ValueError("kernarg bytes run past the record")
            pos += 4 + n
        if flags & FLAG_SYMBOL:
            (n,) = struct.unpack_from("<H", payload, pos)
            name = payload[pos + 2:pos + 2 + n]
            if len(name) != n:
                raise ValueError("symbol runs past the record")
            symbol = name.decode()
        return PacketRecord(qid, pid, t0, t1, t2, raw, kernarg, symbol, offset)
    if kind == RecordKind.QUEUE_CREATED:
        qid, t = _QUEUE_CREATED.unpack_from(payload)
        return QueueCreatedRecord(qid, t, _unpackb(payload[_QUEUE_CREATED.size:]), offset)
    if kind == RecordKind.KERNEL_SYMBOL:
        (kobj,) = _KERNEL_SYMBOL.unpack_from(payload)
        body = _unpackb(payload[_KERNEL_SYMBOL.size:])
        return KernelSymbolRecord(kobj, body["name"], body.get("layout"), offset)
    if kind == RecordKind.COMPLETION:
        qid, pid, start, end, clock, _ = _COMPLETION.unpack_from(payload)
        return CompletionRecord(qid, pid, start, end, _clock(clock), offset)
    if kind == RecordKind.VULKAN_SUBMISSION:
        (t,) = _VULKAN.unpack_from(payload)
        return VulkanSubmissionRecord(t, _unpackb(payload[_VULKAN.size:]), offset)
    if kind == RecordKind.QUEUE_ERROR:
        qid, pid, t = _QUEUE_ERROR.unpack_from(payload)
        return QueueErrorRecord(qid, pid, t, _unpackb(payload[_QUEUE_ERROR.size:]), offset)
    if kind == RecordKind.BLOCK_TEMPLATE:
        return BlockTemplateRecord.from_payload(payload, offset)
    if kind == RecordKind.BLOCK_REPLAY:
        return _parse_replay(payload, offset)
    return UnknownRecord(kind, flags, payload, offset)


def _parse_replay(payload: bytes, offset: int = -1) -> BlockReplayRecord:
    head = _BLOCK_REPLAY.unpack_from(payload)
    n = head[8]
    if len(payload) != _BLOCK_REPLAY.size + 8 * n:
        raise ValueError(f"block replay of {n} bindings holds {len(payload)} bytes")
    bindings = struct.unpack_from(f"<{n}Q", payload, _BLOCK_REPLAY.size)
    return BlockReplayRecord(*head[:8], bindings, offset)


def parse_batch(payload: bytes, offset: int = -1) -> list[PacketRecord]:
    """The packet records of one PACKET_BATCH payload (raises ValueError or struct.error
    when it does not parse)."""
    qid, first, t0, t1, t2, count, _ = _PACKET_BATCH.unpack_from(payload)
    body = payload[_PACKET_BATCH.size:]
    if len(body) != count * 64:
        raise ValueError(f"batch of {count} packets holds {len(body)} bytes")
    return [PacketRecord(qid, first + i, t0, t1, t2, body[i * 64:(i + 1) * 64], None, None,
                         offset) for i in range(count)]


def _unpackb(data: bytes):
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _clock(value: int) -> Clock | int:
    try:
        return Clock(value)
    except ValueError:
        return value


def parse_record(kind: int, flags: int, payload: bytes, offset: int = -1) -> Record:
    """One record from its header fields and payload, for block readers (packet-trace) that
    walk record headers themselves; raises TraceFormatError naming `offset` like the reader."""
    try:
        return _parse(kind, flags, payload, offset)
    except (struct.error, ValueError, TypeError, KeyError, UnicodeDecodeError,
            msgpack.UnpackException) as e:
        raise TraceFormatError(
            f"corrupt trace: record at byte offset {offset} (kind {kind}) does not parse: {e}"
            f"{NEXT_STEP_DAMAGED}"
        ) from None
