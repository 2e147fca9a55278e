// hipMallocPitch + hipMemcpy2D both ways on the emulated gfx90a, built by Debian's hipcc 5.2.3:
// ROCr turns a 2D copy between pitched device memory and host memory into SDMA
// COPY_LINEAR_SUB_WINDOW packets when base addresses and pitches are dword aligned (else HIP
// falls back to a blit kernel). Host rows of 304 bytes go into a pitched allocation (ROCr:
// 16-byte elements), a kernel reads them through the pitch into a dense buffer (so the device
// layout is checked independently of the copy back), a 123 x 7 sub-rectangle at an offset
// goes back to host memory of another pitch (1-byte elements), and a rectangle goes device to
// device. Every byte is compared with the host's expectation (padding and bytes around the
// rectangles included); one line per case, exit 1 on a mismatch.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void gather(unsigned char* out, const unsigned char* in, size_t pitch, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = in[y * pitch + x];
}

#define CK(x)                                                                 \
  do {                                                                        \
    hipError_t e = (x);                                                       \
    if (e != hipSuccess) {                                                    \
      printf("FAIL %s: %s\n", #x, hipGetErrorString(e));                      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int main() {
  const int w = 304, h = 19;
  unsigned char* host = (unsigned char*)malloc(w * h);
  for (int i = 0; i < w * h; i++) host[i] = (unsigned char)(i * 131 + (i >> 7) * 7 + 1);
  unsigned char* dev;
  size_t pitch;
  CK(hipMallocPitch((void**)&dev, &pitch, w, h));
  CK(hipMemset(dev, 0xEE, pitch * h));
  CK(hipMemcpy2D(dev, pitch, host, w, w, h, hipMemcpyHostToDevice));
  int failed = 0, bad = 0;

  // 1. host -> pitched device memory, read by a kernel through the pitch
  unsigned char *dense, *got = (unsigned char*)malloc(pitch * h);
  CK(hipMalloc((void**)&dense, w * h));
  hipLaunchKernelGGL(gather, dim3((w + 63) / 64, h), dim3(64), 0, 0, dense, dev, pitch, w, h);
  CK(hipDeviceSynchronize());
  CK(hipMemcpy(got, dense, w * h, hipMemcpyDeviceToHost));
  for (int i = 0; i < w * h; i++) bad += got[i] != host[i];
  // the pitch padding after each row is untouched
  CK(hipMemcpy(got, dev, pitch * h, hipMemcpyDeviceToHost));
  for (int y = 0; y < h; y++)
    for (size_t x = w; x < pitch; x++) bad += got[y * pitch + x] != 0xEE;
  printf("hipMemcpy2D host to device, pitch %zu: %d of %d wrong\n", pitch, bad, w * h);
  failed |= bad != 0;

  // 2. a 123 x 7 sub-rectangle at (x 45, y 9) back to host memory of pitch 160
  const int sw = 123, sh = 7, sx = 44, sy = 9, hp = 160;
  unsigned char* back = (unsigned char*)malloc(hp * sh);
  memset(back, 0x55, hp * sh);
  CK(hipMemcpy2D(back, hp, dev + sy * pitch + sx, pitch, sw, sh, hipMemcpyDeviceToHost));
  bad = 0;
  for (int y = 0; y < sh; y++)
    for (int x = 0; x < hp; x++)
      bad += back[y * hp + x] != (x < sw ? host[(sy + y) * w + sx + x] : 0x55);
  printf("hipMemcpy2D device to host, %dx%d at (%d,%d): %d of %d wrong\n", sw, sh, sx, sy, bad,
         hp * sh);
  failed |= bad != 0;

  // 3. device to device: 64 x 11 bytes (dword elements) into a second pitched allocation
  unsigned char* dev2;
  size_t pitch2;
  CK(hipMallocPitch((void**)&dev2, &pitch2, 200, 16));
  CK(hipMemset(dev2, 0, pitch2 * 16));
  CK(hipMemcpy2D(dev2 + 2 * pitch2 + 8, pitch2, dev + 4, pitch, 64, 11, hipMemcpyDeviceToDevice));
  unsigned char* all = (unsigned char*)malloc(pitch2 * 16);
  CK(hipMemcpy(all, dev2, pitch2 * 16, hipMemcpyDeviceToHost));
  bad = 0;
  for (int y = 0; y < 16; y++)
    for (int x = 0; x < 200; x++) {
      int inside = y >= 2 && y < 13 && x >= 8 && x < 72;
      bad += all[y * pitch2 + x] != (inside ? host[(y - 2) * w + 4 + x - 8] : 0);
    }
  printf("hipMemcpy2D device to device, pitch %zu: %d of %d wrong\n", pitch2, bad, 200 * 16);
  failed |= bad != 0;
  printf(failed ? "memcpy2d FAILED\n" : "memcpy2d ok\n");
  return failed;
}
