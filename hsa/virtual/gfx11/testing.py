"""A small harness that runs gfx1100 kernels on the executor with a bare MemoryMap.

It does what a loader and a packet processor do, and nothing more: map the PT_LOAD segments
of a code object into one allocation, apply R_AMDGPU_RELATIVE64 relocations, build the
kernarg segment from the kernel's metadata (explicit args, then the code object v5 hidden
args at their offsets), write a real AQL packet for the dispatch-ptr SGPRs, and call
`executor.run(Dispatch(...), memory)`. For tests and benchmarks of the executor alone.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hsa.abi.codeobject import CodeObject, KernelInfo, read_code_object
from hsa.abi.hidden_args import hidden_value
from hsa.virtual.executor import Dispatch
from hsa.virtual.gfx11 import shared_executor
from hsa.virtual.memory import MemoryMap

# OpenCL C kernels the executor tests run (clang, -O2, gfx1100, code object v5).
TEST_KERNELS_CL = r"""
#define GID_X (__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + \
               __builtin_amdgcn_workitem_id_x())
#define GID_Y (__builtin_amdgcn_workgroup_id_y() * __builtin_amdgcn_workgroup_size_y() + \
               __builtin_amdgcn_workitem_id_y())
#define GID_Z (__builtin_amdgcn_workgroup_id_z() * __builtin_amdgcn_workgroup_size_z() + \
               __builtin_amdgcn_workitem_id_z())
