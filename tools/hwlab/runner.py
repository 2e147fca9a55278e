"""Runs hwlab suites (pytest modules under tools/hwlab/suites) against each selected device,
in-process, and collects one result per (test, device).

A pytest plugin parametrizes every test that takes the `lab_device` fixture over the
selected devices, skips (with the reason) a test whose hardware-class markers the device
does not have, and records outcomes as pytest reports them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from tools.hwlab.inventory import LabDevice
from tools.hwlab.results import CellResult, LabReport, this_machine

SUITES_DIR = Path(__file__).parent / "suites"
SUITES = {"conformance": ["conformance.py"], "perf": ["perf.py"]}
SUITES["all"] = SUITES["conformance"] + SUITES["perf"]
HARDWARE_CLASSES = (
    "generic",
    "hsa_virtual",
    "hsa_rocr",
    "isa_gfx11",
    "isa_gfx12",
    "isa_gfx9",
    "vulkan",
    "vulkan_bda",
)


def suite_files(suite: str) -> list[Path]:
    """A suite name, or the path of a pytest module written against the lab_device fixture."""
    if suite in SUITES:
        return [SUITES_DIR / f for f in SUITES[suite]]
    path = Path(suite)
    if path.is_file():
        return [path]
    raise ValueError(
        f"unknown suite {suite!r}: use conformance, perf, all, or a path to a .py file"
    )


class _Collector:
    def __init__(self, devices: list[LabDevice], progress: Progress | None):
        self.devices = devices
        self.by_key = {d.key: d for d in devices}
        self.names: dict[str, tuple[str, str]] = {}  # nodeid -> (test, device key)
        self.results: dict[str, CellResult] = {}
        self.progress = progress
        self.task = None

    @pytest.hookimpl
    def pytest_generate_tests(self, metafunc):
        if "lab_device" in metafunc.fixturenames:
            metafunc.parametrize(
                "lab_device", self.devices, ids=[d.key for d in self.devices], scope="session"
            )

    @pytest.hookimpl
    def pytest_collection_modifyitems(self, items):
        for item in items:
            dev = item.callspec.params.get("lab_device") if hasattr(item, "callspec") else None
            suite = Path(str(item.fspath)).stem
            self.names[item.nodeid] = (f"{suite}::{item.originalname}", dev.key if dev else "-")
        if self.progress is not None:
            self.task = self.progress.add_task("hwlab", total=len(items))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        dev = item.callspec.params.get("lab_device") if hasattr(item, "callspec") else None
        if dev is None:
            return
        if not dev.available:
            pytest.skip(f"{dev.spec} is not available: {dev.reason}")
        for mark in item.iter_markers():
            if mark.name in HARDWARE_CLASSES and mark.name not in dev.hardware_classes:
                pytest.skip(
                    f"needs {mark.name}; {dev.spec} has {', '.join(sorted(dev.hardware_classes))}"
                )

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        test, device = self.names.get(report.nodeid, (report.nodeid, "-"))
        prev = self.results.get(report.nodeid)
        if report.when == "setup":
            if report.skipped:
                reason = (
                    report.longrepr[2]
                    if isinstance(report.longrepr, tuple)
                    else str(report.longrepr)
                )
                self.results[report.nodeid] = CellResult(
                    test, device, "skipped", report.duration, reason.removeprefix("Skipped: ")
                )
            elif report.failed:
                self.results[report.nodeid] = CellResult(
                    test, device, "error", report.duration, str(report.longrepr)
                )
        elif report.when == "call":
            if report.skipped:
                reason = (
                    report.longrepr[2]
                    if isinstance(report.longrepr, tuple)
                    else str(report.longrepr)
                )
                outcome, message = "skipped", reason.removeprefix("Skipped: ")
            else:
                outcome = "passed" if report.passed else "failed"
                message = "" if report.passed else str(report.longrepr)
            self.results[report.nodeid] = CellResult(
                test, device, outcome, report.duration, message
            )
        elif report.when == "teardown":
            if report.failed and prev is not None and prev.outcome == "passed":
                prev.outcome, prev.message = "error", str(report.longrepr)
            if self.progress is not None and self.task is not None:
                self.progress.advance(self.task)


def run(
    devices: list[LabDevice],
    suites: list[str],
    keyword: str | None = None,
    show_progress: bool = True,
) -> LabReport:
    files = [str(f) for s in suites for f in suite_files(s)]
    args = [
        *files,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "-o",
        "addopts=",
        "--rootdir",
        str(SUITES_DIR),
        "-c",
        str(SUITES_DIR / "pytest.ini"),
    ]
    if keyword:
        args += ["-k", keyword]
    progress = (
        Progress(TextColumn("[bold]hwlab run"), BarColumn(), MofNCompleteColumn())
        if show_progress
        else None
    )
    collector = _Collector(devices, progress)
    if progress is not None:
        with progress:
            code = pytest.main(args, plugins=[collector])
    else:
        code = pytest.main(args, plugins=[collector])
    if code not in (0, 1, 5):  # 2: interrupted, 3: internal error, 4: usage error
        raise RuntimeError(f"the suite could not run (pytest exit {int(code)}): check {files}")
    report = LabReport(
        machines=[this_machine()], devices=[{**d.to_json(), "key": d.key} for d in devices]
    )
    report.results = list(collector.results.values())
    return report
