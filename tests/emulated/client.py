"""A client process of the emulated kernel's tests (tests/test_emulated_kernel.py): opens
amdgpu:emulated, checks a round trip of data through the GPU (ROCr's blit kernels on the
gfx9 executor: host -> device memory -> pinned host memory, the pinned array registered as
userptr memory), prints the loaded libhsakmt and shim, then does what argv asks:
  once            one round trip, then exit
  loop            round trips until killed (prints "looping" after the first)
  wait-then-copy  print "ready", wait for a line on stdin, then one round trip
"""

import sys

import numpy as np

import amdgpu


def round_trip(dev, seed: int) -> None:
    data = (np.arange(1024, dtype=np.uint64) * 2654435761 + seed).astype(np.uint32)
    buf = dev.buffer(data)  # into device memory
    back = np.zeros_like(data)
    pinned = dev.pin(back)  # hsa_amd_memory_lock: userptr memory
    dev.copy(pinned, buf)  # a blit kernel writes the caller's own array
    dev.synchronize()
    if not np.array_equal(back, data):
        raise SystemExit(f"round trip {seed}: data differs")


def main() -> None:
    mode = sys.argv[1]
    dev = amdgpu.open("amdgpu:emulated")
    maps = open("/proc/self/maps").read().split("\n")
    for lib in ("libhsakmt.so.1", "libhsa-runtime64.so.1", "libamdgpu_kfd.so"):
        path = next((line.split()[-1] for line in maps
                     if line.split()[-1:] and line.split()[-1].split("/")[-1].startswith(lib)),
                    "")
        print(f"loaded {lib} {path}", flush=True)
    if mode == "wait-then-copy":
        print("ready", flush=True)
        sys.stdin.readline()
    round_trip(dev, 1)
    print("round trip ok", flush=True)
    if mode == "loop":
        print("looping", flush=True)
        seed = 2
        while True:
            round_trip(dev, seed)
            seed += 1
    dev.close()


if __name__ == "__main__":
    main()
