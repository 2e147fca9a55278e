"""Several GPUs of one node, pinned numpy arrays and small buffers (issue 20).

`python examples/multi_gpu.py [NODE]`: the virtual 8 x gfx942 node by default; the same code
runs on the real ROCr over the emulated driver with `amdgpu:emulated:4xgfx90a`."""

import sys

import numpy as np

import amdgpu

node = sys.argv[1] if len(sys.argv) > 1 else "amdgpu:virtual:8xgfx942"  # on ROCr: amdgpu
d0 = amdgpu.open(node + ":0", suballocate=64 << 10)  # slabs: ROCr's default, opt-in here
d1 = amdgpu.open(node + ":1")
print(d0.uuid, "->", d1.uuid, [(h.link_type.name, h.numa_distance) for h in d0.links(d1)])

x = np.arange(1 << 20, dtype=np.float32)
host = np.empty_like(x)
pinned_x, pinned_host = d0.pin(x), d1.pin(host)  # hsa_amd_memory_lock: no staging copies

a, b = d0.buffer(x.nbytes), d1.buffer(x.nbytes)
up = a.write_async(x, lane=1, zero_copy=True)  # straight from the caller's array
d1.enable_peer_access(d0)  # hsa_amd_agents_allow_access when a copy first needs it
across = d1.copy_async(b, a, wait=[up])  # GPU 0 -> GPU 1 on the copy engine, no host bounce
b.read_async(host, lane=1, wait=[across], zero_copy=True).wait()
print("peer copy:", host[:3], (host == x).all())

small = [d0.buffer(256) for _ in range(10_000)]  # cut from a few 2 MiB slabs
print("10,000 small buffers:", d0.allocator_stats())
pinned_x.unpin(), pinned_host.unpin()
d1.close(), d0.close()
