"""gfx9's v_cvt_pknorm_i16_f32 / v_cvt_pknorm_u16_f32 (clang 22's
__builtin_amdgcn_cvt_pknorm_i16/u16 on gfx90a and gfx942): src0 to the low half, src1 to
the high half, each clamped to [-1, 1] (u16: [0, 1]), times 32767 (65535), rounded to
nearest even; NaN gives 0 (the ISA guides' f32_to_snorm / f32_to_unorm)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx9

SOURCE = Path(__file__).parent / "data" / "isa" / "gfx9_pknorm.cl"
N = 64


def _norm(x: float, lo: float, scale: int) -> int:
    if math.isnan(x):
        return 0
    v = float(np.float32(min(max(x, lo), 1.0)) * np.float32(scale))
    return int(np.rint(v)) & 0xFFFF


@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
def test_pknorm_packs_src0_low_src1_high(target: str):
    h = Harness(target)
    code = h.load(build_code_object(SOURCE.read_text(), "cl", mcpu=target))
    special = [-2.0, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 2.0, math.nan, 1 / 65535, 0.49999]
    rng = np.random.default_rng(3)
    values = np.concatenate([special, rng.uniform(-1.5, 1.5, 2 * N - len(special))])
    a = h.buffer(values.astype(np.float32))
    out = h.buffer(np.zeros(2 * N, np.uint32))
    h.dispatch(code, "pkn", (N,), (N,), [a, out])
    got = h.read(out, np.uint32, 2 * N).reshape(N, 2)
    x = values.astype(np.float32).astype(float)[0::2]
    y = values.astype(np.float32).astype(float)[1::2]
    snorm = [_norm(p, -1.0, 32767) | _norm(q, -1.0, 32767) << 16
             for p, q in zip(x, y, strict=True)]
    unorm = [_norm(q, 0.0, 65535) | _norm(p, 0.0, 65535) << 16
             for p, q in zip(x, y, strict=True)]
    assert got[:, 0].tolist() == snorm
    assert got[:, 1].tolist() == unorm
