"""The hwlab report: which tests ran on which device of which machine, and how they ended.

One `LabReport` per `hwlab run`; `merge` folds the reports of several lab machines into one.
The JSON form is the exchange format between machines (`hwlab merge A.json B.json`).
"""

from __future__ import annotations

import json
import platform
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ground.errors import AmdgpuError

REPORT_FORMAT = "hwlab-report"
REPORT_VERSION = 1
OUTCOMES = ("passed", "failed", "error", "skipped")


class ReportError(AmdgpuError):
    """A report file is not an hwlab report, or of an unknown version."""


@dataclass
class CellResult:
    test: str  # suite-qualified test name, "conformance::test_saxpy_immediate"
    device: str  # column key: "machine/spec"
    outcome: str  # one of OUTCOMES
    duration_s: float = 0.0
    message: str = ""  # failure text or skip reason
    # a level check's figures: {"values": {metric: figure}, "thresholds": [text],
    # "units": {metric: unit}, "source", "model", "better": {metric: "higher"|"lower"}, ...}
    figures: dict = field(default_factory=dict)


@dataclass
class LabReport:
    machines: list[dict] = field(default_factory=list)  # {"name", "platform", "python", "time"}
    devices: list[dict] = field(default_factory=list)  # inventory rows, plus "machine", "key"
    results: list[CellResult] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # e.g. "fleet": a fleet run's nodes and outliers

    # --- views ---------------------------------------------------------------------------
    def device_keys(self) -> list[str]:
        return [d["key"] for d in self.devices]

    def test_names(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.results:
            seen.setdefault(r.test, None)
        return list(seen)

    def cell(self, test: str, device: str) -> CellResult | None:
        for r in self.results:
            if r.test == test and r.device == device:
                return r
        return None

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for r in self.results:
            out[r.outcome] += 1
        return out

    @property
    def failed(self) -> bool:
        return any(r.outcome in ("failed", "error") for r in self.results)

    # --- JSON ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "machines": self.machines,
            "devices": self.devices,
            "results": [asdict(r) for r in self.results],
            "summary": self.counts(),
            **({"extra": self.extra} if self.extra else {}),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def from_json(cls, data: dict, source: str = "report") -> LabReport:
        if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
            raise ReportError(f"{source}: not an hwlab report (no 'format: {REPORT_FORMAT}'); "
                              "pass a file written by 'hwlab run --json'")
        if data.get("version") != REPORT_VERSION:
            raise ReportError(
                f"{source}: hwlab report version {data.get('version')!r} is not supported "
                f"(this hwlab reads version {REPORT_VERSION}); re-run with a matching hwlab"
            )
        try:
            results = [CellResult(**r) for r in data["results"]]
            return cls(
                machines=list(data["machines"]), devices=list(data["devices"]), results=results,
                extra=dict(data.get("extra", {})),
            )
        except (KeyError, TypeError) as e:
            raise ReportError(f"{source}: malformed hwlab report ({e})") from None

    @classmethod
    def load(cls, path: str | Path) -> LabReport:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ReportError(f"{path}: no such report file; check the path") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ReportError(
                f"{path}: not JSON ({e}); pass a file written by 'hwlab run --json'"
            ) from None
        return cls.from_json(data, str(path))


def this_machine() -> dict:
    return {
        "name": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def merge(reports: list[LabReport]) -> LabReport:
    """One matrix from several machines' reports. Device keys already carry the machine
    name; two reports from the same machine name keep both by suffixing the later one."""
    merged = LabReport()
    for report in reports:
        renames: dict[str, str] = {}
        for dev in report.devices:
            key = dev["key"]
            new_key = key
            n = 2
            while new_key in merged.device_keys():
                new_key = f"{key}#{n}"
                n += 1
            renames[key] = new_key
            merged.devices.append({**dev, "key": new_key})
        merged.machines.extend(report.machines)
        for r in report.results:
            merged.results.append(
                CellResult(**{**asdict(r), "device": renames.get(r.device, r.device)})
            )
    return merged
