"""hwlab's transfer matrix (TransferBench's spirit): source x destination over host pinned,
host pageable and each GPU's memory, on every executor the device has, each transfer
validated; the HTML report shows it as a heat map per executor."""

from __future__ import annotations

import numpy as np

from tools.hwlab import render
from tools.hwlab.inventory import find_device, inventory
from tools.hwlab.results import CellResult, LabReport
from tools.hwlab.transfer_matrix import Matrix, _Runner, measure


def test_a_two_gpu_virtual_node_fills_every_cell_and_validates_it():
    lab = find_device("vm", "amdgpu:virtual", inventory("vm"))
    m = measure(lab, 64 << 10, repeat=1, pair="amdgpu:virtual:2xgfx1100")
    assert m.endpoints == ["host pinned", "host pageable", "gpu0", "gpu1"]
    got = {(c["src"], c["dst"], c["executor"]) for c in m.cells}
    for gpu in ("gpu0", "gpu1"):
        assert {("host pageable", gpu, "staged"), (gpu, "host pageable", "staged"),
                ("host pinned", gpu, "dma"), (gpu, "host pinned", "dma"),
                ("host pinned", gpu, "kernel"), (gpu, "host pinned", "kernel"),
                (gpu, gpu, "dma"), (gpu, gpu, "kernel")} <= got
    assert ("gpu0", "gpu1", "dma") in got and ("gpu1", "gpu0", "dma") in got
    assert len(m.cells) == 18 and m.mismatches == 0
    assert all(c["gbps"] > 0 and c["bad"] == 0 for c in m.cells)
    assert m.min_bandwidth() == min(c["gbps"] for c in m.cells)


def test_a_wrong_byte_is_counted():
    r = _Runner({}, 4096, 1)
    m = Matrix(["host pinned", "gpu0"], 4096)
    wrong = r.data.copy()
    wrong[100] ^= 0xFF
    r.cell(m, "host pinned", "gpu0", "dma", lambda: None, lambda: wrong)
    assert m.mismatches == 1 and m.cells[0]["bad"] == 1


def test_the_html_report_has_a_heat_map_per_executor(tmp_path):
    m = Matrix(["host pinned", "host pageable", "gpu0"], 1 << 20, [
        {"src": "host pinned", "dst": "gpu0", "executor": "dma", "gbps": 40.0, "bad": 0},
        {"src": "gpu0", "dst": "host pinned", "executor": "dma", "gbps": 10.0, "bad": 0},
        {"src": "gpu0", "dst": "gpu0", "executor": "kernel", "gbps": 900.0, "bad": 0},
    ])
    report = LabReport(devices=[{"key": "n1/amdgpu:0"}], results=[CellResult(
        "level1::transfer_matrix", "n1/amdgpu:0", "passed", 0.0, "",
        {"matrix": m.to_json()})])
    path = tmp_path / "r.html"
    render.html_report(report, path)
    text = path.read_text()
    assert text.count("<table class='heat'>") == 2  # dma, kernel
    assert "<h3>dma</h3>" in text and "<h3>kernel</h3>" in text
    # the best figure of a table is the deepest green, a quarter of it paler
    assert "background:rgb(75,195,75)'>40</td>" in text
    assert "background:rgb(210,240,210)'>10</td>" in text
    assert np.isclose(m.min_bandwidth(), 10.0)
