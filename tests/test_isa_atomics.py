"""Atomics exactly as one lane at a time: clang 22's OpenCL atomics (tests/data/isa/
atomics.cl) on gfx1100 and gfx942, every op on global memory and LDS, lanes colliding on
random addresses (half of them on one hot address), checked against a sequential reference
written here in plain Python: each work-item, in work-item order, applies its op and gets
the value before. Every returned old value and the final memory must be equal bit for bit.

The executor combines colliding lanes with whole-array numpy (hsa.virtual.isa.atomics);
`test_rmw_matches_lane_loop` checks that module alone against a per-lane loop over every op
and type it knows, including the ones clang does not emit here (rsub, csub, cond_sub,
packed f16/bf16 adds, 64-bit float min/max)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from toolchains import require_clang

pytestmark = pytest.mark.hsa_virtual

SOURCE = Path(__file__).parent / "data" / "isa" / "atomics.cl"
N = 1024  # work-items: 4 workgroups of 256
M = 37  # addresses per global table
SLOTS = 16  # per LDS table and workgroup
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF

_CODE: dict[str, bytes] = {}


def _code(target: str) -> bytes:
    if target not in _CODE:
        require_clang()
        from compiler import clang

        _CODE[target] = clang.compile_opencl(SOURCE, target)
    return _CODE[target]


# --- the sequential reference (Python integers and numpy float scalars) -------------------
def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _bits32(x) -> int:
    return int(np.float32(x).view(np.uint32))


def _fadd(a: int, b: int) -> int:
    with np.errstate(over="ignore"):  # overflow to infinity is a result
        return _bits32(np.float32(_f32(a)) + np.float32(_f32(b)))


def _dadd(a: int, b: int) -> int:
    x = np.array([a, b], np.uint64).view(np.float64)
    return int(np.float64(x[0] + x[1]).view(np.uint64))


def _s(x: int, bits: int) -> int:
    return x - (1 << bits) if x >> (bits - 1) else x


def _fkey(bits: int) -> int:  # number order of f32 bit patterns, -0 below +0
    s = _s(bits, 32)
    return s ^ 0x7FFFFFFF if s < 0 else s


def _fminmax(big: bool):
    def op(old: int, v: int) -> int:
        if np.isnan(_f32(v)):
            return old
        if np.isnan(_f32(old)):
            return v
        return v if (_fkey(v) > _fkey(old) if big else _fkey(v) < _fkey(old)) else old
    return op


OPS32 = [  # row of `old` and the u table: old -> new
    lambda o, v: (o + v) & M32, lambda o, v: (o - v) & M32, lambda o, v: o & v,
    lambda o, v: o | v, lambda o, v: o ^ v, min, max,
    lambda o, v: min(_s(o, 32), _s(v, 32)) & M32, lambda o, v: max(_s(o, 32), _s(v, 32)) & M32,
    lambda o, v: v,
    lambda o, v: (v >> 2) & 3 if o == v & 3 else o,  # compare-exchange
    lambda o, v: 0 if o >= (v & 15) else o + 1,  # inc (wraps at v & 15)
    lambda o, v: (v & 15) if o == 0 or o > (v & 15) else o - 1,  # dec
    _fadd,
]
OPS64 = [lambda o, w: (o + w) & M64, max, lambda o, w: min(_s(o, 64), _s(w, 64)) & M64,
         lambda o, w: (w >> 2) & 3 if o == w & 3 else o]


def _sequential(mem: list[int], addrs, values, op) -> list[int]:
    """Apply op lane by lane; returns each lane's old value (mem changes in place)."""
    olds = []
    for a, v in zip(addrs, values, strict=True):
        a, v = int(a), int(v)
        olds.append(mem[a])
        mem[a] = op(mem[a], v)
    return olds


