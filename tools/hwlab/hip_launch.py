"""HIP's module launch against our dispatch on amdgpu:emulated (the same emulated GPU under
the same real ROCr, same kernel, same run), for `hwlab bench` and
benchmarks/bench_hip_emulated.py. See that script's docstring for the method.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np

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
    """HIP through ctypes: sid's HIP 6.4 inside scripts/rocm6.sh, else Debian 12's 5.2."""
    try:
        hip = ctypes.CDLL("libamdhip64.so.6")
    except OSError:
        hip = ctypes.CDLL("libamdhip64.so.5")
    hip.hipModuleLaunchKernel.argtypes = (
        [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)
    return hip


def _check(status: int, call: str) -> None:
    if status != 0:
        raise SystemExit(f"bench_hip_emulated: {call} returned hipError {status}")


def hip_python_available() -> bool:
    try:
        from hip import hip  # noqa: F401 - hip-python (the venv of scripts/rocm6.sh has it)
    except ImportError:
        return False
    return True


def measure(launches: int = 500, replay_count: int = 5000, target: str = "gfx90a") -> dict:
    """{"ours_us", "hip_us", "replay_us", "ours_ok", "hip_ok", "launches", "replay",
    "target"}, plus "hip_python_us"/"hip_python_ok" where hip-python imports; or
    {"skipped": why} where the emulated GPU cannot run kernels."""

    import amdgpu
    from hsa.emulated import protocol, runs_kernels

    if not runs_kernels():
        return {"skipped": "the emulated gfx90a needs hsa/virtual's gfx9 executor, which this "
                           "checkout does not have"}
    code = compile_v4(FILL_CL, target)
    dev: Any = amdgpu.open(f"amdgpu:emulated:{target}", lanes=1, queue_size=1 << 14,
                           kernarg_bytes=64 << 20)  # an HsaDevice: its provider, close(timeout)
    spec = dev.provider.node_spec

    class device:  # the device server holds doorbells while a loop is timed
        @staticmethod
        def hold() -> None:
            protocol.request(spec, protocol.OP_HOLD)

        @staticmethod
        def release() -> None:
            protocol.request(spec, protocol.OP_RELEASE)

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
    for _ in range(launches):
        dev.dispatch(k, N, 256, args)
    ours = (time.perf_counter() - t0) / launches * 1e6
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
    for _ in range(launches):
        launch()
    theirs = (time.perf_counter() - t0) / launches * 1e6
    device.release()
    _check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
    out = np.empty(N, dtype=np.uint32)
    _check(hip.hipMemcpyDtoH(out.ctypes.data_as(ctypes.c_void_p), dy, N * 4), "DtoH")
    hip_ok = np.array_equal(out, expect)
    extra_rows = _hip_python(code, launches, device, expect) if hip_python_available() else {}

    # --- replay of a recorded command buffer (ours), host side only
    cb = dev.command_buffer()
    by = cb.binding(0)
    for _ in range(replay_count):
        cb.dispatch(k, N, 256, (by, np.uint32(7), N))
    cb = cb.finalize()
    device.hold()
    t0 = time.perf_counter()
    dev.submit(cb, [y])
    replay = (time.perf_counter() - t0) * 1e6
    dev.close(timeout=0)  # the held replay is dropped with the queue: nothing to check
    device.release()

    return {"ours_us": ours, "hip_us": theirs, "replay_us": replay, "ours_ok": ours_ok,
            "hip_ok": hip_ok, "launches": launches, "replay": replay_count, "target": target,
            **extra_rows}


def _hip_python(code: bytes, launches: int, device: Any, expect: np.ndarray) -> dict:
    """hip-python's hipModuleLaunchKernel, as its documentation calls it (the arguments as
    a tuple in `extra`, packed by hip-python per call), same kernel, same GPU."""
    from hip import hip

    def ok(result: Any) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if err != hip.hipError_t.hipSuccess:
            raise SystemExit(f"bench_hip_emulated: hip-python call returned {err}")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    module = ok(hip.hipModuleLoadData(code))
    fn = ok(hip.hipModuleGetFunction(module, b"fill"))
    dy = ok(hip.hipMalloc(N * 4))
    value, n = ctypes.c_uint32(7), ctypes.c_uint32(N)

    def launch() -> Any:
        return hip.hipModuleLaunchKernel(fn, 1, 1, 1, 256, 1, 1, sharedMemBytes=0,
                                         stream=None, kernelParams=None, extra=(dy, value, n))

    ok(launch())
    ok(hip.hipDeviceSynchronize())
    device.hold()
    t0 = time.perf_counter()
    for _ in range(launches):
        launch()
    us = (time.perf_counter() - t0) / launches * 1e6
    device.release()
    ok(hip.hipDeviceSynchronize())
    out = np.empty(N, dtype=np.uint32)
    ok(hip.hipMemcpy(out, dy, N * 4, hip.hipMemcpyKind.hipMemcpyDeviceToHost))
    ok(hip.hipFree(dy))
    return {"hip_python_us": us, "hip_python_ok": bool(np.array_equal(out, expect))}
