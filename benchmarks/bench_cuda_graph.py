"""The vendor reference for chain-100 on an NVIDIA GPU: the same 100 dependent `x + 1`
kernels over 4096 floats, launched eagerly through CuPy and replayed as one CUDA graph.

Runs only where CuPy and a CUDA GPU exist (the H200 device machine); elsewhere it says so
and exits 0. Prints per-dispatch figures comparable to bench_vulkan.py's chain-100.

    python benchmarks/bench_cuda_graph.py [--n 100] [--reps 200]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="dependent kernels in the chain")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    try:
        import cupy as cp
    except ImportError:
        print("bench_cuda_graph: CuPy is not installed here; skipped (needs an NVIDIA GPU)")
        return
    add_one = cp.ElementwiseKernel("float32 x", "float32 y", "y = x + 1.0f", "add_one")
    a = cp.zeros(4096, dtype=cp.float32)
    b = cp.empty_like(a)
    stream = cp.cuda.Stream(non_blocking=True)

    def chain() -> None:
        src, dst = a, b
        for _ in range(args.n):
            add_one(src, dst)
            src, dst = dst, src

    with stream:
        chain()  # warm-up: compiles the kernel
        stream.synchronize()
        eager = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            chain()
            stream.synchronize()
            eager.append(time.perf_counter() - t0)
        stream.begin_capture()
        chain()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        replay = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            graph.launch(stream)
            stream.synchronize()
            replay.append(time.perf_counter() - t0)
    # With n even, each run adds n to `a`: warm-up, eager runs, one graph launch, replays.
    runs = 1 + args.reps + 1 + args.reps
    expected = float(args.n * runs)
    got = float(a[0])
    correct = args.n % 2 == 1 or abs(got - expected) < 1e-3
    e_us = statistics.median(eager) * 1e6
    g_us = statistics.median(replay) * 1e6
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(f"chain-{args.n} CuPy eager launches : {e_us:9.1f} us end to end, "
          f"{e_us / args.n:6.2f} us per dispatch (median of {args.reps})")
    print(f"chain-{args.n} CUDA graph replay   : {g_us:9.1f} us end to end, "
          f"{g_us / args.n:6.2f} us per dispatch (median of {args.reps}); "
          f"eager/graph = {e_us / g_us:.1f}x")
    check = "skipped (odd n)" if args.n % 2 else "correct" if correct else f"WRONG ({got})"
    print(f"result check: {check}")


if __name__ == "__main__":
    main()
