"""Cache control and fences on every family: system-scope atomics and a system-scope fence
compiled by Debian's hipcc (gfx90a, gfx940, gfx1100: tests/data/codeobjects/
hipcc_memory_model.hsaco, built by make_fixtures.py) and by clang 22 (OpenCL C,
tests/data/isa/memory_model.cl, for gfx942, gfx950, gfx1100, gfx1201, gfx1250) run on the
virtual GPU and give numpy's results.

LLVM's memory model puts each family's cache write-back and invalidate instructions around
those atomics; the executor runs them as completed at once (hsa.virtual.isa.mem.
CACHE_CONTROL: there are no caches, every access is at system scope when it executes).
Each object is first checked to hold them, by LLVM's encodings (llvm-objdump-19 of these
objects)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from codeobjects import hip_entries, load_kernel
from toolchains import require_clang

pytestmark = pytest.mark.hsa_virtual

SOURCE = Path(__file__).parent / "data" / "isa" / "memory_model.cl"

# LLVM's encodings (first dwords) of the cache instructions each target's fences emit
BUFFER_WBL2, BUFFER_INVL2, BUFFER_INV_SC = 0xE0A0C000, 0xE0A40000, 0xE0A4C000
GL0_INV, GL1_INV = 0xE0AC0000, 0xE0B00000
GLOBAL_WB_SYS, GLOBAL_INV_SYS = (0xEE0B007C, 0x000C0000), (0xEE0AC07C, 0x000C0000)
EXPECTED = {
    "gfx90a": [(BUFFER_WBL2, 0), (BUFFER_INVL2, 0)],
    "gfx940": [(BUFFER_WBL2, 0), (BUFFER_INV_SC, 0)],
    "gfx942": [(BUFFER_WBL2, 0), (BUFFER_INV_SC, 0)],
    "gfx1100": [(GL0_INV, 0), (GL1_INV, 0)],
    "gfx1201": [GLOBAL_WB_SYS, GLOBAL_INV_SYS],
}
EF_AMDGPU_MACH_GFX940, EF_AMDGPU_MACH_GFX942 = 0x40, 0x4C


def _holds(code: bytes, words: tuple[int, int]) -> bool:
    return struct.pack("<II", *words) in code


def _as_gfx942(code: bytes) -> bytes:
    """A gfx940 object as gfx942 (e_flags' machine byte and the metadata's target id): one
    ISA, and ROCm 5.2's hipcc knows gfx940 only."""
    flags = struct.unpack_from("<I", code, 0x30)[0]
    assert flags & 0xFF == EF_AMDGPU_MACH_GFX940
    code = code[:0x30] + struct.pack("<I", (flags & ~0xFF) | EF_AMDGPU_MACH_GFX942) + code[0x34:]
    assert code.count(b"amdhsa--gfx940") == 1
    return code.replace(b"amdhsa--gfx940", b"amdhsa--gfx942")


def _run(device: str, code: bytes, kernel: str) -> None:
    import amdgpu

    n = 777
    x = np.random.default_rng(32).integers(0, 1000, n).astype(np.int32)
    dev = amdgpu.open(f"amdgpu:virtual:{device}")
    try:
        k = load_kernel(dev, code, kernel)
        counters, fsum = dev.buffer(np.zeros(2, np.int32)), dev.buffer(np.zeros(1, np.float32))
        maxv, out = dev.buffer(np.zeros(1, np.uint32)), dev.buffer(np.full(2 * n, 5, np.int32))
        dev.dispatch(k, 1024, 256, (counters, fsum, maxv, dev.buffer(x), out, np.int32(n))
                     ).wait(120)
        np.testing.assert_array_equal(counters.to_numpy(np.int32), [n, x.sum()])
        assert fsum.to_numpy(np.float32)[0] == (x & 7).sum()  # small integers: exact sums
        assert maxv.to_numpy(np.uint32)[0] == x.max()
        got = out.to_numpy(np.int32)
        np.testing.assert_array_equal(got[:n], 2 * x)  # the exchanged values
        np.testing.assert_array_equal(got[n:], 2 * x + 5)  # acquire-load + the old value
    finally:
        dev.close()


