"""Vulkan transfer bandwidth against CuPy's memcpy, same run (issue 20).

    python benchmarks/bench_vulkan_transfers.py [--device vulkan] [--sizes-mib 1,16,256,1024]

Per size: host->device and device->host from pinned memory (`dev.host_buffer`, CuPy:
`cupy.cuda.alloc_pinned_memory`) and from plain numpy (staged; CuPy: `cupy.asarray` /
`.get()` of pageable memory), and device->device (`dev.copy`; CuPy:
`copy_from_device`). Each transfer is waited for and timed on the host (median of
--repeats); CuPy is timed the same way (memcpy, then stream synchronize). Where CuPy is
missing the Vulkan figures are printed alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import amdgpu


def median_s(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def vulkan_cases(dev, n: int) -> dict:
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    buf, other = dev.buffer(n), dev.buffer(n)
    pinned = dev.host_buffer(data)
    out = np.empty(n, np.uint8)
    cases = {
        "h2d pinned": lambda: buf.write_async(pinned, lane=1).wait(120),
        "h2d pageable": lambda: buf.write_async(data, lane=1).wait(120),
        "d2h pinned": lambda: buf.read_async(pinned, lane=1).wait(120),
        "d2h pageable": lambda: buf.read_async(out, lane=1).result(120),
        "d2d": lambda: dev.copy(other, buf, lane=1).wait(120),
    }
    buf.write(data)
    assert (buf.to_numpy() == data).all()
    return cases


def cupy_cases(n: int) -> dict:
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    mem = cp.cuda.alloc_pinned_memory(n)
    pinned = np.frombuffer(mem, np.uint8, n)
    pinned[:] = 1
    pageable = np.ones(n, np.uint8)
    src, dst = cp.empty(n, cp.uint8), cp.empty(n, cp.uint8)
    h2d, d2h, d2d = 1, 2, 3  # cudaMemcpyHostToDevice, DeviceToHost, DeviceToDevice

    def copy(dst_ptr, src_ptr, kind):
        cp.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, n, kind, stream.ptr)
        stream.synchronize()

    return {
        "h2d pinned": lambda: copy(src.data.ptr, pinned.ctypes.data, h2d),
        "h2d pageable": lambda: copy(src.data.ptr, pageable.ctypes.data, h2d),
        "d2h pinned": lambda: copy(pinned.ctypes.data, src.data.ptr, d2h),
        "d2h pageable": lambda: copy(pageable.ctypes.data, src.data.ptr, d2h),
        "d2d": lambda: copy(dst.data.ptr, src.data.ptr, d2d),
        "_keep": (mem, src, dst),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="vulkan")
    ap.add_argument("--sizes-mib", default="1,16,256,1024")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    try:
        import cupy as cp

        name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        print(f"baseline: CuPy {cp.__version__} on {name}")
    except Exception as e:  # noqa: BLE001 - no CUDA here: Vulkan figures alone
        cp = None
        print(f"baseline: none ({type(e).__name__}: {e})")
    with amdgpu.open(args.device) as dev:
        print(f"{dev.spec} ({dev.name}), medians of {args.repeats}, each transfer waited for")
        for mib in (float(x) for x in args.sizes_mib.split(",")):
            n = int(mib * (1 << 20))
            ours = {k: median_s(fn, args.repeats) for k, fn in vulkan_cases(dev, n).items()}
            theirs = {}
            if cp is not None:
                cases = cupy_cases(n)
                theirs = {k: median_s(fn, args.repeats) for k, fn in cases.items()
                          if not k.startswith("_")}
            for k, s in ours.items():
                line = f"  {mib:7.0f} MiB  {k:13s} vulkan {n / s / 1e9:7.2f} GB/s"
                if k in theirs:
                    t = theirs[k]
                    line += f"   cupy {n / t / 1e9:7.2f} GB/s   x{t / s:5.2f} of cupy"
                print(line, flush=True)
            dev.synchronize()


if __name__ == "__main__":
    main()
