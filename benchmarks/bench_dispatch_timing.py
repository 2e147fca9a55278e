"""Host cost of an immediate dispatch with and without dev.time_dispatches() (issue 19):
interleaved rounds of 200 dispatches of a 64-item fill on amdgpu:virtual."""

import statistics
import time

import numpy as np

import amdgpu
import compiler

code = compiler.compile("fill", targets=["gfx1100"])
dev = amdgpu.open("amdgpu:virtual")
fill = dev.load(code).kernel("fill")
z = dev.buffer(64 * 4)
args = (z, np.float32(1), 64)


def rounds(timed):
    out = []
    for _ in range(5):
        if timed:
            with dev.time_dispatches():
                t0 = time.perf_counter()
                for _ in range(200):
                    dev.dispatch(fill, 64, 64, args)
                out.append((time.perf_counter() - t0) / 200)
        else:
            t0 = time.perf_counter()
            for _ in range(200):
                dev.dispatch(fill, 64, 64, args)
            out.append((time.perf_counter() - t0) / 200)
            dev.synchronize(60)
    return out


a, b = [], []
for _round in range(2):
    a += rounds(False)
    b += rounds(True)
print(f"untimed dispatch host us: min {min(a) * 1e6:.1f} median {statistics.median(a) * 1e6:.1f}")
ma, mb = statistics.median(a), statistics.median(b)
print(f"timed   dispatch host us: min {min(b) * 1e6:.1f} median {mb * 1e6:.1f} "
      f"(ratio median {mb / ma:.2f})")
dev.close()
