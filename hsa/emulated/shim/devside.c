/* The device server's few steps that must run off the Python interpreter lock or be atomic
 * on memory shared with client processes (hsa/emulated/server.py loads it with ctypes):
 * watching doorbells, atomics on ROCr's signals, and firing a client's events. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define EV_SIGNALED 4096
#define EV_FIRED (4096 + 16384)

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* --- doorbells with barriers taken here --------------------------------------------------
 * One queue as the doorbell watch sees it (server.py's _FastQueue has the same layout). A
 * BARRIER_AND without dependencies is the host's round trip (a fence with a completion
 * signal): when the queue's Python packet processor has finished every packet it was given
 * (retired == passed + 1) and the completion signal's server address is in the queue's
 * small cache (filled by Python after it completed a packet on that signal), the watch
 * thread retires such packets itself, with no interpreter in the path, exactly as
 * PacketProcessor._retire does: header INVALID, read index, signal - 1, mailbox, event. */
#define NCACHE 8
struct fastq {
    uint64_t doorbell;   /* server address of the 64-bit doorbell slot */
    int64_t last;        /* last doorbell value seen */
    uint64_t ring;       /* server address of the ring */
    uint64_t mask;       /* packets in the ring - 1 */
    uint64_t read_index; /* server address of amd_queue_t.read_dispatch_id */
    uint64_t properties; /* server address of amd_queue_t.queue_properties (u32) */
    uint64_t events;     /* server address of the client's events page */
    int64_t passed;      /* highest doorbell value handed to Python (-1: none) */
    int64_t retired;     /* Python's processor: next packet it would take (after the signal) */
    int64_t next;        /* next packet nobody has taken (max of both sides') */
    int32_t fast;        /* 0: this queue takes no packet here (error, held, destroyed) */
    int32_t victim;      /* round-robin slot of the cache */
    uint64_t sig_va[NCACHE], sig_host[NCACHE], box_va[NCACHE], box_host[NCACHE];
    uint64_t taken;      /* packets retired here (statistics) */
};

#define AQL_INVALID 1
#define AQL_BARRIER_AND 3
#define PROFILING_BIT (1u << 3)
#define MAX_EVENTS 4096

EXPORT void devside_fire(uint64_t page, uint32_t id);

/* The server address of completion signal `va` and of its current mailbox, if cached. */
static int cached(const struct fastq* q, uint64_t va, uint64_t* host, uint64_t* box_host) {
    for (int i = 0; i < NCACHE; i++) {
        if (q->sig_va[i] != va || !va) continue;
        uint64_t box = __atomic_load_n((uint64_t*)(uintptr_t)(q->sig_host[i] + 16),
                                       __ATOMIC_ACQUIRE);
        if (box && box != q->box_va[i]) return 0; /* reused for another event: ask Python */
        *host = q->sig_host[i];
        *box_host = box ? q->box_host[i] : 0;
        return 1;
    }
    return 0;
}

/* Retire packets [q->next, bell] that are dependency-free BARRIER_ANDs whose completion
 * signal is cached (or absent); stop at the first other one. */
static void take_barriers(struct fastq* q, int64_t bell) {
    if (!q->fast || __atomic_load_n(&q->retired, __ATOMIC_ACQUIRE) != q->passed + 1) return;
    if (q->next < q->passed + 1) q->next = q->passed + 1;
    if (__atomic_load_n((uint32_t*)(uintptr_t)q->properties, __ATOMIC_ACQUIRE) & PROFILING_BIT)
        return; /* Python stamps the start and end times */
    while (q->next <= bell) {
        uint64_t* pkt = (uint64_t*)(uintptr_t)(q->ring + ((uint64_t)q->next & q->mask) * 64);
        uint32_t header = __atomic_load_n((uint32_t*)pkt, __ATOMIC_ACQUIRE);
        if ((header & 0xFF) != AQL_BARRIER_AND || (pkt[1] | pkt[2] | pkt[3] | pkt[4] | pkt[5]))
            return;
        uint64_t completion = pkt[7], host = 0, box_host = 0;
        if (completion && !cached(q, completion, &host, &box_host)) return;
        __atomic_store_n((uint16_t*)pkt, (uint16_t)AQL_INVALID, __ATOMIC_RELEASE);
        q->next++;
        __atomic_store_n((uint64_t*)(uintptr_t)q->read_index, (uint64_t)q->next,
                         __ATOMIC_SEQ_CST);
        q->taken++;
        if (!completion) continue;
        __atomic_add_fetch((int64_t*)(uintptr_t)(host + 8), -1, __ATOMIC_SEQ_CST);
        uint32_t event = (uint32_t)__atomic_load_n((uint64_t*)(uintptr_t)(host + 24),
                                                   __ATOMIC_ACQUIRE);
        if (!event) continue; /* no event: nobody sleeps on it */
        if (box_host) __atomic_store_n((int64_t*)(uintptr_t)box_host, (int64_t)event,
                                       __ATOMIC_SEQ_CST);
        if (event < MAX_EVENTS) devside_fire(q->events, event);
    }
}

