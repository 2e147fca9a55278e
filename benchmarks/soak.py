"""Soak: mixed work from several threads and processes on one GPU for a chosen time, with
faults injected, every result checked, resources printed per interval (issue 35).

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--device amdgpu:virtual]
                                        [--processes 2] [--threads 4] [--interval 60]

On amdgpu:emulated every process is a client of one device server (the emulated kernel):
run it under the shim, with a node of its own so other programs' servers stay apart:

    AMDGPU_EMULATED_NODE=3xgfx90a bash scripts/emulated.sh \
        .venv/bin/python benchmarks/soak.py --device amdgpu:emulated --minutes 10

Each of `--processes` worker processes opens the device once and runs `--threads` threads,
each round of each thread on its own buffers (value v = thread * 10^6 + round):
- an immediate dispatch (fill a with v), a replay of one shared recorded command buffer
  rebound to the thread's buffers (copy a -> b), a device copy (b -> c); a, b, c read back
  and compared with v;
- every 8th round of thread 0: 4 dispatches under `dev.time_dispatches()` (one timer per
  device at a time), each timed with end >= start;
- every 8th round of thread 1: a trace window (a TraceWriter made the active sink around 4
  dispatches), read back: it parses and holds at least those 4 kernel dispatches.
Faults, injected every `--fault-every` seconds in turn (each must come back as exactly one
project error, one line, and leave the other work untouched):
- a kernel that faults (a store to address 0x10) on a second device of the same system:
  QueueError at the wait; where ROCr runs it (amdgpu:emulated, real GPUs), which reports
  one GPU memory fault per process while the kernel driver stops that process's queues on
  the GPU for good, in a short-lived child process instead: QueueError at the wait, then
  DeviceLost at once for the next dispatch;
- a device closed while a thread waits on its queued work (~150 dispatches queued,
  close(timeout=0.2)): the waiter gets DeviceError/SignalTimeout/QueueError, no hang, and
  a later call is a DeviceError;
- (the parent) a client killed mid-submit: a third process dispatching and replaying in a
  loop, traced, is SIGKILLed at a random moment; it must die by SIGKILL and its cut-off
  trace must read as its valid prefix, then at most one TraceFormatError.

The parent prints one line per worker and interval: rounds, checked results, errors,
faults reported/injected, RSS, open descriptors and threads (sampled while the worker
injects no fault and writes no trace); on amdgpu:emulated also one line for the device
server: its RSS, descriptors and threads sampled every 2 s, the least of each in the
interval (the server with only the workers connected: killed clients and fault children
come and go) and the most; its descriptors less those of the freed mappings it keeps for
30 s after a client ends.

Nothing grows, the rule: for every worker and the server, RSS, descriptors and threads
over the last 3/4 of the run (the interval reports from minute T/4 on, at least 4 of them)
have a least-squares slope of at most 0.2 MiB, 0.2 descriptors and 0.1 threads per minute
(GROWTH_LIMITS: a leak of 1 KiB per round of one worker, or of one descriptor per
injected fault, is above them). The exit status is 0 when every result was right, no
unexpected error came, every fault was reported as one project error, every killed client
was handled right and nothing grew; 1 otherwise.

Never waiting forever, the watchdog: a worker that prints no report for `--silent-after`
seconds (default: 3 report intervals, at least 3 minutes; before its first line, while it
compiles and loads, 10 minutes), or one of whose work threads has finished no round for that
long, is hung. The parent has it write every thread's Python
stack (faulthandler, registered on SIGUSR1 in each worker) to a file, prints a one-line
summary (each thread's innermost frame), writes gdb's native backtrace of every thread
beside it where gdb is installed, kills the worker and goes on with the others; the soak
then ends `FAIL: worker N silent for X min (stacks in PATH)`.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N = 256  # elements per buffer: small kernels, many rounds
# most growth per minute over the last 3/4 of the run (least-squares slope) that still
# counts as not growing: RSS MiB, open descriptors, threads
GROWTH_LIMITS = {"rss_mb": 0.2, "fds": 0.2, "threads": 0.1}
SERVER_SAMPLE_S = 2.0
STARTUP_S = 600.0  # the most a worker may take to open, compile and load before it starts
# test-only: "WORKER:SECONDS" makes that worker's reports stop SECONDS after its start (a
# thread takes the lock every report needs and keeps it), to test the watchdog
HANG_HOOK_ENV = "SOAK_TEST_HANG"
OOB_CL = ("__kernel void oob(__global unsigned int* out, unsigned long far) {\n"
          "  *(__global unsigned int*)(far) = 7u; out[0] = 1u; }\n")


def _resources() -> dict:
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {"rss_mb": round(rss / 2**20, 1), "fds": len(os.listdir("/proc/self/fd")),
            "threads": threading.active_count()}


def _one_line(e: BaseException) -> bool:
    from ground.errors import AmdgpuError

    return isinstance(e, AmdgpuError) and "\n" not in str(e)


class Worker:
    """One process's share: the device, the kernels, the threads and the counters."""

    def __init__(self, spec: str, threads: int, seconds: float, interval: float,
                 fault_every: float, ident: int):
        import amdgpu
        import compiler
        from compiler.clang import compile_opencl

        self.spec, self.ident, self.n_threads = spec, ident, threads
        self.deadline = time.monotonic() + seconds
        self.interval, self.fault_every = interval, fault_every
        self.dev = amdgpu.open(spec)
        target = self.dev.target
        self.fill_code = compiler.compile("fill", targets=[target])
        self.copy_code = compiler.compile("copy", targets=[target])
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "oob.cl"
            src.write_text(OOB_CL)
            self.oob_code = compile_opencl(src, target)
        self.fill = self.dev.load(self.fill_code).kernel("fill")
        self.copy = self.dev.load(self.copy_code).kernel("copy")
        cb = self.dev.command_buffer()
        cb.dispatch(self.copy, N, 64, (cb.binding(0), cb.binding(1), N))
        self.cb = cb.finalize()
        # One round before the threads start: steady state is what a soak measures, and the
        # HSA device's library kernels (dev.copy's) load at first use, racily (two threads
        # at once: KeyError 'copy', reported in docs/RELIABILITY.md).
        warm = self.dev.buffer(N * 4)
        self.dev.copy(warm, warm).wait(60)
        warm.free()
        self.lock = threading.Lock()  # counters
        self.timer_lock = threading.Lock()  # one dispatch timer per device at a time
        self.trace_lock = threading.Lock()  # one trace window at a time (one sink)
        self.chaos_lock = threading.Lock()  # held while a fault is injected
        self.counts = {"rounds": 0, "checked": 0, "timed": 0, "traced": 0}
        self.last_round: dict[int, float] = {}  # work thread -> when it last finished a round
        self.errors: list[str] = []
        self.faults = {"injected": 0, "reported": 0}
        self.fault_errors: list[str] = []

    # --- bookkeeping --------------------------------------------------------------------
    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)

    def fault(self, reported_right: bool, what: str = "") -> None:
        with self.lock:
            self.faults["injected"] += 1
            self.faults["reported"] += int(reported_right)
            if not reported_right:
                self.fault_errors.append(what)

    # --- the mixed work -------------------------------------------------------------------
    def work(self, t: int) -> None:
        dev = self.dev
        a, b, c = (dev.buffer(N * 4) for _ in range(3))
        r = 0
        while time.monotonic() < self.deadline:
            v = np.float32(t * 1_000_000 + r)
            try:
                dev.dispatch(self.fill, N, 64, (a, v, N))
                dev.submit(self.cb, [b, a])
                dev.copy(c, b).wait(60)
                for name, buf in (("a", a), ("b", b), ("c", c)):
                    got = buf.to_numpy(np.float32)
                    if not (got == v).all():
                        self.error(f"thread {t} round {r}: {name} holds {got[:3]} not {v}")
                self.add("checked", 3)
                if r % 8 == 0 and t == 0:
                    self.timed(a, r)
                if r % 8 == 0 and t == 1:
                    self.traced(a, r)
            except Exception as e:  # noqa: BLE001 - counted and reported
                where = traceback.extract_tb(e.__traceback__)[-3:]
                self.error(f"thread {t} round {r}: {type(e).__name__}: {e} (at " + " <- ".join(
                    f"{Path(f.filename).name}:{f.lineno}" for f in reversed(where)) + ")")
            self.add("rounds")
            self.last_round[t] = time.monotonic()
            r += 1
        del self.last_round[t]  # done: its silence from here on is no stall

    def timed(self, buf, r: int) -> None:
        with self.timer_lock:
            with self.dev.time_dispatches() as timer:
                for i in range(4):
                    self.dev.dispatch(self.fill, N, 64, (buf, np.float32(i), N))
            mine = [x for x in timer.times if x.kernel == "fill"]
            if len(mine) < 4 or any(x.end_ns < x.start_ns for x in mine):
                self.error(f"timed round {r}: {len(mine)} fill times, "
                           f"{sum(x.end_ns < x.start_ns for x in mine)} ending before start")
            self.add("timed")

    def traced(self, buf, r: int) -> None:
        from packets.trace import TraceWriter, read_trace, set_sink

        with self.trace_lock, tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "window.aqltrace"
            writer = TraceWriter(path)
            previous = set_sink(writer)
            try:
                for i in range(4):
                    self.dev.dispatch(self.fill, N, 64, (buf, np.float32(i), N))
                self.dev.synchronize(60)
            finally:
                set_sink(previous)
                writer.close()
            dispatches = sum(1 for rec in read_trace(path)
                             if getattr(rec, "raw", None) and rec.raw[0] == 2)
            if dispatches < 4:
                self.error(f"trace round {r}: {dispatches} kernel dispatches, wanted >= 4")
            self.add("traced")

    # --- faults ---------------------------------------------------------------------------
    def inject(self, which: int) -> None:
        import amdgpu
        from ground.errors import AmdgpuError, DeviceError, QueueError

        if which % 2 == 0 and getattr(getattr(self.dev, "provider", None), "name", "") == "rocr":
            # ROCr reports one GPU memory fault per process and the kernel driver then stops
            # the process's queues on that GPU for good: the fault runs in a child process
            ok, why = fault_in_a_child(self.spec, self.oob_code)
            self.fault(ok, why)
            return
        if which % 2 == 0:  # a kernel that faults, on a second device of the system
            other = amdgpu.open(self.spec)
            try:
                oob = other.load(self.oob_code).kernel("oob")
                out = other.buffer(64)
                try:
                    other.dispatch(oob, 64, 64, (out, np.uint64(0x10))).wait(60)
                    self.fault(False, "the faulting kernel completed")
                except QueueError as e:
                    self.fault(_one_line(e), f"fault: {e!r}")
                except Exception as e:  # noqa: BLE001
                    self.fault(False, f"fault: {type(e).__name__}: {e}")
            finally:
                other.close()
            return
        # a device closed while a thread waits on its queued work
        other = amdgpu.open(self.spec)
        fill = other.load(self.fill_code).kernel("fill")
        big = 1 << 16
        buf = other.buffer(big * 4)
        point = None
        for i in range(150):
            point = other.dispatch(fill, big, 256, (buf, np.float32(i), big))
        seen: list = []

        def wait() -> None:
            try:
                point.wait(120)
                seen.append(None)
            except Exception as e:  # noqa: BLE001
                seen.append(e)

        waiter = threading.Thread(target=wait, name="soak-waiter")
        waiter.start()
        time.sleep(0.02)
        other.close(timeout=0.2)
        waiter.join(120)
        if waiter.is_alive():
            self.fault(False, "a waiter on the closed device hangs")
            return
        e = seen[0]
        ok = e is None or (_one_line(e) and isinstance(e, AmdgpuError))
        try:
            other.dispatch(fill, big, 256, (buf, np.float32(0), big))
            ok, why = False, "a dispatch on the closed device was accepted"
        except DeviceError as late:
            ok, why = ok and _one_line(late), f"waiter: {e!r}, later: {late!r}"
        except Exception as late:  # noqa: BLE001
            ok, why = False, f"later call: {type(late).__name__}: {late}"
        self.fault(ok, why)

    def chaos(self) -> None:
        which = 0
        while time.monotonic() + self.fault_every < self.deadline:
            time.sleep(self.fault_every)
            try:
                with self.chaos_lock:
                    self.inject(which)
            except Exception as e:  # noqa: BLE001
                self.fault(False, f"injection {which}: {type(e).__name__}: {e}\n"
                                  f"{traceback.format_exc()}")
            which += 1

    # --- the run --------------------------------------------------------------------------
    def report(self, final: bool = False) -> None:
        # sampled with no trace window open and no fault being injected: their files and
        # devices are meant to come and go
        with self.trace_lock, self.chaos_lock:
            resources = _resources()
        now = time.monotonic()
        # the longest any still-working thread has gone without finishing a round
        idle = max((now - t for t in list(self.last_round.values())), default=0.0)
        with self.lock:
            line = {"worker": self.ident, "t": round(now, 1), **self.counts,
                    "idle_s": round(idle, 1),
                    "errors": len(self.errors), "faults": dict(self.faults),
                    "first_errors": self.errors[:3], "fault_errors": self.fault_errors[:3],
                    **resources, "final": final}
        print(json.dumps(line), flush=True)

    def run(self) -> None:
        threads = [threading.Thread(target=self.work, args=(t,), name=f"soak-{t}")
                   for t in range(self.n_threads)]
        threads.append(threading.Thread(target=self.chaos, name="soak-chaos"))
        start = time.monotonic()
        for t in range(self.n_threads):
            self.last_round[t] = start
        for th in threads:
            th.start()
        print(json.dumps({"worker": self.ident, "started": True}), flush=True)
        hang = os.environ.get(HANG_HOOK_ENV, "")
        if hang and int(hang.split(":")[0]) == self.ident:
            def stop_reporting() -> None:
                time.sleep(float(hang.split(":")[1]))
                self.chaos_lock.acquire()  # held for good: every report waits on it
                threading.Event().wait()

            threading.Thread(target=stop_reporting, name="soak-test-hang", daemon=True).start()
        while any(th.is_alive() for th in threads):
            time.sleep(min(self.interval, max(0.1, self.deadline - time.monotonic() + 1)))
            if all(th.is_alive() for th in threads):  # not while they wind down at the end
                self.report()
        self.dev.close()
        self.report(final=True)


