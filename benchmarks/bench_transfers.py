"""Asynchronous transfers against the synchronous path, same run (issue 20).

    python benchmarks/bench_transfers.py [--device amdgpu:virtual] [--repeats N]

1. Host to device, per size: `buf.write(array)` (the baseline: wait for the lanes, stage,
   hsa_memory_copy), `buf.write_async(array).wait()` (stage, then the copy engine through
   hsa_amd_memory_async_copy on a lane), and `buf.write_async(pinned)` from a
   `dev.host_buffer` (no staging).
2. Device to host, the same three: `to_numpy()`, `read_async().result()`, `read_async(pinned)`.
3. Copy/compute overlap: a fill kernel on lane 0 and a 16 MiB write_async on lane 1, each
   alone and then both in flight together; overlap = (alone sum - together) / shorter one.

Figures are medians over repeats; ratios compare with the synchronous baseline of the run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import amdgpu

SIZES = (64 << 10, 1 << 20, 16 << 20)


def median_s(fn, repeats: int) -> float:
    fn()  # warm: staging, kernels, the copy engine thread
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:7.2f} GB/s"


def transfer_cases(direction: str, buf, data, pinned) -> dict:
    if direction == "host->device":
        return {
            "write (sync)": lambda: buf.write(data),
            "write_async": lambda: buf.write_async(data, lane=1).wait(),
            "write_async pinned": lambda: buf.write_async(pinned, lane=1).wait(),
        }
    return {
        "to_numpy (sync)": lambda: buf.to_numpy(),
        "read_async": lambda: buf.read_async(lane=1).result(),
        "read_async pinned": lambda: buf.read_async(pinned, lane=1).wait(),
    }


def transfers(dev, repeats: int) -> None:
    for direction in ("host->device", "device->host"):
        print(f"\n{direction}")
        for n in SIZES:
            data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
            buf = dev.buffer(n)
            pinned = dev.host_buffer(data)
            if direction == "device->host":
                buf.write(data)
            cases = transfer_cases(direction, buf, data, pinned)
            base = None
            for name, fn in cases.items():
                s = median_s(fn, repeats)
                base = base or s
                print(f"  {n >> 10:6d} KiB  {name:20s} {s * 1e6:10.1f} us  {gbps(n, s)}"
                      f"  x{base / s:5.2f} vs sync")
            assert (buf.to_numpy() == data).all(), "bytes changed under the benchmark"
            buf.free()
            pinned.free()


def overlap(dev, repeats: int) -> None:
    n = 16 << 20
    data = np.ones(n, np.uint8)
    pinned = dev.host_buffer(data)
    copy_dst, fill_dst = dev.buffer(n), dev.buffer(1 << 20)

    def fill():
        return dev.fill(fill_dst, np.uint32(7), lane=0)

    def copy():
        return copy_dst.write_async(pinned, lane=1)

    t_fill = median_s(lambda: fill().wait(60), repeats)
    t_copy = median_s(lambda: copy().wait(60), repeats)

    def both():
        a, b = fill(), copy()
        a.wait(60)
        b.wait(60)

    t_both = median_s(both, repeats)
    gain = (t_fill + t_copy - t_both) / min(t_fill, t_copy)
    print("\noverlap (fill kernel 1 MiB on lane 0, 16 MiB pinned write_async on lane 1)")
    print(f"  fill alone {t_fill * 1e3:8.2f} ms   copy alone {t_copy * 1e3:8.2f} ms   "
          f"both {t_both * 1e3:8.2f} ms   sum/both x{(t_fill + t_copy) / t_both:4.2f}   "
          f"overlap {gain * 100:5.1f}% of the shorter")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="amdgpu:virtual")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-overlap", action="store_true")
    args = ap.parse_args()
    with amdgpu.open(args.device) as dev:
        print(f"{dev.spec} ({dev.name}), {args.repeats} repeats, medians")
        transfers(dev, args.repeats)
        if not args.no_overlap:
            overlap(dev, args.repeats)


if __name__ == "__main__":
    main()
