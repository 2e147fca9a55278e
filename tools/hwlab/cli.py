"""hwlab: the hardware-lab test runner.

hwlab devices [--json]
hwlab run [--device SPEC ...] [--suite conformance|perf|transfers|all|FILE] [-k EXPR]
          [--json F] [--junit F] [--html F]
hwlab run --level N [--model NAME] [--device SPEC ...] [--json F] [--junit F] [--html F]
hwlab levels [FILE ...]
hwlab merge A.json B.json ... [--json F] [--junit F] [--html F]
hwlab fleet --slurm PARTITION [--nodes N] [--level N] [--json F] [--html F]
hwlab bench [--device SPEC ...] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from amdgpu.cli import OneLineParser
from ground.errors import AmdgpuError


def machine_name() -> str:
    """The machine's name in reports: HWLAB_MACHINE, else Slurm's node name, else the host."""
    return (os.environ.get("HWLAB_MACHINE") or os.environ.get("SLURMD_NODENAME")
            or socket.gethostname())


def _inventory(specs: list[str] | None):
    """The selected devices (every device when none is named), in the order given."""
    from tools.hwlab.inventory import find_device, inventory

    machine = machine_name()
    devices = inventory(machine)
    if specs:
        chosen: list[Any] = []
        for spec in specs:
            dev = find_device(machine, spec, devices)
            if dev.key not in {d.key for d in chosen}:
                chosen.append(dev)
        devices = chosen
    return devices


def cmd_devices(args) -> int:
    devices = _inventory(None)
    if args.json:
        print(json.dumps([d.to_json() for d in devices], indent=2))
        return 0
    console = Console()
    table = Table(title="hwlab devices", show_lines=True)
    table.add_column("device", overflow="fold", ratio=2)
    table.add_column("backend available", overflow="fold", ratio=3)
    table.add_column("optimized paths", overflow="fold", ratio=4)
    table.add_column("memory pools and links", overflow="fold", ratio=4)
    for d in devices:
        ident = (
            f"[bold]{escape(d.spec)}[/]\n{d.backend}: {escape(d.name or '-')}\n"
            f"target {escape(d.target or '-')}"
        )
        ident += "".join(f"\n{k} {escape(str(v))}" for k, v in d.versions.items())
        avail = "[green]yes[/]" if d.available else f"[red]no[/]: {escape(d.reason)}"
        if d.available:
            avail += "\nclasses: " + ", ".join(sorted(d.hardware_classes))
        paths = "\n".join(
            f"[green]{k}: yes[/]"
            if ok
            else f"[yellow]{k}: no[/] ({escape(d.path_reasons.get(k, ''))})"
            for k, ok in d.paths.items()
        )
        if paths and not d.available:
            paths = "[dim]the library offers (no device to use them):[/]\n" + paths
        table.add_row(ident, avail, paths or "-", escape(_topology_text(d.topology)) or "-")
    console.print(table)
    return 0


def _topology_text(topo: dict) -> str:
    """An HSA agent's UUID, pools and links (hops, type, NUMA distance) in a few lines."""
    if not topo:
        return ""
    lines = [f"{topo.get('uuid') or '-'} (node {topo.get('node', '?')})"]
    for pool in topo.get("pools", []):
        size = pool["bytes"]
        text = f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 10} KiB"
        lines.append(f"pool {pool['kind']} {text}" + ("" if pool["alloc"] else " (no alloc)"))
    for link in topo.get("links", []):
        lines.append(
            f"-> {link['to']}: {link['type']} {link['hops']} hop(s), NUMA {link['numa_distance']},"
            f" {link['access'].replace('_', ' ')}"
        )
    return "\n".join(lines)


def _write_reports(report, args, console: Console, matrices: bool = True) -> None:
    from tools.hwlab import render

    render.terminal(report, console)
    if matrices:  # a fleet's are in its HTML report
        render.matrix_terminal(report, console)
    if args.json:
        report.save(args.json)
        console.print(f"JSON report: {args.json}")
    if args.junit:
        render.junit_xml(report, args.junit)
        console.print(f"JUnit XML: {args.junit}")
    if args.html:
        render.html_report(report, args.html)
        console.print(f"HTML report: {args.html}")


