/* libhsakmt.so.1 for an emulated AMD kernel driver.
 *
 * Debian's libhsa-runtime64 (ROCr 5.2) talks to the GPU only through the 42 hsaKmt*
 * functions of this library. This one answers them without /dev/kfd: a topology read from
 * the environment (one CPU node and AMDGPU_EMULATED_GPUS gfx90a GPU nodes, 1 by default; with
 * several, each pair of GPUs has an XGMI io link and they share one hive), an allocation
 * registry over mmap that records which GPU nodes each allocation is mapped to,
 * queues whose doorbells are plain memory, KFD-style events, and clocks.
 *
 * The device side (reading the rings, running packets) is not here: it is hsa/virtual's
 * packet processor in Python, which learns about doorbell writes through
 * hsakmt_emu_poll() and fires events through hsakmt_emu_interrupt(). See
 * docs/ARCHITECTURE.md ("amdgpu:emulated").
 *
 * Every wait here is bounded: event waits honour their timeout (an "infinite" wait is
 * re-checked every 100 ms), DestroyQueue waits at most 5 s for the device side.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hsakmt.h>

#define EXPORT __attribute__((visibility("default")))
#define GPU_NODE 1 /* the first GPU node; GPU nodes are 1..cfg.gpus (node 0 is the CPU) */
#define MAX_GPUS 16
#define NUM_NODES (1 + cfg.gpus)
#define IS_GPU(node) ((node) >= GPU_NODE && (node) < NUM_NODES)
#define ALL_GPUS ((((uint32_t)1 << cfg.gpus) - 1) << GPU_NODE) /* node mask */
#define UNIQUE_ID 0x656d756c61746564ull /* "emulated": GPU node 1; node k adds k - 1 */
#define HIVE_ID 0x68697665ull           /* "hive": the XGMI hive of a several-GPU node */
/* io-link weights (KFD's CDIT distances) and nominal bandwidths, as hsa/virtual/topology.py */
#define PCIE_WEIGHT 20
#define XGMI_WEIGHT 15
#define MAX_QUEUES 1024 /* one doorbell page: ROCr maps doorbells by (addr >> 3) & 0x3FF */
#define MAX_EVENTS 4096
#define DOORBELL_PAGE 8192

/* --- configuration --------------------------------------------------------------------- */
struct config {
    unsigned major, minor, stepping;
    unsigned cus;
    unsigned long long vram_bytes;
    unsigned gpus;
    char name[16];
};
static struct config cfg;
static int opened;
/* 1 on, 0 off, -1 not told. The Python driver (hsa/emulated/driver.py) loads this library
 * switched off and turns it on for amdgpu:emulated; while off, OpenKFD fails as libhsakmt
 * does without /dev/kfd. A program that found this library by itself (LD_LIBRARY_PATH)
 * leaves it at -1: then it is on, and the device side is started in an embedded Python
 * (embed_device_side). AMDGPU_EMULATED=0 turns it off. */
static int enabled = -1;
static int device_side; /* a Python device side has been started (ours or the embedded one) */

/* The device side for a program that is not our Python driver: load libpython (the path
 * build.py wrote into embed.conf beside this library), and run embed.py, which starts the
 * device thread of hsa/emulated/driver.py in this process. */