# --- inputs ----------------------------------------------------------------------------------
def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random 32-bit words whose float reading is a normal number (no NaN, infinity or
    denormal: AMD's float atomics flush denormals, and which NaN a NaN + NaN gives is not
    what this test is about)."""
    v = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    e = (v >> 23) & 0xFF
    return np.where((e == 0) | (e == 0xFF), v ^ np.uint32(0x40000000), v).astype(np.uint32)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    idx = np.where(rng.random(N) < 0.5, 3, rng.integers(0, M, N)).astype(np.uint32)
    val = _values(rng, N)
    val64 = rng.integers(0, 1 << 63, N, dtype=np.uint64) * np.uint64(2) + (val & 1)
    return rng, idx, val, val64


# --- the tests -------------------------------------------------------------------------------
@pytest.fixture(params=["gfx1100", "gfx942"])
def target(request) -> str:
    return request.param


def test_global_atomics_are_sequential(target: str) -> None:
    from hsa.virtual.gfx11.testing import Harness

    h = Harness(target)
    code = h.load(_code(target))
    rng, idx, val, val64 = _inputs(1)
    u0 = rng.integers(0, 1 << 32, 13 * M, dtype=np.uint64).astype(np.uint32)
    u0[10 * M: 11 * M] &= 3  # compare-exchange tables: 0..3
    u0[11 * M: 13 * M] &= 15
    f0 = _values(rng, M)
    l0 = rng.integers(0, 1 << 63, 4 * M, dtype=np.uint64)
    l0[3 * M:] &= np.uint64(3)
    u, f, lg = h.buffer(u0), h.buffer(f0), h.buffer(l0)
    old = h.buffer(np.zeros(22 * N, np.uint32))
    h.dispatch(code, "global_atomics", (N,), (256,),
               [u, f, lg, h.buffer(idx), h.buffer(val), h.buffer(val64), old, N, M])
    got_old = h.read(old, np.uint32, 22 * N)
    got_u, got_f = h.read(u, np.uint32, 13 * M), h.read(f, np.uint32, M)
    got_l = h.read(lg, np.uint64, 4 * M)
    for row, op in enumerate(OPS32):
        mem = [int(x) for x in (f0 if row == 13 else u0[row * M:(row + 1) * M])]
        want = _sequential(mem, idx, val, op)
        np.testing.assert_array_equal(got_old[row * N:(row + 1) * N], want, f"op {row} old")
        final = got_f if row == 13 else got_u[row * M:(row + 1) * M]
        np.testing.assert_array_equal(final, mem, f"op {row} memory")
    old64 = got_old[14 * N:].view(np.uint64)
    for row, op in enumerate(OPS64):
        mem = [int(x) for x in l0[row * M:(row + 1) * M]]
        want = _sequential(mem, idx, val64, op)
        np.testing.assert_array_equal(old64[row * N:(row + 1) * N], want, f"op64 {row} old")
        np.testing.assert_array_equal(got_l[row * M:(row + 1) * M], mem, f"op64 {row} memory")


@pytest.mark.parametrize("kernel", ["global_fmin", "global_fmax"])
def test_float_min_max_atomics(target: str, kernel: str) -> None:
    """gfx1100 has global_atomic_min/max_f32, gfx942 a compare-and-swap loop: one result.
    Signed zeros and NaNs in memory: -0 is below +0, a NaN loses to any number."""
    from hsa.virtual.gfx11.testing import Harness

    h = Harness(target)
    code = h.load(_code(target))
    rng, idx, val, _ = _inputs(2)
    val[rng.random(N) < 0.1] = 0x80000000  # -0
    val[rng.random(N) < 0.1] = 0
    f0 = _values(rng, M)
    f0[:4] = [0x7FC00000, 0, 0x80000000, 0x7FC00000]  # NaN (the hot address 3), +0, -0
    f, old = h.buffer(f0), h.buffer(np.zeros(N, np.uint32))
    h.dispatch(code, kernel, (N,), (256,), [f, h.buffer(idx), h.buffer(val), old, N])
    mem = [int(x) for x in f0]
    want = _sequential(mem, idx, val, _fminmax(kernel == "global_fmax"))
    np.testing.assert_array_equal(h.read(old, np.uint32, N), want)
    np.testing.assert_array_equal(h.read(f, np.uint32, M), mem)


def test_f64_add_atomics(target: str) -> None:
    """gfx942 has global_atomic_add_f64, gfx1100 a compare-and-swap loop: each rounds in
    work-item order."""
    from hsa.virtual.gfx11.testing import Harness

    h = Harness(target)
    code = h.load(_code(target))
    rng, idx, _, _ = _inputs(3)
    vals = rng.standard_normal(N) * np.exp2(rng.integers(-30, 30, N))
    d0 = rng.standard_normal(M)
    d, old = h.buffer(d0), h.buffer(np.zeros(N, np.uint64))
    h.dispatch(code, "global_dadd", (N,), (256,),
               [d, h.buffer(idx), h.buffer(vals.view(np.uint64)), old, N])
    mem = [int(x) for x in d0.view(np.uint64)]
    want = _sequential(mem, idx, vals.view(np.uint64), _dadd)
    np.testing.assert_array_equal(h.read(old, np.uint64, N), want)
    np.testing.assert_array_equal(h.read(d, np.uint64, M), mem)


def test_lds_atomics_are_sequential(target: str) -> None:
    from hsa.virtual.gfx11.testing import Harness

    h = Harness(target)
    code = h.load(_code(target))
    rng, _, val, val64 = _inputs(4)
    val[rng.random(N) < 0.5] &= ~np.uint32(0xF << 7)  # half of them on slot 0
    init = rng.integers(0, 1 << 32, 256, dtype=np.uint64).astype(np.uint32)
    init[10 * SLOTS: 11 * SLOTS] &= 3
    init[11 * SLOTS: 13 * SLOTS] &= 15
    init[13 * SLOTS: 14 * SLOTS] = _values(rng, SLOTS)
    init[15 * SLOTS: 16 * SLOTS] &= 3  # the 64-bit compare-exchange table
    groups, per = N // 256, 16 * SLOTS + 4 * SLOTS
    old, fin = h.buffer(np.zeros(18 * N, np.uint32)), h.buffer(np.zeros(groups * per, np.uint32))
    h.dispatch(code, "lds_atomics", (N,), (256,),
               [h.buffer(init), h.buffer(val), h.buffer(val64), old, fin, N])
    got_old = h.read(old, np.uint32, 18 * N)
    got_fin = h.read(fin, np.uint32, groups * per).reshape(groups, per)
    old64 = got_old[14 * N:].view(np.uint64)
    slot = (val >> 7) % SLOTS
    for grp in range(groups):
        lanes = slice(grp * 256, (grp + 1) * 256)
        for row, op in enumerate(OPS32):
            mem = [int(x) for x in init[row * SLOTS:(row + 1) * SLOTS]]
            want = _sequential(mem, slot[lanes], val[lanes], op)
            np.testing.assert_array_equal(got_old[row * N:(row + 1) * N][lanes], want,
                                          f"group {grp} op {row} old")
            np.testing.assert_array_equal(got_fin[grp, row * SLOTS:(row + 1) * SLOTS], mem,
                                          f"group {grp} op {row} memory")
        fin64 = got_fin[grp, 16 * SLOTS:].view(np.uint64)
        for k, op in enumerate((OPS64[0], OPS64[3])):
            mem = [int(x) for x in init[(14 + k) * SLOTS:(15 + k) * SLOTS]]
            want = _sequential(mem, slot[lanes], val64[lanes], op)
            np.testing.assert_array_equal(old64[k * N:(k + 1) * N][lanes], want,
                                          f"group {grp} op64 {k} old")
            np.testing.assert_array_equal(fin64[k * SLOTS:(k + 1) * SLOTS], mem,
                                          f"group {grp} op64 {k} memory")


# --- the module alone --------------------------------------------------------------------------
def _lane_loop(mem: np.ndarray, addrs, values, fn, compare, float_compare: bool) -> np.ndarray:
    ft = np.float64 if mem.dtype == np.dtype(np.uint64) else np.float32
    old = np.empty(len(addrs), mem.dtype)
    for i, a in enumerate(addrs.tolist()):
        o = mem[a : a + 1].copy()
        old[i] = o[0]
        if compare is None:
            mem[a] = np.asarray(fn(o, values[i:i + 1]))[0]
        else:
            c = compare[i:i + 1]
            same = o.view(ft) == c.view(ft) if float_compare else o == c
            mem[a] = values[i] if same[0] else o[0]
    return old


def test_rmw_matches_lane_loop() -> None:
    from hsa.virtual.isa.atomics import atomic_fn, atomic_rmw

    rng = np.random.default_rng(7)
    names = [f"{op}_{t}" for op in ("add", "sub", "rsub", "min", "max", "and", "or", "xor",
                                    "swap", "inc", "dec", "csub", "cond_sub", "min_num",
                                    "max_num")
             for t in ("u32", "i32", "f32", "u64", "i64", "f64")]
    names += ["pk_add_f16", "pk_add_bf16", "cmpswap_b32", "cmpswap_f32", "cmpswap_b64"]
    checked = 0
    for name in names:
        fn = atomic_fn(name)
        cmp = name.startswith("cmpswap")
        if fn is None and not cmp:
            continue
        wide = name.endswith(("64",))
        dt = np.dtype(np.uint64 if wide else np.uint32)
        for trial in range(6):
            m, n = int(rng.integers(1, 40)), int(rng.integers(1, 150))
            addrs = (rng.integers(0, m, n) if trial % 3 else np.full(n, m - 1)).astype(np.uint64)
            small = trial % 2 == 0
            mem0 = (rng.integers(0, 4, m) if small else
                    rng.integers(0, 1 << 63, m, dtype=np.uint64)).astype(dt)
            vals = (rng.integers(0, 4, n) if small else
                    rng.integers(0, 1 << 63, n, dtype=np.uint64)).astype(dt)
            if name.endswith("f32") and not small:
                mem0, vals = (_values(rng, k).astype(dt) for k in (m, n))
                vals[:: 7] = 0x80000000  # -0 among the values
            compare = None
            if cmp:
                compare = (rng.integers(0, 4, n) if small else
                           np.where(rng.random(n) < 0.5, mem0[addrs.astype(np.int64)],
                                    vals[rng.permutation(n)])).astype(dt)
            fc = name == "cmpswap_f32"
            want_mem = mem0.copy()
            with np.errstate(all="ignore"):
                want = _lane_loop(want_mem, addrs.astype(np.int64), vals, fn, compare, fc)
            mem = mem0.copy()
            with np.errstate(all="ignore"):  # float overflow to infinity is a result
                got = atomic_rmw(lambda a, mem=mem: mem[a.astype(np.int64)],
                                 lambda a, v, mem=mem: mem.__setitem__(a.astype(np.int64), v),
                                 addrs, vals, fn, compare, fc, op=name)
            np.testing.assert_array_equal(got, want, f"{name} trial {trial} old")
            np.testing.assert_array_equal(mem, want_mem, f"{name} trial {trial} memory")
            mem = mem0.copy()  # not returning: only the final memory (other paths)
            with np.errstate(all="ignore"):
                atomic_rmw(lambda a, mem=mem: mem[a.astype(np.int64)],
                           lambda a, v, mem=mem: mem.__setitem__(a.astype(np.int64), v),
                           addrs, vals, fn, compare, fc, op=name, returns=False)
            np.testing.assert_array_equal(mem, want_mem, f"{name} trial {trial} no return")
            checked += 1
    assert checked >= 6 * 60
