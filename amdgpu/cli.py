"""amdgpu-run: compile (cached), run, check and time one workload on one device.

    amdgpu-run saxpy --device amdgpu:virtual --json
    amdgpu-run chain-100 --driver vulkan --repeat 20 --replay
    amdgpu-run model.mlir --driver amdgpu --trace run.trace
    amdgpu-run --list

Exit status: 0 when the result is correct, 1 when it is wrong, 2 for bad input or a device
error (one line on stderr: cause and next step; --debug shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

EXIT_WRONG = 1
EXIT_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors as one line (cause + next step) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="amdgpu-run",
        description="Compile, run and check a workload on an AMD GPU (HSA path, opt-in) or "
        "through Vulkan (the default).",
    )
    ap.add_argument("workload", nargs="?", help="a built-in workload (see --list) or a .mlir file")
    ap.add_argument(
        "--device",
        default=None,
        help="amdgpu, amdgpu:N, amdgpu:virtual[:gfx1100,...][:N], vulkan, vulkan:N",
    )
    ap.add_argument(
        "--driver",
        choices=("auto", "amdgpu", "vulkan"),
        default=None,
        help="auto (default: Vulkan; AMDGPU_DRIVER=amdgpu opts in), amdgpu, vulkan",
    )
    ap.add_argument(
        "--size",
        default=None,
        help="problem size where the workload has one: N for chain-N (chain --size 100), "
        "small|default for the models",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs to time (median is reported)")
    ap.add_argument(
        "--replay",
        action="store_true",
        help="also record the program as a command buffer and time its replays",
    )
    ap.add_argument("--trace", metavar="FILE", help="write a packet trace (HSA path)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--list", action="store_true", help="list workloads and devices")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    return ap


class UsageError(ValueError):
    """Bad command-line input; printed as one line without the exception's type name."""


def _workload_name(workload: str, size: str | None) -> str:
    from amdgpu.model_zoo import MODELS

    if workload in MODELS:
        if size is not None and size not in MODELS[workload].sizes:
            raise UsageError(f"--size {size}: {workload} has sizes "
                             f"{', '.join(MODELS[workload].sizes)}")
        return workload
    if size is not None and not (size.isdigit() and int(size) > 0):
        raise UsageError(f"--size {size}: use a positive whole number (chain --size 100)")
    if workload in ("chain", "chain-N") or (workload.startswith("chain") and size):
        return f"chain-{size or 4}"
    if size and not workload.startswith("chain"):
        raise UsageError(f"--size applies to chain-N only, not {workload!r}: leave it out")
    return workload


def run_any(dev: Any, workload: str, size: str | None, **kw: Any) -> Any:
    """A model of the zoo (amdgpu.model_zoo) or any other workload (amdgpu.workloads)."""
    from amdgpu import model_zoo
    from amdgpu.workloads import run_workload

    if model_zoo.is_model(workload):
        return model_zoo.run_model(dev, workload, size=size or "default", **kw)
    return run_workload(dev, workload, **kw)


def _list(out: Any) -> int:
    import amdgpu
    from amdgpu.model_zoo import list_models
    from amdgpu.workloads import list_workloads

    print("workloads:", file=out)
    rows = [*list_workloads(), *list_models()]
    width = max(len(name) for name, _ in rows)
    for name, text in rows:
        print(f"  {name:<{width}} {text}", file=out)
    print("devices:", file=out)
    for r in amdgpu.devices():
        state = "available" if r.available else f"unavailable: {r.reason}"
        paths = ", ".join(f"{k}{'' if c.available else ' (no)'}" for k, c in r.paths.items())
        name = f"{r.name} ({r.target})" if r.name else ""
        print(
            f"  {r.spec:<18} {r.backend:<6} {name} {state}"
            + (f"; paths: {paths}" if paths else ""),
            file=out,
        )
    return 0


def _summary(result: Any, console: Any) -> None:
    from rich.table import Table

    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    verdict = "[green]correct[/green]" if result.correct else "[red]WRONG[/red]"
    rows = [
        ("workload", result.workload),
        ("device", f"{result.device} ({result.target})"),
        ("driver path", f"{result.driver}: {result.path}"),
        ("dispatches", str(result.dispatches)),
        ("result", f"{verdict}, max abs error {result.max_abs_error:.3g}"),
        ("host us / dispatch", f"{result.host_us_per_dispatch:.2f} (median of {result.repeat})"),
    ]
    if result.replay_host_us is not None:
        rows.append(
            ("replay host us", f"{result.replay_host_us:.2f} for {result.dispatches} dispatch(es)")
        )
    if result.device_us is not None:
        rows.append(("device us", f"{result.device_us:.2f}"))
    for k in result.kernel_device or ():
        rows.append(("kernel device us", f"{k['kernel']} x{k['dispatches']}: min "
                     f"{k['min_ns'] / 1e3:.2f} / median {k['median_ns'] / 1e3:.2f} / max "
                     f"{k['max_ns'] / 1e3:.2f}"))
    for k in result.replay_kernel_device or ():
        rows.append(("replay kernel device us", f"{k['kernel']} x{k['dispatches']}: min "
                     f"{k['min_ns'] / 1e3:.2f} / median {k['median_ns'] / 1e3:.2f} / max "
                     f"{k['max_ns'] / 1e3:.2f}"))
    if result.host_device_ratio is not None:
        rows.append(("host / device", f"{result.host_device_ratio:.3f} (host us per dispatch "
                     "/ mean device us per dispatch)"))
    pc = result.per_call
    if pc:
        dev_us = pc["device_us_per_call"]
        rows.append((f"per call ({pc['mode']})",
                     f"{pc['calls']} call(s) of {pc['dispatches_per_call']} dispatches"
                     + (f" ({pc['call']})" if pc.get("call") else "")))
        rows.append(("host us / call", f"{pc['host_us_per_call']:.1f} (median; "
                     f"{pc['host_us_per_dispatch']:.2f} per dispatch)"))
        rows.append(("device us / call", f"{dev_us:.1f} (median)" if dev_us is not None
                     else f"{pc['wall_us_per_call']:.1f} (median, submit to done)"))
        if pc["host_share"] is not None:
            rows.append(("host share", f"{pc['host_share']:.3f} " + (
                "(host / (host + device))" if dev_us is not None else "(host / call)")))
    for note in result.notes:
        rows.append(("", note))
    rows.append(("compile / run s", f"{result.compile_s:.2f} / {result.run_s:.2f}"))
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)


