// A HIP 5.2 program for the emulated kernel's tests (tests/test_emulated_kernel.py), built with
// Debian's hipcc: `hip_program MODE` prints one "MODE ok" line or fails.
//   basic   kernel launch on a stream, events, copies both ways, atomics
//   host    hipHostRegister of malloc'd memory, written by a kernel in place, unregistered
//   pinned  hipHostMalloc'd memory, written by a kernel, read by the host directly, freed
//   graph   two kernels captured from a stream into a graph, instantiated, launched twice
//   peer    two GPUs: a peer copy device 0 -> device 1
//   fault   a kernel writes far outside every allocation (the process ends with ROCr's report)
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x) do { hipError_t e = (x); if (e != hipSuccess) { \
    printf("%s failed: %s\n", #x, hipGetErrorString(e)); return 1; } } while (0)

__global__ void saxpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void count(unsigned* total, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(total, 1u);
}
__global__ void scale(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 3;
}
__global__ void far_write(int* p) { p[0x40000000] = 7; }

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "basic";
  const int n = 1024;
  if (!strcmp(mode, "basic")) {
    static float hx[n], hy[n];
    for (int i = 0; i < n; i++) { hx[i] = i; hy[i] = 1; }
    float *dx, *dy; unsigned* dtotal; unsigned total = 0;
    CHECK(hipMalloc(&dx, n * 4)); CHECK(hipMalloc(&dy, n * 4)); CHECK(hipMalloc(&dtotal, 4));
    CHECK(hipMemcpy(dx, hx, n * 4, hipMemcpyHostToDevice));
    CHECK(hipMemcpy(dy, hy, n * 4, hipMemcpyHostToDevice));
    CHECK(hipMemset(dtotal, 0, 4));
    hipStream_t s; CHECK(hipStreamCreate(&s));
    hipEvent_t e0, e1; CHECK(hipEventCreate(&e0)); CHECK(hipEventCreate(&e1));
    CHECK(hipEventRecord(e0, s));
    hipLaunchKernelGGL(saxpy, dim3(n / 256), dim3(256), 0, s, dy, dx, 2.0f, n);
    hipLaunchKernelGGL(count, dim3(n / 256), dim3(256), 0, s, dtotal, n);
    CHECK(hipEventRecord(e1, s));
    CHECK(hipStreamSynchronize(s));
    CHECK(hipMemcpy(hy, dy, n * 4, hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(&total, dtotal, 4, hipMemcpyDeviceToHost));
    float ms = -1; CHECK(hipEventElapsedTime(&ms, e0, e1));
    for (int i = 0; i < n; i++) if (hy[i] != 2.0f * i + 1) { printf("saxpy wrong at %d\n", i); return 1; }
    if (total != (unsigned)n || ms < 0) { printf("atomics %u, event %f\n", total, ms); return 1; }
  } else if (!strcmp(mode, "host")) {
    int* p = (int*)malloc(n * 4 + 100) + 25;  // not page aligned
    for (int i = 0; i < n; i++) p[i] = i;
    CHECK(hipHostRegister(p, n * 4, hipHostRegisterDefault));
    int* dp; CHECK(hipHostGetDevicePointer((void**)&dp, p, 0));
    hipLaunchKernelGGL(scale, dim3(n / 256), dim3(256), 0, 0, dp, n);
    CHECK(hipDeviceSynchronize());
    CHECK(hipHostUnregister(p));
    for (int i = 0; i < n; i++) if (p[i] != 3 * i) { printf("host memory wrong at %d\n", i); return 1; }
  } else if (!strcmp(mode, "pinned")) {
    int* p; CHECK(hipHostMalloc((void**)&p, n * 4, hipHostMallocDefault));
    for (int i = 0; i < n; i++) p[i] = i;
    hipLaunchKernelGGL(scale, dim3(n / 256), dim3(256), 0, 0, p, n);
    CHECK(hipDeviceSynchronize());
    for (int i = 0; i < n; i++) if (p[i] != 3 * i) { printf("pinned memory wrong at %d\n", i); return 1; }
    CHECK(hipHostFree(p));
  } else if (!strcmp(mode, "graph")) {
    int* d; CHECK(hipMalloc(&d, n * 4)); CHECK(hipMemset(d, 0, n * 4));
    static int h[n];
    for (int i = 0; i < n; i++) h[i] = i;
    CHECK(hipMemcpy(d, h, n * 4, hipMemcpyHostToDevice));
    hipStream_t s; CHECK(hipStreamCreate(&s));
    hipGraph_t g; hipGraphExec_t ge;
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
    hipLaunchKernelGGL(scale, dim3(n / 256), dim3(256), 0, s, d, n);
    hipLaunchKernelGGL(scale, dim3(n / 256), dim3(256), 0, s, d, n);
    CHECK(hipStreamEndCapture(s, &g));
    CHECK(hipGraphInstantiate(&ge, g, nullptr, nullptr, 0));
    CHECK(hipGraphLaunch(ge, s)); CHECK(hipGraphLaunch(ge, s));
    CHECK(hipStreamSynchronize(s));
    CHECK(hipMemcpy(h, d, n * 4, hipMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (h[i] != 81 * i) { printf("graph wrong at %d: %d\n", i, h[i]); return 1; }
  } else if (!strcmp(mode, "peer")) {
    int devices = 0; CHECK(hipGetDeviceCount(&devices));
    if (devices < 2) { printf("%d device(s)\n", devices); return 1; }
    static int h[n], back[n];
    for (int i = 0; i < n; i++) h[i] = 5 * i;
    int *a, *b;
    CHECK(hipSetDevice(0)); CHECK(hipMalloc(&a, n * 4));
    CHECK(hipMemcpy(a, h, n * 4, hipMemcpyHostToDevice));
    CHECK(hipSetDevice(1)); CHECK(hipMalloc(&b, n * 4));
    CHECK(hipDeviceEnablePeerAccess(0, 0));
    CHECK(hipMemcpyPeer(b, 1, a, 0, n * 4));
    CHECK(hipMemcpy(back, b, n * 4, hipMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (back[i] != 5 * i) { printf("peer copy wrong at %d\n", i); return 1; }
  } else if (!strcmp(mode, "fault")) {
    int* d; CHECK(hipMalloc(&d, 4096));
    hipLaunchKernelGGL(far_write, dim3(1), dim3(1), 0, 0, d);
    hipError_t e = hipDeviceSynchronize();
    printf("synchronize returned %s\n", hipGetErrorString(e));
    return 1;
  }
  printf("%s ok\n", mode);
  return 0;
}