/* Wait up to timeout_ms for doorbells (a 64-bit slot per queue) that differ from the last
 * value seen, or for *kick to become non-zero (the table changed); takes what it can (see
 * take_barriers) and writes the indices of the queues whose doorbells Python must pass on
 * to out; returns how many (0: timeout or kick). Spins with sched_yield for the first
 * `spin_us` microseconds after the last doorbell, then sleeps 20 us .. 1 ms. `allow` 0:
 * take nothing here (benchmarks hold the doorbells). */
EXPORT int devside_watch(struct fastq** qs, int n, int* out, int max, uint32_t timeout_ms,
                         uint32_t spin_us, volatile int* kick, volatile int* allow) {
    uint64_t start = now_ns(), sleep_ns = 20000;
    for (;;) {
        int k = 0;
        for (int i = 0; i < n && k < max; i++) {
            struct fastq* q = qs[i];
            int64_t v = __atomic_load_n((int64_t*)(uintptr_t)q->doorbell, __ATOMIC_ACQUIRE);
            if (v == q->last) continue;
            q->last = v;
            if (*allow && v >= 0) take_barriers(q, v);
            if (v >= 0 && q->next > v) { /* all taken here */
                start = now_ns();
                sleep_ns = 20000;
                continue;
            }
            q->passed = v;
            out[k++] = i;
        }
        if (k) return k;
        if (*kick) return 0;
        uint64_t elapsed = now_ns() - start;
        if (elapsed >= (uint64_t)timeout_ms * 1000000ull) return 0;
        if (elapsed < (uint64_t)spin_us * 1000ull) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, (long)sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

EXPORT int64_t devside_add(uint64_t addr, int64_t delta) {
    return __atomic_add_fetch((int64_t*)(uintptr_t)addr, delta, __ATOMIC_SEQ_CST);
}

EXPORT int64_t devside_load(uint64_t addr) {
    return __atomic_load_n((int64_t*)(uintptr_t)addr, __ATOMIC_SEQ_CST);
}

EXPORT void devside_store(uint64_t addr, int64_t value) {
    __atomic_store_n((int64_t*)(uintptr_t)addr, value, __ATOMIC_SEQ_CST);
}

EXPORT void devside_store32(uint64_t addr, uint32_t value) {
    __atomic_store_n((uint32_t*)(uintptr_t)addr, value, __ATOMIC_SEQ_CST);
}

/* An event's interrupt: fired[id] counted and signaled[id] set (manual-reset events keep
 * it), the page's sequence word bumped, waiters woken (the shim's wait sleeps on that word
 * with FUTEX_WAIT). Every waiter present sees the count move, as KFD wakes all of them. */
EXPORT void devside_fire(uint64_t page, uint32_t id) {
    uint32_t* signaled = (uint32_t*)(uintptr_t)(page + EV_SIGNALED);
    uint32_t* fired = (uint32_t*)(uintptr_t)(page + EV_FIRED);
    __atomic_add_fetch(&fired[id], 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&signaled[id], 1u, __ATOMIC_SEQ_CST);
    __atomic_add_fetch((uint32_t*)(uintptr_t)page, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, (uint32_t*)(uintptr_t)page, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
