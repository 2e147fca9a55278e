"""The kernel library: MLIR programs (IREE) and OpenCL C kernels (clang) shipped in
compiler/kernels/, with their shapes, example inputs and numpy references.

MLIR programs (static shapes; compile for AMD targets and Vulkan):
  saxpy       y = a*x + y, a: f32[] (a 0-d tensor), x, y: f32[1024]
  chain_<N>   N dependent dispatches of x + 1 over f32[4096] (generated; chain_4 listed).
              Each step sits in its own `flow.dispatch.region`, so IREE keeps N dispatches
              in one command buffer with an execution barrier between them (an
              `util.optimization_barrier` would instead split the program into N host waits).
  reduction   row sums of f32[64, 256] -> f32[64]
  softmax     softmax over the last axis of f32[16, 256]
  matmul_f32  f32[64, 64] @ f32[64, 64]
  matmul_f16  f16[64, 64] @ f16[64, 64] -> f32[64, 64]
  mlp         relu(relu(x @ w1 + b1) @ w2 + b2): x f32[16, 64], w1 [64, 128], b1 [128],
              w2 [128, 32], b2 [32] -> f32[16, 32] (IREE fuses bias+relu: 2 dispatches)

OpenCL C kernels (AMD targets only; `args` in order, pointers are device buffers):
  fill(out: float*, value: float, n: uint)
  copy(dst: uint*, src: const uint*, n: uint)
  saxpy_hidden(y: float*, x: const float*, a: float, n: uint)   grid-stride loop over hidden
              group size x block count, so any grid covers all n elements
  lds_reduce(out: float*, in: const float*, n: uint, groups_done: uint*)   block must be 256;
              out[g] = sum of in[256g : 256g+256], *groups_done += number of groups
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ground.errors import CompileError

__all__ = [
    "KERNEL_DIR",
    "KernelSpec",
    "names",
    "mlir_names",
    "opencl_names",
    "is_library_name",
    "kind",
    "source",
    "path",
    "spec",
    "example_inputs",
    "reference",
    "chain_source",
    "gemm_source",
]

KERNEL_DIR = Path(__file__).with_name("kernels")
CHAIN_DEFAULT = 4
CHAIN_ELEMENTS = 4096
_CHAIN = re.compile(r"^chain_(\d+)$")
_MLIR = ("saxpy", "chain_4", "reduction", "softmax", "matmul_f32", "matmul_f16", "mlp")
_OPENCL = ("fill", "copy", "saxpy_hidden", "lds_reduce")


@dataclass(frozen=True)
class KernelSpec:
    """What a caller needs to run a library kernel without reading its source."""

    name: str
    kind: str  # "mlir" | "opencl"
    # MLIR: the program's tensors, each {"shape": [...], "dtype": "float32"}.
    inputs: tuple[dict, ...] = ()
    outputs: tuple[dict, ...] = ()
    # OpenCL: the kernel symbol, its explicit arguments (name, kind) with kind
    # "buffer:<dtype>" or a scalar numpy dtype name, and a suggested launch.
    kernel: str | None = None
    args: tuple[tuple[str, str], ...] = ()
    block: int | None = None
    grid: int | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _t(shape: list[int], dtype: str = "float32") -> dict:
    return {"shape": list(shape), "dtype": dtype}


_SPECS: dict[str, KernelSpec] = {
    "saxpy": KernelSpec("saxpy", "mlir", (_t([]), _t([1024]), _t([1024])), (_t([1024]),)),
    "reduction": KernelSpec("reduction", "mlir", (_t([64, 256]),), (_t([64]),)),
    "softmax": KernelSpec("softmax", "mlir", (_t([16, 256]),), (_t([16, 256]),)),
    "matmul_f32": KernelSpec("matmul_f32", "mlir", (_t([64, 64]), _t([64, 64])),
                             (_t([64, 64]),)),
    "matmul_f16": KernelSpec("matmul_f16", "mlir", (_t([64, 64], "float16"),
                                                    _t([64, 64], "float16")), (_t([64, 64]),)),
    "mlp": KernelSpec("mlp", "mlir", (_t([16, 64]), _t([64, 128]), _t([128]), _t([128, 32]),
                                      _t([32])), (_t([16, 32]),)),
    "fill": KernelSpec("fill", "opencl", kernel="fill",
                       args=(("out", "buffer:float32"), ("value", "float32"), ("n", "uint32")),
                       block=256, grid=4096),
    "copy": KernelSpec("copy", "opencl", kernel="copy",
                       args=(("dst", "buffer:uint32"), ("src", "buffer:uint32"),
                             ("n", "uint32")), block=256, grid=4096),
    "saxpy_hidden": KernelSpec(
        "saxpy_hidden", "opencl", kernel="saxpy_hidden",
        args=(("y", "buffer:float32"), ("x", "buffer:float32"), ("a", "float32"),
              ("n", "uint32")),
        block=64, grid=256, notes="grid-stride loop: any grid covers n (here 4096)",
        extra={"n": 4096}),
    "lds_reduce": KernelSpec(
        "lds_reduce", "opencl", kernel="lds_reduce",
        args=(("out", "buffer:float32"), ("in", "buffer:float32"), ("n", "uint32"),
              ("groups_done", "buffer:uint32")),
        block=256, grid=4096, notes="block must be 256 (reqd_work_group_size)"),
}


def names() -> list[str]:
    """Every library kernel name (chain_4 stands for the chain_<N> family)."""
    return [*_MLIR, *_OPENCL]


def mlir_names() -> list[str]:
    return list(_MLIR)


def opencl_names() -> list[str]:
    return list(_OPENCL)


def _chain_length(name: str) -> int | None:
    match = _CHAIN.match(name)
    if match is None:
        return None
    n = int(match.group(1))
    if not 1 <= n <= 100_000:
        raise CompileError(f"chain length {n} is out of range; use chain_1 .. chain_100000")
    return n


def is_library_name(name: str) -> bool:
    return name in _SPECS or name == "chain" or _CHAIN.match(name) is not None


def _canonical(name: str) -> str:
    if name == "chain":
        return f"chain_{CHAIN_DEFAULT}"
    if not is_library_name(name):
        raise CompileError(
            f"{name!r} is not a file or a library kernel; library kernels: "
            f"{', '.join(names())} (chain_<N> for any N)"
        )
    return name


def kind(name: str) -> str:
    """"mlir" or "opencl"."""
    name = _canonical(name)
    return "mlir" if _chain_length(name) is not None else _SPECS[name].kind


def chain_source(n: int, elements: int = CHAIN_ELEMENTS) -> str:
    """MLIR for N dependent `x + 1` dispatches over f32[elements]."""
    ty = f"tensor<{elements}xf32>"
    lines = [
        f"// chain_{n}: {n} dependent dispatches of x + 1 (generated by compiler.library).",
        f"func.func @chain(%x: {ty}) -> {ty} {{",
        f"  %one = arith.constant dense<1.0> : {ty}",
    ]
    prev = "%x"
    for i in range(n):
        lines += [
            f"  %step{i} = flow.dispatch.region -> ({ty}) {{",
            f"    %next = arith.addf {prev}, %one : {ty}",
            f"    flow.return %next : {ty}",
            "  }",
        ]
        prev = f"%step{i}"
    lines += [f"  return {prev} : {ty}", "}"]
    return "\n".join(lines) + "\n"


def gemm_source(n: int, elem: str = "f16", func: str = "gemm") -> str:
    """MLIR for one n x n x n GEMM: `elem` inputs (an MLIR element type: f16, f8E4M3FN,
    ...) accumulated and returned in f32, as the executor's GEMM benchmark and the fp8
    GEMM tests compile it."""
    ab, c = f"tensor<{n}x{n}x{elem}>", f"tensor<{n}x{n}xf32>"
    return "\n".join([
        f"func.func @{func}(%a: {ab}, %b: {ab}) -> {c} {{",
        "  %c0 = arith.constant 0.0 : f32",
        f"  %e = tensor.empty() : {c}",
        f"  %f = linalg.fill ins(%c0 : f32) outs(%e : {c}) -> {c}",
        f"  %r = linalg.matmul ins(%a, %b : {ab}, {ab}) outs(%f : {c}) -> {c}",
        f"  return %r : {c}",
        "}",
    ]) + "\n"


def source(name: str) -> str:
    """The source text of a library kernel."""
    name = _canonical(name)
    n = _chain_length(name)
    if n is not None:
        return chain_source(n)
    return path(name).read_text()


def _generated_dir() -> Path:
    base = Path(tempfile.gettempdir()) / f"amdgpu-direct-kernels-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True)
    return base


def path(name: str) -> Path:
    """A file holding the kernel's source (generated kernels are written to a temp folder)."""
    name = _canonical(name)
    n = _chain_length(name)
    if n is None:
        suffix = ".mlir" if _SPECS[name].kind == "mlir" else ".cl"
        return KERNEL_DIR / f"{name}{suffix}"
    target = _generated_dir() / f"{name}.mlir"
    text = chain_source(n)
    if not target.exists() or target.read_text() != text:
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
    return target


