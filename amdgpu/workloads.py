"""Built-in workloads with references, for `amdgpu-run` and tests.

MLIR workloads (IREE programs from the compiler's kernel library, run through
`amdgpu.program.ProgramRunner` on either backend): saxpy, chain-N (N dependent dispatches),
reduction, softmax, matmul-f32, matmul-f16, mlp; references are the library's numpy ones.
Any other `.mlir` file with static shapes runs too, checked against IREE's own CPU runtime
(iree.runtime, local-task) on the same inputs. OpenCL C library kernels (fill, copy,
saxpy-hidden, lds-reduce) run on the HSA path only (clang emits no SPIR-V).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from amdgpu import dtypes
from ground.errors import DeviceError

MLIR_WORKLOADS = ("saxpy", "chain-N", "reduction", "softmax", "matmul-f32", "matmul-f16", "mlp")
OPENCL_WORKLOADS = ("fill", "copy", "saxpy-hidden", "lds-reduce")


class WorkloadError(DeviceError):
    """A workload name or file that cannot be run."""


@dataclass
class RunResult:
    workload: str
    device: str
    driver: str
    target: str
    dispatches: int
    correct: bool
    max_abs_error: float
    host_us_per_dispatch: float
    replay_host_us: float | None = None
    device_us: float | None = None
    repeat: int = 1
    compile_s: float = 0.0
    run_s: float = 0.0
    path: str = ""  # dispatch path: "hsa" / Vulkan's "bda", "push_descriptors", ...
    notes: list[str] = field(default_factory=list)
    # Per-kernel device time of one more repetition under dev.time_dispatches() (HSA with
    # the profiling path): [{kernel, dispatches, min_ns, median_ns, max_ns, total_ns}].
    kernel_device: list[dict] | None = None
    # The same for one more replay of the recorded command buffer (--replay).
    replay_kernel_device: list[dict] | None = None
    # A wrong result's worst element: {output, index, got, want} (workloads.worst_element).
    worst: dict | None = None
    # A model's per-call figures (amdgpu.model_zoo: calls, host/device us per call, share).
    per_call: dict | None = None

    @property
    def host_device_ratio(self) -> float | None:
        """Host us per dispatch over the mean per-dispatch device us (all kernels)."""
        if not self.kernel_device:
            return None
        total = sum(k["total_ns"] for k in self.kernel_device)
        count = sum(k["dispatches"] for k in self.kernel_device)
        per = total / count / 1e3 if count else 0
        return self.host_us_per_dispatch / per if per > 0 else None

    def to_dict(self) -> dict:
        d = {
            "workload": self.workload,
            "device": self.device,
            "driver": self.driver,
            "target": self.target,
            "dispatches": self.dispatches,
            "correct": bool(self.correct),
            "max_abs_error": float(self.max_abs_error),
            "host_us_per_dispatch": round(self.host_us_per_dispatch, 3),
            "repeat": self.repeat,
            "path": self.path,
            "compile_s": round(self.compile_s, 3),
            "run_s": round(self.run_s, 3),
        }
        if self.replay_host_us is not None:
            d["replay_host_us"] = round(self.replay_host_us, 3)
        if self.device_us is not None:
            d["device_us"] = round(self.device_us, 3)
        if self.kernel_device is not None:
            d["kernel_device"] = self.kernel_device
            ratio = self.host_device_ratio
            d["host_device_ratio"] = round(ratio, 4) if ratio is not None else None
        if self.replay_kernel_device is not None:
            d["replay_kernel_device"] = self.replay_kernel_device
        if self.notes:
            d["notes"] = list(self.notes)
        if self.worst is not None:
            d["worst"] = self.worst
        if self.per_call is not None:
            d["per_call"] = self.per_call
        return d


def library_name(workload: str) -> str:
    """CLI spelling (matmul-f32, chain-100) -> compiler.library name (matmul_f32, chain_100)."""
    return workload.replace("-", "_")


def list_workloads() -> list[tuple[str, str]]:
    """(name, description) of every built-in workload."""
    return [
        ("saxpy", "y = a*x + y over f32[1024] (IREE, 1 dispatch)"),
        ("chain-N", "N dependent x + 1 dispatches over f32[4096] (IREE), e.g. chain-100"),
        ("reduction", "row sums of f32[64, 256] (IREE)"),
        ("softmax", "softmax over the last axis of f32[16, 256] (IREE)"),
        ("matmul-f32", "f32[64, 64] @ f32[64, 64] (IREE)"),
        ("matmul-f16", "f16[64, 64] @ f16[64, 64] -> f32 (IREE)"),
        ("mlp", "two dense layers with bias and relu (IREE)"),
        ("fill", "OpenCL C fill kernel (HSA path only)"),
        ("copy", "OpenCL C copy kernel (HSA path only)"),
        ("saxpy-hidden", "OpenCL C saxpy with a grid-stride loop over hidden args (HSA only)"),
        ("lds-reduce", "OpenCL C LDS reduction, block 256 (HSA only)"),
        ("FILE.mlir", "any static-shape MLIR function, checked against IREE's CPU runtime"),
    ]


def _compile(source: Any, device: Any) -> Any:
    """Compile for this device: its gfx target, or Vulkan with a SPIR-V target made from
    the device's own features (8/16-bit storage, Int64, Float16..., subgroup operations at
    its subgroup size) for MLIR sources."""
    import compiler

    if device.backend != "vulkan":
        return compiler.compile(source, targets=[device.target])
    vulkan_target = None
    features = getattr(device, "enabled_features", None)
    if features and (str(source).endswith(".mlir") or library_kind(source) == "mlir"):
        from compiler.iree import TargetDtypeError, vulkan_target_for

        vulkan_target = vulkan_target_for(features or (),
                                          getattr(device, "subgroup_size", 0),
                                          getattr(device, "subgroup_ops", ()))
        try:
            return compiler.compile(source, targets=["vulkan"], vulkan_target=vulkan_target)
        except compiler.CompileError as exc:
            plain = vulkan_target_for(features or ())
            if plain == vulkan_target or isinstance(exc, TargetDtypeError):
                raise
            # IREE 3.13's SPIR-V code generation fails on some programs with subgroup
            # operations that it compiles without them (an f16 softmax over 32 at subgroup
            # size 8: "failed to legalize operation 'memref.alloc' ... memref<32xindex,
            # Workgroup>"): the same device, without its subgroup operations.
            return compiler.compile(source, targets=["vulkan"], vulkan_target=plain)
    return compiler.compile(source, targets=["vulkan"], vulkan_target=vulkan_target)


def library_kind(source: Any) -> str | None:
    from compiler import library

    name = str(source)
    return library.kind(name) if library.is_library_name(name) else None


def _tolerance(dtype: Any) -> tuple[float, float]:
    return dtypes.tolerance(dtype)


def _compare(got: list[np.ndarray], want: list[np.ndarray], loose: bool) -> tuple[bool, float]:
    ok, worst = True, 0.0
    for g, w in zip(got, want, strict=False):
        g = np.asarray(g)
        w = np.asarray(w)
        if g.shape != w.shape:
            return False, float("inf")
        g, w = g.reshape(-1), w.reshape(-1)  # 0-d results too (diff[same] needs an array)
        if g.shape != w.shape:
            return False, float("inf")
        if dtypes.is_float(w.dtype):
            rtol, atol = _tolerance(w.dtype)
            if loose:
                rtol, atol = max(rtol, 2e-2), max(atol, 2e-2)
            g, w = g.astype(np.float64), w.astype(np.float64)
            with np.errstate(invalid="ignore"):  # inf - inf: equal, zeroed just below
                diff = np.abs(g - w)
            same = (np.isnan(g) & np.isnan(w)) | (g == w)  # NaN == NaN, inf == inf
            diff[same] = 0.0
            if diff.size:
                worst = max(
                    worst, float(np.nanmax(diff)) if np.isfinite(diff).all() else float("inf")
                )
            ok &= bool(np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True))
        else:
            diff = np.abs(g.astype(np.int64) - w.astype(np.int64))
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
            ok &= bool((g == w).all())
    return ok, worst


def worst_element(got: list[np.ndarray], want: list[np.ndarray]) -> dict | None:
    """Where a result is furthest from its reference: {output, index, got, want}, the index
    in the output's own shape (NaN == NaN counts as equal)."""
    best: dict | None = None
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or not w.size:
            if g.shape != w.shape:
                return {"output": k, "index": None, "got": f"shape {list(g.shape)}",
                        "want": f"shape {list(w.shape)}"}
            continue
        g64 = g.astype(np.float64) if g.dtype != np.bool_ else g.astype(np.int64)
        w64 = w.astype(np.float64) if w.dtype != np.bool_ else w.astype(np.int64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(g64 - w64)
        diff[(np.isnan(g64) & np.isnan(w64)) | (g64 == w64)] = 0.0
        diff = np.where(np.isnan(diff), np.inf, diff)
        flat = int(np.argmax(diff))
        if best is None or diff.flat[flat] > best["_diff"]:
            index = tuple(int(i) for i in np.unravel_index(flat, w.shape)) if w.ndim else ()
            best = {"output": k, "index": list(index), "got": g.flat[flat].item(),
                    "want": w.flat[flat].item(), "_diff": float(diff.flat[flat])}
    if best is not None:
        best.pop("_diff", None)
    return best


def iree_cpu_reference(
    path: str | os.PathLike, function: str, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """Run `function` of an MLIR file on IREE's own CPU runtime (llvm-cpu, local-task)."""
    import iree.compiler as ireec
    import iree.runtime as ireert

    from compiler.iree import KEEP_F64

    vmfb = ireec.compile_file(
        str(path), target_backends=["llvm-cpu"],
        extra_args=["--iree-llvmcpu-target-cpu=generic", *KEEP_F64],
    )
    ctx = ireert.SystemContext(config=ireert.Config("local-task"))
    module = ireert.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(module)
    try:
        fn = getattr(ctx.modules, module.name)[function]
    except (KeyError, AttributeError):
        raise WorkloadError(f"{path}: IREE's CPU module has no function {function!r}") from None
    try:
        result = fn(*inputs)
    except RuntimeError as exc:  # the program's own checks (cf.assert) on these inputs
        text = str(exc).replace("\n", " ")
        raise WorkloadError(
            f"{Path(path).name}: IREE's CPU runtime (the reference) refused the inputs: "
            f"{text[:300]}; the program checks its input values, so run it from Python with "
            "inputs it accepts (amdgpu.program.ProgramRunner)"
        ) from None
    results = result if isinstance(result, (tuple, list)) else [result]
    return [np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in results]


def _random_inputs(program: dict, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in program["inputs"]:
        dt = dtypes.dtype(t["dtype"])
        if dtypes.is_float(dt):
            out.append(rng.standard_normal(t["shape"]).astype(dt))
        elif dt == np.bool_:
            out.append(rng.integers(0, 2, t["shape"]).astype(dt))
        else:
            out.append(rng.integers(*dtypes.int_range(dt), t["shape"]).astype(dt))
    return out


def run_workload(
    device: Any,
    workload: str,
    *,
    repeat: int = 1,
    replay: bool = False,
    seed: int = 0,
    progress: Any = None,
) -> RunResult:
    """Compile (cached), run, check against the reference, time the host side."""
    from compiler import library

    is_file = workload.endswith(".mlir") or os.path.sep in workload
    if is_file and not Path(workload).is_file():
        raise WorkloadError(f"MLIR file {workload!r} does not exist: check the path")
    name = library_name(workload) if not is_file else workload
    if not is_file and not library.is_library_name(name):
        raise WorkloadError(
            f"unknown workload {workload!r}: use one of {', '.join(MLIR_WORKLOADS)}, "
            f"{', '.join(OPENCL_WORKLOADS)}, the models minilm, cnn, gpt2-decode or a .mlir file "
            "(amdgpu-run --list)"
        )
    t0 = time.perf_counter()
    if not is_file and library.kind(name) == "opencl":
        if device.backend != "hsa":
            raise WorkloadError(
                f"workload {workload!r} is OpenCL C, which compiles to AMD code objects only: "
                f"run it with --driver amdgpu (or --device amdgpu:virtual)"
            )
        bundle = _compile(name, device)
        compile_s = time.perf_counter() - t0
        return _run_opencl(device, workload, name, bundle, repeat, seed, compile_s, progress)
    bundle = _compile(workload if is_file else name, device)
    compile_s = time.perf_counter() - t0
    from amdgpu.program import ProgramRunner

    runner = ProgramRunner(device, bundle)
    program = runner.program
    if is_file:
        inputs = _random_inputs(program, seed)
        reference = iree_cpu_reference(
            workload, program.get("function") or Path(workload).stem, inputs
        )
    else:
        inputs = library.example_inputs(name, seed)
        reference = library.reference(name, *inputs)
    return _run_program(
        device, workload, runner, inputs, reference, repeat, replay, compile_s, progress
    )


def _run_program(
    device, workload, runner, inputs, reference, repeat, replay, compile_s, progress
) -> RunResult:
    n = len(runner.dispatches)
    t_run = time.perf_counter()
    buffers = runner.allocate(inputs)
    try:
        host = []
        device_ns = []
        marks = _can_mark(device)
        for i in range(max(repeat, 1)):
            if i:  # each repetition starts from the same inputs
                _rewrite_inputs(runner, buffers, inputs)
            start = device.mark() if marks else None
            t0 = time.perf_counter()
            runner.run_immediate(buffers)
            host.append(time.perf_counter() - t0)
            end = device.mark() if marks else None
            device.synchronize(60.0)
            if marks:
                device_ns.append(device.elapsed_ns(start, end))
            if progress:
                progress(1)
        outputs = runner.read_outputs(buffers)
        n = len(runner.dispatches)  # a host program's count is known once it has run
        correct, err = _compare(outputs, reference, _has_f16(runner.program))
        worst = None if correct else worst_element(outputs, reference)
        kernel_device = _timed_repetition(device, lambda: runner.run_immediate(buffers))
        replay_us = None
        replay_device = None
        if replay:
            runner.record()
            times = []
            for _ in range(max(repeat, 1)):
                _rewrite_inputs(runner, buffers, inputs)  # in-place programs update inputs
                device.synchronize(60.0)
                t0 = time.perf_counter()
                runner.replay(buffers)
                times.append(time.perf_counter() - t0)
                device.synchronize(60.0)
                if progress:
                    progress(1)
            replay_us = float(np.median(times) * 1e6)
            outputs = runner.read_outputs(buffers)
            ok2, err2 = _compare(outputs, reference, _has_f16(runner.program))
            if not ok2 and worst is None:
                worst = worst_element(outputs, reference)
            correct, err = correct and ok2, max(err, err2)
            _rewrite_inputs(runner, buffers, inputs)
            replay_device = _timed_repetition(device, lambda: runner.replay(buffers))
    finally:
        buffers.free()
    return RunResult(
        workload=workload,
        device=device.spec,
        driver=device.driver,
        target=device.target,
        dispatches=n,
        correct=correct,
        max_abs_error=err,
        host_us_per_dispatch=float(np.median(host) * 1e6 / max(n, 1)),
        replay_host_us=replay_us,
        device_us=float(np.median(device_ns) / 1e3) if device_ns else None,
        repeat=max(repeat, 1),
        compile_s=compile_s,
        run_s=time.perf_counter() - t_run,
        path=_path_name(device),
        kernel_device=kernel_device,
        replay_kernel_device=replay_device,
        worst=worst,
    )


def _timed_repetition(device: Any, run: Any) -> list[dict] | None:
    """One more run under a dispatch timer (kept apart from the host-timed repetitions, whose
    figures the timer's extra packet would change): per-kernel device times, or None where
    the device has no per-dispatch timing."""
    if not (_can_mark(device) and hasattr(device, "time_dispatches")):
        return None
    with device.time_dispatches() as timer:
        run()
    device.synchronize(60.0)
    return [k.to_json() for k in timer.per_kernel()]


def _rewrite_inputs(runner, buffers, inputs) -> None:
    """Each run starts from the same inputs (in-place programs write into them)."""
    from amdgpu.program import input_bytes

    for buf, arr, t in zip(buffers.inputs, inputs, runner.program["inputs"], strict=False):
        raw = input_bytes(arr, t)
        if raw.nbytes:
            buf.write(raw)


def _can_mark(device: Any) -> bool:
    """Device timestamps around a run: the HSA path with the profiling path."""
    paths = getattr(device, "paths", {})
    return hasattr(device, "mark") and bool(getattr(paths.get("profiling"), "available", False))


def _has_f16(program: dict) -> bool:
    return any(dtypes.dtype(t["dtype"]) == np.float16 for t in program["inputs"])


def _path_name(device: Any) -> str:
    if device.backend == "hsa":
        return "hsa (aql queues)"
    return str(getattr(device, "path", "vulkan"))


def _run_opencl(device, workload, name, bundle, repeat, seed, compile_s, progress) -> RunResult:
    from compiler import library

    spec = library.spec(name)
    kernel = device.load(bundle).kernel(spec.kernel)
    values = library.example_inputs(name, seed)
    want = library.reference(name, *values)
    t_run = time.perf_counter()
    host = []
    got: list[Any] = []
    for _ in range(max(repeat, 1)):
        args, bufs = [], []
        for (_arg_name, kind), v in zip(spec.args, values, strict=False):
            if kind.startswith("buffer:"):
                b = device.buffer(np.asarray(v))
                args.append(b)
                bufs.append((b, np.asarray(v).dtype, len(args) - 1))
            else:
                args.append(np.dtype(kind).type(v))
        t0 = time.perf_counter()
        device.dispatch(kernel, spec.grid, spec.block, args)
        host.append(time.perf_counter() - t0)
        device.synchronize(60.0)
        got = list(values)
        for b, dt, i in bufs:
            got[i] = b.to_numpy(dt)
            b.free()
        if progress:
            progress(1)
    buf_idx = [i for i, (_, k) in enumerate(spec.args) if k.startswith("buffer:")]
    correct, err = _compare([got[i] for i in buf_idx], [want[i] for i in buf_idx], False)
    return RunResult(
        workload=workload,
        device=device.spec,
        driver=device.driver,
        target=device.target,
        dispatches=1,
        correct=correct,
        max_abs_error=err,
        host_us_per_dispatch=float(np.median(host) * 1e6),
        repeat=max(repeat, 1),
        compile_s=compile_s,
        run_s=time.perf_counter() - t_run,
        path=_path_name(device),
    )


__all__ = ["RunResult", "WorkloadError", "iree_cpu_reference", "list_workloads", "run_workload",
           "worst_element"]
