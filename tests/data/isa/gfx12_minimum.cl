// NaN-propagating minimum/maximum (llvm.minimum/maximum: v_minimum_f32/f64, v_pk_minimum_f16 on
// gfx12) and fmin/fmax on doubles (v_min_num_f64): tests/test_gfx12_minimum.py
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef half half2 __attribute__((ext_vector_type(2)));
__kernel void mm(__global const float *a, __global const float *b, __global const float *c,
                 __global float *out, __global const double *da, __global const double *db,
                 __global double *dout, __global const half *ha, __global const half *hb,
                 __global half *hout) {
  int i = __builtin_amdgcn_workitem_id_x();
  float x = a[i], y = b[i], z = c[i];
  out[6 * i + 0] = __builtin_elementwise_minimum(x, y);
  out[6 * i + 1] = __builtin_elementwise_maximum(x, y);
  out[6 * i + 2] = __builtin_elementwise_minimum(__builtin_elementwise_minimum(x, y), z);
  out[6 * i + 3] = __builtin_elementwise_maximum(__builtin_elementwise_maximum(x, y), z);
  out[6 * i + 4] = __builtin_elementwise_maximum(__builtin_elementwise_minimum(x, y), z);
  out[6 * i + 5] = __builtin_elementwise_minimum(__builtin_elementwise_maximum(x, y), z);
  double p = da[i], q = db[i];
  dout[4 * i + 0] = __builtin_elementwise_minimum(p, q);
  dout[4 * i + 1] = __builtin_elementwise_maximum(p, q);
  dout[4 * i + 2] = __builtin_fmin(p, q);
  dout[4 * i + 3] = __builtin_fmax(p, q);
  half2 u = ((__global const half2 *)ha)[i];
  half2 w = ((__global const half2 *)hb)[i];
  ((__global half2 *)hout)[2 * i] = __builtin_elementwise_minimum(u, w);
  ((__global half2 *)hout)[2 * i + 1] = __builtin_elementwise_maximum(u, w);
}
