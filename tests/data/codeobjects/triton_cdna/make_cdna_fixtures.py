"""Regenerates the CDNA Triton fixtures in this folder (gfx942 and gfx950 code objects;
the attention kernels for gfx90a too). `make_cdna_fixtures.py [stem ...]` rebuilds some.

NOT run by CI, and not imported by any test: it needs Triton 3.9 (`pip install triton`,
which brings its own LLVM and linker; no GPU needed). The tests (tests/test_gfx9_triton.py)
only read the committed .hsaco files and manifest.json. Run it from anywhere:

    python3 -m venv /work/triton-venv && /work/triton-venv/bin/pip install triton
    /work/triton-venv/bin/python tests/data/codeobjects/triton_cdna/make_cdna_fixtures.py
"""

from __future__ import annotations

import json
import os
import sys
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

    @triton.jit
    def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, D: tl.constexpr,
                         BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
        # flash-attention forward as in Triton's tutorial: one (seq, D) fp16 head per
        # program_id(1), online softmax; causal: keys up to the query's position only
        start_m = tl.program_id(0)
        base = tl.program_id(1) * seq * D
        rm = start_m * BM + tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < seq,
                    other=0.0)
        m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BM], dtype=tl.float32)
        acc = tl.zeros([BM, D], dtype=tl.float32)
        hi = tl.minimum((start_m + 1) * BM, seq) if CAUSAL else seq
        for start_n in range(0, hi, BN):
            rn = start_n + tl.arange(0, BN)
            k = tl.load(k_ptr + base + rn[None, :] * D + rd[:, None], mask=rn[None, :] < seq,
                        other=0.0)
            s = tl.dot(q, k) * scale
            valid = rn[None, :] < seq
            if CAUSAL:
                valid = valid & (rm[:, None] >= rn[None, :])
            s = tl.where(valid, s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < seq,
                        other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
            m_i = m_new
        tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], (acc / l_i[:, None]).to(
            tl.float16), mask=rm[:, None] < seq)

    @triton.jit
    def _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, qk_scale, BM: tl.constexpr,
                    D: tl.constexpr, BN: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n,
                    N_CTX: tl.constexpr):
        # Triton's tutorial 06 (fused attention, with plain pointers): stage 1 the blocks
        # left of the diagonal, stage 2 the diagonal block (masked), 3 all (not causal)
        if STAGE == 1:
            lo, hi = 0, start_m * BM
        elif STAGE == 2:
            lo, hi = start_m * BM, (start_m + 1) * BM
            lo = tl.multiple_of(lo, BM)
        else:
            lo, hi = 0, N_CTX
        k_ptrs += lo * D
        v_ptrs += lo * D
        for start_n in range(lo, hi, BN):
            start_n = tl.multiple_of(start_n, BN)
            qk = tl.dot(q, tl.load(k_ptrs))
            if STAGE == 2:
                mask = offs_m[:, None] >= (start_n + offs_n[None, :])
                qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_ij[:, None]
            else:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(tl.float16), tl.load(v_ptrs), acc)
            m_i = m_ij
            v_ptrs += BN * D
            k_ptrs += BN * D
        return acc, l_i, m_i

    @triton.jit
    def attention_tutorial(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, N_CTX: tl.constexpr,
                           D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                           STAGE: tl.constexpr):
        start_m = tl.program_id(0)
        base = tl.program_id(1).to(tl.int64) * N_CTX * D
        offs_m = start_m * BM + tl.arange(0, BM)
        offs_n = tl.arange(0, BN)
        rd = tl.arange(0, D)
        q_ptrs = q_ptr + base + offs_m[:, None] * D + rd[None, :]
        k_ptrs = k_ptr + base + offs_n[None, :] * D + rd[:, None]  # (D, BN): K transposed
        v_ptrs = v_ptr + base + offs_n[:, None] * D + rd[None, :]
        o_ptrs = o_ptr + base + offs_m[:, None] * D + rd[None, :]
        m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BM], dtype=tl.float32) + 1.0
        acc = tl.zeros([BM, D], dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504
        q = tl.load(q_ptrs)
        if STAGE & 1:
            acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, qk_scale,
                                        BM, D, BN, 4 - STAGE, offs_m, offs_n, N_CTX)
        if STAGE & 2:
            acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, qk_scale,
                                        BM, D, BN, 2, offs_m, offs_n, N_CTX)
        tl.store(o_ptrs, (acc / l_i[:, None]).to(tl.float16))

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
    ] + [  # issue 32: gfx90a's causal attention was wrong (its non-causal right)
        (f"attention_{kind}", attention_kernel,
         {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
          "seq": "i32", "scale": "fp32", "D": "constexpr", "BM": "constexpr",
          "BN": "constexpr", "CAUSAL": "constexpr"},
         {"D": 64, "BM": 32, "BN": 32, "CAUSAL": kind == "causal"}, {"num_warps": 4},
         ("gfx90a", "gfx942", "gfx950")) for kind in ("causal", "full")
    ] + [
        (f"attention_tutorial_{kind}", attention_tutorial,
         {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
          "sm_scale": "fp32", "N_CTX": "constexpr", "D": "constexpr", "BM": "constexpr",
          "BN": "constexpr", "STAGE": "constexpr"},
         {"N_CTX": 128, "D": 64, "BM": 64, "BN": 32, "STAGE": 3 if kind == "causal" else 1},
         {"num_warps": 4}, ("gfx90a", "gfx942")) for kind in ("causal", "full")
    ]


def main() -> None:
    import triton
    from triton.backends.compiler import GPUTarget

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")  # no build paths in the objects
    only = set(sys.argv[1:])  # stems to rebuild (default: all)
    path = HERE / "manifest.json"
    facts = json.loads(path.read_text())["kernels"] if only and path.exists() else {}
    for stem, fn, signature, constexprs, options, *targets in _kernels():
        if only and stem not in only:
            continue
        for arch in (targets[0] if targets else TARGETS):
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
    manifest = {"triton": triton.__version__, "kernels": dict(sorted(facts.items()))}
    path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
