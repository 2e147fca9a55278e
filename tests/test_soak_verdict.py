"""benchmarks/soak.py's verdict: "nothing grows" is a least-squares slope per minute over
the last 3/4 of the run, for every worker and the device server (issue 35), on series made
here: a flat, noisy one passes, a steady leak of the kind the rule names fails (and the
hour's server before its one malloc arena), a run too short to judge says so. And its
watchdog: a worker that goes silent is a failure with its stacks, never a wait forever
(the hour of 2026-12-06 waited for a hung worker until it was killed by hand)."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def series(minutes: int, rss, fds, threads, start: float = 1000.0) -> list[dict]:
    return [{"t": start + 60 * m, "rss_mb": rss(m), "fds": fds(m), "threads": threads(m)}
            for m in range(1, minutes)]


def worker_record(recs: list[dict], final: bool) -> list[dict]:
    common = {"checked": 3, "faults": {"injected": 2, "reported": 2}, "errors": 0}
    return [{**r, **common, "final": False} for r in recs] + (
        [{**recs[-1], **common, "final": True}] if final else [])


def test_flat_noisy_series_pass_and_a_leak_fails(soak, capsys):
    noise = random.Random(7)
    # the server's floor under clients coming and going: +-30 descriptors, +-3 MiB, flat
    flat = series(60, lambda m: 80 + noise.uniform(-3, 3), lambda m: 250 + noise.randint(-30, 30),
                  lambda m: 11 + noise.randint(-1, 1))
    grew, measured = soak.growth({"server": flat}, 1000.0, 3600)
    assert grew == [], measured
    # a 1 KiB-per-round leak (~250 rounds a minute) and one descriptor per fault (3 a minute)
    leak = series(60, lambda m: 55 + 0.25 * m, lambda m: 60 + 3 * m, lambda m: 6)
    grew, _ = soak.growth({"worker 0": leak}, 1000.0, 3600)
    assert [g.split(" grows")[0] for g in grew] == ["worker 0 rss_mb", "worker 0 fds"]
    # the hour's server before one malloc arena: 73 -> 269 MiB
    before = series(60, lambda m: 73 + 196 * (1 - (1 - m / 60) ** 2), lambda m: 250,
                    lambda m: 14)
    grew, _ = soak.growth({"server": before}, 1000.0, 3600)
    assert grew and grew[0].startswith("server rss_mb grows")


def test_a_short_run_is_not_judged_and_says_so(soak):
    short = series(4, lambda m: 50 + 10 * m, lambda m: 60, lambda m: 6)
    grew, measured = soak.growth({"worker 0": short}, 1000.0, 240)
    assert grew == []
    assert measured == ["worker 0: not judged, 3 reports in the last 3/4 of the run (4 needed)"]


def test_the_verdict_fails_on_growth_and_passes_a_steady_run(soak, capsys):
    steady = series(20, lambda m: 53.0, lambda m: 68, lambda m: 6)
    growing = series(20, lambda m: 53.0, lambda m: 68 + m, lambda m: 6)
    kills = {"done": 3, "right": 3}
    assert soak.verdict({0: worker_record(steady, True), 1: worker_record(steady, True)},
                        kills, [0, 0], 1000.0, 1200) == 0
    assert capsys.readouterr().out.rstrip().endswith("PASS")
    assert soak.verdict({0: worker_record(steady, True), 1: worker_record(growing, True)},
                        kills, [0, 0], 1000.0, 1200) == 1
    assert "FAIL: worker 1 fds grows +1.000/min (limit 0.2)" in capsys.readouterr().out
    short = series(4, lambda m: 53.0, lambda m: 68, lambda m: 6)
    assert soak.verdict({0: worker_record(short, True)}, kills, [0], 1000.0, 240) == 0
    assert capsys.readouterr().out.rstrip().endswith(
        "PASS (growth not judged: too short a run)")


# a process that, like a soak worker, writes its stacks on SIGUSR1, then says nothing more
SILENT = ("import faulthandler, signal, sys, time\n"
          "faulthandler.register(signal.SIGUSR1, file=open(sys.argv[1], 'w'), all_threads=True)\n"
          "def stuck_in_a_copy():\n"
          "    time.sleep(600)\n"
          "stuck_in_a_copy()\n")


def test_a_silent_worker_is_killed_with_its_stacks_and_fails_the_soak(soak, tmp_path, capsys):
    stacks = tmp_path / "worker0.stacks.txt"
    proc = subprocess.Popen([sys.executable, "-c", SILENT, str(stacks)])
    try:
        time.sleep(1.0)  # let it register its handler (SIGUSR1's default would end it)
        dog = soak.Watchdog([proc], [stacks], 1.0, time.monotonic(), startup=1.0,
                            native=False)  # gdb's backtrace: the slow test below
        assert proc.wait(240) == -signal.SIGKILL
        dog.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert list(dog.hung) == [0]
    assert dog.hung[0].startswith("worker 0 silent for ")
    assert f"(stacks in {stacks}" in dog.hung[0]
    assert 'line 4 in stuck_in_a_copy' in stacks.read_text()
    out = capsys.readouterr().out
    assert "WATCHDOG: worker 0 silent for" in out
    assert "1 threads in: stuck_in_a_copy (<string>:4); killed" in out
    # the verdict names it, and fails
    assert soak.verdict({0: []}, {"done": 0, "right": 0}, [proc.returncode], 1000.0, 60,
                        hung=dog.hung) == 1
    assert capsys.readouterr().out.rstrip().endswith("FAIL: " + dog.hung[0])


@pytest.mark.slow
def test_the_soak_ends_with_fail_when_a_worker_stops_reporting(tmp_path):
    """The whole soak on amdgpu:virtual, with worker 0 made to stop reporting (test-only
    hook): it ends in seconds with one FAIL line and status 1, Python stacks and gdb's."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SOAK_TEST_HANG="0:2")
    # 5 minutes, never reached: the watchdog kills the only worker within seconds, and the
    # worker's own end (at 1 minute, on a loaded machine) cannot race the stacks' capture
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--minutes",
                           "5", "--processes", "1", "--threads", "1", "--interval", "1",
                           "--silent-after", "6", "--fault-every", "1000", "--kill-every",
                           "1000", "--stacks-dir", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    assert "FAIL: worker 0 silent for" in last, done.stdout
    assert f"stacks in {tmp_path / 'worker0.stacks.txt'}" in last
    assert "WATCHDOG: worker 0 silent for" in done.stdout
    assert "in stop_reporting" in (tmp_path / "worker0.stacks.txt").read_text()
    if "native" in last:
        assert "Thread 1 " in (tmp_path / "worker0.stacks.gdb.txt").read_text()