static int embed_device_side(void) {
    Dl_info info;
    if (!dladdr((void*)&embed_device_side, &info) || !info.dli_fname) return -1;
    char dir[4096], conf[4200], script[4200], libpython[4096];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char* slash = strrchr(dir, '/');
    if (!slash) return -1;
    *slash = 0;
    snprintf(conf, sizeof conf, "%s/embed.conf", dir);
    snprintf(script, sizeof script, "%s/embed.py", dir);
    FILE* f = fopen(conf, "r");
    if (!f) {
        fprintf(stderr, "libhsakmt (emulated): %s is missing; run scripts/setup.sh\n", conf);
        return -1;
    }
    if (!fgets(libpython, sizeof libpython, f)) libpython[0] = 0;
    fclose(f);
    libpython[strcspn(libpython, "\n")] = 0;
    void* py = dlopen(libpython, RTLD_NOW | RTLD_GLOBAL);
    if (!py) {
        fprintf(stderr, "libhsakmt (emulated): cannot load %s (%s); run scripts/setup.sh\n",
                libpython, dlerror());
        return -1;
    }
    int (*is_init)(void) = (int (*)(void))dlsym(py, "Py_IsInitialized");
    void (*init)(int) = (void (*)(int))dlsym(py, "Py_InitializeEx");
    int (*ensure)(void) = (int (*)(void))dlsym(py, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(py, "PyGILState_Release");
    void* (*save)(void) = (void* (*)(void))dlsym(py, "PyEval_SaveThread");
    int (*run)(const char*) = (int (*)(const char*))dlsym(py, "PyRun_SimpleString");
    if (!is_init || !init || !ensure || !release || !save || !run) return -1;
    char code[4400];
    snprintf(code, sizeof code, "exec(compile(open(%c%s%c).read(), %c%s%c, 'exec'))",
             '"', script, '"', '"', script, '"');
    int rc;
    if (is_init()) { /* a Python program that loaded ROCr itself */
        int g = ensure();
        rc = run(code);
        release(g);
    } else {
        init(0);
        rc = run(code);
        save(); /* let the device thread run; this thread never takes the GIL again */
    }
    return rc == 0 ? 0 : -1;
}
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER; /* events, queues, detaches */

static unsigned long long env_ull(const char* name, unsigned long long dflt) {
    const char* v = getenv(name);
    if (!v || !*v) return dflt;
    char* end;
    unsigned long long x = strtoull(v, &end, 0);
    return *end ? dflt : x;
}

static int read_config(void) {
    const char* isa = getenv("AMDGPU_EMULATED_ISA");
    if (!isa || !*isa) isa = "gfx90a";
    /* gfxXYZ: major X (or XX for gfx10+), minor Y, stepping Z (hex) */
    size_t n = strlen(isa);
    if (strncmp(isa, "gfx", 3) != 0 || n < 6 || n > 7) return -1;
    char digits[8];
    strcpy(digits, isa + 3);
    size_t d = strlen(digits);
    char step[2] = {digits[d - 1], 0}, minor[2] = {digits[d - 2], 0};
    digits[d - 2] = 0;
    char* end;
    cfg.major = strtoul(digits, &end, 10);
    if (*end) return -1;
    cfg.minor = strtoul(minor, &end, 16);
    if (*end) return -1;
    cfg.stepping = strtoul(step, &end, 16);
    if (*end) return -1;
    cfg.cus = (unsigned)env_ull("AMDGPU_EMULATED_CUS", 104);
    if (cfg.cus == 0 || cfg.cus > 1024) return -1;
    cfg.vram_bytes = env_ull("AMDGPU_EMULATED_VRAM_MB", 16384) << 20;
    cfg.gpus = (unsigned)env_ull("AMDGPU_EMULATED_GPUS", 1);
    if (cfg.gpus == 0 || cfg.gpus > MAX_GPUS) return -1;
    snprintf(cfg.name, sizeof cfg.name, "%s", isa);
    return 0;
}

/* --- clocks: every counter is CLOCK_MONOTONIC in ns, the clock the device side stamps --- */
static uint64_t now_ns(clockid_t clk) {
    struct timespec t;
    clock_gettime(clk, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static struct timespec deadline_after_ms(uint64_t ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* --- allocations --------------------------------------------------------------------- */
struct alloc {
    struct alloc* next;
    void* addr;
    uint64_t size;
    uint32_t node;
    HsaMemFlags flags;
    HSA_POINTER_TYPE type;
    uint32_t mapped; /* mask of the GPU nodes it is mapped to (bit n: node n) */
    int owned;  /* mmap'ed here (freed by munmap) */
    void* user_data;
    HSAuint32 registered[MAX_GPUS]; /* QueryPointerInfo's node lists */
    HSAuint32 mapped_nodes[MAX_GPUS];
};
static struct alloc* allocs;
static atomic_ulong alloc_generation; /* bumped on every free: device-side caches drop */

static struct alloc* find_alloc(const void* p) {
    uintptr_t a = (uintptr_t)p;
    for (struct alloc* x = allocs; x; x = x->next)
        if (a >= (uintptr_t)x->addr && a < (uintptr_t)x->addr + x->size) return x;
    return NULL;
}

static struct alloc* add_alloc(void* addr, uint64_t size, uint32_t node, HsaMemFlags flags,
                               HSA_POINTER_TYPE type, int owned) {
    struct alloc* x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->addr = addr;
    x->size = size;
    x->node = node;
    x->flags = flags;
    x->type = type;
    x->owned = owned;
    x->next = allocs;
    allocs = x;
    return x;
}

static void remove_alloc(struct alloc* victim) {
    for (struct alloc** p = &allocs; *p; p = &(*p)->next)
        if (*p == victim) {
            *p = victim->next;
            break;
        }
    atomic_fetch_add(&alloc_generation, 1);
    free(victim);
}

/* --- events: KFD semantics. A set wakes every current waiter; it stays set (for the
 * next waiter) only when nobody was waiting, and a wait consumes it (auto-reset). --------- */
struct event {
    HsaEvent pub; /* first: ROCr holds HsaEvent* */
    int live;
    int manual_reset;
    int signaled;
    int waiters;
    uint64_t generation; /* bumped by each set that had waiters */
};
static struct event events[MAX_EVENTS];
static uint64_t* mailboxes; /* the event page: slot i is event i's mailbox */
static HsaMemoryAccessFault pending_fault;
static int have_fault;

static void set_event_locked(struct event* e) {
    if (e->waiters) {
        e->generation++;
        if (e->manual_reset) e->signaled = 1;
        pthread_cond_broadcast(&changed);
    } else {
        e->signaled = 1;
    }
}

/* --- queues -------------------------------------------------------------------------- */
struct queue {
    int live;
    int dying;     /* DestroyQueue waits for the device side to let go */
    int attached;  /* the device side has seen the queue */
    HSA_QUEUE_TYPE type;
    uint32_t node; /* the GPU node it runs on */
    void* ring;
    uint64_t ring_bytes;
    uint64_t* read_ptr;
    uint64_t* write_ptr;
    int64_t last_bell;
};
static struct queue queues[MAX_QUEUES];
static uint64_t* doorbells; /* one 8 KiB page, 8-byte slots */

/* --- the API ------------------------------------------------------------------------- */
EXPORT HSAKMT_STATUS hsaKmtOpenKFD(void) {
    pthread_mutex_lock(&lock);
    if (enabled < 0) {
        const char* env = getenv("AMDGPU_EMULATED");
        if (env && strcmp(env, "0") == 0) {
            enabled = 0;
        } else {
            enabled = 1;
            if (!device_side) {
                device_side = 1;
                pthread_mutex_unlock(&lock); /* the device side calls back into this library */
                int rc = embed_device_side();
                pthread_mutex_lock(&lock);
                if (rc != 0) {
                    fprintf(stderr, "libhsakmt (emulated): the device side did not start; "
                                    "run scripts/setup.sh, or use amdgpu:emulated from Python\n");
                    enabled = 0;
                    device_side = 0;
                }
            }
        }
    }
    if (!enabled) {
        pthread_mutex_unlock(&lock);
        return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
    }
    HSAKMT_STATUS st = HSAKMT_STATUS_SUCCESS;
    if (opened++ == 0) {
        if (read_config() != 0) {
            fprintf(stderr, "libhsakmt (emulated): bad AMDGPU_EMULATED_ISA/AMDGPU_EMULATED_CUS/"
                            "AMDGPU_EMULATED_GPUS (want gfxXYZ, e.g. gfx90a, 1..1024 CUs and "
                            "1..%d GPUs)\n", MAX_GPUS);
            opened = 0;
            st = HSAKMT_STATUS_ERROR;
        } else {
            doorbells = mmap(NULL, DOORBELL_PAGE * 2, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            mailboxes = mmap(NULL, MAX_EVENTS * 8, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (doorbells == MAP_FAILED || mailboxes == MAP_FAILED) {
                opened = 0;
                st = HSAKMT_STATUS_NO_MEMORY;
            } else {
                /* 8 KiB-align the doorbell page inside the 16 KiB mapping */
                uintptr_t d = ((uintptr_t)doorbells + DOORBELL_PAGE - 1) & ~(uintptr_t)(DOORBELL_PAGE - 1);
                doorbells = (uint64_t*)d;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return st;
}

EXPORT HSAKMT_STATUS hsaKmtCloseKFD(void) {
    pthread_mutex_lock(&lock);
    HSAKMT_STATUS st = opened ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
    if (opened) opened--;
    pthread_mutex_unlock(&lock);
    return st;
}

#define CHECK_OPEN() do { if (!opened) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED; } while (0)

EXPORT HSAKMT_STATUS hsaKmtGetVersion(HsaVersionInfo* v) {
    CHECK_OPEN();
    if (!v) return HSAKMT_STATUS_INVALID_PARAMETER;
    v->KernelInterfaceMajorVersion = 1;
    v->KernelInterfaceMinorVersion = 6;
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtRuntimeEnable(void* rDebug, bool setupTtmp) {
    (void)rDebug; (void)setupTtmp;
    return HSAKMT_STATUS_NOT_SUPPORTED; /* no debugger: ROCr accepts this */
}
EXPORT HSAKMT_STATUS hsaKmtRuntimeDisable(void) { return HSAKMT_STATUS_SUCCESS; }

EXPORT HSAKMT_STATUS hsaKmtAcquireSystemProperties(HsaSystemProperties* p) {
    CHECK_OPEN();
    if (!p) return HSAKMT_STATUS_INVALID_PARAMETER;
    memset(p, 0, sizeof *p);
    p->NumNodes = NUM_NODES;
    return HSAKMT_STATUS_SUCCESS;
}
EXPORT HSAKMT_STATUS hsaKmtReleaseSystemProperties(void) { return HSAKMT_STATUS_SUCCESS; }

static void ascii_to_u16(HSAuint16* out, const char* s, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) out[i] = (unsigned char)s[i];
    out[i] = 0;
}

EXPORT HSAKMT_STATUS hsaKmtGetNodeProperties(HSAuint32 node, HsaNodeProperties* p) {
    CHECK_OPEN();
    if (!p) return HSAKMT_STATUS_INVALID_PARAMETER;
    if (node >= NUM_NODES) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    memset(p, 0, sizeof *p);
    if (node == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        p->NumCPUCores = cpus > 0 ? (HSAuint32)cpus : 1;
        p->NumMemoryBanks = 1;
        p->NumCaches = 3; /* HIP asks ROCr for the CPU agent's caches, and ROCr asserts some */
        p->NumIOLinks = cfg.gpus; /* one PCIe link to each GPU */
        p->MaxEngineClockMhzCCompute = 2000;
        ascii_to_u16(p->MarketingName, "Emulated host CPU", HSA_PUBLIC_NAME_SIZE);
        return HSAKMT_STATUS_SUCCESS;
    }
    p->NumFComputeCores = cfg.cus * 4; /* SIMDs */
    p->NumMemoryBanks = 3; /* VRAM, and the LDS and scratch apertures (as libhsakmt adds them) */
    p->NumCaches = 1;
    p->NumIOLinks = cfg.gpus; /* PCIe to the CPU, XGMI to each other GPU */
    p->FComputeIdLo = 0x80000000u;
    p->Capability.ui32.QueueSizePowerOfTwo = 1;
    p->Capability.ui32.QueueSize32bit = 1;
    p->Capability.ui32.DoorbellType = 2;
    p->MaxWavesPerSIMD = 8;
    p->LDSSizeInKB = 64;
    p->WaveFrontSize = 64;
    p->NumShaderBanks = 4;
    p->NumArrays = 1;
    p->NumCUPerArray = (cfg.cus + 3) / 4;
    p->NumSIMDPerCU = 4;
    p->MaxSlotsScratchCU = 32;
    p->EngineId.ui32.uCode = 0;
    p->EngineId.ui32.Major = cfg.major;
    p->EngineId.ui32.Minor = cfg.minor;
    p->EngineId.ui32.Stepping = cfg.stepping;
    p->VendorId = 0x1002;
    p->DeviceId = 0x740f;
    p->LocationId = 0x100 * node; /* PCI bus node-1, device 0 */
    p->LocalMemSize = cfg.vram_bytes;
    p->MaxEngineClockMhzFCompute = 1700;
    p->DrmRenderMinor = 128 + (node - GPU_NODE);
    char name[HSA_PUBLIC_NAME_SIZE];
    snprintf(name, sizeof name, "Emulated AMD GPU (%s, amdgpu-direct)", cfg.name);
    ascii_to_u16(p->MarketingName, name, HSA_PUBLIC_NAME_SIZE);
    snprintf((char*)p->AMDName, HSA_PUBLIC_NAME_SIZE, "%s", cfg.name);
    p->NumSdmaEngines = 2;
    p->NumSdmaQueuesPerEngine = 8;
    p->NumCpQueues = 24;
    p->Domain = 0;
    p->UniqueID = UNIQUE_ID + (node - GPU_NODE); /* ROCr's UUID: GPU-656d756c61746564 ... */
    p->HiveID = cfg.gpus > 1 ? HIVE_ID : 0;
    p->VGPRSizePerCU = 512 * 1024;
    p->SGPRSizePerCU = 800 * 4 * 4;
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtGetNodeMemoryProperties(HSAuint32 node, HSAuint32 n,
                                                   HsaMemoryProperties* m) {
    CHECK_OPEN();
    if (node >= NUM_NODES) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    if (!m) return HSAKMT_STATUS_INVALID_PARAMETER;
    if (n < 1) return HSAKMT_STATUS_SUCCESS;
    memset(m, 0, sizeof *m * n);
    if (node == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        m[0].HeapType = HSA_HEAPTYPE_SYSTEM;
        m[0].SizeInBytes = (HSAuint64)pages * (HSAuint64)psize;
        m[0].Width = 64;
        m[0].MemoryClockMax = 3200;
    } else {
        m[0].HeapType = HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC;
        m[0].SizeInBytes = cfg.vram_bytes;
        m[0].Width = 4096;
        m[0].MemoryClockMax = 1600;
        /* gfx9's apertures: ROCr takes group_segment_aperture_base_hi from the LDS bank */
        if (n >= 2) {
            m[1].HeapType = HSA_HEAPTYPE_GPU_LDS;
            m[1].SizeInBytes = 64 * 1024;
            m[1].VirtualBaseAddress = 0x1000000000000ull;
        }
        if (n >= 3) {
            m[2].HeapType = HSA_HEAPTYPE_GPU_SCRATCH;
            m[2].SizeInBytes = 1ull << 32;
            m[2].VirtualBaseAddress = 0x2000000000000ull;
        }
    }
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtGetNodeCacheProperties(HSAuint32 node, HSAuint32 proc, HSAuint32 n,
                                                  HsaCacheProperties* c) {
    (void)proc;
    CHECK_OPEN();
    if (node >= NUM_NODES) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    if (!c) return HSAKMT_STATUS_INVALID_PARAMETER;
    memset(c, 0, sizeof *c * n);
    if (node == 0) { /* L1d, L2, L3 of the host CPU, sizes in KiB */
        static const HSAuint32 level[3] = {1, 2, 3}, kib[3] = {32, 512, 32768};
        for (HSAuint32 i = 0; i < n && i < 3; i++) {
            c[i].ProcessorIdLow = 0;
            c[i].CacheLevel = level[i];
            c[i].CacheSize = kib[i];
            c[i].CacheLineSize = 64;
            c[i].CacheLinesPerTag = 1;
            c[i].CacheAssociativity = 8;
            c[i].CacheType.ui32.Data = 1;
            c[i].CacheType.ui32.CPU = 1;
        }
    }
    if (IS_GPU(node) && n >= 1) {
        c[0].ProcessorIdLow = 0x80000000u;
        c[0].CacheLevel = 2;
        c[0].CacheSize = 8192; /* KiB */
        c[0].CacheLineSize = 128;
        c[0].CacheLinesPerTag = 1;
        c[0].CacheAssociativity = 16;
        c[0].CacheType.ui32.Data = 1;
        c[0].CacheType.ui32.HSACU = 1;
    }
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtGetNodeIoLinkProperties(HSAuint32 node, HSAuint32 n,
                                                   HsaIoLinkProperties* l) {
    CHECK_OPEN();
    if (node >= NUM_NODES) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    if (!l) return HSAKMT_STATUS_INVALID_PARAMETER;
    memset(l, 0, sizeof *l * n);
    /* The CPU node: one PCIe link to each GPU. A GPU node: PCIe to the CPU first, then one
     * XGMI link to each other GPU (one hive, as MI250X/MI300X nodes). ROCr registers each
     * link as (NodeFrom, NodeTo, Weight) and reports it through
     * hsa_amd_agent_memory_pool_get_info: LINK_INFO (type, Weight as numa_distance,
     * latencies, bandwidths) and NUM_LINK_HOPS (1). */
    HSAuint32 k = 0;
    for (HSAuint32 to = 0; to < NUM_NODES && k < n; to++) {
        if (to == node) continue;
        HsaIoLinkProperties* x = &l[k++];
        int xgmi = node != 0 && to != 0;
        x->IoLinkType = xgmi ? HSA_IOLINK_TYPE_XGMI : HSA_IOLINKTYPE_PCIEXPRESS;
        x->VersionMajor = xgmi ? 3 : 4;
        x->NodeFrom = node;
        x->NodeTo = to;
        x->Weight = xgmi ? XGMI_WEIGHT : PCIE_WEIGHT;
        x->MinimumLatency = xgmi ? 400 : 1000;
        x->MaximumLatency = xgmi ? 800 : 2000;
        x->MinimumBandwidth = x->MaximumBandwidth = xgmi ? 64000 : 32000;
    }
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtGetXNACKMode(HSAint32* enable) {
    CHECK_OPEN();
    if (!enable) return HSAKMT_STATUS_INVALID_PARAMETER;
    *enable = 0;
    return HSAKMT_STATUS_SUCCESS;
}
EXPORT HSAKMT_STATUS hsaKmtSetXNACKMode(HSAint32 enable) {
    return enable ? HSAKMT_STATUS_NOT_SUPPORTED : HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtGetClockCounters(HSAuint32 node, HsaClockCounters* c) {
    CHECK_OPEN();
    if (node >= NUM_NODES) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    if (!c) return HSAKMT_STATUS_INVALID_PARAMETER;
    uint64_t t = now_ns(CLOCK_MONOTONIC);
    c->GPUClockCounter = t;
    c->CPUClockCounter = t;
    c->SystemClockCounter = t;
    c->SystemClockFrequencyHz = 1000000000ull;
    return HSAKMT_STATUS_SUCCESS;
}

/* ROCr's image extension (which HIP initialises) asks for it: gfx9 has no tile-mode
 * tables, and images themselves are not emulated. */
EXPORT HSAKMT_STATUS hsaKmtGetTileConfig(HSAuint32 node, HsaGpuTileConfig* config) {
    CHECK_OPEN();
    if (!IS_GPU(node)) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    if (!config) return HSAKMT_STATUS_INVALID_PARAMETER;
    config->NumTileConfigs = 0;
    config->NumMacroTileConfigs = 0;
    config->GbAddrConfig = 0;
    config->NumBanks = 16;
    config->NumRanks = 1;
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtSetTrapHandler(HSAuint32 node, void* base, HSAuint64 size, void* buf,
                                          HSAuint64 bufsize) {
    (void)node; (void)base; (void)size; (void)buf; (void)bufsize;
    CHECK_OPEN();
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtSetMemoryPolicy(HSAuint32 node, HSAuint32 dflt, HSAuint32 alt,
                                           void* addr, HSAuint64 size) {
    (void)node; (void)dflt; (void)alt; (void)addr; (void)size;
    return HSAKMT_STATUS_SUCCESS;
}

/* --- memory -------------------------------------------------------------------------- */
EXPORT HSAKMT_STATUS hsaKmtAllocMemory(HSAuint32 node, HSAuint64 size, HsaMemFlags flags,
                                       void** addr) {
    CHECK_OPEN();
    if (!addr || size == 0) return HSAKMT_STATUS_INVALID_PARAMETER;
    if (node >= NUM_NODES) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    long page = sysconf(_SC_PAGESIZE);
    size = (size + (HSAuint64)page - 1) & ~(HSAuint64)(page - 1);
    int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void* want = NULL;
    if (flags.ui32.FixedAddress) {
        want = *addr;
        mflags |= MAP_FIXED_NOREPLACE;
    }
    /* Over-allocate to align large blocks at 2 MiB like VRAM pages; the slack is unmapped. */
    uint64_t align = size >= (2u << 20) && !want ? (2u << 20) : (uint64_t)page;
    void* p = mmap(want, size + align - page, PROT_READ | PROT_WRITE, mflags, -1, 0);
    if (p == MAP_FAILED) return HSAKMT_STATUS_NO_MEMORY;
    uintptr_t start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    if (start > (uintptr_t)p) munmap(p, start - (uintptr_t)p);
    uintptr_t end = start + size, mend = (uintptr_t)p + size + align - page;
    if (mend > end) munmap((void*)end, mend - end);
    pthread_mutex_lock(&lock);
    struct alloc* x = add_alloc((void*)start, size, node, flags, HSA_POINTER_ALLOCATED, 1);
    pthread_mutex_unlock(&lock);
    if (!x) {
        munmap((void*)start, size);
        return HSAKMT_STATUS_NO_MEMORY;
    }
    *addr = (void*)start;
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtFreeMemory(void* addr, HSAuint64 size) {
    (void)size;
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct alloc* x = find_alloc(addr);
    if (!x || x->addr != addr || !x->owned) {
        pthread_mutex_unlock(&lock);
        return HSAKMT_STATUS_INVALID_PARAMETER;
    }
    void* a = x->addr;
    uint64_t s = x->size;
    remove_alloc(x);
    pthread_mutex_unlock(&lock);
    munmap(a, s);
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtRegisterMemoryWithFlags(void* addr, HSAuint64 size, HsaMemFlags flags) {
    CHECK_OPEN();
    if (!addr || !size) return HSAKMT_STATUS_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    HSAKMT_STATUS st = HSAKMT_STATUS_SUCCESS;
    struct alloc* x = find_alloc(addr);
    if (x && x->type != HSA_POINTER_REGISTERED_USER) {
        /* memory this library allocated is registered already */
    } else if (!add_alloc(addr, size, 0, flags, HSA_POINTER_REGISTERED_USER, 0)) {
        st = HSAKMT_STATUS_NO_MEMORY;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

EXPORT HSAKMT_STATUS hsaKmtDeregisterMemory(void* addr) {
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct alloc* x = find_alloc(addr);
    HSAKMT_STATUS st = HSAKMT_STATUS_SUCCESS;
    if (!x) st = HSAKMT_STATUS_MEMORY_NOT_REGISTERED;
    else if (x->type == HSA_POINTER_REGISTERED_USER && x->addr == addr) remove_alloc(x);
    pthread_mutex_unlock(&lock);
    return st;
}

/* Map to the GPU nodes of `mask` (replacing the allocation's mapping, as KFD's map to a
 * node list does): the device side lets a queue of node n reach only memory mapped to n
 * when there are several GPUs, so peer access needs hsa_amd_agents_allow_access. */
static HSAKMT_STATUS map_locked(void* addr, HSAuint64* alt, uint32_t mask) {
    struct alloc* x = find_alloc(addr);
    if (!x) return HSAKMT_STATUS_INVALID_PARAMETER;
    if (x->mapped != mask) {
        x->mapped = mask;
        atomic_fetch_add(&alloc_generation, 1); /* the device side re-reads the mapping */
    }
    if (alt) *alt = (HSAuint64)(uintptr_t)addr; /* one address space: GPU VA == CPU VA */
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtMapMemoryToGPU(void* addr, HSAuint64 size, HSAuint64* alt) {
    (void)size;
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    HSAKMT_STATUS st = map_locked(addr, alt, ALL_GPUS); /* libhsakmt: every GPU node */
    pthread_mutex_unlock(&lock);
    return st;
}

EXPORT HSAKMT_STATUS hsaKmtMapMemoryToGPUNodes(void* addr, HSAuint64 size, HSAuint64* alt,
                                               HsaMemMapFlags flags, HSAuint64 n, HSAuint32* nodes) {
    (void)size; (void)flags;
    CHECK_OPEN();
    if (!nodes || n == 0) return HSAKMT_STATUS_INVALID_PARAMETER;
    uint32_t mask = 0;
    for (HSAuint64 i = 0; i < n; i++) {
        if (!IS_GPU(nodes[i])) return HSAKMT_STATUS_INVALID_NODE_UNIT;
        mask |= (uint32_t)1 << nodes[i];
    }
    pthread_mutex_lock(&lock);
    HSAKMT_STATUS st = map_locked(addr, alt, mask);
    pthread_mutex_unlock(&lock);
    return st;
}

EXPORT HSAKMT_STATUS hsaKmtUnmapMemoryToGPU(void* addr) {
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct alloc* x = find_alloc(addr);
    if (x && x->mapped) {
        x->mapped = 0;
        atomic_fetch_add(&alloc_generation, 1);
    }
    pthread_mutex_unlock(&lock);
    return x ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_PARAMETER;
}

EXPORT HSAKMT_STATUS hsaKmtQueryPointerInfo(const void* ptr, HsaPointerInfo* info) {
    CHECK_OPEN();
    if (!info) return HSAKMT_STATUS_INVALID_PARAMETER;
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&lock);
    struct alloc* x = find_alloc(ptr);
    if (!x) {
        pthread_mutex_unlock(&lock);
        info->Type = HSA_POINTER_UNKNOWN;
        return HSAKMT_STATUS_ERROR;
    }
    info->Type = x->type;
    info->Node = x->node;
    info->MemFlags = x->flags;
    info->CPUAddress = x->addr;
    info->GPUAddress = (HSAuint64)(uintptr_t)x->addr;
    info->SizeInBytes = x->size;
    HSAuint32 nreg = 0, nmap = 0;
    for (HSAuint32 node = GPU_NODE; node < NUM_NODES; node++) {
        /* registered: the owner GPU, or every GPU for system memory */
        if (x->node == node || !IS_GPU(x->node)) x->registered[nreg++] = node;
        if (x->mapped & ((uint32_t)1 << node)) x->mapped_nodes[nmap++] = node;
    }
    info->NRegisteredNodes = nreg;
    info->RegisteredNodes = x->registered;
    info->NMappedNodes = nmap;
    info->MappedNodes = x->mapped_nodes;
    info->UserData = x->user_data;
    pthread_mutex_unlock(&lock);
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtSetMemoryUserData(const void* ptr, void* data) {
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct alloc* x = find_alloc(ptr);
    if (x) x->user_data = data;
    pthread_mutex_unlock(&lock);
    return x ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_PARAMETER;
}

/* IPC, graphics interop, SVM, GWS: not emulated. */
EXPORT HSAKMT_STATUS hsaKmtShareMemory(void* a, HSAuint64 s, HsaSharedMemoryHandle* h) {
    (void)a; (void)s; (void)h;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}
EXPORT HSAKMT_STATUS hsaKmtRegisterSharedHandle(const HsaSharedMemoryHandle* h, void** a,
                                                HSAuint64* s) {
    (void)h; (void)a; (void)s;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}
EXPORT HSAKMT_STATUS hsaKmtRegisterSharedHandleToNodes(const HsaSharedMemoryHandle* h, void** a,
                                                       HSAuint64* s, HSAuint64 n, HSAuint32* nodes) {
    (void)h; (void)a; (void)s; (void)n; (void)nodes;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}
EXPORT HSAKMT_STATUS hsaKmtRegisterGraphicsHandleToNodes(HSAuint64 h, HsaGraphicsResourceInfo* i,
                                                         HSAuint64 n, HSAuint32* nodes) {
    (void)h; (void)i; (void)n; (void)nodes;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}
EXPORT HSAKMT_STATUS hsaKmtSVMSetAttr(void* a, HSAuint64 s, unsigned int n, HSA_SVM_ATTRIBUTE* at) {
    (void)a; (void)s; (void)n; (void)at;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}
EXPORT HSAKMT_STATUS hsaKmtSVMGetAttr(void* a, HSAuint64 s, unsigned int n, HSA_SVM_ATTRIBUTE* at) {
    (void)a; (void)s; (void)n; (void)at;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}
EXPORT HSAKMT_STATUS hsaKmtAllocQueueGWS(HSA_QUEUEID q, HSAuint32 n, HSAuint32* first) {
    (void)q; (void)n; (void)first;
    return HSAKMT_STATUS_NOT_SUPPORTED;
}

/* --- events -------------------------------------------------------------------------- */
EXPORT HSAKMT_STATUS hsaKmtCreateEvent(HsaEventDescriptor* desc, bool manual_reset,
                                       bool signaled, HsaEvent** out) {
    CHECK_OPEN();
    if (!desc || !out) return HSAKMT_STATUS_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    int id = 1; /* 0 is no event */
    while (id < MAX_EVENTS && events[id].live) id++;
    if (id == MAX_EVENTS) {
        pthread_mutex_unlock(&lock);
        return HSAKMT_STATUS_OUT_OF_RESOURCES;
    }
    struct event* e = &events[id];
    memset(e, 0, sizeof *e);
    e->live = 1;
    e->manual_reset = manual_reset;
    e->signaled = signaled;
    e->pub.EventId = (HSA_EVENTID)id;
    e->pub.EventData.EventType = desc->EventType;
    e->pub.EventData.HWData1 = (HSAuint64)id;
    e->pub.EventData.HWData2 = (HSAuint64)(uintptr_t)&mailboxes[id];
    e->pub.EventData.HWData3 = (HSAuint64)id;
    mailboxes[id] = 0;
    *out = &e->pub;
    pthread_mutex_unlock(&lock);
    return HSAKMT_STATUS_SUCCESS;
}

static struct event* event_of(HsaEvent* ev) {
    if (!ev) return NULL;
    struct event* e = (struct event*)ev;
    if (e < events + 1 || e >= events + MAX_EVENTS || !e->live) return NULL;
    return e;
}

EXPORT HSAKMT_STATUS hsaKmtDestroyEvent(HsaEvent* ev) {
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct event* e = event_of(ev);
    if (e) {
        e->live = 0;
        e->generation++; /* waiters (there should be none) return */
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return e ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_HANDLE;
}

EXPORT HSAKMT_STATUS hsaKmtSetEvent(HsaEvent* ev) {
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct event* e = event_of(ev);
    if (e) set_event_locked(e);
    pthread_mutex_unlock(&lock);
    return e ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_HANDLE;
}

EXPORT HSAKMT_STATUS hsaKmtResetEvent(HsaEvent* ev) {
    CHECK_OPEN();
    pthread_mutex_lock(&lock);
    struct event* e = event_of(ev);
    if (e) e->signaled = 0;
    pthread_mutex_unlock(&lock);
    return e ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_HANDLE;
}

EXPORT HSAKMT_STATUS hsaKmtQueryEventState(HsaEvent* ev) {
    CHECK_OPEN();
    return event_of(ev) ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_HANDLE;
}

static void fill_fault(struct event* e) {
    if (e->pub.EventData.EventType == HSA_EVENTTYPE_MEMORY && have_fault) {
        e->pub.EventData.EventData.MemoryAccessFault = pending_fault;
        have_fault = 0;
    }
}

EXPORT HSAKMT_STATUS hsaKmtWaitOnMultipleEvents(HsaEvent* evs[], HSAuint32 n, bool all,
                                                HSAuint32 ms) {
    CHECK_OPEN();
    if (!evs || n == 0 || n > 64) return HSAKMT_STATUS_INVALID_PARAMETER;
    struct event* es[64];
    uint64_t gen[64];
    int done[64];
    pthread_mutex_lock(&lock);
    for (HSAuint32 i = 0; i < n; i++) {
        es[i] = event_of(evs[i]);
        if (!es[i]) {
            pthread_mutex_unlock(&lock);
            return HSAKMT_STATUS_INVALID_HANDLE;
        }
        gen[i] = es[i]->generation;
        done[i] = 0;
    }
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    HSAKMT_STATUS st = HSAKMT_STATUS_WAIT_TIMEOUT;
    for (HSAuint32 i = 0; i < n; i++) es[i]->waiters++;
    for (;;) {
        int count = 0;
        for (HSAuint32 i = 0; i < n; i++) {
            if (!done[i] && (es[i]->signaled || es[i]->generation != gen[i] || !es[i]->live)) {
                done[i] = 1;
                if (!es[i]->manual_reset) es[i]->signaled = 0;
                fill_fault(es[i]);
            }
            count += done[i];
        }
        if (all ? count == (int)n : count > 0) {
            st = HSAKMT_STATUS_SUCCESS;
            break;
        }
        uint64_t elapsed_ms = (now_ns(CLOCK_MONOTONIC) - start) / 1000000ull;
        if (ms != HSA_EVENTTIMEOUT_INFINITE && elapsed_ms >= ms) break;
        uint64_t slice = ms == HSA_EVENTTIMEOUT_INFINITE ? 100 : ms - elapsed_ms;
        if (slice > 100) slice = 100;
        struct timespec dl = deadline_after_ms(slice ? slice : 1);
        pthread_cond_timedwait(&changed, &lock, &dl);
    }
    for (HSAuint32 i = 0; i < n; i++) es[i]->waiters--;
    pthread_mutex_unlock(&lock);
    return st;
}

EXPORT HSAKMT_STATUS hsaKmtWaitOnEvent(HsaEvent* ev, HSAuint32 ms) {
    return hsaKmtWaitOnMultipleEvents(&ev, 1, true, ms);
}

/* --- queues -------------------------------------------------------------------------- */
EXPORT HSAKMT_STATUS hsaKmtCreateQueue(HSAuint32 node, HSA_QUEUE_TYPE type, HSAuint32 pct,
                                       HSA_QUEUE_PRIORITY prio, void* ring, HSAuint64 bytes,
                                       HsaEvent* ev, HsaQueueResource* res) {
    (void)pct; (void)prio; (void)ev;
    CHECK_OPEN();
    if (!IS_GPU(node)) return HSAKMT_STATUS_INVALID_NODE_UNIT;
    if (!res || !ring || !bytes) return HSAKMT_STATUS_INVALID_PARAMETER;
    if (type != HSA_QUEUE_COMPUTE_AQL) return HSAKMT_STATUS_NOT_SUPPORTED; /* SDMA: HSA_ENABLE_SDMA=0 */
    if (!res->Queue_read_ptr_aql || !res->Queue_write_ptr_aql) return HSAKMT_STATUS_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    int id = 0;
    while (id < MAX_QUEUES && queues[id].live) id++;
    if (id == MAX_QUEUES) {
        pthread_mutex_unlock(&lock);
        return HSAKMT_STATUS_OUT_OF_RESOURCES;
    }
    struct queue* q = &queues[id];
    memset(q, 0, sizeof *q);
    q->live = 1;
    q->type = type;
    q->node = node;
    q->ring = ring;
    q->ring_bytes = bytes;
    q->read_ptr = res->Queue_read_ptr_aql;
    q->write_ptr = res->Queue_write_ptr_aql;
    q->last_bell = -1;
    __atomic_store_n(&doorbells[id], (uint64_t)-1, __ATOMIC_RELEASE);
    res->QueueId = (HSA_QUEUEID)id;
    res->Queue_DoorBell_aql = &doorbells[id];
    res->ErrorReason = NULL;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    return HSAKMT_STATUS_SUCCESS;
}

EXPORT HSAKMT_STATUS hsaKmtUpdateQueue(HSA_QUEUEID id, HSAuint32 pct, HSA_QUEUE_PRIORITY prio,
                                       void* ring, HSAuint64 bytes, HsaEvent* ev) {
    (void)pct; (void)prio; (void)ring; (void)bytes; (void)ev;
    CHECK_OPEN();
    return id < MAX_QUEUES && queues[id].live ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_PARAMETER;
}

EXPORT HSAKMT_STATUS hsaKmtSetQueueCUMask(HSA_QUEUEID id, HSAuint32 n, HSAuint32* mask) {
    (void)n; (void)mask;
    CHECK_OPEN();
    return id < MAX_QUEUES && queues[id].live ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_PARAMETER;
}

EXPORT HSAKMT_STATUS hsaKmtDestroyQueue(HSA_QUEUEID id) {
    CHECK_OPEN();
    if (id >= MAX_QUEUES) return HSAKMT_STATUS_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    struct queue* q = &queues[id];
    if (!q->live) {
        pthread_mutex_unlock(&lock);
        return HSAKMT_STATUS_INVALID_PARAMETER;
    }
    q->dying = 1;
    pthread_cond_broadcast(&changed);
    /* The device side stops reading the ring before ROCr frees it: wait (bounded) for its
     * hsakmt_emu_detach(). A queue the device never attached to has nothing to wait for. */
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    uint64_t limit_ns = env_ull("AMDGPU_EMULATED_DETACH_MS", 5000) * 1000000ull;
    while (q->attached && now_ns(CLOCK_MONOTONIC) - start < limit_ns) {
        struct timespec dl = deadline_after_ms(50);
        pthread_cond_timedwait(&changed, &lock, &dl);
    }
    if (q->attached)
        fprintf(stderr, "libhsakmt (emulated): queue %d destroyed while the device side still "
                        "ran it (no detach in time)\n", (int)id);
    q->live = 0;
    q->dying = 0;
    q->attached = 0;
    pthread_mutex_unlock(&lock);
    return HSAKMT_STATUS_SUCCESS;
}

/* --- the device side's API (hsa/emulated/driver.py) ------------------------------------ */
struct hsakmt_emu_note {
    uint64_t queue_id;
    uint64_t kind; /* 1: new queue, 2: doorbell (value), 3: queue being destroyed */
    int64_t value;
    uint64_t ring, ring_bytes, read_ptr, write_ptr;
    uint64_t node; /* new queue: its GPU node */
};

/* Wait up to timeout_ms for something the device side must act on: new queues, doorbell
 * writes (a 64-bit store of the last packet id), queues being destroyed. The loop polls
 * the doorbell page, yielding the CPU for the first 50 us and then with a growing sleep
 * (20 us to 1 ms) that queue creation and destruction cut short; it runs in C so that the Python device thread is off the GIL
 * while it waits. Returns how many notes were written to out[0..max). */
EXPORT int hsakmt_emu_poll(struct hsakmt_emu_note* out, int max, uint32_t timeout_ms) {
    uint64_t start = now_ns(CLOCK_MONOTONIC), sleep_us = 20;
    pthread_mutex_lock(&lock);
    for (;;) {
        int n = 0;
        for (int id = 0; id < MAX_QUEUES && n < max; id++) {
            struct queue* q = &queues[id];
            if (!q->live) continue;
            if (q->dying) {
                if (q->attached) {
                    out[n++] = (struct hsakmt_emu_note){(uint64_t)id, 3, 0, 0, 0, 0, 0, 0};
                }
                continue;
            }
            if (!q->attached) {
                q->attached = 1;
                out[n++] = (struct hsakmt_emu_note){(uint64_t)id, 1, 0, (uint64_t)(uintptr_t)q->ring,
                                                    q->ring_bytes, (uint64_t)(uintptr_t)q->read_ptr,
                                                    (uint64_t)(uintptr_t)q->write_ptr, q->node};
                if (n == max) break;
            }
            int64_t bell = (int64_t)__atomic_load_n(&doorbells[id], __ATOMIC_ACQUIRE);
            if (bell != q->last_bell) {
                q->last_bell = bell;
                out[n++] = (struct hsakmt_emu_note){(uint64_t)id, 2, bell, 0, 0, 0, 0, 0};
            }
        }
        if (n) {
            pthread_mutex_unlock(&lock);
            return n;
        }
        uint64_t elapsed_us = (now_ns(CLOCK_MONOTONIC) - start) / 1000;
        if (elapsed_us >= (uint64_t)timeout_ms * 1000) break;
        if (elapsed_us < 50) { /* a doorbell right after the last one: yield, do not sleep */
            pthread_mutex_unlock(&lock);
            sched_yield();
            pthread_mutex_lock(&lock);
            continue;
        }
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += (long)sleep_us * 1000;
        while (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&changed, &lock, &dl);
        if (sleep_us < 1000) sleep_us *= 2;
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Turn the emulated driver on or off for the next OpenKFD (ROCr's next first hsa_init). */
EXPORT void hsakmt_emu_enable(int on) {
    pthread_mutex_lock(&lock);
    enabled = on != 0;
    device_side = 1; /* only our Python driver calls this */
    pthread_mutex_unlock(&lock);
}

/* The device side has stopped reading queue `id` (after a note of kind 3). */
EXPORT void hsakmt_emu_detach(uint64_t id) {
    if (id >= MAX_QUEUES) return;
    pthread_mutex_lock(&lock);
    queues[id].attached = 0;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* The CP's end-of-packet interrupt for a signal's event: write the event id into the
 * mailbox (done by the caller, as the CP does) and wake the event. */
EXPORT int hsakmt_emu_interrupt(uint32_t event_id) {
    if (event_id == 0 || event_id >= MAX_EVENTS) return -1;
    pthread_mutex_lock(&lock);
    int ok = events[event_id].live;
    if (ok) set_event_locked(&events[event_id]);
    pthread_mutex_unlock(&lock);
    return ok ? 0 : -1;
}

/* A GPU memory fault: fills the next HSA_EVENTTYPE_MEMORY wait's fault data and fires every
 * live memory event (ROCr's VM-fault handler thread waits on one). */
EXPORT int hsakmt_emu_memory_fault(uint64_t address, uint32_t write, uint32_t node) {
    pthread_mutex_lock(&lock);
    memset(&pending_fault, 0, sizeof pending_fault);
    pending_fault.NodeId = IS_GPU(node) ? node : GPU_NODE; /* the faulting queue's GPU */
    pending_fault.VirtualAddress = address;
    pending_fault.Failure.NotPresent = 1;
    pending_fault.Failure.ReadOnly = write ? 1 : 0;
    /* fatal to the process's GPU context, as KFD reports a GPU page fault: ROCr's wait on
     * its VM-fault signal returns for this flag and its handler reads the data from the
     * HsaEvent itself */
    pending_fault.Flags = HSA_EVENTID_MEMORY_FATAL_PROCESS;
    have_fault = 1;
    int fired = 0;
    for (int i = 1; i < MAX_EVENTS; i++)
        if (events[i].live && events[i].pub.EventData.EventType == HSA_EVENTTYPE_MEMORY) {
            events[i].pub.EventData.EventData.MemoryAccessFault = pending_fault;
            set_event_locked(&events[i]);
            fired++;
        }
    pthread_mutex_unlock(&lock);
    return fired;
}

/* The allocation holding `address`: its base, size, node and the mask of GPU nodes it is
 * mapped to; 0 when none. `generation` changes whenever an allocation is freed or its
 * mapping changes, so the device side knows when to forget cached ones. */
EXPORT int hsakmt_emu_find(uint64_t address, uint64_t* base, uint64_t* size, uint32_t* node,
                           uint32_t* mapped) {
    pthread_mutex_lock(&lock);
    struct alloc* x = find_alloc((const void*)(uintptr_t)address);
    if (x) {
        *base = (uint64_t)(uintptr_t)x->addr;
        *size = x->size;
        *node = x->node;
        if (mapped) *mapped = x->mapped;
    }
    pthread_mutex_unlock(&lock);
    return x != NULL;
}

EXPORT uint64_t hsakmt_emu_generation(void) { return atomic_load(&alloc_generation); }

/* How many GPU nodes the emulated driver exposes now (0 before the first OpenKFD). */
EXPORT uint32_t hsakmt_emu_gpu_count(void) { return opened ? cfg.gpus : 0; }

EXPORT int64_t hsakmt_emu_atomic_add(int64_t* address, int64_t delta) {
    return __atomic_fetch_add(address, delta, __ATOMIC_ACQ_REL);
}

EXPORT int64_t hsakmt_emu_load(int64_t* address) { return __atomic_load_n(address, __ATOMIC_ACQUIRE); }

EXPORT void hsakmt_emu_store(int64_t* address, int64_t value) {
    __atomic_store_n(address, value, __ATOMIC_RELEASE);
}

/* The emulated driver's identity, for "is the loaded libhsakmt this one?" checks. */
EXPORT const char* hsakmt_emu_identity(void) { return "amdgpu-direct emulated libhsakmt 2"; }
