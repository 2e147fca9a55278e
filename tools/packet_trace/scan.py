"""Reading a trace in chunks of records as numpy arrays: the fast path behind `stats` and
`record`'s summary.

`scan(path)` yields `Chunk`s in file order. A chunk holds every packet of its part of the
file as one numpy array of fixed 112-byte packet records (plain records are viewed in place,
PACKET_BATCH records, BLOCK_REPLAY records (expanded through their BLOCK_TEMPLATE) and the
fixed part of records with a kernarg/symbol tail are copied into the same layout), every
completion as a numpy array, and the remaining records as objects (`packets.trace` records,
in order; block templates among them, replays not: their packets are in the array, and
their kernarg values are read with `packets.read_trace`). Runs of plain records are found
with vector compares, so a file of a million plain packets costs a few numpy calls per 4 MiB,
not a Python step per record. A truncated or corrupt record ends the scan with
`TraceFormatError` naming its byte offset, after the chunk of the records before it has been
yielded; so does a checksum record (kind 9) that does not match the bytes before it (a
running CRC32 carried across chunks), naming the damaged byte range.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ground.errors import TraceFormatError
from packets import trace

CHUNK_BYTES = 4 << 20

_HEAD = struct.Struct("<IHH")
_HEAD_SIZE = _HEAD.size
_BATCH = struct.Struct("<QQQQQII")  # queue id, first id, 3 timestamps, count, reserved
_PACKET_STRIDE = trace.PACKET_RECORD.itemsize  # 112
_KIND_PACKET = int(trace.RecordKind.PACKET)
_KIND_COMPLETION = int(trace.RecordKind.COMPLETION)
_KIND_BATCH = int(getattr(trace.RecordKind, "PACKET_BATCH", 6))
_KIND_REPLAY = int(trace.RecordKind.BLOCK_REPLAY)
_KIND_CHECKSUM = trace.KIND_CHECKSUM

COMPLETION_RECORD = np.dtype(
    [
        ("length", "<u4"),
        ("kind", "<u2"),
        ("flags", "<u2"),
        ("queue_id", "<u8"),
        ("packet_id", "<u8"),
        ("start_ns", "<u8"),
        ("end_ns", "<u8"),
        ("clock", "<u4"),
        ("reserved", "<u4"),
    ]
)
_COMPLETION_STRIDE = COMPLETION_RECORD.itemsize  # 48

# The first 8 bytes of a plain record read as one u64: length | kind << 32 | flags << 48.
_PLAIN_PACKET_HEAD = (_PACKET_STRIDE - _HEAD_SIZE) | _KIND_PACKET << 32
_PLAIN_COMPLETION_HEAD = (_COMPLETION_STRIDE - _HEAD_SIZE) | _KIND_COMPLETION << 32

_EMPTY_PACKETS = np.empty(0, trace.PACKET_RECORD)
_EMPTY_COMPLETIONS = np.empty(0, COMPLETION_RECORD)


@dataclass
class Chunk:
    """The records of one stretch of a trace file."""

    packets: np.ndarray = field(default_factory=lambda: _EMPTY_PACKETS)  # PACKET_RECORD
    completions: np.ndarray = field(default_factory=lambda: _EMPTY_COMPLETIONS)
    others: list = field(default_factory=list)  # records other than plain packets/completions
    records: int = 0  # records in the file (a batch counts once)


class _Builder:
    """Collects the records of one chunk in file order. Packet and completion records that
    lie in the chunk's bytes are noted as (start, count) runs and gathered with one fancy
    index at the end; batch rows (made, not read) join as arrays between runs."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.packet_parts: list = []  # [start, count] runs or arrays
        self.completion_runs: list[list[int]] = []
        self.others: list = []
        self.records = 0

    def build(self) -> Chunk:
        return Chunk(self._packets(), self._gather(self.completion_runs, COMPLETION_RECORD),
                     self.others, self.records)

    def _packets(self) -> np.ndarray:
        arrays: list[np.ndarray] = []
        runs: list[list[int]] = []
        for part in self.packet_parts:
            if type(part) is list:
                runs.append(part)
                continue
            if runs:
                arrays.append(self._gather(runs, trace.PACKET_RECORD))
                runs = []
            arrays.append(part)
        if runs:
            arrays.append(self._gather(runs, trace.PACKET_RECORD))
        return _join(arrays, _EMPTY_PACKETS)

    def _gather(self, runs: list[list[int]], dtype: np.dtype) -> np.ndarray:
        if not runs:
            return np.empty(0, dtype)
        stride = dtype.itemsize
        if len(runs) == 1:  # one run: a view of the bytes, no copy
            return np.frombuffer(self.data, dtype, runs[0][1], runs[0][0])
        starts, counts = np.array(runs, np.int64).T
        total = int(counts.sum())
        before = np.repeat(np.cumsum(counts) - counts, counts)
        index = np.repeat(starts, counts) + (np.arange(total) - before) * stride
        # Element i of this overlapping view is the record that starts at byte i.
        every_byte = np.ndarray((len(self.data) - stride + 1,), dtype, self.data, 0, (1,))
        return every_byte[index]


