"""packet-trace over a gfx1250 trace: extended kernel-dispatch packets (vendor type,
AmdFormat 3) are their own packet type, counted as dispatches, shown with their clusters,
diffed field by field, exported and graphed (dep_signal edges) - rocprofiler's tracer
missed them because it knew only the classic packet."""

from __future__ import annotations

import json

import pytest

from tools.packet_trace import synth
from tools.packet_trace.cli import main

pytestmark = pytest.mark.generic


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt1250") / "gfx1250.aqltrace"
    return path, synth.write_gfx1250_sample(path)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_count_ext_dispatches_as_their_own_type_and_per_kernel(sample, capsys):
    path, expected = sample
    code, out, _ = run_cli(capsys, "stats", path, "--json")
    assert code == 0
    stats = json.loads(out)
    for name, count in expected.packets_by_type.items():
        assert stats["packets"][name] == count, name
    assert stats["kernels"] == expected.kernels  # replayed ones included
    saxpy = next(k for k in stats["per_kernel"] if k["kernel"] == "saxpy")
    assert saxpy["device"]["total_ns"] == 3000  # the completion matched an ext dispatch


def test_show_decodes_clusters_kernargs_and_dep_signal(sample, capsys):
    path, expected = sample
    code, out, _ = run_cli(capsys, "show", path, "--format", "plain", "--type", "ext")
    assert code == 0
    assert "barrier_and" not in out
    lines = [ln for ln in out.splitlines() if "ext_kernel_dispatch" in ln]
    assert len(lines) == 8
    assert "1024 / 64" in out and "clusters 8 of 2 workgroups" in out
    assert "64x64 / 16x16" in out and "clusters 2x2 of 2x2 workgroups" in out
    assert "hidden_block_count_x=16" in out and "n=1024" in out
    assert f"dep_signal=0x{expected.signal:x}" in out


def test_diff_compares_cluster_fields(tmp_path, sample, capsys):
    path, _ = sample
    code, out, _ = run_cli(capsys, "diff", path, path)
    assert code == 0 and "identical" in out
    other = tmp_path / "other.aqltrace"
    synth.write_gfx1250_sample(other, cluster=4)  # the first dispatch's cluster_size_x 2 -> 4
    code, out, _ = run_cli(capsys, "diff", path, other)
    assert code == 1
    assert "ext_kernel_dispatch saxpy" in out and "cluster_size_x: 2 -> 4" in out
    assert "grid_size_x: 1024 -> 2048" in out


def test_graph_has_the_dep_signal_edge_and_export_names_the_kernels(tmp_path, sample, capsys):
    path, expected = sample
    dot = tmp_path / "g.dot"
    code, out, _ = run_cli(capsys, "graph", path, "-o", dot)
    assert code == 0
    text = dot.read_text()
    (pq, pid), (wq, wid) = expected.producer, expected.waiter
    assert (f'"q{pq}_{pid}" -> "q{wq}_{wid}" [color=blue, label="ext_kernel_dispatch '
            f'0x{expected.signal:x}"]') in text
    out_json = tmp_path / "t.json"
    code, out, _ = run_cli(capsys, "export", "--perfetto", out_json, path)
    assert code == 0
    events = json.loads(out_json.read_text())["traceEvents"]
    names = [e["name"] for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert names.count("saxpy") + names.count("fill") >= 2
    assert "ext_kernel_dispatch" not in names  # dispatches are labelled with their kernel
