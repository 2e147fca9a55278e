"""packet-trace export --rocpd: rocprofv3's SQLite schema (rocprofiler-sdk's rocpd_tables.sql,
schema 3), read back with SQL (Python's sqlite3 and the sqlite3 command-line tool) and
checked against the trace and against the rocprofv3-column CSV of the same trace."""

from __future__ import annotations

import csv
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tools.packet_trace import synth
from tools.packet_trace.cli import main

REPO = Path(__file__).resolve().parents[1]
# The tables and the columns rocprofiler-sdk's rocpd_tables.sql (schema 3) gives them.
SCHEMA = {
    "rocpd_kernel_dispatch": ["id", "guid", "nid", "pid", "tid", "agent_id", "kernel_id",
                              "dispatch_id", "queue_id", "stream_id", "start", "end",
                              "private_segment_size", "group_segment_size", "workgroup_size_x",
                              "workgroup_size_y", "workgroup_size_z", "grid_size_x",
                              "grid_size_y", "grid_size_z", "region_name_id", "event_id",
                              "extdata"],
    "rocpd_info_agent": ["id", "guid", "nid", "pid", "type", "absolute_index", "logical_index",
                         "type_index", "uuid", "name", "generic_name", "model_name",
                         "vendor_name", "product_name", "extdata"],
    "rocpd_info_queue": ["id", "guid", "nid", "pid", "name", "extdata"],
    "rocpd_string": ["id", "guid", "string"],
}


def _export(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("rocpd") / "sample.aqltrace"
    return path, synth.write_sample(path)


def test_the_tables_have_rocprofv3s_columns(sample, tmp_path, capsys):
    path, _ = sample
    db_path = tmp_path / "out.db"
    code, out, _ = _export(capsys, "export", "--rocpd", db_path, path)
    assert code == 0 and "8 kernel dispatch row(s), 2 with device start/end" in out
    db = sqlite3.connect(db_path)
    for view, columns in SCHEMA.items():
        got = [row[1] for row in db.execute(f'PRAGMA table_info("{view}")')]
        assert got == columns, view
    (suffix,) = db.execute("SELECT value FROM rocpd_metadata WHERE tag = 'uuid'").fetchone()
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {f"{t}{suffix}" for t in SCHEMA} <= tables
    assert db.execute("SELECT value FROM rocpd_metadata WHERE tag = 'schema_version'"
                      ).fetchone() == ("3",)
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_dispatches_timestamps_and_names_match_the_trace_and_the_csv(sample, tmp_path, capsys):
    path, expected = sample
    db_path, csv_path = tmp_path / "k.db", tmp_path / "k.csv"
    code, _, _ = _export(capsys, "export", "--rocpd", db_path, "--csv", csv_path, path)
    assert code == 0
    db = sqlite3.connect(db_path)
    rows = db.execute(
        "SELECT K.dispatch_id, S.string, K.start, K.end, K.grid_size_x, K.workgroup_size_x, "
        "Q.name, A.absolute_index, E.correlation_id FROM rocpd_kernel_dispatch K "
        "JOIN rocpd_string S ON S.id = K.region_name_id "
        "JOIN rocpd_info_queue Q ON Q.id = K.queue_id "
        "JOIN rocpd_info_agent A ON A.id = K.agent_id "
        "JOIN rocpd_event E ON E.id = K.event_id ORDER BY K.dispatch_id").fetchall()
    assert len(rows) == expected.packets_by_type["kernel_dispatch"]
    names = [r[1] for r in rows]
    assert names.count("saxpy") == expected.kernels["saxpy"] and names.count("fill") == 1
    # The sample's completion records: saxpy 1000..6000 on queue 0, fill 7000..9000 on 1.
    assert rows[0][1:7] == ("saxpy", 1000, 6000, 1024, 64, "queue 0")
    assert rows[1][1:7] == ("fill", 7000, 9000, 4096, 256, "queue 1")
    untimed = db.execute("SELECT COUNT(*) FROM rocpd_kernel_dispatch WHERE start = 0 AND "
                         "json_extract(extdata, '$.timed') = 0").fetchone()[0]
    assert untimed == len(rows) - 2
    # the same dispatches, ids, names, times and correlation ids as the CSV export
    with open(csv_path, newline="") as f:
        table = list(csv.DictReader(f))
    assert [(int(r["Dispatch_Id"]), r["Kernel_Name"], int(r["Correlation_Id"]),
             int(r["Grid_Size_X"]), int(r["Agent_Id"].split()[1]) - 1) for r in table] == \
        [(r[0], r[1], r[8], r[4], r[7]) for r in rows]
    # data_views.sql's `kernels` view joins it all
    view = db.execute("SELECT name, duration, category, queue, stream FROM kernels "
                      "ORDER BY dispatch_id LIMIT 2").fetchall()
    assert view == [("saxpy", 5000, "KERNEL_DISPATCH", "queue 0", "stream 0"),
                    ("fill", 2000, "KERNEL_DISPATCH", "queue 1", "stream 0")]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 CLI is not installed")
def test_the_sqlite3_tool_reads_a_driver_trace(tmp_path):
    trace = tmp_path / "c4.aqltrace"
    run = subprocess.run([sys.executable, "-m", "amdgpu.cli", "chain-4", "--device",
                          "amdgpu:virtual", "--replay", "--trace", str(trace)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    db_path = tmp_path / "c4.db"
    assert main(["export", "--rocpd", str(db_path), str(trace)]) == 0
    out = subprocess.run(["sqlite3", "-separator", "|", str(db_path),
                          "SELECT dispatch_id, name, duration > 0, grid_x FROM kernels "
                          "ORDER BY dispatch_id"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert len(lines) >= 4 and all(ln.split("|")[2] == "1" for ln in lines)
    assert all("chain_dispatch_" in ln.split("|")[1] for ln in lines)
    assert [int(ln.split("|")[0]) for ln in lines] == list(range(1, len(lines) + 1))


def test_an_existing_output_or_a_bad_trace_is_one_line_and_leaves_nothing(sample, tmp_path,
                                                                           capsys):
    path, _ = sample
    there = tmp_path / "there.db"
    there.write_text("keep me")
    code, _, err = _export(capsys, "export", "--rocpd", there, path)
    assert code == 2 and err.count("\n") == 1 and "the file exists" in err
    assert there.read_text() == "keep me"
    broken = tmp_path / "broken.aqltrace"
    broken.write_bytes(path.read_bytes()[:-7])  # cut inside the last record
    out = tmp_path / "b.db"
    code, _, err = _export(capsys, "export", "--rocpd", out, broken)
    assert code == 2 and err.count("\n") == 1
    assert not out.exists() and not list(tmp_path.glob("b.db*"))
