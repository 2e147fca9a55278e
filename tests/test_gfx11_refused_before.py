"""Semantics of gfx11 opcodes the executor refused before (issue 12's last part): each is
checked against a model written here from the RDNA3 ISA's documented semantics, with an
independent source of numbers where one exists (mpmath's 2/pi, numpy's conversions).

Each kernel runs one wave32 workgroup per 32 lanes: s[4:5] = output, s[6:7] = input; v0 is
the lane id, v10 = 4 * global lane. The body leaves its result in v4 (and v5 for 64-bit)."""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx11

u32, f32, f64 = np.uint32, np.float32, np.float64


def kernel_source(name: str, body: str, lds: int = 0, wave: int = 32) -> str:
    return f"""
.amdgcn_target "amdgcn-amd-amdhsa--gfx1100"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
  s_load_b128 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v10, 2, v0
  s_lshl_b32 s3, s2, 7
  v_add_nc_u32 v10, s3, v10
  s_waitcnt lgkmcnt(0)
{body}
  s_endpgm
.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_next_free_vgpr 32
  .amdhsa_next_free_sgpr 32
  .amdhsa_user_sgpr_count 2
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_group_segment_fixed_size {lds}
  .amdhsa_kernarg_size 16
  .amdhsa_wavefront_size32 {int(wave == 32)}
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: 16
    .group_segment_fixed_size: {lds}
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: {wave}
    .sgpr_count: 32
    .vgpr_count: 32
    .max_flat_workgroup_size: {wave}
    .args:
      - {{.offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global}}
...
.end_amdgpu_metadata
"""


def run(body: str, inputs: np.ndarray, out_words: int, lanes: int = 32, lds: int = 0
        ) -> np.ndarray:
    """Run `body` over `lanes` lanes; the output buffer (out_words dwords) comes back."""
    h = Harness()
    code = h.load(build_code_object(kernel_source("k", body, lds), "assembler"))
    src = h.buffer(np.ascontiguousarray(inputs).view(u32).reshape(-1))
    out = h.buffer(np.zeros(out_words, u32))
    h.dispatch(code, "k", (lanes,), (32,), [out, src])
    return h.read(out, u32, out_words)


# --- v_trig_preop_f64 ----------------------------------------------------------------------------
def trig_preop_model(x: float, segment: int) -> float:
    """The RDNA3 ISA pseudo-code, with 2/pi from mpmath (not from the executor's formula)."""
    import mpmath

    mpmath.mp.prec = 1400
    frac = int(mpmath.floor(2 / mpmath.pi * mpmath.mpf(2) ** 1201))  # b_1200 .. b_0
    exp = (np.array([x], f64).view(np.uint64)[0] >> np.uint64(52)) & np.uint64(0x7FF)
    shift = (segment & 31) * 53 + max(int(exp) - 1077, 0)
    seg = ((frac << shift) >> (1201 - 53)) & ((1 << 53) - 1)
    scale = -53 - shift + (128 if exp >= 1968 else 0)
    return float(mpmath.ldexp(seg, scale)) if seg else 0.0


