"""The Python API in one page: open the opt-in HSA path on the virtual gfx1100, compile an
OpenCL C kernel, dispatch it, then record a command buffer once and replay it with new
buffers (one vectorized patch and one doorbell per replay)."""

import numpy as np

import amdgpu
import compiler

dev = amdgpu.open("amdgpu:virtual")  # HSA path, opted in; amdgpu.open() alone gives Vulkan
bundle = compiler.compile("saxpy_hidden", targets=[dev.target])  # cached on disk
saxpy = dev.load(bundle).kernel("saxpy_hidden")

n = 1 << 16
x = dev.buffer(np.arange(n, dtype=np.float32))
y = dev.buffer(np.ones(n, dtype=np.float32))
dev.dispatch(saxpy, grid=n, block=256, args=(y, x, np.float32(2.0), np.uint32(n)))
dev.synchronize(timeout=10)
print("immediate:", y.to_numpy(np.float32)[:4])

cb = dev.command_buffer()  # record once ...
cb.dispatch(saxpy, grid=n, block=256,
            args=(cb.binding(0), cb.binding(1), np.float32(3.0), np.uint32(n)))
cb.finalize()
pairs = [(dev.buffer(np.zeros(n, np.float32)), x) for _ in range(3)]
for out, inp in pairs:  # ... replay with new buffers
    dev.submit(cb, bindings=[out, inp])
dev.synchronize(timeout=10)
print("replayed:", [float(out.to_numpy(np.float32)[1]) for out, _ in pairs])
dev.close()
