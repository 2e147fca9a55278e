"""The model zoo per call on one GPU: our driver's Vulkan backend vs IREE's own runtime (the
same compiled program, its Vulkan driver) vs PyTorch eager on CUDA.

    .venv/bin/python benchmarks/bench_models_vulkan.py --save DIR [--models a,b]  # here
    python3 benchmarks/bench_models_vulkan.py --bundle-dir DIR [--models a,b]      # GPU machine

`--save` exports each model (amdgpu.model_zoo), compiles it once for a Vulkan device with the
features NVIDIA's driver reports (compiler.iree.vulkan_target_for) into our bundle and, from
the same iree-compile device target, IREE's .vmfb (both for the bda ABI, the path
our driver takes on NVIDIA: one copy of the weights each), and copies PyTorch's inputs
and reference outputs beside them, one folder per model (DIR/NAME). On the GPU machine each
model found there is timed per call, inputs already on the device, the result read back to
the host each call (the KV cache of gpt2-decode stays on the device: a call is one decode
step whose cache inputs are the previous step's results):

- ours: ProgramRunner on `vulkan`, replayed (command buffers recorded once, bindings
  rebound per call) and immediate;
- IREE: iree.runtime's SystemContext with the `vulkan` driver, the same program;
- PyTorch: the export script's own module in eager mode on CUDA (torch.cuda.synchronize
  after each call, the result copied to the host).

Models: cnn, gpt2-decode and their f16 variants, and minilm-f16. bf16 is left out (IREE
cannot compile it for Vulkan: amdgpu-run refuses it in one line). minilm in f32 is left out:
its weights (90 MB, in our bundle and again in IREE's module) exceed what one device-tool
call carries (64 MiB). minilm-f16 is exported with `--prune-vocab` (the embedding rows of
the sentences' tokens only, ids renumbered: the same function of the same sentences, the
same per-call work, about 22 MB of f16 weights instead of 45); its PyTorch column is the same
encoder (examples/models/minilm.py's SentenceEncoder over transformers' BertModel) built
from the pretrained config with seeded random weights in f16, as the pretrained weights are
not carried a third time: its time is the same work, its result is not checked.
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

# name -> (the export's stems, the export script's arguments where not model_zoo's default)
MODELS: dict[str, tuple[list[str], list[str] | None]] = {
    "cnn": (["cnn"], None),
    "cnn-f16": (["cnn"], None),
    "gpt2-decode": (["gpt2_prefill", "gpt2_decode"], None),
    "gpt2-decode-f16": (["gpt2_prefill", "gpt2_decode"], None),
    "minilm-f16": (["minilm"], ["--batch", "4", "--seq", "16", "--prune-vocab",
                                "--dtype", "f16"]),
}
FEATURES = ("shaderFloat16", "shaderFloat64", "shaderInt8", "shaderInt16", "shaderInt64",
            "storageBuffer16BitAccess", "storageBuffer8BitAccess")
ABI = "bda"


def _export(name: str, out: Path) -> Path:
    """The model's export folder: model_zoo's (cached) or, with arguments of its own, a
    fresh export into out/export."""
    from amdgpu import model_zoo

    _stems, argv = MODELS[name]
    if argv is None:
        return model_zoo.ensure_exported(name)
    src = out / "export"
    if not (src / "done").exists():
        script = model_zoo.EXAMPLES / model_zoo.MODELS[name].script
        subprocess.run([sys.executable, str(script), str(src), *argv], check=True,
                       env={**__import__("os").environ, "HF_HUB_OFFLINE": "1",
                            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
        (src / "done").write_text("ok\n")
    return src


def save(out: Path, names: list[str]) -> None:
    import compiler
    from compiler import iree

    target = iree.vulkan_target_for(FEATURES)
    for name in names:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        src = _export(name, d)
        for stem in MODELS[name][0]:
            mlir = src / f"{stem}.mlir"
            if not (d / f"{stem}.bundle").exists():
                bundle = compiler.compile(mlir, targets=["vulkan"], vulkan_target=target,
                                          abi=ABI)
                bundle.save(d / f"{stem}.bundle")
            if not (d / f"{stem}.vmfb").exists():
                subprocess.run([iree.iree_compile_path(), str(mlir),
                                *iree.vulkan_device_flags(ABI, target), *iree.KEEP_F64,
                                "-o", str(d / f"{stem}.vmfb")], check=True)
        for f in (*src.glob("*.npz"), *src.glob("*.npy"), *src.glob("*.txt")):
            shutil.copy(f, d / f.name)
        if name.startswith("minilm"):  # the encoder's shapes, for the PyTorch column
            shutil.copy(Path(_script("minilm").model_dir()) / "config.json",
                        d / "config.json")
        if (d / "export").exists():
            shutil.rmtree(d / "export")
        print(f"{name}: saved in {d}", flush=True)
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


def _correct(name: str, got: list, want: list, d: Path) -> bool:
    """model_zoo's own check: per-dtype tolerances, minilm's cosine similarities."""
    from amdgpu import model_zoo

    return bool(model_zoo._check(name, got, want, d)[0])


def _io(d: Path, stem: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    from amdgpu import model_zoo

    return model_zoo._load(d, stem)


# --- ours --------------------------------------------------------------------------------
def _ours(dev, bundle_dir: Path, stem: str):
    from amdgpu.program import ProgramRunner
    from compiler.bundle import KernelBundle

    return ProgramRunner(dev, KernelBundle.load(bundle_dir / f"{stem}.bundle"))


def ours_single(dev, name: str, d: Path, repeat: int) -> dict:
    """One program, one call (cnn, minilm): its inputs on the device, its outputs read."""
    stem = MODELS[name][0][0]
    ins, want = _io(d, stem)
    r = _ours(dev, d, stem)
    b = r.allocate(ins)
    out = {}
    for mode in ("immediate", "replay"):
        def call(mode=mode):
            (r.replay if mode == "replay" else r.run_immediate)(b)
            return r.read_outputs(b)
        out[f"ours_{mode}_correct"] = _correct(name, call(), want, d)
        out[f"ours_{mode}_us"] = _median_us(call, repeat)
    out["dispatches"] = len(r.dispatches)
    return out


def _decode_ok(got, want) -> bool:
    from amdgpu.workloads import _compare

    return bool(_compare([got], [want], False)[0])


def ours_decode(dev, name: str, d: Path, repeat: int) -> dict:
    from amdgpu import dtypes, model_zoo

    ref = model_zoo._npz(d / "gpt2_reference.npz")
    pre, dec = _ours(dev, d, "gpt2_prefill"), _ours(dev, d, "gpt2_decode")
    pb = pre.allocate([ref["prompt"]])
    pre.replay(pb)
    dev.synchronize(60.0)
    cache = dec.program["inputs"][2]
    zeros = np.zeros(cache["shape"], dtypes.dtype(cache["dtype"]))
    sets = [dec.allocate([ref["tokens"][:1].reshape(1, 1), np.array([8]), zeros, zeros])
            for _ in range(2)]
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
        out[f"ours_{mode}_correct"] = _decode_ok(logits, ref["logits1"])
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
             np.dtype(np.float16): ireert.HalElementType.FLOAT_16,
             np.dtype(np.int32): ireert.HalElementType.SINT_32,
             np.dtype(np.int64): ireert.HalElementType.SINT_64}
    return config.device.allocator.allocate_buffer_copy(
        memory_type=ireert.MemoryType.DEVICE_LOCAL, allowed_usage=ireert.BufferUsage.DEFAULT,
        device=config.device, buffer=np.ascontiguousarray(x), element_type=types[x.dtype])


def _host(array) -> np.ndarray:
    return np.asarray(array.to_host())


def iree_single(name: str, d: Path, repeat: int) -> dict:
    stem = MODELS[name][0][0]
    ins, want = _io(d, stem)
    function = "minilm" if stem == "minilm" else stem
    fn, config = _iree_module(d / f"{stem}.vmfb", "vulkan", function)
    xs = [_on_device(config, x) for x in ins]

    def call():
        got = fn(*xs)
        return [_host(g) for g in (got if isinstance(got, (tuple, list)) else (got,))]
    return {"iree_correct": _correct(name, call(), want, d),
            "iree_us": _median_us(call, repeat)}


def iree_decode(name: str, d: Path, repeat: int) -> dict:
    from amdgpu import model_zoo

    ref = model_zoo._npz(d / "gpt2_reference.npz")
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
    return {"iree_correct": _decode_ok(_host(logits), ref["logits1"]),
            "iree_us": _median_us(step, repeat)}


# --- PyTorch eager on CUDA ----------------------------------------------------------------
def _script(name: str):
    path = ROOT / "examples" / "models" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _torch_dtype(name: str):
    import torch

    return torch.float16 if name.endswith("-f16") else torch.float32


def torch_cnn(name: str, d: Path, repeat: int) -> dict:
    import torch

    ins, want = _io(d, "cnn")
    model, _inputs = _script("cnn").build()
    model = model.to(_torch_dtype(name)).cuda()
    x = torch.from_numpy(ins[0]).cuda()

    def call():
        with torch.no_grad():
            y = model(x)
        return [y.cpu().numpy()]  # synchronizes
    return {"torch_correct": _correct(name, call(), want, d),
            "torch_us": _median_us(call, repeat)}


def torch_minilm(name: str, d: Path, repeat: int) -> dict:
    """The exported encoder over transformers' BertModel of the pretrained config, seeded
    random weights (the pretrained ones are not carried): the same work, not checked."""
    import torch
    from transformers import BertConfig, BertModel

    ins, _want = _io(d, "minilm")
    config = BertConfig.from_json_file(str(d / "config.json"))
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = _script("minilm").SentenceEncoder(BertModel(config).eval()).eval()
    model = model.to(_torch_dtype(name)).cuda()
    ids, mask = (torch.from_numpy(x).cuda() for x in ins)

    def call():
        with torch.no_grad():
            return model(ids, mask).cpu().numpy()
    got = call()
    return {"torch_correct": "not checked (seeded random weights, same shapes)",
            "torch_finite": bool(np.isfinite(got).all()),
            "torch_us": _median_us(call, repeat)}


def torch_decode(name: str, d: Path, repeat: int) -> dict:
    import torch

    from amdgpu import model_zoo

    ref = model_zoo._npz(d / "gpt2_reference.npz")
    mod = _script("gpt2_decode")
    hf = mod.hf_model(_torch_dtype(name))
    pre, dec = mod.Prefill(hf).eval().cuda(), mod.Decode(hf).eval().cuda()
    with torch.no_grad():
        _l, k, v = pre(torch.from_numpy(ref["prompt"]).cuda())
        ids = torch.from_numpy(ref["tokens"][:1].reshape(1, 1)).cuda()
        pos = torch.tensor([8]).cuda()

        def call():
            return dec(ids, pos, k, v)[0].cpu().numpy()
        return {"torch_correct": _decode_ok(call(), ref["logits1"]),
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


def _columns(name: str):
    """(ours, IREE's, PyTorch's) timing functions of one model."""
    if name.startswith("gpt2-decode"):
        return ours_decode, iree_decode, torch_decode
    return ours_single, iree_single, torch_minilm if name.startswith("minilm") else torch_cnn


def run(d: Path, repeat: int, names: list[str]) -> dict:
    """Every model through ours first, then IREE's runtime, then PyTorch: IREE's runtime
    opens its own Vulkan device in this process, which is left out of our runs."""
    import amdgpu

    dev = amdgpu.open("vulkan")
    out: dict = {"device": f"{dev.name} ({dev.spec})", "path": dev.path}
    for i, label in enumerate(("ours", "iree", "torch")):
        for name in names:
            fn = _columns(name)[i]
            args = (dev, name, d / name, repeat) if label == "ours" else (name, d / name, repeat)
            row = out.setdefault(name, {})
            try:
                row.update(fn(*args))
            except Exception as exc:  # noqa: BLE001 - one line per failing column, go on
                row[f"{label}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            print(f"{name} {label}: " + ", ".join(f"{k} {v}" for k, v in row.items()
                                                  if k.startswith(label)), flush=True)
    out["matmulinteger"] = matmulinteger(dev, d)  # correctness only, after the timings
    return out


def table(out: dict, names: list[str]) -> str:
    """The per-call medians as one short table (the last lines a device call returns)."""
    rows = [("ours replayed", "ours_replay_us"), ("ours immediate", "ours_immediate_us"),
            ("IREE runtime", "iree_us"), ("PyTorch eager", "torch_us")]
    lines = ["per call (us)".ljust(16) + "".join(n.rjust(17) for n in names)]
    for label, key in rows:
        cells = []
        for n in names:
            v = out.get(n, {}).get(key)
            cells.append(f"{v:.1f}".rjust(17) if isinstance(v, float) else "-".rjust(17))
        lines.append(label.ljust(16) + "".join(cells))
    for n in names:
        r = out.get(n, {})
        t = r.get("torch_us")
        ratio = (f", ours/PyTorch {r['ours_replay_us'] / t:.2f}x" if isinstance(t, float)
                 and isinstance(r.get("ours_replay_us"), float) else "")
        ok = {k: v for k, v in r.items() if k.endswith("correct") or k.endswith("error")}
        lines.append(f"{n}: {r.get('dispatches', '?')} dispatches{ratio}; {ok}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path, help="export, compile and save into this folder")
    ap.add_argument("--bundle-dir", type=Path, help="folder made by --save")
    ap.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)} (default: "
                    "all; on the GPU machine, all that --save put in the folder)")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    names = [n for n in (args.models or "").split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model {unknown[0]!r}: choose from {', '.join(MODELS)}")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        save(args.save, names)
        return 0
    if not args.bundle_dir:
        ap.error("give --save DIR (here) or --bundle-dir DIR (on the GPU machine)")
    names = [n for n in names if (args.bundle_dir / n).is_dir()]
    if not names:
        ap.error(f"{args.bundle_dir} holds no model folder made by --save")
    out = run(args.bundle_dir, args.repeat, names)
    print(json.dumps(out, indent=1))
    print(table(out, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
