"""Speed of the virtual GPU's ISA executor, in lane-instructions per second.

A lane-instruction is one instruction executed for one lane of a wave (scalar instructions
count the wave size, like the vector ones: the figure is instructions x wave size x waves).
Runs, each several times, best time kept, for each --targets executor (default gfx1100,
wave32 with WMMA, and gfx942, wave64 with MFMA):
  * clang saxpy (OpenCL C, -O2) over 2^20 floats, workgroups of 256 (the elementwise row);
  * IREE matmul f16 (WMMA / MFMA), 256x256x256 (or --matmul 64: the kernel library's own);
  * IREE matmul i8 -> i32 (v_wmma_i32_16x16x16_iu8 / v_mfma_i32_16x16x32_i8), same size,
    checked exact;
then the library's OpenCL copy kernel over --n floats through the driver on
amdgpu:virtual:gfx1100, :gfx1201 and :gfx1250 (the gfx11 and gfx12 executors); and, in the
same run, numpy computing each result directly, to state the overhead ratio, and each
target's figure as a ratio to the first target's. The machine may be shared: each row also
gives the rate over the process's CPU time (time.process_time), which other processes'
load disturbs less than the wall clock.

    python benchmarks/bench_executor.py [--n 1048576] [--matmul 256] [--repeat 3]
        [--targets gfx1100,gfx942] [--gemm 1024 [--only-gemm]] [--convolution 1024] [--json]

--convolution N runs only hipcc's 5x5 convolution over an N x N grid on gfx90a
(tests/data/codeobjects/hipcc_convolution.hsaco, shaped like ROCm's public sample; issue
32), checked exact, against numpy computing the same result in the same run.

--atomics runs only the atomics row per target, over --n lanes: clang OpenCL global
atomics (returning add_u32 over 4096 addresses, add_f32 over 256, max_u32 on one address,
cmpswap and exchange each lane its own address; checked against numpy) and the same kernel
with plain stores to the same addresses, each memory instruction timed on its own (thread
CPU time): nanoseconds per lane-instruction of an atomic and of a store, and their ratio.

--gemm N adds, per target, IREE's N^3 GEMM in f16 and in the target's fp8 (gfx942's
FNUZ, gfx950's and gfx12's OCP E4M3) with f32 results, one run each, checked bit-exact
against numpy (small-integer inputs make every sum exact). --bundles DIR takes the compiled
GEMMs from DIR (benchmarks/gemm_bundles holds the 1024^3 ones: a host without IREE runs
the row), compiling and saving there the missing ones.
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

from compiler.library import gemm_source
from hsa.virtual.gfx11.testing import TEST_KERNELS_CL, Harness, build_code_object, run_program

CPU_SECONDS: list[float] = []  # the best process CPU time of the last _best call


def _best(fn, repeat: int) -> float:
    """The best wall-clock seconds of `repeat` calls (their best CPU seconds go to
    CPU_SECONDS)."""
    best = cpu = float("inf")
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu = min(cpu, time.process_time() - c)
        best = min(best, time.perf_counter() - t)
    CPU_SECONDS[:] = [cpu]
    return best


def _rates(lane_instr: int, seconds: float) -> dict:
    return {"lane_instructions_per_s": lane_instr / seconds, "cpu_seconds": CPU_SECONDS[0],
            "lane_instructions_per_cpu_s": lane_instr / CPU_SECONDS[0]}


def bench_saxpy(h: Harness, n: int, repeat: int) -> dict:
    code = h.load(build_code_object(TEST_KERNELS_CL, "cl", mcpu=h.target))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    xa, ya = h.buffer(x), h.buffer(y)
    a = np.float32(2.5)

    def run() -> None:
        h.dispatch(code, "saxpy", (n,), (256,), [ya, xa, float(a), n])

    run()  # warm: decode and compile once
    seconds = _best(run, repeat)
    lane_instr = h.executor.last_lane_instructions
    rates = _rates(lane_instr, seconds)
    numpy_seconds = _best(lambda: a * x + y, max(repeat, 5))
    return {
        "kernel": f"clang saxpy ({h.target})", "row": "elementwise", "target": h.target,
        "elements": n, "seconds": seconds, "instructions": h.executor.last_instructions,
        "lane_instructions": lane_instr, **rates, "numpy_seconds": numpy_seconds,
        "overhead_vs_numpy": seconds / numpy_seconds,
    }




def bench_matmul_f16(h: Harness, repeat: int, size: int) -> dict | None:
    """IREE's matmul f16 (WMMA): the kernel library's 64x64, or an n x n one."""
    try:
        import compiler
        if size == 64:
            bundle = compiler.compile("matmul_f16", targets=[h.target], abi=())
        else:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"matmul_f16_{size}.mlir"
                path.write_text(gemm_source(size, "f16", func="matmul_f16"))
                bundle = compiler.compile(path, targets=[h.target], abi=())
    except Exception as e:  # noqa: BLE001
        return {"kernel": "iree matmul_f16", "skipped": str(e)}
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in bundle.program["inputs"]]
    run_program(h, bundle, inputs)
    seconds = _best(lambda: run_program(h, bundle, inputs), repeat)
    lane_instr = h.executor.last_lane_instructions
    rates = _rates(lane_instr, seconds)
    a, b = inputs
    numpy_seconds = _best(lambda: a.astype(np.float32) @ b.astype(np.float32), max(repeat, 5))
    return {
        "kernel": f"iree matmul_f16 ({h.target})", "row": "matmul f16", "target": h.target,
        "shape": [list(x.shape) for x in inputs],
        "seconds": seconds, "instructions": h.executor.last_instructions,
        "lane_instructions": lane_instr, **rates,
        "numpy_seconds": numpy_seconds, "overhead_vs_numpy": seconds / numpy_seconds,
    }


MATMUL_I8 = """
func.func @matmul_i8(%a: tensor<{n}x{n}xi8>, %b: tensor<{n}x{n}xi8>) -> tensor<{n}x{n}xi32> {{
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<{n}x{n}xi32>
  %f = linalg.fill ins(%c0 : i32) outs(%e : tensor<{n}x{n}xi32>) -> tensor<{n}x{n}xi32>
  %r = linalg.matmul ins(%a, %b : tensor<{n}x{n}xi8>, tensor<{n}x{n}xi8>)
                     outs(%f : tensor<{n}x{n}xi32>) -> tensor<{n}x{n}xi32>
  return %r : tensor<{n}x{n}xi32>
}}
"""


def bench_matmul_i8(h: Harness, repeat: int, size: int) -> dict:
    """IREE's matmul i8 x i8 -> i32: int8 WMMA; the result must equal numpy's exactly."""
    try:
        import compiler
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"matmul_i8_{size}.mlir"
            path.write_text(MATMUL_I8.format(n=size))
            bundle = compiler.compile(path, targets=[h.target], abi=())
    except Exception as e:  # noqa: BLE001
        return {"kernel": "iree matmul_i8", "skipped": str(e)}
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-128, 128, (size, size), dtype=np.int8) for _ in range(2))
    got = run_program(h, bundle, [a, b])[0]
    want = a.astype(np.int32) @ b.astype(np.int32)
    if not np.array_equal(got, want):
        raise SystemExit("matmul i8 on the executor differs from numpy")
    seconds = _best(lambda: run_program(h, bundle, [a, b]), repeat)
    lane_instr = h.executor.last_lane_instructions
    rates = _rates(lane_instr, seconds)
    a32, b32 = a.astype(np.int32), b.astype(np.int32)
    numpy_seconds = _best(lambda: a32 @ b32, max(repeat, 5))
    return {
        "kernel": f"iree matmul_i8 ({h.target})", "row": "matmul i8", "target": h.target,
        "shape": [[size, size]] * 2,
        "seconds": seconds, "instructions": h.executor.last_instructions,
        "lane_instructions": lane_instr, **rates,
        "numpy_seconds": numpy_seconds, "overhead_vs_numpy": seconds / numpy_seconds,
    }


# the fp8 type each target's matrix cores take (gfx942: the FNUZ variants; gfx1100: none)
FP8 = {"gfx942": "f8E4M3FNUZ", "gfx950": "f8E4M3FN", "gfx1201": "f8E4M3FN",
       "gfx1250": "f8E4M3FN"}


def _gemm_bundle(target: str, size: int, elem: str, t: str, bundles: Path | None):
    """IREE's GEMM for `target`: from `bundles` (a folder of saved KernelBundles, so that
    a machine without IREE runs the row) when it holds it, else compiled (and saved there)."""
    from compiler.bundle import KernelBundle

    saved = bundles / f"gemm_{elem}_{size}_{target}.bundle" if bundles else None
    if saved is not None and saved.exists():
        return KernelBundle.load(saved)
    import compiler
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"gemm_{elem}_{size}.mlir"
        path.write_text(gemm_source(size, t))
        bundle = compiler.compile(path, targets=[target], abi=())
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        bundle.save(saved)
    return bundle


def bench_gemm(h: Harness, size: int, elem: str, bundles: Path | None = None) -> dict:
    """IREE's n^3 GEMM (f16 or fp8 in, f32 out) once, with small-integer inputs so that
    every product and sum is exact: the result must equal numpy's bit for bit."""
    t = "f16" if elem == "f16" else FP8.get(h.target)
    if t is None:
        return {"kernel": f"iree gemm {elem} {size}^3 ({h.target})", "skipped":
                f"{h.target} has no fp8 matrix instructions"}
    bundle = _gemm_bundle(h.target, size, elem, t, bundles)
    rng = np.random.default_rng(3)
    dtypes = [s["dtype"] for s in bundle.program["inputs"]]
    ints = [rng.integers(-4, 5, (size, size)) for _ in range(2)]
    inputs = [x.astype(dt) for x, dt in zip(ints, dtypes, strict=True)]
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        got = run_program(h, bundle, inputs)[0]
    except Exception as e:  # noqa: BLE001 - a gap in the executor: say which
        return {"kernel": f"iree gemm {elem} {size}^3 ({h.target}, {t})",
                "skipped": f"does not run: {str(e).splitlines()[0][:300]}"}
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    # float64 BLAS is exact here (|sums| < 2**53) and much faster than numpy's int matmul
    want = (ints[0].astype(np.float64) @ ints[1].astype(np.float64)).astype(np.float32)
    if not np.array_equal(got, want):
        raise SystemExit(f"gemm {elem} on {h.target} differs from numpy")
    CPU_SECONDS[:] = [cpu]
    lane_instr = h.executor.last_lane_instructions
    return {
        "kernel": f"iree gemm {elem} {size}^3 ({h.target}, {t})", "row": f"gemm {elem}",
        "target": h.target, "shape": [[size, size]] * 2, "seconds": seconds,
        "instructions": h.executor.last_instructions, "lane_instructions": lane_instr,
        **_rates(lane_instr, seconds), "numpy_seconds": 0.0, "overhead_vs_numpy": 0.0,
        "exact": True,
    }


