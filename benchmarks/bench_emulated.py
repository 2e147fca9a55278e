"""amdgpu:emulated: the real ROCr (Debian's libhsa-runtime64 5.2.3) over the emulated AMD
driver, against the virtual AMD system's own provider, same run, same packets.

    python benchmarks/bench_emulated.py [--packets N] [--round-trips N]

1. Publish host cost: N BARRIER_AND packets (no dependencies, barrier bit, system scopes)
   written into the queue and rung one by one, through each provider's queue API (ROCr:
   hsa_queue_add_write_index + hsa_signal_store on the doorbell signal, i.e. ROCr's own
   queue code; virtual: VirtualQueue's), then one wait for the last completion. The figure
   is host time per packet for the publishing loop only: this is the host side of an
   immediate dispatch minus the kernarg write.
2. Barrier round trip: publish one BARRIER_AND with a completion signal, ring, and wait
   (the provider's signal_wait: on amdgpu:emulated the shim's wait, which yields the CPU
   while it looks and then sleeps on the KFD events page, with ROCr's own wait behind it)
   until the device side consumed it: the full host -> device -> host latency of one packet.
   On amdgpu:emulated the device server's doorbell thread retires such a barrier itself in
   C (hsa/emulated/shim/devside.c, take_barriers), without the Python packet processor.

Kernel dispatches, 5000-dispatch replay and HIP launches need the gfx9 executor, which
hsa/virtual does not have yet: they are not measured here.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hsa.emulated import EmulatedProvider
from hsa.provider import SignalCondition
from hsa.virtual import VirtualProvider

EQ = SignalCondition.EQ
HEADER = 3 | (1 << 8) | (2 << 9) | (2 << 11)  # BARRIER_AND, barrier bit, system scopes


def publish(queue, completion: int) -> None:
    idx = queue.add_write_index(1)
    while idx - queue.load_read_index() >= queue.size:
        time.sleep(0)
    off = (idx & (queue.size - 1)) * 64
    words = queue.ring[off: off + 64].view(np.uint64)
    words[1:7] = 0
    words[7] = completion
    queue.ring[off: off + 4].view(np.uint32)[0] = HEADER
    queue.doorbell(idx)


def publish_cost(provider, queue, n: int) -> float:
    """us of host time per published packet (the last one carries the completion)."""
    done = provider.signal_create(1)
    t0 = time.perf_counter()
    for _ in range(n - 1):
        publish(queue, 0)
    publish(queue, done)
    t1 = time.perf_counter()
    provider.signal_wait(done, EQ, 0, 60.0)
    provider.signal_destroy(done)
    return (t1 - t0) / n * 1e6


def round_trip(provider, queue, n: int) -> float:
    """Median us per publish -> device -> signal_wait round trip."""
    sig = provider.signal_create(1)
    times = []
    for _ in range(n):
        provider.signal_store(sig, 1)
        t0 = time.perf_counter()
        publish(queue, sig)
        provider.signal_wait(sig, EQ, 0, 10.0)
        times.append(time.perf_counter() - t0)
    provider.signal_destroy(sig)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packets", type=int, default=2000)
    ap.add_argument("--round-trips", type=int, default=200)
    args = ap.parse_args()
    emulated = EmulatedProvider()
    virtual = VirtualProvider(gpus=("gfx1100",))
    rows = {}
    try:
        for name, p in (("amdgpu:emulated (ROCr 5.2.3)", emulated), ("amdgpu:virtual", virtual)):
            gpu = p.gpu_agents()[0].handle
            q = p.queue_create(gpu, 1024)
            publish_cost(p, q, 200)  # warm-up
            rows[name] = (publish_cost(p, q, args.packets), round_trip(p, q, args.round_trips))
            p.queue_destroy(q)
    finally:
        emulated.shut_down()
        virtual.shut_down()
    base = rows["amdgpu:virtual"]
    print(f"{'device':32s} {'publish us/pkt':>15s} {'round trip us':>14s}")
    for name, (pub, rt) in rows.items():
        print(f"{name:32s} {pub:15.2f} {rt:14.1f}   (x{pub / base[0]:.2f}, x{rt / base[1]:.2f} "
              "vs virtual)")


if __name__ == "__main__":
    main()
