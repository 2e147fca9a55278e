"""packet-trace benchmarks (issue 8).

1. Recording overhead: host cost of publishing a chain of 1000 dispatch packets through
   packets.Ring, without and with a TraceWriter sink (goal: <= 20% overhead on a chain-1000
   replay through the driver, which records a replay as template + patch, not a copy):
     - a replay: one `publish_many` of the 1000 packets;
     - per packet: 1000 `publish` calls;
     - a driver replay: `dev.submit` of a finalized 1000-dispatch command buffer on
       amdgpu:virtual (kernarg template copy, address patch, publish_many), gated so that the
       virtual packet processor stays idle while the submit is timed. Traced, the driver
       records the block template once and then one small BLOCK_REPLAY record per submit
       (no copy of the packets); the bare publish_many above copies its packets into a
       PACKET_BATCH record.
   The queue's consumer keeps up (read index == write index), so only the producer's side is
   timed. TraceWriter writes its file on a writer thread of its own: the first line of each
   pair times the publishing thread (rounds of back-to-back chains, the writer thread
   running meanwhile), the "+ file writes" line adds the flush that waits for the file
   writes still queued at the end of a round (no idle time between chains to hide them
   in). A driver replay is timed alone; the writer thread writes between submits.
   Both the minimum (the intrinsic cost) and the median (with the noise of a shared machine)
   of interleaved rounds are printed.
2. `packet-trace stats` over generated 1-million-packet traces (goal: <= 10 s): one made with
   publish_many (PACKET_BATCH records), one with publish (plain 112-byte records), one as
   the driver records command buffer replays (one BLOCK_TEMPLATE, then a BLOCK_REPLAY
   record per 1000 packets); timed in-process (stats.compute) and as the console command
   (process start included).

    .venv/bin/python benchmarks/bench_trace.py [--quick]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keepup_queue import KeepUpQueue  # noqa: E402

import packets  # noqa: E402
from tools.packet_trace import stats, synth  # noqa: E402

CHAIN = 1000
SIZE = 4096


def chain_block() -> np.ndarray:
    """1000 dependent dispatches (barrier bit set, one completion signal at the end)."""
    done = np.zeros(CHAIN, np.uint64)
    done[-1] = synth.SIGNAL_BASE
    return packets.kernel_dispatch_batch(
        workgroup_size=64, grid_size=4096, kernel_object=synth.SAXPY_OBJECT,
        kernarg_address=synth.KERNARG_BASE + 64 * np.arange(CHAIN, dtype=np.uint64),
        completion_signal=done, barrier=True).view(packets.PACKET)


def time_chains(publish, reps: int, writer) -> tuple[float, float]:
    """Seconds per chain of 1000 packets: on the publishing thread, and with the flush of the
    sink (the file writes still queued) added."""
    t0 = time.perf_counter()
    for _ in range(reps):
        publish()
    t1 = time.perf_counter()
    if writer is not None:
        writer.flush()
    t2 = time.perf_counter()
    return (t1 - t0) / reps, (t2 - t0) / reps


def recording_overhead(tmp: str, rounds: int, reps_many: int, reps_one: int) -> dict:
    ring = KeepUpQueue(SIZE, queue_id=1).ring()
    block = chain_block()
    singles = [block[i].tobytes() for i in range(CHAIN)]

    def many() -> None:
        ring.publish_many(block)

    def one_by_one() -> None:
        publish = ring.publish
        for raw in singles:
            publish(raw)

    writer = packets.TraceWriter(os.path.join(tmp, "overhead.aqltrace"))
    results: dict[str, list[float]] = {k: [] for k in (
        "many_off", "many_on", "many_on_flushed", "one_off", "one_on", "one_on_flushed")}
    previous = packets.set_sink(None)
    try:
        many(), one_by_one()  # warm up
        for _ in range(rounds):  # interleaved, so machine noise hits both sides alike
            for name, fn, reps in (("many", many, reps_many), ("one", one_by_one, reps_one)):
                packets.set_sink(None)
                results[f"{name}_off"].append(time_chains(fn, reps, None)[0])
                packets.set_sink(writer)
                publishing, flushed = time_chains(fn, reps, writer)
                results[f"{name}_on"].append(publishing)
                results[f"{name}_on_flushed"].append(flushed)
    finally:
        packets.set_sink(previous)
        writer.close()
    return {k: (min(v), statistics.median(v)) for k, v in results.items()}


SAXPY_CL = r"""
__kernel void saxpy(__global float *y, __global const float *x, float a, uint n) {
  size_t i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


class _NoOpExecutor:
    """Completes every dispatch at once: the benchmark times the host, not the ISA."""

    family = "gfx11"

    def run(self, dispatch, memory) -> None:
        pass


def driver_replay(tmp: str, rounds: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """dev.submit of a finalized 1000-dispatch command buffer on amdgpu:virtual, without and
    with a TraceWriter: only the submit call is timed, while a gate barrier holds the virtual
    packet processor (a Python thread of this process) so it does not compete for the GIL."""
    import amdgpu
    from compiler.clang import compile_opencl
    from hsa.virtual import executor

    executor.register_executor("gfx11", _NoOpExecutor)
    source = os.path.join(tmp, "saxpy.cl")
    with open(source, "w") as f:
        f.write(SAXPY_CL)
    code = compile_opencl(source, "gfx1100", code_object_version=5)
    dev = amdgpu.open("amdgpu:virtual")
    writer = packets.TraceWriter(os.path.join(tmp, "replay.aqltrace"))
    try:
        kernel = dev.load(code).kernel("saxpy")
        x = dev.buffer(np.ones(1024, np.float32))
        y = dev.buffer(np.ones(1024, np.float32))
        cb = dev.command_buffer()
        for _ in range(CHAIN):
            cb.dispatch(kernel, 1024, 64, (cb.binding(0), cb.binding(1), 2.0, 1024))
        cb.finalize()
        provider = dev.provider

        def submit(sink) -> float:
            gate = provider.signal_create(1)
            dev.lanes_[0].publish(packets.barrier_and(dep_signals=[gate]))
            packets.set_sink(sink)
            t0 = time.perf_counter()
            point = dev.submit(cb, [y, x])
            elapsed = time.perf_counter() - t0
            packets.set_sink(None)
            provider.signal_store(gate, 0)
            point.wait(60)
            provider.signal_destroy(gate)
            return elapsed

        submit(None), submit(writer)  # warm up
        off, on = [], []
        for i in range(rounds):  # interleaved, each side first every other round
            if i % 2:
                on.append(submit(writer))
                off.append(submit(None))
            else:
                off.append(submit(None))
                on.append(submit(writer))
    finally:
        packets.set_sink(None)
        writer.close()
        dev.close()
    return (min(off), statistics.median(off)), (min(on), statistics.median(on))


def stats_timing(tmp: str, count: int) -> list[tuple[str, int, float, float, float]]:
    out = []
    for label, single, replay in (("publish_many (batch records)", False, False),
                                  ("publish (plain records)", True, False),
                                  ("driver-style (replay records)", False, True)):
        path = os.path.join(tmp, f"stats_{int(single)}{int(replay)}.aqltrace")
        t0 = time.perf_counter()
        synth.write_many(path, count, batch=1000, single=single, replay=replay)
        made = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = stats.compute(path)
        inproc = time.perf_counter() - t0
        assert result["packets_total"] == count, result["packets_total"]
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tools.packet_trace", "stats", "--json", path],
                       check=True, stdout=subprocess.DEVNULL,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        command = time.perf_counter() - t0
        out.append((label, os.path.getsize(path), made, inproc, command))
        os.remove(path)
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    count = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        r = recording_overhead(tmp, rounds=3 if quick else 7, reps_many=20 if quick else 100,
                               reps_one=2 if quick else 10)
        print(f"recording overhead, chain of {CHAIN} dispatch packets (min | median of "
              "interleaved rounds):")
        for name, label in (("many", "publish_many (replay)"), ("one", "publish x1000")):
            for suffix, shown in (("on", label), ("on_flushed", "  + file writes (flush)")):
                (off, off_med), (on, on_med) = r[f"{name}_off"], r[f"{name}_{suffix}"]
                print(f"  {shown:26s} no sink {off * 1e6:8.1f} | {off_med * 1e6:8.1f} us   "
                      f"TraceWriter {on * 1e6:8.1f} | {on_med * 1e6:8.1f} us   overhead "
                      f"{100 * (on / off - 1):+.0f}% | {100 * (on_med / off_med - 1):+.0f}%"
                      + (" (a bare ring copies its packets)" if suffix == "on" and name == "many"
                         else ""))
        try:
            (off, off_med), (on, on_med) = driver_replay(tmp, rounds=20 if quick else 300)
            print(f"  {'driver replay (dev.submit)':26s} no sink {off * 1e6:8.1f} | "
                  f"{off_med * 1e6:8.1f} us   TraceWriter {on * 1e6:8.1f} | {on_med * 1e6:8.1f}"
                  f" us   overhead {100 * (on / off - 1):+.0f}% | "
                  f"{100 * (on_med / off_med - 1):+.0f}% (goal <= +20%; amdgpu:virtual, "
                  f"{CHAIN} dispatches)")
        except Exception as e:  # noqa: BLE001 - the driver part is optional here
            print(f"  driver replay: skipped ({type(e).__name__}: {e})")
        print(f"packet-trace stats over {count} packets:")
        for label, size, made, inproc, command in stats_timing(tmp, count):
            print(f"  {label:30s} file {size / 1e6:6.1f} MB (written in {made:.2f} s): "
                  f"stats {inproc:.2f} s in-process, {command:.2f} s as a command")


if __name__ == "__main__":
    main()
