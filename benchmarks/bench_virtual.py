"""Benchmark the virtual AMD system's signal and packet paths against plain threading.

    python benchmarks/bench_virtual.py [--iterations N] [--packets N]

1. Signal round trip: the packet processor is blocked in a barrier-AND on signal S; the host
   stores S = 0 and sleeps in signal_wait on the completion signal C until the processor has
   consumed the packet and decremented C. Baseline: the same hand-off with two
   `threading.Event`s (host sets A, a worker thread waiting on A sets B, host waits on B).
2. Empty barrier-packet throughput: blocks of barrier-AND packets without dependencies
   published with `packets.Ring.publish_many` (one doorbell per block), one completion
   signal counting them down. Baseline: the same number of items handed one by one to a
   worker thread through a `queue.SimpleQueue` (put/get), the cheapest cross-thread
   hand-off in the standard library.

Figures are medians over repeats; ratios compare with the baseline of the same run.
"""

from __future__ import annotations

import argparse
import queue as stdqueue
import statistics
import threading
import time

import packets
from hsa.provider import SignalCondition
from hsa.virtual import VirtualProvider

LT, EQ = SignalCondition.LT, SignalCondition.EQ


def event_round_trip(iterations: int) -> float:
    """Seconds per host -> worker -> host hand-off with two threading.Events."""
    a, b = threading.Event(), threading.Event()
    stop = False

    def worker():
        while True:
            a.wait()
            a.clear()
            if stop:
                return
            b.set()

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    t0 = time.perf_counter()
    for _ in range(iterations):
        a.set()
        b.wait()
        b.clear()
    elapsed = time.perf_counter() - t0
    stop = True
    a.set()
    t.join()
    return elapsed / iterations


def signal_round_trip(p: VirtualProvider, q, ring: packets.Ring, iterations: int) -> float:
    """Seconds from the host's signal_store to the host waking on the completion signal."""
    gate, done = p.signal_create(1), p.signal_create(1)
    total = 0.0
    for _ in range(iterations):
        p.signal_store(gate, 1)
        p.signal_store(done, 1)
        ring.publish(packets.barrier_and(dep_signals=[gate], completion_signal=done))
        time.sleep(0)  # let the processor reach its wait on `gate`
        t0 = time.perf_counter()
        p.signal_store(gate, 0)
        p.signal_wait(done, LT, 1, 10.0)
        total += time.perf_counter() - t0
    p.signal_destroy(gate)
    p.signal_destroy(done)
    return total / iterations


def simplequeue_throughput(n: int) -> float:
    """Items per second handed to a worker thread one by one through a SimpleQueue."""
    sq: stdqueue.SimpleQueue = stdqueue.SimpleQueue()
    finished = threading.Event()

    def worker():
        for _ in range(n):
            sq.get()
        finished.set()

    t = threading.Thread(target=worker, daemon=True)
    t0 = time.perf_counter()
    t.start()
    for i in range(n):
        sq.put(i)
    finished.wait()
    elapsed = time.perf_counter() - t0
    t.join()
    return n / elapsed


def barrier_throughput(p: VirtualProvider, q, ring: packets.Ring, n: int) -> float:
    """Empty barrier-AND packets per second through the packet processor."""
    block_size = q.size // 2
    done = p.signal_create(n)
    block = packets.barrier_and_batch(completion_signal=done, count=block_size)
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        k = min(block_size, n - sent)
        ring.publish_many(block[:k])
        sent += k
    p.signal_wait(done, EQ, 0, 60.0)
    elapsed = time.perf_counter() - t0
    p.signal_destroy(done)
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=2000, help="round trips per repeat")
    ap.add_argument("--packets", type=int, default=20000, help="barrier packets per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    p = VirtualProvider()
    gpu = p.gpu_agents()[0].handle
    q = p.queue_create(gpu, 4096)
    ring = packets.Ring(q.ring, q.size, q.load_write_index, q.add_write_index,
                        q.load_read_index, q.doorbell, queue_id=q.id)
    try:
        signal_round_trip(p, q, ring, 100)  # warm-up: starts the processor thread
        barrier_throughput(p, q, ring, 1000)
        base_rt, rt, base_tp, tp = [], [], [], []
        for _ in range(args.repeats):
            base_rt.append(event_round_trip(args.iterations))
            rt.append(signal_round_trip(p, q, ring, args.iterations))
            base_tp.append(simplequeue_throughput(args.packets))
            tp.append(barrier_throughput(p, q, ring, args.packets))
        b_rt, v_rt = statistics.median(base_rt), statistics.median(rt)
        b_tp, v_tp = statistics.median(base_tp), statistics.median(tp)
        print(f"signal round trip (store -> processor -> completion -> wake): "
              f"{v_rt * 1e6:8.1f} us")
        print(f"  baseline threading.Event round trip:                       "
              f"{b_rt * 1e6:8.1f} us   ratio {v_rt / b_rt:5.2f}x")
        print(f"empty barrier-AND packets through the processor:            "
              f"{v_tp:8.0f} /s  ({1e6 / v_tp:.1f} us per packet)")
        print(f"  baseline SimpleQueue hand-off to a thread:                "
              f"{b_tp:8.0f} /s  ratio {b_tp / v_tp:5.2f}x slower than baseline")
    finally:
        p.queue_destroy(q)
        p.shut_down()


if __name__ == "__main__":
    main()
