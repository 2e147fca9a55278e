"""`hwlab fleet --slurm PARTITION [--nodes N] [--level N]`: one Slurm job array through
submitit, each task running `hwlab run --level N --json` on its node's GPUs; the reports are
merged into one (per node, per GPU), each level figure compared with the fleet's median.

A node that fails is a row saying why (hwlab's exit and last line, a job that ended without
a result, a node that timed out), never a lost report: the merged report is written with
what came back, and says what is missing. Slurm not reachable, a partition that does not
exist: one line each (FleetError), and the report (with one row per missing node) is
still written.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ground.errors import AmdgpuError
from tools.hwlab.results import CellResult, LabReport, merge

OUTLIER_TOLERANCE = 0.2  # a figure more than 20% worse than the fleet's median is flagged


class FleetError(AmdgpuError):
    """Slurm cannot take the fleet run (not reachable, no such partition)."""


def _slurm(cmd: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None:
        raise FleetError(f"Slurm's {cmd[0]} is not installed here; install slurm-client "
                         "(or run hwlab fleet on a login node)")
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FleetError(f"Slurm is not reachable: {' '.join(cmd)} gave no answer in "
                         f"{timeout:.0f} s; check slurmctld and SLURM_CONF") from None


def partition_nodes(partition: str) -> list[str]:
    """The partition's node names; FleetError when Slurm does not answer or has no such
    partition."""
    r = _slurm(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"])
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip().splitlines()
        raise FleetError(f"Slurm is not reachable: sinfo: {why[-1] if why else r.returncode}; "
                         "check slurmctld and SLURM_CONF")
    nodes = sorted(set(r.stdout.split()))
    if not nodes:
        known = _slurm(["sinfo", "-h", "-o", "%P"]).stdout.split()
        raise FleetError(f"partition {partition!r} does not exist here (sinfo lists: "
                         f"{', '.join(p.rstrip('*') for p in known) or 'none'}); pass one of "
                         "them to --slurm")
    return nodes


# --- what runs on each node ----------------------------------------------------------------
def node_task(level: int, devices: list[str], env: dict[str, str]) -> dict:
    """Runs on a Slurm node (pickled there by submitit): `hwlab run --level N --json` in a
    child process, so a crash of the driver is this node's row, not a lost task."""
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"hwlab-fleet-{os.getpid()}-{task}.json"
    cmd = [sys.executable, "-m", "tools.hwlab", "run", "--level", str(level), "--json", str(out)]
    for spec in devices:
        cmd += ["--device", spec]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, **env, "HWLAB_MACHINE": node})
    result = {"node": node, "task": task, "rc": r.returncode,
              "last_line": (r.stderr.strip().splitlines() or [""])[-1]}
    try:
        import json

        result["report"] = json.loads(out.read_text())
        out.unlink()
    except (OSError, ValueError) as e:
        result["error"] = f"no report from hwlab run (exit {r.returncode}): " \
                          f"{result['last_line'] or e}"
    return result


# --- submitting and collecting --------------------------------------------------------------
@dataclass
class NodeOutcome:
    task: int
    node: str = ""
    report: LabReport | None = None
    why: str = ""  # when there is no report


