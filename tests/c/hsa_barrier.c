/* A plain C program using HSA: one BARRIER_AND packet through real ROCr (hsa_init, an AQL
 * queue, a completion signal, a doorbell, a blocked wait). Run with
 * scripts/emulated.sh it reaches the emulated AMD kernel (preloaded shim, device server).
 * Prints "agent NAME: barrier completed, signal 0" and
 * "GPU agents: N" (AMDGPU_EMULATED_NODE=Nxgfx90a shows N; the barrier runs on the last one). */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
static int gpus;
static hsa_status_t cb(hsa_agent_t a, void* d){ hsa_device_type_t t; hsa_agent_get_info(a,HSA_AGENT_INFO_DEVICE,&t); if(t==HSA_DEVICE_TYPE_GPU) { *(hsa_agent_t*)d=a; gpus++; } return 0;}
int main(){ hsa_status_t s=hsa_init(); if(s){printf("init %x\n", s); return 1;} hsa_agent_t gpu={0}; hsa_iterate_agents(cb,&gpu);
 char name[64]; hsa_agent_get_info(gpu, HSA_AGENT_INFO_NAME, name);
 hsa_queue_t* q; s=hsa_queue_create(gpu, 64, HSA_QUEUE_TYPE_SINGLE, NULL, NULL, UINT32_MAX, UINT32_MAX, &q);
 hsa_signal_t sig; hsa_signal_create(1, 0, NULL, &sig);
 uint64_t idx = hsa_queue_add_write_index_relaxed(q, 1);
 hsa_barrier_and_packet_t* p = (hsa_barrier_and_packet_t*)q->base_address + (idx % q->size);
 memset(((char*)p)+4, 0, 60); p->completion_signal = sig;
 uint16_t h = HSA_PACKET_TYPE_BARRIER_AND | (1<<8) | (HSA_FENCE_SCOPE_SYSTEM<<9) | (HSA_FENCE_SCOPE_SYSTEM<<11);
 __atomic_store_n((uint16_t*)p, h, __ATOMIC_RELEASE);
 hsa_signal_store_relaxed(q->doorbell_signal, idx);
 hsa_signal_value_t v = hsa_signal_wait_scacquire(sig, HSA_SIGNAL_CONDITION_EQ, 0, 5000000000ull, HSA_WAIT_STATE_BLOCKED);
 printf("agent %s: barrier completed, signal %ld\nGPU agents: %d\n", name, (long)v, gpus);
 hsa_signal_destroy(sig); hsa_queue_destroy(q); hsa_shut_down(); return v != 0; }
