/*
 * A stand-in libhsa-runtime64 for testing hsa.rocr's ctypes bindings without a GPU.
 *
 * Every function is defined against the installed ROCr headers (<hsa/hsa.h>, ...), so gcc
 * checks that each definition matches the real prototype; the Python side then calls it
 * through its own argtypes, and the tests check that values make the round trip intact.
 * It models: two agents (a CPU with a kernarg pool, a gfx1100 GPU with a coarse pool),
 * amd_signal_t signals, AQL queues with a packet-processor thread (barrier-AND/OR,
 * BARRIER_VALUE, kernel dispatch "executed" as a no-op, errors through the queue callback),
 * code object readers that keep pointing at the caller's memory until the loader copies it
 * (as ROCr does), and executables whose symbols are found by name in those copies.
 *
 * Built by tests/test_rocr_mock.py in full and with -DMOCK_MINIMAL, which leaves out the
 * optional hsa_amd_* functions so the capability reporting can be checked; the full build
 * also runs the provider-conformance suite (tests/test_rocr_conformance.py).
 * Environment (read at hsa_init): MOCK_HSA_INIT_STATUS=<n> makes hsa_init fail with n;
 * MOCK_HSA_NO_GPU=1 hides the GPU agent; MOCK_HSA_AIE=1 adds an agent of device type 3;
 * MOCK_HSA_GPU=<target id> (default gfx1100) names the GPU's ISA.
 */
#define _GNU_SOURCE
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/amd_hsa_queue.h>
#include <hsa/amd_hsa_signal.h>

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CPU_AGENT 0xC0000001ull
#define GPU_AGENT 0x60000001ull
#define KERNARG_POOL 0x900000C1ull
#define GPU_POOL 0x90000061ull
#define GPU_ISA 0x15A00001ull
#define AIE_AGENT 0xA1E00001ull /* device type 3 (AIE in ROCr 6.4+), unknown to hsa.h 5.2 */
#define FAULT_KERNEL_OBJECT 0xFA017000ull /* a dispatch of this "kernel" faults */
#define MAX_WAIT_SLICE_NS 2000000ull      /* waits return early, as ROCr's may */

static int g_init_count;
static int g_no_gpu;
static int g_aie;
static char g_isa_name[128] = "amdgcn-amd-amdhsa--gfx1100";
static char g_gpu_name[64] = "gfx1100";
static long g_live_signals, g_live_queues, g_live_allocs, g_live_readers, g_live_execs;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_next_queue_id;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap(void) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* Test hooks (not part of HSA). */
long mock_live(int kind) {
  switch (kind) {
    case 0: return g_init_count;
    case 1: return g_live_signals;
    case 2: return g_live_queues;
    case 3: return g_live_allocs;
    case 4: return g_live_readers;
    case 5: return g_live_execs;
    default: return -1;
  }
}

static bool agent_ok(hsa_agent_t a) {
  return a.handle == CPU_AGENT || (a.handle == GPU_AGENT && !g_no_gpu) ||
         (a.handle == AIE_AGENT && g_aie);
}

