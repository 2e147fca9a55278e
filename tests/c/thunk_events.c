/* Checks the emulated libhsakmt's event and queue rules from C, the way ROCr calls them:
 * KFD's auto-reset events (a set with nobody waiting stays set for the next wait; a set
 * with waiters wakes them all and does not stay set), wait timeouts, queue doorbells seen
 * by hsakmt_emu_poll, and DestroyQueue's bounded wait for the device side.
 * Prints one "ok NAME" or "FAIL NAME: why" line per check; exits 1 on any failure. */
#include <hsakmt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct note { uint64_t queue_id, kind; int64_t value; uint64_t ring, ring_bytes, read_ptr, write_ptr, node; };
extern int hsakmt_emu_poll(struct note* out, int max, uint32_t timeout_ms);
extern void hsakmt_emu_enable(int on);
extern int hsakmt_emu_interrupt(uint32_t event_id);

static int failures;
#define CHECK(name, cond, ...) do { if (cond) printf("ok %s\n", name); else { \
    printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static HsaEvent* ev;
static volatile int woke;
static void* waiter(void* arg) {
    (void)arg;
    if (hsaKmtWaitOnEvent(ev, 2000) == HSAKMT_STATUS_SUCCESS) woke++;
    return NULL;
}

/* Run with AMDGPU_EMULATED=0: the library starts switched off. */
int main(void) {
    CHECK("disabled_open_fails", hsaKmtOpenKFD() == HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED,
          "OpenKFD succeeded while switched off");
    hsakmt_emu_enable(1);
    CHECK("open", hsaKmtOpenKFD() == HSAKMT_STATUS_SUCCESS, "OpenKFD failed");

    HsaEventDescriptor d;
    memset(&d, 0, sizeof d);
    d.EventType = HSA_EVENTTYPE_SIGNAL;
    CHECK("create_event", hsaKmtCreateEvent(&d, false, false, &ev) == HSAKMT_STATUS_SUCCESS, "%s", "failed");

    double t0 = now_s();
    HSAKMT_STATUS st = hsaKmtWaitOnEvent(ev, 50);
    double waited = now_s() - t0;
    CHECK("wait_times_out", st == HSAKMT_STATUS_WAIT_TIMEOUT && waited >= 0.045 && waited < 1.0,
          "status %d after %.3f s", st, waited);

    hsaKmtSetEvent(ev); /* nobody waiting: stays set */
    CHECK("set_without_waiter_stays_set", hsaKmtWaitOnEvent(ev, 0) == HSAKMT_STATUS_SUCCESS, "%s", "failed");
    CHECK("wait_consumes_it", hsaKmtWaitOnEvent(ev, 0) == HSAKMT_STATUS_WAIT_TIMEOUT,
          "the event stayed set after a wait (not auto-reset)");

    pthread_t a, b;
    pthread_create(&a, NULL, waiter, NULL);
    pthread_create(&b, NULL, waiter, NULL);
    usleep(100000); /* both are waiting */
    hsakmt_emu_interrupt(ev->EventId); /* the device side's end-of-packet interrupt */
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK("set_wakes_every_waiter", woke == 2, "%d of 2 waiters woke", woke);
    CHECK("set_with_waiters_does_not_stay_set", hsaKmtWaitOnEvent(ev, 0) == HSAKMT_STATUS_WAIT_TIMEOUT,
          "the event stayed set although waiters consumed it");

    /* a queue: ROCr hands in the ring and its read/write index words */
    static uint64_t amd_queue[64] __attribute__((aligned(64)));
    static uint8_t ring[64 * 64] __attribute__((aligned(4096)));
    HsaQueueResource res;
    memset(&res, 0, sizeof res);
    res.Queue_read_ptr_aql = &amd_queue[16];
    res.Queue_write_ptr_aql = &amd_queue[7];
    st = hsaKmtCreateQueue(1, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL, ring,
                           sizeof ring, NULL, &res);
    CHECK("create_queue", st == HSAKMT_STATUS_SUCCESS, "status %d", st);
    uintptr_t bell = (uintptr_t)res.Queue_DoorBell_aql;
    CHECK("doorbell_slot", bell % 8 == 0 && ((bell >> 3) & 0x3FF) == res.QueueId,
          "doorbell %p for queue %llu", (void*)bell, (unsigned long long)res.QueueId);

    struct note notes[8];
    int n = hsakmt_emu_poll(notes, 8, 100);
    CHECK("poll_sees_new_queue", n == 1 && notes[0].kind == 1 && notes[0].ring == (uintptr_t)ring,
          "%d notes, kind %llu", n, n ? (unsigned long long)notes[0].kind : 0ull);
    __atomic_store_n(res.Queue_DoorBell_aql, 41, __ATOMIC_RELEASE);
    n = hsakmt_emu_poll(notes, 8, 100);
    CHECK("poll_sees_doorbell", n == 1 && notes[0].kind == 2 && notes[0].value == 41,
          "%d notes", n);
    t0 = now_s();
    n = hsakmt_emu_poll(notes, 8, 30);
    waited = now_s() - t0;
    CHECK("poll_times_out", n == 0 && waited >= 0.025 && waited < 1.0, "%d notes after %.3f s", n, waited);

    /* the device side attached but never detaches: DestroyQueue gives up (here after
     * AMDGPU_EMULATED_DETACH_MS=300) */
    t0 = now_s();
    st = hsaKmtDestroyQueue(res.QueueId);
    waited = now_s() - t0;
    CHECK("destroy_queue_wait_is_bounded", st == HSAKMT_STATUS_SUCCESS && waited > 0.25 && waited < 5,
          "status %d after %.1f s", st, waited);

    CHECK("destroy_event", hsaKmtDestroyEvent(ev) == HSAKMT_STATUS_SUCCESS, "%s", "failed");
    CHECK("close", hsaKmtCloseKFD() == HSAKMT_STATUS_SUCCESS, "%s", "failed");
    return failures ? 1 : 0;
}
