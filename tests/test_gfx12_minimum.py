"""gfx12's NaN-propagating minimum/maximum and its f64 minNum/maxNum, as clang 22 emits them.

`tests/data/isa/gfx12_minimum.cl` (clang's `__builtin_elementwise_minimum/maximum`, i.e.
llvm.minimum/maximum, and `__builtin_fmin/fmax` on doubles) compiles for gfx1201 to
v_minimum_f32, v_maximum_f64, v_pk_minimum_f16 and v_min_num_f64_e32 (checked in the
object). The reference is IEEE 754-2019 written out here one value at a time: minimum and
maximum return NaN when either operand is NaN and order -0 below +0; fmin/fmax (minNum)
return the other operand of a NaN."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx12

SOURCE = Path(__file__).parent / "data" / "isa" / "gfx12_minimum.cl"
N = 64
SPECIAL = [math.nan, -0.0, 0.0, math.inf, -math.inf, 1.0, -1.0, 2.5]


def _minimum(a: float, b: float, big: bool) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:  # the signs decide: -0 below +0
        negative_a = math.copysign(1, a) < 0
        return (b if negative_a else a) if big else (a if negative_a else b)
    return max(a, b) if big else min(a, b)


def _min_num(a: float, b: float, big: bool) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return _minimum(a, b, big)


def _instructions(obj: bytes):
    """The decoded instructions of the object's .text (gfx1201)."""
    import struct

    from hsa.virtual.gfx12 import decoder

    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", obj, shoff + k * shentsize) for k in range(shnum)]
    names = heads[shstrndx][4]
    for name, _t, _f, _a, offset, size in heads:
        if obj[names + name:obj.index(b"\0", names + name)] == b".text":
            return decoder.decode_all(obj[offset:offset + size], 0, "gfx1201")
    raise AssertionError("no .text")


def _same(got: np.ndarray, want: list[float]) -> list[int]:
    """Lanes where got differs from want (NaN matches NaN; zeros by sign)."""
    w = np.asarray(want, got.dtype)
    bad = ~((np.isnan(got) & np.isnan(w)) | ((got == w) & (np.signbit(got) == np.signbit(w))))
    return np.flatnonzero(bad).tolist()


def test_minimum_maximum_and_f64_min_num_on_gfx1201():
    h = Harness("gfx1201")
    obj = build_code_object(SOURCE.read_text(), "cl", mcpu="gfx1201")
    code = h.load(obj)
    names = {i.name for i in _instructions(obj)}
    assert {"v_minimum_f32", "v_maximum_f32", "v_minimum_f64", "v_maximum_f64",
            "v_pk_minimum_f16", "v_pk_maximum_f16", "v_min_f64_e32"} <= names, names
    rng = np.random.default_rng(5)
    pairs = [(x, y) for x in SPECIAL for y in SPECIAL]  # every special pair, then random
    a = np.array([p[0] for p in pairs[:N]] + [], np.float64)
    b = np.array([p[1] for p in pairs[:N]], np.float64)
    c = rng.choice(SPECIAL, N)
    f32 = [h.buffer(x.astype(np.float32)) for x in (a, b, c)]
    out = h.buffer(np.zeros(6 * N, np.float32))
    da, db = h.buffer(a), h.buffer(b)
    dout = h.buffer(np.zeros(4 * N, np.float64))
    ha, hb = h.buffer(np.concatenate([a, b])[:2 * N].astype(np.float16)), \
        h.buffer(np.concatenate([b, a])[:2 * N].astype(np.float16))
    hout = h.buffer(np.zeros(4 * N, np.float16))
    h.dispatch(code, "mm", (N,), (N,), [*f32, out, da, db, dout, ha, hb, hout])

    got = h.read(out, np.float32, 6 * N).reshape(N, 6)
    x, y, z = a.astype(np.float32).tolist(), b.astype(np.float32).tolist(), c.tolist()
    mn = [_minimum(p, q, False) for p, q in zip(x, y, strict=True)]
    mx = [_minimum(p, q, True) for p, q in zip(x, y, strict=True)]
    want = [mn, mx, [_minimum(m, r, False) for m, r in zip(mn, z, strict=True)],
            [_minimum(m, r, True) for m, r in zip(mx, z, strict=True)],
            [_minimum(m, r, True) for m, r in zip(mn, z, strict=True)],
            [_minimum(m, r, False) for m, r in zip(mx, z, strict=True)]]
    for k in range(6):
        assert _same(got[:, k], want[k]) == [], k

    dgot = h.read(dout, np.float64, 4 * N).reshape(N, 4)
    p, q = a.tolist(), b.tolist()
    for k, fn, big in ((0, _minimum, False), (1, _minimum, True), (2, _min_num, False),
                       (3, _min_num, True)):
        assert _same(dgot[:, k], [fn(s, t, big) for s, t in zip(p, q, strict=True)]) == [], k

    hgot = h.read(hout, np.float16, 4 * N).reshape(N, 2, 2)  # lane: min pair, max pair
    u = np.concatenate([a, b])[:2 * N].astype(np.float16).astype(float).reshape(N, 2)
    w = np.concatenate([b, a])[:2 * N].astype(np.float16).astype(float).reshape(N, 2)
    for k, big in ((0, False), (1, True)):
        want16 = [_minimum(s, t, big) for s, t in zip(u.ravel(), w.ravel(), strict=True)]
        assert _same(hgot[:, k, :].ravel(), want16) == [], k