@pytest.mark.parametrize("entry,device", [("gfx90a", "gfx90a"), ("gfx940", "gfx942"),
                                          ("gfx1100", "gfx1100")])
def test_hipcc_system_atomics_and_fences(entry: str, device: str) -> None:
    code = hip_entries("hipcc_memory_model.hsaco")[f"hipv4-amdgcn-amd-amdhsa--{entry}"]
    for words in EXPECTED[entry]:
        assert _holds(code, words), f"{entry}: no {words[0]:08x} in hipcc's code"
    _run(device, _as_gfx942(code) if entry == "gfx940" else code, "hip_system_atomics")


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1250"])
def test_clang_system_atomics_and_fences(target: str) -> None:
    require_clang()
    from compiler import clang

    code = clang.compile_opencl(SOURCE, target)
    for words in EXPECTED.get(target, []):
        assert _holds(code, words), f"{target}: no {words[0]:08x} in clang's code"
    _run(target, code, "system_atomics")


def test_every_family_names_its_cache_instructions() -> None:
    """Each cache write-back/invalidate of the opcode tables (LLVM's) has its meaning
    recorded and compiles; nothing else is taken for one."""
    from hsa.virtual.gfx9 import decoder as d9
    from hsa.virtual.gfx11 import decoder as d11
    from hsa.virtual.gfx12 import decoder as d12
    from hsa.virtual.isa.mem import CACHE_CONTROL

    names = set()
    tables = [d11.opcode_tables(), d12.opcode_tables("gfx1201"), d12.opcode_tables("gfx1250")]
    tables += [d9.opcode_tables(t) for t in ("gfx90a", "gfx942", "gfx950")]
    for table in tables:
        for enc in table.values():
            names |= {info["name"] for info in enc.values()}
    cache_like = {n for n in names if n.startswith(("buffer_wb", "buffer_inv", "s_dcache_",
                                                    "global_wb", "global_inv"))
                  or n.endswith(("_gl0_inv", "_gl1_inv"))}
    assert cache_like == set(CACHE_CONTROL)


@pytest.mark.parametrize("op", ["add_u32", "sub_u32", "max_i32", "min_u32", "add_f32",
                                "xor_b32", "swap_b32", "inc_u32", "add_u64", "max_f64"])
@pytest.mark.parametrize("bins", [1, 16, 1000])
def test_atomics_apply_in_lane_order(op: str, bins: int) -> None:
    """Lanes that hit one address apply in lane order, each seeing the value before it:
    the vectorized paths (hsa.virtual.isa.atomics: the op's own whole-array way, or its
    `fn` once per rank) give what applying the lanes one by one gives, bit for bit (float
    sums included)."""
    from hsa.virtual.isa import mem

    wide = op.endswith("64")
    dt = np.uint64 if wide else np.uint32
    rng = np.random.default_rng(bins)
    n = 512
    if op.endswith("f32") or op.endswith("f64"):
        ft = np.float64 if wide else np.float32
        values = (rng.standard_normal(n) * 100).astype(ft).view(dt)
    else:
        values = rng.integers(0, 2**31, n).astype(dt)
    addr = (rng.integers(0, bins, n) * 8).astype(np.uint64)
    fn = mem._atomic_fn(op)
    ref, seen = {}, []
    for a, v in zip(addr.tolist(), values, strict=True):
        old = ref.get(a, dt(7))
        seen.append(old)
        ref[a] = fn(np.array([old], dt), np.array([v], dt))[0]
    for how in (op, ""):  # the op's plan, then the generic path
        memory = {}

        def read(a, memory=memory):
            return np.array([memory.get(int(x), dt(7)) for x in a], dt)

        def write(a, v, memory=memory):
            memory.update(zip(a.tolist(), np.asarray(v, dt), strict=True))

        got = mem.atomic_rmw(read, write, addr, values, fn, op=how)
        np.testing.assert_array_equal(got, np.array(seen, dt))
        assert {k: int(v) for k, v in memory.items()} == {k: int(v) for k, v in ref.items()}
