"""hwlab validation levels: the level-file format and its one-line errors, the shipped files
(every one parses, every threshold names its source, no hardware file claims a measured
hardware figure), the verdicts, and `hwlab run --level 1` on this machine's devices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.hwlab import levels
from tools.hwlab.checks import Measured
from tools.hwlab.level_run import judge, run_level

REPO = Path(__file__).resolve().parents[1]
HARDWARE = ("MI300X", "MI325X", "MI355X", "RX7900XTX", "R9700")


def _file(tmp_path: Path, body: str, model: str = "m") -> Path:
    folder = tmp_path / model
    folder.mkdir(exist_ok=True)
    path = folder / "level_1.conf"
    path.write_text(body)
    return path


HEAD = "model m\nmatch provider=virtual target=gfx1100\n"


@pytest.mark.parametrize("line, says", [
    ("hbm_speed bytes=1MiB bandwidth>=1GB/s source=x", "unknown check 'hbm_speed'"),
    ("hbm_bandwidth bandwidth>=fastGB/s source=x", "malformed threshold 'bandwidth>=fastGB/s'"),
    ("hbm_bandwidth bandwidth>=3PB/s source=x", "malformed threshold 'bandwidth>=3PB/s'"),
    ("hbm_bandwidth bandwidth=3GB/s source=x", "needs >= or <="),
    ("hbm_bandwidth bytes=1MiB source=x", "has no threshold"),
    ("hbm_bandwidth bandwidth>=3GB/s", "has no source="),
    ("gemm dtype=f64 throughput>=1TFLOPS source=x", "dtype='f64' is not one of f32, f16, bf16"),
    ("stress colour=red mismatches<=0 source=x", "has no parameter or metric 'colour'"),
    ('gemm throughput>=1TFLOPS source="unclosed', "unclosed quote"),
])
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path, line, says):
    path = _file(tmp_path, HEAD + "\n# a comment\n" + line + "\n")
    with pytest.raises(levels.LevelFileError) as e:
        levels.load(path)
    text = str(e.value)
    assert text.startswith(f"{path}:5: ") and says in text and "\n" not in text


def test_the_cli_prints_the_one_line_and_exits_2(tmp_path):
    path = _file(tmp_path, HEAD + "gemm dtype=f16 throughput>=lots source=x\n")
    r = subprocess.run([sys.executable, "-m", "tools.hwlab", "levels", str(path)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"hwlab: {path}:3: malformed threshold 'throughput>=lots': "
                                "'lots' is not a number with a unit of flops (GFLOPS, TFLOPS, "
                                "MFLOPS); fix the line")


def test_units_are_normalized():
    assert levels.parse_quantity("5.3TB/s", "bandwidth") == 5300.0
    assert levels.parse_quantity("1GiB", "bytes") == 1 << 30
    assert levels.parse_quantity("2ms", "time") == 2000.0
    assert levels.parse_quantity("523TFLOPS", "flops") == 523000.0


def test_every_shipped_level_file_parses_and_names_its_sources():
    found = levels.models()
    for model in (*HARDWARE, "virtual-gfx1100", "virtual-gfx942", "emulated-gfx90a",
                  "vulkan-lavapipe"):
        assert found.get(model) == [1, 2], model
    for level in (1, 2):
        files = levels.level_files(level)
        assert len(files) == len(found)
        for f in files:
            names = {c.name for c in f.checks}
            assert names >= {"properties", "hbm_bandwidth", "host_bandwidth", "peer_bandwidth",
                             "gemm", "dispatch_latency", "replay_cost", "stress",
                             "transfer_matrix"}, f.path
            assert {c.params.get("dtype") for c in f.checks if c.name == "gemm"} == \
                {"f32", "f16", "bf16"}
            assert {(c.params["mode"], c.params["direction"]) for c in f.checks
                    if c.name == "host_bandwidth"} == {
                ("pinned", "h2d"), ("pinned", "d2h"), ("pageable", "h2d"), ("pageable", "d2h")}
            for c in f.checks:
                assert len(c.source) > 10, c.where


def test_no_hardware_file_claims_a_measured_hardware_figure():
    for level in (1, 2):
        for f in levels.level_files(level):
            sources = " ".join(c.source for c in f.checks).lower()
            if f.model in HARDWARE:
                assert "measured reference" not in sources, f.path
                assert "vendor spec" in sources and "hwlab" in sources
            else:  # virtual, emulated, lavapipe: the machine's own, said so
                assert "measured reference" in sources or "virtual machine's own" in sources
    mi300 = levels.load(levels.LEVEL_DIR / "MI300X" / "level_2.conf")
    fp16 = next(c for c in mi300.checks if c.params.get("dtype") == "f16")
    # RVS rvs/conf/MI300X/levels/rvs_level_3.conf: compute-fp16-trig target_stress 523000
    assert fp16.thresholds[0].value == 523000.0 and "rvs_level_3.conf" in fp16.source


def test_models_match_their_devices():
    by_model = {f.model: f for f in levels.level_files(1)}
    mi300x = {"provider": "rocr", "target": "gfx942", "compute_units": 304, "memory_gib": 191.5}
    mi325x = {**mi300x, "memory_gib": 255.9}
    assert by_model["MI300X"].matches(mi300x) and not by_model["MI325X"].matches(mi300x)
    assert by_model["MI325X"].matches(mi325x) and not by_model["MI300X"].matches(mi325x)
    assert not by_model["MI300X"].matches({**mi300x, "provider": "virtual"})
    assert by_model["vulkan-lavapipe"].matches({"provider": "vulkan", "name": "llvmpipe (LLVM)"})


def test_verdicts_name_the_figure_against_the_threshold(tmp_path):
    f = levels.load(_file(tmp_path, HEAD + 'hbm_bandwidth bandwidth>=3710GB/s source="spec"\n'
                          'stress mismatches<=0 queue_errors<=0 source="hwlab"\n'))
    hbm, stress = f.checks
    assert judge(hbm, Measured({"bandwidth": 4000.0})) == (
        "passed", "pass: bandwidth 4000 GB/s (threshold >= 3710 GB/s)")
    assert judge(hbm, Measured({"bandwidth": 12.5})) == (
        "failed", "FAIL: bandwidth 12.5 GB/s, threshold >= 3710 GB/s")
    assert judge(stress, Measured({"mismatches": 3, "queue_errors": 0}))[1] == \
        "FAIL: mismatches 3, threshold <= 0"


def test_a_level_run_reports_pass_fail_and_skip_per_check(tmp_path):
    from tools.hwlab.inventory import find_device, inventory

    _file(tmp_path, HEAD + (
        'properties target=gfx1100 wavefront=32 source="virtual machine\'s own"\n'
        'dispatch_latency repeat=3 round_trip<=1ns source="planted: no device is this fast"\n'
        'peer_bandwidth bytes=4KiB bandwidth>=0.0001GB/s source="no pair named"\n'
        'stress seconds=1 elements=1024 mismatches<=0 queue_errors<=0 source="hwlab"\n'),
        model="virtual-test")
    lab = find_device("vm", "amdgpu:virtual", inventory("vm"))
    report = run_level([lab], 1, root=tmp_path)
    cells = {r.test: r for r in report.results}
    assert cells["level1::properties"].outcome == "passed"
    latency = cells["level1::dispatch_latency"]
    assert latency.outcome == "failed"
    assert latency.message.splitlines()[-1].startswith("FAIL: round_trip ")
    assert latency.message.splitlines()[-1].endswith("threshold <= 0.001 us")
    assert latency.figures["values"]["round_trip"] > 0.001
    assert latency.figures["source"] == "planted: no device is this fast"
    peer = cells["level1::peer_bandwidth"]
    assert peer.outcome == "skipped" and "names no pair=" in peer.message
    stress = cells["level1::stress"]
    assert stress.outcome == "passed" and stress.figures["values"]["dispatches"] >= 4
    assert report.devices[0]["model"] == "m"


def test_a_device_no_level_file_matches_is_a_skipped_row(tmp_path):
    from tools.hwlab.inventory import find_device, inventory

    _file(tmp_path, "model other\nmatch provider=rocr target=gfx942\n"
          "stress mismatches<=0 source=x\n")
    lab = find_device("vm", "amdgpu:virtual", inventory("vm"))
    (cell,) = run_level([lab], 1, root=tmp_path).results
    assert cell.outcome == "skipped" and "no level 1 file matches amdgpu:virtual" in cell.message


@pytest.mark.slow
def test_level_1_passes_on_the_virtual_and_emulated_gpus_and_vulkan(tmp_path):
    out = tmp_path / "l1.json"
    r = subprocess.run([sys.executable, "-m", "tools.hwlab", "run", "--level", "1",
                        "--device", "amdgpu:virtual", "--device", "amdgpu:emulated",
                        "--device", "vulkan", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads(out.read_text())
    outcomes = {(c["device"].split("/", 1)[1], c["test"]): c["outcome"] for c in data["results"]}
    assert outcomes[("amdgpu:virtual", "level1::gemm[bf16]")] == "passed"
    assert outcomes[("amdgpu:virtual", "level1::peer_bandwidth")] == "passed"
    assert outcomes[("vulkan:0", "level1::hbm_bandwidth")] == "passed"
    assert outcomes[("amdgpu:virtual", "level1::transfer_matrix")] == "passed"
    # the real ROCr over the emulated driver: its own level file, every check run
    assert outcomes[("amdgpu:emulated", "level1::stress")] == "passed"
    assert outcomes[("amdgpu:emulated", "level1::peer_bandwidth")] == "passed"
    assert sum(v == "passed" for v in outcomes.values()) >= 38
    assert "failed" not in outcomes.values()


@pytest.mark.parametrize("argv, says", [
    (["run", "--model", "MI300X"], "hwlab: --model goes with --level N"),
    (["run", "--level", "0"], "'0' is not a positive whole number"),
    (["run", "--level", "1", "--suite", "perf"], "hwlab: --level runs the level file's checks"),
    (["run", "--level", "9", "--device", "vulkan"], "hwlab: no level 9 files under "),
    (["run", "--level", "1", "--model", "MI999", "--device", "vulkan"],
     "hwlab: --model MI999: no level file of that model at this level"),
])
def test_level_options_refused_in_one_line(argv, says):
    r = subprocess.run([sys.executable, "-m", "tools.hwlab", *argv], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout[-500:] + r.stderr[-500:]
    assert says in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
