"""hwlab end to end: `devices --json`, a two-device matrix (virtual agent + lavapipe), a
planted failing suite shown as failed in every report format with a non-zero exit, a merge
of two machines' reports, bench rows, and the hardware-class skip reasons."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tools.hwlab.cli import main
from tools.hwlab.inventory import LabDevice
from tools.hwlab.results import LabReport

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_KEYS = {"spec", "backend", "name", "target", "available", "reason", "paths"}

PLANTED = textwrap.dedent("""
    import pytest

    @pytest.mark.generic
    def test_planted_pass(lab_device):
        assert lab_device.spec

    @pytest.mark.generic
    def test_planted_failure(lab_device):
        assert 1 + 1 == 3, "planted failure on " + lab_device.spec

    @pytest.mark.vulkan
    def test_planted_vulkan_only(lab_device):
        assert lab_device.backend == "vulkan"
""")


def _devices_json(capsys) -> list[dict]:
    assert main(["devices", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _vulkan_usable(rows: list[dict]) -> bool:
    return any(r["spec"] == "vulkan:0" and r["available"] for r in rows)


@pytest.mark.generic
def test_devices_json_has_every_backend_and_the_required_keys(capsys):
    rows = _devices_json(capsys)
    assert rows, "no device rows at all"
    for row in rows:
        assert REQUIRED_KEYS <= set(row), row
        assert row["backend"] in ("hsa", "vulkan")
        assert all(isinstance(v, bool) for v in row["paths"].values()), row["paths"]
        assert row["available"] or row["reason"], f"{row['spec']}: unavailable without a reason"
    specs = [r["spec"] for r in rows]
    assert any(s == "amdgpu" or s.startswith("amdgpu:") and "virtual" not in s for s in specs)
    assert "amdgpu:virtual" in specs
    assert any(r["backend"] == "vulkan" for r in rows)
    rocr = next(r for r in rows if r["spec"] == "amdgpu")
    if not rocr["available"]:  # this machine: no /dev/kfd
        assert "hsa_init" in rocr["reason"] or "libhsa" in rocr["reason"], rocr["reason"]


@pytest.mark.generic
def test_devices_table_names_backend_and_paths(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "amdgpu:virtual" in out and "backend available" in out and "optimized paths" in out


@pytest.mark.hsa_virtual
@pytest.mark.vulkan
def test_two_device_matrix(tmp_path, capsys):
    if not _vulkan_usable(_devices_json(capsys)):
        pytest.skip("no usable Vulkan device (lavapipe) here")
    out = tmp_path / "run.json"
    code = main(
        [
            "run",
            "--device",
            "amdgpu:virtual",
            "--device",
            "vulkan:0",
            "-k",
            "identity or buffer_views or timeline_advances or trace_of or hsa_memory_pools",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    report = LabReport.load(out)
    keys = report.device_keys()
    assert len(keys) == 2 and keys[0].endswith("/amdgpu:virtual") and keys[1].endswith("/vulkan:0")
    virt, vk = keys
    cell = report.cell
    for test in (
        "conformance::test_device_identity_matches_the_inventory",
        "conformance::test_buffer_views",
        "conformance::test_timeline_advances_once_per_submission",
    ):
        assert cell(test, virt).outcome == "passed", cell(test, virt).message
        assert cell(test, vk).outcome == "passed", cell(test, vk).message
    assert cell("conformance::test_trace_of_a_dispatch_shows_its_packet", virt).outcome == "passed"
    assert cell("conformance::test_trace_of_a_vulkan_submission", vk).outcome == "passed"
    skipped = cell("conformance::test_hsa_memory_pools", vk)
    assert skipped.outcome == "skipped" and "hsa" in skipped.message
    assert code == 0, [r for r in report.results if r.outcome in ("failed", "error")]
    assert "amdgpu:virtual" in text and "vulkan:0" in text and "passed" in text


@pytest.mark.hsa_virtual
def test_planted_failure_shows_in_every_format(tmp_path):
    suite = tmp_path / "planted_suite.py"
    suite.write_text(PLANTED)
    paths = {k: tmp_path / f"r.{k}" for k in ("json", "xml", "html")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.hwlab",
            "run",
            "--device",
            "amdgpu:virtual",
            "--suite",
            str(suite),
            "--json",
            str(paths["json"]),
            "--junit",
            str(paths["xml"]),
            "--html",
            str(paths["html"]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "FAIL" in proc.stdout and "planted failure on amdgpu:virtual" in proc.stdout

    report = LabReport.load(paths["json"])
    (key,) = report.device_keys()
    assert report.cell("planted_suite::test_planted_failure", key).outcome == "failed"
    assert report.cell("planted_suite::test_planted_pass", key).outcome == "passed"
    skip = report.cell("planted_suite::test_planted_vulkan_only", key)
    assert skip.outcome == "skipped" and "needs vulkan" in skip.message

    suite_el = ET.parse(paths["xml"]).getroot().find("testsuite")
    assert suite_el.get("failures") == "1" and suite_el.get("skipped") == "1"
    failed = [c for c in suite_el if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["planted_suite::test_planted_failure"]
    assert "planted failure" in failed[0].find("failure").get("message")

    page = paths["html"].read_text()
    assert "<td class='failed'>" in page and "planted failure on amdgpu:virtual" in page


@pytest.mark.generic
def test_merge_of_two_machines(tmp_path, capsys):
    def machine_report(name: str, failing: bool) -> Path:
        suite = tmp_path / f"{name}_suite.py"
        suite.write_text(
            "import pytest\n\n@pytest.mark.generic\ndef test_one(lab_device):\n"
            f"    assert {not failing}, 'broken on {name}'\n"
        )
        from tools.hwlab.runner import run

        dev = LabDevice(f"{name}/fake:0", "fake:0", "vulkan", "fake", "vulkan", True, "", {})
        report = run([dev], [str(suite)], show_progress=False)
        report.machines[0]["name"] = name
        for r in report.results:
            r.test = "suite::test_one"
        path = tmp_path / f"{name}.json"
        report.save(path)
        return path

    a, b = machine_report("lab-a", False), machine_report("lab-b", True)
    html = tmp_path / "merged.html"
    code = main(["merge", str(a), str(b), "--html", str(html), "--json", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert code == 1  # lab-b failed
    assert "lab-a/fake:0" in out and "lab-b/fake:0" in out and "broken on lab-b" in out
    merged = LabReport.load(tmp_path / "m.json")
    assert [m["name"] for m in merged.machines] == ["lab-a", "lab-b"]
    assert merged.cell("suite::test_one", "lab-a/fake:0").outcome == "passed"
    assert merged.cell("suite::test_one", "lab-b/fake:0").outcome == "failed"
    page = html.read_text()
    assert "lab-a" in page and "lab-b" in page


@pytest.mark.generic
def test_broken_suite_file_is_an_error_row(tmp_path, capsys):
    suite = tmp_path / "broken_suite.py"
    suite.write_text("def test_x(lab_device):\n    return (\n")
    dev = LabDevice("m/fake:0", "fake:0", "vulkan", "fake", "vulkan", True, "", {})
    from tools.hwlab.runner import run

    report = run([dev], [str(suite)], show_progress=False)
    assert report.failed
    (row,) = report.results
    assert row.outcome == "error" and "SyntaxError" in row.message


@pytest.mark.generic
def test_bad_device_and_no_match_are_one_line_errors(capsys, tmp_path):
    assert main(["run", "--device", "nonsense:7"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwlab: ") and err.count("\n") == 1
    suite = tmp_path / "tiny_suite.py"
    suite.write_text("def test_x(lab_device):\n    pass\n")
    assert main(["run", "--device", "amdgpu:virtual", "--suite", str(suite), "-k", "zzz"]) == 1
    assert "matched" in capsys.readouterr().err


@pytest.mark.generic
@pytest.mark.parametrize("argv, expected", [
    (["run", "--device", "amdgpu:virtual", "-k", "((("], "-k '(((' is not a pytest expression"),
    (["run", "--device", "amdgpu:virtual", "-k", "a and"], "is not a pytest expression"),
    (["bench", "--device", "amdgpu:virtual", "--repeat", "0"], "'0' is not a positive whole"),
    (["bench", "--device", "amdgpu:virtual", "--repeat", "-3"], "'-3' is not a positive"),
])
def test_bad_keyword_and_repeat_are_refused_before_running(capsys, argv, expected):
    """One line, exit 2, nothing run: no pytest traceback, no table of failed rows."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage error
        code = e.code
    assert code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and expected in err and "Traceback" not in err


