"""hwlab fleet on a real Slurm: Debian's munge, slurmctld and two slurmd node daemons on
this machine (tools/hwlab/slurm_local.py; .ci/run starts one and exports SLURM_CONF, else
the fixture starts its own and stops it after), a job array through submitit, the nodes'
reports merged; a failing node, a node past the timeout, an unknown partition and a Slurm
that does not answer each give their row / one line and a written report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.hwlab.fleet import FleetRun, NodeOutcome, merged_report, outliers
from tools.hwlab.results import CellResult, LabReport

REPO = Path(__file__).resolve().parents[1]
QUICK_LEVEL = """model fleet-test
match provider=virtual
properties wavefront=32 source="virtual machine's own"
stress seconds=1 elements=1024 mismatches<=0 queue_errors<=0 source="hwlab"
"""


def _answers(conf: str) -> bool:
    try:
        r = subprocess.run(["sinfo", "-h", "-p", "lab", "-o", "%P"], capture_output=True,
                           text=True, timeout=20, env={**os.environ, "SLURM_CONF": conf})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and bool(r.stdout.strip())


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    from tools.hwlab import slurm_local

    conf = os.environ.get("SLURM_CONF")
    if conf and _answers(conf):  # .ci/run's cluster
        yield conf
        return
    folder = tmp_path_factory.mktemp("slurm")
    yield str(slurm_local.start(folder))
    slurm_local.stop(folder)


def _levels(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "levels" / "m"
    folder.mkdir(parents=True)
    (folder / "level_1.conf").write_text(text)
    return folder.parent


def _fleet(slurm_conf: str, tmp_path: Path, level_dir: Path | None, *args: str):
    env = {**os.environ, "SLURM_CONF": slurm_conf, "PYTHONPATH": str(REPO)}
    if level_dir is not None:
        env["HWLAB_LEVEL_DIR"] = str(level_dir)
    out = tmp_path / "fleet.json"
    r = subprocess.run([sys.executable, "-m", "tools.hwlab", "fleet", "--logs",
                        str(tmp_path / "logs"), "--json", str(out), *args], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    return r, json.loads(out.read_text())


@pytest.mark.slow
def test_a_fleet_run_merges_every_node(slurm, tmp_path):
    html = tmp_path / "fleet.html"
    r, report = _fleet(slurm, tmp_path, _levels(tmp_path, QUICK_LEVEL), "--slurm", "lab",
                       "--device", "amdgpu:virtual", "--timeout", "240", "--html", str(html))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    fleet = report["extra"]["fleet"]
    assert fleet["nodes_reported"] == ["lab1", "lab2"] and fleet["missing"] == 0
    cells = {(c["device"], c["test"]): c for c in report["results"]}
    for node in ("lab1", "lab2"):  # the node's name from Slurm is its column
        stress = cells[(f"{node}/amdgpu:virtual", "level1::stress")]
        assert stress["outcome"] == "passed" and stress["figures"]["values"]["dispatches"] > 0
    assert "2 of 2 job(s) reported, from node(s) lab1, lab2" in r.stdout
    assert "<h2>Fleet</h2>" in html.read_text()


@pytest.mark.slow
def test_a_node_that_fails_is_a_row_saying_why(slurm, tmp_path):
    bad = QUICK_LEVEL.replace("mismatches<=0", "mismatches<=none")
    r, report = _fleet(slurm, tmp_path, _levels(tmp_path, bad), "--slurm", "lab",
                       "--device", "amdgpu:virtual", "--timeout", "240")
    assert r.returncode == 1
    rows = [c for c in report["results"] if c["test"] == "fleet::node"]
    assert sorted(c["device"] for c in rows) == ["lab1/-", "lab2/-"]
    for c in rows:
        assert c["outcome"] == "error"
        assert "no report from hwlab run (exit 2)" in c["message"]
        assert "level_1.conf:4: malformed threshold 'mismatches<=none'" in c["message"]
    assert report["extra"]["fleet"]["missing"] == 2


@pytest.mark.slow
def test_a_node_past_the_timeout_is_cancelled_and_reported(slurm, tmp_path):
    slow = QUICK_LEVEL.replace("seconds=1", "seconds=300")
    r, report = _fleet(slurm, tmp_path, _levels(tmp_path, slow), "--slurm", "lab",
                       "--nodes", "1", "--device", "amdgpu:virtual", "--timeout", "6")
    assert r.returncode == 1
    (row,) = report["results"]
    assert row["outcome"] == "error" and "timed out after 6 s (RUNNING)" in row["message"]
    assert row["message"].endswith("; cancelled")
    assert r.stderr.count("\n") == 1 and "timed out after 6 s" in r.stderr
    job = row["message"].split("(job ")[1].split(")")[0].split("_")[0]
    left = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True,
                          text=True, timeout=30, env={**os.environ, "SLURM_CONF": slurm})
    assert left.stdout.strip() == ""


@pytest.mark.slow
def test_unknown_partition_and_unreachable_slurm_are_one_line_each(slurm, tmp_path):
    r, report = _fleet(slurm, tmp_path, None, "--slurm", "nope")
    assert r.returncode == 2
    assert r.stderr == ("hwlab: partition 'nope' does not exist here (sinfo lists: lab); pass "
                        "one of them to --slurm\n")
    assert report["results"][0]["test"] == "fleet::node"
    assert report["extra"]["fleet"]["missing"] == 1
    text = Path(slurm).read_text()
    port = next(ln for ln in text.splitlines() if ln.startswith("SlurmctldPort="))
    dead = tmp_path / "dead.conf"
    dead.write_text(text.replace(port, "SlurmctldPort=1"))  # nothing listens there
    r, report = _fleet(str(dead), tmp_path, None, "--slurm", "lab", "--nodes", "3")
    assert r.returncode == 2
    assert r.stderr.startswith("hwlab: Slurm is not reachable: sinfo: ")
    assert r.stderr.count("\n") == 1
    assert len(report["results"]) == 3 and report["extra"]["fleet"]["missing"] == 3


def _node(name: str, gbps: float, latency_us: float) -> LabReport:
    figures = {"values": {"bandwidth": gbps}, "better": {"bandwidth": "higher"}}
    times = {"values": {"round_trip": latency_us}, "better": {"round_trip": "lower"}}
    key = f"{name}/amdgpu:0"
    return LabReport(machines=[{"name": name}], devices=[{"key": key}], results=[
        CellResult("level1::hbm_bandwidth", key, "passed", 0.0, "", figures),
        CellResult("level1::dispatch_latency", key, "passed", 0.0, "", times)])


def test_outliers_are_flagged_against_the_fleet_median():
    run = FleetRun("lab", 1, 5, [
        NodeOutcome(0, "n1", _node("n1", 4000.0, 10.0)),
        NodeOutcome(1, "n2", _node("n2", 4100.0, 11.0)),
        NodeOutcome(2, "n3", _node("n3", 2000.0, 10.5)),  # half the fleet's bandwidth
        NodeOutcome(3, "n4", _node("n4", 3950.0, 30.0)),  # three times the latency
        NodeOutcome(4, why="job 7_4 left the queue without a result"),
    ])
    report = merged_report(run)
    flagged = {(o["device"], o["metric"]) for o in report.extra["fleet"]["outliers"]}
    assert flagged == {("n3/amdgpu:0", "bandwidth"), ("n4/amdgpu:0", "round_trip")}
    assert report.extra["fleet"]["missing"] == 1
    lost = report.cell("fleet::node", "task4/-")
    assert lost.outcome == "error" and "left the queue without a result" in lost.message
    assert outliers(report, tolerance=0.6) == [o for o in report.extra["fleet"]["outliers"]
                                               if o["ratio"] > 1.6 or o["ratio"] < 0.4]
    again = LabReport.from_json(report.to_json())
    assert again.extra["fleet"]["outliers"] == report.extra["fleet"]["outliers"]
