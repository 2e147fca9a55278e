// HIP device printf (a hostcall: the device library posts packets to the host runtime
// with system-scope atomics and fences, buffer_wbl2/buffer_invl2 on gfx90a) and a
// system-scope atomic; built by tests/test_isa_hip_printf.py with Debian's hipcc.
#include <hip/hip_runtime.h>
#include <cstdio>
__global__ void hello(int* out) {
  int i = threadIdx.x;
  if (i < 2) printf("device printf: thread %d value %d\n", i, 40 + i);
  __hip_atomic_fetch_add(out, 1, __ATOMIC_SEQ_CST, __HIP_MEMORY_SCOPE_SYSTEM);
}
int main() {
  int* d; int h = 0;
  if (hipMalloc(&d, 4) != hipSuccess) { printf("hipMalloc failed\n"); return 1; }
  hipMemcpy(d, &h, 4, hipMemcpyHostToDevice);
  hipLaunchKernelGGL(hello, dim3(1), dim3(64), 0, 0, d);
  hipError_t e = hipDeviceSynchronize();
  hipMemcpy(&h, d, 4, hipMemcpyDeviceToHost);
  printf("sync %s, counter %d\n", hipGetErrorString(e), h);
  return h == 64 ? 0 : 1;
}