def test_trig_preop_f64_matches_the_isa_model():
    pytest.importorskip("mpmath")
    rng = np.random.default_rng(12)
    x = np.concatenate([[1.0, 0.5, 3.0, 1e10, 2.0**80, 1e300, 1.7e308, 2.0**-1000],
                        np.ldexp(1 + rng.random(24), rng.integers(-50, 1000, 24))])
    segments = np.concatenate([[0, 1, 2, 3, 0, 0, 1, 2], rng.integers(0, 32, 24)]).astype(u32)
    inputs = np.zeros(32 * 4, u32)  # x as f64 at [2i, 2i+1], segment at 64 + i
    inputs[:64] = x.view(u32)
    inputs[64:96] = segments
    body = """  v_lshlrev_b32 v11, 1, v10
  global_load_b64 v[2:3], v11, s[6:7]
  global_load_b32 v6, v10, s[6:7] offset:256
  s_waitcnt vmcnt(0)
  v_trig_preop_f64 v[4:5], v[2:3], v6
  global_store_b64 v11, v[4:5], s[4:5]"""
    got = run(body, inputs, 64).view(f64)
    want = np.array([trig_preop_model(float(v), int(s)) for v, s in zip(x, segments,
                                                                         strict=True)])
    assert np.array_equal(got, want), [(v, s, g, w) for v, s, g, w in zip(
        x, segments, got, want, strict=True) if g != w][:4]
    assert got[0] == 0.6366197723675813  # 2/pi truncated to 53 bits (nearest ends ...814)
    # lanes 0-2 (exponents below 1077) hold segments 0, 1, 2: together 2/pi to 159 bits
    import mpmath

    mpmath.mp.prec = 300
    total = sum(mpmath.mpf(float(v)) for v in got[:3])
    assert abs(total - 2 / mpmath.pi) < mpmath.mpf(2) ** -159


# --- typed buffer formats ------------------------------------------------------------------------
def format_model(name: str, raw: bytes) -> list[float | int]:
    """A format element's x, y, z, w as the ISA describes the conversion, lane by lane in
    Python numbers (components listed from the most significant bits down in the name)."""
    *sizes, kind = name.split("_")
    bits = [int(b) for b in reversed(sizes)]
    value = int.from_bytes(raw, "little")
    out: list[float | int] = []
    pos = 0
    for b in bits:
        v = (value >> pos) & ((1 << b) - 1)
        pos += b
        s = v - (1 << b) if v >> (b - 1) else v
        if kind == "UNORM":
            out.append(v / (2**b - 1))
        elif kind == "SNORM":
            out.append(max(s / (2 ** (b - 1) - 1), -1.0))
        elif kind == "USCALED":
            out.append(float(v))
        elif kind == "SSCALED":
            out.append(float(s))
        elif kind == "UINT":
            out.append(v)
        elif kind == "SINT":
            out.append(s)
        elif b == 32:
            out.append(float(np.array([v], u32).view(f32)[0]))
        elif b == 16:
            out.append(float(np.array([v], np.uint16).view(np.float16)[0]))
        else:  # unsigned 11/10-bit float: 5-bit exponent (bias 15), b - 5 mantissa bits
            m, e = v & ((1 << (b - 5)) - 1), v >> (b - 5)
            out.append(float("nan") if e == 31 and m else float("inf") if e == 31 else
                       (m / 2 ** (b - 5)) * 2.0**-14 if e == 0 else
                       (1 + m / 2 ** (b - 5)) * 2.0 ** (e - 15))
    floats = kind not in ("UINT", "SINT")
    while len(out) < 4:
        out.append((1.0 if floats else 1) if len(out) == 3 else (0.0 if floats else 0))
    return out


def as_bits(values: list, floats: bool) -> np.ndarray:
    if floats:
        return np.array(values, f32).view(u32)
    return np.array(values, np.int64).astype(np.int32).view(u32)


FORMATS = {1: "8_UNORM", 2: "8_SNORM", 10: "16_SSCALED", 13: "16_FLOAT", 16: "8_8_USCALED",
           18: "8_8_UINT", 22: "32_FLOAT", 24: "16_16_SNORM", 30: "10_11_11_FLOAT",
           31: "11_11_10_FLOAT", 35: "10_10_10_2_SINT", 36: "2_10_10_10_UNORM",
           42: "8_8_8_8_UNORM", 57: "16_16_16_16_FLOAT", 61: "32_32_32_32_UINT"}
XYZW = 4 | 5 << 3 | 6 << 6 | 7 << 9  # DST_SEL x, y, z, w


def vsharp(word3: int) -> str:
    """s[16:19] = a V# over the input buffer (num_records 4096) with word 3 `word3`."""
    return (f"  s_mov_b32 s16, s6\n  s_and_b32 s17, s7, 0xffff\n  s_movk_i32 s18, 0x1000\n"
            f"  s_mov_b32 s19, 0x{word3:x}\n")


