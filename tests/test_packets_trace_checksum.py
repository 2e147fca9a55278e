"""Checksum records (kind 9): TraceWriter follows every write with the CRC32 of the bytes
it wrote; read_trace, the chunked scanner and packet-trace report bytes changed inside a
record (framing intact) as damage between two byte offsets, exit 2, after what came before.
Files without checksum records (older writers, version 1 and 2) still read."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packets
from amdgpu.errors import TraceFormatError
from packets import trace
from tools.packet_trace import scan, synth
from tools.packet_trace.cli import main

pytestmark = pytest.mark.generic

PACKETS = 600


def dispatch(i: int) -> bytes:
    return packets.kernel_dispatch(workgroup_size=64, grid_size=64 * (i + 1),
                                   kernel_object=synth.SAXPY_OBJECT,
                                   kernarg_address=0x1000 + 64 * i)


def walk(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, kind, payload length) of every record, checksum records included."""
    out, pos = [], trace.FILE_HEADER_SIZE
    while pos < len(data):
        length, kind, _ = struct.unpack_from("<IHH", data, pos)
        out.append((pos, kind, length))
        pos += trace.RECORD_HEADER_SIZE + length
    assert pos == len(data)
    return out


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A trace written by TraceWriter, its writer thread on, flushes every 50 packets:
    plain packets, batches, a kernarg/symbol record and completions, many checksum spans."""
    path = tmp_path_factory.mktemp("checksum") / "real.aqltrace"
    block = packets.kernel_dispatch_batch(workgroup_size=64, grid_size=np.arange(1, 41) * 64,
                                          kernel_object=synth.FILL_OBJECT,
                                          kernarg_address=0x8000)
    with packets.TraceWriter(path, buffer_records=50) as w:
        w.queue_created(0, {"size": 64})
        w.kernel_symbol(synth.SAXPY_OBJECT, "saxpy", synth.SAXPY_LAYOUT)
        for i in range(PACKETS):
            w.record_packet(0, i, i, i + 1, i + 2, dispatch(i))
            if i % 50 == 49:
                w.flush()
            if i % 100 == 7:
                w.record_packets(1, 10_000 + i * 40, 1, 2, 3, block)
                w.record_packet(0, 50_000 + i, 1, 2, 3, dispatch(1), kernarg=b"\x01" * 24,
                                symbol="saxpy")
                w.completion(0, i, 100, 200)
                w.flush()
    data = path.read_bytes()
    return path, data, walk(data), list(packets.read_trace(path))


def plain_packet_offsets(layout) -> list[int]:
    return [off for off, kind, length in layout
            if kind == trace.RecordKind.PACKET and length == trace.PACKET_FIXED_SIZE]


def spans(layout) -> list[tuple[int, int]]:
    """[start, end) of every checksummed stretch: end is the checksum record's offset (the
    first stretch starts at byte 0: the file header is covered too)."""
    out, start = [], 0
    for off, kind, length in layout:
        if kind == trace.KIND_CHECKSUM:
            out.append((start, off))
            start = off + trace.RECORD_HEADER_SIZE + length
    return out


def span_of(layout, position: int) -> tuple[int, int]:
    return next((a, b) for a, b in spans(layout)
                if a <= position < b + trace.CHECKSUM_RECORD_SIZE)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_writer_checksums_every_write_and_they_verify(real):
    path, data, layout, records = real
    sums = [(off, length) for off, kind, length in layout if kind == trace.KIND_CHECKSUM]
    assert len(sums) > 10, "a drain every 50 records should leave many checksum records"
    assert layout[-1][1] == trace.KIND_CHECKSUM, "close() ends the file with a checksum"
    for start, end in spans(layout):
        count, crc, _ = struct.unpack_from("<QII", data, end + trace.RECORD_HEADER_SIZE)
        assert (count, crc) == (end - start, zlib.crc32(data[start:end]))
    # Checksum records are not yielded: the reader gives exactly what was recorded.
    assert not any(isinstance(r, trace.UnknownRecord) for r in records)
    ids = [r.packet_id for r in records if isinstance(r, trace.PacketRecord) and r.queue_id == 0
           and r.packet_id < PACKETS]
    assert ids == list(range(PACKETS))
    chunks = list(scan.scan(path, chunk_bytes=3000))  # spans cut at chunk ends
    assert sum(len(c.packets) for c in chunks) == sum(
        isinstance(r, trace.PacketRecord) for r in records)
    assert sum(c.records for c in chunks) == len(
        [o for o, kind, _ in layout if kind not in (trace.KIND_CHECKSUM,)])


def flipped(data: bytes, position: int, count: int = 1, xor: int = 0xA5) -> bytes:
    bad = bytearray(data)
    for i in range(position, position + count):
        bad[i] ^= xor
    return bytes(bad)


def test_forty_flipped_bytes_in_a_packet_are_reported_by_every_reader(real, tmp_path, capsys):
    path, data, layout, records = real
    plain = plain_packet_offsets(layout)
    victim = plain[len(plain) // 2]
    position = victim + trace.RECORD_HEADER_SIZE + 40  # inside the 64 raw packet bytes
    start, end = span_of(layout, position)
    bad = tmp_path / "flipped.aqltrace"
    bad.write_bytes(flipped(data, position, 40))
    expected = f"trace damaged between byte {start} and {end}: checksum mismatch"

    seen = []
    with pytest.raises(TraceFormatError, match=expected) as info:
        for rec in packets.read_trace(bad):
            seen.append(rec)
    assert f"records before byte {start} are intact, or record again" in str(info.value)
    before = [r for r in records if r.offset < start]
    assert seen[:len(before)] == before  # everything before the damage came out intact

    with pytest.raises(TraceFormatError, match=expected):
        list(scan.scan(bad, chunk_bytes=4096))

    code, out, err = run_cli(capsys, "stats", "--json", bad)
    assert code == 2 and err.strip() == f"packet-trace: {info.value}"
    assert json.loads(out)["packets_total"] >= len(
        [r for r in before if isinstance(r, trace.PacketRecord)])
    code, out, err = run_cli(capsys, "show", "--format", "plain", bad)
    assert code == 2 and err.strip() == f"packet-trace: {info.value}"
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "kernel_dispatch" in out  # rows before the damage were printed
    for argv in (["graph", "-o", tmp_path / "g.dot"],
                 ["export", "--perfetto", tmp_path / "o.json"]):
        code, _, err = run_cli(capsys, *argv, bad)
        assert code == 2 and expected in err


@pytest.mark.parametrize("where", ["first", "last", "batch", "symbol", "checksum", "kernarg"])
def test_flips_at_several_places(real, tmp_path, where):
    path, data, layout, _ = real
    plain = plain_packet_offsets(layout)
    pick = {
        "first": plain[0] + trace.RECORD_HEADER_SIZE,  # queue id of the first packet
        "last": plain[-1] + trace.RECORD_HEADER_SIZE + 103,  # last raw byte of the last one
        "batch": next(o for o, k, _ in layout if k == trace.RecordKind.PACKET_BATCH) + 200,
        "symbol": next(o for o, k, n in layout if k == trace.RecordKind.PACKET
                     and n > trace.PACKET_FIXED_SIZE) + trace.RECORD_HEADER_SIZE + 135,
        "checksum": next(o for o, k, _ in layout if k == trace.KIND_CHECKSUM) + 12,
        "kernarg": next(o for o, k, n in layout if k == trace.RecordKind.PACKET
                        and n > trace.PACKET_FIXED_SIZE) + trace.RECORD_HEADER_SIZE + 113,
    }[where]
    start, end = span_of(layout, pick)
    bad = tmp_path / f"{where}.aqltrace"
    bad.write_bytes(flipped(data, pick, xor=1))  # the symbol's letter stays ASCII
    expected = f"trace damaged between byte {start} and {end}"
    with pytest.raises(TraceFormatError, match=expected):
        list(packets.read_trace(bad))
    with pytest.raises(TraceFormatError, match=expected):
        for _ in scan.scan(bad, chunk_bytes=1 << 14):
            pass


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_flipped_byte_is_detected(real, tmp_path, data_strategy):
    """A flip anywhere raises TraceFormatError, from read_trace and from the scanner: in a
    record's payload (framing intact) naming its span when the payload still parses, in a
    record header (length, kind, flags: checksum records' included) or in the file header."""
    path, data, layout, _ = real
    where = data_strategy.draw(st.sampled_from(["payload", "record header", "file header"]))
    if where == "file header":
        position = data_strategy.draw(st.integers(0, trace.FILE_HEADER_SIZE - 1))
    else:
        off, kind, length = data_strategy.draw(st.sampled_from([r for r in layout if r[2]]))
        position = off + (trace.RECORD_HEADER_SIZE + data_strategy.draw(
            st.integers(0, length - 1)) if where == "payload" else data_strategy.draw(
            st.integers(0, trace.RECORD_HEADER_SIZE - 1)))
    xor = data_strategy.draw(st.integers(1, 255))
    bad = bytearray(data)
    bad[position] ^= xor
    f = tmp_path / "h.aqltrace"
    f.write_bytes(bytes(bad))
    for read in (lambda: list(packets.read_trace(f)),
                 lambda: list(scan.scan(f, chunk_bytes=2048))):
        with pytest.raises(TraceFormatError) as info:
            read()
        if where == "payload":
            start, end = span_of(layout, position)
            text = str(info.value)
            assert f"between byte {start} and {end}" in text or "does not parse" in text, text


def write_v2_without_checksums(path, version: int = 2) -> list[bytes]:
    raws = [dispatch(i) for i in range(20)]
    pieces = [struct.pack("<8sHHI", trace.MAGIC, version, 16, 0)]
    pieces.append(trace._pack(trace.RecordKind.QUEUE_CREATED, 0,
                              struct.pack("<QQ", 0, 5) + trace._packb({"size": 64})))
    for i, raw in enumerate(raws):
        pieces.append(struct.pack("<IHHQQQQQ64s", 104, 1, 0, 0, i, 1, 2, 3, raw))
    path.write_bytes(b"".join(pieces))
    return raws


@pytest.mark.parametrize("version", [1, 2])
def test_older_files_without_checksums_still_read(tmp_path, capsys, version):
    path = tmp_path / f"v{version}.aqltrace"
    raws = write_v2_without_checksums(path, version)
    recs = list(packets.read_trace(path))
    assert [r.raw for r in recs[1:]] == raws
    assert sum(len(c.packets) for c in scan.scan(path)) == len(raws)
    code, out, _ = run_cli(capsys, "stats", "--json", path)
    assert code == 0 and json.loads(out)["packets_total"] == len(raws)
    # Without checksum records a flipped payload byte stays unnoticed (what they can't say).
    bad = tmp_path / "bad.aqltrace"
    bad.write_bytes(flipped(path.read_bytes(), 16 + 24 + 8 + 20))
    assert len(list(packets.read_trace(bad))) == len(recs)


def test_a_short_checksum_record_is_corrupt(tmp_path):
    path = tmp_path / "short.aqltrace"
    write_v2_without_checksums(path)
    with open(path, "ab") as f:
        f.write(struct.pack("<IHH", 4, trace.KIND_CHECKSUM, 0) + b"\0" * 4)
    with pytest.raises(TraceFormatError, match="checksum record of 4 bytes"):
        list(packets.read_trace(path))
    with pytest.raises(TraceFormatError, match="checksum record of 4 bytes"):
        list(scan.scan(path))


def test_a_flip_in_a_checksum_records_reserved_word_is_detected(real, tmp_path):
    """The checksum record's own bytes are covered by no later checksum: its reserved word
    must be 0, so that a flip there is caught too (hypothesis found this one)."""
    _, data, layout, _ = real
    record = next(o for o, k, _ in layout if k == trace.KIND_CHECKSUM)
    position = record + trace.RECORD_HEADER_SIZE + 12  # the reserved u32 after count and crc
    start, end = span_of(layout, position)
    bad = tmp_path / "reserved.aqltrace"
    bad.write_bytes(flipped(data, position))
    expected = f"trace damaged between byte {start} and {end}"
    with pytest.raises(TraceFormatError, match=expected):
        list(packets.read_trace(bad))
    with pytest.raises(TraceFormatError, match=expected):
        for _ in scan.scan(bad, chunk_bytes=1 << 14):
            pass
