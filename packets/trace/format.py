"""The trace file's wire format: magic, version, record kinds, struct layouts, and the
integrity checks (checksum records, damage and cut-short errors) that the reader and the
packet-trace block scanners share. docs/TRACE_FORMAT.md is the full description."""

from __future__ import annotations

import struct
import time
from enum import IntEnum

import numpy as np

from ground.errors import TraceFormatError

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

