"""Per-dispatch device time (dev.time_dispatches) on amdgpu:virtual, the clock correlation
on amdgpu:emulated (real ROCr), and amdgpu-run's per-kernel device times."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import amdgpu
import packets
from amdgpu.errors import DeviceError
from amdgpu.hsa_backend import timing
from hsa.provider import Capability

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx11]


def _executor_present() -> bool:
    from hsa.virtual.executor import executor_for

    return executor_for("gfx11") is not None


@pytest.fixture(scope="module")
def code():
    if not _executor_present():
        pytest.skip("gfx11 executor not present")
    import compiler

    return {n: compiler.compile(n, targets=["gfx1100"]) for n in ("fill", "copy")}


@pytest.fixture
def dev():
    d = amdgpu.open("amdgpu:virtual")
    yield d
    d.close()


def test_every_dispatch_gets_its_own_start_and_end_on_the_host_clock(dev, code):
    fill = dev.load(code["fill"]).kernel("fill")
    copy = dev.load(code["copy"]).kernel("copy")
    n = 256
    z, w = dev.buffer(n * 4), dev.buffer(n * 4)
    before = time.monotonic_ns()
    with dev.time_dispatches() as t:
        for i in range(3):
            dev.dispatch(fill, n, 64, (z, np.float32(i + 1), n))
            point = dev.dispatch(copy, n, 64, (w, z, n))
    after = time.monotonic_ns()
    point.wait(10)  # the lane's timeline still advances (the barrier after each dispatch)
    assert (w.to_numpy(np.float32) == 3.0).all()
    assert [x.kernel for x in t.times] == ["fill", "copy"] * 3
    slack = t.offset_error_ns + 1000
    for x in t.times:
        assert before - slack <= x.host_submit_ns <= x.start_ns + slack
        assert x.start_ns < x.end_ns <= after + slack
    # In order on one lane: each dispatch starts after the one before it ended.
    for a, b in zip(t.times, t.times[1:], strict=False):
        assert b.start_ns >= a.end_ns
    kernels = {k.kernel: k for k in t.per_kernel()}
    assert kernels["fill"].count == 3 and kernels["copy"].count == 3
    assert kernels["copy"].min_ns <= kernels["copy"].median_ns <= kernels["copy"].max_ns


def test_timed_packets_are_the_ones_the_trace_completes(dev, code, tmp_path):
    from tools.packet_trace import stats

    fill = dev.load(code["fill"]).kernel("fill")
    z = dev.buffer(64 * 4)
    path = tmp_path / "timed.aqltrace"
    writer = packets.TraceWriter(path)
    packets.set_sink(writer)
    try:
        with dev.time_dispatches() as t:
            for i in range(2):
                dev.dispatch(fill, 64, 64, (z, np.float32(i), 64))
    finally:
        packets.set_sink(None)
        writer.close()
    done = {(r.queue_id, r.packet_id): r for r in packets.read_trace(path)
            if isinstance(r, packets.trace.CompletionRecord)}
    for x in t.times:
        rec = done[(x.queue_id, x.packet_id)]  # the dispatch packet, not the barrier after it
        assert rec.end_ns - rec.start_ns > 0
    result = stats.compute(path)
    fill_stats = next(k for k in result["per_kernel"] if k["kernel"] == "fill")
    assert fill_stats["device"]["count"] == 2


def test_signals_are_batched_and_reused(dev, code, monkeypatch):
    monkeypatch.setattr(timing, "SIGNAL_BATCH", 4)
    fill = dev.load(code["fill"]).kernel("fill")
    z = dev.buffer(64 * 4)
    with dev.time_dispatches() as t:
        for i in range(70):  # past 16 batches: collect() runs and the signals come back
            dev.dispatch(fill, 64, 64, (z, np.float32(i), 64))
        assert len(t._taken) <= 16 * 4
    assert len(t.times) == 70
    assert (z.to_numpy(np.float32) == 69).all()


def _timed_replay(dev, code, rows: int, tmp_path):
    """A command buffer of `rows` fills (a scalar parameter) then a copy, replayed inside
    and outside a timer; returns the timer and the trace's completion records."""
    fill = dev.load(code["fill"]).kernel("fill")
    copy = dev.load(code["copy"]).kernel("copy")
    cb = dev.command_buffer()
    for _ in range(rows):
        cb.dispatch(fill, 256, 64, (cb.binding(0), cb.scalar("v", np.float32), 256))
    cb.barrier()
    cb.dispatch(copy, 256, 64, (cb.binding(1), cb.binding(0), 256))
    cb.finalize()
    z, w = dev.buffer(256 * 4), dev.buffer(256 * 4)
    path = tmp_path / "replay.aqltrace"
    writer = packets.TraceWriter(path)
    packets.set_sink(writer)
    try:
        with dev.time_dispatches() as t:
            point = dev.submit(cb, [z, w], params={"v": 5.0})
            point.wait(30)  # the lane's timeline advances past a timed replay
            dev.submit(cb, [z, w], params={"v": 6.0}, lane=1)
    finally:
        packets.set_sink(None)
        writer.close()
    assert (w.to_numpy(np.float32) == 6.0).all()
    dev.submit(cb, [z, w], params={"v": 7.0}).wait(30)  # untimed after: the block is intact
    assert (w.to_numpy(np.float32) == 7.0).all()
    done = [(r.queue_id, r.packet_id) for r in packets.read_trace(path)
            if isinstance(r, packets.trace.CompletionRecord)]
    return t, done


