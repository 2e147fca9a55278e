"""CDNA3 sparse MFMA (v_smfmac_*) compiled by clang from its builtins, against a numpy model
of the instruction as AMD's CDNA3 ISA guide defines it (on gfx942, and on gfx950, whose
fp8/bf8 are the OCP formats) ("Sparse Matrix Multiply", and the
index-set rules in LLVM's AMDGPU docs): A is 4:2 sparse (each lane keeps 2 of every 4 K
values of its row, their positions 2 bits each in the index VGPR; cbsz == 0: abid picks the
8-bit (16-bit data) or 16-bit (8-bit data) index set, else set 0), B dense, vdst is C and D.
The model below scatters the kept values into a dense A and multiplies; the executor instead
gathers B's rows (hsa/virtual/gfx9/smfmac.py): for valid 4:2 indices the two agree."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx9

# name: (builtin, A/B OpenCL casts, C/D type, M, N, kind, out, cbsz, abid)
_CASES = {
    "f16_16_set0": ("smfmac_f32_16x16x32_f16", "half4", "half8", "float4", 16, "f16", 0, 0),
    "f16_16_set2": ("smfmac_f32_16x16x32_f16", "half4", "half8", "float4", 16, "f16", 0, 2),
    "f16_16_cbsz": ("smfmac_f32_16x16x32_f16", "half4", "half8", "float4", 16, "f16", 1, 3),
    "bf16_16_set1": ("smfmac_f32_16x16x32_bf16", "short4", "short8", "float4", 16, "bf16",
                     0, 1),
    "f16_32_set3": ("smfmac_f32_32x32x16_f16", "half4", "half8", "float16", 32, "f16", 0,
                    3),
    "bf16_32_set0": ("smfmac_f32_32x32x16_bf16", "short4", "short8", "float16", 32,
                     "bf16", 0, 0),
    "i8_16_set1": ("smfmac_i32_16x16x64_i8", "int2", "int4", "int4", 16, "i8", 0, 1),
    "i8_32_set0": ("smfmac_i32_32x32x32_i8", "int2", "int4", "int16", 32, "i8", 0, 0),
    "fp8_16_set1": ("smfmac_f32_16x16x64_fp8_fp8", "int2", "int4", "float4", 16, "fp8",
                    0, 1),
    "bf8_32_set0": ("smfmac_f32_32x32x32_bf8_bf8", "int2", "int4", "float16", 32, "bf8",
                    0, 0),
}

# gfx950's own forms, twice gfx942's K: A 4 VGPRs, B 8, 16-bit index sets for 16-bit data
# and one 32-bit set for 8-bit data (as LLVM's verifier for them, llvm-project #193541)
_WIDE = {
    "w_f16_16_set1": ("smfmac_f32_16x16x64_f16", "half8", "half16", "float4", 16, "f16", 0, 1),
    "w_bf16_32_set0": ("smfmac_f32_32x32x32_bf16", "bf16x8", "bf16x16", "float16", 32,
                       "bf16", 0, 0),
    "w_f16_32_cbsz": ("smfmac_f32_32x32x32_f16", "half8", "half16", "float16", 32, "f16", 2, 1),
    "w_i8_16_set0": ("smfmac_i32_16x16x128_i8", "int4", "int8", "int4", 16, "i8", 0, 0),
    "w_bf8_32_set0": ("smfmac_f32_32x32x64_bf8_bf8", "int4", "int8", "float16", 32, "bf8",
                      0, 0),
}

_TYPEDEFS = "".join(  # no OpenCL headers here: the vector types by hand
    f"typedef {t} {name}{n} __attribute__((ext_vector_type({n})));\n"
    for t, name in (("unsigned int", "uint"), ("int", "int"), ("half", "half"),
                    ("short", "short"), ("float", "float"), ("__bf16", "bf16x"))
    for n in (2, 4, 8, 16))


def _source(cases: dict, a_words: str, b_words: str) -> str:
    return "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + _TYPEDEFS + "".join(
        f"__kernel void {name}(__global const {a_words} *a, __global const {b_words} *b,\n"
        f"                     __global const int *idx, __global {ct} *d) {{\n"
        f"  int l = __builtin_amdgcn_workitem_id_x();\n"
        f"  d[l] = __builtin_amdgcn_{builtin}(__builtin_astype(a[l], {ca}),\n"
        f"      __builtin_astype(b[l], {cb}), d[l], idx[l], {cbsz}, {abid});\n"
        f"}}\n"
        for name, (builtin, ca, cb, ct, _, _, cbsz, abid) in cases.items())


SOURCE = _source(_CASES, "uint2", "uint4")

_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "i8": np.int8,
          "fp8": ml_dtypes.float8_e4m3fnuz, "bf8": ml_dtypes.float8_e5m2fnuz}
_OCP = {"fp8": ml_dtypes.float8_e4m3fn, "bf8": ml_dtypes.float8_e5m2}  # gfx950's fp8 formats


@pytest.fixture(scope="module", params=["gfx942", "gfx950"])
def loaded(request):
    harness = Harness(request.param)
    return harness, harness.load(build_code_object(SOURCE, "cl", mcpu=request.param))


def _model(rng, mn: int, kind: str, cbsz: int, abid: int, ocp: bool, positions=None,
           b_regs: int = 4):
    """Lane registers (A words, B words, index, C) and the D each lane must end with.
    `positions`: the two kept positions of every group (else random distinct ones)."""
    dt = np.dtype(_OCP[kind] if ocp and kind in _OCP else _TYPES[kind])
    per_lane = 4 * b_regs // dt.itemsize  # B's values; A keeps half of them
    k = 64 * per_lane // mn
    groups = per_lane // 4
    bits = 2 * 2 * groups  # one index set: 2 bits per kept value
    if kind == "i8":
        kept = rng.integers(-128, 128, (64, 2 * groups)).astype(np.int8)
        b = rng.integers(-128, 128, (k, mn)).astype(np.int8)
    else:
        kept = rng.standard_normal((64, 2 * groups)).astype(dt)
        b = rng.standard_normal((k, mn)).astype(dt)
    index = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)  # other sets: noise
    chosen = index_set = abid if cbsz == 0 else 0
    a_dense = np.zeros((mn, k))
    for lane in range(64):
        row, slab = lane % mn, lane // mn
        word = 0
        for g in range(groups):  # two distinct positions of each group of 4, in order
            lo, hi = positions or sorted(rng.choice(4, 2, replace=False))
            word |= (int(lo) | int(hi) << 2) << (4 * g)
            for j, pos in enumerate((lo, hi)):
                a_dense[row, slab * per_lane + 4 * g + pos] += float(kept[lane, 2 * g + j])
        mask = (1 << bits) - 1
        index[lane] = (int(index[lane]) & ~(mask << (bits * chosen)) & 0xFFFFFFFF) | (
            word << (bits * index_set))
    b_lanes = np.zeros((64, per_lane), dt)
    for lane in range(64):
        b_lanes[lane] = b[(lane // mn) * per_lane:(lane // mn + 1) * per_lane, lane % mn]
    out = np.int32 if kind == "i8" else np.float32
    items = mn * mn // 64
    c = (rng.integers(-1000, 1000, (64, items)) if kind == "i8"
         else rng.standard_normal((64, items))).astype(out)
    product = a_dense @ b.astype(np.float64)
    expect = np.zeros((64, items))
    for lane in range(64):
        for r in range(items):  # D register r of lane l: the guide's row/column of it
            row = (r // 4) * 4 * (64 // mn) + 4 * (lane // mn) + r % 4
            expect[lane, r] = product[row, lane % mn] + float(c[lane, r])
    return kept.view(np.uint32), b_lanes.view(np.uint32), index, c, expect.astype(out)


@pytest.mark.parametrize("name", list(_CASES))
def test_smfmac_builtin_against_the_isa_guide(loaded, name):
    harness, code = loaded
    _, _, _, _, mn, kind, cbsz, abid = _CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    a, b, index, c, expect = _model(rng, mn, kind, cbsz, abid, harness.target == "gfx950")
    d = harness.buffer(c)
    harness.dispatch(code, name, (64,), (64,), [harness.buffer(a), harness.buffer(b),
                                                harness.buffer(index), d])
    got = harness.read(d, expect.dtype, expect.size).reshape(expect.shape)
    if kind == "i8":
        np.testing.assert_array_equal(got, expect)
    else:  # the model sums in float64 too: at most the final rounding can differ
        np.testing.assert_allclose(got, expect, rtol=2e-7, atol=1e-6)


@pytest.mark.parametrize("positions", [(0, 1), (1, 1)])
def test_smfmac_reads_only_the_kept_positions(loaded, positions):
    """Inf and NaN in B where A keeps nothing do not reach D; two kept values that name the
    same position (an index the 4:2 rule never makes; the guide does not say what hardware
    does, the model here lets both multiply that B value) both count."""
    harness, code = loaded
    rng = np.random.default_rng(7)
    a, b, index, c, expect = _model(rng, 16, "f16", 0, 0, False, positions)
    halves = b.view(np.float16)  # (64 lanes, 8 K values): positions 2 and 3 of each group
    halves[:, 2::4], halves[:, 3::4] = np.inf, np.nan
    d = harness.buffer(c)
    harness.dispatch(code, "f16_16_set0", (64,), (64,), [harness.buffer(a), harness.buffer(b),
                                                         harness.buffer(index), d])
    got = harness.read(d, np.float32, expect.size).reshape(expect.shape)
    np.testing.assert_allclose(got, expect, rtol=2e-7, atol=1e-6)


@pytest.fixture(scope="module")
def wide():
    harness = Harness("gfx950")
    return harness, harness.load(build_code_object(_source(_WIDE, "uint4", "uint8"), "cl",
                                                   mcpu="gfx950"))


@pytest.mark.parametrize("name", list(_WIDE))
def test_gfx950_wide_smfmac_builtin(wide, name):
    """gfx950's own sparse MFMA: the same model with 16 B values (and 8 kept A values, or
    16 for 8-bit data) per lane. Their slab per lane (consecutive K) follows gfx942's forms
    and gfx950's dense MFMA here; nothing but the ISA tables' pattern checks it."""
    harness, code = wide
    _, _, _, _, mn, kind, cbsz, abid = _WIDE[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    a, b, index, c, expect = _model(rng, mn, kind, cbsz, abid, True, b_regs=8)
    d = harness.buffer(c)
    harness.dispatch(code, name, (64,), (64,), [harness.buffer(a), harness.buffer(b),
                                                harness.buffer(index), d])
    got = harness.read(d, expect.dtype, expect.size).reshape(expect.shape)
    if kind == "i8":
        np.testing.assert_array_equal(got, expect)
    else:
        np.testing.assert_allclose(got, expect, rtol=2e-7, atol=1e-6)