hsa_status_t hsa_status_string(hsa_status_t status, const char** text) {
  if (!text) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch ((int)status) {
    case HSA_STATUS_SUCCESS: *text = "HSA_STATUS_SUCCESS: mock success"; break;
    case HSA_STATUS_ERROR_INVALID_ARGUMENT: *text = "HSA_STATUS_ERROR_INVALID_ARGUMENT: mock"; break;
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES: *text = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: mock"; break;
    case HSA_STATUS_ERROR_INVALID_AGENT: *text = "HSA_STATUS_ERROR_INVALID_AGENT: mock"; break;
    case HSA_STATUS_ERROR_INVALID_QUEUE: *text = "HSA_STATUS_ERROR_INVALID_QUEUE: mock"; break;
    case HSA_STATUS_ERROR_INVALID_SIGNAL: *text = "HSA_STATUS_ERROR_INVALID_SIGNAL: mock"; break;
    case HSA_STATUS_ERROR_INVALID_PACKET_FORMAT:
      *text = "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: mock"; break;
    case HSA_STATUS_ERROR_INVALID_CODE_OBJECT:
      *text = "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: mock"; break;
    case HSA_STATUS_ERROR_INVALID_SYMBOL_NAME:
      *text = "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: mock"; break;
    case HSA_STATUS_ERROR_FROZEN_EXECUTABLE:
      *text = "HSA_STATUS_ERROR_FROZEN_EXECUTABLE: mock"; break;
    case HSA_STATUS_ERROR_NOT_INITIALIZED: *text = "HSA_STATUS_ERROR_NOT_INITIALIZED: mock"; break;
    case HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION:
      *text = "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: mock fault"; break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_init(void) {
  const char* forced = getenv("MOCK_HSA_INIT_STATUS");
  if (forced && *forced) return (hsa_status_t)strtol(forced, NULL, 0);
  const char* no_gpu = getenv("MOCK_HSA_NO_GPU");
  g_no_gpu = no_gpu && *no_gpu == '1';
  const char* aie = getenv("MOCK_HSA_AIE");
  g_aie = aie && *aie == '1';
  const char* gpu = getenv("MOCK_HSA_GPU");
  if (!gpu || !*gpu) gpu = "gfx1100";
  snprintf(g_isa_name, sizeof(g_isa_name), "amdgcn-amd-amdhsa--%s", gpu);
  snprintf(g_gpu_name, sizeof(g_gpu_name), "%.*s", (int)strcspn(gpu, ":"), gpu);
  __atomic_add_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST);
  return HSA_STATUS_SUCCESS;
}

static int g_event_count;

hsa_status_t hsa_shut_down(void) {
  if (g_init_count <= 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  /* As ROCr: the last shut-down forgets the system event handlers. */
  if (__atomic_sub_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST) == 0) g_event_count = 0;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void* value) {
  if (g_init_count <= 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  switch ((int)attribute) {
    case HSA_SYSTEM_INFO_VERSION_MAJOR: *(uint16_t*)value = 1; break;
    case HSA_SYSTEM_INFO_VERSION_MINOR: *(uint16_t*)value = 1; break;
    case HSA_SYSTEM_INFO_TIMESTAMP: *(uint64_t*)value = now_ns(); break;
    case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: *(uint64_t*)value = 1000000000ull; break;
    case HSA_AMD_SYSTEM_INFO_BUILD_VERSION: *(const char**)value = "mock-rocr"; break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* Calls `cb` with each handle wrapped in the callback's own struct type (the real ABI). */
#define WALK(type, handles, n, cb, data)                            \
  do {                                                              \
    for (int i_ = 0; i_ < (n); i_++) {                              \
      type h_ = {(handles)[i_]};                                    \
      hsa_status_t s_ = (cb)(h_, (data));                           \
      if (s_ == HSA_STATUS_INFO_BREAK) return HSA_STATUS_SUCCESS;   \
      if (s_ != HSA_STATUS_SUCCESS) return s_;                      \
    }                                                               \
    return HSA_STATUS_SUCCESS;                                      \
  } while (0)

hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void* data),
                                void* data) {
  if (g_init_count <= 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint64_t agents[3] = {CPU_AGENT, GPU_AGENT, AIE_AGENT};
  int n = 0;
  uint64_t present[3];
  for (int i = 0; i < 3; i++)
    if (agent_ok((hsa_agent_t){agents[i]})) present[n++] = agents[i];
  WALK(hsa_agent_t, present, n, callback, data);
}

static void put_text(void* value, const char* text) {
  memset(value, 0, 64);
  strncpy((char*)value, text, 63);
}

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void* value) {
  if (!agent_ok(agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  bool gpu = agent.handle == GPU_AGENT;
  if (agent.handle == AIE_AGENT) {
    if (attribute != HSA_AGENT_INFO_DEVICE) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    *(uint32_t*)value = 3;
    return HSA_STATUS_SUCCESS;
  }
  switch ((int)attribute) {
    case HSA_AGENT_INFO_NAME: put_text(value, gpu ? g_gpu_name : "Mock CPU"); break;
    case HSA_AGENT_INFO_VENDOR_NAME: put_text(value, gpu ? "AMD" : "CPU"); break;
    case HSA_AGENT_INFO_DEVICE:
      *(hsa_device_type_t*)value = gpu ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU; break;
    case HSA_AGENT_INFO_WAVEFRONT_SIZE: *(uint32_t*)value = gpu ? 32 : 0; break;
    case HSA_AGENT_INFO_QUEUE_MIN_SIZE: *(uint32_t*)value = gpu ? 64 : 0; break;
    case HSA_AGENT_INFO_QUEUE_MAX_SIZE: *(uint32_t*)value = gpu ? 131072 : 0; break;
    case HSA_AGENT_INFO_NODE: *(uint32_t*)value = gpu ? 1 : 0; break;
    case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: *(uint32_t*)value = gpu ? 48 : 16; break;
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME:
      put_text(value, gpu ? "Mock Radeon RX 7900" : "Mock CPU 16-Core Processor"); break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent,
                                    hsa_status_t (*callback)(hsa_isa_t isa, void* data),
                                    void* data) {
  if (!agent_ok(agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  uint64_t isas[1] = {GPU_ISA};
  WALK(hsa_isa_t, isas, agent.handle == GPU_AGENT ? 1 : 0, callback, data);
}

hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, hsa_isa_info_t attribute, void* value) {
  if (isa.handle != GPU_ISA) return HSA_STATUS_ERROR_INVALID_ISA;
  if (attribute == HSA_ISA_INFO_NAME_LENGTH) {
    *(uint32_t*)value = (uint32_t)strlen(g_isa_name) + 1;
  } else if (attribute == HSA_ISA_INFO_NAME) {
    memcpy(value, g_isa_name, strlen(g_isa_name) + 1);
  } else {
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* --- memory ------------------------------------------------------------------------------ */
#define MAX_ALLOCS 256
static struct { void* ptr; size_t size; int access; } g_allocs[MAX_ALLOCS];

hsa_status_t hsa_amd_agent_iterate_memory_pools(
    hsa_agent_t agent, hsa_status_t (*callback)(hsa_amd_memory_pool_t pool, void* data),
    void* data) {
  if (!agent_ok(agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  uint64_t pool[1] = {agent.handle == GPU_AGENT ? GPU_POOL : KERNARG_POOL};
  WALK(hsa_amd_memory_pool_t, pool, 1, callback, data);
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool,
                                          hsa_amd_memory_pool_info_t attribute, void* value) {
  if (pool.handle != GPU_POOL && pool.handle != KERNARG_POOL)
    return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
  bool kernarg = pool.handle == KERNARG_POOL;
  switch ((int)attribute) {
    case HSA_AMD_MEMORY_POOL_INFO_SEGMENT: *(uint32_t*)value = HSA_AMD_SEGMENT_GLOBAL; break;
    case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
      *(uint32_t*)value = kernarg ? (HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT |
                                     HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
                                  : HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
      break;
    case HSA_AMD_MEMORY_POOL_INFO_SIZE: *(size_t*)value = kernarg ? (1ull << 34) : (24ull << 30);
      break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: *(bool*)value = true; break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE: *(size_t*)value = 4096; break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: *(size_t*)value = 65536; break;
    case HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: *(bool*)value = kernarg; break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size,
                                          uint32_t flags, void** ptr) {
  if (pool.handle != GPU_POOL && pool.handle != KERNARG_POOL)
    return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
  if (size == 0 || flags != 0 || !ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (size > (1ull << 34)) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  size_t rounded = (size + 4095) & ~(size_t)4095;
  void* p = aligned_alloc(65536, rounded);
  if (!p) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  memset(p, 0, rounded);
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MAX_ALLOCS; i++) {
    if (!g_allocs[i].ptr) {
      g_allocs[i].ptr = p;
      g_allocs[i].size = rounded;
      g_allocs[i].access = 0;
      g_live_allocs++;
      pthread_mutex_unlock(&g_lock);
      *ptr = p;
      return HSA_STATUS_SUCCESS;
    }
  }
  pthread_mutex_unlock(&g_lock);
  free(p);
  return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
}

static int find_alloc(const void* p) {
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (g_allocs[i].ptr && (const char*)p >= (char*)g_allocs[i].ptr &&
        (const char*)p < (char*)g_allocs[i].ptr + g_allocs[i].size)
      return i;
  return -1;
}

hsa_status_t hsa_amd_memory_pool_free(void* ptr) {
  pthread_mutex_lock(&g_lock);
  int i = find_alloc(ptr);
  if (i < 0 || g_allocs[i].ptr != ptr) {
    pthread_mutex_unlock(&g_lock);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  g_allocs[i].ptr = NULL;
  g_live_allocs--;
  pthread_mutex_unlock(&g_lock);
  free(ptr);
  return HSA_STATUS_SUCCESS;
}

/* Test hook: how many agents were given access to the allocation at p (-1: unknown). */
int mock_access_count(const void* p) {
  int i = find_alloc(p);
  return i < 0 ? -1 : g_allocs[i].access;
}

hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t* agents,
                                         const uint32_t* flags, const void* ptr) {
  if (num_agents == 0 || !agents || flags) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < num_agents; i++)
    if (!agent_ok(agents[i])) return HSA_STATUS_ERROR_INVALID_AGENT;
  int i = find_alloc(ptr);
  if (i < 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  g_allocs[i].access += (int)num_agents;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_memory_copy(void* dst, const void* src, size_t size) {
  if (!dst || !src) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  memmove(dst, src, size);
  return HSA_STATUS_SUCCESS;
}

/* --- signals ----------------------------------------------------------------------------- */
static amd_signal_t* sig(hsa_signal_t s) { return (amd_signal_t*)(uintptr_t)s.handle; }

static bool holds(hsa_signal_condition_t c, int64_t v, int64_t cmp) {
  switch (c) {
    case HSA_SIGNAL_CONDITION_EQ: return v == cmp;
    case HSA_SIGNAL_CONDITION_NE: return v != cmp;
    case HSA_SIGNAL_CONDITION_LT: return v < cmp;
    case HSA_SIGNAL_CONDITION_GTE: return v >= cmp;
  }
  return false;
}

hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                               const hsa_agent_t* consumers, hsa_signal_t* signal) {
  if (!signal || (num_consumers && !consumers)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  amd_signal_t* s = aligned_alloc(64, sizeof(amd_signal_t));
  if (!s) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  memset(s, 0, sizeof(*s));
  s->kind = AMD_SIGNAL_KIND_USER;
  s->value = initial_value;
  __atomic_add_fetch(&g_live_signals, 1, __ATOMIC_SEQ_CST);
  signal->handle = (uint64_t)(uintptr_t)s;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t signal) {
  amd_signal_t* s = sig(signal);
  if (!s) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (s->kind != AMD_SIGNAL_KIND_USER) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  s->kind = AMD_SIGNAL_KIND_INVALID;
  free(s);
  __atomic_sub_fetch(&g_live_signals, 1, __ATOMIC_SEQ_CST);
  return HSA_STATUS_SUCCESS;
}

hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal) {
  return __atomic_load_n(&sig(signal)->value, __ATOMIC_SEQ_CST);
}

typedef struct mock_queue mock_queue_t;
static void ring_doorbell(mock_queue_t* q);

void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value) {
  amd_signal_t* s = sig(signal);
  __atomic_store_n(&s->value, value, __ATOMIC_SEQ_CST);
  if (s->kind == AMD_SIGNAL_KIND_DOORBELL) ring_doorbell((mock_queue_t*)s->queue_ptr);
}

void hsa_signal_add_scacq_screl(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_add_fetch(&sig(signal)->value, value, __ATOMIC_SEQ_CST);
}

void hsa_signal_subtract_scacq_screl(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_sub_fetch(&sig(signal)->value, value, __ATOMIC_SEQ_CST);
}

hsa_signal_value_t hsa_signal_exchange_scacq_screl(hsa_signal_t signal,
                                                   hsa_signal_value_t value) {
  return __atomic_exchange_n(&sig(signal)->value, value, __ATOMIC_SEQ_CST);
}

hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal,
                                             hsa_signal_condition_t condition,
                                             hsa_signal_value_t compare_value,
                                             uint64_t timeout_hint,
                                             hsa_wait_state_t wait_state_hint) {
  (void)wait_state_hint;
  uint64_t limit = timeout_hint < MAX_WAIT_SLICE_NS ? timeout_hint : MAX_WAIT_SLICE_NS;
  uint64_t start = now_ns();
  for (;;) {
    int64_t v = __atomic_load_n(&sig(signal)->value, __ATOMIC_SEQ_CST);
    if (holds(condition, v, compare_value) || now_ns() - start >= limit) return v;
    nap();
  }
}

#ifndef MOCK_MINIMAL
uint32_t hsa_amd_signal_wait_any(uint32_t signal_count, hsa_signal_t* signals,
                                 hsa_signal_condition_t* conds, hsa_signal_value_t* values,
                                 uint64_t timeout_hint, hsa_wait_state_t wait_hint,
                                 hsa_signal_value_t* satisfying_value) {
  (void)wait_hint;
  uint64_t limit = timeout_hint < MAX_WAIT_SLICE_NS ? timeout_hint : MAX_WAIT_SLICE_NS;
  uint64_t start = now_ns();
  for (;;) {
    for (uint32_t i = 0; i < signal_count; i++) {
      int64_t v = __atomic_load_n(&sig(signals[i])->value, __ATOMIC_SEQ_CST);
      if (holds(conds[i], v, values[i])) {
        if (satisfying_value) *satisfying_value = v;
        return i;
      }
    }
    if (now_ns() - start >= limit) return UINT32_MAX;
    nap();
  }
}

typedef struct {
  void* dst;
  const void* src;
  size_t size;
  uint32_t ndeps;
  uint64_t deps[8];
  uint64_t completion;
} mock_copy_t;

/* Runs a copy on its own thread, as the SDMA engine would: wait, copy, signal. */
static void* copy_engine(void* arg) {
  mock_copy_t* c = arg;
  for (uint32_t i = 0; i < c->ndeps; i++)
    while (__atomic_load_n(&((amd_signal_t*)(uintptr_t)c->deps[i])->value, __ATOMIC_SEQ_CST))
      nap();
  memmove(c->dst, c->src, c->size);
  __atomic_sub_fetch(&((amd_signal_t*)(uintptr_t)c->completion)->value, 1, __ATOMIC_SEQ_CST);
  free(c);
  return NULL;
}

hsa_status_t hsa_amd_memory_async_copy(void* dst, hsa_agent_t dst_agent, const void* src,
                                       hsa_agent_t src_agent, size_t size,
                                       uint32_t num_dep_signals,
                                       const hsa_signal_t* dep_signals,
                                       hsa_signal_t completion_signal) {
  if (!agent_ok(dst_agent) || !agent_ok(src_agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!dst || !src || (num_dep_signals && !dep_signals) || !completion_signal.handle ||
      num_dep_signals > 8)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  mock_copy_t* c = malloc(sizeof(*c));
  if (!c) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  c->dst = dst;
  c->src = src;
  c->size = size;
  c->ndeps = num_dep_signals;
  for (uint32_t i = 0; i < num_dep_signals; i++) c->deps[i] = dep_signals[i].handle;
  c->completion = completion_signal.handle;
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&thread, &attr, copy_engine, c);
  pthread_attr_destroy(&attr);
  if (rc) {
    free(c);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_fill(void* ptr, uint32_t value, size_t count) {
  if (!ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < count; i++) ((uint32_t*)ptr)[i] = value;
  return HSA_STATUS_SUCCESS;
}
#endif

/* --- system events ----------------------------------------------------------------------- */
static hsa_amd_system_event_callback_t g_event_cb[8];
static void* g_event_data[8];

#ifndef MOCK_MINIMAL
hsa_status_t hsa_amd_register_system_event_handler(hsa_amd_system_event_callback_t callback,
                                                   void* data) {
  if (!callback || g_event_count >= 8) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  g_event_cb[g_event_count] = callback;
  g_event_data[g_event_count] = data;
  g_event_count++;
  return HSA_STATUS_SUCCESS;
}
#endif

/* --- queues ------------------------------------------------------------------------------ */
struct mock_queue {
  amd_queue_t amd; /* first: the hsa_queue_t* handed out is &amd */
  void (*callback)(hsa_status_t, hsa_queue_t*, void*);
  void* data;
  amd_signal_t* doorbell;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  int broken;
  int profiling;
  long dispatches;
  mock_queue_t* next;
};
static mock_queue_t* g_queues;

static void ring_doorbell(mock_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* Test hook: kernel dispatches processed by the queue at `queue`. */
long mock_dispatch_count(const hsa_queue_t* queue) { return ((mock_queue_t*)queue)->dispatches; }

static bool stopping(mock_queue_t* q) { return __atomic_load_n(&q->stop, __ATOMIC_SEQ_CST); }

static bool wait_signal(mock_queue_t* q, uint64_t handle, hsa_signal_condition_t c, int64_t v,
                        int64_t mask) {
  while (!stopping(q)) {
    int64_t value = __atomic_load_n(&((amd_signal_t*)(uintptr_t)handle)->value, __ATOMIC_SEQ_CST);
    if (holds(c, value & mask, v)) return true;
    nap();
  }
  return false;
}

static void fail_queue(mock_queue_t* q, hsa_status_t status, uint64_t address) {
  q->broken = 1;
  if (address) {
    hsa_amd_event_t event;
    memset(&event, 0, sizeof(event));
    event.event_type = HSA_AMD_GPU_MEMORY_FAULT_EVENT;
    event.memory_fault.agent.handle = GPU_AGENT;
    event.memory_fault.virtual_address = address;
    event.memory_fault.fault_reason_mask = HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT;
    for (int i = 0; i < g_event_count; i++) g_event_cb[i](&event, g_event_data[i]);
  }
  if (q->callback) q->callback(status, &q->amd.hsa_queue, q->data);
}

static void complete(mock_queue_t* q, uint64_t signal, uint64_t start) {
  if (!signal) return;
  amd_signal_t* s = (amd_signal_t*)(uintptr_t)signal;
  if (q->profiling) {
    s->start_ts = start;
    s->end_ts = now_ns();
  }
  __atomic_sub_fetch(&s->value, 1, __ATOMIC_SEQ_CST);
}

/* Process one packet; false when the queue is stopping or broken. */
static bool process(mock_queue_t* q, uint8_t* slot) {
  uint16_t header = *(uint16_t*)slot;
  uint8_t type = header & 0xff;
  uint64_t completion = *(uint64_t*)(slot + 56);
  uint64_t start = now_ns();
  if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH) {
    uint64_t kernel_object = *(uint64_t*)(slot + 32);
    if (kernel_object == FAULT_KERNEL_OBJECT) {
      fail_queue(q, (hsa_status_t)HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, *(uint64_t*)(slot + 40));
      return false;
    }
    q->dispatches++;
  } else if (type == HSA_PACKET_TYPE_BARRIER_AND || type == HSA_PACKET_TYPE_BARRIER_OR) {
    uint64_t* deps = (uint64_t*)(slot + 8);
    if (type == HSA_PACKET_TYPE_BARRIER_AND) {
      for (int i = 0; i < 5; i++)
        if (deps[i] && !wait_signal(q, deps[i], HSA_SIGNAL_CONDITION_EQ, 0, -1)) return false;
    } else {
      bool any = false;
      while (!any) {
        for (int i = 0; i < 5 && !any; i++)
          any = deps[i] && ((amd_signal_t*)(uintptr_t)deps[i])->value == 0;
        if (!any) {
          if (stopping(q)) return false;
          nap();
        }
      }
    }
  } else if (type == HSA_PACKET_TYPE_VENDOR_SPECIFIC && slot[2] == HSA_AMD_PACKET_TYPE_BARRIER_VALUE) {
    hsa_amd_barrier_value_packet_t* p = (hsa_amd_barrier_value_packet_t*)slot;
    if (!wait_signal(q, p->signal.handle, p->cond, p->value, p->mask)) return false;
  } else {
    fail_queue(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, 0);
    return false;
  }
  complete(q, completion, start);
  return true;
}

static void* processor(void* arg) {
  mock_queue_t* q = arg;
  uint8_t* ring = q->amd.hsa_queue.base_address;
  uint32_t size = q->amd.hsa_queue.size;
  while (!stopping(q)) {
    uint64_t read = __atomic_load_n(&q->amd.read_dispatch_id, __ATOMIC_SEQ_CST);
    uint8_t* slot = ring + (read & (size - 1)) * 64;
    uint16_t header = __atomic_load_n((uint16_t*)slot, __ATOMIC_ACQUIRE);
    if (q->broken || (header & 0xff) == HSA_PACKET_TYPE_INVALID) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 1000000;
      if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
      pthread_mutex_lock(&q->mu);
      if (!q->stop) pthread_cond_timedwait(&q->cv, &q->mu, &ts);
      pthread_mutex_unlock(&q->mu);
      continue;
    }
    if (!process(q, slot)) continue;
    __atomic_store_n((uint32_t*)slot, HSA_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
    __atomic_store_n(&q->amd.read_dispatch_id, read + 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
                              void (*callback)(hsa_status_t status, hsa_queue_t* source,
                                               void* data),
                              void* data, uint32_t private_segment_size,
                              uint32_t group_segment_size, hsa_queue_t** queue) {
  (void)private_segment_size;
  (void)group_segment_size;
  if (g_init_count <= 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!agent_ok(agent)) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (agent.handle != GPU_AGENT) return HSA_STATUS_ERROR_INVALID_QUEUE_CREATION;
  if (!queue || type > HSA_QUEUE_TYPE_COOPERATIVE) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (size < 64 || (size & (size - 1))) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (size > 131072) return HSA_STATUS_ERROR_OUT_OF_RESOURCES; /* as ROCr 5.2.3 answers */
  mock_queue_t* q = aligned_alloc(64, (sizeof(mock_queue_t) + 63) & ~(size_t)63);
  uint8_t* ring = aligned_alloc(4096, (size_t)size * 64);
  amd_signal_t* doorbell = aligned_alloc(64, sizeof(amd_signal_t));
  if (!q || !ring || !doorbell) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  memset(q, 0, sizeof(*q));
  memset(doorbell, 0, sizeof(*doorbell));
  for (uint32_t i = 0; i < size; i++) {
    memset(ring + (size_t)i * 64, 0, 64);
    *(uint16_t*)(ring + (size_t)i * 64) = HSA_PACKET_TYPE_INVALID;
  }
  doorbell->kind = AMD_SIGNAL_KIND_DOORBELL;
  doorbell->queue_ptr = &q->amd;
  q->amd.hsa_queue.type = type;
  q->amd.hsa_queue.features = HSA_QUEUE_FEATURE_KERNEL_DISPATCH;
  q->amd.hsa_queue.base_address = ring;
  q->amd.hsa_queue.doorbell_signal.handle = (uint64_t)(uintptr_t)doorbell;
  q->amd.hsa_queue.size = size;
  q->amd.hsa_queue.id = __atomic_fetch_add(&g_next_queue_id, 1, __ATOMIC_SEQ_CST);
  q->callback = callback;
  q->data = data;
  q->doorbell = doorbell;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  pthread_create(&q->thread, NULL, processor, q);
  pthread_mutex_lock(&g_lock);
  q->next = g_queues;
  g_queues = q;
  g_live_queues++;
  pthread_mutex_unlock(&g_lock);
  *queue = &q->amd.hsa_queue;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_queue_destroy(hsa_queue_t* queue) {
  pthread_mutex_lock(&g_lock);
  mock_queue_t** link = &g_queues;
  while (*link && &(*link)->amd.hsa_queue != queue) link = &(*link)->next;
  mock_queue_t* q = *link;
  if (!q) {
    pthread_mutex_unlock(&g_lock);
    return HSA_STATUS_ERROR_INVALID_QUEUE;
  }
  *link = q->next;
  g_live_queues--;
  pthread_mutex_unlock(&g_lock);
  pthread_mutex_lock(&q->mu);
  __atomic_store_n(&q->stop, 1, __ATOMIC_SEQ_CST);
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL);
  free(q->amd.hsa_queue.base_address);
  free(q->doorbell);
  free(q);
  return HSA_STATUS_SUCCESS;
}

uint64_t hsa_queue_load_write_index_scacquire(const hsa_queue_t* queue) {
  return __atomic_load_n(&((const amd_queue_t*)queue)->write_dispatch_id, __ATOMIC_SEQ_CST);
}

uint64_t hsa_queue_add_write_index_scacq_screl(const hsa_queue_t* queue, uint64_t value) {
  return __atomic_fetch_add(&((amd_queue_t*)queue)->write_dispatch_id, value, __ATOMIC_SEQ_CST);
}

void hsa_queue_store_write_index_screlease(const hsa_queue_t* queue, uint64_t value) {
  __atomic_store_n(&((amd_queue_t*)queue)->write_dispatch_id, value, __ATOMIC_SEQ_CST);
}

uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t* queue) {
  return __atomic_load_n(&((const amd_queue_t*)queue)->read_dispatch_id, __ATOMIC_SEQ_CST);
}

#ifndef MOCK_MINIMAL
hsa_status_t hsa_amd_profiling_set_profiler_enabled(hsa_queue_t* queue, int enable) {
  mock_queue_t* q = (mock_queue_t*)queue;
  if (!q) return HSA_STATUS_ERROR_INVALID_QUEUE;
  q->profiling = enable != 0;
  if (enable) q->amd.queue_properties |= AMD_QUEUE_PROPERTIES_ENABLE_PROFILING;
  else q->amd.queue_properties &= ~(uint32_t)AMD_QUEUE_PROPERTIES_ENABLE_PROFILING;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_profiling_get_dispatch_time(hsa_agent_t agent, hsa_signal_t signal,
                                                 hsa_amd_profiling_dispatch_time_t* time) {
  if (agent.handle != GPU_AGENT || g_no_gpu) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!signal.handle || !time) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  time->start = sig(signal)->start_ts;
  time->end = sig(signal)->end_ts;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_profiling_async_copy_enable(bool enable) {
  (void)enable;
  return HSA_STATUS_SUCCESS;
}
#endif

/* --- code objects and executables -------------------------------------------------------- */
typedef struct { const uint8_t* data; size_t size; } mock_reader_t;
typedef struct { uint64_t kernel_object; uint32_t kernarg, align, group, priv; } mock_symbol_t;
typedef struct {
  mock_reader_t loaded[8]; /* the loader's own copies: readers may go once loaded */
  int nloaded;
  int frozen;
  mock_symbol_t symbols[16];
  char* descriptors[16];
  int nsymbols;
} mock_exec_t;

hsa_status_t hsa_code_object_reader_create_from_memory(const void* code_object, size_t size,
                                                       hsa_code_object_reader_t* reader) {
  if (!code_object || !reader || size == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (size < 4 || memcmp(code_object, "\x7f" "ELF", 4) != 0)
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  mock_reader_t* r = malloc(sizeof(*r));
  r->data = code_object; /* not copied: ROCr also reads the caller's memory later */
  r->size = size;
  __atomic_add_fetch(&g_live_readers, 1, __ATOMIC_SEQ_CST);
  reader->handle = (uint64_t)(uintptr_t)r;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t reader) {
  if (!reader.handle) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
  free((void*)(uintptr_t)reader.handle);
  __atomic_sub_fetch(&g_live_readers, 1, __ATOMIC_SEQ_CST);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_create_alt(hsa_profile_t profile,
                                       hsa_default_float_rounding_mode_t rounding,
                                       const char* options, hsa_executable_t* executable) {
  (void)options;
  if (profile > HSA_PROFILE_FULL || rounding > HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR ||
      !executable)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  mock_exec_t* e = calloc(1, sizeof(*e));
  __atomic_add_fetch(&g_live_execs, 1, __ATOMIC_SEQ_CST);
  executable->handle = (uint64_t)(uintptr_t)e;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t executable,
                                                   hsa_agent_t agent,
                                                   hsa_code_object_reader_t code_object_reader,
                                                   const char* options,
                                                   hsa_loaded_code_object_t* loaded) {
  (void)options;
  mock_exec_t* e = (mock_exec_t*)(uintptr_t)executable.handle;
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (e->frozen) return HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
  if (agent.handle != GPU_AGENT || g_no_gpu) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!code_object_reader.handle || e->nloaded >= 8)
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
  const mock_reader_t* r = (const mock_reader_t*)(uintptr_t)code_object_reader.handle;
  /* ELF64, EM_AMDGPU (224), and EF_AMDGPU_MACH gfx1100 (0x41), as the ROCr loader checks. */
  if (r->size < 64 || r->data[4] != 2 || *(const uint16_t*)(r->data + 18) != 224)
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  if ((*(const uint32_t*)(r->data + 48) & 0xff) != 0x41) return HSA_STATUS_ERROR_INVALID_ISA;
  uint8_t* copy = malloc(r->size);
  memcpy(copy, r->data, r->size); /* reads the caller's memory: it must still be alive */
  e->loaded[e->nloaded].data = copy;
  e->loaded[e->nloaded].size = r->size;
  e->nloaded++;
  if (loaded) loaded->handle = (uint64_t)e->nloaded;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_freeze(hsa_executable_t executable, const char* options) {
  (void)options;
  mock_exec_t* e = (mock_exec_t*)(uintptr_t)executable.handle;
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (e->frozen) return HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
  e->frozen = 1;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable,
                                               const char* symbol_name,
                                               const hsa_agent_t* agent,
                                               hsa_executable_symbol_t* symbol) {
  mock_exec_t* e = (mock_exec_t*)(uintptr_t)executable.handle;
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (!symbol_name || !symbol) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!agent || agent->handle != GPU_AGENT) return HSA_STATUS_ERROR_INVALID_AGENT;
  size_t n = strlen(symbol_name) + 1; /* match the name with its NUL, as in .strtab */
  for (int i = 0; i < e->nloaded; i++) {
    const uint8_t* hit = memmem(e->loaded[i].data, e->loaded[i].size, symbol_name, n);
    if (hit && e->nsymbols < 16) {
      mock_symbol_t* s = &e->symbols[e->nsymbols++];
      /* A 64-byte aligned "kernel descriptor" that holds the name found in the copy. */
      char* descriptor = aligned_alloc(64, (n + 63) & ~(size_t)63);
      memcpy(descriptor, hit, n);
      e->descriptors[e->nsymbols - 1] = descriptor;
      s->kernel_object = (uint64_t)(uintptr_t)descriptor;
      s->kernarg = 272;
      s->align = 16;
      s->group = 1024;
      s->priv = 48;
      symbol->handle = (uint64_t)(uintptr_t)s;
      return HSA_STATUS_SUCCESS;
    }
  }
  return HSA_STATUS_ERROR_INVALID_SYMBOL_NAME;
}

hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t executable_symbol,
                                            hsa_executable_symbol_info_t attribute,
                                            void* value) {
  mock_symbol_t* s = (mock_symbol_t*)(uintptr_t)executable_symbol.handle;
  if (!s) return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
  switch ((int)attribute) {
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: *(uint64_t*)value = s->kernel_object; break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: *(uint32_t*)value = s->kernarg;
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT:
      *(uint32_t*)value = s->align; break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: *(uint32_t*)value = s->group;
      break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: *(uint32_t*)value = s->priv;
      break;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_destroy(hsa_executable_t executable) {
  mock_exec_t* e = (mock_exec_t*)(uintptr_t)executable.handle;
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  for (int i = 0; i < e->nloaded; i++) free((void*)e->loaded[i].data);
  for (int i = 0; i < e->nsymbols; i++) free(e->descriptors[i]);
  free(e);
  __atomic_sub_fetch(&g_live_execs, 1, __ATOMIC_SEQ_CST);
  return HSA_STATUS_SUCCESS;
}
