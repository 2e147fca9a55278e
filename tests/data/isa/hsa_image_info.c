// What the real ROCr's image manager makes of an image (issue 32, tiled images on gfx11 and
// gfx12): for each image given on the command line as GEOMETRY:BYTES:WIDTH:HEIGHT:DEPTH
// (GEOMETRY 2d, 2da or 3d; BYTES 1, 2, 4, 8 or 16 per element; DEPTH the array size or
// depth), hsa_ext_image_data_get_info's size and alignment for the opaque (tiled) layout,
// and the T# hsa_ext_image_create writes for an image in memory of that size (the handle
// is the address of ROCr's descriptor words). One line an image:
//   image 2d 4 67x35x1 size 12288 align 256 srd 0x... x8
// Built with the root filesystem's clang against libhsa-runtime64 (scripts/rocm6.sh).
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/hsa_ext_image.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hsa_agent_t gpu;
static hsa_amd_memory_pool_t pool;
static int have_gpu, have_pool;

static hsa_status_t find_gpu(hsa_agent_t agent, void* data) {
  hsa_device_type_t type;
  hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
  if (type == HSA_DEVICE_TYPE_GPU && !have_gpu) {
    gpu = agent;
    have_gpu = 1;
  }
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_pool(hsa_amd_memory_pool_t p, void* data) {
  hsa_amd_segment_t segment;
  uint32_t flags = 0;
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  if (segment == HSA_AMD_SEGMENT_GLOBAL && (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) &&
      !have_pool) {
    pool = p;
    have_pool = 1;
  }
  return HSA_STATUS_SUCCESS;
}

// an element of BYTES bytes: the channel type and order HIP would use for it
static int format_of(int bytes, hsa_ext_image_format_t* f) {
  switch (bytes) {
    case 1: f->channel_type = HSA_EXT_IMAGE_CHANNEL_TYPE_UNSIGNED_INT8; f->channel_order = HSA_EXT_IMAGE_CHANNEL_ORDER_R; return 0;
    case 2: f->channel_type = HSA_EXT_IMAGE_CHANNEL_TYPE_UNSIGNED_INT16; f->channel_order = HSA_EXT_IMAGE_CHANNEL_ORDER_R; return 0;
    case 4: f->channel_type = HSA_EXT_IMAGE_CHANNEL_TYPE_FLOAT; f->channel_order = HSA_EXT_IMAGE_CHANNEL_ORDER_R; return 0;
    case 8: f->channel_type = HSA_EXT_IMAGE_CHANNEL_TYPE_FLOAT; f->channel_order = HSA_EXT_IMAGE_CHANNEL_ORDER_RG; return 0;
    case 16: f->channel_type = HSA_EXT_IMAGE_CHANNEL_TYPE_FLOAT; f->channel_order = HSA_EXT_IMAGE_CHANNEL_ORDER_RGBA; return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  if (hsa_init() != HSA_STATUS_SUCCESS) { printf("FAIL hsa_init\n"); return 1; }
  hsa_iterate_agents(find_gpu, NULL);
  if (!have_gpu) { printf("FAIL no GPU agent\n"); return 1; }
  hsa_amd_agent_iterate_memory_pools(gpu, find_pool, NULL);
  if (!have_pool) { printf("FAIL no coarse-grained pool\n"); return 1; }
  char name[64] = {0};
  hsa_agent_get_info(gpu, HSA_AGENT_INFO_NAME, name);
  printf("agent %s\n", name);
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    char geometry[8];
    int bytes, w, h, d;
    if (sscanf(argv[i], "%7[^:]:%d:%d:%d:%d", geometry, &bytes, &w, &h, &d) != 5) {
      printf("FAIL bad image spec %s\n", argv[i]);
      return 2;
    }
    hsa_ext_image_descriptor_t desc;
    memset(&desc, 0, sizeof desc);
    desc.width = w;
    desc.height = h;
    if (!strcmp(geometry, "2d")) desc.geometry = HSA_EXT_IMAGE_GEOMETRY_2D;
    else if (!strcmp(geometry, "2da")) { desc.geometry = HSA_EXT_IMAGE_GEOMETRY_2DA; desc.array_size = d; }
    else if (!strcmp(geometry, "3d")) { desc.geometry = HSA_EXT_IMAGE_GEOMETRY_3D; desc.depth = d; }
    else { printf("FAIL bad geometry %s\n", geometry); return 2; }
    if (format_of(bytes, &desc.format)) { printf("FAIL bad element size %d\n", bytes); return 2; }
    hsa_ext_image_data_info_t info;
    hsa_status_t s = hsa_ext_image_data_get_info(gpu, &desc, HSA_ACCESS_PERMISSION_RW, &info);
    if (s != HSA_STATUS_SUCCESS) { printf("FAIL data_get_info %s: 0x%x\n", argv[i], s); failed = 1; continue; }
    void* data = NULL;
    if (hsa_amd_memory_pool_allocate(pool, info.size + info.alignment, 0, &data) != HSA_STATUS_SUCCESS) {
      printf("FAIL allocate %zu\n", info.size);
      failed = 1;
      continue;
    }
    void* aligned = (void*)(((uintptr_t)data + info.alignment - 1) & ~(uintptr_t)(info.alignment - 1));
    hsa_ext_image_t image;
    s = hsa_ext_image_create(gpu, &desc, aligned, HSA_ACCESS_PERMISSION_RW, &image);
    if (s != HSA_STATUS_SUCCESS) { printf("FAIL image_create %s: 0x%x\n", argv[i], s); failed = 1; continue; }
    const uint32_t* srd = (const uint32_t*)(uintptr_t)image.handle;
    printf("image %s %d %dx%dx%d size %zu align %zu srd", geometry, bytes, w, h, d, info.size,
           info.alignment);
    for (int k = 0; k < 8; k++) printf(" 0x%08x", srd[k]);
    printf("\n");
    hsa_ext_image_destroy(gpu, image);
    hsa_amd_memory_pool_free(data);
  }
  hsa_shut_down();
  return failed;
}
