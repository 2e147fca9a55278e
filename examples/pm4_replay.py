"""A command buffer replayed as ONE PM4_IB AQL packet that jumps to a resident PM4 indirect
buffer (amdgpu/hsa_backend/pm4_replay.py), next to the same recording replayed as AQL
packets; the PM4 buffer decoded with packets.pm4."""

import numpy as np

import amdgpu
import compiler
from packets import pm4

for mode in ("pm4", "aql"):
    dev = amdgpu.open("amdgpu:virtual:gfx942")
    saxpy = dev.load(compiler.compile("saxpy_hidden", targets=["gfx942"])).kernel("saxpy_hidden")
    n = 1000
    cb = dev.command_buffer(mode=mode)  # "auto" (default): PM4 on CDNA gfx9, AQL elsewhere
    for a in (2.0, 3.0):
        cb.barrier()  # the second reads what the first wrote
        cb.dispatch(saxpy, n, 64, (cb.binding(0), cb.binding(1), np.float32(a), np.uint32(n)))
    cb.finalize()
    x, y = dev.buffer(np.arange(n, dtype=np.float32)), dev.buffer(np.ones(n, np.float32))
    queue = dev.lanes_[0].queue
    before = queue.load_write_index()
    dev.submit(cb, [y, x]).wait(30)
    print(f"{cb.path}: {queue.load_write_index() - before} AQL packet(s), "
          f"y[:4] = {y.to_numpy(np.float32)[:4]}  ({cb.path_reason})")
    if cb.pm4_program is not None:
        print("\n".join(pm4.describe_stream(cb.pm4_program.stream(), "gfx9")))
    dev.close()
