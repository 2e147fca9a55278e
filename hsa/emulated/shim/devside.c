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

/* Wait up to timeout_ms for a doorbell (64-bit slot at addrs[i]) to differ from last[i], or
 * for *kick to become non-zero (the table changed). Writes the changed indices to out and
 * updates last; returns how many (0: timeout or kick). Spins with sched_yield for the first
 * `spin_us` microseconds (a doorbell right after the last one), then sleeps 20 us .. 1 ms. */
EXPORT int devside_poll(const uint64_t* addrs, int64_t* last, int n, int* out, int max,
                        uint32_t timeout_ms, uint32_t spin_us, volatile int* kick) {
    uint64_t start = now_ns(), sleep_ns = 20000;
    for (;;) {
        int k = 0;
        for (int i = 0; i < n && k < max; i++) {
            int64_t v = __atomic_load_n((int64_t*)(uintptr_t)addrs[i], __ATOMIC_ACQUIRE);
            if (v != last[i]) {
                last[i] = v;
                out[k++] = i;
            }
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