def spec(name: str) -> KernelSpec:
    name = _canonical(name)
    n = _chain_length(name)
    if n is not None:
        return KernelSpec(name, "mlir", (_t([CHAIN_ELEMENTS]),), (_t([CHAIN_ELEMENTS]),),
                          extra={"dispatches": n})
    return _SPECS[name]


def example_inputs(name: str, seed: int = 0) -> list:
    """Deterministic example inputs (numpy arrays / scalars) in argument order.

    MLIR: one array per program input. OpenCL: one value per explicit argument, with
    output buffers pre-filled (zeros, or y for saxpy_hidden)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    s = spec(name)
    if s.kind == "mlir":
        out = []
        for t in s.inputs:
            arr = rng.standard_normal(t["shape"]).astype(t["dtype"])
            out.append(np.asarray(arr, dtype=t["dtype"]))
        return out
    if name == "fill":
        return [np.zeros(4096, np.float32), np.float32(3.5), np.uint32(4096)]
    if name == "copy":
        return [np.zeros(4096, np.uint32), rng.integers(0, 2**32, 4096, dtype=np.uint32),
                np.uint32(4096)]
    if name == "saxpy_hidden":
        n = s.extra["n"]
        return [rng.standard_normal(n).astype(np.float32),
                rng.standard_normal(n).astype(np.float32), np.float32(2.0), np.uint32(n)]
    if name == "lds_reduce":
        return [np.zeros(16, np.float32), rng.standard_normal(4096).astype(np.float32),
                np.uint32(4096), np.zeros(1, np.uint32)]
    raise CompileError(f"no example inputs for {name!r}")


def reference(name: str, *inputs):
    """The expected result, computed with numpy, for `inputs` as from example_inputs.

    MLIR: a list of output arrays. OpenCL: the list of arguments after the kernel ran
    (buffers updated, scalars unchanged)."""
    import numpy as np

    name = _canonical(name)
    n = _chain_length(name)
    if n is not None:
        return [(inputs[0].astype(np.float32) + np.float32(n)).astype(np.float32)]
    if name == "saxpy":
        a, x, y = inputs
        return [(np.float32(a) * x + y).astype(np.float32)]
    if name == "reduction":
        return [inputs[0].sum(axis=1, dtype=np.float32)]
    if name == "softmax":
        x = inputs[0].astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return [(e / e.sum(axis=1, keepdims=True)).astype(np.float32)]
    if name in ("matmul_f32", "matmul_f16"):
        a, b = inputs
        return [(a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)]
    if name == "mlp":
        x, w1, b1, w2, b2 = inputs
        h = np.maximum(x @ w1 + b1, 0).astype(np.float32)
        return [np.maximum(h @ w2 + b2, 0).astype(np.float32)]
    if name == "fill":
        out, value, count = inputs
        out = out.copy()
        out[: int(count)] = value
        return [out, value, count]
    if name == "copy":
        dst, src, count = inputs
        dst = dst.copy()
        dst[: int(count)] = src[: int(count)]
        return [dst, src, count]
    if name == "saxpy_hidden":
        y, x, a, count = inputs
        y = y.copy()
        k = int(count)
        y[:k] = (np.float32(a) * x[:k] + y[:k]).astype(np.float32)
        return [y, x, a, count]
    if name == "lds_reduce":
        out, data, count, done = inputs
        k = int(count)
        groups = -(-k // 256)
        padded = np.zeros(groups * 256, np.float32)
        padded[:k] = data[:k]
        out = out.copy()
        out[:groups] = padded.reshape(groups, 256).sum(axis=1, dtype=np.float32)
        return [out, data, count, done + np.uint32(groups)]
    raise CompileError(f"no reference for {name!r}")
