/* Checks the emulated libhsakmt's topology from C, the calls ROCr's BuildTopology and its
 * memory regions make: run with AMDGPU_EMULATED_GPUS=3 (and AMDGPU_EMULATED=0: no device
 * side). One CPU node and three GPU nodes, PCIe io links between the CPU and each GPU and
 * XGMI links between GPUs, distinct UUIDs (UniqueID) and one hive, queues on every GPU node,
 * and hsaKmtMapMemoryToGPUNodes recording the nodes QueryPointerInfo reports.
 * Prints one "ok NAME" or "FAIL NAME: why" line per check; exits 1 on any failure. */
#include <hsakmt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct note { uint64_t queue_id, kind; int64_t value; uint64_t ring, ring_bytes, read_ptr, write_ptr, node; };
extern int hsakmt_emu_poll(struct note* out, int max, uint32_t timeout_ms);
extern void hsakmt_emu_enable(int on);
extern uint32_t hsakmt_emu_gpu_count(void);

static int failures;
#define CHECK(name, cond, ...) do { if (cond) printf("ok %s\n", name); else { \
    printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

int main(void) {
    hsakmt_emu_enable(1);
    CHECK("open", hsaKmtOpenKFD() == HSAKMT_STATUS_SUCCESS, "%s", "failed");
    if (failures) return 1;
    HsaSystemProperties sys;
    hsaKmtAcquireSystemProperties(&sys);
    CHECK("four_nodes", sys.NumNodes == 4 && hsakmt_emu_gpu_count() == 3, "%u nodes",
          sys.NumNodes);
    HsaNodeProperties cpu, gpu[3];
    hsaKmtGetNodeProperties(0, &cpu);
    CHECK("cpu_links", cpu.NumIOLinks == 3 && cpu.NumFComputeCores == 0, "%u links",
          cpu.NumIOLinks);
    HsaIoLinkProperties links[4];
    hsaKmtGetNodeIoLinkProperties(0, 3, links);
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok &= links[i].IoLinkType == HSA_IOLINKTYPE_PCIEXPRESS && links[i].NodeFrom == 0 &&
              links[i].NodeTo == (HSAuint32)i + 1 && links[i].Weight == 20;
    CHECK("cpu_to_each_gpu_pcie", ok, "%s", "wrong links");
    for (int g = 0; g < 3; g++) {
        HSAuint32 node = g + 1;
        hsaKmtGetNodeProperties(node, &gpu[g]);
        memset(links, 0, sizeof links);
        hsaKmtGetNodeIoLinkProperties(node, gpu[g].NumIOLinks, links);
        int xgmi = 0, pcie = 0;
        for (HSAuint32 i = 0; i < gpu[g].NumIOLinks; i++) {
            if (links[i].NodeFrom != node || links[i].NodeTo == node) xgmi = -100;
            if (links[i].IoLinkType == HSA_IOLINK_TYPE_XGMI && links[i].NodeTo != 0 &&
                links[i].Weight == 15)
                xgmi++;
            if (links[i].IoLinkType == HSA_IOLINKTYPE_PCIEXPRESS && links[i].NodeTo == 0) pcie++;
        }
        char name[64];
        snprintf(name, sizeof name, "gpu%u_links", node);
        CHECK(name, gpu[g].NumIOLinks == 3 && xgmi == 2 && pcie == 1, "%u links, %d xgmi",
              gpu[g].NumIOLinks, xgmi);
    }
    CHECK("uuids_differ", gpu[0].UniqueID != gpu[1].UniqueID && gpu[1].UniqueID != gpu[2].UniqueID
          && gpu[0].UniqueID == 0x656d756c61746564ull, "%llx", (unsigned long long)gpu[1].UniqueID);
    CHECK("one_hive", gpu[0].HiveID && gpu[0].HiveID == gpu[2].HiveID, "%s", "hive ids differ");
    CHECK("locations_differ", gpu[0].LocationId != gpu[1].LocationId, "%s", "same LocationId");
    CHECK("node_4_is_invalid", hsaKmtGetNodeProperties(4, &cpu) == HSAKMT_STATUS_INVALID_NODE_UNIT,
          "%s", "accepted");

    /* VRAM of node 2 mapped to its owner, then to nodes 2 and 3 (allow_access) */
    void* vram = NULL;
    HsaMemFlags flags = {0};
    flags.ui32.NonPaged = 1;
    CHECK("alloc_on_node_2", hsaKmtAllocMemory(2, 1 << 21, flags, &vram) == HSAKMT_STATUS_SUCCESS,
          "%s", "failed");
    HSAuint32 owner[1] = {2}, both[2] = {2, 3}, bad[1] = {0};
    HSAuint64 alt;
    HsaMemMapFlags mf = {0};
    HsaPointerInfo info;
    hsaKmtMapMemoryToGPUNodes(vram, 1 << 21, &alt, mf, 1, owner);
    hsaKmtQueryPointerInfo(vram, &info);
    CHECK("mapped_to_owner", info.Node == 2 && info.NMappedNodes == 1 && info.MappedNodes[0] == 2,
          "%u mapped", info.NMappedNodes);
    hsaKmtMapMemoryToGPUNodes(vram, 1 << 21, &alt, mf, 2, both);
    hsaKmtQueryPointerInfo(vram, &info);
    CHECK("mapped_to_peer", info.NMappedNodes == 2 && info.MappedNodes[1] == 3, "%u mapped",
          info.NMappedNodes);
    CHECK("map_to_cpu_node_refused",
          hsaKmtMapMemoryToGPUNodes(vram, 1 << 21, &alt, mf, 1, bad) ==
              HSAKMT_STATUS_INVALID_NODE_UNIT, "%s", "accepted");
    hsaKmtFreeMemory(vram, 1 << 21);

    /* a queue on the third GPU: the device side learns its node */
    static uint64_t ring[512] __attribute__((aligned(4096)));
    static uint64_t rptr, wptr;
    HsaQueueResource res = {0};
    res.Queue_read_ptr_aql = &rptr;
    res.Queue_write_ptr_aql = &wptr;
    HSAKMT_STATUS st = hsaKmtCreateQueue(3, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL,
                                         ring, sizeof ring, NULL, &res);
    struct note notes[4];
    int n = hsakmt_emu_poll(notes, 4, 100);
    CHECK("queue_on_node_3", st == HSAKMT_STATUS_SUCCESS && n == 1 && notes[0].kind == 1 &&
          notes[0].node == 3, "status %d, %d notes", st, n);
    CHECK("queue_on_cpu_refused",
          hsaKmtCreateQueue(0, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL, ring,
                            sizeof ring, NULL, &res) == HSAKMT_STATUS_INVALID_NODE_UNIT,
          "%s", "accepted");
    CHECK("close", hsaKmtCloseKFD() == HSAKMT_STATUS_SUCCESS, "%s", "failed");
    return failures ? 1 : 0;
}