def _join(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    if not parts:
        return empty
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts)


def _run_length(data: bytes, pos: int, stride: int, head: int, available: int) -> int:
    """How many records from `pos` on (at most `available`) have the plain head `head`.
    Windows double, so a run costs O(its length) compares."""
    n, window = 0, 8
    while n < available:
        m = min(window, available - n)
        heads = np.ndarray((m,), "<u8", data, pos + n * stride, (stride,))
        bad = np.flatnonzero(heads != head)
        if bad.size:
            return n + int(bad[0])
        n += m
        window *= 2
    return n


def _batch_rows(payload: bytes, offset: int) -> np.ndarray:
    qid, first, t0, t1, t2, count, _ = _BATCH.unpack_from(payload)
    body = len(payload) - _BATCH.size
    if body != count * 64:
        raise TraceFormatError(
            f"corrupt trace: record at byte offset {offset} (kind {_KIND_BATCH}) does not "
            f"parse: batch of {count} packets holds {body} bytes{trace.NEXT_STEP_DAMAGED}"
        )
    rows = np.zeros(count, trace.PACKET_RECORD)
    rows["length"] = _PACKET_STRIDE - _HEAD_SIZE
    rows["kind"] = _KIND_PACKET
    rows["queue_id"] = qid
    rows["packet_id"] = np.arange(first, first + count, dtype=np.uint64)
    rows["reserve_ns"] = t0
    rows["publish_ns"] = t1
    rows["doorbell_ns"] = t2
    rows["raw"] = np.frombuffer(payload, "V64", count, _BATCH.size)
    return rows


_U64 = struct.Struct("<Q")


