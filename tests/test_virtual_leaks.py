"""Nothing leaks and nothing stays locked: 10,000 create/destroy cycles of signals, queues and
allocations leave traced memory and the thread count flat (after a warm-up that fills the
allocators' free lists), and every lock is free afterwards."""

from __future__ import annotations

import gc
import threading
import tracemalloc

import pytest
from provider_suite import publish

from amdgpu.errors import SignalTimeout
from hsa.provider import SignalCondition
from hsa.virtual import VirtualProvider

try:
    from packets import barrier_and
except ImportError:  # pragma: no cover
    from packets.build import barrier_and

pytestmark = pytest.mark.hsa_virtual
CYCLES = 10_000
# Python's allocator keeps some arenas and dict/list slack; a real leak of even one
# 64-byte signal or a 256-byte queue header per cycle would exceed this by far.
SLACK_BYTES = 96 * 1024


def virtual_threads() -> int:
    """Threads of virtual systems (queue processors, copy engines), by their names."""
    return sum(t.name.startswith("virtual-") for t in threading.enumerate())


@pytest.fixture
def vp():
    p = VirtualProvider()
    yield p
    p.shut_down()


def _growth(cycle, warmup: int = 500, cycles: int = CYCLES) -> int:
    for _ in range(warmup):
        cycle()
    gc.collect()
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(cycles):
            cycle()
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return end - start


def _assert_unlocked(vp) -> None:
    for lock in (vp._lock, vp._signals.lock):
        assert lock.acquire(timeout=1.0), "a lock was left held"
        lock.release()


def test_signal_cycles_do_not_leak(vp):
    def cycle():
        s = vp.signal_create(1)
        vp.signal_subtract(s, 1)
        vp.signal_wait(s, SignalCondition.EQ, 0, 1.0)
        vp.signal_destroy(s)

    assert _growth(cycle) < SLACK_BYTES
    assert len(vp._signals) == 0
    _assert_unlocked(vp)


def test_timed_out_waits_do_not_leak(vp):
    s = vp.signal_create(1)

    def cycle():
        with pytest.raises(SignalTimeout):
            vp.signal_wait(s, SignalCondition.EQ, 0, 0.0)

    assert _growth(cycle, cycles=2_000) < SLACK_BYTES
    assert vp._signals._signals[s].waiters == []
    _assert_unlocked(vp)


def test_allocation_cycles_do_not_leak(vp):
    gpu = vp.gpu_agents()[0].handle
    cpu = vp.cpu_agents()[0].handle
    kernarg = next(p.handle for p in vp.agent_pools(cpu) if p.is_kernarg)
    device = next(p.handle for p in vp.agent_pools(gpu) if p.is_coarse_grained)

    def cycle():
        a = vp.memory_pool_allocate(kernarg, 256)
        b = vp.memory_pool_allocate(device, 8192)
        vp.memory_pool_free(b)
        vp.memory_pool_free(a)

    assert _growth(cycle) < SLACK_BYTES
    assert all(p.used == 0 for p in vp._pools.values())
    assert not vp._user_allocs
    _assert_unlocked(vp)


def test_queue_cycles_do_not_leak(vp):
    """Queues start their processor thread at the first doorbell, so a create/destroy pair
    costs two small allocations and a signal, and 10,000 of them stay fast."""
    gpu = vp.gpu_agents()[0].handle
    threads = virtual_threads()

    def cycle():
        vp.queue_destroy(vp.queue_create(gpu, 64))

    assert _growth(cycle) < SLACK_BYTES
    assert virtual_threads() == threads
    assert not vp.queues() and len(vp._signals) == 0
    assert len(vp.memory.allocations()) == len(vp._signals._slabs)
    _assert_unlocked(vp)


def test_running_queue_cycles_stop_their_threads(vp):
    """Each queue here runs a packet, so its thread starts and must be joined on destroy.
    300 cycles: a thread start/join costs ~0.1-1 ms on this 2-core machine."""
    gpu = vp.gpu_agents()[0].handle
    threads = virtual_threads()
    done = vp.signal_create(0)

    def cycle():
        q = vp.queue_create(gpu, 64)
        vp.signal_store(done, 1)
        publish(q, barrier_and(dep_signals=[], completion_signal=done))
        vp.signal_wait(done, SignalCondition.LT, 1, 5.0)
        vp.queue_destroy(q)

    assert _growth(cycle, warmup=50, cycles=300) < SLACK_BYTES
    assert virtual_threads() == threads
    _assert_unlocked(vp)
