"""Regenerates the foreign code objects in this folder (Triton and hipcc builds).

NOT run by CI, and not imported by any test: it needs Triton (`pip install triton`, which
brings its own LLVM and linker; no GPU needed) and Debian's `hipcc` (clang 15, ROCm 5.2).
The tests only read the committed outputs and `manifest.json`. Run it from anywhere:

    python3 -m venv /tmp/triton-venv && /tmp/triton-venv/bin/pip install triton
    apt-get install --no-install-recommends hipcc
    HIP_PLATFORM=amd /tmp/triton-venv/bin/python tests/data/codeobjects/make_fixtures.py

See README.md here for what each file is and the versions that built the committed ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# --- Triton -------------------------------------------------------------------------------
TRITON_TARGETS = [("gfx942", 64), ("gfx1100", 32), ("gfx1201", 32), ("gfx1250", 32)]


def _triton_kernels() -> list[tuple]:
    """(fixture stem, jit function, signature, constexprs, options), defined lazily so the
    module imports without Triton."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(x, axis=0))

    @triton.jit
    def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
        # Row-major fp16 A (M x K), B (K x N), fp32 C (M x N); a 2-D grid of BM x BN tiles.
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :],
                        mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :],
                        mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    vec = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "stride": "i32",
           "BLOCK": "constexpr"}
    return [
        ("triton_add", add_kernel,
         {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32",
          "BLOCK": "constexpr"}, {"BLOCK": 256}, {"num_warps": 4}),
        ("triton_row_sum", row_sum_kernel, vec, {"BLOCK": 128}, {"num_warps": 4}),
        ("triton_softmax", softmax_kernel, vec, {"BLOCK": 64}, {"num_warps": 2}),
        ("triton_matmul", matmul_kernel,
         {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
          "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
         {"BM": 32, "BN": 32, "BK": 16}, {"num_warps": 4}),
    ]


def make_triton() -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9 warns when it is unset
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")  # no build paths in the objects
    facts = {}
    for stem, fn, signature, constexprs, options in _triton_kernels():
        for arch, warp_size in TRITON_TARGETS:
            src = triton.compiler.ASTSource(fn, signature=signature, constexprs=constexprs)
            compiled = triton.compile(src, target=GPUTarget("hip", arch, warp_size),
                                      options=options)
            name = f"{stem}_{arch}.hsaco"
            (HERE / name).write_bytes(compiled.asm["hsaco"])
            md = compiled.metadata
            # What Triton's launcher uses besides the code object: the workgroup is
            # num_warps waves, `shared` bytes of LDS are dynamic (the packet's
            # group_segment_size), and two scratch pointers follow the user's arguments.
            facts[name] = {
                "kernel": md.name,
                "arch": arch,
                "warp_size": md.warp_size,
                "num_warps": md.num_warps,
                "shared": md.shared,
                "global_scratch_size": md.global_scratch_size,
                "profile_scratch_size": md.profile_scratch_size,
                "args": [[k, v] for k, v in signature.items() if v != "constexpr"],
                "constexprs": constexprs,
            }
    return {"triton": triton.__version__, "kernels": facts}


# --- hipcc --------------------------------------------------------------------------------
# Debian's ROCm 5.2 device library has no gfx11 bitcode, so the gfx1100 build passes
# -nogpulib and takes indices from clang builtins instead of the ockl functions.
HIP_BUILTINS = r"""
#include <hip/hip_runtime.h>

__device__ inline void block_barrier() {  // __syncthreads without the device library
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

extern "C" __global__ void hip_saxpy(float a, const float* __restrict__ x,
                                     float* __restrict__ y, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() +
          __builtin_amdgcn_workitem_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}

// One sum per 64-item block, through LDS and barriers.
extern "C" __global__ void __launch_bounds__(64)
hip_block_sum(const float* __restrict__ x, float* __restrict__ out) {
  __shared__ float part[64];
  unsigned t = __builtin_amdgcn_workitem_id_x();
  unsigned b = __builtin_amdgcn_workgroup_id_x();
  part[t] = x[b * 64 + t];
  block_barrier();
  for (unsigned s = 32; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    block_barrier();
  }
  if (t == 0) out[b] = part[0];
}
"""

# Plain HIP (blockIdx, blockDim: the device library's ockl), for targets ROCm 5.2 knows.
HIP_PLAIN = r"""
#include <hip/hip_runtime.h>

extern "C" __global__ void saxpy(float a, const float* __restrict__ x,
                                 float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""

# System-scope atomics and fences (issue 32): LLVM's memory model emits cache write-back and
# invalidate instructions for them on every family.
HIP_MEMORY_MODEL = r"""
#include <hip/hip_runtime.h>

// System-scope atomics and fences: what LLVM's AMDGPU memory model turns into cache
// write-back and invalidate instructions (buffer_wbl2/buffer_invl2 on gfx90a, buffer_wbl2
// sc0 sc1/buffer_inv sc0 sc1 on gfx940, buffer_gl0_inv/buffer_gl1_inv on gfx1100).
extern "C" __global__ void __launch_bounds__(256)
hip_system_atomics(int* counters, float* fsum, unsigned* maxv, const int* x, int* out, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  if (i >= n) return;
  int v = x[i];
  __hip_atomic_fetch_add(&counters[0], 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_fetch_add(&counters[1], v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_fetch_max(&maxv[0], (unsigned)v, __ATOMIC_SEQ_CST, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_fetch_add(&fsum[0], (float)(v & 7), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "");  // a system-scope fence
  int old = __hip_atomic_exchange(&out[i], v * 2, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
  out[n + i] = __hip_atomic_load(&out[i], __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM) + old;
}
"""

# Cooperative groups' grid sync (issue 32): HIP 5.2 lowers grid.sync() on gfx90a to
# ds_gws_barrier (global wave sync) between workgroup barriers.
HIP_GRID_SYNC = r"""
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void grid_sum(const int* x, int* partial, int* out, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) partial[blockIdx.x] = 0;
  grid.sync();
  if (i < n) atomicAdd(&partial[blockIdx.x], x[i]);
  grid.sync();
  if (i == 0) { int s = 0; for (unsigned b = 0; b < gridDim.x; ++b) s += partial[b]; out[0] = s; }
}
"""

# A 2D convolution shaped like ROCm's public convolution sample (issue 32's "4096x4096
# convolution did not finish"): a 5x5 mask in __constant__ memory (s_getpc + s_load of the
# symbol), a zero-padded input read as dwordx4 windows at dword addresses, size_t indexing,
# and a bounds check that ends the work-items of the grid's partial blocks at s_endpgm.
HIP_CONVOLUTION = r"""
#include <hip/hip_runtime.h>

__constant__ float conv_mask[5 * 5];

extern "C" __global__ void convolution_5x5(const float* padded, float* out, uint2 size) {
  const size_t x = blockDim.x * blockIdx.x + threadIdx.x;
  const size_t y = blockDim.y * blockIdx.y + threadIdx.y;
  const size_t width = size.x, height = size.y, pitch = width + 4;  // 2 a side of padding
  if (x >= width || y >= height) return;
  float sum = 0.0f;
  for (size_t my = 0; my < 5; ++my)
    for (size_t mx = 0; mx < 5; ++mx)
      sum += padded[(y + my) * pitch + x + mx] * conv_mask[my * 5 + mx];
  out[y * width + x] = sum;
}
"""

HIP_BUILDS = [
    ("hipcc_builtins.hsaco", HIP_BUILTINS,
     ["--offload-arch=gfx1100", "--offload-arch=gfx90a", "-nogpulib",
      "-mcode-object-version=5"]),
    ("hipcc_saxpy.hsaco", HIP_PLAIN, ["--offload-arch=gfx1030", "--offload-arch=gfx90a"]),
    ("hipcc_grid_sync.hsaco", HIP_GRID_SYNC, ["--offload-arch=gfx90a"]),
    ("hipcc_memory_model.hsaco", HIP_MEMORY_MODEL,
     ["--offload-arch=gfx90a", "--offload-arch=gfx940", "--offload-arch=gfx1100", "-nogpulib",
      "-mcode-object-version=5"]),
    ("hipcc_convolution.hsaco", HIP_CONVOLUTION, ["--offload-arch=gfx90a"]),
]


def make_hipcc() -> dict:
    env = dict(os.environ, HIP_PLATFORM="amd")  # a CUDA install would make hipcc use nvcc
    builds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, source, flags in HIP_BUILDS:
            src = Path(tmp) / (Path(name).stem + ".hip")
            src.write_text(source)
            cmd = ["hipcc", "--genco", "-O2", *flags, "-o", str(HERE / name), str(src)]
            subprocess.run(cmd, check=True, env=env)
            builds[name] = {"command": " ".join(["hipcc", "--genco", "-O2", *flags, "-o", name,
                                                 src.name])}
    version = subprocess.run(["hipcc", "--version"], capture_output=True, text=True, env=env)
    first = next((ln for ln in version.stdout.splitlines() if ln.startswith("HIP version")), "")
    return {"hip": first.split(":", 1)[-1].strip(), "builds": builds}


def main() -> int:
    if sys.argv[1:] == ["--hipcc"]:  # the hipcc builds only (no Triton needed)
        manifest = json.loads((HERE / "manifest.json").read_text())
        manifest["hipcc"] = make_hipcc()
    else:
        manifest = {"triton": make_triton(), "hipcc": make_hipcc()}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for path in sorted(HERE.glob("*.hsaco")):
        print(f"{path.name}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
