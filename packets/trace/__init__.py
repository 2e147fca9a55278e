"""Packet trace records: a versioned, streamable binary format, a sink API and a reader.

One module per concept: `format` (the wire layout, record kinds and integrity checks),
`records` (the record objects and block templates), `writer` (TraceWriter), `sinks` (the
sink protocol, MemorySink, the active sink) and `reader` (read_trace, TraceReader). Every
public name is re-exported here, so `packets.trace.X` is the import path to use.

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

from ground.errors import TraceFormatError

from .format import (
    CHECKSUM_RECORD_SIZE,
    CHECKSUM_SIZE,
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
    PACKET_RECORD,
    RECORD_HEADER_SIZE,
    SUPPORTED_VERSIONS,
    VERSION,
    Clock,
    RecordKind,
    check_checksum_record,
    check_span,
    damaged_between,
    now_ns,
    uncovered_tail,
    unknown_kind,
)
from .reader import TraceReader, parse_batch, parse_record, read_trace
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
from .sinks import STATE, MemorySink, TraceSink, active_sink, set_sink, watch_sink
from .writer import TraceWriter, _pack, _packb

__all__ = [
    "CHECKSUM_RECORD_SIZE", "CHECKSUM_SIZE", "FILE_FLAG_CHECKSUMS", "FILE_HEADER_SIZE",
    "FLAG_KERNARG", "FLAG_SYMBOL", "KIND_CHECKSUM", "KNOWN_FILE_FLAGS", "KNOWN_KINDS", "MAGIC",
    "MAX_PAYLOAD", "NEXT_STEP_CUT_SHORT", "NEXT_STEP_DAMAGED", "PACKET_FIXED_SIZE",
    "PACKET_RECORD", "RECORD_HEADER_SIZE", "STATE", "SUPPORTED_VERSIONS", "VERSION",
    "BlockReplayRecord", "BlockTemplateRecord", "Clock", "CompletionRecord",
    "KernelSymbolRecord", "MemorySink", "PacketRecord", "QueueCreatedRecord",
    "QueueErrorRecord", "Record", "RecordKind", "TraceFormatError", "TraceReader",
    "TraceSink", "TraceWriter", "UnknownRecord", "VulkanSubmissionRecord", "_pack", "_packb",
    "active_sink", "check_checksum_record", "check_span", "damaged_between", "now_ns",
    "parse_batch", "parse_record", "read_trace", "set_sink", "uncovered_tail", "watch_sink",
    "unknown_kind",
]
