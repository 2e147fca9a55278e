// HIP texture objects on the emulated gfx90a (issue 32), built by Debian's hipcc 5.2.3:
// tex2D on a pitched linear 2D texture (float, unnormalised coordinates, clamp: an
// image_sample through the T# and S# ROCr's image manager writes), tex2D on a float4 texture
// with normalised coordinates and wrap addressing, tex2D on a float texture with
// hipFilterModeLinear (bilinear S#), and tex1Dfetch on linear memory (buffer_load_format_x through a V#). Each result is compared with the host's
// own reading of the same texels; the program prints one line per case and exits 1 on a
// mismatch. (The pitched rows go up in one linear copy; hipMemcpy2D, SDMA's sub-window copy,
// has its own test: hip_memcpy2d.hip.)
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void fetch2d(float* out, hipTextureObject_t t, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

__global__ void sample_wrap(float4* out, hipTextureObject_t t, const float2* uv, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float4>(t, uv[i].x, uv[i].y);
}

__global__ void sample_linear(float* out, hipTextureObject_t t, const float2* uv, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float>(t, uv[i].x, uv[i].y);
}

__global__ void fetch1d(float* out, hipTextureObject_t t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(t, i);
}

#define CK(x)                                                                 \
  do {                                                                        \
    hipError_t e = (x);                                                       \
    if (e != hipSuccess) {                                                    \
      printf("FAIL %s: %s\n", #x, hipGetErrorString(e));                      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

// a pitched 2D allocation holding `texels` (rows of w elements of `size` bytes)
static int pitched(void** dev, size_t* pitch, const void* texels, int w, int h, int size) {
  CK(hipMallocPitch(dev, pitch, w * size, h));
  char* staged = (char*)calloc(*pitch * h, 1);
  for (int y = 0; y < h; y++) memcpy(staged + y * *pitch, (const char*)texels + y * w * size, w * size);
  CK(hipMemcpy(*dev, staged, *pitch * h, hipMemcpyHostToDevice));
  free(staged);
  return 0;
}

int main() {
  int failed = 0;
  // 1. float texels, unnormalised coordinates at texel centres, clamp, point filtering
  const int w = 37, h = 5, n = w * h;
  float host[n], got[n];
  for (int i = 0; i < n; i++) host[i] = sinf(i) * 100.0f;
  void* img; size_t pitch;
  if (pitched(&img, &pitch, host, w, h, 4)) return 1;
  hipResourceDesc rd = {};
  rd.resType = hipResourceTypePitch2D;
  rd.res.pitch2D.devPtr = img;
  rd.res.pitch2D.desc = hipCreateChannelDesc<float>();
  rd.res.pitch2D.width = w;
  rd.res.pitch2D.height = h;
  rd.res.pitch2D.pitchInBytes = pitch;
  hipTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = hipAddressModeClamp;
  td.filterMode = hipFilterModePoint;
  td.readMode = hipReadModeElementType;
  hipTextureObject_t tex;
  CK(hipCreateTextureObject(&tex, &rd, &td, nullptr));
  float* out;
  CK(hipMalloc(&out, 4096 * 4));  // room for either case's results
  hipLaunchKernelGGL(fetch2d, dim3((w + 31) / 32, h), dim3(32), 0, 0, out, tex, w, h);
  CK(hipDeviceSynchronize());
  CK(hipMemcpy(got, out, n * 4, hipMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += got[i] != host[i];
  printf("tex2D float pitch %zu: %d of %d wrong\n", pitch, bad, n);
  failed |= bad != 0;

  // 2. float4 texels, normalised coordinates from -2 to 3 image sizes, wrap
  const int w2 = 12, h2 = 7, m = 256;
  float rgba[w2 * h2 * 4];
  for (int i = 0; i < w2 * h2 * 4; i++) rgba[i] = cosf(i) * 10.0f;
  void* img2; size_t pitch2;
  if (pitched(&img2, &pitch2, rgba, w2, h2, 16)) return 1;
  rd.res.pitch2D.devPtr = img2;
  rd.res.pitch2D.desc = hipCreateChannelDesc<float4>();
  rd.res.pitch2D.width = w2;
  rd.res.pitch2D.height = h2;
  rd.res.pitch2D.pitchInBytes = pitch2;
  td.addressMode[0] = td.addressMode[1] = hipAddressModeWrap;
  td.normalizedCoords = 1;
  hipTextureObject_t tex2;
  CK(hipCreateTextureObject(&tex2, &rd, &td, nullptr));
  float2 uv[m];
  int tx[m], ty[m];
  srand(7);
  for (int i = 0; i < m; i++) {  // a texel index and a fraction kept 0.1 away from its edges
    tx[i] = rand() % (5 * w2) - 2 * w2;
    ty[i] = rand() % (5 * h2) - 2 * h2;
    float fx = 0.1f + 0.8f * (rand() % 1000) / 1000.0f, fy = 0.1f + 0.8f * (rand() % 1000) / 1000.0f;
    uv[i] = make_float2((tx[i] + fx) / w2, (ty[i] + fy) / h2);
  }
  float2* duv;
  CK(hipMalloc(&duv, sizeof(uv)));
  CK(hipMemcpy(duv, uv, sizeof(uv), hipMemcpyHostToDevice));
  float4 res[m];
  hipLaunchKernelGGL(sample_wrap, dim3(m / 64), dim3(64), 0, 0, (float4*)out, tex2, duv, m);
  CK(hipDeviceSynchronize());
  CK(hipMemcpy(res, out, sizeof(res), hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < m; i++) {
    int x = ((tx[i] % w2) + w2) % w2, y = ((ty[i] % h2) + h2) % h2;
    const float* want = rgba + (y * w2 + x) * 4;
    float have[4] = {res[i].x, res[i].y, res[i].z, res[i].w};
    for (int c = 0; c < 4; c++) bad += have[c] != want[c];
  }
  printf("tex2D float4 normalised wrap: %d of %d wrong\n", bad, m * 4);
  failed |= bad != 0;

  // 3. float texels, hipFilterModeLinear (ROCr's S#: XY_MAG/MIN_FILTER bilinear), unnormalised
  // coordinates on 1/256 steps from -half to 1.5 image sizes, clamp; the host filters as
  // Vulkan's "Texel Filtering" defines linear filtering: i0 = floor(u - 0.5), a = frac(u - 0.5),
  // texels clamped to the edge, weights (1-a)(1-b), a(1-b), (1-a)b, ab
  const int w4 = 10, h4 = 6;
  float lin4[w4 * h4];
  for (int i = 0; i < w4 * h4; i++) lin4[i] = sinf(3.0f * i) * 10.0f;
  void* img4; size_t pitch4;
  if (pitched(&img4, &pitch4, lin4, w4, h4, 4)) return 1;
  rd.res.pitch2D.devPtr = img4;
  rd.res.pitch2D.desc = hipCreateChannelDesc<float>();
  rd.res.pitch2D.width = w4;
  rd.res.pitch2D.height = h4;
  rd.res.pitch2D.pitchInBytes = pitch4;
  td.addressMode[0] = td.addressMode[1] = hipAddressModeClamp;
  td.normalizedCoords = 0;
  td.filterMode = hipFilterModeLinear;
  hipTextureObject_t tex4;
  CK(hipCreateTextureObject(&tex4, &rd, &td, nullptr));
  for (int i = 0; i < m; i++)
    uv[i] = make_float2((rand() % (2 * w4 * 256) - w4 * 128) / 256.0f,
                        (rand() % (2 * h4 * 256) - h4 * 128) / 256.0f);
  CK(hipMemcpy(duv, uv, sizeof(uv), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(sample_linear, dim3(m / 64), dim3(64), 0, 0, out, tex4, duv, m);
  CK(hipDeviceSynchronize());
  float lres[m];
  CK(hipMemcpy(lres, out, sizeof(lres), hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < m; i++) {
    float cu = uv[i].x - 0.5f, cv = uv[i].y - 0.5f;
    int i0 = (int)floorf(cu), j0 = (int)floorf(cv);
    float a = cu - i0, b = cv - j0, want = 0.0f;
    for (int dj = 0; dj < 2; dj++)
      for (int di = 0; di < 2; di++) {
        int x = i0 + di < 0 ? 0 : i0 + di >= w4 ? w4 - 1 : i0 + di;
        int y = j0 + dj < 0 ? 0 : j0 + dj >= h4 ? h4 - 1 : j0 + dj;
        want += (di ? a : 1 - a) * (dj ? b : 1 - b) * lin4[y * w4 + x];
      }
    bad += fabsf(lres[i] - want) > 1e-5f * 10.0f;
  }
  printf("tex2D float linear clamp: %d of %d wrong\n", bad, m);
  failed |= bad != 0;

  // 4. tex1Dfetch on linear memory
  float* lin;
  CK(hipMalloc(&lin, n * 4));
  CK(hipMemcpy(lin, host, n * 4, hipMemcpyHostToDevice));
  hipResourceDesc rl = {};
  rl.resType = hipResourceTypeLinear;
  rl.res.linear.devPtr = lin;
  rl.res.linear.desc = hipCreateChannelDesc<float>();
  rl.res.linear.sizeInBytes = n * 4;
  hipTextureDesc tl = {};
  tl.readMode = hipReadModeElementType;
  hipTextureObject_t t1;
  CK(hipCreateTextureObject(&t1, &rl, &tl, nullptr));
  hipLaunchKernelGGL(fetch1d, dim3((n + 63) / 64), dim3(64), 0, 0, out, t1, n);
  CK(hipDeviceSynchronize());
  CK(hipMemcpy(got, out, n * 4, hipMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; i++) bad += got[i] != host[i];
  printf("tex1Dfetch: %d of %d wrong\n", bad, n);
  failed |= bad != 0;
  printf(failed ? "textures FAILED\n" : "textures ok\n");
  return failed;
}