def _check_outputs(args) -> None:
    """Fail before the (long) run, not after it, when a report file cannot be written."""
    for option in ("json", "junit", "html"):
        path = getattr(args, option, None)
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"--{option} {path}: its folder does not exist; create it or "
                             "choose another path")


def _check_keyword(expr: str | None) -> None:
    """A -k expression pytest cannot parse, refused before anything runs (pytest would print
    its own usage error and exit 4)."""
    if expr is None:
        return
    from _pytest.mark.expression import Expression

    try:
        Expression.compile(expr)
    except SyntaxError as e:
        why = getattr(e, "msg", None) or str(e)
        column = f" at column {e.offset}" if getattr(e, "offset", None) else ""
        raise ValueError(f"-k {expr!r} is not a pytest expression{column} ({why}); use names "
                         "joined by and/or/not, e.g. -k 'saxpy and not vulkan'") from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number "
                                         "(e.g. --repeat 200, --level 1)")
    return value


def cmd_run(args) -> int:
    from tools.hwlab.runner import run

    _check_outputs(args)
    if args.level is not None:
        return _run_level(args)
    if args.model:
        raise ValueError("--model goes with --level N (it picks that model's level file)")
    _check_keyword(args.k)
    devices = _inventory(args.device)
    suites = args.suite or ["conformance"]
    progress_console = Console(stderr=True)
    report = run(
        devices,
        suites,
        args.k,
        show_progress=progress_console.is_terminal,
        console=progress_console,
    )
    _write_reports(report, args, Console())
    if not report.results:
        print(f"hwlab: no test of {', '.join(suites)} matched -k {args.k!r}", file=sys.stderr)
        return 1
    return 1 if report.failed else 0


def _run_level(args) -> int:
    from tools.hwlab.level_run import run_level

    if args.suite or args.k:
        raise ValueError("--level runs the level file's checks; drop --suite and -k")
    progress = Console(stderr=True)
    report = run_level(_inventory(args.device), args.level, args.model,
                       console=progress if progress.is_terminal else None)
    _write_reports(report, args, Console())
    return 1 if report.failed else 0


LEVELS_DOC = "docs/HWLAB.md, Validation levels"


def cmd_levels(args) -> int:
    """Every model's level files (each one parsed: a bad line is named), or the named files."""
    from tools.hwlab import levels

    if args.files:
        for path in args.files:
            f = levels.load(path)
            print(f"{path}: model {f.model}, {len(f.checks)} check(s), fine")
        return 0
    console = Console()
    table = Table(title="hwlab levels")
    for col in ("model", "levels", "match", "checks (level 1)", "level file"):
        table.add_column(col, overflow="fold")
    for model, numbers in levels.models().items():
        first = levels.load(levels.LEVEL_DIR / model / f"level_{numbers[0]}.conf")
        table.add_row(model, ", ".join(map(str, numbers)),
                      " ".join(t.text for t in first.match), str(len(first.checks)),
                      f"{model}/level_{numbers[0]}.conf")
    console.print(table)
    console.print(f"checks: {', '.join(levels.CHECKS)} (every model's files name their "
                  f"thresholds' sources; {LEVELS_DOC})", highlight=False)
    return 0


def cmd_merge(args) -> int:
    from tools.hwlab.results import LabReport, merge

    _check_outputs(args)
    report = merge([LabReport.load(p) for p in args.reports])
    _write_reports(report, args, Console())
    return 1 if report.failed else 0


