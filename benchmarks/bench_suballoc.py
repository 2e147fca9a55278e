"""Sub-allocation of small buffers against one HSA allocation each, same run (issue 20).

    python benchmarks/bench_suballoc.py [--device amdgpu:virtual] [--count 10000] [--repeat 3]

For each size, `count` buffers are allocated then freed, `repeat` times: on a device that
cuts them from slabs (suballocate=64 KiB: the default on ROCr) and gives empty slabs back to
the pool beyond one spare per size class (the policy), on the same kind of device that keeps
every slab until close (what the sub-allocator did before empty slabs were returned), and
on a device opened with suballocate=0 (one hsa_amd_memory_pool_allocate / _free per buffer,
the baseline). Prints the cost per buffer (allocate + free; best and median of the repeats),
the HSA calls made in the last repeat (allocations and frees), and the ratio of medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import amdgpu


def measure(dev, nbytes: int, count: int) -> tuple[float, int]:
    p = dev.provider
    calls = [0]
    real_alloc, real_free = p.memory_pool_allocate, p.memory_pool_free

    def alloc(*a):
        calls[0] += 1
        return real_alloc(*a)

    def free(*a):
        calls[0] += 1
        return real_free(*a)

    p.memory_pool_allocate, p.memory_pool_free = alloc, free
    try:
        for b in [dev.buffer(nbytes) for _ in range(100)]:  # warm: first slab, caches
            b.free()
        calls[0] = 0
        t0 = time.perf_counter()
        bufs = [dev.buffer(nbytes) for _ in range(count)]
        for b in bufs:
            b.free()
        seconds = time.perf_counter() - t0
    finally:
        del p.memory_pool_allocate, p.memory_pool_free
    return seconds / count, calls[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="amdgpu:virtual")
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with amdgpu.open(args.device, suballocate=64 << 10) as slabs, \
            amdgpu.open(args.device, suballocate=64 << 10) as keep, \
            amdgpu.open(args.device, suballocate=0) as direct:
        keep._slab_allocator(keep.buffer_pool).spare_slabs = sys.maxsize  # never returns
        print(f"{slabs.spec} ({slabs.name}): {args.count} buffers allocated then freed, "
              f"best / median of {args.repeat} (us per buffer), HSA calls of the last repeat")
        for nbytes in (64, 1024, 16 << 10, 64 << 10):
            rows = {}
            for name, dev in (("slabs", slabs), ("keep", keep), ("direct", direct)):
                runs = [measure(dev, nbytes, args.count) for _ in range(args.repeat)]
                times = [t for t, _ in runs]
                rows[name] = (min(times), statistics.median(times), runs[-1][1])
            text = "   ".join(f"{name} {b * 1e6:7.2f} / {m * 1e6:7.2f} ({c:5d} calls)"
                              for name, (b, m, c) in rows.items())
            ratio = rows["direct"][1] / rows["slabs"][1]
            print(f"  {nbytes:6d} B  {text}   direct/slabs x{ratio:5.1f}")


if __name__ == "__main__":
    main()