@dataclass
class FleetRun:
    partition: str
    level: int
    requested: int
    outcomes: list[NodeOutcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each, as printed


def _queued(job_ids: set[str]) -> dict[str, str] | None:
    """Array task id -> "STATE (reason)" of the tasks of these jobs still in the queue; None
    when squeue does not answer this time (the caller keeps waiting)."""
    try:
        r = _slurm(["squeue", "-h", "--array", "-o", "%i|%T|%r"])  # one line per array task
    except FleetError:
        return None
    if r.returncode != 0:
        return None
    out = {}
    for line in r.stdout.splitlines():
        task, state, reason = (line.split("|") + ["", ""])[:3]
        if task.split("_")[0] in job_ids:
            out[task] = state + (f" ({reason})" if reason and reason != "None" else "")
    return out


def partition_minutes(partition: str) -> int | None:
    """The partition's MaxTime in minutes (None: unlimited or not told)."""
    r = _slurm(["sinfo", "-h", "-p", partition, "-o", "%l"])
    text = (r.stdout.split() or [""])[0]
    if r.returncode != 0 or not text or text in ("infinite", "n/a"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return (int(days or 0) * 24 + hours) * 60 + minutes + (1 if seconds else 0)


def submit_and_collect(partition: str, nodes: int, level: int, devices: list[str],
                       folder: Path, timeout_s: float, poll_s: float = 1.0) -> FleetRun:
    try:
        import submitit
    except ImportError:
        raise FleetError("hwlab fleet needs submitit: pip install submitit") from None

    run = FleetRun(partition, level, nodes)
    minutes = max(1, int(timeout_s // 60) + 1)
    limit = partition_minutes(partition)
    if limit is not None:  # a request past the partition's MaxTime would pend for ever
        minutes = min(minutes, limit)
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
    executor.update_parameters(partition=partition, time=minutes,
                               nodes=1, ntasks_per_node=1, cpus_per_task=1, exclusive=True,
                               job_name=f"hwlab-level{level}", use_srun=False,
                               array_parallelism=nodes)
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HWLAB_LEVEL_DIR")}
    try:
        jobs = executor.map_array(node_task, [level] * nodes, [devices] * nodes, [env] * nodes)
    except Exception as e:  # noqa: BLE001 - sbatch's refusal, as one line
        text = str(e).strip().splitlines()
        raise FleetError(f"sbatch refused the job array: {text[-1] if text else e}") from None
    pending = dict(enumerate(jobs))
    gone_since: dict[int, float] = {}
    queued: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        seen = _queued({j.job_id.split("_")[0] for j in pending.values()})
        queued = queued if seen is None else seen
        for i, job in list(pending.items()):
            if job.paths.result_pickle.exists():
                run.outcomes.append(_outcome(i, job))
                del pending[i]
            elif seen is not None and job.job_id not in seen:
                # out of the queue without a result: give the file system a moment
                first = gone_since.setdefault(i, time.monotonic())
                if time.monotonic() - first > 5:
                    log = (job.stderr() or "").strip().splitlines()
                    run.outcomes.append(NodeOutcome(
                        i, why=f"job {job.job_id} left the queue without a result"
                        + (f": {log[-1]}" if log else "")))
                    del pending[i]
        time.sleep(poll_s)
    # Past the deadline everything still pending goes: KILL to the whole batch step
    # (submitit's job wrapper bypasses SIGTERM), which takes hwlab's child process with it.
    for base in sorted({job.job_id.split("_")[0] for job in pending.values()}):
        subprocess.run(["scancel", "--full", "--signal=KILL", base], capture_output=True,
                       timeout=30)
    for i, job in pending.items():
        state = queued.get(job.job_id, "")
        line = (f"task {i} (job {job.job_id}) timed out after {timeout_s:.0f} s"
                f"{' (' + state + ')' if state else ''}; cancelled")
        run.outcomes.append(NodeOutcome(i, why=line))
        run.problems.append(line)
    run.outcomes.sort(key=lambda o: o.task)
    return run


def _outcome(i: int, job) -> NodeOutcome:
    try:
        result = job.result()
    except Exception as e:  # noqa: BLE001 - the task raised on the node: its row says so
        last = str(e).strip().splitlines()
        return NodeOutcome(i, why=f"the task raised on its node: {last[-1] if last else e}")
    node = result.get("node", "")
    if "report" in result:
        return NodeOutcome(i, node, LabReport.from_json(result["report"], f"node {node}"))
    return NodeOutcome(i, node, why=result.get("error", "no report"))


# --- the merged report ---------------------------------------------------------------------
def merged_report(run: FleetRun, tolerance: float = OUTLIER_TOLERANCE) -> LabReport:
    report = merge([o.report for o in run.outcomes if o.report is not None])
    for o in run.outcomes:
        if o.report is None:
            key = f"{o.node or f'task{o.task}'}/-"
            report.devices.append({"key": key, "machine": o.node or f"task {o.task}",
                                   "spec": "-", "available": False, "reason": o.why})
            report.results.append(CellResult("fleet::node", key, "error", 0.0,
                                             f"node {o.node or '?'} (task {o.task}): {o.why}"))
    missing = run.requested - sum(o.report is not None for o in run.outcomes)
    report.extra["fleet"] = {
        "partition": run.partition, "level": run.level, "requested_nodes": run.requested,
        "nodes_reported": sorted({o.node for o in run.outcomes if o.report is not None}),
        "reported": run.requested - missing, "missing": missing, "problems": run.problems,
        "outliers": outliers(report, tolerance), "tolerance": tolerance,
    }
    return report


def outliers(report: LabReport, tolerance: float = OUTLIER_TOLERANCE) -> list[dict]:
    """Per check and metric, every device whose figure is worse than the fleet's median by
    more than `tolerance` (higher-is-better figures below it, times above it)."""
    by_test: dict[tuple[str, str], list[tuple[str, float, str]]] = {}
    for r in report.results:
        values = (r.figures or {}).get("values", {})
        better = (r.figures or {}).get("better", {})
        for metric, v in values.items():
            if isinstance(v, (int, float)) and metric in better and metric not in (
                    "mismatches", "queue_errors", "dispatches"):
                by_test.setdefault((r.test, metric), []).append((r.device, float(v),
                                                                 better[metric]))
    out = []
    for (test, metric), rows in by_test.items():
        if len(rows) < 3:  # a median of two says nothing about which one is off
            continue
        median = statistics.median(v for _, v, _ in rows)
        if median <= 0:
            continue
        for device, v, better in rows:
            ratio = v / median
            off = ratio < 1 - tolerance if better == "higher" else ratio > 1 + tolerance
            if off:
                out.append({"test": test, "device": device, "metric": metric, "value": v,
                            "median": median, "ratio": round(ratio, 3)})
    return out
