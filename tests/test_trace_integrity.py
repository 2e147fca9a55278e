"""Trace integrity that damage cannot turn off (issue 17): in a checksummed trace an unknown
record kind is damage (a damaged checksum record's kind would otherwise leave the bytes it
covers unverified), bytes after the last checksum record are damage, the file header is
covered by the first checksum, and `show`/`graph --limit N` verify what they print.
Every single-byte flip of a record header or of the file header is reported."""

from __future__ import annotations

import struct

import pytest

import packets
from amdgpu.errors import TraceFormatError
from packets import trace
from tools.packet_trace import scan, synth
from tools.packet_trace.cli import main

pytestmark = pytest.mark.generic

GRID_X = trace.RECORD_HEADER_SIZE + 40 + 12  # a packet record's grid_size_x (u32)


def dispatch(i: int, grid: int = 1024) -> bytes:
    return packets.kernel_dispatch(workgroup_size=64, grid_size=grid,
                                   kernel_object=synth.SAXPY_OBJECT,
                                   kernarg_address=0x1000 + 64 * i)


def walk(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, kind, payload length) of every record, checksum records included."""
    out, pos = [], trace.FILE_HEADER_SIZE
    while pos < len(data):
        length, kind, _ = struct.unpack_from("<IHH", data, pos)
        out.append((pos, kind, length))
        pos += trace.RECORD_HEADER_SIZE + length
    return out


def write(path, writes: int = 4, per_write: int = 5) -> tuple[bytes, list]:
    """A trace of `writes` checksummed stretches of `per_write` packets each (grid 1024)."""
    with packets.TraceWriter(path) as w:
        w.kernel_symbol(synth.SAXPY_OBJECT, "saxpy", synth.SAXPY_LAYOUT)
        for k in range(writes):
            for i in range(per_write):
                w.record_packet(0, k * per_write + i, 1, 2, 3, dispatch(i))
            w.completion(0, k, 10, 20)
            w.flush()
    data = path.read_bytes()
    return data, walk(data)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("integrity") / "small.aqltrace"
    data, layout = write(path)
    return path, data, layout


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def every_reader(path):
    """Each way the project reads a trace, as a callable that reads it all."""
    return {"read_trace": lambda: list(packets.read_trace(path)),
            "no expand": lambda: list(packets.read_trace(path, expand=False)),
            "scan": lambda: list(scan.scan(path, chunk_bytes=256)),
            "scan big": lambda: list(scan.scan(path))}


def test_the_writer_flags_the_header_and_the_first_checksum_covers_it(small):
    _, data, layout = small
    assert struct.unpack_from("<I", data, 12)[0] == trace.FILE_FLAG_CHECKSUMS
    first = next(o for o, k, _ in layout if k == trace.KIND_CHECKSUM)
    count, _, _ = struct.unpack_from("<QII", data, first + trace.RECORD_HEADER_SIZE)
    assert count == first  # from byte 0: the header's version and flags are covered


def test_an_empty_trace_still_ends_with_a_checksum(tmp_path):
    path = tmp_path / "empty.aqltrace"
    packets.TraceWriter(path).close()
    assert path.stat().st_size == trace.FILE_HEADER_SIZE + trace.CHECKSUM_RECORD_SIZE
    assert list(packets.read_trace(path)) == []
    assert sum(c.records for c in scan.scan(path)) == 0


@pytest.mark.parametrize("which", [0, 1, -1])
@pytest.mark.parametrize("new_kind", [99, 0, int(trace.RecordKind.PACKET),
                                      int(trace.RecordKind.COMPLETION),
                                      int(trace.RecordKind.KERNEL_SYMBOL)])
def test_a_damaged_checksum_record_kind_is_reported(small, tmp_path, which, new_kind):
    path, data, layout = small
    sums = [o for o, k, _ in layout if k == trace.KIND_CHECKSUM]
    bad = bytearray(data)
    struct.pack_into("<H", bad, sums[which] + 4, new_kind)
    f = tmp_path / "kind.aqltrace"
    f.write_bytes(bytes(bad))
    for name, read in every_reader(f).items():
        with pytest.raises(TraceFormatError) as info:
            read()
        assert "damaged" in str(info.value) or "corrupt" in str(info.value), name


def test_the_issue_case_altered_grid_behind_a_damaged_checksum_kind(small, tmp_path,
                                                                    capsys):
    """A grid of 1024 changed to 1280 in the last stretch and the kind of the checksum record
    that covers it damaged: no command prints 1280, every one exits 2."""
    path, data, layout = small
    last_sum = [o for o, k, _ in layout if k == trace.KIND_CHECKSUM][-1]
    victim = [o for o, k, n in layout if k == trace.RecordKind.PACKET and o < last_sum][-1]
    bad = bytearray(data)
    assert struct.unpack_from("<I", bad, victim + GRID_X)[0] == 1024
    struct.pack_into("<I", bad, victim + GRID_X, 1280)
    struct.pack_into("<H", bad, last_sum + 4, 99)
    f = tmp_path / "issue.aqltrace"
    f.write_bytes(bytes(bad))
    for argv in (["show", "--format", "plain"], ["show", "--raw"], ["stats", "--json"],
                 ["export", "--perfetto", tmp_path / "o.json"],
                 ["graph", "-o", tmp_path / "g.dot"]):
        code, out, err = run_cli(capsys, *argv, f)
        assert code == 2, argv
        assert "1280" not in out and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1 and "damaged" in err, err
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "g.dot").exists()
    code, out, _ = run_cli(capsys, "show", "--format", "plain", f)
    assert out.count("kernel_dispatch") == 15  # the three verified stretches, 5 rows each


def test_bytes_after_the_last_checksum_are_damage(small, tmp_path):
    """A record appended after the last checksum record is read by nobody as verified."""
    path, data, _ = small
    extra = struct.pack("<IHHQQQQQ64s", 104, 1, 0, 0, 99, 1, 2, 3, dispatch(0, 1280))
    f = tmp_path / "tail.aqltrace"
    f.write_bytes(data + extra)
    for _name, read in every_reader(f).items():
        with pytest.raises(TraceFormatError, match=f"between byte {len(data)} and "
                           f"{len(data) + len(extra)}: no checksum record covers"):
            read()


@pytest.mark.parametrize("xor", [0x01, 0x80, 0xFF])
def test_every_record_header_and_file_header_byte_flip_is_reported(small, tmp_path, xor):
    """Exhaustive: each byte of the file header and of every record header (length, kind,
    flags; checksum records included), flipped alone, raises from every reader."""
    path, data, layout = small
    positions = list(range(trace.FILE_HEADER_SIZE))
    positions += [o + i for o, _, _ in layout for i in range(trace.RECORD_HEADER_SIZE)]
    f = tmp_path / "flip.aqltrace"
    missed = []
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= xor
        f.write_bytes(bytes(bad))
        for name, read in every_reader(f).items():
            try:
                read()
            except TraceFormatError:
                continue
            missed.append((pos, name))
    assert missed == []


def test_show_limit_prints_only_verified_rows(small, tmp_path, capsys):
    """--limit 2 stops inside the first stretch; the damage lies after row 2 in that stretch:
    show reads on to the checksum record, finds it, prints no row of it and exits 2."""
    path, data, layout = small
    packets_ = [o for o, k, _ in layout if k == trace.RecordKind.PACKET]
    bad = bytearray(data)
    struct.pack_into("<I", bad, packets_[3] + GRID_X, 1280)  # the 4th packet
    f = tmp_path / "limit.aqltrace"
    f.write_bytes(bytes(bad))
    code, out, err = run_cli(capsys, "show", "--format", "plain", "--limit", "2", f)
    assert code == 2 and "checksum mismatch" in err and "kernel_dispatch" not in out
    code, out, err = run_cli(capsys, "graph", "--limit", "2", "-o", tmp_path / "g.dot", f)
    assert code == 2 and "checksum mismatch" in err and not (tmp_path / "g.dot").exists()
    # Undamaged: exactly N rows, exit 0, nothing on stderr.
    code, out, err = run_cli(capsys, "show", "--format", "plain", "--limit", "7", path)
    assert code == 0 and out.count("kernel_dispatch") == 7 and err == ""
    code, out, err = run_cli(capsys, "graph", "--limit", "7", "-o", tmp_path / "ok.dot", path)
    assert code == 0 and "7 packet node(s)" in out and err == ""


def test_show_limit_says_when_a_trace_cannot_be_verified(tmp_path, capsys):
    """A file from before checksum records: rows print as read, and show says so."""
    pieces = [struct.pack("<8sHHI", trace.MAGIC, 2, 16, 0)]
    pieces += [struct.pack("<IHHQQQQQ64s", 104, 1, 0, 0, i, 1, 2, 3, dispatch(i))
               for i in range(6)]
    f = tmp_path / "old.aqltrace"
    f.write_bytes(b"".join(pieces))
    code, out, err = run_cli(capsys, "show", "--format", "plain", "--limit", "3", f)
    assert code == 0 and out.count("kernel_dispatch") == 3
    assert err.strip() == (f"packet-trace: note: {f} has no checksum records (an older "
                           "writer): the 3 row(s) shown were not verified")


def test_unknown_header_flags_are_refused(small, tmp_path, capsys):
    path, data, _ = small
    f = tmp_path / "flags.aqltrace"
    f.write_bytes(data[:12] + struct.pack("<I", 0x11) + data[16:])
    for command in ("stats", "show"):
        code, out, err = run_cli(capsys, command, f)
        assert code == 2 and "file header flags 0x11 at byte offset 12" in err
        assert "kernel_dispatch" not in out
