// System-scope atomics and fences (issue 32): LLVM's AMDGPU memory model turns them into
// each family's cache write-back and invalidate instructions (gfx942/gfx950: buffer_wbl2
// sc0 sc1 and buffer_inv sc0 sc1; gfx1100: buffer_gl0_inv/buffer_gl1_inv; gfx12: global_wb
// and global_inv with scopes). Built at test time by clang 22 (the ziglang wheel).
kernel void system_atomics(global int* counters, global float* fsum, global uint* maxv,
                           global const int* x, global int* out, int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  int v = x[i];
  __scoped_atomic_fetch_add(&counters[0], 1, __ATOMIC_RELAXED, __MEMORY_SCOPE_SYSTEM);
  __scoped_atomic_fetch_add(&counters[1], v, __ATOMIC_ACQ_REL, __MEMORY_SCOPE_SYSTEM);
  __scoped_atomic_fetch_max(&maxv[0], (uint)v, __ATOMIC_SEQ_CST, __MEMORY_SCOPE_SYSTEM);
  __scoped_atomic_fetch_add(&fsum[0], (float)(v & 7), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "");
  int old = __scoped_atomic_exchange_n(&out[i], v * 2, __ATOMIC_RELEASE, __MEMORY_SCOPE_SYSTEM);
  out[n + i] = __scoped_atomic_load_n(&out[i], __ATOMIC_ACQUIRE, __MEMORY_SCOPE_SYSTEM) + old;
}
