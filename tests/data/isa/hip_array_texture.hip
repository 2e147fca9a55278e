// A HIP array texture (issue 32, tiled images on gfx11/gfx12), built by sid's hipcc:
// hipMallocArray (ROCr's image manager creates a tiled image), hipMemcpy2DToArray (HIP's
// blit kernel stores through that image's T#), a texture object on the array and tex2D
// (image_sample through the same T#), hipMemcpy2DFromArray back (image loads). Each result
// is compared with the host's texels; one line per case; exit 1 on a mismatch.
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>

__global__ void fetch2d(float* out, hipTextureObject_t t, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

#define CK(x)                                                                 \
  do {                                                                        \
    hipError_t e = (x);                                                       \
    if (e != hipSuccess) {                                                    \
      printf("FAIL %s: %s\n", #x, hipGetErrorString(e));                      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

// one W x H float array: copy in, copy back, tex2D every texel; 0 when all agree
static int one_array(int w, int h) {
  int n = w * h, failed = 0;
  float* host = (float*)malloc(n * 4);
  float* got = (float*)malloc(n * 4);
  for (int i = 0; i < n; i++) host[i] = sinf(i) * 100.0f + i;
  hipChannelFormatDesc desc = hipCreateChannelDesc<float>();
  hipArray_t array;
  CK(hipMallocArray(&array, &desc, w, h));
  CK(hipMemcpy2DToArray(array, 0, 0, host, w * 4, w * 4, h, hipMemcpyHostToDevice));
  // back through the array (image loads of the copy kernel)
  for (int i = 0; i < n; i++) got[i] = -1.0f;
  CK(hipMemcpy2DFromArray(got, w * 4, array, 0, 0, w * 4, h, hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; i++) wrong += got[i] != host[i];
  printf("array %dx%d float round trip: %d of %d wrong\n", w, h, wrong, n);
  failed |= wrong != 0;
  hipResourceDesc res = {};
  res.resType = hipResourceTypeArray;
  res.res.array.array = array;
  hipTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = hipAddressModeClamp;
  td.filterMode = hipFilterModePoint;
  td.readMode = hipReadModeElementType;
  td.normalizedCoords = 0;
  hipTextureObject_t tex;
  CK(hipCreateTextureObject(&tex, &res, &td, nullptr));
  float* out;
  CK(hipMalloc(&out, n * 4));
  CK(hipMemset(out, 0, n * 4));
  hipLaunchKernelGGL(fetch2d, dim3((w + 63) / 64, h), dim3(64), 0, 0, out, tex, w, h);
  CK(hipGetLastError());
  CK(hipMemcpy(got, out, n * 4, hipMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < n; i++) wrong += got[i] != host[i];
  printf("array %dx%d tex2D: %d of %d wrong\n", w, h, wrong, n);
  failed |= wrong != 0;
  CK(hipDestroyTextureObject(tex));
  CK(hipFreeArray(array));
  CK(hipFree(out));
  free(host);
  free(got);
  return failed;
}

// arguments: W H pairs (default 67 35)
int main(int argc, char** argv) {
  int failed = 0;
  if (argc < 3) failed |= one_array(67, 35);
  for (int i = 1; i + 1 < argc; i += 2) failed |= one_array(atoi(argv[i]), atoi(argv[i + 1]));
  printf(failed ? "array texture FAILED\n" : "array texture ok\n");
  return failed;
}
