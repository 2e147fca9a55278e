"""Cost of a kernel-cache hit and of reading a code object (compiler/ layer).

Prints, for a bundle of five HSACO variants (gfx942, gfx950, gfx1100, gfx1201, gfx1250, built
by clang 22 from the ziglang wheel) plus two 200 KB SPIR-V blobs:
  - KernelCache.key and a KernelCache.get hit (read file + msgpack decode);
  - read_code_object on one HSACO;
  - the baseline measured in the same run: compiling that one HSACO with clang + ld.lld
    (what a miss costs at least).
Goal: a hit <= 5 ms.

    .venv/bin/python benchmarks/bench_compiler_cache.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler.bundle import KernelBundle, Variant
from compiler.cache import KernelCache
from hsa.abi.codeobject import read_code_object

SOURCE = r"""
__kernel void saxpy(__global float* y, __global const float* x, float a, unsigned int n) {
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
                   + __builtin_amdgcn_workitem_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
TARGETS = ("gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1250")


def build(src: Path, mcpu: str, out: Path) -> bytes:
    obj, hsaco = out / f"{mcpu}.o", out / f"{mcpu}.hsaco"
    zig = [sys.executable, "-m", "ziglang"]
    subprocess.run([*zig, "clang", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa",
                    f"-mcpu={mcpu}", "-nogpulib", "-cl-no-stdinc", "-O2",
                    "-mcode-object-version=5", "-c", str(src), "-o", str(obj)], check=True)
    subprocess.run([*zig, "ld.lld", "-shared", str(obj), "-o", str(hsaco)], check=True)
    return hsaco.read_bytes()


def per_call(fn, n: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        src = out / "saxpy.cl"
        src.write_text(SOURCE)
        start = time.perf_counter()
        blobs = {t: build(src, t, out) for t in TARGETS}
        compile_s = (time.perf_counter() - start) / len(TARGETS)

        bundle = KernelBundle("saxpy", "00" * 32)
        for data in blobs.values():
            bundle.add(Variant.from_code_object(data))
        for abi in ("descriptors", "bda"):
            bundle.add(Variant("spirv", "vulkan", abi, bytes(200_000)))
        cache = KernelCache(out / "cache")
        key = cache.key(SOURCE, {"clang": "22"}, {"O": 2}, [*TARGETS, "vulkan"])
        cache.put(key, bundle)

        key_s = per_call(lambda: cache.key(SOURCE, {"clang": "22"}, {"O": 2},
                                           [*TARGETS, "vulkan"]), 1000)
        hit_s = per_call(lambda: cache.get(key), 200)
        read_s = per_call(lambda: read_code_object(blobs["gfx942"]), 500)
        size = len(bundle.to_bytes())
    print(f"bundle: {len(bundle.variants)} variants, {size / 1024:.0f} KiB")
    print(f"KernelCache.key            {key_s * 1e6:8.1f} us")
    print(f"KernelCache.get (hit)      {hit_s * 1e6:8.1f} us   goal <= 5000 us")
    print(f"read_code_object (gfx942)  {read_s * 1e6:8.1f} us")
    print(f"baseline: clang + ld.lld   {compile_s * 1e6:8.1f} us per target "
          f"-> a hit is {compile_s / hit_s:.0f}x cheaper than compiling one target")


if __name__ == "__main__":
    main()
