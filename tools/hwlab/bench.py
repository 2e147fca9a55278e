"""hwlab bench: dispatch latency, replay cost and throughput per device, with baselines.

Our figures (per device, through the driver's public API):
  dispatch latency   saxpy (IREE, 1 dispatch): dispatch + wait, median round trip
  host submit cost   the same dispatch, host time of `dev.dispatch` alone (pipelined)
  replay cost        chain-16 (16 dependent dispatches) recorded once: host time of one
                     `dev.submit`, against dispatching the same 16 immediately
  chain round trip   chain-16 replay + wait
  throughput         N saxpy dispatches back to back, then one synchronize

Baselines, measured in the same run:
  IREE's own runtime (iree.runtime) on the same kind of device: the `vulkan` driver for a
  Vulkan device (the same physical device, matched by name), `local-task` (llvm-cpu) as the
  CPU reference for HSA devices (the virtual agent runs on the CPU too). Inputs are device
  arrays; an IREE call is synchronous (it returns when its results are ready), so its call
  time is a round trip and its throughput is one call at a time.
  HIP through hip-python where libamdhip64 exists (else a skipped row with the reason).
"""

from __future__ import annotations

import ctypes.util
import glob
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ground.errors import AmdgpuError

CHAIN = 16


# --- our measurements -----------------------------------------------------------------------
def _median_us(samples: list[float]) -> float:
    return float(np.median(samples) * 1e6) if samples else float("nan")


def _program(device: Any, name: str):
    import compiler
    from amdgpu.program import ProgramRunner
    from compiler import library

    targets = ["vulkan"] if device.backend == "vulkan" else [device.target]
    runner = ProgramRunner(device, compiler.compile(name, targets=targets))
    buffers = runner.allocate(library.example_inputs(name, 0))
    return runner, buffers


def dispatch_latency(device: Any, repeat: int) -> dict[str, float]:
    """saxpy: median dispatch + wait round trip, and median host time of dispatch alone."""
    runner, buffers = _program(device, "saxpy")
    try:
        runner.run_immediate(buffers)
        device.synchronize(60)  # warm: pipelines, caches
        trips, host = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            point = runner.run_immediate(buffers)
            t1 = time.perf_counter()
            point.wait(60)
            t2 = time.perf_counter()
            host.append(t1 - t0)
            trips.append(t2 - t0)
        return {"round_trip_us": _median_us(trips), "host_submit_us": _median_us(host)}
    finally:
        buffers.free()


