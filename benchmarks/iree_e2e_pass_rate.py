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
        if keep is None:
            continue
        expected = ir.Module.parse(str(mod), ctx)
        if not _returns_checked_values(keep, ir, ctx):
            continue
        dst = out_dir / f"{path.parent.name}__{path.stem}__{name}.mlir"
        dst.write_text(str(mod))
        written.append(dst)
        for op in expected.body.operations:
            op = op.operation
            if op.name == "func.func" and "sym_name" in op.attributes and \
                    ir.StringAttr(op.attributes["sym_name"]).value == name:
                checks = _returns_expected_values(op, ir, ctx)
                if checks is not None:
                    dst.with_suffix(".expected.mlir").write_text(str(expected))
                    dst.with_suffix(".checks.json").write_text(json.dumps(checks))
    return written


def _returns_expected_values(func, ir, ctx) -> list[dict] | None:
    """Rewrite `func` to return what its checks expect (the second operand, or the
    constant of a `_const` check), and give each check's kind and tolerances (IREE's
    check module: expect_almost_eq is numpy's isclose with atol 1e-4, rtol 0 unless given).
    None when a check has no expected value (expect_true/false)."""
    checks = [op for op in _walk(func) if op.name.startswith("check.")]
    block = func.regions[0].blocks[0]
    values, kinds = [], []
    with ctx, ir.Location.unknown():
        for op in checks:
            name = op.name.removeprefix("check.")
            if name.endswith("_const"):
                c = ir.Operation.create(
                    "arith.constant", results=[op.operands[0].type],
                    attributes={"value": op.attributes["value"]}, ip=ir.InsertionPoint(op))
                values.append(c.results[0])
            elif len(op.operands) == 2:
                values.append(op.operands[1])
            else:
                return None
            tol = {k: ir.FloatAttr(op.attributes[k]).value if k in op.attributes else d
                   for k, d in (("atol", 1e-4), ("rtol", 0.0))}
            kinds.append({"check": name.removesuffix("_const"), **tol})
        for op in checks:
            op.erase()
        ret = list(block.operations)[-1].operation
        ret.erase()
        ir.Operation.create("func.return", operands=values, ip=ir.InsertionPoint(block))
        func.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([], [v.type for v in values]))
    return kinds


def passes_iree_check(got: list, path: str) -> str | None:
    """When `got` fails the comparison with IREE's CPU backend: does it pass the checks
    IREE's own test makes (`check.expect_eq*` exactly, `check.expect_almost_eq*` as
    IREE's isclose: lhs == rhs or |lhs - rhs| <= atol + rtol * |rhs|)? IREE's CPU
    backend may itself be off where the test's expectation is exact (a sequential f32
    sum of 40960 x 1e-3 gives 40.949, the test expects 40.96). A reason, or None."""
    import numpy as np

    from amdgpu.workloads import iree_cpu_reference

    side = Path(path).with_suffix(".checks.json")
    if not side.is_file():
        return None
    checks = json.loads(side.read_text())
    name = Path(path).stem.rsplit("__", 1)[-1]
    want = iree_cpu_reference(str(Path(path).with_suffix(".expected.mlir")), name, [])
    if len(want) != len(got) or len(checks) != len(got):
        return None
    for g, w, c in zip(got, want, checks, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return None
        if c["check"] == "expect_eq" or not np.issubdtype(w.dtype, np.inexact):
            if not np.array_equal(g, w, equal_nan=np.issubdtype(w.dtype, np.inexact)):
                return None
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = (g64 == w64) | (np.isfinite(w64) & (
                np.abs(g64 - w64) <= c["atol"] + c["rtol"] * np.abs(w64)))
        if not close.all():
            return None
    return "matches IREE's own check.expect_* of the test"


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

    from amdgpu.workloads import _compare, _compile, iree_cpu_reference

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
            # what amdgpu-run compiles: the gfx target, or on Vulkan the SPIR-V target
            # made from the device's own features and subgroup operations
            try:
                bundle = _compile(path, dev)
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
            why = None if ok else passes_iree_check(got, path)
            out[spec] = ("pass" if ok else f"wrong: max abs error {err:.3g}" if why is None
                         else f"pass: {why} (IREE's CPU backend differs by {err:.3g})")
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
    if result == "pass" or (result or "").startswith("pass:"):
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
        by_check = sum((v.get(d) or "").startswith("pass:") for v in counted.values())
        print(f"{d:<24} {passed:4d} / {den} pass ({100.0 * passed / max(den, 1):.1f}%)"
              + (f"; {by_check} of them by IREE's own check where IREE's CPU backend "
                 "differs" if by_check else "")
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