def element_bytes(rng, name: str) -> bytes:
    size = sum(int(b) for b in name.split("_")[:-1]) // 8
    data = bytearray(rng.integers(0, 256, 32 * size, dtype=np.uint8).tobytes())
    if "FLOAT" in name and name.startswith("16"):  # finite halves (NaN payloads aside)
        halves = np.frombuffer(bytes(data), np.uint16).copy()
        halves &= np.uint16(0xBBFF)
        data = bytearray(halves.tobytes())
    return bytes(data)


@pytest.mark.parametrize("number", sorted(FORMATS))
def test_buffer_load_format_xyzw_converts_each_format(number):
    name = FORMATS[number]
    rng = np.random.default_rng(number)
    data = element_bytes(rng, name)
    size = len(data) // 32
    body = vsharp(XYZW | number << 12) + f"""  v_mul_u32_u24 v5, {size}, v0
  buffer_load_format_xyzw v[20:23], v5, s[16:19], 0 offen
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v11, 2, v10
  global_store_b128 v11, v[20:23], s[4:5]"""
    got = run(body, np.frombuffer(data + bytes(4096), np.uint8), 128).reshape(32, 4)
    floats = name.split("_")[-1] not in ("UINT", "SINT")
    want = np.stack([as_bits(format_model(name, data[i * size:(i + 1) * size]), floats)
                     for i in range(32)])
    if floats:  # f32 rounding of the model's double division may differ by one ulp
        np.testing.assert_allclose(got.view(f32), want.view(f32), rtol=1e-7, atol=0)
    else:
        assert np.array_equal(got, want)