@pytest.mark.parametrize("rows", [2, 12])  # below and past the small-segment threshold
def test_replays_are_timed_per_dispatch(dev, code, rows, tmp_path):
    t, done = _timed_replay(dev, code, rows, tmp_path)
    assert [x.kernel for x in t.times] == (["fill"] * rows + ["copy"]) * 2
    assert [x.lane for x in t.times] == [0] * (rows + 1) + [1] * (rows + 1)
    for part in (t.times[: rows + 1], t.times[rows + 1 :]):
        ids = [x.packet_id for x in part]
        assert ids == list(range(ids[0], ids[0] + rows + 1)), ids  # one block each
        copy_time = part[-1]
        assert all(copy_time.start_ns >= f.end_ns for f in part[:-1])  # after the barrier
        assert all(x.start_ns < x.end_ns for x in part)
    assert {(x.queue_id, x.packet_id) for x in t.times} <= set(done)
    kernels = {k.kernel: k for k in t.per_kernel()}
    assert kernels["fill"].count == 2 * rows and kernels["copy"].count == 2


def test_timing_without_profiling_or_twice_is_one_line(dev, code):
    with dev.time_dispatches(), pytest.raises(DeviceError, match="already active"):
        dev.time_dispatches().__enter__()
    dev.paths["profiling"] = Capability(False, "no profiling here")
    with pytest.raises(DeviceError) as e:
        dev.time_dispatches().__enter__()
    assert "no profiling timestamps (no profiling here)" in str(e.value)
    assert "\n" not in str(e.value)