ATOMICS_CL = r"""
#define GID_X (__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + \
               __builtin_amdgcn_workitem_id_x())
#define R __ATOMIC_RELAXED
#define DEV __MEMORY_SCOPE_DEVICE
__kernel void atomics_row(__global unsigned int *u, __global float *f,
                          __global unsigned int *olds) {
  unsigned int i = GID_X, a = (i * 2654435761u) >> 20;  /* 4096 addresses */
  [[clang::atomic(no_remote_memory, no_fine_grained_memory)]] {
    olds[i] = __scoped_atomic_fetch_add(&u[a], i, R, DEV);
    __scoped_atomic_fetch_add(&f[a & 255], 0.5f, R, DEV);
    __scoped_atomic_fetch_max(&u[4096], i, R, DEV);
    unsigned int expected = 0;
    __scoped_atomic_compare_exchange_n(&u[8192 + i], &expected, i, 0, R, R, DEV);
    __scoped_atomic_exchange_n(&olds[i], a, R, DEV);
  }
}
__kernel void stores_row(__global unsigned int *u, __global float *f,
                         __global unsigned int *olds) {
  unsigned int i = GID_X, a = (i * 2654435761u) >> 20;
  olds[i] = u[a];
  *(volatile __global float *)&f[a & 255] = 0.5f;
  *(volatile __global unsigned int *)&u[4096] = i;
  *(volatile __global unsigned int *)&u[8192 + i] = i;
  *(volatile __global unsigned int *)&olds[i] = a;
}
"""


