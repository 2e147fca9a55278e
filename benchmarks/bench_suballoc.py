"""Sub-allocation of small buffers against one HSA allocation each, same run (issue 20).

    python benchmarks/bench_suballoc.py [--device amdgpu:virtual] [--count 10000]

For each size, `count` buffers are allocated then freed: once on a device that cuts them
from slabs (suballocate=64 KiB: the default on ROCr), once on a device opened with
suballocate=0 (one hsa_amd_memory_pool_allocate / _free per buffer, the baseline).
Prints the cost per buffer (allocate + free), the HSA calls made, and the ratio.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()
    with amdgpu.open(args.device, suballocate=64 << 10) as slabs, \
            amdgpu.open(args.device, suballocate=0) as direct:
        print(f"{slabs.spec} ({slabs.name}): {args.count} buffers allocated then freed")
        for nbytes in (64, 1024, 16 << 10, 64 << 10):
            s_us, s_calls = measure(slabs, nbytes, args.count)
            d_us, d_calls = measure(direct, nbytes, args.count)
            print(f"  {nbytes:6d} B  slabs {s_us * 1e6:7.2f} us/buffer ({s_calls:5d} HSA calls)"
                  f"   one allocation each {d_us * 1e6:7.2f} us/buffer ({d_calls:5d} HSA "
                  f"calls)   x{d_us / s_us:5.1f}")


if __name__ == "__main__":
    main()
