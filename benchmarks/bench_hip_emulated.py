"""Our HSA dispatch against HIP's module launch on the same emulated GPU, same kernel, same
run: the host cost of getting one kernel launch to the GPU.

    python benchmarks/bench_hip_emulated.py [--launches N] [--replay N]

Both run on amdgpu:emulated: Debian's real ROCr 5.2.3 over the emulated AMD driver, and
Debian's libamdhip64 5.2.3 (through ctypes) over the same ROCr. The kernel is
a one-line fill (out[i] = value + i) for gfx90a, code object v4 (HIP 5.2 loads no v5);
saxpy_hidden's grid-stride loop does not finish as v4 on the gfx9 executor yet.

- ours: `dev.dispatch(kernel, n, 256, args)` of an amdgpu:emulated device (kernarg block,
  AQL packet, ROCr queue write index, doorbell);
- HIP: `hipModuleLaunchKernel(f, grid, block, 0, NULL, params, NULL)` on the null stream;
- replay: one submit of a recorded command buffer of N dispatches (ours only).

While a loop is timed the emulated device holds every doorbell (`EmulatedDevice.hold`), so
no kernel runs and no device thread competes with the publisher: the figures are host time
only. Then the device is released and both results are checked (y = a*x + y).

Needs hsa/virtual's gfx9 executor (the emulated GPU runs gfx90a code); without it, one line
says so and nothing is measured.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FILL_CL = """__kernel void fill(__global unsigned int* out, unsigned int value, unsigned int n) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = value + (unsigned int)i;
}
"""
N = 256  # elements: one workgroup, so checking the results after the timed loop is quick


def compile_v4(source: str, mcpu: str) -> bytes:
    """OpenCL C -> code object v4: compiler.clang's build with its version flag overridden
    (it offers v5/v6 only; HIP 5.2 loads up to v4). Checked below: HIP loads it."""
    import tempfile

    from compiler.clang import compile_opencl

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fill.cl"
        path.write_text(source)
        return compile_opencl(path, mcpu, extra_flags=["-mcode-object-version=4"])


def _hip():
    hip = ctypes.CDLL("libamdhip64.so.5")
    hip.hipModuleLaunchKernel.argtypes = (
        [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)
    return hip


def _check(status: int, call: str) -> None:
    if status != 0:
        raise SystemExit(f"bench_hip_emulated: {call} returned hipError {status}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=500)
    ap.add_argument("--replay", type=int, default=5000)
    opts = ap.parse_args(argv)

    import amdgpu
    from hsa.emulated import driver, runs_kernels

    if not runs_kernels():
        print("bench_hip_emulated: skipped: the emulated gfx90a needs hsa/virtual's gfx9 "
              "executor, which this checkout does not have")
        return 0
    code = compile_v4(FILL_CL, "gfx90a")
    dev = amdgpu.open("amdgpu:emulated", lanes=1, queue_size=1 << 14, kernarg_bytes=64 << 20)
    device = driver.device()
    hip = _hip()
    _check(hip.hipInit(0), "hipInit")

    # --- ours
    k = dev.load(code).kernel("fill")
    y = dev.buffer(np.zeros(N, dtype=np.uint32))
    args = (y, np.uint32(7), N)
    dev.dispatch(k, N, 256, args)
    dev.synchronize(timeout=60)
    device.hold()
    t0 = time.perf_counter()
    for _ in range(opts.launches):
        dev.dispatch(k, N, 256, args)
    ours = (time.perf_counter() - t0) / opts.launches * 1e6
    device.release()
    dev.synchronize(timeout=600)
    expect = 7 + np.arange(N, dtype=np.uint32)
    ours_ok = np.array_equal(y.to_numpy(np.uint32)[:N], expect)

    # --- HIP, same kernel, same GPU
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    image = ctypes.create_string_buffer(code, len(code))
    _check(hip.hipModuleLoadData(ctypes.byref(module), image), "hipModuleLoadData")
    _check(hip.hipModuleGetFunction(ctypes.byref(fn), module, b"fill"), "hipModuleGetFunction")
    dy = ctypes.c_void_p()
    _check(hip.hipMalloc(ctypes.byref(dy), N * 4), "hipMalloc")
    value, n = ctypes.c_uint32(7), ctypes.c_uint32(N)
    params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                     for v in (dy, value, n)])

    def launch() -> int:
        return hip.hipModuleLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, None, params, None)

    _check(launch(), "hipModuleLaunchKernel")
    _check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
    device.hold()
    t0 = time.perf_counter()
    for _ in range(opts.launches):
        launch()
    theirs = (time.perf_counter() - t0) / opts.launches * 1e6
    device.release()
    _check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
    out = np.empty(N, dtype=np.uint32)
    _check(hip.hipMemcpyDtoH(out.ctypes.data_as(ctypes.c_void_p), dy, N * 4), "DtoH")
    hip_ok = np.array_equal(out, expect)

    # --- replay of a recorded command buffer (ours), host side only
    cb = dev.command_buffer()
    by = cb.binding(0)
    for _ in range(opts.replay):
        cb.dispatch(k, N, 256, (by, np.uint32(7), N))
    cb = cb.finalize()
    device.hold()
    t0 = time.perf_counter()
    dev.submit(cb, [y])
    replay = (time.perf_counter() - t0) * 1e6
    dev.close(timeout=0)  # the held replay is dropped with the queue: nothing to check

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"amdgpu:emulated (ROCr 5.2.3 + HIP 5.2.3 over the emulated driver), {os.cpu_count()} "
          f"cores, load {load}; kernel fill gfx90a, {opts.launches} launches")
    print(f"  our dispatch        {ours:8.2f} us host per launch   results ok: {ours_ok}")
    print(f"  hipModuleLaunchKernel {theirs:6.2f} us host per launch   results ok: {hip_ok}")
    print(f"  HIP / ours          x{theirs / ours:.2f}")
    print(f"  replay of {opts.replay} dispatches: {replay / 1000:.2f} ms per submit "
          f"({replay / opts.replay:.3f} us per dispatch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
