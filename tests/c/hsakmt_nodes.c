/* Prints what Debian's real libhsakmt (5.2.3) reports about the node: one line per fact,
 * "NODE KEY VALUE", for tests/test_emulated_topology.py to compare with hsa/emulated/models.py.
 * Run over the emulated kernel (LD_PRELOAD of its shim, a device server for the node). Also
 * prints which libhsakmt.so.1 is loaded ("lib PATH"). Exits 1 when libhsakmt refuses. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hsakmt.h>
#include <stdio.h>

int main(void) {
    Dl_info info;
    if (dladdr((void*)&hsaKmtOpenKFD, &info) && info.dli_fname) printf("lib %s\n", info.dli_fname);
    HSAKMT_STATUS st = hsaKmtOpenKFD();
    if (st != HSAKMT_STATUS_SUCCESS) { printf("error open %d\n", st); return 1; }
    HsaSystemProperties sys;
    if ((st = hsaKmtAcquireSystemProperties(&sys)) != HSAKMT_STATUS_SUCCESS) {
        printf("error system %d\n", st); return 1;
    }
    printf("nodes %u\n", sys.NumNodes);
    for (HSAuint32 n = 0; n < sys.NumNodes; n++) {
        HsaNodeProperties p;
        if ((st = hsaKmtGetNodeProperties(n, &p)) != HSAKMT_STATUS_SUCCESS) {
            printf("error node %u %d\n", n, st); return 1;
        }
        char name[HSA_PUBLIC_NAME_SIZE + 1];
        int i = 0;
        for (; i < HSA_PUBLIC_NAME_SIZE && p.MarketingName[i]; i++) name[i] = (char)p.MarketingName[i];
        name[i] = 0;
        printf("%u simds %u\n%u simd_per_cu %u\n%u device_id %u\n%u gfx %u.%u.%u\n", n,
               p.NumFComputeCores, n, p.NumSIMDPerCU, n, p.DeviceId, n, p.EngineId.ui32.Major,
               p.EngineId.ui32.Minor, p.EngineId.ui32.Stepping);
        printf("%u clock %u\n%u render %u\n%u links %u\n%u wave %u\n", n,
               p.MaxEngineClockMhzFCompute, n, p.DrmRenderMinor, n, p.NumIOLinks,
               n, p.WaveFrontSize);
        printf("%u unique_id %llu\n%u name %s\n", n, (unsigned long long)p.UniqueID, n, name);
        HsaMemoryProperties mem[8];
        HSAuint32 banks = p.NumMemoryBanks < 8 ? p.NumMemoryBanks : 8;
        if (banks && hsaKmtGetNodeMemoryProperties(n, banks, mem) == HSAKMT_STATUS_SUCCESS)
            for (HSAuint32 b = 0; b < banks; b++)
                printf("%u mem %u %llu\n", n, mem[b].HeapType, (unsigned long long)mem[b].SizeInBytes);
        HsaIoLinkProperties links[32];
        HSAuint32 count = p.NumIOLinks < 32 ? p.NumIOLinks : 32;
        if (count && hsaKmtGetNodeIoLinkProperties(n, count, links) == HSAKMT_STATUS_SUCCESS)
            for (HSAuint32 l = 0; l < count; l++)
                printf("%u link %u %u %u\n", n, links[l].NodeTo, links[l].IoLinkType, links[l].Weight);
    }
    hsaKmtReleaseSystemProperties();
    hsaKmtCloseKFD();
    return 0;
}