# --- the faulting kernel in a short-lived process (ROCr) ----------------------------------
def fault_child(spec: str, code_path: str) -> None:
    """Fault once (QueueError at the wait), then dispatch again: DeviceLost at once. Prints
    one JSON line: whether both were one-line errors of the right class, and what came."""
    import amdgpu
    from ground.errors import DeviceLost, QueueError

    dev = amdgpu.open(spec)
    try:
        oob = dev.load(Path(code_path).read_bytes()).kernel("oob")
        out = dev.buffer(64)
        seen = []
        for far in (0x10, out.address):  # the fault, then a dispatch that would be right
            try:
                dev.dispatch(oob, 64, 64, (out, np.uint64(far))).wait(60)
                seen.append(None)
            except Exception as e:  # noqa: BLE001
                seen.append(e)
        ok = (isinstance(seen[0], QueueError) and isinstance(seen[1], DeviceLost)
              and all(_one_line(e) for e in seen))
        print(json.dumps({"ok": ok, "what": " / ".join(repr(e)[:200] for e in seen)}),
              flush=True)
    finally:
        dev.close()


def fault_in_a_child(spec: str, code: bytes) -> tuple[bool, str]:
    with tempfile.NamedTemporaryFile(suffix=".hsaco") as f:
        f.write(code)
        f.flush()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        try:
            done = subprocess.run([sys.executable, __file__, "--fault-child", f.name,
                                   "--device", spec], capture_output=True, text=True,
                                  env=env, timeout=180)
        except subprocess.TimeoutExpired:
            return False, "the faulting child did not end in 180 s"
    lines = done.stdout.strip().splitlines()
    try:
        rec = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return False, f"the faulting child ended {done.returncode}: {done.stderr[-300:]}"
    if done.returncode != 0:
        return False, f"the faulting child ended {done.returncode}: {done.stderr[-300:]}"
    return bool(rec["ok"]), f"child: {rec['what']}"


