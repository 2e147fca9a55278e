"""Host cost of dispatching on the HSA path (virtual agent): immediate dispatch, and replay
of recorded command buffers of 1, 100 and 5000 dispatches against re-recording them every
time (the baseline, measured in the same run).

How it measures host cost only: each measurement opens `amdgpu:virtual` with one lane and
pauses the lane's packet processor (the virtual queue's processor thread is stopped before
the first doorbell, so doorbells are plain signal stores and no consumer thread competes
for the GIL), then times the driver's whole submit path: kernarg block from the ring,
kernarg fill, packet (or packet block + binding patch), publish into the real virtual ring
(ROCr's protocol, packets.Ring) and the real doorbell store. Nothing runs, so no kernel time
is included and no ISA executor is needed. The device is then closed without waiting (the
queue and its pending packets are dropped). `--gate` holds the processor on a barrier-AND
gate instead: its thread exists and sleeps in the barrier's signal wait, so the figures
include whatever a live consumer thread costs the publisher. (A doorbell wakes the
processor only when it sleeps waiting for one; otherwise it raises the processor's highest
rung packet id without a lock: see hsa.virtual.queues.)

The immediate figure is printed for the compiled hot path (amdgpu/hsa_backend/hotpath.c) and,
as the baseline in the same run, for the same steps in Python (the path without the build).
The buffer checks of issue 35 are priced in the same run: dispatches with a new argument
tuple each time (every buffer converted and checked), once with the check and once with the
kernel's converter generated without it (KernargLayout.unchecked_fast_path).

The first line of output names the host (cores, load average): on a shared machine the
figures move with the load, so compare runs made side by side.

    .venv/bin/python benchmarks/bench_dispatch.py [--quick] [--gate]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import amdgpu
import packets
from amdgpu.hsa_backend import hotpath

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "compiler" / "kernels" / "saxpy_hidden.cl"
N = 1 << 12  # elements per dispatch (nothing runs: only the packet says so)


GATE = False  # --gate: hold the processor on a barrier instead of stopping it
DEVICE = "amdgpu:virtual"  # --device: or amdgpu:emulated (the real ROCr)


def _gated_device(queue_size: int, kernarg_mib: int):
    """A one-lane device whose queue consumes nothing: amdgpu:virtual's processor stopped
    (or, --gate, held on a barrier); amdgpu:emulated's once `_hold` is called (after the
    kernel is loaded: ROCr's loader uses its own queues)."""
    dev = amdgpu.open(DEVICE, lanes=1, queue_size=queue_size, kernarg_bytes=kernarg_mib << 20)
    if DEVICE.startswith("amdgpu:emulated"):
        return dev
    processor = getattr(dev.lanes_[0].queue, "processor", None)
    if not GATE and processor is not None:
        processor.stop()  # the virtual queue's consumer thread: never started now
    else:
        gate = dev.provider.signal_create(1)
        dev.lanes_[0].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
    return dev


def _kernel(dev, code):
    return dev.load(code).kernel("saxpy_hidden")


def bench_immediate(code, count: int, rounds: int, fresh: bool = False,
                    unchecked: bool = False) -> list[float]:
    """us per dispatch, one value per round (after one untimed round that warms the CPU
    clock and the caches). `fresh`: a new argument tuple per dispatch (its buffers are
    converted and checked each time; a reused tuple's bytes are kept). `unchecked`: the
    kernel's fast converter without the buffer-state test (issue 35's check), to print
    what the check costs."""
    out = []
    for i in range(rounds + 1):
        dev = _gated_device(max(1 << 14, 2 * count), 64)
        k = _kernel(dev, code)
        if unchecked:
            k.layout._fast = k.layout.unchecked_fast_path()  # before the launch plan keeps it
        x, y = dev.buffer(N * 4), dev.buffer(N * 4)
        a = np.float32(2.0)
        args = (y, x, a, N)
        _hold(dev)
        dev.dispatch(k, N, 256, args)  # warm the caches (geometry, packet template)
        t0 = time.perf_counter()
        if fresh:
            for _ in range(count):
                dev.dispatch(k, N, 256, (y, x, a, N))
        else:
            for _ in range(count):
                dev.dispatch(k, N, 256, args)
        if i:
            out.append((time.perf_counter() - t0) / count * 1e6)
        _close(dev)
    return out


