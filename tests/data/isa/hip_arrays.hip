// HIP arrays on the emulated gfx90a (issue 32), built by Debian's hipcc 5.2.3: ROCr's image
// manager tiles them (its addrlib picks the swizzle mode from the size and the GB_ADDR_CONFIG
// the emulated kernel reports); ROCclr's blit kernels copy host rows in and out through the
// tiled T# (hipMemcpy2DToArray / hipMemcpy2DFromArray / hipMemcpy3D: image_store and
// image_load), kernels read them with tex2D / tex2DLayered / tex3D (image_sample) and write
// one with surf2Dwrite (image_store). Every result is compared with the host's own copy of
// the texels; the program prints each T#'s swizzle mode and one line per case and exits 1 on
// a mismatch.
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                 \
  do {                                                                        \
    hipError_t e = (x);                                                       \
    if (e != hipSuccess) {                                                    \
      printf("FAIL %s: %s\n", #x, hipGetErrorString(e));                      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

__global__ void fetch2d(float* out, hipTextureObject_t t, const float2* uv, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float>(t, uv[i].x, uv[i].y);
}

__global__ void fetch2d4(float4* out, hipTextureObject_t t, const float2* uv, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float4>(t, uv[i].x, uv[i].y);
}

__global__ void fetch_layered(float* out, hipTextureObject_t t, int w, int h, int layers) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
  if (x < w) out[(z * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, z);
}

__global__ void fetch3d(float* out, hipTextureObject_t t, int w, int h, int d) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
  if (x < w) out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void write_surface(hipSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w) surf2Dwrite((float)(x * 7 + y * 1000), s, x * 4, y);
}

// the swizzle mode of a texture or surface object's T# (its first 8 dwords)
static int sw_mode(const void* object) {
  unsigned srd[8];
  if (hipMemcpy(srd, object, 32, hipMemcpyDeviceToHost) != hipSuccess) return -1;
  return (srd[3] >> 20) & 0x1f;
}

static hipTextureObject_t texture_of(hipArray_t a, hipTextureFilterMode filter,
                                  hipTextureAddressMode mode, int normalized) {
  hipResourceDesc rd = {};
  rd.resType = hipResourceTypeArray;
  rd.res.array.array = a;
  hipTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = mode;
  td.filterMode = filter;
  td.readMode = hipReadModeElementType;
  td.normalizedCoords = normalized;
  hipTextureObject_t t = 0;
  if (hipCreateTextureObject(&t, &rd, &td, nullptr) != hipSuccess) return 0;
  return t;
}

static int report(const char* what, int mode, int bad, int n) {
  printf("%s (SW_MODE %d): %d of %d wrong\n", what, mode, bad, n);
  return bad != 0;
}

// host rows in, a kernel's tex2D samples at uv, host rows out again
int main() {
  int failed = 0;
  const int n = 256;
  float2 uv[n];
  float2* duv;
  CK(hipMalloc(&duv, sizeof(uv)));
  float4* out;
  CK(hipMalloc(&out, 200 * 150 * 16));
  srand(11);

  // 1. float, 37 x 23: point samples at texel centres, bilinear at 1/256 steps, round trip
  const int w = 37, h = 23;
  float* host = (float*)malloc(w * h * 4);
  float* back = (float*)malloc(w * h * 4);
  for (int i = 0; i < w * h; i++) host[i] = sinf(i) * 100.0f;
  hipChannelFormatDesc f1 = hipCreateChannelDesc<float>();
  hipArray_t a1;
  CK(hipMallocArray(&a1, &f1, w, h, 0));
  CK(hipMemcpy2DToArray(a1, 0, 0, host, w * 4, w * 4, h, hipMemcpyHostToDevice));
  hipTextureObject_t t1 = texture_of(a1, hipFilterModePoint, hipAddressModeClamp, 0);
  if (!t1) { printf("FAIL texture 1\n"); return 1; }
  int tx[n], ty[n];
  for (int i = 0; i < n; i++) {
    tx[i] = rand() % w;
    ty[i] = rand() % h;
    uv[i] = make_float2(tx[i] + 0.5f, ty[i] + 0.5f);
  }
  CK(hipMemcpy(duv, uv, sizeof(uv), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(fetch2d, dim3(n / 64), dim3(64), 0, 0, (float*)out, t1, duv, n);
  CK(hipDeviceSynchronize());
  float res[n];
  CK(hipMemcpy(res, out, sizeof(res), hipMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += res[i] != host[ty[i] * w + tx[i]];
  failed |= report("tex2D float array point", sw_mode(t1), bad, n);

  hipTextureObject_t t1l = texture_of(a1, hipFilterModeLinear, hipAddressModeClamp, 0);
  if (!t1l) { printf("FAIL texture 1 linear\n"); return 1; }
  for (int i = 0; i < n; i++)
    uv[i] = make_float2((rand() % (w * 256)) / 256.0f, (rand() % (h * 256)) / 256.0f);
  CK(hipMemcpy(duv, uv, sizeof(uv), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(fetch2d, dim3(n / 64), dim3(64), 0, 0, (float*)out, t1l, duv, n);
  CK(hipDeviceSynchronize());
  CK(hipMemcpy(res, out, sizeof(res), hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; i++) {  // Vulkan's linear filter, clamp to edge
    float cu = uv[i].x - 0.5f, cv = uv[i].y - 0.5f;
    int i0 = (int)floorf(cu), j0 = (int)floorf(cv);
    float a = cu - i0, b = cv - j0, want = 0.0f;
    for (int dj = 0; dj < 2; dj++)
      for (int di = 0; di < 2; di++) {
        int x = i0 + di < 0 ? 0 : i0 + di >= w ? w - 1 : i0 + di;
        int y = j0 + dj < 0 ? 0 : j0 + dj >= h ? h - 1 : j0 + dj;
        want += (di ? a : 1 - a) * (dj ? b : 1 - b) * host[y * w + x];
      }
    bad += fabsf(res[i] - want) > 1e-3f;
  }
  failed |= report("tex2D float array linear", sw_mode(t1l), bad, n);

  CK(hipMemcpy2DFromArray(back, w * 4, a1, 0, 0, w * 4, h, hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < w * h; i++) bad += back[i] != host[i];
  failed |= report("float array round trip", sw_mode(t1), bad, w * h);

  // 2. float4, 100 x 70 (addrlib's 64 KiB blocks): normalised coordinates, wrap; round trip
  const int w2 = 100, h2 = 70;
  float4* rgba = (float4*)malloc(w2 * h2 * 16);
  float4* rgba_back = (float4*)malloc(w2 * h2 * 16);
  for (int i = 0; i < w2 * h2; i++)
    rgba[i] = make_float4(cosf(i), sinf(i), i * 0.5f, -1.0f * i);
  hipChannelFormatDesc f4 = hipCreateChannelDesc<float4>();
  hipArray_t a2;
  CK(hipMallocArray(&a2, &f4, w2, h2, 0));
  CK(hipMemcpy2DToArray(a2, 0, 0, rgba, w2 * 16, w2 * 16, h2, hipMemcpyHostToDevice));
  hipTextureObject_t t2 = texture_of(a2, hipFilterModePoint, hipAddressModeWrap, 1);
  if (!t2) { printf("FAIL texture 2\n"); return 1; }
  for (int i = 0; i < n; i++) {
    tx[i] = rand() % (3 * w2) - w2;
    ty[i] = rand() % (3 * h2) - h2;
    uv[i] = make_float2((tx[i] + 0.25f + 0.5f * (rand() % 100) / 100.0f) / w2,
                        (ty[i] + 0.25f + 0.5f * (rand() % 100) / 100.0f) / h2);
  }
  CK(hipMemcpy(duv, uv, sizeof(uv), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(fetch2d4, dim3(n / 64), dim3(64), 0, 0, out, t2, duv, n);
  CK(hipDeviceSynchronize());
  float4 res4[n];
  CK(hipMemcpy(res4, out, sizeof(res4), hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; i++) {
    float4 want = rgba[((ty[i] % h2 + h2) % h2) * w2 + (tx[i] % w2 + w2) % w2];
    bad += res4[i].x != want.x || res4[i].y != want.y || res4[i].z != want.z ||
           res4[i].w != want.w;
  }
  failed |= report("tex2D float4 array wrap", sw_mode(t2), bad, n);
  CK(hipMemcpy2DFromArray(rgba_back, w2 * 16, a2, 0, 0, w2 * 16, h2, hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < w2 * h2; i++)
    bad += rgba_back[i].x != rgba[i].x || rgba_back[i].w != rgba[i].w;
  failed |= report("float4 array round trip", sw_mode(t2), bad, w2 * h2);

  // 3. a kernel writes a 200 x 150 float surface (surf2Dwrite); rows come out to the host.
  // (HIP 5.2.3 refuses hipArraySurfaceLoadStore, and its surf2Dwrite converts the value to
  // float before the image store, so an integer surface would receive float bits.)
  const int w3 = 200, h3 = 150;
  hipArray_t a3;
  CK(hipMallocArray(&a3, &f1, w3, h3, 0));
  hipResourceDesc rs = {};
  rs.resType = hipResourceTypeArray;
  rs.res.array.array = a3;
  hipSurfaceObject_t s3;
  CK(hipCreateSurfaceObject(&s3, &rs));
  hipLaunchKernelGGL(write_surface, dim3((w3 + 63) / 64, h3), dim3(64), 0, 0, s3, w3, h3);
  CK(hipDeviceSynchronize());
  float* words = (float*)malloc(w3 * h3 * 4);
  CK(hipMemcpy2DFromArray(words, w3 * 4, a3, 0, 0, w3 * 4, h3, hipMemcpyDeviceToHost));
  bad = 0;
  for (int y = 0; y < h3; y++)
    for (int x = 0; x < w3; x++) bad += words[y * w3 + x] != (float)(x * 7 + y * 1000);
  failed |= report("surf2Dwrite float array", sw_mode((void*)s3), bad, w3 * h3);

  // 4. a layered array (4 layers of 37 x 23) and 3D arrays, filled by hipMemcpy3D
  const int layers = 4, d3 = 9, w5 = 200, h5 = 100, d5 = 3;
  float* vol = (float*)malloc(w5 * h5 * d5 * 4);
  float* got = (float*)malloc(w5 * h5 * d5 * 4);
  struct { int w, h, d; unsigned flags; const char* what; } cases[] = {
      {w, h, layers, hipArrayLayered, "tex2DLayered float layered array"},
      {w, h, d3, 0, "tex3D float 3D array"},
      {w5, h5, d5, 0, "tex3D float 3D array (thin)"}};
  for (auto& c : cases) {
    int count = c.w * c.h * c.d;
    for (int i = 0; i < count; i++) vol[i] = cosf(i * 0.37f) * 50.0f;
    hipArray_t a;
    CK(hipMalloc3DArray(&a, &f1, make_hipExtent(c.w, c.h, c.d), c.flags));
    hipMemcpy3DParms p = {};
    p.srcPtr = make_hipPitchedPtr(vol, c.w * 4, c.w, c.h);
    p.dstArray = a;
    p.extent = make_hipExtent(c.w, c.h, c.d);
    p.kind = hipMemcpyHostToDevice;
    CK(hipMemcpy3D(&p));
    hipTextureObject_t t = texture_of(a, hipFilterModePoint, hipAddressModeClamp, 0);
    if (!t) { printf("FAIL texture %s\n", c.what); return 1; }
    if (c.flags & hipArrayLayered)
      hipLaunchKernelGGL(fetch_layered, dim3((c.w + 63) / 64, c.h, c.d), dim3(64), 0, 0,
                         (float*)out, t, c.w, c.h, c.d);
    else
      hipLaunchKernelGGL(fetch3d, dim3((c.w + 63) / 64, c.h, c.d), dim3(64), 0, 0,
                         (float*)out, t, c.w, c.h, c.d);
    CK(hipDeviceSynchronize());
    CK(hipMemcpy(got, out, count * 4, hipMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < count; i++) bad += got[i] != vol[i];
    failed |= report(c.what, sw_mode(t), bad, count);
  }
  printf(failed ? "arrays FAILED\n" : "arrays ok\n");
  return failed;
}
