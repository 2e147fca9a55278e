"""packet-trace on bad input: truncated and corrupt files, unknown versions, missing files:
exit 2 with one line naming the byte offset, no traceback, after what came before."""

from __future__ import annotations

import json

import pytest

import packets
from amdgpu.errors import TraceFormatError
from tools.packet_trace import synth
from tools.packet_trace.cli import main

pytestmark = pytest.mark.generic


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt_err") / "good.aqltrace"
    synth.write_sample(path)
    offsets = sorted({r.offset for r in packets.read_trace(path)})
    return path, path.read_bytes(), offsets


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["show"],
                                     ["graph"], ["export", "--perfetto", "OUT"]])
def test_truncated_file_exits_2_naming_the_offset(tmp_path, good, capsys, command):
    path, data, offsets = good
    last = offsets[-1]  # the publish_many batch record
    bad = tmp_path / "cut.aqltrace"
    bad.write_bytes(data[:last + 20])
    argv = [c if c != "OUT" else tmp_path / "o.json" for c in command]
    if command[0] == "graph":
        argv += ["-o", tmp_path / "g.dot"]
    code, out, err = run_cli(capsys, *argv, bad)
    assert code == 2
    line = one_line(err)
    assert line.startswith("packet-trace: truncated trace") and f"byte offset {last}" in line
    if command == ["stats", "--json"]:
        stats = json.loads(out)  # what came before the cut was counted
        assert stats["packets_total"] == 4 and stats["error"] == line[len("packet-trace: "):]
    if command == ["show"]:
        # The sample is one write: the cut stretch lost its checksum record, so its rows
        # are unverified and show prints none of them (rows of verified stretches it would).
        assert "barrier_value" not in out


def test_cut_inside_a_record_header(tmp_path, good, capsys):
    path, data, offsets = good
    bad = tmp_path / "cut.aqltrace"
    bad.write_bytes(data[:offsets[3] + 5])
    code, _, err = run_cli(capsys, "stats", bad)
    assert code == 2
    assert f"record header at byte offset {offsets[3]} has 5 of 8 bytes" in one_line(err)


def test_corrupt_length_and_payload(tmp_path, good, capsys):
    path, data, offsets = good
    bad = bytearray(data)
    bad[offsets[2]:offsets[2] + 4] = (1 << 30).to_bytes(4, "little")  # absurd length
    f = tmp_path / "len.aqltrace"
    f.write_bytes(bad)
    code, out, err = run_cli(capsys, "stats", "--json", f)
    assert code == 2 and f"corrupt trace: record at byte offset {offsets[2]}" in one_line(err)
    assert json.loads(out)["other_records"]["queue_created"] == 2  # records before it
    # A kernel-symbol record whose msgpack body is garbage.
    sym = next(r for r in packets.read_trace(good[0])
               if isinstance(r, packets.trace.KernelSymbolRecord))
    bad = bytearray(data)
    bad[sym.offset + 16:sym.offset + 20] = b"\xc1\xc1\xc1\xc1"  # never-used msgpack byte
    f = tmp_path / "msgpack.aqltrace"
    f.write_bytes(bad)
    for command in ("stats", "show"):
        code, _, err = run_cli(capsys, command, f)
        assert code == 2
        assert f"corrupt trace: record at byte offset {sym.offset}" in one_line(err)


def test_unknown_version_and_wrong_magic(tmp_path, good, capsys):
    _, data, _ = good
    f = tmp_path / "v9.aqltrace"
    f.write_bytes(data[:8] + (9).to_bytes(2, "little") + data[10:])
    for command in ("stats", "show", "graph"):
        code, out, err = run_cli(capsys, command, f)
        assert code == 2 and "version 9 is not supported" in one_line(err)
    assert out == "" or "packet node" not in out
    f.write_bytes(b"not a trace at all")
    code, _, err = run_cli(capsys, "stats", f)
    assert code == 2 and "not an amdgpu-direct trace" in one_line(err)
    code, _, err = run_cli(capsys, "diff", f, good[0])
    assert code == 2 and "byte offset 0" in one_line(err)


def test_missing_file(tmp_path, capsys):
    code, out, err = run_cli(capsys, "show", tmp_path / "nope.aqltrace")
    assert code == 2 and "No such file" in one_line(err) and out == ""


def test_debug_shows_the_traceback(tmp_path, capsys):
    f = tmp_path / "junk.aqltrace"
    f.write_bytes(b"junk")
    with pytest.raises(TraceFormatError):
        main(["--debug", "stats", str(f)])