def test_amdgpu_run_reports_per_kernel_device_time(capsys):
    if not _executor_present():
        pytest.skip("gfx11 executor not present")
    from amdgpu.cli import main

    assert main(["chain-10", "--device", "amdgpu:virtual", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [kernel] = out["kernel_device"]
    assert kernel["dispatches"] == out["dispatches"] == 10
    assert 0 < kernel["min_ns"] <= kernel["median_ns"] <= kernel["max_ns"]
    assert out["host_device_ratio"] > 0


def test_amdgpu_run_reports_device_time_of_replays(capsys):
    if not _executor_present():
        pytest.skip("gfx11 executor not present")
    from amdgpu.cli import main

    assert main(["chain-10", "--device", "amdgpu:virtual", "--replay", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"]
    [kernel] = out["replay_kernel_device"]
    assert kernel["dispatches"] == 10
    assert 0 < kernel["min_ns"] <= kernel["median_ns"] <= kernel["max_ns"]
    assert main(["chain-4", "--device", "amdgpu:virtual", "--replay"]) == 0
    assert "replay kernel device us" in capsys.readouterr().out


def test_emulated_rocr_system_clock_is_the_host_monotonic_clock():
    """Real ROCr over the emulated KFD: its system timestamp (the domain of
    hsa_amd_profiling_get_dispatch_time) correlates with time.monotonic_ns."""
    try:
        d = amdgpu.open("amdgpu:emulated")
    except Exception as e:  # noqa: BLE001 - not built here
        pytest.skip(f"amdgpu:emulated unavailable: {e}")
    try:
        assert d.paths["profiling"].available
        offset, error = timing._clock_offset(d.provider)
        assert abs(offset) < 1_000_000 + error  # one clock, sampled between two host reads
    finally:
        d.close()


@pytest.fixture
def emulated():
    try:
        d = amdgpu.open("amdgpu:emulated")
    except Exception as e:  # noqa: BLE001 - not built here
        pytest.skip(f"amdgpu:emulated unavailable: {e}")
    if not d.runs_kernels:
        d.close()
        pytest.skip("amdgpu:emulated runs no kernels here")
    yield d
    d.close()


@pytest.mark.hsa_rocr
def test_emulated_rocr_times_each_dispatch_and_the_trace_gets_completions(emulated, tmp_path):
    """Real ROCr (hsa_amd_profiling_get_dispatch_time) over the emulated KFD."""
    import compiler
    from tools.packet_trace import stats

    dev = emulated
    fill = dev.load(compiler.compile("fill", targets=[dev.target])).kernel("fill")
    z = dev.buffer(256 * 4)
    path = tmp_path / "emulated.aqltrace"
    writer = packets.TraceWriter(path)
    packets.set_sink(writer)
    before = time.monotonic_ns()
    try:
        with dev.time_dispatches() as t:
            for i in range(3):
                dev.dispatch(fill, 256, 64, (z, np.float32(i + 1), 256))
    finally:
        packets.set_sink(None)
        writer.close()
    assert (z.to_numpy(np.float32) == 3.0).all()
    assert [x.kernel for x in t.times] == ["fill"] * 3
    slack = t.offset_error_ns + 1000
    for x in t.times:
        assert before - slack <= x.host_submit_ns <= x.start_ns + slack
        assert x.start_ns < x.end_ns
    for a, b in zip(t.times, t.times[1:], strict=False):
        assert b.start_ns >= a.end_ns - slack
    # The completion records name the timed dispatch packets, once each: the emulated
    # device side writes them (stamped with ROCr's queue id), so the timer adds none.
    done = [(r.queue_id, r.packet_id) for r in packets.read_trace(path)
            if isinstance(r, packets.trace.CompletionRecord)]
    assert {(x.queue_id, x.packet_id) for x in t.times} <= set(done)
    assert len(done) == len(set(done))

    fill_stats = next(k for k in stats.compute(path)["per_kernel"] if k["kernel"] == "fill")
    assert fill_stats["dispatches"] == 3 and fill_stats["device"]["count"] >= 3


@pytest.mark.hsa_rocr
def test_emulated_rocr_times_each_replayed_dispatch(emulated, tmp_path):
    import compiler

    code = {n: compiler.compile(n, targets=[emulated.target]) for n in ("fill", "copy")}
    t, done = _timed_replay(emulated, code, 3, tmp_path)
    assert [x.kernel for x in t.times] == (["fill"] * 3 + ["copy"]) * 2
    assert all(x.start_ns < x.end_ns for x in t.times)
    assert {(x.queue_id, x.packet_id) for x in t.times} <= set(done)
    assert len(done) == len(set(done))