def _run(data: bytes, pos: int, end: int, stride: int, head: int) -> int:
    """Length of the run of plain records (head `head`) starting with the one at `pos`."""
    nxt = pos + stride
    if end - nxt < _HEAD_SIZE or _U64.unpack_from(data, nxt)[0] != head:
        return 1  # the common case in mixed traces: no numpy call for a single record
    return 1 + _run_length(data, nxt, stride, head, (end - nxt) // stride)


class _Span:
    """The bytes since the last checksum record: where they start, their CRC32 so far."""

    __slots__ = ("start", "crc", "checksummed")

    def __init__(self, start: int, crc: int = 0, checksummed: bool = False) -> None:
        self.start = start
        self.crc = crc
        self.checksummed = checksummed  # unknown kinds and an uncovered tail are damage


def _parse_chunk(data: bytes, base: int, out: _Builder, with_tails: bool,
                 templates: dict | None = None, span: _Span | None = None) -> tuple[int, int]:
    """Parse the whole records of `data` (file offset `base`) into `out`. Returns (bytes
    consumed, bytes the next incomplete record needs in all, or 0). `templates` maps the
    block templates seen so far (this and earlier chunks) by id; `span` carries the checksum
    state between chunks (checksum records are verified against the bytes before them)."""
    if templates is None:
        templates = {}
    if span is None:
        span = _Span(base)
    view = memoryview(data)
    consumed, need = _walk(data, base, out, with_tails, templates, span, view)
    # The consumed bytes after the last checksum record join the running CRC (earlier ones
    # are in it already); the rest is re-read with the next chunk.
    span.crc = zlib.crc32(view[max(0, span.start - base):consumed], span.crc)
    return consumed, need


def _walk(data: bytes, base: int, out: _Builder, with_tails: bool, templates: dict,
          span: _Span, view: memoryview) -> tuple[int, int]:
    end = len(data)
    pos = 0
    unpack = _HEAD.unpack_from
    packet_parts = out.packet_parts
    completion_runs = out.completion_runs
    while end - pos >= _HEAD_SIZE:
        length, kind, flags = unpack(data, pos)
        size = _HEAD_SIZE + length
        if size > end - pos:
            if length > trace.MAX_PAYLOAD:
                raise TraceFormatError(
                    f"corrupt trace: record at byte offset {base + pos} claims {length} "
                    f"bytes (limit {trace.MAX_PAYLOAD}){trace.NEXT_STEP_DAMAGED}"
                )
            return pos, size
        if flags == 0 and kind == _KIND_PACKET and size == _PACKET_STRIDE:
            n = _run(data, pos, end, _PACKET_STRIDE, _PLAIN_PACKET_HEAD)
            packet_parts.append([pos, n])
            out.records += n
            pos += n * _PACKET_STRIDE
            continue
        if kind == _KIND_COMPLETION and size == _COMPLETION_STRIDE:
            n = _run(data, pos, end, _COMPLETION_STRIDE, _PLAIN_COMPLETION_HEAD) if (
                flags == 0) else 1
            completion_runs.append([pos, n])
            out.records += n
            pos += n * _COMPLETION_STRIDE
            continue
        offset = base + pos
        payload = data[pos + _HEAD_SIZE:pos + size]
        if kind == _KIND_CHECKSUM:  # verifies the bytes before it; not counted as a record
            trace.check_checksum_record(offset, length, flags)
            first = max(0, span.start - base)
            trace.check_span(span.start, offset, zlib.crc32(view[first:pos], span.crc), payload)
            span.start = offset + size
            span.crc = 0
            span.checksummed = True
            pos += size
            continue
        if span.checksummed and kind not in trace.KNOWN_KINDS:
            raise trace.unknown_kind(offset, kind)
        if kind == _KIND_BATCH:
            if length < _BATCH.size:
                raise TraceFormatError(
                    f"corrupt trace: record at byte offset {offset} (kind {kind}) does not "
                    f"parse: {length} bytes is shorter than a batch head{trace.NEXT_STEP_DAMAGED}"
                )
            packet_parts.append(_batch_rows(payload, offset))
        elif kind == _KIND_REPLAY:
            replay = cast(trace.BlockReplayRecord, trace.parse_record(kind, flags, payload, offset))
            template = templates.get(replay.template_id)
            if template is None:
                raise TraceFormatError(
                    f"corrupt trace: record at byte offset {offset} (kind {kind}) does not "
                    f"parse: it replays block template {replay.template_id}, which no earlier "
                    f"record defines{trace.NEXT_STEP_DAMAGED}"
                )
            packet_parts.append(template.packet_rows(replay))
        else:
            record = trace.parse_record(kind, flags, payload, offset)
            if kind == _KIND_PACKET:  # a record with a tail: its fixed part joins the array
                if size < _PACKET_STRIDE:
                    raise TraceFormatError(
                        f"corrupt trace: record at byte offset {offset} (kind {kind}) is "
                        f"{length} bytes, shorter than a packet record{trace.NEXT_STEP_DAMAGED}"
                    )
                packet_parts.append([pos, 1])
                if with_tails:
                    out.others.append(record)
            else:
                if isinstance(record, trace.BlockTemplateRecord):
                    templates[record.template_id] = record
                out.others.append(record)
        out.records += 1
        pos += size
    return pos, 0


def scan(path: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES,
         with_tails: bool = True) -> Iterator[Chunk]:
    """Stream `path` as Chunks (see the module docstring). `with_tails=False` leaves the
    record objects of packets with kernarg/symbol tails out of `Chunk.others`."""
    with open(path, "rb") as f:
        reader = trace.TraceReader(f)  # checks magic, version and header size
        base = reader.offset
        leftover = b""
        want = chunk_bytes
        templates: dict = {}  # block templates by id, for the replays of later chunks
        # checksum state, carried across chunks (a checksummed file's covers its header)
        span = (_Span(0, reader._crc, True) if reader.checksummed else _Span(base))
        while True:
            fresh = f.read(max(chunk_bytes, want - len(leftover)))
            if not fresh:
                if leftover:
                    raise _truncated(leftover, base)
                if span.checksummed and span.start < base:
                    raise trace.uncovered_tail(span.start, base)
                return
            data = leftover + fresh if leftover else fresh
            out = _Builder(data)
            try:
                used, need = _parse_chunk(data, base, out, with_tails, templates, span)
            except TraceFormatError:
                yield out.build()  # what came before the bad record
                raise
            yield out.build()
            leftover = data[used:]
            base += used
            want = need or chunk_bytes


def _truncated(rest: bytes, offset: int) -> TraceFormatError:
    if len(rest) < _HEAD_SIZE:
        return TraceFormatError(
            f"truncated trace: record header at byte offset {offset} has {len(rest)} of "
            f"{_HEAD_SIZE} bytes{trace.NEXT_STEP_CUT_SHORT}"
        )
    length, kind, _ = _HEAD.unpack_from(rest)
    return TraceFormatError(
        f"truncated trace: record at byte offset {offset} (kind {kind}) has "
        f"{len(rest) - _HEAD_SIZE} of {length} payload bytes{trace.NEXT_STEP_CUT_SHORT}"
    )
