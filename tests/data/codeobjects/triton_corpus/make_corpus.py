"""Regenerates the Triton corpus in this folder: tutorial-style kernels for gfx1100 and gfx1201.

NOT run by CI and not imported by any test: it needs Triton 3.9 (`pip install triton`; no GPU
needed). The tests (tests/test_gfx11_triton_corpus.py) read the committed `*.hsaco` files and
`corpus.json`. Run it from anywhere:

    /work/triton-venv/bin/python tests/data/codeobjects/triton_corpus/make_corpus.py \
        [--arch gfx1100|gfx1201] [stem ...]

Each kernel is compiled the way Triton's JIT compiles it when called with torch tensors on
a ROCm GPU: every pointer argument gets `tt.divisibility 16` (torch allocations are
16-byte aligned) and `tt.pointer_range 32` (the storage is under 2 GiB, which switches on
buffer loads and stores), and every integer argument the test passes as a multiple of 16
gets `tt.divisibility 16`. `corpus.json` records those hints so that a test can check
that its arguments satisfy them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARCHS = ("gfx1100", "gfx1201")  # both wave32; `--arch X` builds one of them
WARP = 32


def kernels() -> list[dict]:
    import triton
    import triton.language as tl

    @triton.jit
    def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def vector_add_f16(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * 2.0 + y, mask=mask)

    @triton.jit
    def fused_softmax(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols,
                      BLOCK: tl.constexpr):
        start = tl.program_id(0)
        step = tl.num_programs(0)
        for row in tl.range(start, n_rows, step):
            offs = tl.arange(0, BLOCK)
            mask = offs < n_cols
            x = tl.load(in_ptr + row * in_stride + offs, mask=mask, other=-float("inf"))
            x = x - tl.max(x, axis=0)
            e = tl.exp(x)
            tl.store(out_ptr + row * out_stride + offs, e / tl.sum(e, axis=0), mask=mask)

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        # the tutorial's grouped ordering of output tiles
        pid = tl.program_id(0)
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        width = GROUP * npn
        gid = pid // width
        first = gid * GROUP
        gsize = min(npm - first, GROUP)
        pm = first + ((pid % width) % gsize)
        pn = (pid % width) // gsize
        rm = (pm * BM + tl.arange(0, BM)) % M
        rn = (pn * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
        b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        cm = pm * BM + tl.arange(0, BM)
        cn = pn * BN + tl.arange(0, BN)
        c = acc.to(c_ptr.dtype.element_ty)
        tl.store(c_ptr + cm[:, None] * scm + cn[None, :] * scn, c,
                 mask=(cm[:, None] < M) & (cn[None, :] < N))

    @triton.jit
    def int8_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr):
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.int32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def layer_norm(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps,
                   BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x_ptr += row * stride
        y_ptr += row * stride
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            x = tl.where(cols < N, x - mean, 0.0)
            acc += x * x
        rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            w = tl.load(w_ptr + cols, mask=mask)
            b = tl.load(b_ptr + cols, mask=mask)
            x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty),
                     mask=mask)

    @triton.jit
    def dropout(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        keep = tl.rand(seed, offs) > p
        tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)

    @triton.jit
    def attention_fwd(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, D: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr):
        # one head, row-major (seq, D) fp16 tensors; online softmax as in the tutorial
        start_m = tl.program_id(0)
        rm = start_m * BM + tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(q_ptr + rm[:, None] * D + rd[None, :], mask=rm[:, None] < seq, other=0.0)
        m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BM], dtype=tl.float32)
        acc = tl.zeros([BM, D], dtype=tl.float32)
        for start_n in range(0, seq, BN):
            rn = start_n + tl.arange(0, BN)
            k = tl.load(k_ptr + rn[None, :] * D + rd[:, None], mask=rn[None, :] < seq, other=0.0)
            s = tl.dot(q, k) * scale
            s = tl.where(rn[None, :] < seq, s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + rn[:, None] * D + rd[None, :], mask=rn[:, None] < seq, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
            m_i = m_new
        out = acc / l_i[:, None]
        tl.store(o_ptr + rm[:, None] * D + rd[None, :], out.to(tl.float16),
                 mask=rm[:, None] < seq)

    @triton.jit
    def atomic_histogram(x_ptr, hist_ptr, total_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0)
        tl.atomic_add(hist_ptr + (x & 15), 1, mask=mask)
        tl.atomic_add(total_ptr, tl.sum(tl.where(mask, x, 0), axis=0))
        tl.atomic_max(total_ptr + 1, tl.max(tl.where(mask, x, 0), axis=0))

    @triton.jit
    def argmax_rows(x_ptr, idx_ptr, max_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf"))
        value, index = tl.max(x, axis=0, return_indices=True)
        tl.store(idx_ptr + row, index)
        tl.store(max_ptr + row, value)

    @triton.jit
    def cumsum_rows(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0)
        tl.store(out_ptr + row * stride + offs, tl.cumsum(x, axis=0), mask=mask)

    @triton.jit
    def masked_transpose(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)
        tl.store(out_ptr + rn[None, :] * M + rm[:, None], x, mask=mask)

    @triton.jit
    def gelu_bf16(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        y = 0.5 * x * (1 + tl.erf(x * 0.7071067811865476))
        tl.store(out_ptr + offs, y.to(tl.bfloat16), mask=mask)

    @triton.jit
    def row_stats(x_ptr, min_ptr, max_ptr, sumsq_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0)
        tl.store(min_ptr + row, tl.min(tl.where(mask, x, float("inf")), axis=0))
        tl.store(max_ptr + row, tl.max(tl.where(mask, x, -float("inf")), axis=0))
        tl.store(sumsq_ptr + row, tl.sum(x * x, axis=0))

    @triton.jit
    def int_ops(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        # integer division, remainder, shifts and a 64-bit widen: i32 and i64 paths
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=1)
        y = tl.load(y_ptr + offs, mask=mask, other=1)
        r = (x // y) * 3 + (x % y) - (x >> 2) + (y << 1)
        wide = x.to(tl.int64) * y.to(tl.int64)
        tl.store(out_ptr + offs, r.to(tl.int64) + wide, mask=mask)

    P = {"tt.divisibility": 16, "tt.pointer_range": 32}
    D = {"tt.divisibility": 16}
    f32p, f16p = "*fp32", "*fp16"
    return [
        dict(stem="vector_add", fn=vector_add, num_warps=4,
             sig=dict(x_ptr=(f32p, P), y_ptr=(f32p, P), out_ptr=(f32p, P), n=("i32", {})),
             constexprs=dict(BLOCK=256)),
        dict(stem="vector_add_f16", fn=vector_add_f16, num_warps=2,
             sig=dict(x_ptr=(f16p, P), y_ptr=(f16p, P), out_ptr=(f16p, P), n=("i32", D)),
             constexprs=dict(BLOCK=512)),
        dict(stem="fused_softmax", fn=fused_softmax, num_warps=4,
             sig=dict(out_ptr=(f32p, P), in_ptr=(f32p, P), in_stride=("i32", D),
                      out_stride=("i32", D), n_rows=("i32", {}), n_cols=("i32", {})),
             constexprs=dict(BLOCK=128)),
        dict(stem="matmul_f16", fn=matmul, num_warps=4,
             sig=dict(a_ptr=(f16p, P), b_ptr=(f16p, P), c_ptr=(f16p, P), M=("i32", D),
                      N=("i32", D), K=("i32", D), sam=("i32", D), sak=("i32", {}),
                      sbk=("i32", D), sbn=("i32", {}), scm=("i32", D), scn=("i32", {})),
             constexprs=dict(BM=32, BN=32, BK=32, GROUP=4)),
        dict(stem="matmul_f32", fn=matmul, num_warps=4,
             sig=dict(a_ptr=(f32p, P), b_ptr=(f32p, P), c_ptr=(f32p, P), M=("i32", {}),
                      N=("i32", {}), K=("i32", {}), sam=("i32", {}), sak=("i32", {}),
                      sbk=("i32", {}), sbn=("i32", {}), scm=("i32", {}), scn=("i32", {})),
             constexprs=dict(BM=32, BN=32, BK=16, GROUP=2)),
        dict(stem="int8_matmul", fn=int8_matmul, num_warps=4,
             sig=dict(a_ptr=("*i8", P), b_ptr=("*i8", P), c_ptr=("*i32", P), M=("i32", D),
                      N=("i32", D), K=("i32", D)),
             constexprs=dict(BM=32, BN=32, BK=32)),
        dict(stem="layer_norm", fn=layer_norm, num_warps=4,
             sig=dict(x_ptr=(f16p, P), y_ptr=(f16p, P), w_ptr=(f16p, P), b_ptr=(f16p, P),
                      mean_ptr=(f32p, P), rstd_ptr=(f32p, P), stride=("i32", D),
                      N=("i32", {}), eps=("fp32", {})),
             constexprs=dict(BLOCK=256)),
        dict(stem="dropout", fn=dropout, num_warps=4,
             sig=dict(x_ptr=(f32p, P), out_ptr=(f32p, P), n=("i32", {}), p=("fp32", {}),
                      seed=("i32", {})),
             constexprs=dict(BLOCK=256)),
        dict(stem="attention_fwd", fn=attention_fwd, num_warps=4,
             sig=dict(q_ptr=(f16p, P), k_ptr=(f16p, P), v_ptr=(f16p, P), o_ptr=(f16p, P),
                      seq=("i32", {}), scale=("fp32", {})),
             constexprs=dict(D=32, BM=32, BN=32)),
        dict(stem="atomic_histogram", fn=atomic_histogram, num_warps=4,
             sig=dict(x_ptr=("*i32", P), hist_ptr=("*i32", P), total_ptr=("*i32", P),
                      n=("i32", {})),
             constexprs=dict(BLOCK=256)),
        dict(stem="argmax_rows", fn=argmax_rows, num_warps=2,
             sig=dict(x_ptr=(f32p, P), idx_ptr=("*i32", P), max_ptr=(f32p, P),
                      n_cols=("i32", {}), stride=("i32", D)),
             constexprs=dict(BLOCK=128)),
        dict(stem="cumsum_rows", fn=cumsum_rows, num_warps=2,
             sig=dict(x_ptr=("*i32", P), out_ptr=("*i32", P), n_cols=("i32", {}),
                      stride=("i32", D)),
             constexprs=dict(BLOCK=128)),
        dict(stem="masked_transpose", fn=masked_transpose, num_warps=4,
             sig=dict(x_ptr=(f32p, P), out_ptr=(f32p, P), M=("i32", {}), N=("i32", {})),
             constexprs=dict(BM=32, BN=32)),
        dict(stem="gelu_bf16", fn=gelu_bf16, num_warps=4,
             sig=dict(x_ptr=("*bf16", P), out_ptr=("*bf16", P), n=("i32", {})),
             constexprs=dict(BLOCK=256)),
        dict(stem="row_stats", fn=row_stats, num_warps=2,
             sig=dict(x_ptr=(f32p, P), min_ptr=(f32p, P), max_ptr=(f32p, P),
                      sumsq_ptr=(f32p, P), n_cols=("i32", {}), stride=("i32", D)),
             constexprs=dict(BLOCK=128)),
        dict(stem="int_ops", fn=int_ops, num_warps=4,
             sig=dict(x_ptr=("*i32", P), y_ptr=("*i32", P), out_ptr=("*i64", P),
                      n=("i32", {})),
             constexprs=dict(BLOCK=256)),
    ]


def main() -> int:
    import triton
    from triton.backends.compiler import GPUTarget

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
    facts = {}
    args = sys.argv[1:]
    archs = ARCHS
    if "--arch" in args:
        i = args.index("--arch")
        archs, args = (args[i + 1],), args[:i] + args[i + 2:]
    only = set(args)
    for arch in archs:
        facts.update(build(triton, GPUTarget, arch, only))
    path = HERE / "corpus.json"
    old = json.loads(path.read_text())["kernels"] if path.exists() else {}
    old.update(facts)
    path.write_text(json.dumps({"triton": triton.__version__, "archs": list(ARCHS),
                                "kernels": dict(sorted(old.items()))}, indent=1) + "\n")
    return 0


def build(triton, GPUTarget, ARCH: str, only: set[str]) -> dict:  # noqa: N803
    facts = {}
    for k in kernels():
        if only and k["stem"] not in only:
            continue
        names = list(k["sig"]) + list(k["constexprs"])
        signature = {a: t for a, (t, _) in k["sig"].items()}
        signature.update({c: "constexpr" for c in k["constexprs"]})
        attrs = {(names.index(a),): [[key, val] for key, val in hints.items()]
                 for a, (_, hints) in k["sig"].items() if hints}
        src = triton.compiler.ASTSource(k["fn"], signature=signature,
                                        constexprs=k["constexprs"], attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget("hip", ARCH, WARP),
                                  options={"num_warps": k["num_warps"]})
        name = f"{k['stem']}_{ARCH}.hsaco"
        (HERE / name).write_bytes(compiled.asm["hsaco"])
        md = compiled.metadata
        facts[name] = {
            "kernel": md.name, "warp_size": md.warp_size, "num_warps": md.num_warps,
            "shared": md.shared, "global_scratch_size": md.global_scratch_size,
            "profile_scratch_size": md.profile_scratch_size,
            "args": [[a, t, sorted(h)] for a, (t, h) in k["sig"].items()],
            "constexprs": k["constexprs"],
        }
        print(f"{name}: {len(compiled.asm['hsaco'])} bytes, shared {md.shared}")
    return facts


if __name__ == "__main__":
    sys.exit(main())