def _timed_memory(executor, names: tuple[str, ...]) -> dict[str, list[float]]:
    """Wrap the compiled memory instructions whose mnemonic contains one of `names` in
    every cached program of `executor` with timers: {mnemonic: [CPU seconds, lanes]}."""
    from hsa.virtual.isa.executor import MEMORY

    totals: dict[str, list[float]] = {}
    inner = getattr(executor, "_by_target", None)
    executors = list(inner.values()) if inner else [executor]
    for ex in executors:
        for prog in ex._programs.values():
            for c in prog.cache.values():
                if c.kind != MEMORY or not any(n in c.inst.name for n in names):
                    continue
                slot = totals.setdefault(c.inst.name, [0.0, 0])

                def timed(g, ctx, fn=c.fn, slot=slot):
                    t = time.thread_time()  # CPU time: other processes' load disturbs less
                    fn(g, ctx)
                    slot[0] += time.thread_time() - t
                    slot[1] += int(g.exec_mask().sum())

                c.fn = timed
    return totals


def bench_atomics(h: Harness, n: int, repeat: int) -> dict:
    """ns per lane-instruction of global atomics and of plain global stores (same run)."""
    code = h.load(build_code_object(ATOMICS_CL, "cl", mcpu=h.target))
    u, f, olds = h.alloc(4 * (8192 + n)), h.alloc(4 * 256), h.alloc(4 * n)
    per_lane = {}
    seconds = {}
    for kernel, names in (("atomics_row", ("_atomic_",)), ("stores_row", ("_store_",))):
        def run(kernel=kernel) -> None:
            h.dispatch(code, kernel, (n,), (256,), [u, f, olds])

        run()  # warm: decode and compile once
        if kernel == "atomics_row":  # one run from zeros: check what the atomics did
            h.memory.write(u, np.zeros(8192 + n, np.uint32))
            h.memory.write(f, np.zeros(256, np.float32))
            run()
            i = np.arange(n, dtype=np.uint64)
            a = (i * 2654435761 & 0xFFFFFFFF) >> 20
            got = h.read(u, np.uint32, 8192 + n)
            want_sum = np.bincount(a, weights=i, minlength=4096).astype(np.uint64) % (1 << 32)
            if not (np.array_equal(got[:4096], want_sum) and got[4096] == n - 1
                    and np.array_equal(got[8192:], i.astype(np.uint32))
                    and np.array_equal(h.read(f, np.float32, 256),
                                       np.bincount(a & 255, minlength=256) * 0.5)):
                raise SystemExit(f"atomics on {h.target} differ from numpy")
        totals = _timed_memory(h.executor, names)
        seconds[kernel] = _best(run, repeat)
        spent = sum(t for t, _ in totals.values())
        lanes = sum(k for _, k in totals.values())
        per_lane[kernel] = spent / lanes if lanes else float("nan")
        per_lane[kernel + "_by_instruction"] = {
            name: t / k * 1e9 for name, (t, k) in totals.items() if k}
    if h.read(u, np.uint32, 8192 + n)[4096] != n - 1:  # the stores ran last: u[4096] = i
        raise SystemExit(f"the stores kernel left a wrong value on {h.target}")
    ratio = per_lane["atomics_row"] / per_lane["stores_row"]
    return {
        "kernel": f"clang atomics vs stores ({h.target})", "row": "atomics vs stores",
        "target": h.target, "elements": n, "seconds": seconds["atomics_row"],
        "stores_seconds": seconds["stores_row"],
        "atomic_ns_per_lane_instruction": per_lane["atomics_row"] * 1e9,
        "store_ns_per_lane_instruction": per_lane["stores_row"] * 1e9,
        "atomic_ns_by_instruction": per_lane["atomics_row_by_instruction"],
        "store_ns_by_instruction": per_lane["stores_row_by_instruction"],
        "atomic_to_store": ratio,
    }


