"""The virtual queue's lock-free publish path: the doorbell (a plain store, a monotonic
highest-rung id, a wake only when the processor sleeps) and the write index (an atomic
add without a lock under the GIL), with several producer threads."""

from __future__ import annotations

import random
import sys
import threading

import pytest
from provider_suite import publish

from amdgpu.errors import HsaError, SignalTimeout
from hsa.provider import SignalCondition
from hsa.status import HSA_STATUS_ERROR_INVALID_SIGNAL
from hsa.virtual import VirtualProvider
from hsa.virtual.signals import W_VALUE
from packets import barrier_and

pytestmark = pytest.mark.hsa_virtual
LT, GTE = SignalCondition.LT, SignalCondition.GTE
DONE_S = 5.0


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch threads as often as the interpreter allows, so that races show up."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.fixture
def vp():
    p = VirtualProvider(gpus=("gfx1100",))
    yield p
    p.shut_down()


def _queue(vp, size=64):  # 64: the smallest queue gfx1100 takes
    return vp.queue_create(vp.gpu_agents()[0].handle, size)


def test_concurrent_doorbells_keep_the_highest_id(vp):
    """Producers ring out of order: the processor's highest rung id never goes back (a
    lost update would strand the packets after it)."""
    q = _queue(vp)
    q.processor.stop()  # only the bookkeeping: nothing runs
    ids = list(range(20000))
    random.Random(7).shuffle(ids)
    chunks = [ids[i::4] for i in range(4)]

    def ring(chunk):
        for i in chunk:
            q.doorbell(i)

    threads = [threading.Thread(target=ring, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert q.processor._doorbell == max(ids)
    assert vp.signal_load(q.doorbell_signal) in set(ids)  # the last store, as on hardware
    vp.queue_destroy(q)


@pytest.mark.parametrize("variant", ["as_built", "locked"])
def test_concurrent_write_index_adds_are_atomic(vp, variant):
    """The write index as this interpreter runs it (lock-free under the GIL) and the locked
    form that builds without a GIL use."""
    q = _queue(vp)
    if variant == "locked":
        q.add_write_index = q._add_write_index_locked
        q.cas_write_index = q._cas_write_index_locked
    got: list[list[tuple[int, int]]] = [[] for _ in range(4)]

    def reserve(slot):
        rng = random.Random(slot)
        for _ in range(5000):
            n = rng.randint(1, 7)
            got[slot].append((q.add_write_index(n), n))

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = sorted(s for g in got for s in g)
    total = sum(n for _, n in spans)
    assert q.load_write_index() == total
    pos = 0
    for start, n in spans:  # the reservations tile [0, total) with no overlap
        assert start == pos
        pos += n
    assert q.cas_write_index(total, total + 3) == total and q.load_write_index() == total + 3
    assert q.cas_write_index(0, 99) == total + 3 and q.load_write_index() == total + 3
    q.store_write_index(2**64 - 1)
    assert q.add_write_index(2) == 2**64 - 1 and q.load_write_index() == 1  # wraps
    vp.queue_destroy(q)


def test_sleeping_processor_wakes_for_every_doorbell(vp):
    """Publish, wait, repeat: each time the processor has gone back to sleep, so every
    doorbell must wake it (a lost wake-up hangs the wait)."""
    q = _queue(vp, 64)
    sig = vp.signal_create(0)
    for i in range(300):
        vp.signal_store(sig, 1)
        publish(q, barrier_and(dep_signals=[], completion_signal=sig))
        vp.signal_wait(sig, LT, 1, DONE_S)
        if i % 50 == 0:
            assert q.processor.needs_wake or q.processor._rung[0] >= q.load_read_index() - 1
    assert q.load_read_index() == 300
    vp.queue_destroy(q)


def test_producers_with_a_consuming_processor(vp):
    q = _queue(vp, 64)
    done = vp.signal_create(4 * 300)

    def produce():
        for _ in range(300):
            publish(q, barrier_and(dep_signals=[], completion_signal=done))

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    vp.signal_wait(done, LT, 1, DONE_S)
    assert q.load_read_index() == q.load_write_index() == 1200 and q.error is None
    vp.queue_destroy(q)


def test_doorbell_signal_waiters_and_odd_values_take_the_signal_path(vp):
    q = _queue(vp)
    q.processor.stop()
    seen = []
    waiter = threading.Thread(
        target=lambda: seen.append(vp.signal_wait(q.doorbell_signal, GTE, 5, DONE_S))
    )
    waiter.start()
    while not vp._signals.signal(q.doorbell_signal).waiters:
        threading.Event().wait(0.001)
    q.doorbell(5)  # a waiter on the doorbell signal itself: the locked store notifies it
    waiter.join(DONE_S)
    assert seen == [5]
    import numpy as np

    q.doorbell(np.int64(9))  # a numpy integer counts as its int
    assert q.processor._doorbell == 9 and vp.signal_load(q.doorbell_signal) == 9
    q.doorbell(3)  # lower: stored (last store wins) but the rung id stays
    assert q.processor._doorbell == 9
    words = vp._signals.signal(q.doorbell_signal)
    assert words.words[words.base + W_VALUE] == 3
    vp.queue_destroy(q)
    with pytest.raises(HsaError) as info:
        q.doorbell(10)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_SIGNAL


def test_the_flag_word_follows_each_unusual_state(vp):
    """VirtualQueue.flags: one byte per state that sends a doorbell to the locked path
    (waiters on and a note of the doorbell signal, kept by the signal table; destroyed;
    failed) and the processor's wake byte, so a doorbell reads one word."""
    from hsa.virtual.queues import FLAG_DESTROYED, FLAG_ERROR, FLAG_WAKE
    from hsa.virtual.signals import FLAG_NOTE, FLAG_WAITERS

    q = _queue(vp)
    assert bytes(q.flags[:4]) == bytes(4) and q.flags[FLAG_WAKE]  # not started: wake it
    waiter = threading.Thread(target=lambda: vp.signal_wait(q.doorbell_signal, GTE, 1, DONE_S))
    waiter.start()
    while not q.flags[FLAG_WAITERS]:
        threading.Event().wait(0.001)
    vp.signal_store(q.doorbell_signal, 1)
    waiter.join(DONE_S)
    assert not q.flags[FLAG_WAITERS]
    vp._signals.annotate([q.doorbell_signal], "why")
    assert q.flags[FLAG_NOTE]
    vp.signal_store(q.doorbell_signal, 0)  # a store re-arms it
    assert not q.flags[FLAG_NOTE]
    publish(q, b"\x07" + bytes(63))  # an invalid packet fails the queue
    for _ in range(500):
        if q.error is not None:
            break
        threading.Event().wait(0.01)
    assert q.flags[FLAG_ERROR] and not q.flags[FLAG_DESTROYED]
    vp.queue_destroy(q)
    assert q.flags[FLAG_DESTROYED] and q.destroyed and not q.flags[FLAG_WAKE]


def test_packets_rung_after_a_queue_failure_name_it(vp):
    q = vp.queue_create(vp.gpu_agents()[0].handle, 64)
    publish(q, b"\x07" + bytes(63))  # header type 7: an invalid packet fails the queue
    deadline = threading.Event()
    for _ in range(500):
        if q.error is not None:
            break
        deadline.wait(0.01)
    assert q.error is not None
    later = vp.signal_create(1)
    publish(q, barrier_and(dep_signals=[], completion_signal=later))
    with pytest.raises(SignalTimeout) as info:
        vp.signal_wait(later, LT, 1, 0.05)
    assert f"queue {q.id} stopped at packet 0" in str(info.value)
    vp.queue_destroy(q)
