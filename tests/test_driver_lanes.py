"""Queue lanes and timelines on the virtual provider, with barrier packets only (no kernel)."""

from __future__ import annotations

import pytest

import amdgpu
import packets
from amdgpu.errors import QueueError, SignalTimeout
from amdgpu.hsa_backend.lanes import TIMELINE_START

pytestmark = pytest.mark.hsa_virtual


@pytest.fixture
def sink():
    s = packets.MemorySink()
    old = packets.set_sink(s)
    yield s
    packets.set_sink(old)


def _block_lane(dev, lane: int) -> int:
    """Make `lane` wait on a host-controlled signal; returns it (store 0 to release)."""
    gate = dev.provider.signal_create(1)
    dev.lanes_[lane].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
    return gate


def test_timeline_advances_once_per_submission():
    with amdgpu.open("amdgpu:virtual") as dev:
        ln = dev.lanes_[0]
        points = [dev.barrier(0) for _ in range(5)]
        assert [p.value for p in points] == [1, 2, 3, 4, 5]
        points[-1].wait(5.0)
        assert all(p.done() for p in points)
        assert dev.provider.signal_load(ln.signal) == TIMELINE_START - 5
        dev.synchronize()


@pytest.mark.parametrize("barrier_value", [False, True], ids=["barrier_and", "barrier_value"])
def test_cross_lane_wait_holds_until_the_other_lane_completes(sink, barrier_value):
    with amdgpu.open("amdgpu:virtual", use_barrier_value=barrier_value) as dev:
        gate = _block_lane(dev, 0)
        p0 = dev.barrier(0)
        first_new = len(sink.records)
        p1 = dev.barrier(1, wait=[p0])
        free = dev.barrier(1)  # queued behind p1 on lane 1
        other = dev.barrier(0)  # lane 0 itself is not affected by lane 1
        with pytest.raises(SignalTimeout):
            p1.wait(0.2)
        assert not p0.done() and not free.done()
        new = [r.decode() for r in sink.records[first_new:]]
        lane1 = [
            d
            for d, r in zip(new, sink.records[first_new:], strict=False)
            if r.queue_id == dev.lanes_[1].queue.id
        ]
        if barrier_value:
            assert lane1[0]["type"] == packets.PacketType.VENDOR_SPECIFIC
            assert lane1[0]["signal"] == dev.lanes_[0].signal
            assert lane1[0]["value"] == TIMELINE_START - p0.value + 1
        else:
            assert lane1[0]["type"] == packets.PacketType.BARRIER_AND
            proxy = lane1[0]["dep_signal"][0]
            lane0 = [
                d
                for d, r in zip(new, sink.records[first_new:], strict=False)
                if r.queue_id == dev.lanes_[0].queue.id
            ]
            assert any(
                d["type"] == packets.PacketType.BARRIER_AND and d["completion_signal"] == proxy
                for d in lane0
            )
        assert lane1[-1]["completion_signal"] == dev.lanes_[1].signal
        dev.provider.signal_store(gate, 0)
        for p in (p0, p1, free, other):
            p.wait(5.0)
        dev.synchronize()


def test_lanes_are_not_fifo_between_each_other():
    with amdgpu.open("amdgpu:virtual") as dev:
        gate = _block_lane(dev, 0)
        blocked = dev.barrier(0)
        unrelated = dev.barrier(1)
        unrelated.wait(5.0)  # lane 1 finishes while lane 0 is held
        assert not blocked.done()
        with pytest.raises(SignalTimeout) as e:
            dev.synchronize(timeout=0.2)
        assert "\n" not in str(e.value)
        dev.provider.signal_store(gate, 0)
        dev.synchronize()


def test_wait_on_a_point_never_submitted_times_out_at_once():
    with amdgpu.open("amdgpu:virtual") as dev:
        p = dev.barrier(0)
        from amdgpu.device import TimelinePoint

        with pytest.raises(SignalTimeout, match="never comes"):
            TimelinePoint(0, p.value + 5, dev.lanes_[0]).wait(1.0)


def test_queue_error_surfaces_on_next_call_and_other_lanes_keep_working():
    with amdgpu.open("amdgpu:virtual") as dev:
        bad = bytearray(packets.barrier_and(dep_signals=[], barrier=True))
        bad[0] = 0x7F  # packet type 127: not an AQL packet type
        dev.lanes_[0].publish(bytes(bad))
        dev.barrier(1).wait(5.0)
        with pytest.raises(QueueError) as e:
            for _ in range(100):
                dev.barrier(0).wait(1.0)
        assert e.value.status != 0 and "lane 0" in str(e.value)
        with pytest.raises(QueueError):
            dev.synchronize(timeout=1.0)
        dev.barrier(1).wait(5.0)  # lane 1 still runs


def test_proxy_signals_are_recycled():
    with amdgpu.open("amdgpu:virtual", use_barrier_value=False) as dev:
        for _ in range(10):
            gate = _block_lane(dev, 0)
            p0 = dev.barrier(0)
            p1 = dev.barrier(1, wait=[p0])
            dev.provider.signal_store(gate, 0)
            p1.wait(5.0)
            dev.lanes_[1].completed()
        assert 1 <= len(dev.signal_pool._all) <= 2


def test_timestamp_marks_bracket_work_without_touching_the_timeline():
    with amdgpu.open("amdgpu:virtual") as dev:
        if not dev.paths["profiling"].available:
            pytest.skip(f"no profiling path: {dev.paths['profiling'].reason}")
        before = dev.lanes_[0].submitted
        m0 = dev.mark(0)
        dev.barrier(0)
        m1 = dev.mark(0)
        assert dev.lanes_[0].submitted == before + 1  # marks are not timeline values
        elapsed = dev.elapsed_ns(m0, m1)
        assert isinstance(elapsed, int) and elapsed >= 0
        assert {m0, m1} <= set(dev.signal_pool._free)  # returned to the pool
        dev.synchronize()
