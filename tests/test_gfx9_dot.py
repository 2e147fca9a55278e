"""gfx9's integer dot products (v_dot4c_i32_i8 and the VOP3P v_dot{2,4,8}_{i32,u32}_*):
IREE lowers i8 x i8 -> i32 matvecs on gfx942 to v_dot4c_i32_i8, which the gfx9 executor
used to stop at. clang's dot builtins on gfx942, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx9

SRC = r"""
typedef unsigned int uint;
typedef short short2 __attribute__((ext_vector_type(2)));
__kernel void dots(__global int *out, __global const int *a, __global const int *b,
                   __global const int *c, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() +
          __builtin_amdgcn_workitem_id_x();
  if (i >= n) return;
  int x = a[i], y = b[i], z = c[i];
  out[7*i+0] = __builtin_amdgcn_sdot4(x, y, z, false);
  out[7*i+1] = (int)__builtin_amdgcn_udot4((uint)x, (uint)y, (uint)z, false);
  out[7*i+2] = __builtin_amdgcn_sdot8(x, y, z, false);
  out[7*i+3] = (int)__builtin_amdgcn_udot8((uint)x, (uint)y, (uint)z, false);
  out[7*i+4] = __builtin_amdgcn_sdot2(__builtin_bit_cast(short2, x),
                                       __builtin_bit_cast(short2, y), z, false);
  out[7*i+5] = __builtin_amdgcn_sdot4(x, y, z, true);
  int acc = z;  /* a loop-carried accumulator: clang picks the VOP2 v_dot4c form */
  for (int k = 0; k < 3; k++) acc = __builtin_amdgcn_sdot4(x, y + k, acc, false);
  out[7*i+6] = acc;
}
"""


def _fields(v: np.ndarray, bits: int, signed: bool) -> list[np.ndarray]:
    u = v.astype(np.int64) & 0xFFFFFFFF
    out = []
    for k in range(32 // bits):
        f = (u >> (bits * k)) & ((1 << bits) - 1)
        out.append(np.where(f >= 1 << (bits - 1), f - (1 << bits), f) if signed else f)
    return out


def _dot(a, b, c, bits, signed, clamp=False):
    acc = c.astype(np.int64) if signed else c.astype(np.int64) & 0xFFFFFFFF
    for x, y in zip(_fields(a, bits, signed), _fields(b, bits, signed), strict=True):
        acc = acc + x * y
    if clamp:
        acc = np.clip(acc, -(2 ** 31), 2 ** 31 - 1)
    return (acc & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def test_integer_dot_products_match_numpy():
    h = Harness("gfx942")
    code = h.load(build_code_object(SRC, "cl", mcpu="gfx942"))
    n = 100
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
               for _ in range(3))
    a[:8] = b[:8] = 0x7F7F7F7F  # the clamped sum saturates
    c[:8] = 2**31 - 1
    out = h.alloc(28 * n)
    h.dispatch(code, "dots", (n,), (64,), [out, h.buffer(a), h.buffer(b), h.buffer(c), n])
    got = h.read(out, np.int32, 7 * n).reshape(n, 7)
    acc = c
    for k in range(3):
        acc = _dot(a, (b.astype(np.int64) + k).astype(np.int32), acc, 8, True)
    want = np.stack([_dot(a, b, c, 8, True), _dot(a, b, c, 8, False),
                     _dot(a, b, c, 4, True), _dot(a, b, c, 4, False),
                     _dot(a, b, c, 16, True), _dot(a, b, c, 8, True, clamp=True), acc], axis=1)
    assert np.array_equal(got, want)
