"""hwlab's report layer: JSON round trip, merge of two machines, and a failing cell shown
as failed in every format (terminal, JSON, JUnit XML, HTML)."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from tools.hwlab import render
from tools.hwlab.results import CellResult, LabReport, ReportError, merge

pytestmark = pytest.mark.generic


def _report(machine: str, failing: bool) -> LabReport:
    devices = [
        {
            "key": f"{machine}/amdgpu:virtual",
            "spec": "amdgpu:virtual",
            "backend": "hsa",
            "name": "gfx1100",
            "target": "gfx1100",
            "available": True,
            "reason": "",
            "paths": {"barrier_value": True},
        },
        {
            "key": f"{machine}/vulkan:0",
            "spec": "vulkan:0",
            "backend": "vulkan",
            "name": "llvmpipe",
            "target": "vulkan",
            "available": True,
            "reason": "",
            "paths": {"bda": True},
        },
    ]
    results = [
        CellResult("conformance::test_saxpy", f"{machine}/amdgpu:virtual", "passed", 0.1),
        CellResult(
            "conformance::test_saxpy",
            f"{machine}/vulkan:0",
            "failed" if failing else "passed",
            0.2,
            "AssertionError: max error 3.0 > 1e-5" if failing else "",
        ),
        CellResult(
            "conformance::test_bda_only",
            f"{machine}/amdgpu:virtual",
            "skipped",
            0.0,
            "needs vulkan_bda",
        ),
    ]
    return LabReport(
        machines=[{"name": machine, "platform": "test", "python": "3.11", "time": "t"}],
        devices=devices,
        results=results,
    )


def test_json_round_trip(tmp_path):
    rep = _report("m1", failing=True)
    rep.save(tmp_path / "r.json")
    back = LabReport.load(tmp_path / "r.json")
    assert back.to_json() == rep.to_json()
    assert back.failed
    assert back.counts() == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}


def test_failed_cell_shows_in_every_format(tmp_path):
    rep = _report("m1", failing=True)
    buf = io.StringIO()
    render.terminal(rep, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "FAIL" in text and "max error 3.0" in text

    render.junit_xml(rep, tmp_path / "r.xml")
    root = ET.parse(tmp_path / "r.xml").getroot()
    vk = [s for s in root if s.get("name") == "m1/vulkan:0"][0]
    assert vk.get("failures") == "1"
    case = vk.find("testcase")
    assert case.find("failure") is not None and "max error" in case.find("failure").get("message")
    hv = [s for s in root if s.get("name") == "m1/amdgpu:virtual"][0]
    assert hv.get("skipped") == "1" and hv.get("failures") == "0"

    render.html_report(rep, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "<td class='failed'>" in page and "max error 3.0" in page
    assert "<script" not in page and "http" not in page.split("<body>")[1]  # self-contained


def test_passing_report_has_no_failure_anywhere(tmp_path):
    rep = _report("m1", failing=False)
    assert not rep.failed
    render.junit_xml(rep, tmp_path / "r.xml")
    root = ET.parse(tmp_path / "r.xml").getroot()
    assert all(s.get("failures") == "0" and s.get("errors") == "0" for s in root)
    render.html_report(rep, tmp_path / "r.html")
    assert "class='failed'" not in (tmp_path / "r.html").read_text()


def test_merge_shows_both_machines(tmp_path):
    a, b = _report("lab-a", failing=False), _report("lab-b", failing=True)
    a.save(tmp_path / "a.json")
    b.save(tmp_path / "b.json")
    merged = merge([LabReport.load(tmp_path / "a.json"), LabReport.load(tmp_path / "b.json")])
    assert [m["name"] for m in merged.machines] == ["lab-a", "lab-b"]
    assert set(merged.device_keys()) == {
        "lab-a/amdgpu:virtual",
        "lab-a/vulkan:0",
        "lab-b/amdgpu:virtual",
        "lab-b/vulkan:0",
    }
    assert merged.cell("conformance::test_saxpy", "lab-b/vulkan:0").outcome == "failed"
    assert merged.cell("conformance::test_saxpy", "lab-a/vulkan:0").outcome == "passed"
    assert merged.failed


def test_merge_of_same_machine_keeps_both_columns():
    merged = merge([_report("m", False), _report("m", True)])
    assert len(merged.device_keys()) == 4
    assert "m/vulkan:0#2" in merged.device_keys()
    assert merged.cell("conformance::test_saxpy", "m/vulkan:0#2").outcome == "failed"


@pytest.mark.parametrize(
    "content, needle",
    [
        ("not json", "not JSON"),
        (json.dumps({"format": "other"}), "not an hwlab report"),
        (json.dumps({"format": "hwlab-report", "version": 99}), "version 99"),
        (json.dumps({"format": "hwlab-report", "version": 1, "machines": []}), "malformed"),
    ],
)
def test_bad_report_files(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ReportError, match=needle):
        LabReport.load(p)
