"""Asynchronous transfers on lanes, pinned host memory and placement (issue 20)."""

import sys

import numpy as np

import amdgpu

dev = amdgpu.open(sys.argv[1] if len(sys.argv) > 1 else "amdgpu:virtual")  # or "vulkan"
x = np.arange(1 << 20, dtype=np.float32)

a = dev.buffer(x.nbytes)
up = a.write_async(x, lane=1)  # the copy engine (hsa_amd_memory_async_copy) on lane 1
b = dev.buffer(x.nbytes, memory="device-fine")  # "device" (default) | "device-fine" | "host"
moved = dev.copy(b, a, lane=0, wait=[up])  # lane 0 starts once lane 1 reached `up`

pinned = dev.host_buffer(x.nbytes)  # the system's fine-grained pool: zero-copy `.array`
down = b.read_async(pinned, lane=1, wait=[moved])
down.wait()
print("pinned:", pinned.numpy(np.float32)[:4], (pinned.numpy(np.float32) == x).all())
print("staged:", a.read_async(dtype=np.float32).result()[-2:])
dev.close()