# --- the client killed mid-submit ----------------------------------------------------------
def victim(spec: str, trace: str) -> None:
    """Dispatch and replay until killed, traced by a writer that writes every 256 records
    (the default waits for 16,384 or half a second: a short-lived client's trace would be
    empty), so the kill lands while the trace is being written."""
    import amdgpu
    import compiler
    from packets.trace import TraceWriter, set_sink

    set_sink(TraceWriter(trace, buffer_records=256))

    dev = amdgpu.open(spec)
    fill = dev.load(compiler.compile("fill", targets=[dev.target])).kernel("fill")
    cb = dev.command_buffer()
    cb.dispatch(fill, N, 64, (cb.binding(0), np.float32(1), N))
    cb.finalize()
    bufs = [dev.buffer(N * 4) for _ in range(4)]
    print("ready", flush=True)
    i = 0
    while True:
        dev.dispatch(fill, N, 64, (bufs[i % 4], np.float32(i), N))
        dev.submit(cb, [bufs[(i + 1) % 4]])
        i += 1


def kill_a_client(spec: str, tmp: Path, n: int) -> tuple[bool, str]:
    from ground.errors import TraceFormatError
    from packets.trace import read_trace

    trace = tmp / f"victim{n}.aqltrace"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, __file__, "--victim", str(trace), "--device", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            return False, f"the client did not start: {proc.stderr.read()[-300:]}"
        time.sleep(random.uniform(0.2, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if proc.returncode != -signal.SIGKILL:
        return False, f"the client ended with status {proc.returncode}, not SIGKILL"
    records = 0
    try:
        for _ in read_trace(trace):
            records += 1
        verdict = f"its trace read whole ({records} records)"
    except TraceFormatError as e:
        verdict = f"its trace's valid prefix ({records} records), then: {str(e)[:80]}"
        if "\n" in str(e):
            return False, f"a multi-line trace error: {e!r}"
    except FileNotFoundError:
        verdict = "no trace yet"
    except Exception as e:  # noqa: BLE001
        return False, f"reading its trace raised {type(e).__name__}: {e}"
    finally:
        trace.unlink(missing_ok=True)
    return True, verdict


# --- the device server (amdgpu:emulated) -------------------------------------------------
class ServerWatch:
    """Samples the node's device server from /proc every SERVER_SAMPLE_S seconds; per
    interval, the least and the most of its RSS, descriptors and threads. Its descriptors
    are counted less the freed mappings it keeps for 30 s (status's "buried": each holds a
    descriptor), which follow how many clients ended in the last 30 s."""

    def __init__(self, node: str, start: float, interval: float) -> None:
        from hsa.emulated import protocol

        self.node = node
        self.status = protocol.request
        self.lock_file = protocol.run_dir(node) / "lock"
        self.start, self.interval = start, interval
        self.reports: list[dict] = []
        self.pids: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-server", daemon=True)
        self._thread.start()

    def _sample(self) -> tuple[int, dict] | None:
        try:
            pid = int(self.lock_file.read_text().split()[0])
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f)
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            buried = int(self.status(self.node).get("buried", 0))
            return pid, {"rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
                         "fds": fds - buried, "threads": int(status["Threads"])}
        except (OSError, ValueError, IndexError, KeyError):
            return None  # no server (yet), or it is ending

    def _run(self) -> None:
        window: list[dict] = []
        next_report = self.start + self.interval
        while not self._stop.wait(SERVER_SAMPLE_S):
            got = self._sample()
            if got is not None:
                pid, sample = got
                if not self.pids or self.pids[-1] != pid:
                    self.pids.append(pid)
                window.append(sample)
            if time.monotonic() >= next_report:
                if window:
                    self._report(window, next_report)
                window, next_report = [], next_report + self.interval

    def _report(self, window: list[dict], at: float) -> None:
        least = {k: min(w[k] for w in window) for k in GROWTH_LIMITS}
        most = {k: max(w[k] for w in window) for k in GROWTH_LIMITS}
        self.reports.append({"t": at, **least, "most": most, "pid": self.pids[-1]})
        print(f"{(at - self.start) / 60:5.1f} min server pid {self.pids[-1]}: rss "
              f"{least['rss_mb']} MiB (most {most['rss_mb']}), fds less buried "
              f"{least['fds']} (most {most['fds']}), threads {least['threads']} (most "
              f"{most['threads']}), {len(window)} samples", flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def dump(self, pid: int, path: Path) -> str:
        """A hung worker's side of the server: its status (each AQL queue's indices and
        processor state) to `path`, and every server thread's stack to the server's log
        (kill -USR1). Returns the words for the verdict line."""
        try:
            mine = [c for c in self.status(self.node)["clients"] if c["pid"] == pid]
            path.write_text(json.dumps(mine, indent=1) + "\n")
            server = self.pids[-1] if self.pids else 0
            if server:
                os.kill(server, signal.SIGUSR1)
            return f", its server state {path} and the server's stacks in its log"
        except (OSError, ValueError) as e:
            return f", no server state ({e})"


def growth(series: dict[str, list[dict]], start: float, seconds: float) -> tuple[list[str],
                                                                                  list[str]]:
    """The rule "nothing grows" (module docstring) over each named series of reports (each
    with t, a time.monotonic(), and the GROWTH_LIMITS keys): (what grew, what was measured)."""
    grew, measured = [], []
    for name, reports in series.items():
        late = [r for r in reports if r["t"] - start >= seconds / 4]
        if len(late) < 4:
            measured.append(f"{name}: not judged, {len(late)} reports in the last 3/4 of the "
                            "run (4 needed)")
            continue
        minutes = [(r["t"] - start) / 60 for r in late]
        slopes = {k: statistics.linear_regression(minutes, [float(r[k]) for r in late]).slope
                  for k in GROWTH_LIMITS}
        measured.append(f"{name} over minutes {minutes[0]:.1f}-{minutes[-1]:.1f}: " + ", ".join(
            f"{k} {late[0][k]} -> {late[-1][k]} ({slopes[k]:+.3f}/min)" for k in GROWTH_LIMITS))
        grew += [f"{name} {k} grows {slopes[k]:+.3f}/min (limit {GROWTH_LIMITS[k]})"
                 for k in GROWTH_LIMITS if slopes[k] > GROWTH_LIMITS[k]]
    return grew, measured


# --- the parent ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--device", default="amdgpu:virtual")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--interval", type=float, default=60.0, help="seconds between reports")
    p.add_argument("--fault-every", type=float, default=20.0, help="seconds between faults")
    p.add_argument("--kill-every", type=float, default=45.0,
                   help="seconds between killed clients")
    p.add_argument("--silent-after", type=float, default=None,
                   help="seconds without a report (or a round of some work thread) after "
                        "which a worker counts as hung (default: 3 intervals, at least 180)")
    p.add_argument("--stacks-dir", default=None,
                   help="where a hung worker's stacks go (default: a new folder in the "
                        "temporary directory, removed when no worker hung)")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--stacks", default=None, help=argparse.SUPPRESS)
    p.add_argument("--victim", default=None, help=argparse.SUPPRESS)
    p.add_argument("--fault-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fault_child:
        fault_child(args.device, args.fault_child)
        return 0
    if args.victim:
        victim(args.device, args.victim)
        return 0
    seconds = args.minutes * 60
    if args.worker is not None:
        if args.stacks:  # the watchdog's SIGUSR1 writes every thread's stack there
            stacks = open(args.stacks, "w")  # noqa: SIM115 - open for the process's life
            faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        Worker(args.device, args.threads, seconds, args.interval, args.fault_every,
               args.worker).run()
        return 0
    print(f"soak: {args.processes} processes x {args.threads} threads on {args.device}, "
          f"{args.minutes:g} min, host {os.uname().nodename} ({os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}), faults every {args.fault_every:g} s per process, a "
          f"client killed every {args.kill_every:g} s", flush=True)
    stacks_dir = Path(args.stacks_dir or tempfile.mkdtemp(prefix="soak-stacks-"))
    stacks_dir.mkdir(parents=True, exist_ok=True)
    stacks = [stacks_dir / f"worker{i}.stacks.txt" for i in range(args.processes)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i), "--device",
                               args.device, "--minutes", str(args.minutes), "--threads",
                               str(args.threads), "--interval", str(args.interval),
                               "--fault-every", str(args.fault_every), "--stacks",
                               str(stacks[i])],
                              stdout=subprocess.PIPE, text=True) for i in range(args.processes)]
    reports: dict[int, list[dict]] = {i: [] for i in range(args.processes)}

    def end_workers(signum: int, _frame: object) -> None:  # a stopped soak leaves none behind
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, end_workers)
    start = time.monotonic()
    silent_after = args.silent_after or max(180.0, 3 * args.interval)
    watchdog = Watchdog(procs, stacks, silent_after, start)
    server = None
    if args.device.startswith("amdgpu:emulated"):
        from hsa.emulated import protocol

        server = ServerWatch(os.environ.get(protocol.NODE_ENV) or protocol.DEFAULT_NODE, start,
                             args.interval)
        watchdog.server = server

    def read(i: int, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                print(f"worker {i}: {line.rstrip()}", flush=True)
                continue
            watchdog.heard(i, rec.get("idle_s", 0.0))
            if rec.get("started"):
                continue
            reports[i].append(rec)
            print(f"{(time.monotonic() - start) / 60:5.1f} min worker {i}: {rec['rounds']} "
                  f"rounds, {rec['checked']} results checked, {rec['timed']} timed, "
                  f"{rec['traced']} traced, errors {rec['errors']}, faults reported "
                  f"{rec['faults']['reported']}/{rec['faults']['injected']}, rss "
                  f"{rec['rss_mb']} MiB, fds {rec['fds']}, threads {rec['threads']}"
                  f"{' (final)' if rec['final'] else ''}", flush=True)
            for what in rec["first_errors"] + rec["fault_errors"]:
                print(f"    {what}", flush=True)

    readers = [threading.Thread(target=read, args=(i, pr)) for i, pr in enumerate(procs)]
    for r in readers:
        r.start()
    kills = {"done": 0, "right": 0}
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        while time.monotonic() - start + args.kill_every < seconds:
            time.sleep(args.kill_every)
            if watchdog.all_hung():
                break
            ok, what = kill_a_client(args.device, Path(tmp), kills["done"])
            kills["done"] += 1
            kills["right"] += int(ok)
            print(f"{(time.monotonic() - start) / 60:5.1f} min killed client "
                  f"{kills['done']}: {'ok' if ok else 'WRONG'}, {what}", flush=True)
    for pr in procs:
        pr.wait()  # the watchdog kills one that goes silent
    watchdog.stop()
    for r in readers:
        r.join()
    if server is not None:
        server.stop()
    if not watchdog.hung:
        shutil.rmtree(stacks_dir, ignore_errors=True)
    return verdict(reports, kills, [pr.returncode for pr in procs], start, seconds, server,
                   watchdog.hung)


class Watchdog:
    """Declares a worker hung when it has printed no report for `silent_after` seconds, or
    reported a work thread that finished no round for that long: writes its threads' Python
    stacks (SIGUSR1, faulthandler in the worker) and, where gdb is, their native backtraces,
    then kills it. `hung` maps each such worker to its verdict line."""

    def __init__(self, procs: list[subprocess.Popen], stacks: list[Path], silent_after: float,
                 start: float, startup: float = STARTUP_S, native: bool = True) -> None:
        self.procs, self.stacks, self.silent_after = procs, stacks, silent_after
        self.startup = max(startup, silent_after)  # until its first line: compiles, loads
        self.last = {i: start for i in range(len(procs))}
        self.started: set[int] = set()
        self.native = native and shutil.which("gdb") is not None
        self.server: ServerWatch | None = None  # amdgpu:emulated: its state goes along too
        self.idle = {i: 0.0 for i in range(len(procs))}
        self.hung: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-watchdog", daemon=True)
        self._thread.start()

    def heard(self, i: int, idle_s: float) -> None:
        self.last[i], self.idle[i] = time.monotonic(), idle_s
        self.started.add(i)

    def all_hung(self) -> bool:
        return len(self.hung) == len(self.procs)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            for i, proc in enumerate(self.procs):
                if i in self.hung or proc.poll() is not None:
                    continue
                silent = now - self.last[i]
                if silent > (self.silent_after if i in self.started else self.startup):
                    self._hang(i, proc, f"silent for {silent / 60:.1f} min")
                elif self.idle[i] > self.silent_after:
                    self._hang(i, proc, f"silent for {self.idle[i] / 60:.1f} min (a work "
                                        "thread finished no round)")

    def _hang(self, i: int, proc: subprocess.Popen, what: str) -> None:
        path = self.stacks[i]
        try:
            proc.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            return  # it ended meanwhile
        time.sleep(2.0)  # faulthandler writes from its signal handler
        where = f"stacks in {path}"
        if self.native:
            native = path.with_suffix(".gdb.txt")
            try:
                with open(native, "w") as out:
                    subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex",
                                    "thread apply all bt"], stdout=out,
                                   stderr=subprocess.STDOUT, timeout=180)
                # named only when gdb attached (a worker that ended meanwhile: "ptrace: No
                # such process")
                if "Thread 1 " in native.read_text(errors="replace"):
                    where += f", native {native}"
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.server is not None:
            where += self.server.dump(proc.pid, path.with_suffix(".server.json"))
        proc.kill()
        self.hung[i] = f"worker {i} {what} ({where})"
        print(f"WATCHDOG: worker {i} {what}: {stack_summary(path)}; killed", flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def stack_summary(path: Path) -> str:
    """One line from faulthandler's dump: each thread's innermost frame."""
    try:
        text = path.read_text()
    except OSError as e:
        return f"no stacks ({e})"
    frames: list[str | None] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            frames.append(None)
        elif line.startswith('  File "') and frames and frames[-1] is None:
            # '  File "PATH", line N in FUNC', innermost first
            _, path_, rest = line.split('"', 2)
            words = rest.split()
            frames[-1] = f"{words[-1]} ({Path(path_).name}:{words[2]})"
    if not frames:
        return "no stacks written"
    return f"{len(frames)} threads in: " + "; ".join(f or "?" for f in frames)


def verdict(reports: dict[int, list[dict]], kills: dict, codes: list[int], start: float,
            seconds: float, server: ServerWatch | None = None,
            hung: dict[int, str] | None = None) -> int:
    bad = []
    series = {f"worker {i}": [r for r in recs if not r["final"]] for i, recs in reports.items()}
    for i, recs in reports.items():
        if hung and i in hung:
            bad.append(hung[i])
            continue
        if codes[i] != 0 or not recs or not recs[-1]["final"]:
            bad.append(f"worker {i} ended with status {codes[i]} without a final report")
            continue
        last = recs[-1]
        if last["errors"]:
            bad.append(f"worker {i}: {last['errors']} errors")
        if last["faults"]["reported"] != last["faults"]["injected"]:
            bad.append(f"worker {i}: faults reported {last['faults']['reported']} of "
                       f"{last['faults']['injected']}")
    if server is not None:
        series["server"] = server.reports
        if len(server.pids) > 1:
            bad.append(f"the device server was replaced: pids {server.pids}")
    grew, measured = growth(series, start, seconds)
    print("growth (least-squares slope per minute over the last 3/4 of the run; limits "
          + ", ".join(f"{k} {v}" for k, v in GROWTH_LIMITS.items()) + "):", flush=True)
    for line in measured:
        print(f"    {line}", flush=True)
    bad += grew
    if kills["right"] != kills["done"]:
        bad.append(f"killed clients handled right: {kills['right']} of {kills['done']}")
    total = sum(r[-1]["checked"] for r in reports.values() if r)
    faults = sum(r[-1]["faults"]["injected"] for r in reports.values() if r)
    print(f"soak: {total} results checked, {faults} faults injected, {kills['done']} clients "
          f"killed: "
          + ("FAIL: " + "; ".join(bad) if bad else "PASS" + (
              " (growth not judged: too short a run)" if any(
                  "not judged" in m for m in measured) else "")), flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
