// Every atomic read-modify-write a compute kernel uses, on global memory and on LDS, with
// lanes colliding on random addresses (issue 32: the executor combines colliding lanes with
// whole-array numpy; tests/test_isa_atomics.py checks every returned old value and the
// final memory against a sequential reference in work-item order). Built at test time by
// clang 22 (the ziglang wheel) with compiler/kernels/amdgpu_opencl.h.
//
// Ops that a target lowers to a compare-and-swap loop (f32 min/max on gfx942, f64 add on
// gfx1100) have a kernel of their own: one loop per kernel keeps the waves in work-item
// order, which is the order the reference applies them in.

#define as_uint(x) __builtin_astype((x), uint)
#define as_float(x) __builtin_astype((x), float)
#define as_ulong(x) __builtin_astype((x), ulong)
#define as_double(x) __builtin_astype((x), double)
#define R __ATOMIC_RELAXED
#define DEV __MEMORY_SCOPE_DEVICE
#define WG __MEMORY_SCOPE_WRKGRP
// plain device memory: clang then uses the hardware's float atomics, not CAS loops
#define COARSE [[clang::atomic(no_remote_memory, no_fine_grained_memory)]]

// u: 13 tables of m uints; f: 1 of m floats; l: 4 of m ulongs; old: 18 rows of n words
// (the 64-bit ones as 2 words)
kernel void global_atomics(global uint* u, global float* f, global ulong* l,
                           global const uint* idx, global const uint* val,
                           global const ulong* val64, global uint* old, uint n, uint m) {
  uint i = get_global_id(0);
  if (i >= n) return;
  uint a = idx[i], v = val[i];
  ulong w = val64[i];
  global int* s = (global int*)u;
  global ulong* old64 = (global ulong*)(old + 14 * n);
  COARSE {
    old[0 * n + i] = __scoped_atomic_fetch_add(&u[0 * m + a], v, R, DEV);
    old[1 * n + i] = __scoped_atomic_fetch_sub(&u[1 * m + a], v, R, DEV);
    old[2 * n + i] = __scoped_atomic_fetch_and(&u[2 * m + a], v, R, DEV);
    old[3 * n + i] = __scoped_atomic_fetch_or(&u[3 * m + a], v, R, DEV);
    old[4 * n + i] = __scoped_atomic_fetch_xor(&u[4 * m + a], v, R, DEV);
    old[5 * n + i] = __scoped_atomic_fetch_min(&u[5 * m + a], v, R, DEV);
    old[6 * n + i] = __scoped_atomic_fetch_max(&u[6 * m + a], v, R, DEV);
    old[7 * n + i] = __scoped_atomic_fetch_min(&s[7 * m + a], (int)v, R, DEV);
    old[8 * n + i] = __scoped_atomic_fetch_max(&s[8 * m + a], (int)v, R, DEV);
    old[9 * n + i] = __scoped_atomic_exchange_n(&u[9 * m + a], v, R, DEV);
    uint expected = v & 3;  // the tables' values are 0..3: chains of successes
    __scoped_atomic_compare_exchange_n(&u[10 * m + a], &expected, (v >> 2) & 3, 0, R, R, DEV);
    old[10 * n + i] = expected;
    old[11 * n + i] = __builtin_amdgcn_atomic_inc32(&u[11 * m + a], v & 15, R, "agent");
    old[12 * n + i] = __builtin_amdgcn_atomic_dec32(&u[12 * m + a], v & 15, R, "agent");
    old[13 * n + i] = as_uint(__scoped_atomic_fetch_add(&f[a], as_float(v), R, DEV));
    old64[0 * n + i] = __scoped_atomic_fetch_add(&l[0 * m + a], w, R, DEV);
    old64[1 * n + i] = __scoped_atomic_fetch_max(&l[1 * m + a], w, R, DEV);
    old64[2 * n + i] = (ulong)__scoped_atomic_fetch_min((global long*)&l[2 * m + a], (long)w,
                                                        R, DEV);
    ulong expected64 = w & 3;
    __scoped_atomic_compare_exchange_n(&l[3 * m + a], &expected64, (w >> 2) & 3, 0, R, R, DEV);
    old64[3 * n + i] = expected64;
  }
}

kernel void global_fmin(global float* f, global const uint* idx, global const uint* val,
                        global uint* old, uint n) {
  uint i = get_global_id(0);
  if (i >= n) return;
  COARSE { old[i] = as_uint(__scoped_atomic_fetch_min(&f[idx[i]], as_float(val[i]), R, DEV)); }
}

