"""The model zoo per call on one GPU: our driver's Vulkan backend vs IREE's own runtime (the
same compiled program, its Vulkan driver) vs PyTorch eager on CUDA.

    .venv/bin/python benchmarks/bench_models_vulkan.py --save DIR      # here: export, compile
    python3 benchmarks/bench_models_vulkan.py --bundle-dir DIR          # the GPU machine

`--save` exports each model (amdgpu.model_zoo), compiles it once for a Vulkan device with the
features NVIDIA's driver reports (compiler.iree.vulkan_target_for) into our bundle and, from
the same iree-compile device target, IREE's .vmfb (bda ABI), and copies PyTorch's inputs
and reference outputs beside them. On the GPU machine each model is timed per call, inputs
already on the device, the result read back to the host each call (the KV cache of
gpt2-decode stays on the device: a call is one decode step whose cache inputs are the
previous step's results):

- ours: ProgramRunner on `vulkan`, replayed (command buffers recorded once, bindings
  rebound per call) and immediate;
- IREE: iree.runtime's SystemContext with the `vulkan` driver, the same program;
- PyTorch: the export script's own module in eager mode on CUDA (torch.cuda.synchronize
  after each call, the result copied to the host).

minilm is left out here: its weights (90 MB in f32, in our bundle and in IREE's module
each) exceed what one device-tool call carries (64 MiB).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_model_vulkan import _iree_module, _median_us  # noqa: E402 - beside this script

MODELS = {"cnn": ["cnn"], "gpt2-decode": ["gpt2_prefill", "gpt2_decode"]}
FEATURES = ("shaderFloat16", "shaderFloat64", "shaderInt8", "shaderInt16", "shaderInt64",
            "storageBuffer16BitAccess", "storageBuffer8BitAccess")
ABI = "bda"


def save(out: Path) -> None:
    import compiler
    from amdgpu import model_zoo
    from compiler import iree

    target = iree.vulkan_target_for(FEATURES)
    for name, stems in MODELS.items():
        src = model_zoo.ensure_exported(name)
        for stem in stems:
            mlir = src / f"{stem}.mlir"
            bundle = compiler.compile(mlir, targets=["vulkan"], vulkan_target=target)
            bundle.save(out / f"{stem}.bundle")
            subprocess.run([iree.iree_compile_path(), str(mlir),
                            *iree.vulkan_device_flags(ABI, target), *iree.KEEP_F64,
                            "-o", str(out / f"{stem}.vmfb")], check=True)
        for f in src.glob("*.npz"):
            shutil.copy(f, out / f.name)
    # MatMulInteger (i8 x i8 -> i32 with zero points), wrong on lavapipe through both our
    # driver and IREE's runtime: the same program on another Vulkan driver tells whose bug.
    # On lavapipe it is wrong exactly when the target has subgroup operations: "mmi_sg" is
    # built with NVIDIA's (32 lanes, shuffle + arithmetic).
    mm = ROOT / "tests" / "data" / "iree" / "onnx_matmulinteger.mlir"
    sg = iree.vulkan_target_for(FEATURES, 32, ("basic", "shuffle", "shuffle_relative",
                                               "arithmetic"))
    for stem, t in (("mmi", target), ("mmi_sg", sg)):
        compiler.compile(mm, targets=["vulkan"], vulkan_target=t).save(out / f"{stem}.bundle")
        subprocess.run([iree.iree_compile_path(), str(mm), *iree.vulkan_device_flags(ABI, t),
                        *iree.KEEP_F64, "-o", str(out / f"{stem}.vmfb")], check=True)
    print(f"saved bundles, IREE modules and references in {out}")


def _close(got, want) -> bool:
    return bool(np.allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                            rtol=1e-3, atol=1e-3))


# --- ours --------------------------------------------------------------------------------
def _ours(dev, bundle_dir: Path, stem: str):
    from amdgpu.program import ProgramRunner
    from compiler.bundle import KernelBundle

    return ProgramRunner(dev, KernelBundle.load(bundle_dir / f"{stem}.bundle"))


def ours_cnn(dev, d: Path, repeat: int) -> dict:
    z = np.load(d / "cnn.npz")
    r = _ours(dev, d, "cnn")
    b = r.allocate([z["in0"]])
    out = {}
    for mode in ("immediate", "replay"):
        def call(mode=mode):
            (r.replay if mode == "replay" else r.run_immediate)(b)
            return r.read_outputs(b)[0]
        out[f"ours_{mode}_correct"] = _close(call(), z["out0"])
        out[f"ours_{mode}_us"] = _median_us(call, repeat)
    out["dispatches"] = len(r.dispatches)
    return out


def ours_decode(dev, d: Path, repeat: int) -> dict:
    from amdgpu import model_zoo

    ref = np.load(d / "gpt2_reference.npz")
    pre, dec = _ours(dev, d, "gpt2_prefill"), _ours(dev, d, "gpt2_decode")
    pb = pre.allocate([ref["prompt"]])
    pre.replay(pb)
    dev.synchronize(60.0)
    shape = dec.program["inputs"][2]["shape"]
    sets = [dec.allocate([ref["tokens"][:1].reshape(1, 1), np.array([8]), np.zeros(shape),
                          np.zeros(shape)]) for _ in range(2)]
    state = {"k": model_zoo.output_buffer(pre, pb, 1), "v": model_zoo.output_buffer(pre, pb, 2),
             "i": 0}
    out = {}
    for mode in ("immediate", "replay"):
        def step(mode=mode):
            s = sets[state["i"] % 2]
            s.inputs[2], s.inputs[3] = state["k"], state["v"]
            if hasattr(s, "_launches"):
                del s._launches
            (dec.replay if mode == "replay" else dec.run_immediate)(s)
            logits = dec.read_outputs(s)[0]  # reads the logits only; the cache stays
            state["i"] += 1
            return logits, s

        # the first step is checked against transformers' (cache from the prefill)
        logits, s = step()
        out[f"ours_{mode}_correct"] = _close(logits, ref["logits1"])
        # then steps go on writing slot 8 again: the same work each call
        state["k"], state["v"] = (model_zoo.output_buffer(pre, pb, 1),
                                  model_zoo.output_buffer(pre, pb, 2))
        out[f"ours_{mode}_us"] = _median_us(lambda: step()[0], repeat)
    out["dispatches"] = len(dec.dispatches)
    return out


# --- IREE's runtime -----------------------------------------------------------------------
def _on_device(config, x: np.ndarray):
    import iree.runtime as ireert

    types = {np.dtype(np.float32): ireert.HalElementType.FLOAT_32,
             np.dtype(np.int64): ireert.HalElementType.SINT_64}
    return config.device.allocator.allocate_buffer_copy(
        memory_type=ireert.MemoryType.DEVICE_LOCAL, allowed_usage=ireert.BufferUsage.DEFAULT,
        device=config.device, buffer=np.ascontiguousarray(x), element_type=types[x.dtype])


def _host(array) -> np.ndarray:
    return np.asarray(array.to_host())


def iree_cnn(d: Path, repeat: int) -> dict:
    z = np.load(d / "cnn.npz")
    fn, config = _iree_module(d / "cnn.vmfb", "vulkan", "cnn")
    x = _on_device(config, z["in0"])
    return {"iree_correct": _close(_host(fn(x)), z["out0"]),
            "iree_us": _median_us(lambda: _host(fn(x)), repeat)}


def iree_decode(d: Path, repeat: int) -> dict:
    ref = np.load(d / "gpt2_reference.npz")
    pre, config = _iree_module(d / "gpt2_prefill.vmfb", "vulkan", "prefill")
    dec, config2 = _iree_module(d / "gpt2_decode.vmfb", "vulkan", "decode")
    _logits, k, v = pre(_on_device(config, ref["prompt"]))
    k, v = _on_device(config2, _host(k)), _on_device(config2, _host(v))
    ids = _on_device(config2, ref["tokens"][:1].reshape(1, 1).astype(np.int64))
    pos = _on_device(config2, np.array([8], np.int64))
    logits, _k2, _v2 = dec(ids, pos, k, v)

    def step():
        out = dec(ids, pos, k, v)  # the cache results stay device arrays
        return _host(out[0])
    return {"iree_correct": _close(_host(logits), ref["logits1"]),
            "iree_us": _median_us(step, repeat)}


# --- PyTorch eager on CUDA ----------------------------------------------------------------
def _script(name: str):
    path = ROOT / "examples" / "models" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_cnn(d: Path, repeat: int) -> dict:
    import torch

    z = np.load(d / "cnn.npz")
    model, _inputs = _script("cnn").build()
    model = model.cuda()
    x = torch.from_numpy(z["in0"]).cuda()

    def call():
        with torch.no_grad():
            y = model(x)
        return y.cpu().numpy()  # synchronizes
    return {"torch_correct": _close(call(), z["out0"]), "torch_us": _median_us(call, repeat)}


def torch_decode(d: Path, repeat: int) -> dict:
    import torch

    ref = np.load(d / "gpt2_reference.npz")
    mod = _script("gpt2_decode")
    hf = mod.hf_model()
    pre, dec = mod.Prefill(hf).eval().cuda(), mod.Decode(hf).eval().cuda()
    with torch.no_grad():
        _l, k, v = pre(torch.from_numpy(ref["prompt"]).cuda())
        ids = torch.from_numpy(ref["tokens"][:1].reshape(1, 1)).cuda()
        pos = torch.tensor([8]).cuda()

        def call():
            return dec(ids, pos, k, v)[0].cpu().numpy()
        return {"torch_correct": _close(call(), ref["logits1"]),
                "torch_us": _median_us(call, repeat)}


def matmulinteger(dev, d: Path) -> dict:
    """Ours and IREE's runtime on the same MatMulInteger program, against numpy, built
    without and with subgroup operations."""
    return {stem: _matmulinteger(dev, d, stem) for stem in ("mmi", "mmi_sg")
            if (d / f"{stem}.vmfb").exists()}


def _matmulinteger(dev, d: Path, stem: str) -> dict:
    import iree.runtime as ireert

    rng = np.random.default_rng(0)
    ins = [rng.integers(0, 255, (4, 3)).astype(np.uint8),
           rng.integers(0, 255, (3, 2)).astype(np.uint8),
           np.array(12, np.uint8), np.array(200, np.uint8)]
    want = (ins[0].astype(np.int32) - 12) @ (ins[1].astype(np.int32) - 200)
    out: dict = {}
    try:
        (ours,) = _ours(dev, d, stem).run(ins)
        out["ours_correct"] = bool(np.array_equal(ours, want))
    except Exception as exc:  # noqa: BLE001
        out["ours_error"] = str(exc).splitlines()[0][:200]
    try:
        fn, config = _iree_module(d / f"{stem}.vmfb", "vulkan", "test_matmulinteger")
        dev_ins = [config.device.allocator.allocate_buffer_copy(
            memory_type=ireert.MemoryType.DEVICE_LOCAL, allowed_usage=ireert.BufferUsage.DEFAULT,
            device=config.device, buffer=a, element_type=ireert.HalElementType.UINT_8)
            for a in ins]
        theirs = _host(fn(*dev_ins))
        out["iree_correct"] = bool(np.array_equal(theirs, want))
        if "ours_correct" in out:
            out["same_as_ours"] = bool(np.array_equal(theirs, ours))
    except Exception as exc:  # noqa: BLE001
        out["iree_error"] = str(exc).splitlines()[0][:200]
    return out


def run(d: Path, repeat: int) -> dict:
    """Every model through ours first, then IREE's runtime, then PyTorch: IREE's runtime
    opens its own Vulkan device in this process, which is left out of our runs."""
    import amdgpu

    dev = amdgpu.open("vulkan")
    out: dict = {"device": f"{dev.name} ({dev.spec})", "path": dev.path}
    columns = (("ours", {"cnn": ours_cnn, "gpt2-decode": ours_decode}, (dev, d, repeat)),
               ("iree", {"cnn": iree_cnn, "gpt2-decode": iree_decode}, (d, repeat)),
               ("torch", {"cnn": torch_cnn, "gpt2-decode": torch_decode}, (d, repeat)))
    for label, fns, args in columns:
        for name, fn in fns.items():
            row = out.setdefault(name, {})
            try:
                row.update(fn(*args))
            except Exception as exc:  # noqa: BLE001 - one line per failing column, go on
                row[f"{label}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    out["matmulinteger"] = matmulinteger(dev, d)  # correctness only, after the timings
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path, help="export, compile and save into this folder")
    ap.add_argument("--bundle-dir", type=Path, help="folder made by --save")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        save(args.save)
        return 0
    if not args.bundle_dir:
        ap.error("give --save DIR (here) or --bundle-dir DIR (on the GPU machine)")
    print(json.dumps(run(args.bundle_dir, args.repeat), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
