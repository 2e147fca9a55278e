// Image loads and stores of compute kernels on gfx11 and gfx90a (issue 32), through clang 22's image
// builtins: a T# (__amdgpu_texture_t) is a pointer to the 8-dword descriptor in memory,
// which tests/test_isa_images.py writes as ROCr's image manager does. Built at test time
// (with +extended-image-insts for image_sample_lz; gfx90a with -DNO_SAMPLE_LZ).
#define as_uint4(x) __builtin_astype((x), uint4)
#define as_float4(x) __builtin_astype((x), float4)

// each work-item loads texel (x, y) of a 2D image and stores 2*v + 1 into another
kernel void load_store_2d(global uint4* out, __amdgpu_texture_t src, __amdgpu_texture_t dst,
                          int w) {
  int x = get_global_id(0), y = get_global_id(1);
  float4 v = __builtin_amdgcn_image_load_2d_v4f32_i32(15, x, y, src, 0, 0);
  out[y * w + x] = as_uint4(v);
  __builtin_amdgcn_image_store_2d_v4f32_i32(v * 2.0f + 1.0f, 15, x, y, dst, 0, 0);
}

// integer texels: the loaded registers hold the integers' bits; stores write x + 1
kernel void load_store_2d_int(global uint4* out, __amdgpu_texture_t src, __amdgpu_texture_t dst,
                              int w) {
  int x = get_global_id(0), y = get_global_id(1);
  uint4 v = as_uint4(__builtin_amdgcn_image_load_2d_v4f32_i32(15, x, y, src, 0, 0));
  out[y * w + x] = v;
  __builtin_amdgcn_image_store_2d_v4f32_i32(as_float4(v + (uint4)(1, 1, 1, 1)), 15, x, y, dst,
                                            0, 0);
}

// one channel (DMASK 0x2: y only), the other coordinates out of range at the edges
kernel void load_2d_y(global float* out, __amdgpu_texture_t src, int w, int h) {
  int x = get_global_id(0), y = get_global_id(1);
  out[y * w + x] = __builtin_amdgcn_image_load_2d_f32_i32(2, x - 1, y - 1, src, 0, 0);
}

kernel void load_1d(global uint4* out, __amdgpu_texture_t src) {
  int x = get_global_id(0);
  out[x] = as_uint4(__builtin_amdgcn_image_load_1d_v4f32_i32(15, x, src, 0, 0));
}

kernel void load_3d(global uint4* out, __amdgpu_texture_t src, int w, int h) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  out[(z * h + y) * w + x] = as_uint4(__builtin_amdgcn_image_load_3d_v4f32_i32(15, x, y, z, src,
                                                                               0, 0));
}

kernel void load_2d_array(global uint4* out, __amdgpu_texture_t src, int w, int h) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  out[(z * h + y) * w + x] = as_uint4(
      __builtin_amdgcn_image_load_2darray_v4f32_i32(15, x, y, z, src, 0, 0));
}

kernel void load_1d_array(global uint4* out, __amdgpu_texture_t src, int w) {
  int x = get_global_id(0), z = get_global_id(1);
  out[z * w + x] = as_uint4(__builtin_amdgcn_image_load_1darray_v4f32_i32(15, x, z, src, 0, 0));
}

// samples: the S# is 4 dwords in memory; coordinates per work-item from `uv`
kernel void sample_2d(global float4* out, __amdgpu_texture_t src, global const int4* samp,
                      global const float2* uv) {
  int i = get_global_id(0);
  out[i] = __builtin_amdgcn_image_sample_2d_v4f32_f32(15, uv[i].x, uv[i].y, src, *samp, 0, 0,
                                                      0);
}

#ifndef NO_SAMPLE_LZ  // gfx90a has no image_sample_lz (extended-image-insts)
kernel void sample_lz_2d(global float4* out, __amdgpu_texture_t src, global const int4* samp,
                         global const float2* uv) {
  int i = get_global_id(0);
  out[i] = __builtin_amdgcn_image_sample_lz_2d_v4f32_f32(15, uv[i].x, uv[i].y, src, *samp, 0, 0,
                                                         0);
}
#endif

kernel void sample_1d_array(global float4* out, __amdgpu_texture_t src, global const int4* samp,
                            global const float2* uv) {
  int i = get_global_id(0);
  out[i] = __builtin_amdgcn_image_sample_1darray_v4f32_f32(15, uv[i].x, uv[i].y, src, *samp, 0,
                                                           0, 0);
}

#ifndef NO_SAMPLE_LZ  // clang's image_sample_l and gather4 builtins want extended-image-insts
// image_gather4_lz: channel y (DMASK 0x2) of the 2x2 texels around each coordinate
kernel void gather4_lz_2d(global float4* out, __amdgpu_texture_t src, global const int4* samp,
                          global const float2* uv) {
  int i = get_global_id(0);
  out[i] = __builtin_amdgcn_image_gather4_lz_2d_v4f32_f32(2, uv[i].x, uv[i].y, src, *samp, 0,
                                                          0, 0);
}


// an explicit LOD (image_sample_l): each lane's own
kernel void sample_l_2d(global float4* out, __amdgpu_texture_t src, global const int4* samp,
                        global const float2* uv, global const float* lod) {
  int i = get_global_id(0);
  out[i] = __builtin_amdgcn_image_sample_l_2d_v4f32_f32(15, uv[i].x, uv[i].y, lod[i], src,
                                                        *samp, 0, 0, 0);
}
#endif

// D16: 16-bit results and data, two channels a VGPR (half4 = 2 VGPRs); a sample's too
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half4_t __attribute__((ext_vector_type(4)));
kernel void load_store_d16(global half4_t* out, __amdgpu_texture_t src, __amdgpu_texture_t dst,
                           int w) {
  int x = get_global_id(0), y = get_global_id(1);
  half4_t v = __builtin_amdgcn_image_load_2d_v4f16_i32(15, x, y, src, 0, 0);
  out[y * w + x] = v;
  __builtin_amdgcn_image_store_2d_v4f16_i32(v * (half)2.0f + (half)1.0f, 15, x, y, dst, 0, 0);
}

kernel void sample_d16(global half4_t* out, __amdgpu_texture_t src, global const int4* samp,
                       global const float2* uv) {
  int i = get_global_id(0);
  out[i] = __builtin_amdgcn_image_sample_2d_v4f16_f32(15, uv[i].x, uv[i].y, src, *samp, 0, 0,
                                                      0);
}
