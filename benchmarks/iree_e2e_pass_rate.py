"""IREE's own end-to-end tests through our driver: pass rate per device.

    git -C MIRROR archive HEAD tests/e2e | tar -x -C /tmp/iree-src   # IREE's sources, kept out
    .venv/bin/python benchmarks/iree_e2e_pass_rate.py /tmp/iree-src/tests/e2e \
        [--devices amdgpu:virtual,vulkan,amdgpu:virtual:gfx942] [--jobs 2] [--timeout 300]

Each test function of IREE's e2e files (`func.func @t() { ...; check.expect_*(%actual, ...);
return }`) becomes a program of its own: the `check.expect_*` ops are removed and the values
they check are returned instead (`func.func @t() -> (...)`), so the program's results are
exactly what IREE's test checks. IREE's CPU backend (llvm-cpu, local-task) runs each program
for the reference; a program it cannot run is left out of the count. Then every device runs
it through `compiler.compile` + `amdgpu.program.ProgramRunner` (what `amdgpu-run FILE.mlir`
does), compared with NaN == NaN and a per-type tolerance. One subprocess per program, with a
time limit, so a crash or a hang is one failure. Prints one line per failing program (its
first line of error), the failure classes, and the pass rate per device.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FAMILIES = ("linalg", "linalg_ext_ops", "tensor_ops", "tosa_ops", "stablehlo_ops",
            "regression", "subbyte_types", "math")
DEVICES = ("amdgpu:virtual", "vulkan", "amdgpu:virtual:gfx942")


# --- turning test functions into programs -------------------------------------------------
def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


def split_programs(path: Path, out_dir: Path) -> list[Path]:
    """One MLIR file per test function of `path`, returning what it checks."""
    from iree.compiler import ir

    text = path.read_text()
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    try:
        module = ir.Module.parse(text, ctx)
    except Exception:  # noqa: BLE001 - a file this IREE cannot read is not counted
        return []
    tests = []
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not op.regions[0].blocks:
            continue
        ftype = ir.TypeAttr(op.attributes["function_type"]).value
        if ir.FunctionType(ftype).inputs or ir.FunctionType(ftype).results:
            continue
        if "sym_visibility" in op.attributes:
            continue
        tests.append(ir.StringAttr(op.attributes["sym_name"]).value)
    written = []
    for name in tests:
        mod = ir.Module.parse(text, ctx)
        keep = None
        for op in list(mod.body.operations):
            op = op.operation
            if op.name == "func.func" and "sym_name" in op.attributes:
                sym = ir.StringAttr(op.attributes["sym_name"]).value
                if sym in tests and sym != name:
                    op.erase()
                elif sym == name:
                    keep = op
        if keep is None or not _returns_checked_values(keep, ir, ctx):
            continue
        dst = out_dir / f"{path.parent.name}__{path.stem}__{name}.mlir"
        dst.write_text(str(mod))
        written.append(dst)
    return written


def _returns_checked_values(func, ir, ctx) -> bool:
    checks = [op for op in _walk(func) if op.name.startswith("check.")]
    if not checks:
        return False
    values = [op.operands[0] for op in checks]
    for op in checks:
        if op.parent.name != "func.func":  # a check nested in a loop or branch
            return False
    block = func.regions[0].blocks[0]
    if len(func.regions[0].blocks) != 1:
        return False
    ret = list(block.operations)[-1].operation
    if ret.name != "func.return":
        return False
    with ctx, ir.Location.unknown():
        for op in checks:
            op.erase()
        ret.erase()
        ir.Operation.create("func.return", operands=values, loc=ir.Location.unknown(),
                            ip=ir.InsertionPoint(block))
        ftype = ir.FunctionType.get([], [v.type for v in values])
        func.attributes["function_type"] = ir.TypeAttr.get(ftype)
    return True


# --- running one program ------------------------------------------------------------------
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run_one(path: str, devices: list[str], wait_s: float = 60.0) -> dict:
    """{"reference": "ok" | error, device: "pass" | "wrong: ..." | "error: ..."}"""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import numpy as np

    from amdgpu.workloads import _compare, iree_cpu_reference

    name = Path(path).stem.rsplit("__", 1)[-1]
    out: dict = {}
    try:
        want = iree_cpu_reference(path, name, [])
    except Exception as exc:  # noqa: BLE001 - CPU cannot run it: not counted
        return {"reference": _first_line(exc)}
    out["reference"] = "ok"
    import amdgpu
    import compiler
    from amdgpu.program import ProgramRunner

    for spec in devices:
        try:
            dev = amdgpu.open(spec)
            targets = ["vulkan"] if dev.backend == "vulkan" else [dev.target]
            try:
                bundle = compiler.compile(path, targets=targets)
            except compiler.CompileError:
                why = None if dev.backend == "vulkan" else iree_rocm_refuses(path, dev.target)
                if why is None:
                    raise
                out[spec] = f"{NOT_COMPILED}: {why}"
                continue
            runner = ProgramRunner(dev, bundle)
            if runner.host is not None:
                runner.host.timeout = wait_s
            # the device wait is the program's time limit: the virtual GPUs interpret
            # every instruction, and the machine may be loaded
            got = runner.run([], timeout=wait_s)
            if len(got) != len(want):
                out[spec] = f"wrong: {len(got)} results, IREE's CPU gives {len(want)}"
                continue
            loose = any(np.asarray(w).dtype == np.float16 for w in want)
            ok, err = _compare(got, [np.asarray(w) for w in want], loose)
            out[spec] = "pass" if ok else f"wrong: max abs error {err:.3g}"
        except Exception as exc:  # noqa: BLE001 - one line per failure
            out[spec] = f"error: {_first_line(exc)}"
    return out


NOT_COMPILED = "not compiled by IREE for this target"


def iree_rocm_refuses(path: str, target: str) -> str | None:
    """IREE's first diagnostic when IREE's own ROCm backend, invoked as IREE's ROCm e2e
    suite invokes it (`iree-compile --iree-hal-target-backends=rocm --iree-rocm-target=GFX
    --iree-llvmgpu-enable-small-float-emulation`, no target features, none of our other
    flags), cannot compile `path` for `target` either; None when it can: then the failure
    is ours."""
    from compiler.iree import _first_diagnostic, iree_compile_path

    with tempfile.TemporaryDirectory(prefix="iree-rocm-") as tmp:
        done = subprocess.run(
            [iree_compile_path(), path, "--iree-hal-target-backends=rocm",
             f"--iree-rocm-target={target.split(':')[0]}",
             "--iree-llvmgpu-enable-small-float-emulation", "-o", os.path.join(tmp, "p.vmfb")],
            capture_output=True, text=True, errors="replace", timeout=600)
    if done.returncode == 0:
        return None
    return _first_diagnostic(done.stderr).replace(path, Path(path).name)[:300]


def _classify(message: str) -> str:
    """A failure class: the message with numbers and names dropped."""
    import re

    m = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "'…'", message)
    m = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", m)
    m = re.sub(r"@\S+|%\S+|/\S+", "…", m)
    return m[:140]


def _verdict(result: str | None) -> str:
    if result == "pass":
        return "ok  "
    return "excl" if (result or "").startswith(NOT_COMPILED) else "FAIL"


def _family(stem: str) -> str:
    return stem.split("__", 1)[0]


def summarize(results: dict[str, dict], devices: list[str]) -> None:
    """Failure classes, then the pass rate per device and per family. The denominator is
    the programs IREE's CPU backend runs, less those IREE's own ROCm backend cannot
    compile for the device's target (counted and named on their own line)."""
    counted = {k: v for k, v in results.items() if v.get("reference") == "ok"}
    print(f"{len(results)} programs, {len(counted)} run on IREE's CPU backend")
    for d in devices:
        classes = collections.Counter(
            _classify(v.get(d, "not run")) for v in counted.values()
            if _verdict(v.get(d)) == "FAIL")
        if classes:
            print(f"failure classes on {d}:")
            for c, n in classes.most_common(12):
                print(f"  {n:4d}  {c}")
        excluded = {k: v[d] for k, v in counted.items() if _verdict(v.get(d)) == "excl"}
        if excluded:
            print(f"{NOT_COMPILED} on {d} (IREE's own ROCm backend, plain flags, fails too; "
                  f"left out of {d}'s count):")
            for k, why in sorted(excluded.items()):
                print(f"  {k}: {why[len(NOT_COMPILED) + 2:]}")
    families = sorted({_family(k) for k in counted}, key=lambda f: (
        FAMILIES.index(f) if f in FAMILIES else len(FAMILIES), f))
    print("\n| family | IREE's CPU runs | " + " | ".join(devices) + " |")
    print("|---|---|" + "---|" * len(devices))
    for fam in [*families, None]:
        rows = {k: v for k, v in counted.items() if fam is None or _family(k) == fam}
        cells = []
        for d in devices:
            verdicts = [_verdict(v.get(d)) for v in rows.values()]
            den = len(verdicts) - verdicts.count("excl")
            ok = verdicts.count("ok  ")
            cell = f"{ok} / {den} ({100.0 * ok / max(den, 1):.1f}%)"
            if verdicts.count("excl"):
                cell += f", {verdicts.count('excl')} excl."
            cells.append(f"**{cell}**" if fam is None else cell)
        name = "**all**" if fam is None else fam
        print(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    for d in devices:
        verdicts = [_verdict(v.get(d)) for v in counted.values()]
        passed, excl = verdicts.count("ok  "), verdicts.count("excl")
        den = len(verdicts) - excl
        print(f"{d:<24} {passed:4d} / {den} pass ({100.0 * passed / max(den, 1):.1f}%)"
              + (f"; {excl} {NOT_COMPILED} (excluded, listed above)" if excl else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("e2e", nargs="?", help="IREE's tests/e2e directory (extracted)")
    ap.add_argument("--devices", default=",".join(DEVICES))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per program")
    ap.add_argument("--limit", type=int, default=0, help="first N programs only")
    ap.add_argument("--match", default="", help="only programs whose name contains this")
    ap.add_argument("--json", metavar="FILE", help="write every result to FILE")
    ap.add_argument("--rerun", metavar="FILE",
                    help="a --json file of an earlier run: run again only its programs that "
                         "did not pass on --devices, and report over all of its results")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    devices = [d for d in args.devices.split(",") if d]
    if args.one:
        print(json.dumps(run_one(args.one, devices, args.timeout)))
        return 0
    if not args.e2e or not Path(args.e2e).is_dir():
        ap.error("give IREE's tests/e2e directory (git archive it out of a checkout first)")
    root = Path(args.e2e)
    work = Path(tempfile.mkdtemp(prefix="iree-e2e-"))
    programs: list[Path] = []
    for family in args.families.split(","):
        for f in sorted((root / family).glob("*.mlir")):
            programs += split_programs(f, work)
    programs = [p for p in programs if args.match in p.name]
    earlier: dict[str, dict] = {}
    if args.rerun:
        earlier = json.loads(Path(args.rerun).read_text())
        programs = [p for p in programs if p.stem in earlier
                    and earlier[p.stem].get("reference") == "ok"
                    and any(_verdict(earlier[p.stem].get(d)) != "ok  " for d in devices)]
    if args.limit:
        programs = programs[: args.limit]
    print(f"{len(programs)} programs from {root} (work files in {work})", flush=True)
    results: dict[str, dict] = {}
    t0 = time.perf_counter()
    env = dict(os.environ)
    running: list[tuple[Path, subprocess.Popen, float, object]] = []
    queue = list(programs)
    # A stopped run (Ctrl-C, `timeout`) ends its per-program processes too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        while queue or running:
            while queue and len(running) < args.jobs:
                p = queue.pop(0)
                log = tempfile.TemporaryFile(mode="w+")
                proc = subprocess.Popen(
                    [sys.executable, __file__, "--one", str(p), "--devices", ",".join(devices),
                     "--timeout", str(args.timeout)],
                    stdout=log, stderr=subprocess.DEVNULL, env=env,
                )
                running.append((p, proc, time.perf_counter(), log))
            time.sleep(0.2)
            for item in list(running):
                p, proc, started, log = item
                if proc.poll() is None and time.perf_counter() - started < args.timeout:
                    continue
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                    res = {"reference": "ok", **{d: f"error: timeout after {args.timeout:.0f} s"
                                                 for d in devices}}
                else:
                    log.seek(0)  # type: ignore[attr-defined]
                    lines = log.read().strip().splitlines()  # type: ignore[attr-defined]
                    try:
                        res = json.loads(lines[-1])
                    except (IndexError, json.JSONDecodeError):
                        res = {"reference": "ok", **{d: f"error: the run crashed (exit "
                                                        f"{proc.returncode})" for d in devices}}
                log.close()  # type: ignore[attr-defined]
                running.remove(item)
                results[p.stem] = res
                if res.get("reference") == "ok":
                    for d in devices:
                        print(f"{_verdict(res.get(d))} {p.stem} [{d}] {res.get(d)}", flush=True)
                else:
                    why = res["reference"][:120]
                    print(f"skip {p.stem} (IREE's CPU backend: {why})", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        for _p, proc, _t, _log in running:
            proc.kill()
    print(f"\n{len(results)} programs run ({time.perf_counter() - t0:.0f} s)")
    if args.rerun:
        merged = {k: dict(v) for k, v in earlier.items()}
        for k, v in results.items():
            merged.setdefault(k, {}).update(v)
        results = merged
        devices = list(dict.fromkeys(
            [d for d in DEVICES if any(d in v for v in results.values())] + devices))
        print(f"merged with {args.rerun}: {len(results)} programs")
    summarize(results, devices)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
