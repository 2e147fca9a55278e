"""benchmarks/soak.py's verdict: "nothing grows" is a least-squares slope per minute over
the last 3/4 of the run, for every worker and the device server (issue 35), on series made
here: a flat, noisy one passes, a steady leak of the kind the rule names fails (and the
hour's server before its one malloc arena), a run too short to judge says so."""

from __future__ import annotations

import importlib.util
import random
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
