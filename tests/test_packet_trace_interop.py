"""packet-trace export --csv (rocprofv3 kernel_trace columns) and --perfetto OUT.pftrace
(Perfetto's protobuf, read back with the Trace definitions of the `perfetto` package)."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.packet_trace import protowire, synth
from tools.packet_trace.cli import main
from tools.packet_trace.kernel_csv import COLUMNS

pytestmark = pytest.mark.generic

# rocprofv3's kernel_trace.csv header (ROCm 6.4+), as its docs print it.
ROCPROFV3_HEADER = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id",'
    '"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size",'
    '"Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X",'
    '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"')


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("interop") / "sample.aqltrace"
    return path, synth.write_sample(path)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_csv_has_rocprofv3_columns_and_a_row_per_dispatch(sample, tmp_path, capsys):
    path, expected = sample
    out = tmp_path / "kernel_trace.csv"
    code, text, _ = run_cli(capsys, "export", "--csv", out, path)
    assert code == 0 and "8 kernel dispatch row(s), 2 with device start/end" in text
    lines = out.read_text().splitlines()
    assert lines[0] == ROCPROFV3_HEADER
    rows = list(csv.DictReader(lines))
    assert len(rows) == expected.packets_by_type["kernel_dispatch"]
    assert {r["Kind"] for r in rows} == {"KERNEL_DISPATCH"}
    names = [r["Kernel_Name"] for r in rows]
    assert names.count("saxpy") == expected.kernels["saxpy"] and names.count("fill") == 1
    assert [int(r["Dispatch_Id"]) for r in rows] == list(range(1, len(rows) + 1))
    saxpy, fill = rows[0], rows[1]
    assert (saxpy["Workgroup_Size_X"], saxpy["Grid_Size_X"]) == ("64", "1024")
    assert (fill["Workgroup_Size_X"], fill["Grid_Size_X"], fill["Queue_Id"]) == (
        "256", "4096", "1")
    # The sample's completion records: saxpy 1000..6000 on queue 0, fill 7000..9000.
    assert (saxpy["Start_Timestamp"], saxpy["End_Timestamp"]) == ("1000", "6000")
    assert (fill["Start_Timestamp"], fill["End_Timestamp"]) == ("7000", "9000")
    assert rows[2]["Start_Timestamp"] == ""  # no completion record: left empty
    # The six chained dispatches went out in one publish_many: one correlation id.
    assert len({r["Correlation_Id"] for r in rows[2:]}) == 1
    assert saxpy["Kernel_Id"] != fill["Kernel_Id"]
    assert tuple(rows[0]) == COLUMNS


def _read_pftrace(path):
    pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    trace = pb2.Trace()
    trace.ParseFromString(path.read_bytes())
    return pb2, trace


def test_pftrace_reads_back_with_perfettos_own_definitions(sample, tmp_path, capsys):
    path, expected = sample
    out = tmp_path / "run.pftrace"
    code, text, _ = run_cli(capsys, "export", "--perfetto", out, path)
    assert code == 0 and "Perfetto protobuf" in text
    pb2, trace = _read_pftrace(out)
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    processes = {t.process.process_name for t in tracks.values() if t.HasField("process")}
    assert {"host submit", "device (host clock)"} <= processes
    events = [p for p in trace.packet if p.HasField("track_event")]
    begin, end = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END
    begins = [p for p in events if p.track_event.type == begin]
    ends = [p for p in events if p.track_event.type == end]
    assert len(begins) == len(ends)
    host = [p for p in begins if "submit" in p.track_event.categories]
    device = [p for p in begins if "device" in p.track_event.categories]
    assert len(host) == 5  # the sample's submissions: 4 publishes + 1 publish_many
    assert sorted(p.track_event.name for p in device) == ["fill", "saxpy"]
    assert "batch of 7" in {p.track_event.name for p in host}  # 6 saxpy + barrier-OR
    saxpy_dev = next(p for p in device if p.track_event.name == "saxpy")
    assert saxpy_dev.timestamp == 1000
    assert tracks[saxpy_dev.track_event.track_uuid].name == "queue 0"
    # Each begin has its end on the same track, not earlier.
    for b in begins:
        e = next(x for x in ends if x.track_event.track_uuid == b.track_event.track_uuid
                 and x.timestamp >= b.timestamp)
        assert e is not None
    flows_out = [f for p in events for f in p.track_event.flow_ids]
    flows_in = [f for p in events for f in p.track_event.terminating_flow_ids]
    assert len(flows_out) == 4 and sorted(flows_out) == sorted(flows_in)
    ann = {a.name: a.uint_value for a in host[0].track_event.debug_annotations}
    assert ann["correlation id"] == 1 and ann["packets"] == 1


def test_export_csv_and_pftrace_of_driver_style_replays(tmp_path, capsys):
    path = tmp_path / "many.aqltrace"
    synth.write_many(path, 5000, batch=1000, replay=True)
    csv_out, pf_out = tmp_path / "m.csv", tmp_path / "m.pftrace"
    code, _, _ = run_cli(capsys, "export", "--csv", csv_out, "--perfetto", pf_out, path)
    assert code == 0
    rows = csv_out.read_text().splitlines()
    assert len(rows) - 1 == sum(1 for r in rows[1:] if r.startswith('"KERNEL_DISPATCH"'))
    assert len(rows) > 4000
    _, trace = _read_pftrace(pf_out)
    assert sum(p.HasField("track_event") for p in trace.packet) >= 10


def test_export_to_an_unwritable_place_is_one_line_and_leaves_nothing(sample, tmp_path,
                                                                      capsys):
    path, _ = sample
    blocker = tmp_path / "a_file"  # a file where a folder should be: no user can write there
    blocker.write_text("x")
    for option, name in (("--csv", "k.csv"), ("--perfetto", "t.pftrace"),
                         ("--perfetto", "t.json")):
        code, _, err = run_cli(capsys, "export", option, blocker / name, path)
        assert code == 2
        assert err.count("\n") == 1 and "cannot write" in err
        assert sorted(os.listdir(tmp_path)) == ["a_file"]
    # A folder as the output file: the temporary file is removed again.
    code, _, err = run_cli(capsys, "export", "--csv", tmp_path, path)
    assert code == 2 and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["a_file"]
    code, _, err = run_cli(capsys, "export", path)
    assert code == 2 and err.count("\n") == 1 and "--csv" in err


def test_export_of_a_cut_trace_writes_no_file(sample, tmp_path, capsys):
    path, _ = sample
    cut = tmp_path / "cut.aqltrace"
    cut.write_bytes(path.read_bytes()[:-30])
    for option, name in (("--csv", "k.csv"), ("--perfetto", "t.pftrace")):
        code, _, err = run_cli(capsys, "export", option, tmp_path / name, cut)
        assert code == 2 and "truncated" in err and err.count("\n") == 1
        assert not (tmp_path / name).exists()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40))
def test_vectorised_varints_equal_the_scalar_encoder(values):
    rows = protowire.varints(np.array(values, np.uint64))
    assert rows.flat().tobytes() == b"".join(protowire.varint(v) for v in values)
    nested = protowire.concat(*protowire.len_fields(3, [*protowire.uint_fields(
        1, np.array(values, np.uint64))]))
    assert nested.flat().tobytes() == b"".join(
        protowire.bytes_field(3, protowire.uint_field(1, v)) for v in values)


def test_pftrace_names_gfx1250_extended_dispatches_and_their_dep_signal_flows(tmp_path,
                                                                           capsys):
    path = tmp_path / "gfx1250.aqltrace"
    expected = synth.write_gfx1250_sample(path)
    out = tmp_path / "g.pftrace"
    code, _, _ = run_cli(capsys, "export", "--perfetto", out, "--csv", tmp_path / "g.csv", path)
    assert code == 0
    _, trace = _read_pftrace(out)
    names = {p.track_event.name for p in trace.packet if p.HasField("track_event")}
    assert set(expected.kernels) & names  # kernel names, not "ext_kernel_dispatch"
