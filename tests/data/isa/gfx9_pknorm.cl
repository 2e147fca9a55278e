// __builtin_amdgcn_cvt_pknorm_i16/u16: gfx9's v_cvt_pknorm_i16_f32 / u16_f32 (VOP3):
// tests/test_gfx9_pknorm.py
typedef short short2 __attribute__((ext_vector_type(2)));
typedef unsigned short ushort2 __attribute__((ext_vector_type(2)));
__kernel void pkn(__global const float *a, __global int *out) {
  int i = __builtin_amdgcn_workitem_id_x();
  float x = a[2 * i], y = a[2 * i + 1];
  short2 s = __builtin_amdgcn_cvt_pknorm_i16(x, y);
  ushort2 u = __builtin_amdgcn_cvt_pknorm_u16(y, x);
  out[2 * i] = __builtin_astype(s, int);
  out[2 * i + 1] = __builtin_astype(u, int);
}
