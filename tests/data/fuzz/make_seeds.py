"""Write the fuzzers' seed corpora (tests/data/fuzz/TARGET/): small, valid inputs each
target's coverage starts from. Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python tests/data/fuzz/make_seeds.py

code objects: the project's fill.cl by clang 22 (v4, v5, a relocatable .o) and two Triton
objects from tests/data/codeobjects; bundles: a two-target kernel bundle of fill and
hipcc's offload bundle; traces: amdgpu-run saxpy traced on amdgpu:virtual (replays,
completions, checksums) and on Vulkan; kernargs and kfd_ioctl: hand-made byte strings.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FIXTURES = ROOT / "tests" / "data" / "codeobjects"


def _put(target: str, name: str, data: bytes) -> None:
    folder = HERE / target
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data)


def _clang_fill(mcpu: str, version: int, relocatable: bool) -> bytes:
    from compiler.clang import HEADER, compile_opencl, zig_path

    source = ROOT / "compiler" / "kernels" / "fill.cl"
    if not relocatable:
        return compile_opencl(source, mcpu, code_object_version=version)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "fill.o"
        flags = ["-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}",
                 "-nogpulib", "-cl-no-stdinc", "-O2", f"-mcode-object-version={version}",
                 "-include", str(HEADER)]
        subprocess.run([str(zig_path()), "clang", *flags, "-c", str(source), "-o", str(obj)],
                       check=True)
        return obj.read_bytes()


def code_objects() -> None:
    for mcpu, version in (("gfx1100", 5), ("gfx942", 4)):
        data = _clang_fill(mcpu, version, relocatable=False)
        for target in ("codeobject", "loader"):
            _put(target, f"fill_{mcpu}_v{version}.hsaco", data)
    _put("codeobject", "fill_gfx1100_v5.o", _clang_fill("gfx1100", 5, relocatable=True))
    for name in ("triton_add_gfx1100.hsaco", "triton_row_sum_gfx942.hsaco"):
        for target in ("codeobject", "loader"):
            shutil.copy(FIXTURES / name, HERE / target / name)


def bundles() -> None:
    import compiler

    b = compiler.compile("fill", targets=["gfx1100", "gfx942"])
    _put("bundle", "fill.kbundle", b.to_bytes())
    shutil.copy(FIXTURES / "hipcc_saxpy.hsaco", HERE / "bundle" / "hipcc_saxpy.offload")


def traces() -> None:
    run = Path(sys.executable).parent / "amdgpu-run"
    with tempfile.TemporaryDirectory() as tmp:
        for name, device in (("saxpy_virtual", "amdgpu:virtual"), ("saxpy_vulkan", "vulkan")):
            out = Path(tmp) / f"{name}.aqltrace"
            subprocess.run([str(run), "saxpy", "--device", device, "--replay", "--trace",
                            str(out)], check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
            _put("trace", f"{name}.aqltrace", out.read_bytes())


def small_ones() -> None:
    # kernargs: (count, then per arg kind/type/offset/size/address space), segment, align
    _put("kernargs", "three_args", bytes([3, 5, 1, 0, 8, 1, 2, 1, 8, 4, 0, 2, 2, 12, 4, 0,
                                          16, 1, 3, 1, 1]))
    _put("kernargs", "empty", b"\0")
    from hsa.emulated import abi

    for name in ("AMDKFD_IOC_GET_VERSION", "AMDKFD_IOC_CREATE_QUEUE",
                 "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", "AMDKFD_IOC_WAIT_EVENTS",
                 "AMDKFD_IOC_DBG_TRAP"):
        request = getattr(abi, name)
        struct_type = abi.IOCTLS[request][1]
        import ctypes

        _put("kfd_ioctl", name.lower(),
             struct.pack("<I", request) + bytes(range(ctypes.sizeof(struct_type) % 256)))


if __name__ == "__main__":
    code_objects()
    bundles()
    traces()
    small_ones()
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir()):
        files = list(folder.iterdir())
        print(f"{folder.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")