def _drop_empty_trace(path: str, failed: bool) -> None:
    """Remove a trace that holds only its file header after a failed run (nothing was
    submitted, so it records nothing); a trace with packets is kept, failed run or not."""
    import packets

    empty = packets.trace.FILE_HEADER_SIZE + packets.trace.CHECKSUM_RECORD_SIZE
    if failed and os.path.getsize(path) <= empty:
        os.remove(path)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        return _list(sys.stdout)
    if not args.workload:
        print("amdgpu-run: name a workload (amdgpu-run --list shows them)", file=sys.stderr)
        return EXIT_ERROR
    if args.debug:
        os.environ.setdefault("AMDGPU_DEBUG", "1")
    if argv is None:
        _reexec_under_emulated_kernel(args)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("amdgpu-run: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line for the user, the traceback with --debug
        if args.debug:
            raise
        from ground.errors import AmdgpuError

        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        kind = "" if isinstance(e, (AmdgpuError, UsageError)) else f"{type(e).__name__}: "
        print(f"amdgpu-run: {kind}{text}", file=sys.stderr)
        return EXIT_ERROR


def _reexec_under_emulated_kernel(args: argparse.Namespace) -> None:
    """amdgpu:emulated needs the emulated kernel preloaded (scripts/emulated.sh's
    environment): run this command again under it, once."""
    device = str(getattr(args, "device", "") or "")
    if not device.startswith("amdgpu:emulated") or os.environ.get("AMDGPU_EMULATED_REEXEC"):
        return
    from hsa.emulated import build, shim_loaded

    if shim_loaded():
        return
    shim = str(build.ensure_built()[0])
    env = dict(os.environ, AMDGPU_EMULATED_REEXEC="1")
    env["LD_PRELOAD"] = ":".join(p for p in (shim, os.environ.get("LD_PRELOAD", "")) if p)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, sys.argv[0], *sys.argv[1:]], env)


def _run(args: argparse.Namespace) -> int:
    import amdgpu

    workload = _workload_name(args.workload, args.size)
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: use 1 or more")
    sink = None
    if args.trace:
        import packets

        try:
            sink = packets.TraceWriter(args.trace)
        except OSError as e:
            raise UsageError(f"cannot create the trace file {args.trace}: {e.strerror}; "
                             "check its folder exists or choose another --trace path") from None
        packets.set_sink(sink)
    failed = True
    try:
        with amdgpu.open(args.device, driver=args.driver) as dev:
            steps = args.repeat * (2 if args.replay else 1)
            if args.json or steps < 20 or not sys.stderr.isatty():
                result = run_any(dev, workload, args.size, repeat=args.repeat,
                                 replay=args.replay)
            else:
                from rich.progress import Progress

                with Progress(transient=True) as bar:
                    task = bar.add_task(f"{workload} on {dev.spec}", total=steps)
                    result = run_any(
                        dev,
                        workload,
                        args.size,
                        repeat=args.repeat,
                        replay=args.replay,
                        progress=lambda n: bar.advance(task, n),
                    )
        failed = False
    finally:
        if sink is not None:
            import packets

            packets.set_sink(None)
            sink.close()
            _drop_empty_trace(args.trace, failed)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        from rich.console import Console

        _summary(result, Console())
    if not result.correct:
        print(f"amdgpu-run: {workload}: wrong result{_worst_text(result.worst)}",
              file=sys.stderr)
    return 0 if result.correct else EXIT_WRONG


def _worst_text(worst: dict | None) -> str:
    """', worst element: output 0 [1, 2] = 3.5, expected 3.25' (nothing when unknown)."""
    if not worst:
        return ""
    where = f"output {worst['output']}" + (f" {worst['index']}" if worst["index"] is not None
                                           else "")
    return f", worst element: {where} = {worst['got']}, expected {worst['want']}"


if __name__ == "__main__":
    sys.exit(main())