@pytest.mark.generic
def test_hardware_classes_and_skip_reasons():
    virt = LabDevice(
        "m/amdgpu:virtual",
        "amdgpu:virtual",
        "hsa",
        "gfx1100",
        "gfx1100",
        True,
        "",
        {"executor:gfx11": False},
        {"executor:gfx11": "no ISA executor for gfx11"},
    )
    assert {"generic", "hsa", "hsa_virtual"} <= virt.hardware_classes
    assert "runs_kernels" not in virt.hardware_classes
    assert "isa_gfx11" not in virt.hardware_classes
    assert "no ISA executor for gfx11" in virt.missing_class_reason("runs_kernels")
    virt.paths["executor:gfx11"] = True
    assert {"runs_kernels", "isa_gfx11"} <= virt.hardware_classes
    vk = LabDevice(
        "m/vulkan:0",
        "vulkan:0",
        "vulkan",
        "x",
        "vulkan",
        True,
        "",
        {"bda": False},
        {"bda": "no bufferDeviceAddress feature"},
    )
    assert {"vulkan", "runs_kernels"} <= vk.hardware_classes
    assert "vulkan_bda" not in vk.hardware_classes
    assert "bufferDeviceAddress" in vk.missing_class_reason("vulkan_bda")
    assert "needs hsa_rocr" in vk.missing_class_reason("hsa_rocr")


