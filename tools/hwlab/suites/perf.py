"""The perf suite: dispatch latency, replay cost and throughput per device, recorded as
results whose message carries the figures (`record_property`). The tests assert that the
work completes, never a time: the figures are for reading and comparing across machines.

HWLAB_PERF_REPEAT (default 50) sets the number of timed repetitions.
"""

from __future__ import annotations

import os

import pytest

from tools.hwlab import bench

REPEAT = int(os.environ.get("HWLAB_PERF_REPEAT", "50"))


@pytest.mark.generic
def test_empty_submission_round_trip(device, record_property):
    m = bench.empty_submission_rate(device, REPEAT)
    record_property("empty submission + wait", f"{m['round_trip_us']:.1f} us median (n={REPEAT})")
    assert m["round_trip_us"] > 0


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_dispatch_latency(device, record_property):
    m = bench.dispatch_latency(device, REPEAT)
    record_property("saxpy dispatch + wait", f"{m['round_trip_us']:.1f} us median (n={REPEAT})")
    record_property("host submit", f"{m['host_submit_us']:.1f} us median")
    assert m["round_trip_us"] >= m["host_submit_us"] > 0


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_replay_cost(device, record_property):
    m = bench.replay_cost(device, max(REPEAT // 4, 5))
    n = m["dispatches"]
    record_property(f"chain-{n} replay host submit", f"{m['replay_host_us']:.1f} us median")
    record_property(f"chain-{n} immediate host dispatch", f"{m['immediate_host_us']:.1f} us")
    record_property("replay speed-up", f"{m['immediate_host_us'] / m['replay_host_us']:.2f}x")
    record_property(f"chain-{n} replay + wait", f"{m['replay_round_trip_us']:.1f} us")
    assert m["replay_host_us"] > 0


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_throughput(device, record_property):
    m = bench.throughput(device, REPEAT)
    record_property(
        "saxpy throughput",
        f"{m['dispatches_per_s']:.0f} dispatches/s ({m['dispatches']} "
        "back to back, one synchronize)",
    )
    assert m["dispatches_per_s"] > 0
