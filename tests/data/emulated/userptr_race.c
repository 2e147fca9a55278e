/* hsa_amd_memory_lock of a page another thread keeps writing (as malloc's bookkeeping does in
 * a multithreaded program whose small buffers are pinned for a copy): no write may be lost.
 * A writer thread increments a counter in the page about to be locked, one step at a time, and
 * checks that it reads back what it wrote last; the main thread locks the page (a userptr
 * registration, which on the emulated kernel puts a memfd under the page) and unlocks it.
 * Built with gcc against Debian's ROCr 5.2.3 by tests/test_emulated_userptr_race.py.
 * Prints "rounds N, writes W, lost L" and exits 1 when L > 0. */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hsa_agent_t gpu;
static volatile uint64_t* volatile target; /* the counter the writer increments; NULL: idle */
static volatile int writing, stop;
static volatile uint64_t writes, lost;

static hsa_status_t find_gpu(hsa_agent_t agent, void* data) {
    hsa_device_type_t type;
    hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
    if (type == HSA_DEVICE_TYPE_GPU) {
        *(hsa_agent_t*)data = agent;
        return HSA_STATUS_INFO_BREAK;
    }
    return HSA_STATUS_SUCCESS;
}

static void* writer(void* unused) {
    (void)unused;
    while (!stop) {
        volatile uint64_t* c = target;
        if (!c) continue;
        writing = 1;
        uint64_t mine = *c;
        while (target == c) { /* one writer: the counter holds exactly what it wrote last */
            uint64_t now = *c;
            if (now != mine) {
                lost++;
                mine = now;
            }
            *c = ++mine;
            writes++;
        }
        writing = 0;
    }
    return NULL;
}

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    if (hsa_init() != HSA_STATUS_SUCCESS) {
        printf("hsa_init failed\n");
        return 2;
    }
    if (hsa_iterate_agents(find_gpu, &gpu) != HSA_STATUS_INFO_BREAK) {
        printf("no GPU agent\n");
        return 2;
    }
    pthread_t t;
    pthread_create(&t, NULL, writer, NULL);
    for (int r = 0; r < rounds; r++) {
        /* fresh pages every round: a page registered once stays on its memfd */
        unsigned char* page = aligned_alloc(4096, 4096);
        memset(page, 0, 4096);
        target = (volatile uint64_t*)(page + 4032); /* same page, outside the locked bytes */
        while (!writing) {
        }
        void* agent_ptr = NULL;
        if (hsa_amd_memory_lock(page, 1024, &gpu, 1, &agent_ptr) != HSA_STATUS_SUCCESS) {
            printf("hsa_amd_memory_lock failed in round %d\n", r);
            return 2;
        }
        hsa_amd_memory_unlock(page);
        target = NULL;
        while (writing) {
        }
        /* the page is not freed: its memfd stays mapped, so the next round's is fresh */
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("rounds %d, writes %llu, lost %llu\n", rounds, (unsigned long long)writes,
           (unsigned long long)lost);
    hsa_shut_down();
    return lost ? 1 : 0;
}