kernel void global_fmax(global float* f, global const uint* idx, global const uint* val,
                        global uint* old, uint n) {
  uint i = get_global_id(0);
  if (i >= n) return;
  COARSE { old[i] = as_uint(__scoped_atomic_fetch_max(&f[idx[i]], as_float(val[i]), R, DEV)); }
}

kernel void global_dadd(global double* d, global const uint* idx, global const ulong* val64,
                        global ulong* old, uint n) {
  uint i = get_global_id(0);
  if (i >= n) return;
  COARSE {
    old[i] = as_ulong(__scoped_atomic_fetch_add(&d[idx[i]], as_double(val64[i]), R, DEV));
  }
}

// LDS: 16 slots per table and workgroup (256 work-items), start values from `init`, the
// finals of each workgroup written to `fin`
#define SLOTS 16
kernel void __attribute__((reqd_work_group_size(256, 1, 1)))
lds_atomics(global const uint* init, global const uint* val, global const ulong* val64,
            global uint* old, global uint* fin, uint n) {
  local uint t[13][SLOTS];
  local float tf[SLOTS];
  local ulong tl[2][SLOTS];
  uint lid = get_local_id(0), grp = get_group_id(0), i = get_global_id(0);
  if (lid < 13 * SLOTS) t[lid / SLOTS][lid % SLOTS] = init[lid];
  if (lid < SLOTS) tf[lid] = as_float(init[13 * SLOTS + lid]);
  if (lid < 2 * SLOTS) tl[lid / SLOTS][lid % SLOTS] = init[14 * SLOTS + lid];
  barrier(CLK_LOCAL_MEM_FENCE);
  uint v = val[i], a = (v >> 7) % SLOTS;
  ulong w = val64[i];
  local int* s0 = (local int*)t[7];
  local int* s1 = (local int*)t[8];
  old[0 * n + i] = __scoped_atomic_fetch_add(&t[0][a], v, R, WG);
  old[1 * n + i] = __scoped_atomic_fetch_sub(&t[1][a], v, R, WG);
  old[2 * n + i] = __scoped_atomic_fetch_and(&t[2][a], v, R, WG);
  old[3 * n + i] = __scoped_atomic_fetch_or(&t[3][a], v, R, WG);
  old[4 * n + i] = __scoped_atomic_fetch_xor(&t[4][a], v, R, WG);
  old[5 * n + i] = __scoped_atomic_fetch_min(&t[5][a], v, R, WG);
  old[6 * n + i] = __scoped_atomic_fetch_max(&t[6][a], v, R, WG);
  old[7 * n + i] = __scoped_atomic_fetch_min(&s0[a], (int)v, R, WG);
  old[8 * n + i] = __scoped_atomic_fetch_max(&s1[a], (int)v, R, WG);
  old[9 * n + i] = __scoped_atomic_exchange_n(&t[9][a], v, R, WG);
  uint expected = v & 3;
  __scoped_atomic_compare_exchange_n(&t[10][a], &expected, (v >> 2) & 3, 0, R, R, WG);
  old[10 * n + i] = expected;
  old[11 * n + i] = __builtin_amdgcn_atomic_inc32(&t[11][a], v & 15, R, "workgroup");
  old[12 * n + i] = __builtin_amdgcn_atomic_dec32(&t[12][a], v & 15, R, "workgroup");
  old[13 * n + i] = as_uint(__scoped_atomic_fetch_add(&tf[a], as_float(v), R, WG));
  global ulong* old64 = (global ulong*)(old + 14 * n);
  old64[i] = __scoped_atomic_fetch_add(&tl[0][a], w, R, WG);
  ulong expected64 = w & 3;
  __scoped_atomic_compare_exchange_n(&tl[1][a], &expected64, (w >> 2) & 3, 0, R, R, WG);
  old64[n + i] = expected64;
  barrier(CLK_LOCAL_MEM_FENCE);
  global uint* out = fin + grp * (16 * SLOTS + 2 * 2 * SLOTS);
  if (lid < 13 * SLOTS) out[lid] = t[lid / SLOTS][lid % SLOTS];
  if (lid < SLOTS) out[13 * SLOTS + lid] = as_uint(tf[lid]);
  if (lid < 2 * SLOTS) ((global ulong*)(out + 16 * SLOTS))[lid] = tl[lid / SLOTS][lid % SLOTS];
}
