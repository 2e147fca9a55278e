// A branch over and a loop back-edge long enough that, with -mllvm -amdgpu-s-branch-bits=4,
// clang 22 relaxes them to gfx1250 s_add_pc_i64 (forward and backward): tests/test_gfx12_long_branch.py
__kernel void lb(__global unsigned *p, int n) {
  int i = __builtin_amdgcn_workitem_id_x();
  unsigned x = p[i];
  if (n > 3) {
#pragma unroll 1
    for (int k = 0; k < n; k++) {
      x = x * 3u + (unsigned)k;
      x ^= x >> 7;
      x += (unsigned)k * 5u;
      x = (x << 3) | (x >> 29);
      x -= 0x9e3779b9u;
    }
  }
  p[i] = x;
}
