/* hsa_amd_ext_kernel_dispatch_packet_t written from its public layout (ROCr hsa_ext_amd.h,
 * as quoted in issue #18): Debian's libhsa-runtime-dev 5.2 headers predate it, so this file
 * declares the struct itself with C's own types and lets gcc lay it out.
 *   layout          prints "field offset size" for every field (and "- 0 sizeof")
 *   encode          reads lines of 20 decimal field values in declaration order and prints
 *                   the 64 packet bytes in hex, one packet per line. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

typedef struct ext_kernel_dispatch_packet_s {
  uint16_t header;
  uint8_t amd_format;
  uint8_t setup;
  uint16_t workgroup_size_x;
  uint16_t workgroup_size_y;
  uint16_t workgroup_size_z;
  uint16_t reserved0;
  uint32_t cluster_count_x;
  uint16_t cluster_count_y;
  uint16_t cluster_count_z;
  uint8_t cluster_size_x;
  uint8_t cluster_size_y;
  uint8_t cluster_size_z;
  uint8_t perf_hint;
  uint32_t private_segment_size;
  uint32_t group_segment_size;
  uint64_t kernel_object;
  void *kernarg_address;
  hsa_signal_t dep_signal;
  hsa_signal_t completion_signal;
} ext_kernel_dispatch_packet_t;

#define F(name) printf("%s %zu %zu\n", #name, offsetof(ext_kernel_dispatch_packet_t, name), \
                       sizeof(((ext_kernel_dispatch_packet_t *)0)->name))

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "layout")) {
    printf("- 0 %zu\n", sizeof(ext_kernel_dispatch_packet_t));
    F(header); F(amd_format); F(setup); F(workgroup_size_x); F(workgroup_size_y);
    F(workgroup_size_z); F(reserved0); F(cluster_count_x); F(cluster_count_y);
    F(cluster_count_z); F(cluster_size_x); F(cluster_size_y); F(cluster_size_z);
    F(perf_hint); F(private_segment_size); F(group_segment_size); F(kernel_object);
    F(kernarg_address); F(dep_signal); F(completion_signal);
    return 0;
  }
  unsigned long long v[20];
  while (1) {
    for (int i = 0; i < 20; i++)
      if (scanf("%llu", &v[i]) != 1) return 0;
    ext_kernel_dispatch_packet_t p;
    memset(&p, 0xAB, sizeof p); /* every byte must be written by a field */
    /* header composed from hsa.h's own enums: vendor type, barrier, fence scopes */
    p.header = (uint16_t)((HSA_PACKET_TYPE_VENDOR_SPECIFIC << HSA_PACKET_HEADER_TYPE) |
                          (v[0] & 1) << HSA_PACKET_HEADER_BARRIER |
                          ((v[0] >> 1) & 3) << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                          ((v[0] >> 3) & 3) << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
    p.amd_format = (uint8_t)v[1];
    p.setup = (uint8_t)v[2];
    p.workgroup_size_x = (uint16_t)v[3];
    p.workgroup_size_y = (uint16_t)v[4];
    p.workgroup_size_z = (uint16_t)v[5];
    p.reserved0 = (uint16_t)v[6];
    p.cluster_count_x = (uint32_t)v[7];
    p.cluster_count_y = (uint16_t)v[8];
    p.cluster_count_z = (uint16_t)v[9];
    p.cluster_size_x = (uint8_t)v[10];
    p.cluster_size_y = (uint8_t)v[11];
    p.cluster_size_z = (uint8_t)v[12];
    p.perf_hint = (uint8_t)v[13];
    p.private_segment_size = (uint32_t)v[14];
    p.group_segment_size = (uint32_t)v[15];
    p.kernel_object = v[16];
    p.kernarg_address = (void *)(uintptr_t)v[17];
    p.dep_signal.handle = v[18];
    p.completion_signal.handle = v[19];
    const unsigned char *b = (const unsigned char *)&p;
    for (size_t i = 0; i < sizeof p; i++) printf("%02x", b[i]);
    printf("\n");
  }
}
