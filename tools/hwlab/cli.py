"""hwlab: the hardware-lab test runner.

hwlab devices [--json]
hwlab run [--device SPEC ...] [--suite conformance|perf|all|FILE] [-k EXPR]
          [--json F] [--junit F] [--html F]
hwlab merge A.json B.json ... [--json F] [--junit F] [--html F]
hwlab bench [--device SPEC ...] [--json F]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

from rich.console import Console
from rich.table import Table

from amdgpu.errors import AmdgpuError


def _inventory(specs: list[str] | None):
    from tools.hwlab.inventory import inventory

    devices = inventory(socket.gethostname())
    if specs:
        known = {d.spec: d for d in devices}
        unknown = [s for s in specs if s not in known]
        if unknown:
            raise AmdgpuError(
                f"no such device: {', '.join(unknown)}; 'hwlab devices' lists: " + ", ".join(known)
            )
        devices = [known[s] for s in specs]
    return devices


def cmd_devices(args) -> int:
    devices = _inventory(None)
    if args.json:
        print(json.dumps([d.to_json() for d in devices], indent=2))
        return 0
    table = Table(title="hwlab devices")
    for col in (
        "spec",
        "backend",
        "name",
        "target",
        "backend available",
        "optimized paths",
        "versions",
    ):
        table.add_column(col, overflow="fold")
    for d in devices:
        avail = "[green]yes[/]" if d.available else f"[red]no[/]: {d.reason}"
        paths = "\n".join(
            f"[green]{k}[/]" if ok else f"[yellow]{k}: no[/] ({d.path_reasons.get(k, '')})"
            for k, ok in d.paths.items()
        )
        versions = ", ".join(f"{k} {v}" for k, v in d.versions.items())
        table.add_row(d.spec, d.backend, d.name, d.target, avail, paths, versions)
    Console().print(table)
    return 0


def _write_reports(report, args, console: Console) -> None:
    from tools.hwlab import render

    render.terminal(report, console)
    if args.json:
        report.save(args.json)
        console.print(f"JSON report: {args.json}")
    if args.junit:
        render.junit_xml(report, args.junit)
        console.print(f"JUnit XML: {args.junit}")
    if args.html:
        render.html_report(report, args.html)
        console.print(f"HTML report: {args.html}")


def cmd_run(args) -> int:
    from tools.hwlab.runner import run

    devices = _inventory(args.device)
    report = run(devices, args.suite or ["conformance"], args.k, show_progress=sys.stderr.isatty())
    _write_reports(report, args, Console())
    return 1 if report.failed else 0


def cmd_merge(args) -> int:
    from tools.hwlab.results import LabReport, merge

    report = merge([LabReport.load(p) for p in args.reports])
    _write_reports(report, args, Console())
    return 1 if report.failed else 0


def cmd_bench(args) -> int:
    from tools.hwlab.bench import bench

    devices = _inventory(args.device)
    rows = bench(devices, repeat=args.repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    table = Table(title="hwlab bench")
    for col in ("device", "measure", "value", "baseline", "ratio", "note"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["device"],
            r["measure"],
            r.get("value_text", ""),
            r.get("baseline_text", ""),
            r.get("ratio_text", ""),
            r.get("note", ""),
        )
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hwlab", description="Validate GPU + driver combinations.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("devices", help="every device with its capabilities")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=cmd_devices)

    def outputs(sp):
        sp.add_argument("--json", metavar="F", help="write the JSON report")
        sp.add_argument("--junit", metavar="F", help="write JUnit XML")
        sp.add_argument("--html", metavar="F", help="write one self-contained HTML file")

    r = sub.add_parser("run", help="run the conformance and performance suites per device")
    r.add_argument("--device", action="append", metavar="SPEC", help="a device spec (repeatable)")
    r.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="conformance (default), perf, all, or a path to a suite file",
    )
    r.add_argument("-k", metavar="EXPR", help="only tests matching this pytest expression")
    outputs(r)
    r.set_defaults(fn=cmd_run)

    m = sub.add_parser("merge", help="one matrix from several machines' JSON reports")
    m.add_argument("reports", nargs="+", metavar="REPORT.json")
    outputs(m)
    m.set_defaults(fn=cmd_merge)

    b = sub.add_parser("bench", help="dispatch latency, replay cost and throughput per device")
    b.add_argument("--device", action="append", metavar="SPEC")
    b.add_argument("--repeat", type=int, default=200)
    b.add_argument("--json", metavar="F")
    b.set_defaults(fn=cmd_bench)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (AmdgpuError, ValueError, OSError) as e:
        if args.debug:
            raise
        print(f"hwlab: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