def replay_cost(device: Any, repeat: int, dispatches: int = CHAIN) -> dict[str, float]:
    """chain-N: host time of one replayed submit vs immediate dispatch of the same N, and
    the replay's round trip."""
    runner, buffers = _program(device, f"chain_{dispatches}")
    try:
        runner.record()
        runner.replay(buffers)
        runner.run_immediate(buffers)
        device.synchronize(60)
        replay_host, trips, immediate_host = [], [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            point = runner.replay(buffers)
            t1 = time.perf_counter()
            point.wait(60)
            replay_host.append(t1 - t0)
            trips.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            point = runner.run_immediate(buffers)
            immediate_host.append(time.perf_counter() - t0)
            point.wait(60)
        return {
            "replay_host_us": _median_us(replay_host),
            "immediate_host_us": _median_us(immediate_host),
            "replay_round_trip_us": _median_us(trips),
            "dispatches": dispatches,
        }
    finally:
        buffers.free()


def throughput(device: Any, repeat: int) -> dict[str, float]:
    """saxpy dispatched `repeat` times back to back, one synchronize: dispatches per second."""
    runner, buffers = _program(device, "saxpy")
    try:
        runner.run_immediate(buffers)
        device.synchronize(60)
        t0 = time.perf_counter()
        for _ in range(repeat):
            runner.run_immediate(buffers)
        device.synchronize(600)
        elapsed = time.perf_counter() - t0
        return {"dispatches_per_s": repeat / elapsed, "dispatches": repeat}
    finally:
        buffers.free()


def empty_submission_rate(device: Any, repeat: int) -> dict[str, float]:
    """Timeline-only submissions (empty command buffer) with a wait each: no kernel runs,
    so this works on any device and shows the submission path's own cost."""
    cb = device.command_buffer()
    cb.finalize()
    device.submit(cb, []).wait(60)
    trips = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        device.submit(cb, []).wait(60)
        trips.append(time.perf_counter() - t0)
    return {"round_trip_us": _median_us(trips)}


# --- IREE baseline ---------------------------------------------------------------------------
class IreeBaseline:
    """IREE's own runtime running the same library programs on one HAL driver."""

    def __init__(self, driver: str, device_name: str | None = None):
        import iree.runtime as rt

        self.rt = rt
        self.driver = driver
        self.backend = {"local-task": "llvm-cpu", "vulkan": "vulkan-spirv"}[driver]
        self.extra = ["--iree-llvmcpu-target-cpu=generic"] if driver == "local-task" else []
        if device_name is not None and driver == "vulkan":
            # the same physical device as ours, matched by name
            hal_driver = rt.get_driver("vulkan")
            infos = hal_driver.query_available_devices()
            match = [i for i in infos if device_name in i["name"]]
            if not match:
                names = [i["name"] for i in infos]
                raise RuntimeError(f"IREE's vulkan driver lists {names}, not {device_name!r}")
            self.config = rt.Config(device=hal_driver.create_device(match[0]["device_id"]))
        else:
            self.config = rt.Config(driver)
        self.describe = f"IREE {_iree_version()} {driver}"
        self._functions: dict[str, tuple[Callable, list, Any]] = {}

    def function(self, name: str) -> tuple[Callable, list]:
        if name not in self._functions:
            import iree.compiler as ic

            from compiler import library

            vmfb = ic.compile_str(
                library.source(name), target_backends=[self.backend], extra_args=self.extra
            )
            ctx = self.rt.SystemContext(config=self.config)
            module = self.rt.VmModule.copy_buffer(ctx.instance, vmfb)
            ctx.add_vm_module(module)
            fn_name = next(n for n in module.function_names if not n.startswith("__"))
            fn = getattr(ctx.modules, module.name)[fn_name]
            inputs = [
                self.rt.asdevicearray(self.config.device, np.asarray(a))
                for a in library.example_inputs(name, 0)
            ]
            for _ in range(10):  # warm: the first calls also grow IREE's pools
                fn(*inputs)
            self._functions[name] = (fn, inputs, ctx)
        fn, inputs, _ = self._functions[name]
        return fn, inputs

    def call_us(self, name: str, repeat: int) -> float:
        """Median time of one call (a round trip: IREE calls return with results ready);
        `last_min_us` keeps the fastest call, since some drivers' waits come in steps."""
        fn, inputs = self.function(name)
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn(*inputs)
            samples.append(time.perf_counter() - t0)
        self.last_min_us = min(samples) * 1e6
        return _median_us(samples)

    def text(self, median_us: float) -> str:
        return f"{median_us:.1f} us ({self.describe} call; fastest {self.last_min_us:.1f} us)"


def _iree_version() -> str:
    try:
        from importlib.metadata import version

        return version("iree-base-runtime")
    except Exception:  # noqa: BLE001 - a version string is nice to have only
        return ""


def iree_for(device: Any, cache: dict) -> tuple[IreeBaseline | None, str]:
    """(baseline, why not) for a lab device: IREE vulkan for Vulkan devices, IREE
    local-task (CPU) for HSA devices."""
    driver = "vulkan" if device.backend == "vulkan" else "local-task"
    key = (driver, device.name if driver == "vulkan" else "")
    if key not in cache:
        try:
            cache[key] = (IreeBaseline(driver, device.name if driver == "vulkan" else None), "")
        except Exception as e:  # noqa: BLE001 - no IREE, no driver: a row says so
            cache[key] = (None, f"IREE {driver} unavailable: {str(e).splitlines()[0][:200]}")
    return cache[key]


# --- HIP baseline ----------------------------------------------------------------------------
def hip_status() -> tuple[bool, str]:
    """(usable, what was found) for a HIP baseline through hip-python."""
    found = ctypes.util.find_library("amdhip64")
    in_rocm = sorted(glob.glob("/opt/rocm*/lib/libamdhip64.so*"))
    if not found and not in_rocm:
        return False, (
            "libamdhip64 not found (ctypes.util.find_library('amdhip64') is None and no "
            "/opt/rocm*/lib/libamdhip64.so*): install ROCm's HIP runtime and hip-python"
        )
    try:
        from hip import hip  # noqa: F401 - hip-python
    except ImportError as e:
        return False, f"libamdhip64 at {found or in_rocm[0]} but hip-python is missing ({e})"
    return True, found or in_rocm[0]


def hip_latency_us(repeat: int) -> float:
    """hipMemsetAsync + hipStreamSynchronize round trip (the smallest HIP queue round trip)."""
    from hip import hip

    def ok(result):
        err = result[0] if isinstance(result, tuple) else result
        if err != hip.hipError_t.hipSuccess:
            raise AmdgpuError(f"HIP call failed: {err}")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    ptr = ok(hip.hipMalloc(4096))
    stream = ok(hip.hipStreamCreate())
    try:
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            ok(hip.hipMemsetAsync(ptr, 0, 4096, stream))
            ok(hip.hipStreamSynchronize(stream))
            samples.append(time.perf_counter() - t0)
        return _median_us(samples)
    finally:
        hip.hipStreamDestroy(stream)
        hip.hipFree(ptr)


def _hip_module_launch_rows(repeat: int) -> list[dict]:
    """Debian's HIP 5.2.3 hipModuleLaunchKernel (ctypes) against our dispatch, host time per
    launch, same kernel on the same amdgpu:emulated GPU (tools/hwlab/hip_launch.py)."""
    from tools.hwlab.hip_launch import measure

    spec = "amdgpu:emulated"
    try:
        r = measure(max(50, repeat), 5000)
    except BaseException as e:  # noqa: BLE001 - a baseline that fails is a row, not a crash
        return [_row(spec, "HIP module launch vs our dispatch", "failed", note=str(e)[:300])]
    if "skipped" in r:
        return [_row(spec, "HIP module launch vs our dispatch", "skipped", note=r["skipped"])]
    ok = "results checked" if r["ours_ok"] and r["hip_ok"] else "WRONG RESULTS"
    hip_python = []
    if "hip_python_us" in r:  # where hip-python imports (scripts/rocm6.sh's venv)
        checked = "results checked" if r["hip_python_ok"] else "WRONG RESULTS"
        hip_python = [_row(spec, "dispatch host cost (vs hip-python hipModuleLaunchKernel)",
                           f"{r['ours_us']:.2f} us", f"hip-python {r['hip_python_us']:.2f} us",
                           _ratio(r["ours_us"], r["hip_python_us"]),
                           f"fill {r['target']}, same run; {checked}")]
    return [
        _row(spec, "dispatch host cost (vs hipModuleLaunchKernel)", f"{r['ours_us']:.2f} us",
             f"HIP {r['hip_us']:.2f} us", _ratio(r["ours_us"], r["hip_us"]),
             f"fill {r['target']}, {r['launches']} launches, device held; {ok}"),
        *hip_python,
        _row(spec, f"replay of {r['replay']} dispatches", f"{r['replay_us'] / 1000:.2f} ms",
             f"HIP {r['hip_us'] * r['replay'] / 1000:.2f} ms as single launches",
             _ratio(r["replay_us"], r["hip_us"] * r["replay"]), "host time per submit"),
    ]


# --- rows ------------------------------------------------------------------------------------
def _ratio(ours: float, baseline: float, higher_is_better: bool = False) -> str:
    if not (ours > 0 and baseline > 0):
        return ""
    if higher_is_better:
        ours, baseline = baseline, ours
    if ours <= baseline:
        return f"{baseline / ours:.2f}x faster"
    return f"{ours / baseline:.2f}x slower"


def _row(
    device: str, measure: str, value: str, baseline: str = "", ratio: str = "", note: str = ""
) -> dict:
    return {
        "device": device,
        "measure": measure,
        "value_text": value,
        "baseline_text": baseline,
        "ratio_text": ratio,
        "note": note,
    }


def bench_device(lab_device: Any, repeat: int, iree_cache: dict | None = None) -> list[dict]:
    """The rows of one lab device (a LabDevice from the inventory)."""
    import amdgpu

    spec = lab_device.spec
    iree_cache = {} if iree_cache is None else iree_cache
    if not lab_device.available:
        return [_row(spec, "all", "skipped", note=f"not available: {lab_device.reason}")]
    rows: list[dict] = []
    try:
        device = amdgpu.open(spec)
    except AmdgpuError as e:
        return [_row(spec, "all", "failed", note=f"open failed: {e}")]
    try:
        sub = empty_submission_rate(device, repeat)
        rows.append(
            _row(
                spec,
                "empty submission + wait",
                f"{sub['round_trip_us']:.1f} us",
                note="timeline only, no kernel",
            )
        )
        if "runs_kernels" not in lab_device.hardware_classes:
            rows.append(
                _row(
                    spec,
                    "kernel measures",
                    "skipped",
                    note=lab_device.missing_class_reason("runs_kernels"),
                )
            )
            return rows
        iree, why = iree_for(device, iree_cache)
        base = iree.describe if iree else ""
        kernel_rows = _kernel_rows(device, spec, repeat, iree, base, why)
        rows.extend(kernel_rows)
    except Exception as e:  # noqa: BLE001 - one device's failure is a row
        rows.append(_failed(spec, "bench", e))
    finally:
        try:
            device.close()
        except AmdgpuError:
            pass
    return rows


def _failed(spec: str, measure: str, e: BaseException) -> dict:
    text = str(e).splitlines()[0][:300] if str(e) else ""
    return _row(spec, measure, "failed", note=f"{type(e).__name__}: {text}")


def _kernel_rows(device, spec, repeat, iree, base, why) -> list[dict]:
    """One row per measure; a measure that raises is a "failed" row, the others still run."""
    rows = []
    few = max(repeat // 4, 5)
    iree_saxpy_us = float("nan")
    try:
        lat = dispatch_latency(device, repeat)
        b = iree_saxpy_us = iree.call_us("saxpy", repeat) if iree else float("nan")
        rows.append(
            _row(
                spec,
                "dispatch latency (saxpy, dispatch + wait)",
                f"{lat['round_trip_us']:.1f} us",
                iree.text(b) if iree else "",
                _ratio(lat["round_trip_us"], b),
                "IREE call: synchronous invoke, device-resident inputs" if iree else why,
            )
        )
        rows.append(
            _row(
                spec,
                "host submit (saxpy dispatch)",
                f"{lat['host_submit_us']:.1f} us",
                note="host time of dev.dispatch alone",
            )
        )
    except Exception as e:  # noqa: BLE001 - reported as a failed row
        rows.append(_failed(spec, "dispatch latency (saxpy)", e))
    try:
        rep = replay_cost(device, few)
        n = rep["dispatches"]
        rows.append(
            _row(
                spec,
                f"replay cost (chain-{n}, host submit)",
                f"{rep['replay_host_us']:.1f} us",
                f"{rep['immediate_host_us']:.1f} us (immediate dispatch of the same {n})",
                _ratio(rep["replay_host_us"], rep["immediate_host_us"]),
                f"{rep['replay_host_us'] / n:.2f} us per dispatch replayed",
            )
        )
        b = iree.call_us(f"chain_{n}", few) if iree else float("nan")
        rows.append(
            _row(
                spec,
                f"chain-{n} round trip (replay + wait)",
                f"{rep['replay_round_trip_us']:.1f} us",
                iree.text(b) if iree else "",
                _ratio(rep["replay_round_trip_us"], b),
                "" if iree else why,
            )
        )
    except Exception as e:  # noqa: BLE001
        rows.append(_failed(spec, f"replay cost (chain-{CHAIN})", e))
    try:
        thr = throughput(device, repeat)
        if iree and not iree_saxpy_us > 0:
            iree_saxpy_us = iree.call_us("saxpy", repeat)
        b = 1e6 / iree_saxpy_us if iree else float("nan")
        rows.append(
            _row(
                spec,
                "throughput (saxpy, pipelined)",
                f"{thr['dispatches_per_s']:.0f} dispatches/s",
                f"{b:.0f} calls/s ({base}, one call at a time)" if iree else "",
                _ratio(thr["dispatches_per_s"], b, higher_is_better=True),
                f"{thr['dispatches']} dispatches, one synchronize" if iree else why,
            )
        )
    except Exception as e:  # noqa: BLE001
        rows.append(_failed(spec, "throughput (saxpy)", e))
    return rows


def bench(devices: list, repeat: int = 200) -> list[dict]:
    """Rows {device, measure, value_text, baseline_text, ratio_text, note} for each lab
    device, plus the HIP baseline row (run where libamdhip64 and hip-python exist)."""
    rows: list[dict] = []
    iree_cache: dict = {}
    for dev in devices:
        rows.extend(bench_device(dev, repeat, iree_cache))
    if any(getattr(d, "spec", "").startswith("amdgpu:emulated") for d in devices):
        rows.extend(_hip_module_launch_rows(repeat))
    usable, what = hip_status()
    if usable:
        try:
            us = hip_latency_us(repeat)
            rows.append(
                _row(
                    "hip:0",
                    "HIP memset + stream sync",
                    f"{us:.1f} us",
                    note=f"hip-python over {what}",
                )
            )
        except Exception as e:  # noqa: BLE001 - a baseline that fails is a row, not a crash
            rows.append(_row("hip:0", "HIP baseline", "failed", note=str(e)[:300]))
    else:
        rows.append(_row("hip", "HIP baseline", "skipped", note=what))
    return rows
