"""8-bit float to f32 conversions as clang 22 emits them, against ml_dtypes' formats.

`tests/data/isa/fp8_to_f32.cl` (`__builtin_amdgcn_cvt_f32_fp8/bf8`, `cvt_pk_f32_fp8/bf8`)
compiles to `v_cvt_f32_fp8_sdwa ... src0_sel:BYTE_n` and `v_cvt_pk_f32_fp8_sdwa ...
src0_sel:WORD_1` on gfx942/gfx950, and to VOP1 / VOP3 `byte_sel:n` / `op_sel:[1,0]` on
gfx1201. Each lane's word holds four codes; over the lanes every one of the 256 codes sits in
every byte. The truth is ml_dtypes (not written here): gfx942 converts the FNUZ formats
(float8_e4m3fnuz, float8_e5m2fnuz), gfx950 and gfx12 OCP's (float8_e4m3fn, float8_e5m2),
as the MI300 / MI355 / RDNA4 ISA guides say; NaN codes must give a NaN."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = [pytest.mark.isa_gfx9, pytest.mark.isa_gfx12]

SOURCE = Path(__file__).parent / "data" / "isa" / "fp8_to_f32.cl"
N = 256


def _decode(codes: np.ndarray, kind: str, ocp: bool) -> np.ndarray:
    dtype = {("fp8", False): ml_dtypes.float8_e4m3fnuz, ("bf8", False): ml_dtypes.float8_e5m2fnuz,
             ("fp8", True): ml_dtypes.float8_e4m3fn, ("bf8", True): ml_dtypes.float8_e5m2}
    return codes.astype(np.uint8).view(dtype[kind, ocp]).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.all((got == want) & (np.signbit(got) == np.signbit(want))
                       | (np.isnan(got) & np.isnan(want))))


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1201"])
def test_fp8_and_bf8_to_f32(target: str):
    h = Harness(target)
    code = h.load(build_code_object(SOURCE.read_text(), "cl", mcpu=target))
    lane = np.arange(N, dtype=np.uint32)
    # byte k of lane i holds code (i + 67 k) mod 256: every code in every byte
    codes = np.stack([(lane + 67 * k) % 256 for k in range(4)], axis=1)
    words = (codes[:, 0] | codes[:, 1] << 8 | codes[:, 2] << 16 | codes[:, 3] << 24)
    src = h.buffer(words.astype(np.uint32))
    out = h.buffer(np.zeros(12 * N, np.float32))
    h.dispatch(code, "f8", (N,), (N,), [src, out])
    got = h.read(out, np.float32, 12 * N).reshape(N, 12)
    ocp = target != "gfx942"
    fp8 = [_decode(codes[:, k], "fp8", ocp) for k in range(4)]
    bf8 = [_decode(codes[:, k], "bf8", ocp) for k in range(4)]
    want = [fp8[0], fp8[1], fp8[2], fp8[3], bf8[0], bf8[3],
            fp8[0], fp8[1], fp8[2], fp8[3], bf8[2], bf8[3]]
    for k, w in enumerate(want):
        assert _same(got[:, k], w), (target, k)
    # the NaN codes: E4M3FN has 2 of 256 (0x7f, 0xff), E4M3FNUZ one (0x80)
    assert np.isnan(got[:, :4]).sum() == (2 if ocp else 1) * 4
