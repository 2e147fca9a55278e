"""packet-trace show / stats / diff / export / graph over traces made by the real packets
layer (packets.Ring over numpy queue memory, recorded by packets.TraceWriter)."""

from __future__ import annotations

import json
import shutil

import pytest

import packets
from tools.packet_trace import synth
from tools.packet_trace.cli import main

pytestmark = pytest.mark.generic


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt") / "sample.aqltrace"
    return path, synth.write_sample(path)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_json_counts_equal_what_was_published(sample, capsys):
    path, expected = sample
    code, out, _ = run_cli(capsys, "stats", path, "--json")
    assert code == 0
    stats = json.loads(out)
    for name, count in expected.packets_by_type.items():
        assert stats["packets"][name] == count, name
    assert stats["kernels"] == expected.kernels
    assert stats["queues"] == expected.queues
    assert stats["packets_total"] == sum(expected.packets_by_type.values())
    # Submissions: 3 single publishes + 1 publish_many on queue 0, 2 publishes on queue 1.
    per_queue = {q["queue"]: q for q in stats["per_queue"]}
    assert per_queue[0]["submissions"] == 3 and per_queue[1]["submissions"] == 2
    assert per_queue[0]["submit_doorbell"]["min_ns"] >= 0
    # Completion records: saxpy (5000 ns) on queue 0, fill (2000 ns) on queue 1.
    kernels = {k["kernel"]: k for k in stats["per_kernel"]}
    assert kernels["saxpy"]["device"]["count"] == 1
    assert kernels["saxpy"]["device"]["total_ns"] == 5000
    assert kernels["fill"]["device"]["mean_ns"] == 2000
    assert stats["unmatched_completions"] == 0


def test_stats_table_names_kernels_and_queues(sample, capsys):
    path, _ = sample
    code, out, _ = run_cli(capsys, "stats", path)
    assert code == 0
    assert "11 packets" in out and "2 queue(s)" in out
    assert "saxpy" in out and "fill" in out and "per queue" in out


def test_show_decodes_kernargs_by_name_with_hidden_args_labelled(sample, capsys):
    path, _ = sample
    code, out, _ = run_cli(capsys, "show", path, "--kernel", "saxpy", "--limit", "1")
    assert code == 0
    assert "a=2.0 (value)" in out and "n=1024 (value)" in out
    assert "x=0x7f0000300000 (buffer)" in out
    assert "[hidden] hidden_block_count_x=16" in out
    assert "[hidden] hidden_group_size_x=64" in out
    assert "1024 / 64" in out  # grid / workgroup
    assert "fill" not in out


def test_show_filters_by_queue_type_and_time(sample, capsys):
    path, _ = sample
    _, out, _ = run_cli(capsys, "show", path, "--queue", "1")
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 and "barrier_and" in out and "fill" in out and "saxpy" not in out
    _, out, _ = run_cli(capsys, "show", path, "--type", "and", "--type", "barrier_or")
    assert "barrier_and" in out and "barrier_or" in out and "kernel_dispatch" not in out
    assert "deps=[0x7f0000200000]" in out
    _, out, _ = run_cli(capsys, "show", path, "--type", "value")
    assert "wait value(0x7f0000200040) LT 1" in out
    _, out, _ = run_cli(capsys, "show", path, "--until", "0us")
    assert out.count("kernel_dispatch") == 1  # only the first packet is at +0
    _, out, _ = run_cli(capsys, "show", path, "--since", "100000s")
    assert "no packets match" in out
    code, _, err = run_cli(capsys, "show", path, "--type", "bogus")
    assert code == 2 and "unknown packet type" in err and len(err.strip().splitlines()) == 1


def test_show_raw_dumps_packet_and_kernarg_bytes(sample, capsys):
    path, _ = sample
    code, out, _ = run_cli(capsys, "show", path, "--raw", "--limit", "1")
    assert code == 0
    first = packets.read_trace(path)
    rec = next(r for r in first if isinstance(r, packets.trace.PacketRecord))
    word0 = rec.raw[:4].hex()
    assert f"0000: {word0}" in out
    assert "kernarg (40 bytes):" in out
    assert rec.kernarg[16:20].hex() in out  # a = 2.0f


def test_diff_finds_exactly_the_changed_kernarg(tmp_path, sample, capsys):
    path, _ = sample
    other = tmp_path / "other.aqltrace"
    synth.write_sample(other, a=3.0)
    code, out, _ = run_cli(capsys, "diff", path, other)
    assert code == 1
    changes = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert changes == ["kernarg a: 2.0 -> 3.0"]
    assert "1 differ" in out


def test_diff_of_two_equal_runs_is_empty_and_exit_zero(tmp_path, sample, capsys):
    path, _ = sample
    again = tmp_path / "again.aqltrace"
    synth.write_sample(again)  # other timestamps, same packets
    code, out, _ = run_cli(capsys, "diff", path, again)
    assert code == 0 and "identical" in out


