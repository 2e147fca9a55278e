// HIP cooperative groups end to end (issue 32): the runtime's own capability query and
// cooperative launch (Debian's HIP 5.2.3 over ROCr 5.2.3 and the emulated KFD, whose node
// reports num_gws), then grid.sync() (ds_gws_barrier) between the phases of a grid sum.
// Built by tests/test_isa_gws_hip.py with Debian's hipcc (HIP 5.2: grid.sync() is ds_gws_barrier) and
// by tests/test_rocm6_clients.py with sid's hipcc 7 (HIP 6.4: a spin on a workspace counter, every
// target); prints "grid sync ok" on success.
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>
#include <cstdio>
#include <vector>
namespace cg = cooperative_groups;

__global__ void grid_sum(const int* x, int* partial, int* out, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) partial[blockIdx.x] = 0;
  grid.sync();
  if (i < n) atomicAdd(&partial[blockIdx.x], x[i]);
  grid.sync();  // every block's partial is complete: block 0 reads them all
  if (i == 0) {
    int s = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) s += partial[b];
    out[0] = s;
  }
}

#define CHECK(x)                                                   \
  do {                                                             \
    hipError_t e = (x);                                            \
    if (e) {                                                       \
      printf("%s: %s\n", #x, hipGetErrorString(e));                \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main() {
  int coop = -1, blocks_per_cu = 0;
  CHECK(hipDeviceGetAttribute(&coop, hipDeviceAttributeCooperativeLaunch, 0));
  printf("cooperative launch %d\n", coop);
  CHECK(hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_cu, grid_sum, 256, 0));
  printf("blocks per CU %d\n", blocks_per_cu);
  const int blocks = 8, n = blocks * 256 - 17;
  std::vector<int> x(n);
  long want = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = (i * 7919) % 2001 - 1000;
    want += x[i];
  }
  int *dx, *dp, *dout;
  CHECK(hipMalloc(&dx, n * 4));
  CHECK(hipMalloc(&dp, blocks * 4));
  CHECK(hipMalloc(&dout, 4));
  CHECK(hipMemcpy(dx, x.data(), n * 4, hipMemcpyHostToDevice));
  int nn = n;
  void* args[] = {&dx, &dp, &dout, &nn};
  CHECK(hipLaunchCooperativeKernel((void*)grid_sum, dim3(blocks), dim3(256), args, 0, 0));
  CHECK(hipDeviceSynchronize());
  int got = 0;
  CHECK(hipMemcpy(&got, dout, 4, hipMemcpyDeviceToHost));
  printf("grid sum %d, want %ld\n", got, want);
  if (got != want) return 2;
  printf("grid sync ok\n");
  return 0;
}