def _hold(dev) -> None:
    """amdgpu:emulated: its device server holds every doorbell from now on (the packet
    processors sleep). amdgpu:virtual's processor is stopped already."""
    if DEVICE.startswith("amdgpu:emulated"):
        from hsa.emulated import protocol

        protocol.request(dev.provider.node_spec, protocol.OP_HOLD)


def _close(dev) -> None:
    """Close without waiting (the pending packets are dropped with the queue)."""
    spec = getattr(dev.provider, "node_spec", "")
    dev.close(timeout=0)
    if DEVICE.startswith("amdgpu:emulated"):
        from hsa.emulated import protocol

        protocol.request(spec, protocol.OP_RELEASE)


def bench_memcpy(nbytes: int, reps: int, ring_bytes: int = 0) -> list[float]:
    """us per copy of `nbytes` between two preallocated arrays: the floor of a replay,
    which must at least move its packet block into the ring. `ring_bytes`: copy into
    successive places of a destination that large instead (every slot of it written once
    first, as a fresh queue's are), as a replay into a queue that nothing consumes does:
    its destination is not in the cache."""
    src = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    dst = np.empty(max(nbytes, ring_bytes), np.uint8)
    dst[::64] = 0
    np.copyto(dst[:nbytes], src)  # warm
    times = []
    off = 0
    for _ in range(reps):
        if ring_bytes:
            off = off + nbytes if off + 2 * nbytes <= ring_bytes else 0
        t0 = time.perf_counter()
        np.copyto(dst[off:off + nbytes], src)
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def _record(dev, k, n: int, distinct: bool = False, mode: str | None = None):
    """n saxpy dispatches over binding slots 0 and 1. `distinct`: each with its own `a`, so
    no two kernarg blocks are alike (identical blocks are shared by the command buffer).
    `mode`: the command buffer's replay path ("pm4", "aql"; None: the target's default)."""
    cb = dev.command_buffer(mode=mode) if mode else dev.command_buffer()
    y, x = cb.binding(0), cb.binding(1)
    for i in range(n):
        cb.dispatch(k, N, 256, (y, x, np.float32(i if distinct else 2.0), N))
    return cb.finalize()


DRAINED_QUEUE = 1 << 14  # packets (1 MiB) of the queue a drained replay wraps around in


