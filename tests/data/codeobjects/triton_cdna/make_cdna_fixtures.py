"""Regenerates the CDNA Triton fixtures in this folder (gfx942 and gfx950 code objects).

NOT run by CI, and not imported by any test: it needs Triton 3.9 (`pip install triton`,
which brings its own LLVM and linker; no GPU needed). The tests (tests/test_gfx9_triton.py)
only read the committed .hsaco files and manifest.json. Run it from anywhere:

    python3 -m venv /work/triton-venv && /work/triton-venv/bin/pip install triton
    /work/triton-venv/bin/python tests/data/codeobjects/triton_cdna/make_cdna_fixtures.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = ("gfx942", "gfx950")


def _kernels() -> list[tuple]:
    """(stem, jit function, signature, constexprs, options), defined lazily so the module
    imports without Triton."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs,
                                                                               mask=mask),
                 mask=mask)

    @triton.jit
    def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)

    @triton.jit
    def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride, eps,
                          BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(mask, x - mean, 0.0)
        rstd = 1 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(out_ptr + row * stride + offs, xc * rstd * w + b, mask=mask)

    @triton.jit
    def histogram_kernel(x_ptr, bins_ptr, total_ptr, n, n_bins, BLOCK: tl.constexpr):
        # atomics: one global counter per bin, and a float total
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0)
        tl.atomic_add(bins_ptr + (x % n_bins), 1, mask=mask)
        tl.atomic_add(total_ptr, tl.sum(tl.where(mask, x, 0).to(tl.float32), axis=0))

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, PRECISION: tl.constexpr):
        # row-major A (M x K), B (K x N); C (M x N) in the accumulator's type
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=c_ptr.dtype.element_ty)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :],
                        mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :],
                        mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0)
            acc += tl.dot(a, b, input_precision=PRECISION, out_dtype=acc.dtype)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    def mm(a: str, c: str, precision: str) -> tuple:
        sig = {"a_ptr": a, "b_ptr": a, "c_ptr": c, "M": "i32", "N": "i32", "K": "i32",
               "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
               "PRECISION": "constexpr"}
        return sig, {"BM": 32, "BN": 32, "BK": 32, "PRECISION": precision}

    row = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "stride": "i32",
           "BLOCK": "constexpr"}
    return [
        ("add", add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                             "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256},
         {"num_warps": 4}),
        ("softmax", softmax_kernel, row, {"BLOCK": 128}, {"num_warps": 2}),
        ("layer_norm", layer_norm_kernel,
         {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32",
          "n_cols": "i32", "stride": "i32", "eps": "fp32", "BLOCK": "constexpr"},
         {"BLOCK": 256}, {"num_warps": 4}),
        ("histogram", histogram_kernel,
         {"x_ptr": "*i32", "bins_ptr": "*i32", "total_ptr": "*fp32", "n": "i32",
          "n_bins": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}, {"num_warps": 4}),
        ("matmul_f16", matmul_kernel, *mm("*fp16", "*fp32", "ieee"), {"num_warps": 4}),
        ("matmul_f32", matmul_kernel, *mm("*fp32", "*fp32", "ieee"), {"num_warps": 4}),
        ("matmul_i8", matmul_kernel, *mm("*i8", "*i32", "ieee"), {"num_warps": 4}),
    ]


def main() -> None:
    import triton
    from triton.backends.compiler import GPUTarget

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")  # no build paths in the objects
    facts = {}
    for stem, fn, signature, constexprs, options in _kernels():
        for arch in TARGETS:
            src = triton.compiler.ASTSource(fn, signature=signature, constexprs=constexprs)
            compiled = triton.compile(src, target=GPUTarget("hip", arch, 64), options=options)
            name = f"{stem}_{arch}.hsaco"
            (HERE / name).write_bytes(compiled.asm["hsaco"])
            md = compiled.metadata
            facts[name] = {
                "kernel": md.name, "arch": arch, "warp_size": md.warp_size,
                "num_warps": md.num_warps, "shared": md.shared,
                "global_scratch_size": md.global_scratch_size,
                "profile_scratch_size": md.profile_scratch_size,
                "args": [[k, v] for k, v in signature.items() if v != "constexpr"],
                "constexprs": constexprs,
            }
            print(f"{name}: {len(compiled.asm['hsaco'])} bytes, shared {md.shared}")
    manifest = {"triton": triton.__version__, "kernels": facts}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