CONVOLUTION = Path(__file__).resolve().parents[1] / "tests/data/codeobjects/hipcc_convolution.hsaco"
CONV_MASK = np.array([1, 3, 0, -2, 0, 1, 4, 0, -8, -4, 2, 7, 0, -12, 0, 2, 3, 1.5, -8, -4,
                      0, 1, 0, -2, 0], np.float32)


def bench_convolution(n: int, repeat: int) -> dict:
    """hipcc's 5x5 convolution (the shape of ROCm's public sample, issue 32) over an n x n
    grid on the gfx90a executor, launched as the sample does (32x32 workgroups, (n + 32) /
    32 blocks a side); integer inputs make the result exact, checked against numpy."""
    from hsa.abi.codeobject import read_offload_bundle

    h = Harness("gfx90a")
    entries = read_offload_bundle(CONVOLUTION.read_bytes())
    code = h.load(entries["hipv4-amdgcn-amd-amdhsa--gfx90a"])
    h.memory.write(code.base + code.code_object.symbols["conv_mask"].value, CONV_MASK)
    padded = np.zeros((n + 4, n + 4), np.float32)
    padded[2:-2, 2:-2] = np.random.default_rng(0).integers(0, 256, (n, n))
    src, out = h.buffer(padded), h.alloc(4 * n * n)
    side = (n + 32) // 32 * 32

    def run() -> None:
        h.dispatch(code, "convolution_5x5", (side, side, 1), (32, 32, 1),
                   [src, out, struct.pack("<II", n, n)])

    def direct() -> np.ndarray:  # numpy computing the same result, the overhead's baseline
        acc = np.zeros((n, n), np.float32)
        for k in range(25):
            acc += padded[k // 5:k // 5 + n, k % 5:k % 5 + n] * CONV_MASK[k]
        return acc

    run()  # warm: decode and compile once
    seconds = _best(run, repeat)
    lane_instr = h.executor.last_lane_instructions
    rates = _rates(lane_instr, seconds)
    numpy_seconds = _best(direct, max(repeat, 3))
    if not np.array_equal(h.read(out, np.float32, n * n).reshape(n, n), direct()):
        raise SystemExit("the convolution on gfx90a differs from numpy")
    return {
        "kernel": f"hipcc convolution 5x5 {n}x{n} (gfx90a)", "row": "convolution",
        "target": "gfx90a", "elements": n * n, "seconds": seconds,
        "instructions": h.executor.last_instructions, "lane_instructions": lane_instr,
        **rates, "numpy_seconds": numpy_seconds, "overhead_vs_numpy": seconds / numpy_seconds,
    }


def bench_copy_targets(n: int, repeat: int) -> list[dict]:
    """The library copy kernel through the driver on each virtual target, same n."""
    import amdgpu
    import compiler
    from hsa.virtual.executor import executor_for

    rows = []
    src = np.arange(n, dtype=np.float32)
    numpy_seconds = _best(lambda: src.copy(), max(repeat, 5))
    for target in ("gfx1100", "gfx1201", "gfx1250"):
        bundle = compiler.compile("copy", targets=[target])
        with amdgpu.open(f"amdgpu:virtual:{target}") as dev:
            k = dev.load(bundle).kernel("copy")
            a, b = dev.buffer(src), dev.buffer(np.zeros(n, np.float32))

            def run(dev=dev, k=k, a=a, b=b) -> None:  # this target's, bound now
                dev.dispatch(k, n, 256, (b, a, np.uint32(n)))
                dev.synchronize()

            run()
            if not np.array_equal(b.to_numpy(np.float32), src):
                raise SystemExit(f"copy on {target} differs from its input")
            seconds = _best(run, repeat)
            rates = _rates(1, seconds)  # the CPU seconds of this run, scaled below
        ex = executor_for("gfx11" if target == "gfx1100" else "gfx12")
        ex = getattr(ex, "targets", {}).get(target, ex)
        lane_instr = ex.last_lane_instructions
        rows.append({
            "kernel": f"clang copy on {target} (driver)", "row": "copy (driver)",
            "target": target, "elements": n, "seconds": seconds,
            "instructions": ex.last_instructions, "lane_instructions": lane_instr,
            "lane_instructions_per_s": lane_instr / seconds, "cpu_seconds": rates["cpu_seconds"],
            "lane_instructions_per_cpu_s": lane_instr / rates["cpu_seconds"],
            "numpy_seconds": numpy_seconds,
            "overhead_vs_numpy": seconds / numpy_seconds,
        })
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--matmul", type=int, default=256, help="matmul size n (64: the library's)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--targets", default="gfx1100,gfx942",
                   help="executors for saxpy and the matmuls, comma-separated: gfx1100 "
                        "(wave32, WMMA), gfx1201/gfx1250 (gfx12, wave32), gfx942/gfx90a/gfx950 "
                        "(wave64, MFMA); the first is "
                        "the baseline of the ratio column")
    p.add_argument("--target", help="one target only (the same as --targets TARGET)")
    p.add_argument("--no-copy", action="store_true", help="skip the driver copy rows")
    p.add_argument("--gemm", type=int, default=0,
                   help="add an n^3 GEMM row (f16, and fp8 where the target has it) per "
                        "target, one run each, checked exact (issue 32: --gemm 1024)")
    p.add_argument("--only-gemm", action="store_true", help="the GEMM rows alone")
    p.add_argument("--bundles", type=Path, default=None,
                   help="folder of the GEMM rows' compiled bundles: used when there, else "
                        "compiled with IREE and saved there (benchmarks/gemm_bundles holds "
                        "the 1024^3 ones, for machines without IREE)")
    p.add_argument("--atomics", action="store_true",
                   help="only the atomics-against-stores row per target (--n lanes)")
    p.add_argument("--convolution", type=int, default=0, metavar="N",
                   help="only hipcc's 5x5 convolution over an N x N grid on gfx90a (issue 32; "
                        "1024: about a second a run on one core)")
    args = p.parse_args()
    results = []
    if args.convolution:
        r = bench_convolution(args.convolution, args.repeat)
        r["ratio_to_first_target"] = 1.0
        if args.json:
            print(json.dumps([r], indent=1))
            return
        print(f"{r['kernel']}: {r['seconds'] * 1e3:.1f} ms ({r['cpu_seconds'] * 1e3:.1f} ms "
              f"CPU), {r['instructions']} instructions, {r['lane_instructions'] / 1e6:.1f} M "
              f"lane-instructions, {r['lane_instructions_per_s'] / 1e6:.1f} M/s "
              f"({r['lane_instructions_per_cpu_s'] / 1e6:.1f} M per CPU second); numpy "
              f"{r['numpy_seconds'] * 1e3:.1f} ms (x{r['overhead_vs_numpy']:.0f}); exact")
        return
    if args.atomics:
        for target in (args.target or args.targets).split(","):
            r = bench_atomics(Harness(target.strip()), args.n, args.repeat)
            each = ", ".join(f"{k} {v:.0f}" for k, v in {**r["atomic_ns_by_instruction"],
                                                         **r["store_ns_by_instruction"]}.items())
            print(f"{r['kernel']}: {r['elements']} lanes; atomics "
                  f"{r['atomic_ns_per_lane_instruction']:.1f} ns per lane-instruction, stores "
                  f"{r['store_ns_per_lane_instruction']:.1f} ns (x{r['atomic_to_store']:.2f}); "
                  f"kernels {r['seconds'] * 1e3:.1f} ms and {r['stores_seconds'] * 1e3:.1f} ms;"
                  f" ns by instruction (CPU time): {each}")
        return
    if args.gemm:
        for target in (args.target or args.targets).split(","):
            h = Harness(target.strip())
            results += [bench_gemm(h, args.gemm, "f16", args.bundles),
                        bench_gemm(h, args.gemm, "fp8", args.bundles)]
        if args.only_gemm:
            args.targets, args.target, args.no_copy = "", None, True
    for target in filter(None, (args.target or args.targets).split(",")):
        h = Harness(target.strip())
        results += [bench_saxpy(h, args.n, args.repeat),
                    bench_matmul_f16(h, args.repeat, args.matmul),
                    bench_matmul_i8(h, args.repeat, max(args.matmul, 64))]
    if not args.no_copy:
        results += bench_copy_targets(args.n, args.repeat)
    baseline: dict[str, float] = {}  # row -> the first target's rate
    for r in results:
        if "skipped" not in r:
            first = baseline.setdefault(r["row"], r["lane_instructions_per_s"])
            r["ratio_to_first_target"] = r["lane_instructions_per_s"] / first
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        if "skipped" in r:
            print(f"{r['kernel']}: skipped ({r['skipped']})")
            continue
        print(f"{r['kernel']}: {r['seconds'] * 1e3:.1f} ms, {r['instructions']} instructions, "
              f"{r['lane_instructions'] / 1e6:.1f} M lane-instructions, "
              f"{r['lane_instructions_per_s'] / 1e6:.1f} M lane-instructions/s "
              f"({r['lane_instructions_per_cpu_s'] / 1e6:.1f} M per CPU second), "
              f"x{r['ratio_to_first_target']:.2f} of the first target; "
              f"numpy {r['numpy_seconds'] * 1e3:.3f} ms (x{r['overhead_vs_numpy']:.0f})")


if __name__ == "__main__":
    main()
