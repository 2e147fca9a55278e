"""Runs hwlab suites (pytest modules under tools/hwlab/suites) against each selected device,
in-process, and collects one result per (test, device).

A pytest plugin parametrizes every test that takes the `lab_device` fixture over the
selected devices, skips (with the reason) a test whose hardware-class markers the device
does not have, and records outcomes as pytest reports them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from ground.errors import AmdgpuError
from tools.hwlab import fixtures
from tools.hwlab.inventory import HARDWARE_CLASSES, LabDevice
from tools.hwlab.results import CellResult, LabReport, this_machine

SUITES_DIR = Path(__file__).parent / "suites"
#: The conformance suite is the test suite's own (`make test` runs it on this machine's
#: devices); perf is hwlab's.
CONFORMANCE = Path(__file__).resolve().parents[2] / "tests" / "test_device_conformance.py"
SUITES = {"conformance": [str(CONFORMANCE)], "perf": [str(SUITES_DIR / "perf.py")],
          "transfers": [str(SUITES_DIR / "transfers.py")]}
SUITES["all"] = SUITES["conformance"] + SUITES["perf"] + SUITES["transfers"]


def suite_files(suite: str) -> list[Path]:
    """A suite name, or the path of a pytest module written against the lab_device fixture."""
    if suite in SUITES:
        return [Path(f) for f in SUITES[suite]]
    path = Path(suite)
    if path.is_file():
        return [path]
    if path.suffix == ".py" or "/" in suite:
        raise ValueError(f"suite file {suite} does not exist: check the path")
    raise ValueError(
        f"unknown suite {suite!r}: use conformance, perf, all, or a path to a .py file"
    )


def cell_name(item, dev: LabDevice | None) -> str:
    """A test's name in reports, "suite::test[params]": without the lab_device parameter."""
    path = Path(str(item.fspath)).resolve()
    suite = "conformance" if path == CONFORMANCE else path.stem
    name = getattr(item, "originalname", None) or item.name
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return f"{suite}::{name}"
    ident = callspec.id
    if dev is not None:
        key = dev.key
        if ident == key:
            ident = ""
        elif ident.startswith(key + "-"):
            ident = ident[len(key) + 1 :]
        elif ident.endswith("-" + key):
            ident = ident[: -len(key) - 1]
        else:
            ident = ident.replace(f"-{key}-", "-")
    return f"{suite}::{name}[{ident}]" if ident else f"{suite}::{name}"


def _definition_order(item) -> tuple:
    """(file, line, parameter indices): tests listed as their suite defines them, not in
    the order pytest runs them (it groups parametrized tests by parameter)."""
    callspec = getattr(item, "callspec", None)
    indices = (
        tuple(v for k, v in sorted(callspec.indices.items()) if k != "lab_device")
        if callspec is not None
        else ()
    )
    path, line, _ = item.location
    return (str(path), line or 0, indices)


def figures(report) -> str:
    """What a passing test recorded with `record_property` (perf figures), one per line."""
    return "\n".join(f"{k}: {v}" for k, v in getattr(report, "user_properties", []))


class _Collector:
    def __init__(self, devices: list[LabDevice], progress: Progress | None):
        self.devices = devices
        self.by_key = {d.key: d for d in devices}
        self.names: dict[str, tuple[str, str]] = {}  # nodeid -> (test, device key)
        self.results: dict[str, CellResult] = {}
        self.order: dict[str, tuple] = {}  # test name -> where it is defined
        self.progress = progress
        self.task: TaskID | None = None  # the progress bar's task, once collected

    @pytest.hookimpl
    def pytest_configure(self, config):
        config.hwlab_runner = True  # tests/conftest.py leaves lab_device to us

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
            self.names[item.nodeid] = (cell_name(item, dev), dev.key if dev else "-")
            self.order.setdefault(self.names[item.nodeid][0], _definition_order(item))

    @pytest.hookimpl
    def pytest_collection_finish(self, session):
        if self.progress is not None:  # after -k deselection
            self.task = self.progress.add_task("hwlab", total=len(session.items), current="")

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid, location):
        if self.progress is not None and self.task is not None:
            test, device = self.names.get(nodeid, (nodeid, "-"))
            self.progress.update(self.task, current=f"{test} on {device}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        dev = item.callspec.params.get("lab_device") if hasattr(item, "callspec") else None
        if dev is None:
            return
        if not dev.available:
            pytest.skip(f"{dev.spec} is not available: {dev.reason}")
        for mark in item.iter_markers():
            if mark.name in HARDWARE_CLASSES and mark.name not in dev.hardware_classes:
                pytest.skip(dev.missing_class_reason(mark.name))

    @pytest.hookimpl
    def pytest_collectreport(self, report):
        if report.failed:  # a suite file that does not import: one error row, not silence
            name = f"{Path(report.nodeid.split('::')[0]).stem or 'suite'}::<collection>"
            for key in [d.key for d in self.devices] or ["-"]:
                self.results[f"{report.nodeid}@{key}"] = CellResult(
                    name, key, "error", 0.0, str(report.longrepr)
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
                message = figures(report) if report.passed else str(report.longrepr)
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
    console=None,
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
        "--import-mode=importlib",  # suite files of the same name in different folders
        "--rootdir",
        str(SUITES_DIR),
        "-c",
        str(SUITES_DIR / "pytest.ini"),
    ]
    if keyword:
        args += ["-k", keyword]
    progress = (
        Progress(
            TextColumn("[bold]hwlab run"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[current]}"),
            console=console,
            transient=False,
        )
        if show_progress
        else None
    )
    collector = _Collector(devices, progress)
    if progress is not None:
        with progress:
            code = pytest.main(args, plugins=[collector, fixtures])
    else:
        code = pytest.main(args, plugins=[collector, fixtures])
    if code not in (0, 1, 5) and not collector.results:  # 2, 3, 4 with nothing to show
        raise AmdgpuError(f"the suite could not run (pytest exit {int(code)}): check {files}")
    report = LabReport(
        machines=[this_machine()], devices=[{**d.to_json(), "key": d.key} for d in devices]
    )
    last = (chr(0x10FFFF), 0, ())
    report.results = sorted(
        collector.results.values(), key=lambda r: collector.order.get(r.test, last)
    )
    return report
