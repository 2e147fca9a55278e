"""`hwlab run --level N`: each device's model file for level N (tools/hwlab/levels.py), every
check measured (tools/hwlab/checks.py) and judged against its threshold, as one LabReport
whose rows are the checks: pass, fail with the figure against the threshold, or skipped
with the reason. Each row carries its figures, thresholds and source (CellResult.figures),
which the fleet merge reads to flag outliers.
"""

from __future__ import annotations

import time
import traceback

from ground.errors import AmdgpuError
from tools.hwlab import checks as checks_mod
from tools.hwlab import levels as levels_mod
from tools.hwlab.results import CellResult, LabReport, this_machine

# Which way is better for each metric (the fleet's outlier test reads it).
# Checks that open the devices they measure themselves (closing this one first).
OPENS_ITS_OWN = {"peer_bandwidth", "transfer_matrix"}
LOWER_IS_BETTER = {"round_trip", "host_time", "mismatches", "queue_errors"}


def _unit(check: str, metric: str) -> str:
    quantity = levels_mod.CHECKS[check].metrics[metric]
    return levels_mod.BASE_UNIT.get(quantity, "")


def _show(value, unit: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)}{' ' + unit if unit else ''}"
    text = f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{text}{' ' + unit if unit else ''}"


def judge(check: levels_mod.Check, measured: checks_mod.Measured) -> tuple[str, str]:
    """(outcome, verdict line): every threshold holds -> passed; else failed, naming each
    figure against its threshold; a metric the device did not report -> skipped."""
    failures: list[str] = []
    passes: list[str] = []
    missing: list[str] = []
    for t in check.thresholds:
        unit = _unit(check.name, t.metric)
        if t.metric == "name_has":  # a substring of the device's name
            name = str(measured.figures.get("name", ""))
            (passes if str(t.value).lower() in name.lower() else failures).append(
                f"name {name!r} (threshold: contains {t.value!r})")
            continue
        if t.metric not in measured.figures:
            missing.append(t.metric)
            continue
        fig = measured.figures[t.metric]
        want = f"{t.op} {_show(t.value, unit)}"
        if t.holds(fig):
            passes.append(f"{t.metric} {_show(fig, unit)} (threshold {want})")
        else:
            failures.append(f"{t.metric} {_show(fig, unit)}, threshold {want}")
    if failures:
        return "failed", "FAIL: " + "; ".join(failures)
    if missing:
        return "skipped", f"this device does not report {', '.join(missing)}"
    return "passed", "pass: " + "; ".join(passes)


def _figures(check: levels_mod.Check, model: str, measured: checks_mod.Measured | None) -> dict:
    out: dict = {
        "model": model,
        "source": check.source,
        "where": check.where,
        "thresholds": [t.text for t in check.thresholds],
        "units": {m: _unit(check.name, m) for m in levels_mod.CHECKS[check.name].metrics},
        "better": {m: "lower" if m in LOWER_IS_BETTER else "higher"
                   for m in levels_mod.CHECKS[check.name].metrics},
    }
    if measured is not None:
        out["values"] = {k: v for k, v in measured.figures.items()
                         if isinstance(v, (int, float, str))}
        out.update(measured.extra)
    return out


def choose(files: list[levels_mod.LevelFile], facts: dict,
           model: str | None) -> levels_mod.LevelFile | None:
    if model:
        for f in files:
            if f.model.lower() == model.lower() or f.path.parent.name.lower() == model.lower():
                return f
        raise levels_mod.LevelFileError(
            f"--model {model}: no level file of that model at this level; 'hwlab levels' lists "
            "the models and their levels")
    return next((f for f in files if f.matches(facts)), None)


def run_level(devices, level: int, model: str | None = None, console=None,
              root=levels_mod.LEVEL_DIR) -> LabReport:
    import amdgpu

    files = levels_mod.level_files(level, root)
    if not files:
        raise levels_mod.LevelFileError(
            f"no level {level} files under {root}; 'hwlab levels' lists the levels there are")
    report = LabReport(machines=[this_machine()])
    for lab in devices:
        report.devices.append({**lab.to_json(), "machine": lab.key.split("/")[0],
                               "key": lab.key})
        row = f"level{level}::device"
        if not lab.available:
            report.results.append(CellResult(row, lab.key, "skipped", 0.0,
                                             f"{lab.spec} is not available: {lab.reason}"))
            continue
        try:
            device = amdgpu.open(lab.spec)
        except AmdgpuError as e:
            report.results.append(CellResult(row, lab.key, "error", 0.0,
                                             f"cannot open {lab.spec}: {e}"))
            continue
        try:
            facts = checks_mod.device_facts(lab, device)
            chosen = choose(files, facts, model)
            if chosen is None:
                shown = ", ".join(f"{k}={v}" for k, v in facts.items())
                report.results.append(CellResult(
                    row, lab.key, "skipped", 0.0,
                    f"no level {level} file matches {lab.spec} ({shown}); add "
                    f"tools/hwlab/levels/<MODEL>/level_{level}.conf or pass --model"))
                continue
            report.devices[-1]["model"] = chosen.model
            report.devices[-1]["level_file"] = str(chosen.path)
            for check in chosen.checks:
                if console is not None:
                    console.print(f"[dim]{lab.spec}: {check.label}[/]", highlight=False)
                try:
                    device = _run_check(report, check, chosen.model, level, lab, device)
                except AmdgpuError as e:  # reopening after a failure did not work
                    report.results.append(CellResult(
                        row, lab.key, "error", 0.0,
                        f"{lab.spec} could not be opened again after {check.label}: {e}; "
                        "the remaining checks did not run"))
                    break
        finally:
            try:
                device.close()
            except Exception:  # noqa: BLE001 - a device that broke is closed best effort
                pass
    return report


def _run_check(report: LabReport, check, model: str, level: int, lab, device):
    """One row; returns the device to use next (reopened after a driver error)."""
    import amdgpu

    test = f"level{level}::{check.label}"
    t0 = time.perf_counter()
    measured = None
    if check.name in OPENS_ITS_OWN:
        # These open other devices of the system (a peer node): on the real ROCr one
        # process sees one node, so this device is closed meanwhile.
        device.close()
    try:
        measured = checks_mod.CHECK_FUNCTIONS[check.name](device, check.params, lab)
        outcome, verdict = judge(check, measured)
        message = f"{measured.detail}\nsource: {check.source}\n{verdict}"
    except checks_mod.Skip as e:
        outcome, message = "skipped", str(e)
    except (AssertionError, AmdgpuError) as e:
        outcome = "failed"
        message = f"source: {check.source}\n{type(e).__name__}: {e}"
        if check.name not in OPENS_ITS_OWN:  # a queue error may have left it unusable
            try:
                device.close()
            finally:
                device = amdgpu.open(lab.spec)
    except Exception as e:  # noqa: BLE001 - one broken check is one error row, not a lost report
        outcome = "error"
        message = "".join(traceback.format_exception(e)) + f"{type(e).__name__}: {e}"
    if check.name in OPENS_ITS_OWN:
        device = amdgpu.open(lab.spec)
    report.results.append(CellResult(test, lab.key, outcome, time.perf_counter() - t0,
                                     message, _figures(check, model, measured)))
    return device
