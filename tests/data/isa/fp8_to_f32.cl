// 8-bit float to f32 conversions (clang's __builtin_amdgcn_cvt_*f32_fp8/bf8): gfx942/gfx950
// SDWA byte and word selects, gfx12 VOP3 byte_sel/op_sel. tests/test_isa_fp8_convert.py
typedef float float2 __attribute__((ext_vector_type(2)));
__kernel void f8(__global const int *in, __global float *out) {
  int i = __builtin_amdgcn_workitem_id_x();
  int w = in[i];
  out[12 * i + 0] = __builtin_amdgcn_cvt_f32_fp8(w, 0);
  out[12 * i + 1] = __builtin_amdgcn_cvt_f32_fp8(w, 1);
  out[12 * i + 2] = __builtin_amdgcn_cvt_f32_fp8(w, 2);
  out[12 * i + 3] = __builtin_amdgcn_cvt_f32_fp8(w, 3);
  out[12 * i + 4] = __builtin_amdgcn_cvt_f32_bf8(w, 0);
  out[12 * i + 5] = __builtin_amdgcn_cvt_f32_bf8(w, 3);
  float2 p = __builtin_amdgcn_cvt_pk_f32_fp8(w, false);
  float2 q = __builtin_amdgcn_cvt_pk_f32_fp8(w, true);
  float2 r = __builtin_amdgcn_cvt_pk_f32_bf8(w, true);
  out[12 * i + 6] = p.x; out[12 * i + 7] = p.y;
  out[12 * i + 8] = q.x; out[12 * i + 9] = q.y;
  out[12 * i + 10] = r.x; out[12 * i + 11] = r.y;
}