__kernel void fill(__global unsigned int *out, unsigned int value, unsigned int n) {
  unsigned int i = GID_X;
  if (i < n) out[i] = value;
}
__kernel void copy(__global unsigned int *dst, __global const unsigned int *src,
                   unsigned int n) {
  unsigned int i = GID_X;
  if (i < n) dst[i] = src[i];
}
__kernel void saxpy(__global float *y, __global const float *x, float a, unsigned int n) {
  unsigned int i = GID_X;
  if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void lds_reduce(__global float *out, __global const float *in, unsigned int n) {
  __local float tmp[256];
  unsigned int lid = __builtin_amdgcn_workitem_id_x();
  unsigned int bs = __builtin_amdgcn_workgroup_size_x();
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * bs + lid;
  tmp[lid] = i < n ? in[i] : 0.0f;
  __builtin_amdgcn_s_barrier();
  for (unsigned int s = bs / 2; s > 0; s >>= 1) {
    if (lid < s) tmp[lid] += tmp[lid + s];
    __builtin_amdgcn_s_barrier();
  }
  if (lid == 0) out[__builtin_amdgcn_workgroup_id_x()] = tmp[0];
}
/* tile[63 - l]: clang forms the LDS address as (0 - l) + offset:252, which only a 32-bit
 * wrap of vaddr + offset brings back inside the LDS (as the hardware forms it) */
__kernel void lds_reverse(__global unsigned int *out, __global const unsigned int *in) {
  __local unsigned int tile[64];
  unsigned int l = __builtin_amdgcn_workitem_id_x();  /* the block is 64 wide */
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * 64 + l;
  tile[l] = in[i];
  __builtin_amdgcn_s_barrier();
  out[i] = tile[63 - l];
}
__kernel void add2d(__global int *c, __global const int *a, __global const int *b,
                    unsigned int w, unsigned int h) {
  unsigned int x = GID_X, y = GID_Y;
  if (x < w && y < h) c[y * w + x] = a[y * w + x] * 3 + b[y * w + x] + (int)(x ^ y);
}
__kernel void idx3d(__global unsigned int *out, unsigned int w, unsigned int h,
                    unsigned int d) {
  unsigned int x = GID_X, y = GID_Y, z = GID_Z;
  if (x < w && y < h && z < d) out[(z * h + y) * w + x] = x | (y << 10) | (z << 20);
}
__kernel void int_ops(__global int *out, __global const int *a, __global const int *b,
                      unsigned int n) {
  unsigned int i = GID_X;
  if (i >= n) return;
  int x = a[i], y = b[i];
  unsigned int ux = (unsigned int)x, uy = (unsigned int)y;
  out[8 * i + 0] = x / (y | 1);
  out[8 * i + 1] = x % (y | 1);
  out[8 * i + 2] = (int)(ux / (uy | 1u));
  out[8 * i + 3] = (x > y ? x : y) - (x < y ? x : y);
  out[8 * i + 4] = (x >> (y & 31)) ^ (int)(ux >> (uy & 31));
  out[8 * i + 5] = (int)(((long)x * (long)y) >> 32);
  out[8 * i + 6] = x < y ? x * 7 : y - 3;
  out[8 * i + 7] = (int)((unsigned long)ux * (unsigned long)uy % 1000003ul);
}
__kernel void float_ops(__global float *out, __global const float *a, __global const float *b,
                        unsigned int n) {
  unsigned int i = GID_X;
  if (i >= n) return;
  float x = a[i], y = b[i];
  out[8 * i + 0] = x / y;
  out[8 * i + 1] = __builtin_sqrtf(__builtin_fabsf(x));
  out[8 * i + 2] = __builtin_floorf(x * 3.5f) + __builtin_ceilf(y);
  out[8 * i + 3] = (float)(int)(x * 100.0f);
  out[8 * i + 4] = __builtin_fmaxf(x, y) * __builtin_fminf(x, y);
  out[8 * i + 5] = __builtin_fmaf(x, y, 1.25f);
  out[8 * i + 6] = (float)(unsigned int)(__builtin_fabsf(y) * 1000.0f);
  out[8 * i + 7] = x > y ? x - y : y * 0.5f;
}
__attribute__((noinline)) float sum3(float *p, int k) { return p[0] + p[k] + p[2 * k]; }
__kernel void gen_ptrs(__global float *out, __global float *in) {
  /* a real call (s_swappc/s_setpc), a stack in scratch, flat loads through generic
     pointers into LDS, global memory and scratch */
  __local float tmp[64];
  unsigned int l = __builtin_amdgcn_workitem_id_x();
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * 64 + l;
  tmp[l] = in[i] * 2.0f;
  __builtin_amdgcn_s_barrier();
  float priv[8];
  for (int j = 0; j < 8; j++) priv[j] = in[(i + j) % 128];
  out[i] = sum3(&tmp[l % 32], 1) + sum3(&in[i % 64], 2) + sum3(priv, (int)(l % 3) + 1);
}
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void misc(__global float *out, __global const float *in, __global int *counter,
                   unsigned int n) {
  /* doubles, halves, 64-bit division, a per-lane loop, libm-style sin/exp/log/pow
     expansions, bit counts and an atomic */
  unsigned int i = GID_X;
  if (i >= n) return;
  float x = in[i];
  double d = (double)x * 1.000001;
  half h = (half)x;
  long l = (long)(x * 1000.0f);
  float acc = 0.0f;
  for (unsigned int k = 0; k < (i % 7); k++) acc += __builtin_sinf(x + k) * 0.5f;
  out[8 * i + 0] = (float)(d * d);
  out[8 * i + 1] = (float)(h * h + (half)1.5f);
  out[8 * i + 2] = (float)(l / 7 + l % 5);
  out[8 * i + 3] = acc;
  out[8 * i + 4] = __builtin_expf(x * 0.1f);
  out[8 * i + 5] = __builtin_logf(__builtin_fabsf(x) + 1.0f);
  out[8 * i + 6] = (float)__builtin_popcount(i) + (float)__builtin_clz(i + 1);
  out[8 * i + 7] = __builtin_powf(__builtin_fabsf(x) + 0.5f, 1.7f);
  __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}
__attribute__((noinline)) void scale2(float *p) { p[0] = p[0] * 2.0f + 1.0f; }
__kernel void mixed_ptrs(__global float *out, __global float *in) {
  /* one flat store whose lanes point into LDS, global memory and scratch */
  __local float tmp[64];
  float priv[2];
  unsigned int l = __builtin_amdgcn_workitem_id_x();
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * 64 + l;
  tmp[l] = in[i];
  priv[l & 1] = in[i] + 100.0f;
  float *p_lds = &tmp[l], *p_global = &in[i], *p_private = &priv[l & 1];  /* generic */
  float *p = (l % 3 == 0) ? p_lds : (l % 3 == 1) ? p_global : p_private;
  scale2(p);
  __builtin_amdgcn_s_barrier();
  out[i] = tmp[l] + in[i] + priv[l & 1];
}
__kernel void trap_if(__global unsigned int *out, unsigned int bad) {
  unsigned int i = GID_X;
  if (i == bad) __builtin_trap();
  out[i] = i;
}
__kernel void ddiv_clamp(__global float *out, __global const float *a,
                         __global const float *b, unsigned int n) {
  unsigned int i = GID_X;
  if (i >= n) return;
  out[3 * i] = (float)(((double)a[i] + 1e-9) / ((double)b[i] * 1.1));
  out[3 * i + 1] = __builtin_fminf(__builtin_fmaxf(a[i], -0.5f), b[i]);
  out[3 * i + 2] = (float)((a[i] > 0 ? (unsigned int)(a[i] * 7) : 3u) % 5u);
}
__kernel void oob_write(__global unsigned int *out, unsigned int offset) {
  unsigned int i = GID_X;
  out[i + offset] = i;
}
"""

ILLEGAL_KERNEL_S = """
.amdgcn_target "amdgcn-amd-amdhsa--gfx1100"
.text
.globl illegal
.p2align 8
.type illegal,@function
illegal:
  v_mov_b32 v1, 1.0
  v_mullit_f32 v0, v1, v1, v1
  s_endpgm
.rodata
.p2align 6
.amdhsa_kernel illegal
  .amdhsa_next_free_vgpr 8
  .amdhsa_next_free_sgpr 8
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_wavefront_size32 1
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: illegal
    .symbol: illegal.kd
    .kernarg_segment_size: 0
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 8
    .vgpr_count: 8
    .max_flat_workgroup_size: 256
    .args: []
...
.end_amdgpu_metadata
"""

_CACHE_DIR = Path(tempfile.gettempdir()) / f"amdgpu-direct-gfx11-{os.getuid()}"


def _zig(*args: str) -> None:
    run = subprocess.run([sys.executable, "-m", "ziglang", *args], capture_output=True,
                         text=True)
    if run.returncode:
        raise RuntimeError(f"zig {args[0]} failed: {run.stderr.strip()[:2000]}")


def build_code_object(source: str, language: str, mcpu: str = "gfx1100",
                      wave64: bool = False) -> bytes:
    """Compile OpenCL C (language "cl") or assemble AMDGPU assembly ("assembler") for
    `mcpu` (gfx1100 by default), code object v5, linked with ld.lld; cached on disk by
    source hash. `wave64`: -mwavefrontsize64 (gfx10+ kernels in wave64 mode)."""
    key = hashlib.sha256(f"{language}\0{mcpu}\0{source}".encode()).hexdigest()[:24]
    if wave64:
        key = hashlib.sha256(f"{language}\0{mcpu}\0wave64\0{source}".encode()).hexdigest()[:24]
    elif mcpu == "gfx1100":  # the key the gfx1100 cache has always used
        key = hashlib.sha256(f"{language}\0{source}".encode()).hexdigest()[:24]
    out = _CACHE_DIR / f"{key}.hsaco"
    if out.exists():
        return out.read_bytes()
    _CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=_CACHE_DIR) as tmp:
        src = Path(tmp) / ("k.cl" if language == "cl" else "k.s")
        src.write_text(source)
        obj = Path(tmp) / "k.o"
        flags = ["-x", language, "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}",
                 "-mcode-object-version=5"]
        if language == "cl":
            flags += ["-cl-std=CL2.0", "-nogpulib", "-cl-no-stdinc", "-O2"]
        if wave64:
            flags.append("-mwavefrontsize64")
        _zig("clang", *flags, "-c", str(src), "-o", str(obj))
        linked = Path(tmp) / "k.hsaco"
        _zig("ld.lld", "-shared", str(obj), "-o", str(linked))
        data = linked.read_bytes()
        linked.replace(out)
    return data


AGENT = 2  # the virtual GPU's agent handle in this harness
POOL = 7
R_AMDGPU_RELATIVE64 = 13


@dataclass
class LoadedCode:
    code_object: CodeObject
    base: int
    size: int

    def kernel(self, name: str) -> KernelInfo:
        return self.code_object.kernels[name]

    def kernel_object(self, name: str) -> int:
        return self.base + self.kernel(name).descriptor_address


def build_kernargs(kernel: KernelInfo, args: list, grid: tuple[int, int, int],
                   block: tuple[int, int, int], dims: int) -> bytes:
    """The kernarg segment: explicit args at their metadata offsets, then the code object v5
    hidden args (block counts, group sizes, remainders, grid dims, global offsets)."""
    size = max(kernel.kernarg_segment_size, 256)
    buf = bytearray(size)
    explicit = kernel.explicit_args
    if len(args) != len(explicit):
        raise TypeError(f"{kernel.name} takes {len(explicit)} arguments, got {len(args)}")
    for arg, value in zip(explicit, args, strict=True):
        if isinstance(value, float) or isinstance(value, np.floating):
            raw = struct.pack("<f", value) if arg.size == 4 else struct.pack("<d", value)
        elif isinstance(value, (bytes, bytearray)):
            raw = bytes(value)
        else:
            raw = int(value).to_bytes(arg.size, "little", signed=int(value) < 0)
        buf[arg.offset: arg.offset + arg.size] = raw[: arg.size]
    for arg in kernel.hidden_args:  # the driver's own definitions (hsa.abi.hidden_args)
        value = hidden_value(arg.value_kind, grid, block, dims)
        if value is not None:
            buf[arg.offset : arg.offset + arg.size] = value.to_bytes(arg.size, "little")
    return bytes(buf)


class Harness:
    """Memory + loaded code + dispatches for executor tests."""

    def __init__(self, target: str = "gfx1100") -> None:
        from hsa.abi.targets import TargetId
        from hsa.virtual.executor import executor_for

        self.memory = MemoryMap()
        self.target = target
        info = TargetId.parse(target).target
        self.wavefront_size = info.wave_size
        executor = shared_executor() if info.family == "gfx11" else executor_for(info.family)
        if executor is None:
            raise ValueError(f"no ISA executor for {target} ({info.family})")
        self.executor = executor
        self.loaded: dict[bytes, LoadedCode] = {}

    # --- memory ------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        return self.memory.allocate(max(1, nbytes), owner=AGENT, pool=POOL).base

    def buffer(self, array: np.ndarray) -> int:
        data = np.ascontiguousarray(array)
        address = self.alloc(data.nbytes)
        self.memory.write(address, data.view(np.uint8).reshape(-1))
        return address

    def read(self, address: int, dtype, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self.memory.read(address, dtype.itemsize * count),
                             dtype=dtype).copy()

    # --- code ----------------------------------------------------------------------------
    def load(self, data: bytes) -> LoadedCode:
        co = read_code_object(data)
        size = max(s.vaddr + s.memsz for s in co.segments)
        base = self.alloc(size)
        view = self.memory.view(base, size)
        view[:] = 0
        for seg in co.segments:
            view[seg.vaddr: seg.vaddr + seg.filesz] = np.frombuffer(
                co.data[seg.offset: seg.offset + seg.filesz], dtype=np.uint8)
        for rel in co.relocations:
            if rel.type == R_AMDGPU_RELATIVE64:
                value = (base + rel.addend) & 0xFFFFFFFFFFFFFFFF
                view[rel.offset: rel.offset + 8] = np.frombuffer(struct.pack("<Q", value),
                                                                 dtype=np.uint8)
        return LoadedCode(co, base, size)

    # --- dispatch ----------------------------------------------------------------------
    def kernargs(self, kernel: KernelInfo, args: list, grid: tuple[int, int, int],
                 block: tuple[int, int, int], dims: int) -> int:
        data = build_kernargs(kernel, args, grid, block, dims)
        address = self.alloc(len(data))
        self.memory.write(address, data)
        return address

    def dispatch(self, code: LoadedCode, name: str, grid, block, args: list,
                 group_segment_size: int | None = None, private_segment_size: int | None = None
                 ) -> Dispatch:
        grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        block = tuple(block) + (1,) * (3 - len(tuple(block)))
        dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
        kernel = code.kernel(name)
        kernarg = self.kernargs(kernel, args, grid, block, dims)
        group = kernel.group_segment_fixed_size if group_segment_size is None else (
            group_segment_size)
        private = kernel.private_segment_fixed_size if private_segment_size is None else (
            private_segment_size)
        packet = bytearray(64)
        struct.pack_into("<HHHHHHIIIIIQQ", packet, 0, 2 | (1 << 8), dims, *block, 0, *grid,
                         private, group, code.kernel_object(name), kernarg)
        packet_address = self.buffer(np.frombuffer(bytes(packet), np.uint8))
        dispatch = Dispatch(
            packet_address=packet_address, queue_address=0, dispatch_id=0, dims=dims,
            workgroup_size=block, grid_size=grid, private_segment_size=private,
            group_segment_size=group, kernel_object=code.kernel_object(name),
            kernarg_address=kernarg, agent=AGENT, target=self.target,
            wavefront_size=self.wavefront_size,
            kernel_name=name)
        self.executor.run(dispatch, self.memory)
        return dispatch


def _storage(dtype: str) -> str:
    """numpy has no bfloat16: such tensors travel as their uint16 bit patterns."""
    return "uint16" if dtype == "bfloat16" else dtype


def run_program(harness: Harness, bundle, inputs: list[np.ndarray],
                target: str | None = None) -> list[np.ndarray]:
    """Run an IREE-compiled bundle (`compiler.compile(x.mlir)`) dispatch by dispatch:
    one pointer per binding, then the i32 constants; returns the outputs as numpy arrays."""
    program = bundle.program
    data = bundle.variant_for(target or harness.target).data
    code = harness.loaded.get(data)
    if code is None:  # load each code object once, like an executable
        code = harness.loaded[data] = harness.load(data)
    in_addr = [harness.buffer(np.ascontiguousarray(x, dtype=_storage(spec["dtype"])).reshape(-1))
               for x, spec in zip(inputs, program["inputs"], strict=True)]
    outs = program["outputs"]
    out_addr = [harness.alloc(int(o.get("size") or np.prod(o["shape"], dtype=np.int64)
                                  * np.dtype(_storage(o["dtype"])).itemsize)) for o in outs]
    tr_addr = [harness.alloc(int(t["size"])) for t in program.get("transients", [])]
    spaces = {"input": in_addr, "output": out_addr, "transient": tr_addr}
    for disp in program["dispatches"]:
        args = [spaces[b["kind"]][b["index"]] + b["offset"] for b in disp["bindings"]]
        args += [int(c) & 0xFFFFFFFF for c in disp.get("constants", [])]
        block = tuple(disp["workgroup_size"])
        grid = tuple(c * b for c, b in zip(disp["workgroup_count"], block, strict=True))
        harness.dispatch(code, disp["kernel"], grid, block, args)
    results = []
    for o, a in zip(outs, out_addr, strict=True):
        count = int(np.prod(o["shape"], dtype=np.int64))
        results.append(harness.read(a, _storage(o["dtype"]), count).reshape(o["shape"]))
    return results
