"""A replay that changes a scalar and the grid without re-recording (issue 19).

`cb.param("n")` is an integer placeholder (here both the grid, in work-items, and the
kernel's `n`), `cb.scalar("value", np.float32)` a typed one; `submit(..., params=...)`
fills them in the same patch as the bindings (on HSA the packet's grid_size and the hidden
block count / remainder follow the grid; on Vulkan the grid is an indirect dispatch).
"""

import numpy as np

import amdgpu
import compiler

dev = amdgpu.open("amdgpu:virtual")
fill = dev.load(compiler.compile("fill", targets=[dev.target])).kernel("fill")

cb = dev.command_buffer()
n = cb.param("n")
cb.dispatch(fill, grid=n, block=256, args=(cb.binding(0), cb.scalar("value", np.float32), n))
cb.finalize()

out = dev.buffer(np.zeros(8, np.float32))
for count, value in [(8, 1.0), (5, 2.0), (2, 3.0)]:  # one recording, three replays
    dev.submit(cb, [out], params={"n": count, "value": value}).wait()
    print(f"n={count} value={value}:", out.to_numpy(np.float32))
try:
    dev.submit(cb, [out], params={"n": 0, "value": 1.0})
except amdgpu.errors.KernelArgumentError as e:
    print("refused:", e)
dev.close()