def cmd_fleet(args) -> int:
    """Partial reports are written whatever happens: a Slurm that does not answer, an unknown
    partition, nodes that fail or time out are rows and one line each, not a lost report."""
    from pathlib import Path

    from tools.hwlab import fleet

    _check_outputs(args)
    console = Console()
    run = fleet.FleetRun(args.slurm, args.level, args.nodes or 0)
    status = 0
    try:
        nodes = fleet.partition_nodes(args.slurm)
        run.requested = args.nodes or len(nodes)
        run = fleet.submit_and_collect(args.slurm, run.requested, args.level, args.device or [],
                                       Path(args.logs), args.timeout)
    except fleet.FleetError as e:
        run.problems.append(str(e))
        run.requested = run.requested or 1
        run.outcomes = [fleet.NodeOutcome(i, why=str(e)) for i in range(run.requested)]
        status = 2
    report = fleet.merged_report(run, args.tolerance)
    _write_reports(report, args, console, matrices=False)
    from tools.hwlab import render

    render.fleet_terminal(report, console)
    for line in run.problems:
        print(f"hwlab: {line}", file=sys.stderr)
    if status:
        return status
    return 1 if report.failed or report.extra["fleet"]["missing"] else 0


def cmd_bench(args) -> int:
    from tools.hwlab.bench import bench

    _check_outputs(args)
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
            *(
                escape(str(r.get(k, "")))
                for k in ("device", "measure", "value_text", "baseline_text", "ratio_text", "note")
            )
        )
    console = Console()
    console.print(table)
    console.print(
        "ratio: our figure against the baseline (faster = less time, or more dispatches per "
        "second). Baselines: IREE's runtime on the same device (vulkan driver) or on the CPU "
        "(local-task) for HSA devices; HIP through hip-python where libamdhip64 exists."
    )
    return 1 if any(r.get("value_text") == "failed" for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="hwlab", description="Validate GPU + driver combinations.")
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
        help="conformance (default), perf, transfers (-k bandwidth, -k overlap), all, or a "
        "path to a suite file",
    )
    r.add_argument("-k", metavar="EXPR", help="only tests matching this pytest expression")
    r.add_argument("--level", type=_positive, metavar="N",
                   help="run validation level N (tools/hwlab/levels/<MODEL>/level_N.conf)")
    r.add_argument("--model", metavar="NAME", help="with --level: this model's file, not the "
                   "one whose match fits the device")
    outputs(r)
    r.set_defaults(fn=cmd_run)

    lv = sub.add_parser("levels", help="the models and levels there are; check level files")
    lv.add_argument("files", nargs="*", metavar="FILE")
    lv.set_defaults(fn=cmd_levels)

    m = sub.add_parser("merge", help="one matrix from several machines' JSON reports")
    m.add_argument("reports", nargs="+", metavar="REPORT.json")
    outputs(m)
    m.set_defaults(fn=cmd_merge)

    f = sub.add_parser("fleet", help="run a level on every node of a Slurm partition and "
                       "merge the reports")
    f.add_argument("--slurm", required=True, metavar="PARTITION")
    f.add_argument("--nodes", type=_positive, metavar="N", help="array size (default: the "
                   "partition's node count)")
    f.add_argument("--level", type=_positive, default=1, metavar="N")
    f.add_argument("--device", action="append", metavar="SPEC", help="devices on each node "
                   "(default: every device hwlab finds there)")
    f.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="seconds to wait for the nodes (default 1800); late ones are cancelled")
    f.add_argument("--tolerance", type=float, default=0.2, help="flag figures worse than the "
                   "fleet median by more than this fraction (default 0.2)")
    f.add_argument("--logs", default="hwlab-fleet-logs", metavar="DIR",
                   help="submitit's folder for the jobs' pickles and logs (shared by the nodes)")
    outputs(f)
    f.set_defaults(fn=cmd_fleet)

    b = sub.add_parser("bench", help="dispatch latency, replay cost and throughput per device")
    b.add_argument("--device", action="append", metavar="SPEC")
    b.add_argument("--repeat", type=_positive, default=200)
    b.add_argument("--json", metavar="F")
    b.set_defaults(fn=cmd_bench)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (AmdgpuError, ValueError, OSError) as e:
        if args.debug:
            raise
        text = f"{e.strerror or e}: {e.filename}; check the path" if isinstance(e, OSError) else e
        print(f"hwlab: {text}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
