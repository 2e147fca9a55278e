"""Reading traces: `read_trace` / `TraceReader` stream records (checksums verified, block
replays expanded), `parse_record` / `parse_batch` for block scanners."""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import msgpack

from ground.errors import TraceFormatError

from .format import (
    _BLOCK_REPLAY,
    _COMPLETION,
    _FILE_HEADER,
    _KERNEL_SYMBOL,
    _KIND_BATCH,
    _KIND_REPLAY,
    _PACKET_BATCH,
    _PACKET_FIXED,
    _QUEUE_CREATED,
    _QUEUE_ERROR,
    _RECORD_HEADER,
    _VULKAN,
    FILE_FLAG_CHECKSUMS,
    FILE_HEADER_SIZE,
    FLAG_KERNARG,
    FLAG_SYMBOL,
    KIND_CHECKSUM,
    KNOWN_FILE_FLAGS,
    KNOWN_KINDS,
    MAGIC,
    MAX_PAYLOAD,
    NEXT_STEP_CUT_SHORT,
    NEXT_STEP_DAMAGED,
    PACKET_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SUPPORTED_VERSIONS,
    Clock,
    RecordKind,
    check_checksum_record,
    check_span,
    uncovered_tail,
    unknown_kind,
)
from .records import (
    BlockReplayRecord,
    BlockTemplateRecord,
    CompletionRecord,
    KernelSymbolRecord,
    PacketRecord,
    QueueCreatedRecord,
    QueueErrorRecord,
    Record,
    UnknownRecord,
    VulkanSubmissionRecord,
)

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
            out: Sequence[Any]
            try:
                if kind == _KIND_BATCH:
                    out = parse_batch(payload, offset)
                elif kind == _KIND_REPLAY and self.expand:
                    replay = _parse_replay(payload, offset)
                    out = self.template_of(replay).packet_records(replay)
                else:
                    rec = _parse(kind, flags, payload, offset)
                    if isinstance(rec, BlockTemplateRecord):
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
    queue_id, first_id, reserve_ns, publish_ns, doorbell_ns, template_id, base, signal = (
        head[:8])
    return BlockReplayRecord(queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                             template_id, base, signal, bindings, offset)


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
