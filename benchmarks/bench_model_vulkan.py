"""The transformer block (examples/model) on Vulkan: amdgpu-run's driver vs IREE's runtime.

    .venv/bin/python benchmarks/bench_model_vulkan.py --save DIR   # here: compile, save
    python3 benchmarks/bench_model_vulkan.py --bundle-dir DIR       # a machine without
                                                                    # iree-compile (the H200)

Both sides run the same compiled program: our bundle's SPIR-V and IREE's .vmfb come from
one `iree-compile` device target (compiler.iree.vulkan_device_flags for a device with
Float16/64, Int8/16/64 and 8/16-bit storage, the features the H200's driver reports), one
per dispatch ABI. Timed per call, end to end (inputs already on the device, results read
back to the host): ours immediate (one submission per dispatch) and replayed (memoized
command buffers recorded once), IREE's `iree.runtime` with its `vulkan` driver. Results are
checked against IREE's CPU runtime (a .vmfb for llvm-cpu saved beside the others).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = ROOT / "examples" / "model" / "transformer_block.mlir"
FUNCTION = "transformer_block"
FEATURES = ("shaderFloat16", "shaderFloat64", "shaderInt8", "shaderInt16", "shaderInt64",
            "storageBuffer16BitAccess", "storageBuffer8BitAccess")


def save(out: Path) -> None:
    import compiler
    from compiler import iree

    out.mkdir(parents=True, exist_ok=True)
    target = iree.vulkan_target_for(FEATURES)
    bundle = compiler.compile(MODEL, targets=["vulkan"], vulkan_target=target)
    bundle.save(out / "model.bundle")
    for abi in iree.VULKAN_ABIS:
        subprocess.run([iree.iree_compile_path(), str(MODEL),
                        *iree.vulkan_device_flags(abi, target), "-o",
                        str(out / f"model_{abi}.vmfb")], check=True)
    subprocess.run([iree.iree_compile_path(), str(MODEL), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu",
                    "--iree-llvmcpu-target-cpu=generic", "-o", str(out / "model_cpu.vmfb")],
                   check=True)
    print(f"saved the bundle and IREE modules in {out}")


def _median_us(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)


def _iree_module(path: Path, driver: str, function: str = FUNCTION):
    """`function` of the IREE module at `path` on IREE's own runtime (driver "vulkan",
    "local-task", ...), and the runtime's config (its device)."""
    import iree.runtime as ireert

    config = ireert.Config(driver)
    ctx = ireert.SystemContext(config=config)
    vm = ireert.VmModule.copy_buffer(ctx.instance, path.read_bytes())
    ctx.add_vm_module(vm)
    return getattr(ctx.modules, vm.name)[function], config


def _iree_to_host(device, array) -> np.ndarray:
    """An IREE result on the host: DeviceArray.to_host, or, where that fails (lavapipe says
    it imports host memory, then refuses a numpy array that is not page aligned), a map of
    the result's own buffer."""
    try:
        return np.asarray(array.to_host())
    except ValueError:
        view = array._buffer_view
        return np.array(view.map().asarray(tuple(view.shape), np.float32))


def run(bundle_dir: Path, repeat: int) -> dict:
    import amdgpu
    from amdgpu.program import ProgramRunner
    from amdgpu.workloads import _compare
    from compiler.bundle import KernelBundle

    x = np.random.default_rng(0).standard_normal((1, 8, 32)).astype(np.float32)
    cpu_fn, _ = _iree_module(bundle_dir / "model_cpu.vmfb", "local-task")
    want = np.asarray(cpu_fn(x).to_host())
    bundle = KernelBundle.load(bundle_dir / "model.bundle")
    dev = amdgpu.open("vulkan")
    runner = ProgramRunner(dev, bundle)
    buffers = runner.allocate([x])
    out: dict = {"device": f"{dev.name} ({dev.spec})", "path": dev.path,
                 "features": sorted(dev.enabled_features)}

    def ours(replay: bool):
        def call():
            (runner.replay if replay else runner.run_immediate)(buffers)
            return runner.read_outputs(buffers)[0]
        return call

    for mode in ("immediate", "replay"):
        fn = ours(mode == "replay")
        got = fn()
        out[f"ours_{mode}_correct"] = bool(_compare([got], [want], False)[0])
        out[f"ours_{mode}_us"] = _median_us(fn, repeat)
    out["dispatches"] = len(runner.dispatches)
    for abi in ("bda", "descriptors"):
        try:
            fn_iree, config = _iree_module(bundle_dir / f"model_{abi}.vmfb", "vulkan")
            import iree.runtime as ireert

            # On the device once, as our inputs are (IREE cannot import unaligned host memory)
            dev_x = config.device.allocator.allocate_buffer_copy(
                memory_type=ireert.MemoryType.DEVICE_LOCAL,
                allowed_usage=ireert.BufferUsage.DEFAULT, device=config.device,
                buffer=x, element_type=ireert.HalElementType.FLOAT_32)
            got = _iree_to_host(config.device, fn_iree(dev_x))
            out[f"iree_{abi}_correct"] = bool(_compare([got], [want], False)[0])
            out[f"iree_{abi}_us"] = _median_us(
                lambda f=fn_iree, c=config, a=dev_x: _iree_to_host(c.device, f(a)), repeat)
        except Exception as exc:  # noqa: BLE001 - report the one line, go on
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            out[f"iree_{abi}_error"] = f"{str(exc).splitlines()[0][:200]} (line {where.lineno})"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path, help="compile here and save into this folder")
    ap.add_argument("--bundle-dir", type=Path, help="folder made by --save")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    if args.save:
        save(args.save)
        return 0
    if not args.bundle_dir:
        ap.error("give --save DIR (here) or --bundle-dir DIR (where the program runs)")
    result = run(args.bundle_dir, args.repeat)
    print(json.dumps(result, indent=1))
    for key in ("ours_immediate_us", "ours_replay_us", "iree_bda_us", "iree_descriptors_us"):
        if key in result:
            print(f"{key:<22} {result[key]:10.1f} us per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
