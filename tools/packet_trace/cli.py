"""packet-trace: record, inspect, compare and export amdgpu-direct packet traces.

packet-trace record -o run.aqltrace -- COMMAND...
packet-trace show FILE [--queue Q] [--kernel NAME] [--type T] [--since T] [--until T]
                       [--limit N] [--raw] [--format auto|rich|plain]
packet-trace stats FILE [--json]
packet-trace diff A B [--ignore FIELD,...] [--ids] [--max N]
packet-trace export [--perfetto OUT.pftrace|OUT.json] [--csv OUT.csv] [--rocpd OUT.db] FILE
packet-trace graph FILE [-o OUT.dot] [--svg OUT.svg] [--limit N]

Exit status: 0 success (diff: identical), 1 diff found differences, 2 a bad trace file or a
usage error (one line on stderr; --debug shows the traceback); record passes on the status
of its command.
"""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

from amdgpu.cli import OneLineParser
from ground.errors import AmdgpuError, TraceFormatError

EXIT_TROUBLE = 2


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty():  # piped or captured: wide enough for the tables, no colour codes
        width = int(os.environ.get("COLUMNS", "160"))
    return Console(file=stream, width=width, highlight=False, soft_wrap=True,
                   no_color=not stream.isatty() or "NO_COLOR" in os.environ)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="packet-trace", description="Record and inspect amdgpu-direct AQL packet traces.")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    p = sub.add_parser("record", help="run a command with AMDGPU_TRACE set")
    p.add_argument("-o", "--output", required=True, help="trace file to write")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")

    p = sub.add_parser("show", help="packets as a table (or hex dumps)")
    p.add_argument("file")
    p.add_argument("--queue", type=int, action="append", help="only this queue id (repeatable)")
    p.add_argument("--kernel", action="append",
                   help="only dispatches of kernels matching this name (glob or substring)")
    p.add_argument("--type", action="append",
                   help="only this packet type: kernel_dispatch, ext_kernel_dispatch, "
                        "barrier_and, barrier_or, barrier_value, agent_dispatch (or dispatch, "
                        "ext, and, or, value, agent)")
    p.add_argument("--since", help="absolute host ns, or a time after the first packet (25us)")
    p.add_argument("--until", help="absolute host ns, or a time after the first packet (1ms)")
    p.add_argument("--limit", type=int, help="at most N packets")
    p.add_argument("--raw", action="store_true", help="hex dumps of packets and kernargs")
    p.add_argument("--format", choices=("auto", "rich", "plain"), default="auto",
                   help="rich tables (default on a terminal) or plain fixed-width text "
                        "(default otherwise; fast for long traces)")

    p = sub.add_parser("stats", help="counts, submit cost, device time")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="JSON on stdout")

    p = sub.add_parser("diff", help="packet-by-packet differences (exit 1 if any)")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--ignore", action="append",
                   help="fields not to compare, comma separated (kernarg_address, "
                        "completion_signal, queue_id, an argument name, ...)")
    p.add_argument("--ids", action="store_true", help="also compare packet ids")
    p.add_argument("--max", type=int, default=50, help="differing packets to print (50)")

    p = sub.add_parser("export", help="Perfetto (protobuf or JSON) trace, rocprofv3-style "
                       "CSV or rocpd database")
    p.add_argument("--perfetto", metavar="OUT",
                   help="OUT.pftrace: Perfetto protobuf; any other name (OUT.json): Chrome JSON")
    p.add_argument("--csv", metavar="OUT.csv",
                   help="one row per kernel dispatch, rocprofv3 kernel_trace.csv columns")
    p.add_argument("--rocpd", metavar="OUT.db",
                   help="rocprofv3's rocpd SQLite database (its kernel dispatch, agent, queue "
                        "and string tables)")
    p.add_argument("file")

    p = sub.add_parser("graph", help="dependency graph as DOT (and SVG)")
    p.add_argument("file")
    p.add_argument("-o", "--output", metavar="OUT.dot", help="DOT file (default FILE.dot)")
    p.add_argument("--svg", metavar="OUT.svg", help="also render SVG with Graphviz dot")
    p.add_argument("--limit", type=int, help="at most N packets")
    return parser


def _handler(name: str):
    if name == "record":
        from .record import run
    elif name == "show":
        from .show import run
    elif name == "stats":
        from .stats import run
    elif name == "diff":
        from .diff import run
    elif name == "export":
        from .perfetto import run
    else:
        from .graph import run
    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = _handler(args.command_name)
    console = _console(stderr=args.command_name == "record")
    try:
        return run(args, console)
    except TraceFormatError as e:
        if args.debug:
            raise
        sys.stdout.flush()
        print(f"packet-trace: {e}", file=sys.stderr)
        return EXIT_TROUBLE
    except (AmdgpuError, OSError) as e:
        if args.debug:
            raise
        if isinstance(e, BrokenPipeError):  # `packet-trace show big | head`
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes
            return 0
        text = (str(e) if isinstance(e, AmdgpuError)
                else f"{e.strerror or e}: {e.filename}; check the path")
        print(f"packet-trace: {text}", file=sys.stderr)
        return EXIT_TROUBLE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
