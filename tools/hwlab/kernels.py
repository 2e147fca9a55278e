"""The kernels hwlab's level checks time, as MLIR for IREE (through the project's compiler
front end, `compiler.compile`, so the same source runs on every HSA target and on Vulkan):

  triad(a, x, y) = a * x + y over f32[n]   STREAM's triad: 12 bytes moved per element
  gemm(A, B)     = A @ B, n x n, DTYPE in, f32 accumulated and out: 2 n^3 flops

They are generated per size (IREE compiles static shapes) into a folder of the temp dir;
`compiler.compile` caches the code objects by source content.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

MLIR_DTYPES = ("f32", "f16", "bf16")


def _write(name: str, text: str) -> Path:
    folder = Path(tempfile.gettempdir()) / "hwlab-kernels"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.mlir"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)  # several hwlab processes may share the folder
    return path


def triad_source(n: int) -> Path:
    t = f"tensor<{n}xf32>"
    return _write(f"hwlab_triad_{n}", f"""\
#scalar = affine_map<(d0) -> ()>
#id = affine_map<(d0) -> (d0)>
func.func @triad(%a: tensor<f32>, %x: {t}, %y: {t}) -> {t} {{
  %init = tensor.empty() : {t}
  %r = linalg.generic {{indexing_maps = [#scalar, #id, #id, #id],
                       iterator_types = ["parallel"]}}
      ins(%a, %x, %y : tensor<f32>, {t}, {t}) outs(%init : {t}) {{
  ^bb0(%s: f32, %xi: f32, %yi: f32, %out: f32):
    %m = arith.mulf %s, %xi : f32
    %v = arith.addf %m, %yi : f32
    linalg.yield %v : f32
  }} -> {t}
  return %r : {t}
}}
""")


def gemm_source(n: int, dtype: str) -> Path:
    if dtype not in MLIR_DTYPES:
        raise ValueError(f"gemm dtype {dtype!r}: use one of {', '.join(MLIR_DTYPES)}")
    a, c = f"tensor<{n}x{n}x{dtype}>", f"tensor<{n}x{n}xf32>"
    return _write(f"hwlab_gemm_{dtype}_{n}", f"""\
func.func @gemm(%a: {a}, %b: {a}) -> {c} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {c}
  %init = linalg.fill ins(%zero : f32) outs(%empty : {c}) -> {c}
  %r = linalg.matmul ins(%a, %b : {a}, {a}) outs(%init : {c}) -> {c}
  return %r : {c}
}}
""")


def numpy_dtype(dtype: str):
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16}[dtype]


def runner(device, path: Path):
    """A ProgramRunner for `path` compiled for this device (its target, or SPIR-V)."""
    import compiler
    from amdgpu.program import ProgramRunner

    targets = ["vulkan"] if device.backend == "vulkan" else [device.target]
    return ProgramRunner(device, compiler.compile(path, targets=targets))