@pytest.mark.generic
def test_bench_reports_unavailable_devices_and_hip_as_rows():
    from tools.hwlab import bench

    gone = LabDevice("m/amdgpu", "amdgpu", "hsa", "", "", False, "hsa_init: no /dev/kfd", {})
    rows = bench.bench([gone], repeat=1)
    assert all(
        set(r) == {"device", "measure", "value_text", "baseline_text", "ratio_text", "note"}
        for r in rows
    )
    assert rows[0]["value_text"] == "skipped" and "/dev/kfd" in rows[0]["note"]
    hip = rows[-1]
    usable, why = bench.hip_status()
    if not usable:
        assert hip["value_text"] == "skipped" and "amdhip64" in hip["note"]
    assert bench._ratio(10.0, 20.0) == "2.00x faster"
    assert bench._ratio(30.0, 10.0) == "3.00x slower"
    assert bench._ratio(100.0, 50.0, higher_is_better=True) == "2.00x faster"


@pytest.mark.vulkan
def test_bench_on_vulkan_has_iree_baselines(capsys):
    from tools.hwlab import bench
    from tools.hwlab.inventory import inventory

    vk = [d for d in inventory("m") if d.spec == "vulkan:0" and d.available]
    if not vk:
        pytest.skip("no usable Vulkan device (lavapipe) here")
    rows = bench.bench_device(vk[0], repeat=5)
    measures = {r["measure"]: r for r in rows}
    lat = measures["dispatch latency (saxpy, dispatch + wait)"]
    assert lat["value_text"].endswith(" us")
    assert "IREE" in lat["baseline_text"] or "IREE" in lat["note"]
    assert any(m.startswith("replay cost") for m in measures)
    assert any(m.startswith("throughput") for m in measures)


@pytest.mark.generic
def test_console_script():
    script = shutil.which("hwlab") or str(Path(sys.executable).with_name("hwlab"))
    if not Path(script).exists():
        pytest.skip("the hwlab console script is not installed (pip install -e .)")
    proc = subprocess.run(
        [script, "devices", "--json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert REQUIRED_KEYS <= set(json.loads(proc.stdout)[0])