def test_dst_sel_d16_and_hi_forms():
    """DST_SEL picks channels (w, 1, z, 0 here); d16 packs f16 halves; d16_hi keeps the low
    half; format_x loads only x."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
    sel = 7 | 1 << 3 | 6 << 6 | 0 << 9
    body = vsharp(sel | 42 << 12) + """  v_lshlrev_b32 v5, 2, v0
  v_mov_b32 v20, 0x12345678
  v_mov_b32 v21, 0x9abcdef0
  v_mov_b32 v22, 0x0badf00d
  buffer_load_format_xyzw v[12:15], v5, s[16:19], 0 offen
  buffer_load_d16_format_xyz v[20:21], v5, s[16:19], 0 offen
  buffer_load_d16_hi_format_x v22, v5, s[16:19], 0 offen
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v11, 5, v0
  global_store_b128 v11, v[12:15], s[4:5]
  global_store_b96 v11, v[20:22], s[4:5] offset:16"""
    got = run(body, np.frombuffer(data + bytes(4096), np.uint8), 256).reshape(32, 8)
    for lane in range(32):
        x, y, z, w = format_model("8_8_8_8_UNORM", data[4 * lane:4 * lane + 4])
        picked = [w, 1.0, z, 0.0]
        np.testing.assert_allclose(got[lane, :4].view(f32), np.array(picked, f32), rtol=1e-7)
        h = np.array(picked, f32).astype(np.float16).view(np.uint16).astype(u32)
        assert got[lane, 4] == h[0] | h[1] << 16
        assert got[lane, 5] == (0x9ABCDEF0 & 0xFFFF0000) | h[2]  # odd count: high half kept
        assert got[lane, 6] == (0x0BADF00D & 0xFFFF) | h[0] << 16


def test_tbuffer_takes_the_instruction_format_and_stores_round_trip():
    """tbuffer_load uses its own format (the V# says 32_FLOAT); stores convert back: UNORM
    bytes read and written again come out unchanged, f32 -> 16_16_FLOAT rounds to f16,
    and a d16 store of two halves writes them as they are."""
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
    floats = (rng.standard_normal(64) * 100).astype(f32)
    inputs = np.frombuffer(data + floats.tobytes() + bytes(4096), np.uint8)
    body = vsharp(XYZW | 22 << 12) + """  v_lshlrev_b32 v5, 2, v0
  tbuffer_load_format_xyzw v[12:15], v5, s[16:19], 0 format:[BUF_FMT_8_8_8_8_UNORM] offen
  s_waitcnt vmcnt(0)
  v_add_nc_u32 v6, 0x400, v5
  tbuffer_store_format_xyzw v[12:15], v6, s[16:19], 0 format:[BUF_FMT_8_8_8_8_UNORM] offen
  v_lshlrev_b32 v7, 3, v0
  buffer_load_b64 v[16:17], v7, s[16:19], 0 offen offset:128
  s_waitcnt vmcnt(0)
  v_add_nc_u32 v6, 0x600, v5
  tbuffer_store_format_xy v[16:17], v6, s[16:19], 0 format:[BUF_FMT_16_16_FLOAT] offen
  v_cvt_f16_f32 v18, v16
  v_cvt_f16_f32 v19, v17
  v_pack_b32_f16 v18, v18, v19
  v_add_nc_u32 v6, 0x800, v5
  tbuffer_store_d16_format_xy v18, v6, s[16:19], 0 format:[BUF_FMT_16_16_FLOAT] offen
  s_waitcnt vmcnt(0)
  buffer_load_b32 v20, v5, s[16:19], 0 offen offset:0x400
  buffer_load_b32 v21, v5, s[16:19], 0 offen offset:0x600
  buffer_load_b32 v22, v5, s[16:19], 0 offen offset:0x800
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v11, 4, v0
  global_store_b128 v11, v[12:15], s[4:5]
  global_store_b96 v11, v[20:22], s[4:5] offset:512"""
    got = run(body, inputs, 256)
    loaded = got[:128].reshape(32, 4).view(f32)
    for lane in range(32):
        np.testing.assert_allclose(loaded[lane], format_model(
            "8_8_8_8_UNORM", data[4 * lane:4 * lane + 4]), rtol=1e-7)
    stored = got[128:256].reshape(32, 4)
    assert np.array_equal(stored[:, 0], np.frombuffer(data, u32))  # UNORM round trip
    halves = floats.astype(np.float16).view(u32)
    assert np.array_equal(stored[:, 1], halves)  # f32 -> 16_16_FLOAT
    assert np.array_equal(stored[:, 2], halves)  # d16 halves written as they are


def test_small_float_store_rounds_and_saturates():
    from hsa.virtual.isa import bufformat

    fmt = bufformat.format_of(31)  # 11_11_10_FLOAT: x 10 bits, y and z 11 bits
    assert fmt is not None and [c[2] for c in fmt.components] == [10, 11, 11]
    values = np.array([1.0, 0.5, 2.0**-14, 2.0**-20, 65000, 1e9, -3, 3.1415], f32)
    for b in (10, 11):
        mant = b - 5
        bits = bufformat._f32_to_small_float(values, mant)
        back = [format_model(f"{b}_FLOAT", int(v).to_bytes(2, "little"))[0] for v in bits]
        for x, y in zip(values.tolist(), back, strict=True):
            if x < 0:
                assert y == 0.0
            elif x > (2 - 2.0**-mant) * 2.0**15 * (1 + 2.0 ** -(mant + 2)):
                assert y == float("inf")
            else:  # nearest representable: within half a step of the value
                e = max(int(np.floor(np.log2(x))), -14)
                assert abs(y - x) <= 2.0 ** (e - mant) / 2 * (1 + 1e-12), (b, x, y)


# --- buffer loads to LDS -------------------------------------------------------------------------
def _mubuf_words(name: str, vaddr: int, srsrc: int, offset: int) -> str:
    """`.long` words of a MUBUF instruction (offen, soffset 0), encoded by the RDNA3 layout;
    clang 22 no longer assembles the LDS-loading forms for gfx1100."""
    from hsa.virtual.gfx11 import decoder as dec

    op = next(k for k, v in dec.opcode_tables()["MUBUF"].items() if v["name"] == name)
    w0 = 0x38 << 26 | op << 18 | offset
    w1 = 0x80 << 24 | 1 << 22 | (srsrc // 4) << 16 | vaddr
    return f"  .long 0x{w0:08x}, 0x{w1:08x}"


@pytest.mark.parametrize("kind", ["b32", "i8", "u16", "format_x"])
def test_buffer_load_lds_writes_lds_at_m0(kind):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()
    size = {"b32": 4, "i8": 1, "u16": 2, "format_x": 2}[kind]
    word3 = XYZW | 7 << 12  # 16_UNORM for format_x
    body = vsharp(word3) + f"""  v_mul_u32_u24 v5, {size}, v0
  s_mov_b32 m0, 0x10040
  v_mov_b32 v20, 0
  ds_store_b32 v10, v20
  ds_store_b32 v10, v20 offset:128
  ds_store_b32 v10, v20 offset:256
  s_waitcnt lgkmcnt(0)
{_mubuf_words("buffer_load_lds_" + kind, 5, 16, 8)}
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v6, 2, v0
  ds_load_b32 v21, v6 offset:72  ; M0[15:0] 64 + offset 8 + 4 * lane
  s_waitcnt lgkmcnt(0)
  v_lshlrev_b32 v11, 2, v10
  global_store_b32 v10, v21, s[4:5]"""
    got = run(body, np.frombuffer(data + bytes(4096), np.uint8), 32, lds=512)
    raw = np.frombuffer(data[8:8 + 32 * size], {1: np.int8, 2: np.uint16, 4: u32}[size])
    if kind == "format_x":
        want = (raw / 65535.0).astype(f32).view(u32)
    else:
        want = raw.astype(np.int64).astype(np.int32).view(u32)
    assert np.array_equal(got, want), (got[:4], want[:4])


def test_format_instructions_never_let_an_exception_escape():
    """Fuzz: every format number 0-127 with random DST_SEL, random element bytes (NaN and
    infinity patterns included) and random offsets, through each typed load, d16 form,
    store and the LDS-loading format_x: a dispatch completes or stops with a queue error."""
    from amdgpu.errors import HsaError

    h = Harness()
    body = """  s_load_b32 s19, s[6:7], 0x0
  s_mov_b32 s16, s6
  s_and_b32 s17, s7, 0xffff
  s_movk_i32 s18, 0x200
  s_mov_b32 m0, 0x40
  s_waitcnt lgkmcnt(0)
  global_load_b32 v5, v10, s[6:7] offset:4
  s_waitcnt vmcnt(0)
  v_and_b32 v5, 0x3ff, v5
  buffer_load_format_xyzw v[12:15], v5, s[16:19], 0 offen
  buffer_load_d16_format_xyz v[16:17], v5, s[16:19], 0 offen
  buffer_load_d16_hi_format_x v18, v5, s[16:19], 0 offen
  buffer_load_format_xy v[20:21], v5, s[16:19], 0 idxen
  s_waitcnt vmcnt(0)
  buffer_store_format_xyzw v[12:15], v5, s[16:19], 0 offen offset:0x100
  buffer_store_d16_format_xy v16, v5, s[16:19], 0 offen offset:0x100
  buffer_store_d16_hi_format_x v18, v5, s[16:19], 0 offen offset:0x100
""" + _mubuf_words("buffer_load_lds_format_x", 5, 16, 0) + """
  s_waitcnt vmcnt(0)
  global_store_b128 v10, v[12:15], s[4:5]"""
    code = h.load(build_code_object(kernel_source("k", body, 256), "assembler"))
    rng = np.random.default_rng(2026)
    specials = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7C00FC00, 0x7E00FFFF,
                         0xFFFFFFFF, 0x80000000, 0], u32)
    stopped = 0
    for number in range(128):
        data = rng.integers(0, 2**32, 1024, dtype=np.uint64).astype(u32)
        data[2::3] = specials[rng.integers(0, 8, data[2::3].size)]
        data[0] = int(rng.integers(0, 4096)) | number << 12  # DST_SEL random, the format
        data[1:33] = rng.integers(0, 2048, 32)  # per-lane offsets, some out of range
        src, out = h.buffer(data), h.alloc(4 * 256)
        with np.errstate(all="raise"):  # the executor must silence its own float warnings
            try:
                h.dispatch(code, "k", (32,), (32,), [out, src])
            except HsaError:
                stopped += 1
    assert stopped == 0  # every format either converts or reads as zeros


# --- ALU and SALU opcodes ------------------------------------------------------------------------
N = 256  # 8 waves


def run_alu(body: str, a, b, c, out_words_per_lane: int = 1) -> np.ndarray:
    """v1, v2, v3 = a, b, c of the lane (v[1:2] = a when the body asks for 64-bit a via
    v[6:7] = (a, b)); the body leaves v4 (v[4:5]) per lane."""
    load = """  global_load_b32 v1, v10, s[6:7]
  global_load_b32 v2, v10, s[6:7] offset:1024
  global_load_b32 v3, v10, s[6:7] offset:2048
  s_waitcnt vmcnt(0)
"""
    store = ("  global_store_b32 v10, v4, s[4:5]" if out_words_per_lane == 1 else
             "  v_lshlrev_b32 v11, 1, v10\n  global_store_b64 v11, v[4:5], s[4:5]")
    inputs = np.concatenate([a, b, c]).astype(u32)
    got = run(load + body + "\n" + store, inputs, N * out_words_per_lane, lanes=N)
    return got if out_words_per_lane == 1 else got.reshape(N, out_words_per_lane)


def _bytes(x: int) -> list[int]:
    return [(x >> s) & 255 for s in range(0, 32, 8)]


def test_lerp_u8():
    rng = np.random.default_rng(21)
    a, b, c = (rng.integers(0, 2**32, N, dtype=np.uint64).astype(u32) for _ in range(3))
    got = run_alu("  v_lerp_u8 v4, v1, v2, v3", a, b, c)
    for i in range(N):
        x, y, z = int(a[i]), int(b[i]), int(c[i])
        lerp = sum(((bx + by + (bz & 1)) >> 1) << (8 * k) for k, (bx, by, bz) in enumerate(
            zip(_bytes(x), _bytes(y), _bytes(z), strict=True)))
        assert got[i] == lerp, i


def test_sad_hi_u8():
    rng = np.random.default_rng(22)
    a, b, c = (rng.integers(0, 2**32, N, dtype=np.uint64).astype(u32) for _ in range(3))
    got = run_alu("  v_sad_hi_u8 v4, v1, v2, v3", a, b, c)
    for i in range(N):
        sad = sum(abs(p - q) for p, q in zip(_bytes(int(a[i])), _bytes(int(b[i])),
                                             strict=True))
        assert got[i] == ((sad << 16) + int(c[i])) & 0xFFFFFFFF


@pytest.mark.parametrize("masked", [False, True])
def test_qsad_pk_u16_u8(masked):
    rng = np.random.default_rng(23 + masked)
    a, b, c = (rng.integers(0, 2**32, N, dtype=np.uint64).astype(u32) for _ in range(3))
    b[::4] &= u32(0x00FF00FF)  # zero reference bytes, which the masked form skips
    op = "v_mqsad_pk_u16_u8" if masked else "v_qsad_pk_u16_u8"
    # S0 = (a, b) as 64 bits, S1 = b, S2 = (c, a)
    got = run_alu(f"  v_mov_b32 v6, v1\n  v_mov_b32 v7, v2\n  v_mov_b32 v8, v3\n"
                  f"  v_mov_b32 v9, v1\n  {op} v[4:5], v[6:7], v2, v[8:9]", a, b, c, 2)
    for i in range(N):
        s0 = int(a[i]) | int(b[i]) << 32
        s2 = int(c[i]) | int(a[i]) << 32
        ref = _bytes(int(b[i]))
        want = 0
        for k in range(4):
            window = _bytes((s0 >> (8 * k)) & 0xFFFFFFFF)
            sad = sum(abs(p - q) for p, q in zip(window, ref, strict=True) if not (
                masked and q == 0))
            want |= ((sad + ((s2 >> (16 * k)) & 0xFFFF)) & 0xFFFF) << (16 * k)
        assert (int(got[i, 0]) | int(got[i, 1]) << 32) == want, i


def cube_model(x: float, y: float, z: float) -> tuple[float, float, float, float]:
    """(id, sc, tc, ma) of the RDNA3 pseudo-code, in Python floats."""
    if abs(z) >= abs(x) and abs(z) >= abs(y):
        return (5.0 if z < 0 else 4.0), (-x if z < 0 else x), -y, 2 * z
    if abs(y) >= abs(x):
        return (3.0 if y < 0 else 2.0), x, (-z if y < 0 else z), 2 * y
    return (1.0 if x < 0 else 0.0), (z if x < 0 else -z), -y, 2 * x


def test_cube_ops():
    rng = np.random.default_rng(24)
    xyz = rng.standard_normal((3, N)).astype(f32)
    xyz[:, ::7] = np.round(xyz[:, ::7])  # ties between axes
    a, b, c = (xyz[k].view(u32) for k in range(3))
    got = {}
    for op in ("id", "sc", "tc", "ma"):
        got[op] = run_alu(f"  v_cube{op}_f32 v4, v1, v2, v3", a, b, c).view(f32)
    for i in range(N):
        want = cube_model(*(float(v) for v in xyz[:, i]))
        assert tuple(float(got[op][i]) for op in ("id", "sc", "tc", "ma")) == tuple(
            float(np.float32(w)) for w in want), i


def test_scalar_quad_ops_b64():
    """s_wqm_b64, s_quadmask_b64 (with SCC) and s_bitreplicate_b64_b32, one value per wave."""
    rng = np.random.default_rng(25)
    a, b, c = (rng.integers(0, 2**32, N, dtype=np.uint64).astype(u32) for _ in range(3))
    a[::64] = 0  # some zero inputs for SCC
    a[32::64] &= u32(0x00F000F0)
    body = """  v_readfirstlane_b32 s8, v1
  v_readfirstlane_b32 s9, v2
  s_and_b32 s9, s9, s8
  s_wqm_b64 s[12:13], s[8:9]
  s_cselect_b32 s20, 1, 0
  s_quadmask_b64 s[14:15], s[8:9]
  s_cselect_b32 s21, 1, 0
  s_bitreplicate_b64_b32 s[16:17], s8
  v_cmp_eq_u32_e64 s22, 1, v0
  v_mov_b32 v4, s12
  v_cndmask_b32 v4, v4, s13, s22
  v_cmp_eq_u32_e64 s22, 2, v0
  v_cndmask_b32 v4, v4, s14, s22
  v_cmp_eq_u32_e64 s22, 3, v0
  v_cndmask_b32 v4, v4, s15, s22
  v_cmp_eq_u32_e64 s22, 4, v0
  v_cndmask_b32 v4, v4, s16, s22
  v_cmp_eq_u32_e64 s22, 5, v0
  v_cndmask_b32 v4, v4, s17, s22
  v_cmp_eq_u32_e64 s22, 6, v0
  v_cndmask_b32 v4, v4, s20, s22
  v_cmp_eq_u32_e64 s22, 7, v0
  v_cndmask_b32 v4, v4, s21, s22"""
    got = run_alu(body, a, b, c).reshape(8, 32)
    for w in range(8):
        x = int(a[32 * w]) | (int(b[32 * w]) & int(a[32 * w])) << 32
        wqm = sum(0xF << (4 * q) for q in range(16) if (x >> (4 * q)) & 0xF)
        quad = sum(1 << q for q in range(16) if (x >> (4 * q)) & 0xF)
        rep = sum(3 << (2 * i) for i in range(32) if (int(a[32 * w]) >> i) & 1)
        want = [wqm & M, wqm >> 32, quad & M, quad >> 32, rep & M, rep >> 32, int(wqm != 0),
                int(quad != 0)]
        assert [int(v) for v in got[w, :8]] == want, w


M = 0xFFFFFFFF


def test_permlane64_swaps_wave64_halves_and_is_refused_in_wave32():
    """In a wave32 kernel the instruction is refused by name (LLVM folds
    it away in wave32); on a 64-lane wave group the core swaps the halves."""
    from amdgpu.errors import IllegalInstruction
    from hsa.virtual.gfx11 import decoder as dec
    from hsa.virtual.gfx11.semantics import compile_gfx11
    from hsa.virtual.isa.state import WaveGroup

    op = next(k for k, v in dec.opcode_tables()["VOP1"].items()
              if v["name"] == "v_permlane64_b32")
    inst = dec.decode_one([0x3F << 25 | 4 << 17 | op << 9 | (256 + 1), 0, 0], 0, 0)
    assert inst.name == "v_permlane64_b32"
    fn = compile_gfx11(inst).fn
    v = np.zeros((8, 2, 64), u32)
    v[1] = np.arange(128, dtype=u32).reshape(2, 64) * 5 + 1
    g = WaveGroup(np.zeros((2, 128), u32), v, np.zeros(2, bool), np.arange(2), 0)
    g.s[:, dec.EXEC_LO] = g.s[:, dec.EXEC_HI] = 0xFFFFFFFF
    fn(g)
    assert np.array_equal(g.v[4], v[1][:, np.arange(64) ^ 32])

    body = """  v_lshlrev_b32 v10, 2, v0
  v_permlane64_b32 v4, v0
  global_store_b32 v10, v4, s[4:5]"""
    h = Harness()
    code = h.load(build_code_object(kernel_source("k", body), "assembler"))
    with pytest.raises(IllegalInstruction, match="v_permlane64_b32"):
        h.dispatch(code, "k", (32,), (32,), [h.alloc(128), h.alloc(128)])


def test_mqsad_u32_u8():
    rng = np.random.default_rng(26)
    a, b, c = (rng.integers(0, 2**32, N, dtype=np.uint64).astype(u32) for _ in range(3))
    b[::3] &= u32(0xFF00FF00)
    # S0 = (a, c), S1 = b, S2 = (c, a, b, 5); the result overwrites S2's registers
    body = """  v_mov_b32 v6, v1
  v_mov_b32 v7, v3
  v_mov_b32 v12, v3
  v_mov_b32 v13, v1
  v_mov_b32 v14, v2
  v_mov_b32 v15, 5
  v_mqsad_u32_u8 v[12:15], v[6:7], v2, v[12:15]
  v_lshlrev_b32 v11, 2, v10
  global_store_b128 v11, v[12:15], s[4:5]"""
    load = """  global_load_b32 v1, v10, s[6:7]
  global_load_b32 v2, v10, s[6:7] offset:1024
  global_load_b32 v3, v10, s[6:7] offset:2048
  s_waitcnt vmcnt(0)
"""
    got = run(load + body, np.concatenate([a, b, c]), 4 * N, lanes=N).reshape(N, 4)
    for i in range(N):
        s0 = int(a[i]) | int(c[i]) << 32
        ref = _bytes(int(b[i]))
        acc = [int(c[i]), int(a[i]), int(b[i]), 5]
        want = []
        for k in range(4):
            window = _bytes((s0 >> (8 * k)) & 0xFFFFFFFF)
            sad = sum(abs(p - q) for p, q in zip(window, ref, strict=True) if q)
            want.append((sad + acc[k]) & 0xFFFFFFFF)
        assert [int(x) for x in got[i]] == want, i