def bench_replay(code, n: int, reps: int, rerecord: bool, distinct: bool = False,
                 fresh: bool = False, drained: bool = False,
                 copies: list[float] | None = None) -> list[float]:
    """us per submit (replay), or per record+finalize+submit (rerecord). The bindings
    cycle through 4 buffers; `fresh`: views at a new offset every submit instead (binding
    addresses never seen before, so no replay instance is kept for them).

    The queue holds every submission (up to 128K packets, 8 MiB: each replay writes where
    nothing was written since the queue was made), or, `drained`, DRAINED_QUEUE packets
    whose read index is moved up to the write index after each timed submit, as a packet
    processor that kept up would have done: the replays wrap around the same 1 MiB, the
    steady state of a queue that is consumed.

    `copies`: afterwards, numpy copies of the replay's packet bytes into that queue's own
    ring memory where the next replays would go (us each, appended): the floor of a
    replay into that memory, measured on it.

    These rows are the AQL replay's (recorded with mode="aql" on every target, so a figure
    keeps its meaning where a target's default is the PM4 path); bench_replay_paths sets
    the two paths side by side."""
    per_submit_packets = n + 1
    if drained:
        queue = DRAINED_QUEUE
    else:
        # room for the warm-up, the replays and, when `copies` is asked for, one replay's
        # bytes more (the copy into this queue's ring after them: without it the floor was
        # never measured, `nan`)
        spare = 2 if copies is not None else 1
        queue = 1 << max(10, (per_submit_packets * (reps + spare)).bit_length())
        queue = min(queue, 0x20000)
        reps = min(reps, queue // per_submit_packets - spare)
    kernarg_mib = max(8, (n * 288 * (reps + 1) >> 20) + 8)
    dev = _gated_device(queue, kernarg_mib)
    k = _kernel(dev, code)
    bufs = [dev.buffer(N * 4 + (256 * (reps + 1) if fresh else 0)) for _ in range(4)]
    cb = _record(dev, k, n, distinct, mode="aql")
    _hold(dev)
    dev.submit(cb, [b.view(0, N * 4) for b in bufs[:2]])  # warm
    times = []
    for i in range(reps):
        bindings = [bufs[i % 4], bufs[(i + 1) % 4]]  # new buffers each time: no re-record
        if fresh:
            bindings = [b.view(256 * (i + 1), N * 4) for b in bindings]
        t0 = time.perf_counter()
        if rerecord:
            dev.submit(_record(dev, k, n, distinct, mode="aql"), bindings)
        else:
            dev.submit(cb, bindings)
        times.append((time.perf_counter() - t0) * 1e6)
        if drained:  # what the (paused) processor would have done meanwhile
            queue_ = dev.lanes_[0].queue
            queue_._store_read_index(queue_.load_write_index())
    if copies is not None:
        _copy_ahead(dev, per_submit_packets * 64, copies, wrap=drained)
    _close(dev)
    return times


def bench_replay_paths(code, n: int, reps: int) -> dict[str, list[float]]:
    """us per replay of one n-dispatch command buffer recorded twice on one device (same
    kernel, same bindings): as a resident PM4 buffer (one PM4_IB packet per replay) and as
    AQL packets into a drained queue (the read index moved up after each replay, as a
    processor that kept up would). The bindings cycle through 4 buffers; each table is
    replayed twice before the timing (the PM4 instances and AQL kept instances exist)."""
    dev = _gated_device(DRAINED_QUEUE, max(8, (n * 288 >> 20) + 8))
    k = _kernel(dev, code)
    bufs = [dev.buffer(N * 4) for _ in range(4)]
    cbs = {mode: _record(dev, k, n, mode=mode) for mode in ("pm4", "aql")}
    _hold(dev)
    queue = dev.lanes_[0].queue
    out: dict[str, list[float]] = {}
    for mode, cb in cbs.items():
        assert cb.path == mode, cb.path_reason
        tables = [[bufs[i % 4], bufs[(i + 1) % 4]] for i in range(4)]
        for t in tables + tables:  # warm: instances made, caches warm
            dev.submit(cb, t)
            queue._store_read_index(queue.load_write_index())
        times = []
        for i in range(reps):
            t = tables[i % 4]
            t0 = time.perf_counter()
            dev.submit(cb, t)
            times.append((time.perf_counter() - t0) * 1e6)
            queue._store_read_index(queue.load_write_index())
        out[mode] = times
    _close(dev)
    return out


def _copy_ahead(dev, nbytes: int, out: list[float], wrap: bool, most: int = 10) -> None:
    """Copies of `nbytes` into the queue's ring from its write index on, in successive
    places as the next replays would write them: while they fit before the ring's end
    (a queue that holds every replay: each copy where nothing was written since the queue
    was made), or, `wrap`, around the ring (a drained queue: from its start again)."""
    queue = dev.lanes_[0].queue
    ring = queue.ring.reshape(-1).view(np.uint8)
    src = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    off = queue.load_write_index() % queue.size * 64
    for _ in range(most):
        if off + nbytes > ring.nbytes:
            if not wrap:
                break
            off = 0
        t0 = time.perf_counter()
        np.copyto(ring[off:off + nbytes], src)
        out.append((time.perf_counter() - t0) * 1e6)
        off += nbytes


def _print_paths(code, reps: int, emulated: bool, header: bool = False) -> None:
    """The replay of 10000 dispatches rows: PM4 and AQL, same device, same kernel."""
    if emulated:  # ROCr's queues have no host-side read index: no drained replay
        print("replay of 10000 dispatches: n/a on amdgpu:emulated (no host-side read index)")
        return
    if header:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"replay paths, {DEVICE}, host side only (queue processor paused, the queue "
              f"drained after each replay); "
              f"{os.cpu_count()} cores, load average {load}")
    paths = bench_replay_paths(code, 10000, reps)
    for mode in ("pm4", "aql"):
        t = paths[mode]
        how = "one PM4_IB packet, goal <= 2" if mode == "pm4" else "drained queue, goal <= 20"
        print(f"replay of 10000 dispatches ({mode}): median {statistics.median(t):.1f} us "
              f"(best {min(t):.1f}, {len(t)} replays; {how} us)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--gate", action="store_true", help="hold the processor on a gate instead")
    ap.add_argument(
        "--code-object",
        help="a prebuilt saxpy_hidden code object for the device's target (for machines "
             "without the ziglang clang)",
    )
    ap.add_argument("--paths-only", action="store_true",
                    help="only the replay of 10000 dispatches rows (pm4 and aql, same run)")
    ap.add_argument("--device", default="amdgpu:virtual",
                    help="amdgpu:virtual (default) or amdgpu:emulated (the real ROCr, gfx90a)")
    opts = ap.parse_args(argv)
    global GATE, DEVICE
    GATE = opts.gate
    DEVICE = opts.device
    emulated = DEVICE.startswith("amdgpu:emulated")
    if opts.code_object:
        code = Path(opts.code_object).read_bytes()
    else:
        from compiler.clang import compile_opencl

        code = compile_opencl(KERNEL, "gfx90a" if emulated else "gfx1100")
    q = opts.quick
    if opts.paths_only:
        _print_paths(code, 10 if q else 40, emulated, header=True)
        return 0
    imm = bench_immediate(code, 2000 if q else 5000, 3)
    # the baseline in the same run: the same steps in Python (hotpath.c's reference)
    compiled, hotpath.MODULE = hotpath.MODULE, None
    try:
        imm_py = bench_immediate(code, 2000 if q else 5000, 3)
    finally:
        hotpath.MODULE = compiled
    # issue 35's buffer checks, side by side: a new argument tuple per dispatch (each
    # buffer converted and checked), with the check and without it
    checked = bench_immediate(code, 2000 if q else 5000, 3, fresh=True)
    bare = bench_immediate(code, 2000 if q else 5000, 3, fresh=True, unchecked=True)
    how = "processor held on a gate" if GATE else "queue processor paused"
    if emulated:
        how = "the real ROCr; the emulated driver holds the doorbells"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(
        f"HSA path, {DEVICE}, host side only ({how}; see the docstring); "
        f"{os.cpu_count()} cores, load average {load}"
    )
    print(
        f"immediate dispatch: {min(imm):.2f} us per dispatch (best of {len(imm)} rounds; "
        f"median {statistics.median(imm):.2f}; goal <= 1.0 us) on the {hotpath.status()} "
        f"hot path; the Python steps: {min(imm_py):.2f} us (median "
        f"{statistics.median(imm_py):.2f}), x{min(imm_py) / min(imm):.2f} of it"
    )
    print(
        f"buffer checks (issue 35), a new argument tuple per dispatch (2 buffers): "
        f"{min(checked):.2f} us checked (median {statistics.median(checked):.2f}), "
        f"{min(bare):.2f} us without the check (median {statistics.median(bare):.2f}): "
        f"{min(checked) - min(bare):+.3f} us per dispatch (best against best); a reused "
        f"tuple pays one identity test (Lifetime.ends)"
    )
    print(
        f"{'dispatches':>10} {'replay us':>10} {'(best)':>8} {'us/dispatch':>12} "
        f"{'re-record us':>13} {'ratio':>7}"
    )
    results = {}
    ring_copies: dict[bool, list[float]] = {}  # drained -> copies into the queue's ring
    # (dispatches, replays, re-records, distinct kernargs, fresh addresses, drained queue)
    cases = ((1, 400, 200, False, False, False), (100, 100, 20, False, False, False),
             (5000, 20, 3, False, False, False), (5000, 20, 3, True, False, False),
             (5000, 20, 3, False, True, False), (5000, 40, 3, False, False, True),
             (5000, 40, 3, True, False, True), (5000, 40, 3, False, True, True))
    if emulated:  # no host-side read index on ROCr's queues: no drained rows
        cases = tuple(c for c in cases if not c[5])
    for n, reps, rr_reps, distinct, fresh, drained in cases:
        if q:
            reps, rr_reps = max(3, reps // 4), max(2, rr_reps // 2)
        copies: list[float] = []
        times = bench_replay(code, n, reps, False, distinct, fresh, drained,
                             copies if n == 5000 else None)
        if copies:
            ring_copies.setdefault(drained, []).extend(copies)
        replay, best = statistics.median(times), min(times)
        rerecord = statistics.median(
            bench_replay(code, n, rr_reps, True, distinct, fresh, drained))
        results[(n, distinct, fresh, drained)] = (replay, best)
        label = f"{n}{'*' if distinct else ''}{'+' if fresh else ''}{'~' if drained else ''}"
        print(
            f"{label:>10} {replay:>10.1f} {best:>8.1f} {replay / n:>12.3f} {rerecord:>13.1f} "
            f"{rerecord / replay:>6.1f}x"
        )
    nbytes = 5001 * 64  # the packets of a 5000-dispatch replay (+ its barrier)
    floor = statistics.median(bench_memcpy(nbytes, 40))
    cold = statistics.median(bench_memcpy(nbytes, 40, 1 << 23))  # as the held queue's
    warm = statistics.median(bench_memcpy(nbytes, 40, DRAINED_QUEUE * 64))  # the drained's
    held_copy = statistics.median(ring_copies.get(False, [float("nan")]))
    drained_copy = statistics.median(ring_copies.get(True, [float("nan")]))
    print(
        f"baseline: memcpy of the same {nbytes} packet bytes (numpy copyto, no publish), "
        f"medians: {floor:.1f} us between two arrays; {cold:.1f} us into successive places "
        f"of an 8 MiB array (as the replays into a queue that holds them all: written where "
        f"nothing was since it was made), {held_copy:.1f} us into such a queue's own ring "
        f"after its replays ({len(ring_copies.get(False, []))} copies); {warm:.1f} us into "
        f"successive places of a 1 MiB array"
        + ("" if emulated else
           f", {drained_copy:.1f} us into a drained {DRAINED_QUEUE}-packet queue's ring (~)")
    )

    def line(drained: bool, copy: float) -> str:
        same = results[(5000, False, False, drained)]
        distinct = results[(5000, True, False, drained)]
        fresh = results[(5000, False, True, drained)]
        return (
            f"median {same[0]:.1f} us (best {same[1]:.1f}; x{same[0] / copy:.1f} of its "
            f"memcpy) with identical kernargs (one shared block), {distinct[0]:.1f} us (best "
            f"{distinct[1]:.1f}) with 5000 distinct kernarg blocks (*), {fresh[0]:.1f} us "
            f"(best {fresh[1]:.1f}) binding addresses never bound before (+)"
        )

    _print_paths(code, 10 if q else 40, emulated)
    drained_line = "n/a" if emulated else line(True, drained_copy)
    print(f"replay of 5000 dispatches (goal <= 25 us), into a queue that holds them all: "
          f"{line(False, held_copy)}; into a drained queue (~): {drained_line}. "
          "(x: of the copy into the same queue's ring.)")
    print("Every submit binds new buffers (4 in turn, or (+) views at new offsets: no kept "
          "replay instance); ratio = re-record / replay (medians).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
