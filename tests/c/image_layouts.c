// What the real ROCr's image manager (its built-in AMD addrlib) makes of image descriptors
// on the GPU agent it finds (issue 32): for each line "geometry order type width height depth
// layers" on stdin (HSA's enum numbers), the size and alignment hsa_ext_image_data_get_info
// reports for the opaque (tiled where ROCr tiles) layout, and the T# hsa_ext_image_create
// writes for an image in coarse-grained memory of that size and alignment.
// Prints "agent NAME", then "gb_addr_config 0x.." (what libhsakmt's hsaKmtGetTileConfig,
// KFD's GET_TILE_CONFIG, gives ROCr's image manager for its addrlib) or "gb_addr_config
// unknown" where no hsakmt.h is installed (ROCm >= 6.2 keeps the thunk inside ROCr), then
// "size align w0 .. w7" a descriptor ("error N" when ROCr refuses it).
// Built by tests/test_isa_images_hip.py (gcc, Debian 12's ROCr 5.2.3, -lhsakmt) and by
// tests/test_isa_tiled_images.py (the sid root filesystem's clang, ROCr 6.4.3).
#if __has_include(<hsakmt.h>)
#include <hsakmt.h>
#define HAVE_HSAKMT 1
#endif
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/hsa_ext_image.h>
#include <stdint.h>
#include <stdio.h>

static hsa_agent_t gpu;
static hsa_amd_memory_pool_t pool;
static int have_gpu, have_pool;

static hsa_status_t find_gpu(hsa_agent_t agent, void* unused) {
  (void)unused;
  hsa_device_type_t type;
  hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
  if (type == HSA_DEVICE_TYPE_GPU && !have_gpu) { gpu = agent; have_gpu = 1; }
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_pool(hsa_amd_memory_pool_t p, void* unused) {
  (void)unused;
  hsa_amd_segment_t segment;
  uint32_t flags = 0;
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  if (segment == HSA_AMD_SEGMENT_GLOBAL && (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) &&
      !have_pool) { pool = p; have_pool = 1; }
  return HSA_STATUS_SUCCESS;
}

int main(void) {
  if (hsa_init() != HSA_STATUS_SUCCESS) { printf("hsa_init failed\n"); return 1; }
  hsa_iterate_agents(find_gpu, NULL);
  if (!have_gpu) { printf("no GPU agent\n"); return 1; }
  hsa_amd_agent_iterate_memory_pools(gpu, find_pool, NULL);
  if (!have_pool) { printf("no coarse-grained global memory pool\n"); return 1; }
  char name[64] = {0};
  hsa_agent_get_info(gpu, HSA_AGENT_INFO_NAME, name);
  printf("agent %s\n", name);
#ifdef HAVE_HSAKMT
  uint32_t node = 0;
  hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_DRIVER_NODE_ID, &node);
  HSAuint32 tiles[40], macro[40];
  HsaGpuTileConfig tile = {0};
  tile.TileConfig = tiles;
  tile.NumTileConfigs = 40;
  tile.MacroTileConfig = macro;
  tile.NumMacroTileConfigs = 40;
  if (hsaKmtGetTileConfig(node, &tile) != HSAKMT_STATUS_SUCCESS) {
    printf("hsaKmtGetTileConfig failed\n");
    return 1;
  }
  printf("gb_addr_config 0x%08x\n", tile.GbAddrConfig);
#else
  printf("gb_addr_config unknown\n");
#endif
  int geometry, order, type;
  unsigned long w, h, d, layers;
  while (scanf("%d %d %d %lu %lu %lu %lu", &geometry, &order, &type, &w, &h, &d, &layers) == 7) {
    hsa_ext_image_descriptor_t desc = {(hsa_ext_image_geometry_t)geometry, w, h, d, layers,
                                       {(hsa_ext_image_channel_type_t)type,
                                        (hsa_ext_image_channel_order_t)order}};
    hsa_ext_image_data_info_t info;
    hsa_status_t s = hsa_ext_image_data_get_info(gpu, &desc, HSA_ACCESS_PERMISSION_RW, &info);
    if (s != HSA_STATUS_SUCCESS) { printf("error %d\n", (int)s); continue; }
    void* data = NULL;
    s = hsa_amd_memory_pool_allocate(pool, info.size + info.alignment, 0, &data);
    if (s != HSA_STATUS_SUCCESS) { printf("error %d\n", (int)s); continue; }
    uintptr_t at = ((uintptr_t)data + info.alignment - 1) / info.alignment * info.alignment;
    hsa_ext_image_t image;
    s = hsa_ext_image_create(gpu, &desc, (void*)at, HSA_ACCESS_PERMISSION_RW, &image);
    if (s != HSA_STATUS_SUCCESS) { printf("error %d\n", (int)s); continue; }
    const uint32_t* srd = (const uint32_t*)(uintptr_t)image.handle;
    printf("%zu %zu", info.size, info.alignment);
    for (int i = 0; i < 8; i++) printf(" %08x", srd[i]);
    printf("\n");
    fflush(stdout);
    hsa_ext_image_destroy(gpu, image);
    hsa_amd_memory_pool_free(data);
  }
  hsa_shut_down();
  return 0;
}
