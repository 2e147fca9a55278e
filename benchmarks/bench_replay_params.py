"""Replays with parameters against re-recording (issue 19), measured in the same run.

A command buffer of 5000 dispatches whose scalar changes at every submit:
- replay: recorded once with `cb.scalar("a", np.float32)` (or a grid `cb.param`), each
  submit passes `params={...}`: the driver patches the parameter sites and publishes;
- re-record (the baseline): every submit records a fresh command buffer with the value as
  a constant, finalizes and submits it (what a caller had to do before parameters).

HSA (amdgpu:virtual): host side only, as benchmarks/bench_dispatch.py measures it: the
lane's packet processor is stopped, so doorbells are plain stores and no kernel runs; the
times are the driver's whole submit path into the real virtual ring. Cases: one scalar
shared by the 5000 dispatches (their kernarg blocks stay one shared block), a scalar per
dispatch (5000 distinct parameters and blocks: the vectorized patch at full width), and
the grid as a parameter (packet grid_size plus hidden block count / remainder per row).

Vulkan (vulkan:0, lavapipe): submit host time, with the lane waited for between submits
(outside the timing). A scalar is a push constant, copied into the VkCommandBuffer when it
is recorded, so a new value records the instance again (inside the driver, no Python
re-recording); a grid parameter is an indirect dispatch and records nothing.

    .venv/bin/python benchmarks/bench_replay_params.py [--quick] [--no-vulkan]
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

ROOT = Path(__file__).resolve().parents[1]
N = 1 << 12  # elements per dispatch (HSA: nothing runs, only the packet says so)
DISPATCHES = 5000


def _hsa_device(queue_size: int, kernarg_mib: int):
    dev = amdgpu.open(
        "amdgpu:virtual", lanes=1, queue_size=queue_size, kernarg_bytes=kernarg_mib << 20
    )
    processor = getattr(dev.lanes_[0].queue, "processor", None)
    if processor is not None:
        processor.stop()  # the consumer thread never starts: host cost only
    return dev


def _record(dev, k, mode: str, value=None):
    """5000 saxpy_hidden dispatches over slots 0 and 1. mode: "shared" (one scalar for
    all), "distinct" (a scalar each), "grid" (the grid a parameter); value None: record
    placeholders, else the constant(s) in their place (the re-record baseline)."""
    cb = dev.command_buffer()
    y, x = cb.binding(0), cb.binding(1)
    shared = cb.scalar("a", np.float32) if value is None and mode == "shared" else None
    grid = cb.param("g") if value is None and mode == "grid" else None
    for i in range(DISPATCHES):
        if mode == "grid":
            g = grid if value is None else value
            a: object = np.float32(2.0)
        else:
            g = N
            if value is None:
                a = shared if shared is not None else cb.scalar(f"a{i}", np.float32)
            else:
                a = np.float32(value + (i if mode == "distinct" else 0))
        cb.dispatch(k, g, 256, (y, x, a, np.uint32(N)))
    return cb.finalize()


def _params(mode: str, v: float) -> dict:
    if mode == "shared":
        return {"a": v}
    if mode == "grid":
        return {"g": 256 * (1 + int(v) % 16)}
    return {f"a{i}": v + i for i in range(DISPATCHES)}


def bench_hsa(code: bytes, mode: str, reps: int, rerecord: bool) -> list[float]:
    queue = 1 << ((DISPATCHES + 1) * (reps + 1)).bit_length()
    dev = _hsa_device(min(queue, 0x40000), (DISPATCHES * 288 * (reps + 1) >> 20) + 8)
    k = dev.load(code).kernel("saxpy_hidden")
    bufs = [dev.buffer(N * 4) for _ in range(2)]
    cb = _record(dev, k, mode)
    dev.submit(cb, bufs, params=_params(mode, 0.0))  # warm
    times = []
    for i in range(1, reps + 1):
        v = float(i)
        t0 = time.perf_counter()
        if rerecord:
            value = 256 * (1 + i % 16) if mode == "grid" else v
            dev.submit(_record(dev, k, mode, value), bufs)
        else:
            dev.submit(cb, bufs, params=_params(mode, v))
        times.append((time.perf_counter() - t0) * 1e6)
    dev.close(timeout=0)
    return times


def bench_vulkan(mode: str, reps: int, rerecord: bool) -> list[float]:
    dev = amdgpu.open("vulkan:0")
    spv = (ROOT / "tests" / "data" / "vulkan" / "param_fill.spv").read_bytes()
    k = dev.load({"descriptors": spv}).kernel("main")  # out[i] = value for i < n
    out = dev.buffer(N * 4)

    def record(value=None):
        cb = dev.command_buffer()
        if value is None:
            a = cb.scalar("a", np.float32) if mode == "shared" else np.float32(1.0)
            g = cb.param("g") if mode == "grid" else N
        else:
            a = np.float32(value) if mode == "shared" else np.float32(1.0)
            g = value if mode == "grid" else N
        for _ in range(DISPATCHES):
            cb.dispatch(k, g, args=(cb.binding(0), a, np.uint32(N)))
        return cb.finalize()

    def params(i: int) -> dict:
        return {"a": float(i)} if mode == "shared" else {"g": 64 * (1 + i % 16)}

    cb = record()
    dev.submit(cb, [out], params=params(0)).wait(60)
    times = []
    for i in range(1, reps + 1):
        t0 = time.perf_counter()
        if rerecord:
            value = float(i) if mode == "shared" else 64 * (1 + i % 16)
            point = dev.submit(record(value), [out])
        else:
            point = dev.submit(cb, [out], params=params(i))
        times.append((time.perf_counter() - t0) * 1e6)
        point.wait(60)
    dev.close()
    return times


def _row(label: str, replay: list[float], rerecord: list[float]) -> str:
    r, b = statistics.median(replay), statistics.median(rerecord)
    return (f"{label:<34} {r:>11.0f} {min(replay):>9.0f} {r / DISPATCHES:>9.3f} "
            f"{b:>12.0f} {b / r:>7.1f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--no-vulkan", action="store_true", help="the HSA path only")
    opts = ap.parse_args(argv)
    from compiler.clang import compile_opencl

    code = compile_opencl(ROOT / "compiler" / "kernels" / "saxpy_hidden.cl", "gfx1100")
    reps, rr = (5, 3) if opts.quick else (20, 5)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{DISPATCHES} dispatches per submit, a value changing at every submit; "
          f"{os.cpu_count()} cores, load average {load}")
    print(f"{'case':<34} {'replay us':>11} {'(best)':>9} {'us/disp':>9} {'re-record us':>12} "
          f"{'ratio':>8}")
    for mode, label in (("shared", "HSA virtual: one scalar"),
                        ("distinct", "HSA virtual: a scalar per dispatch"),
                        ("grid", "HSA virtual: grid parameter")):
        print(_row(label, bench_hsa(code, mode, reps, False), bench_hsa(code, mode, rr, True)),
              flush=True)
    if not opts.no_vulkan:
        for mode, label in (("shared", "Vulkan lavapipe: one scalar"),
                            ("grid", "Vulkan lavapipe: grid parameter")):
            vr = max(3, reps // 4)
            print(_row(label, bench_vulkan(mode, vr, False), bench_vulkan(mode, vr, True)),
                  flush=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at the end {load}; ratio = re-record / replay (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