def test_diff_reports_packet_fields_and_extra_packets(tmp_path, capsys):
    a, b = tmp_path / "a.aqltrace", tmp_path / "b.aqltrace"
    synth.write_sample(a, n=1024, chain=3)
    synth.write_sample(b, n=2048, chain=4)
    code, out, _ = run_cli(capsys, "diff", a, b, "--max", "100")
    assert code == 1
    assert "grid_size_x: 1024 -> 2048" in out
    assert "kernarg n: 1024 -> 2048" in out
    assert "kernarg [hidden]" not in out  # hidden args are labelled on their own name
    assert "[hidden]: 16 -> 32" in out  # hidden_block_count_x follows n
    assert "1 packet(s) only in" in out
    code, out, _ = run_cli(capsys, "diff", a, b, "--ignore", "grid_size_x,n,hidden_block_count_x")
    assert "grid_size_x" not in out and "kernarg n:" not in out


def test_perfetto_export_has_a_track_per_queue_and_a_flow_for_the_barrier(
        tmp_path, sample, capsys):
    path, expected = sample
    out_json = tmp_path / "trace.json"
    code, out, _ = run_cli(capsys, "export", "--perfetto", out_json, path)
    assert code == 0 and "2 queue track(s)" in out
    data = json.loads(out_json.read_text())
    events = data["traceEvents"]
    host_tracks = {e["args"]["name"]: e["tid"] for e in events
                   if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 1}
    assert sorted(host_tracks) == ["queue 0", "queue 1"]
    slices = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert {e["tid"] for e in slices} == set(host_tracks.values())
    device = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert sorted(e["name"] for e in device) == ["fill", "saxpy"]
    # The barrier-AND on queue 1 waits on the saxpy dispatch of queue 0: one flow s -> f.
    saxpy = next(e for e in slices if e["name"] == "saxpy")
    barrier = next(e for e in slices if e["name"] == "barrier_and")
    flows = [e for e in events if e["ph"] in ("s", "f") and e["cat"] == "barrier_and"]
    assert len(flows) == 2
    start, finish = sorted(flows, key=lambda e: e["ph"] != "s")
    assert start["id"] == finish["id"]
    assert (start["tid"], start["ts"]) == (saxpy["tid"], saxpy["ts"])
    assert (finish["tid"], finish["ts"]) == (barrier["tid"], barrier["ts"])
    assert start["args"]["signal"] == f"0x{expected.signal:x}"
    cats = {e["cat"] for e in events if e["ph"] == "s"}
    assert cats == {"barrier_and", "barrier_value", "barrier_or"}


def test_graph_dot_has_the_dependency_edges(tmp_path, sample, capsys):
    path, expected = sample
    dot = tmp_path / "g.dot"
    svg = tmp_path / "g.svg"
    code, out, _ = run_cli(capsys, "graph", path, "-o", dot, "--svg", svg)
    assert code == 0
    text = dot.read_text()
    (pq, pid), (wq, wid) = expected.producer, expected.waiter
    assert f'"q{pq}_{pid}" -> "q{wq}_{wid}" [color=blue, label="barrier_and' in text
    assert '"q1_0" -> "q0_1" [color=blue, label="barrier_value' in text
    assert text.count("label=\"barrier_or") == 2  # the barrier-OR waits on two signals
    assert 'subgraph "cluster_q0"' in text and 'subgraph "cluster_q1"' in text
    assert "4 dependency edge(s)" in out
    if shutil.which("dot"):
        assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    else:
        assert "Graphviz 'dot' is not installed" in out and not svg.exists()


def test_show_lists_vulkan_submissions_and_stats_count_them(tmp_path, capsys):
    path = tmp_path / "vk.aqltrace"
    with packets.TraceWriter(path) as w:
        w.vulkan_submission({"queue": 0, "command_buffers": 1, "dispatches": 100})
    code, out, _ = run_cli(capsys, "show", path)
    assert code == 0 and "vulkan_submission" in out and "dispatches=100" in out
    code, out, _ = run_cli(capsys, "stats", path, "--json")
    assert json.loads(out)["other_records"] == {"vulkan_submission": 1}


def test_show_rich_and_plain_formats_hold_the_same_rows(sample, capsys):
    path, _ = sample
    _, plain, _ = run_cli(capsys, "show", path, "--format", "plain")
    _, rich_out, _ = run_cli(capsys, "show", path, "--format", "rich")
    for text in ("a=2.0 (value)", "[hidden] hidden_group_size_x=64", "barrier_or",
                 "deps=[0x7f0000200040, 0x7f0000200000]", "wait value(0x7f0000200040) LT 1"):
        assert text in plain and text in rich_out, text
    assert plain.count("kernel_dispatch") == rich_out.count("kernel_dispatch") == 8
