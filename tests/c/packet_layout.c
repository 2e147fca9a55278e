/* Oracle for packets/: prints the layout of every AQL packet struct of the installed
 * hsa.h / hsa_ext_amd.h, and encodes packets field by field with the C compiler.
 *
 *   packet_layout layout      -> lines "struct field offset size", plus "struct - 0 sizeof"
 *   packet_layout encode      -> reads lines from stdin, writes one hex line per packet:
 *     kernel_dispatch BARRIER ACQ REL DIMS WX WY WZ GX GY GZ PRIVATE GROUP KOBJ KARG SIGNAL
 *     barrier_and     BARRIER ACQ REL D0 D1 D2 D3 D4 SIGNAL
 *     barrier_or      BARRIER ACQ REL D0 D1 D2 D3 D4 SIGNAL
 *     agent_dispatch  BARRIER ACQ REL TYPE RETURN A0 A1 A2 A3 SIGNAL
 *     barrier_value   BARRIER ACQ REL SIGNAL VALUE MASK COND COMPLETION
 * Headers are composed from hsa.h's own enums (bit positions, packet types, AmdFormat).
 */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(S, F) printf("%s %s %zu %zu\n", #S, #F, offsetof(S, F), sizeof(((S *)0)->F))
#define SIZE(S) printf("%s - 0 %zu\n", #S, sizeof(S))

static void layout(void) {
  SIZE(hsa_kernel_dispatch_packet_t);
  FIELD(hsa_kernel_dispatch_packet_t, header);
  FIELD(hsa_kernel_dispatch_packet_t, setup);
  FIELD(hsa_kernel_dispatch_packet_t, workgroup_size_x);
  FIELD(hsa_kernel_dispatch_packet_t, workgroup_size_y);
  FIELD(hsa_kernel_dispatch_packet_t, workgroup_size_z);
  FIELD(hsa_kernel_dispatch_packet_t, reserved0);
  FIELD(hsa_kernel_dispatch_packet_t, grid_size_x);
  FIELD(hsa_kernel_dispatch_packet_t, grid_size_y);
  FIELD(hsa_kernel_dispatch_packet_t, grid_size_z);
  FIELD(hsa_kernel_dispatch_packet_t, private_segment_size);
  FIELD(hsa_kernel_dispatch_packet_t, group_segment_size);
  FIELD(hsa_kernel_dispatch_packet_t, kernel_object);
  FIELD(hsa_kernel_dispatch_packet_t, kernarg_address);
  FIELD(hsa_kernel_dispatch_packet_t, reserved2);
  FIELD(hsa_kernel_dispatch_packet_t, completion_signal);

  SIZE(hsa_agent_dispatch_packet_t);
  FIELD(hsa_agent_dispatch_packet_t, header);
  FIELD(hsa_agent_dispatch_packet_t, type);
  FIELD(hsa_agent_dispatch_packet_t, reserved0);
  FIELD(hsa_agent_dispatch_packet_t, return_address);
  FIELD(hsa_agent_dispatch_packet_t, arg);
  FIELD(hsa_agent_dispatch_packet_t, reserved2);
  FIELD(hsa_agent_dispatch_packet_t, completion_signal);

  SIZE(hsa_barrier_and_packet_t);
  FIELD(hsa_barrier_and_packet_t, header);
  FIELD(hsa_barrier_and_packet_t, reserved0);
  FIELD(hsa_barrier_and_packet_t, reserved1);
  FIELD(hsa_barrier_and_packet_t, dep_signal);
  FIELD(hsa_barrier_and_packet_t, reserved2);
  FIELD(hsa_barrier_and_packet_t, completion_signal);

  SIZE(hsa_barrier_or_packet_t);
  FIELD(hsa_barrier_or_packet_t, header);
  FIELD(hsa_barrier_or_packet_t, reserved0);
  FIELD(hsa_barrier_or_packet_t, reserved1);
  FIELD(hsa_barrier_or_packet_t, dep_signal);
  FIELD(hsa_barrier_or_packet_t, reserved2);
  FIELD(hsa_barrier_or_packet_t, completion_signal);

  SIZE(hsa_amd_barrier_value_packet_t);
  printf("hsa_amd_barrier_value_packet_t header %zu %zu\n",
         offsetof(hsa_amd_barrier_value_packet_t, header) +
             offsetof(hsa_amd_vendor_packet_header_t, header),
         sizeof(((hsa_amd_vendor_packet_header_t *)0)->header));
  printf("hsa_amd_barrier_value_packet_t AmdFormat %zu %zu\n",
         offsetof(hsa_amd_barrier_value_packet_t, header) +
             offsetof(hsa_amd_vendor_packet_header_t, AmdFormat),
         sizeof(((hsa_amd_vendor_packet_header_t *)0)->AmdFormat));
  printf("hsa_amd_barrier_value_packet_t reserved %zu %zu\n",
         offsetof(hsa_amd_barrier_value_packet_t, header) +
             offsetof(hsa_amd_vendor_packet_header_t, reserved),
         sizeof(((hsa_amd_vendor_packet_header_t *)0)->reserved));
  FIELD(hsa_amd_barrier_value_packet_t, reserved0);
  FIELD(hsa_amd_barrier_value_packet_t, signal);
  FIELD(hsa_amd_barrier_value_packet_t, value);
  FIELD(hsa_amd_barrier_value_packet_t, mask);
  FIELD(hsa_amd_barrier_value_packet_t, cond);
  FIELD(hsa_amd_barrier_value_packet_t, reserved1);
  FIELD(hsa_amd_barrier_value_packet_t, reserved2);
  FIELD(hsa_amd_barrier_value_packet_t, reserved3);
  FIELD(hsa_amd_barrier_value_packet_t, completion_signal);
}

static uint16_t header(unsigned type, unsigned long long *v) {
  return (uint16_t)((type << HSA_PACKET_HEADER_TYPE) | (v[0] << HSA_PACKET_HEADER_BARRIER) |
                    (v[1] << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE) |
                    (v[2] << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE));
}

static void hex(const void *p) {
  const unsigned char *b = p;
  for (int i = 0; i < 64; i++) printf("%02x", b[i]);
  printf("\n");
}

static int encode(void) {
  char line[4096], kind[64];
  while (fgets(line, sizeof line, stdin)) {
    unsigned long long v[32] = {0};
    int n = 0, used = 0;
    if (sscanf(line, "%63s%n", kind, &used) != 1) continue;
    char *p = line + used, *end;
    while (n < 32) {
      unsigned long long x = strtoull(p, &end, 0);
      if (end == p) break;
      v[n++] = x;
      p = end;
    }
    if (!strcmp(kind, "kernel_dispatch")) {
      hsa_kernel_dispatch_packet_t k;
      memset(&k, 0, sizeof k);
      k.header = header(HSA_PACKET_TYPE_KERNEL_DISPATCH, v);
      k.setup = (uint16_t)(v[3] << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
      k.workgroup_size_x = v[4];
      k.workgroup_size_y = v[5];
      k.workgroup_size_z = v[6];
      k.grid_size_x = v[7];
      k.grid_size_y = v[8];
      k.grid_size_z = v[9];
      k.private_segment_size = v[10];
      k.group_segment_size = v[11];
      k.kernel_object = v[12];
      k.kernarg_address = (void *)(uintptr_t)v[13];
      k.completion_signal.handle = v[14];
      hex(&k);
    } else if (!strcmp(kind, "barrier_and") || !strcmp(kind, "barrier_or")) {
      int is_and = !strcmp(kind, "barrier_and");
      hsa_barrier_and_packet_t a;
      hsa_barrier_or_packet_t o;
      memset(&a, 0, sizeof a);
      memset(&o, 0, sizeof o);
      for (int i = 0; i < 5; i++) {
        a.dep_signal[i].handle = v[3 + i];
        o.dep_signal[i].handle = v[3 + i];
      }
      a.completion_signal.handle = o.completion_signal.handle = v[8];
      a.header = header(HSA_PACKET_TYPE_BARRIER_AND, v);
      o.header = header(HSA_PACKET_TYPE_BARRIER_OR, v);
      if (is_and) hex(&a); else hex(&o);
    } else if (!strcmp(kind, "agent_dispatch")) {
      hsa_agent_dispatch_packet_t g;
      memset(&g, 0, sizeof g);
      g.header = header(HSA_PACKET_TYPE_AGENT_DISPATCH, v);
      g.type = (uint16_t)v[3];
      g.return_address = (void *)(uintptr_t)v[4];
      for (int i = 0; i < 4; i++) g.arg[i] = v[5 + i];
      g.completion_signal.handle = v[9];
      hex(&g);
    } else if (!strcmp(kind, "barrier_value")) {
      hsa_amd_barrier_value_packet_t b;
      memset(&b, 0, sizeof b);
      b.header.header = header(HSA_PACKET_TYPE_VENDOR_SPECIFIC, v);
      b.header.AmdFormat = HSA_AMD_PACKET_TYPE_BARRIER_VALUE;
      b.signal.handle = v[3];
      b.value = (hsa_signal_value_t)v[4];
      b.mask = (hsa_signal_value_t)v[5];
      b.cond = (hsa_signal_condition32_t)v[6];
      b.completion_signal.handle = v[7];
      hex(&b);
    } else {
      fprintf(stderr, "unknown packet kind %s\n", kind);
      return 2;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "layout")) {
    layout();
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "encode")) return encode();
  fprintf(stderr, "usage: %s layout|encode\n", argv[0]);
  return 2;
}
