"""Image loads, stores and samples of compute kernels on gfx11, gfx90a and gfx1201 (issue
32): clang 22's image builtins (tests/data/isa/images.cl: image_load / image_store, 1D, 2D,
3D, 1D and 2D arrays, DMASK, image_sample(_lz)) on the virtual gfx1100, gfx90a and gfx1201,
through T# descriptors written here bit for bit as ROCr's image managers write them: gfx11's
(image_manager_gfx11.cpp, resource_gfx11.h: linear layout, the unified format, DST_SEL
swizzle, PITCH-1 for 1D/2D, DEPTH-1 for 3D and arrays), gfx12's (resource_gfx12.h: FORMAT
at word 1 [24:17], PITCH-1 in word 4's DEPTH for 1D/2D) and gfx9's (image_manager_ai.cpp:
DATA/NUM_FORMAT, PITCH-1 beside DEPTH-1 in word 4), against numpy's reading of the same
texels; point samples against numpy's nearest texel, bilinear samples against Vulkan's
linear filter formula; HIP 6.4's tex2D for gfx1201 too. What is not modelled (anisotropic
filtering, D16) stops the queue with one line naming it and its offset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from codeobjects import load_kernel
from image_descriptors import BGRA, tsharp
from toolchains import require_clang

pytestmark = pytest.mark.hsa_virtual

SOURCE = Path(__file__).parent / "data" / "isa" / "images.cl"
_CODE: dict[str, bytes] = {}
TARGETS = ["gfx1100", "gfx90a", "gfx1201"]


def _harness(target: str = "gfx1100"):
    from hsa.virtual.gfx11.testing import Harness

    if target not in _CODE:
        require_clang()
        from compiler import clang

        if target == "gfx90a":  # no image_sample_lz there (no extended-image-insts)
            _CODE[target] = clang.compile_opencl(SOURCE, target, defines={"NO_SAMPLE_LZ": 1})
        else:
            _CODE[target] = clang.compile_opencl(SOURCE, target, extra_flags=[
                "-Xclang", "-target-feature", "-Xclang", "+extended-image-insts"])
    h = Harness(target)
    h.tsharp = lambda *a, **kw: tsharp(*a, target=target, **kw)
    return h, h.load(_CODE[target])


def _image(h, data: np.ndarray, fmt: int, shape: tuple[int, ...], kind: str, **kw) -> tuple:
    """(T# pointer, data address) of an image holding `data`'s bytes."""
    addr = h.buffer(np.ascontiguousarray(data))
    width = shape[0]
    height = shape[1] if kind in ("2D", "3D", "2D_ARRAY") else 1
    return h.buffer(h.tsharp(addr, fmt, width, height, kind, **kw)), addr


def _unorm8(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.float64) / 255.0).astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_2d_rgba32f_load_and_store(target):
    h, code = _harness(target)
    w, ht = 13, 6
    texels = np.random.default_rng(1).standard_normal((ht, w, 4)).astype(np.float32)
    src, _ = _image(h, texels, 63, (w, ht), "2D")  # 32_32_32_32_FLOAT
    dst, dst_addr = _image(h, np.zeros_like(texels), 63, (w, ht), "2D")
    out = h.alloc(ht * w * 16)
    h.dispatch(code, "load_store_2d", (w, ht), (8, 4), [out, src, dst, w])
    got = h.read(out, np.float32, ht * w * 4).reshape(ht, w, 4)
    np.testing.assert_array_equal(got, texels)
    np.testing.assert_array_equal(h.read(dst_addr, np.float32, texels.size).reshape(texels.shape),
                                  texels * np.float32(2) + np.float32(1))


@pytest.mark.parametrize("target", TARGETS)
def test_2d_rgba8_unorm_bgra_swizzle_and_pitch(target):
    """8_8_8_8_UNORM with a BGRA swizzle (DST_SEL z, y, x, w) and rows of a wider pitch."""
    h, code = _harness(target)
    w, ht, pitch = 10, 5, 16
    raw = np.random.default_rng(2).integers(0, 256, (ht, pitch, 4), dtype=np.uint8)
    src, _ = _image(h, raw, 42, (w, ht), "2D", pitch=pitch, sel=BGRA)
    dst_raw = np.zeros_like(raw)
    dst, dst_addr = _image(h, dst_raw, 42, (w, ht), "2D", pitch=pitch)
    out = h.alloc(ht * w * 16)
    h.dispatch(code, "load_store_2d", (w, ht), (8, 4), [out, src, dst, w])
    got = h.read(out, np.float32, ht * w * 4).reshape(ht, w, 4)
    want = _unorm8(raw[:, :w, [2, 1, 0, 3]])
    np.testing.assert_array_equal(got, want)
    # the store: 2v + 1 >= 1 saturates every channel of the UNORM texels to 255; the pitch's
    # padding texels stay untouched
    stored = h.read(dst_addr, np.uint8, raw.size).reshape(raw.shape)
    assert (stored[:, :w] == 255).all() and (stored[:, w:] == 0).all()


@pytest.mark.parametrize("fmt, dtype, channels", [(11, np.uint16, 1), (6, np.int8, 1),
                                                  (48, np.uint32, 2), (55, np.uint16, 4)])
@pytest.mark.parametrize("target", TARGETS)
def test_2d_integer_formats(target, fmt, dtype, channels):
    """16_UINT, 8_SINT (sign-extended), 32_32_UINT, 16_16_16_16_UINT: the integers come back
    as they are, missing channels as 0 (w: 1); stores keep the low bits."""
    h, code = _harness(target)
    w, ht = 9, 3
    info = np.iinfo(dtype)
    raw = np.random.default_rng(fmt).integers(info.min, info.max, (ht, w, channels),
                                              dtype=np.int64).astype(dtype)
    src, _ = _image(h, raw, fmt, (w, ht), "2D")
    dst, dst_addr = _image(h, np.zeros_like(raw), fmt, (w, ht), "2D")
    out = h.alloc(ht * w * 16)
    h.dispatch(code, "load_store_2d_int", (w, ht), (8, 4), [out, src, dst, w])
    got = h.read(out, np.uint32, ht * w * 4).reshape(ht, w, 4)
    want = np.zeros((ht, w, 4), np.uint32)
    want[..., :channels] = raw.astype(np.int64).astype(np.uint32)
    want[..., 3] = want[..., 3] if channels == 4 else 1
    np.testing.assert_array_equal(got, want)
    stored = h.read(dst_addr, dtype, raw.size).reshape(raw.shape)
    np.testing.assert_array_equal(stored, (raw.astype(np.int64) + 1).astype(dtype))


@pytest.mark.parametrize("target", TARGETS)
def test_one_channel_and_out_of_range_reads_zero(target):
    """DMASK 0x2 (y of 16_16_FLOAT); coordinates x - 1, y - 1 leave the image at the edges."""
    h, code = _harness(target)
    w, ht = 7, 4
    half = np.random.default_rng(3).standard_normal((ht, w, 2)).astype(np.float16)
    src, _ = _image(h, half, 29, (w, ht), "2D")
    out = h.alloc(ht * w * 4)
    h.dispatch(code, "load_2d_y", (w, ht), (8, 4), [out, src, w, ht])
    got = h.read(out, np.float32, ht * w).reshape(ht, w)
    want = np.zeros((ht, w), np.float32)
    want[1:, 1:] = half[:-1, :-1, 1].astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_1d_3d_and_array_images(target):
    h, code = _harness(target)
    rng = np.random.default_rng(4)
    # 1D, 32_FLOAT: y, z read 0, w 1.0
    line = rng.standard_normal(37).astype(np.float32)
    src, _ = _image(h, line, 22, (37,), "1D")
    out = h.alloc(37 * 16)
    h.dispatch(code, "load_1d", (37,), (32,), [out, src])
    got = h.read(out, np.float32, 37 * 4).reshape(37, 4)
    np.testing.assert_array_equal(got, np.stack([line, 0 * line, 0 * line, 0 * line + 1], 1))
    # 3D and 2D arrays, 8_8_8_8_UNORM, 20 texels wide: rows padded to 256 bytes (64 texels)
    w, ht, dp = 20, 3, 4
    for kind, kernel in (("3D", "load_3d"), ("2D_ARRAY", "load_2d_array")):
        raw = rng.integers(0, 256, (dp, ht, 64, 4), dtype=np.uint8)
        src, _ = _image(h, raw, 42, (w, ht), kind, slices=dp, pitch=64)
        out = h.alloc(dp * ht * w * 16)
        h.dispatch(code, kernel, (w, ht, dp), (4, 4, 2), [out, src, w, ht])
        got = h.read(out, np.float32, dp * ht * w * 4).reshape(dp, ht, w, 4)
        np.testing.assert_array_equal(got, _unorm8(raw[:, :, :w]), kind)
    # 1D array, 16_16_16_16_FLOAT, 5 layers of 24 texels (rows of 32: 256 bytes)
    layers = rng.standard_normal((5, 32, 4)).astype(np.float16)
    src, _ = _image(h, layers, 57, (24,), "1D_ARRAY", slices=5, pitch=32)
    out = h.alloc(5 * 24 * 16)
    h.dispatch(code, "load_1d_array", (24, 5), (8, 1), [out, src, 24])
    got = h.read(out, np.float32, 5 * 24 * 4).reshape(5, 24, 4)
    np.testing.assert_array_equal(got, layers[:, :24].astype(np.float32))


WRAP, MIRROR, CLAMP_LAST, CLAMP_BORDER = 0, 1, 2, 6  # SQ_TEX_CLAMP


def ssharp(clamp: int, unnormalized: bool = False, border: int = 0, bilinear: bool = False
           ) -> np.ndarray:
    """The 4-dword gfx11 S# ROCr's PopulateSamplerSrd writes (CLAMP_X/Y/Z, FORCE_UNNORMALIZED,
    MAX_LOD 4095, point or bilinear XY filters, BORDER_COLOR_TYPE)."""
    filt = 1 if bilinear else 0
    return np.array([clamp | clamp << 3 | clamp << 6 | int(unnormalized) << 15, 4095 << 12,
                     filt << 20 | filt << 22, border << 30], np.uint32)


def _nearest(c: np.ndarray, size: int, mode: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.floor(c).astype(np.int64)
    if mode == WRAP:
        return i % size, np.zeros(i.shape, bool)
    if mode == MIRROR:
        m = i % (2 * size)
        return np.where(m < size, m, 2 * size - 1 - m), np.zeros(i.shape, bool)
    outside = (i < 0) | (i >= size)
    return np.clip(i, 0, size - 1), outside if mode == CLAMP_BORDER else 0 * outside


def _coords(rng, n: int, size: int, lo: float, hi: float) -> np.ndarray:
    """Normalised coordinates in [lo, hi) texels, never within 0.1 texel of an edge."""
    t = rng.integers(int(lo * size), int(hi * size), n) + rng.uniform(0.1, 0.9, n)
    return (t / size).astype(np.float32)


@pytest.mark.parametrize("target, kernel", [("gfx1100", "sample_2d"), ("gfx1100", "sample_lz_2d"),
                                            ("gfx90a", "sample_2d"), ("gfx1201", "sample_2d"),
                                            ("gfx1201", "sample_lz_2d")])
@pytest.mark.parametrize("mode", [WRAP, MIRROR, CLAMP_LAST, CLAMP_BORDER])
def test_point_sample_2d(target, kernel, mode):
    """Nearest texel of normalised coordinates from -2 to 3 image sizes, each clamp mode;
    the border is opaque white (S# BORDER_COLOR_TYPE 2)."""
    h, code = _harness(target)
    w, ht, n = 11, 7, 256
    rng = np.random.default_rng(10 + mode)
    texels = rng.standard_normal((ht, w, 4)).astype(np.float32)
    src, _ = _image(h, texels, 63, (w, ht), "2D")
    u, v = _coords(rng, n, w, -2, 3), _coords(rng, n, ht, -2, 3)
    out = h.alloc(n * 16)
    samp = h.buffer(ssharp(mode, border=2))
    h.dispatch(code, kernel, (n,), (64,), [out, src, samp, h.buffer(np.stack([u, v], 1))])
    x, bx = _nearest(u.astype(np.float64) * w, w, mode)
    y, by = _nearest(v.astype(np.float64) * ht, ht, mode)
    want = np.where((bx | by)[:, None], np.float32(1), texels[y, x])
    np.testing.assert_array_equal(h.read(out, np.float32, n * 4).reshape(n, 4), want)


@pytest.mark.parametrize("target", TARGETS)
def test_point_sample_unnormalized_rgba8_and_1d_array(target):
    """FORCE_UNNORMALIZED coordinates on 8_8_8_8_UNORM; a 1D array's layer rounds to the
    nearest and clamps to the layers there are."""
    h, code = _harness(target)
    rng = np.random.default_rng(20)
    w, ht, n = 12, 5, 128
    raw = rng.integers(0, 256, (ht, w, 4), dtype=np.uint8)
    src, _ = _image(h, raw, 42, (w, ht), "2D")
    u = (rng.integers(0, w, n) + rng.uniform(0.1, 0.9, n)).astype(np.float32)
    v = (rng.integers(0, ht, n) + rng.uniform(0.1, 0.9, n)).astype(np.float32)
    out = h.alloc(n * 16)
    h.dispatch(code, "sample_2d", (n,), (64,), [out, src, h.buffer(ssharp(CLAMP_LAST, True)),
                                               h.buffer(np.stack([u, v], 1))])
    want = _unorm8(raw[v.astype(np.int64), u.astype(np.int64)])
    np.testing.assert_array_equal(h.read(out, np.float32, n * 4).reshape(n, 4), want)
    layers = rng.standard_normal((4, 16, 4)).astype(np.float32)  # rows of 256 bytes
    src, _ = _image(h, layers, 63, (16,), "1D_ARRAY", slices=4, pitch=16)
    u = _coords(rng, n, 16, 0, 1)
    layer = rng.uniform(-1.4, 4.4, n).astype(np.float32)
    h.dispatch(code, "sample_1d_array", (n,), (64,),
               [out, src, h.buffer(ssharp(CLAMP_LAST)), h.buffer(np.stack([u, layer], 1))])
    want = layers[np.clip(np.rint(layer), 0, 3).astype(np.int64),
                  np.floor(u.astype(np.float64) * 16).astype(np.int64)]
    np.testing.assert_array_equal(h.read(out, np.float32, n * 4).reshape(n, 4), want)


def _bilinear(texels: np.ndarray, u: np.ndarray, v: np.ndarray, mode: int, border: float
              ) -> np.ndarray:
    """Vulkan's "Texel Filtering" (linear, 2D) of texel coordinates u, v: i0 = floor(u - 0.5),
    alpha = frac(u - 0.5) kept to 8 bits (D3D11's sub-texel precision), the 2x2 texels placed
    by the clamp mode (border texels take the border colour), weighted (1-a)(1-b), a(1-b),
    (1-a)b, ab."""
    ht, w = texels.shape[:2]
    out = np.zeros(u.shape + (4,))
    cu, cv = np.round((u - 0.5) * 256) / 256, np.round((v - 0.5) * 256) / 256
    i0, j0 = np.floor(cu).astype(np.int64), np.floor(cv).astype(np.int64)
    a, b = cu - i0, cv - j0
    for di, wi in ((0, 1 - a), (1, a)):
        x, bx = _nearest(i0 + di, w, mode)
        for dj, wj in ((0, 1 - b), (1, b)):
            y, by = _nearest(j0 + dj, ht, mode)
            value = np.where((bx | by)[:, None], border, texels[y, x].astype(np.float64))
            out += (wi * wj)[:, None] * value
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", [WRAP, CLAMP_LAST, CLAMP_BORDER])
def test_bilinear_sample_2d(target, mode):
    """Bilinear filtering (S# XY_MAG/MIN_FILTER 1, as ROCr's PopulateSamplerSrd writes for
    HSA_EXT_SAMPLER_FILTER_MODE_LINEAR): normalised coordinates whose texel positions are
    multiples of 1/256 (the weights are then exact on any 8-bit-or-finer filter) from -1.5
    to 2.5 image sizes, against `_bilinear`; float32 accumulation order allowed 2 ulp. Then
    unnormalised coordinates anywhere: within half a weight step (1/512 of the texel range)
    of the unquantised filter."""
    h, code = _harness(target)
    w, ht, n = 9, 6, 256
    rng = np.random.default_rng(40 + mode)
    texels = rng.standard_normal((ht, w, 4)).astype(np.float32)
    src, _ = _image(h, texels, 63, (w, ht), "2D")
    tu = rng.integers(int(-1.5 * w * 256), int(2.5 * w * 256), n) / 256
    tv = rng.integers(int(-1.5 * ht * 256), int(2.5 * ht * 256), n) / 256
    uv = np.stack([tu / w, tv / ht], 1).astype(np.float32)
    # the float32 coordinates times the size give back tu, tv exactly only where they are
    # representable: take the texel position the kernel's float really names
    tu, tv = uv[:, 0].astype(np.float64) * w, uv[:, 1].astype(np.float64) * ht
    out = h.alloc(n * 16)
    samp = h.buffer(ssharp(mode, border=2, bilinear=True))
    h.dispatch(code, "sample_2d", (n,), (64,), [out, src, samp, h.buffer(uv)])
    got = h.read(out, np.float32, n * 4).reshape(n, 4)
    want = _bilinear(texels, tu, tv, mode, 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(np.float32).eps * np.abs(
        texels).max())
    u = rng.uniform(-2, 2 * w, n).astype(np.float32)
    v = rng.uniform(-2, 2 * ht, n).astype(np.float32)
    samp = h.buffer(ssharp(mode, unnormalized=True, border=2, bilinear=True))
    h.dispatch(code, "sample_2d", (n,), (64,), [out, src, samp, h.buffer(np.stack([u, v], 1))])
    got = h.read(out, np.float32, n * 4).reshape(n, 4)
    exact = _bilinear(texels, u.astype(np.float64), v.astype(np.float64), mode, 1.0)
    spread = np.abs(texels).max() + 1
    assert np.abs(got - exact).max() <= spread / 256, "more than a weight step off"


@pytest.mark.parametrize("target", ["gfx1100", "gfx1201"])
def test_sample_explicit_lod_single_level(target):
    """image_sample_l (clang's builtin; gfx90a's LLVM has no sample_l) with each lane's LOD
    from -2 to 6 on a T# of one level (LAST_LEVEL 0): the level clamps to 0 and the S#'s
    MAG and MIN filters agree, so point and bilinear results are level 0's, as
    `_nearest` / `_bilinear` give them."""
    h, code = _harness(target)
    w, ht, n = 8, 5, 128
    rng = np.random.default_rng(50)
    texels = rng.standard_normal((ht, w, 4)).astype(np.float32)
    src, _ = _image(h, texels, 63, (w, ht), "2D")
    u = (rng.integers(0, w * 256, n) / 256 / w).astype(np.float32)
    v = (rng.integers(0, ht * 256, n) / 256 / ht).astype(np.float32)
    lod = rng.uniform(-2, 6, n).astype(np.float32)
    out = h.alloc(n * 16)
    args = [h.buffer(np.stack([u, v], 1)), h.buffer(lod)]
    tu, tv = u.astype(np.float64) * w, v.astype(np.float64) * ht
    for bilinear in (False, True):
        samp = h.buffer(ssharp(CLAMP_LAST, bilinear=bilinear))
        h.dispatch(code, "sample_l_2d", (n,), (64,), [out, src, samp, *args])
        got = h.read(out, np.float32, n * 4).reshape(n, 4)
        if bilinear:
            np.testing.assert_allclose(got, _bilinear(texels, tu, tv, CLAMP_LAST, 0.0), rtol=0,
                                       atol=4 * np.finfo(np.float32).eps * np.abs(texels).max())
        else:
            x, _ = _nearest(tu, w, CLAMP_LAST)
            y, _ = _nearest(tv, ht, CLAMP_LAST)
            np.testing.assert_array_equal(got, texels[y, x])


@pytest.mark.parametrize("target", TARGETS)
def test_d16_load_store_and_sample(target):
    """D16 (clang's v4f16 image builtins): image_load / image_store of 16_16_16_16_FLOAT
    texels as half4 (two channels a VGPR, low half first), the store of 2v + 1 computed in
    half; image_sample of 32_32_32_32_FLOAT texels with D16 returns each channel rounded to
    half (the ISA guides' D16: "data ... converted to 16 bits")."""
    h, code = _harness(target)
    w, ht = 9, 4
    texels = np.random.default_rng(60).standard_normal((ht, w, 4)).astype(np.float16)
    src, _ = _image(h, texels, 57, (w, ht), "2D")
    dst, dst_addr = _image(h, np.zeros_like(texels), 57, (w, ht), "2D")
    n = 64
    out = h.alloc(max(ht * w, n) * 8)
    h.dispatch(code, "load_store_d16", (w, ht), (8, 4), [out, src, dst, w])
    np.testing.assert_array_equal(h.read(out, np.float16, texels.size).reshape(texels.shape),
                                  texels)
    np.testing.assert_array_equal(
        h.read(dst_addr, np.float16, texels.size).reshape(texels.shape),
        texels * np.float16(2) + np.float16(1))
    rgba = np.random.default_rng(61).standard_normal((ht, w, 4)).astype(np.float32)
    src, _ = _image(h, rgba, 63, (w, ht), "2D")
    rng = np.random.default_rng(62)
    u, v = _coords(rng, n, w, 0, 1), _coords(rng, n, ht, 0, 1)
    h.dispatch(code, "sample_d16", (n,), (64,), [out, src, h.buffer(ssharp(CLAMP_LAST)),
                                                h.buffer(np.stack([u, v], 1))])
    x, _ = _nearest(u.astype(np.float64) * w, w, CLAMP_LAST)
    y, _ = _nearest(v.astype(np.float64) * ht, ht, CLAMP_LAST)
    np.testing.assert_array_equal(h.read(out, np.float16, n * 4).reshape(n, 4),
                                  rgba[y, x].astype(np.float16))


_A16_IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare <4 x float> @llvm.amdgcn.image.load.2d.v4f32.i16(i32, i16, i16, <8 x i32>, i32, i32)
declare void @llvm.amdgcn.image.store.2d.v4f32.i16(<4 x float>, i32, i16, i16, <8 x i32>, i32,
                                                   i32)
define amdgpu_kernel void @load_store_a16(ptr addrspace(1) %out, ptr addrspace(4) %src,
                                          ptr addrspace(4) %dst, ptr addrspace(1) %xy) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %k = mul i32 %i, 2
  %px = getelementptr i16, ptr addrspace(1) %xy, i32 %k
  %x = load i16, ptr addrspace(1) %px
  %k1 = add i32 %k, 1
  %py = getelementptr i16, ptr addrspace(1) %xy, i32 %k1
  %y = load i16, ptr addrspace(1) %py
  %s = load <8 x i32>, ptr addrspace(4) %src
  %v = call <4 x float> @llvm.amdgcn.image.load.2d.v4f32.i16(i32 15, i16 %x, i16 %y,
                                                              <8 x i32> %s, i32 0, i32 0)
  %po = getelementptr <4 x float>, ptr addrspace(1) %out, i32 %i
  store <4 x float> %v, ptr addrspace(1) %po
  %d = load <8 x i32>, ptr addrspace(4) %dst
  call void @llvm.amdgcn.image.store.2d.v4f32.i16(<4 x float> %v, i32 15, i16 %y, i16 %x,
                                                  <8 x i32> %d, i32 0, i32 0)
  ret void
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_a16_load_and_store(target, tmp_path):
    """A16 (LLVM's i16-coordinate image intrinsics, clang 22): two 16-bit signed coordinates
    a VGPR, x in the low half; lanes read texel (x, y), some outside (negative or past the
    edge: zeros), and store it at (y, x) of a transposed image (outside: nothing)."""
    from compiler import clang
    from hsa.virtual.gfx11.testing import Harness

    require_clang()
    src = tmp_path / "a16.ll"
    src.write_text(_A16_IR)
    h = Harness(target)
    h.tsharp = lambda *a, **kw: tsharp(*a, target=target, **kw)
    code = h.load(clang.compile_llvm_ir(src, target))
    w, ht, n = 7, 5, 64
    texels = np.random.default_rng(70).standard_normal((ht, w, 4)).astype(np.float32)
    img, _ = _image(h, texels, 63, (w, ht), "2D")
    dst, dst_addr = _image(h, np.zeros((w, ht, 4), np.float32), 63, (ht, w), "2D")
    rng = np.random.default_rng(71)
    xy = np.stack([rng.integers(-2, w + 2, n), rng.integers(-2, ht + 2, n)], 1).astype(np.int16)
    out = h.alloc(n * 16)
    h.dispatch(code, "load_store_a16", (n,), (64,), [out, img, dst, h.buffer(xy)])
    x, y = xy[:, 0].astype(np.int64), xy[:, 1].astype(np.int64)
    inside = (x >= 0) & (x < w) & (y >= 0) & (y < ht)
    want = np.where(inside[:, None], texels[np.clip(y, 0, ht - 1), np.clip(x, 0, w - 1)], 0)
    np.testing.assert_array_equal(h.read(out, np.float32, n * 4).reshape(n, 4), want)
    transposed = np.zeros((w, ht, 4), np.float32)
    transposed[x[inside], y[inside]] = texels[y[inside], x[inside]]
    np.testing.assert_array_equal(h.read(dst_addr, np.float32, transposed.size)
                                  .reshape(transposed.shape), transposed)


_RESINFO = {"1d": ("1D", 0x9, 2), "2d": ("2D", 0xB, 3), "3d": ("3D", 0xF, 4),
            "2darray": ("2D_ARRAY", 0xF, 4)}  # LLVM dim -> (T# type, DMASK, results)


def _resinfo_ir() -> str:
    """LLVM IR (no OpenCL builtin reaches llvm.amdgcn.image.getresinfo): lane i asks for
    mip level i % 4 of the T# at %t and stores the DMASK's results at out[4 i]."""
    ir = ['target triple = "amdgcn-amd-amdhsa"', "declare i32 @llvm.amdgcn.workitem.id.x()"]
    for dim, (_, dmask, n) in _RESINFO.items():
        ty = f"<{n} x float>"
        ir += [f"declare {ty} @llvm.amdgcn.image.getresinfo.{dim}.v{n}f32.i32(i32, i32, "
               "<8 x i32>, i32, i32)",
               f"define amdgpu_kernel void @resinfo_{dim}(ptr addrspace(1) %out, "
               "ptr addrspace(4) %t) {",
               "  %i = call i32 @llvm.amdgcn.workitem.id.x()", "  %mip = urem i32 %i, 4",
               "  %rsrc = load <8 x i32>, ptr addrspace(4) %t",
               f"  %v = call {ty} @llvm.amdgcn.image.getresinfo.{dim}.v{n}f32.i32(i32 {dmask}, "
               "i32 %mip, <8 x i32> %rsrc, i32 0, i32 0)",
               "  %k = mul i32 %i, 4", "  %p = getelementptr float, ptr addrspace(1) %out, i32 %k",
               f"  store {ty} %v, ptr addrspace(1) %p", "  ret void", "}"]
    return "\n".join(ir) + "\n"


@pytest.mark.parametrize("target", TARGETS)
def test_get_resinfo(target, tmp_path):
    """image_get_resinfo (LLVM's getresinfo intrinsic, clang 22) on 1D, 2D, 3D and 2D-array
    T#s with LAST_LEVEL 3: per the RDNA3/RDNA4 ISA guides VDATA = {width, height, depth,
    #mipLevels} of the level asked for, each size max(1, size >> level) (Vulkan's mip level
    sizing), array layers unshrunk; DMASK keeps the ones the type defines. Then a level past
    LAST_LEVEL stops the queue in one line."""
    import amdgpu
    from amdgpu.errors import QueueError
    from compiler import clang
    from hsa.virtual.gfx11.testing import Harness

    require_clang()
    src = tmp_path / "resinfo.ll"
    src.write_text(_resinfo_ir())
    code_bytes = clang.compile_llvm_ir(src, target)
    h = Harness(target)
    code = h.load(code_bytes)
    w, ht, slices = 37, 10, 6
    last = 15 if target.startswith("gfx12") else 16  # LAST_LEVEL's low bit in T# word 3
    for dim, (kind, dmask, n) in _RESINFO.items():
        desc = tsharp(0x10000, 63, w, ht if kind != "1D" else 1, kind, slices=slices,
                      target=target)
        desc[3] |= np.uint32(3 << last)  # tsharp leaves LAST_LEVEL 0
        out = h.alloc(64 * 16)
        h.dispatch(code, f"resinfo_{dim}", (64,), (64,), [out, h.buffer(desc)])
        got = h.read(out, np.uint32, 64 * 4).reshape(64, 4)[:, :n]
        mip = np.arange(64) % 4
        full = [np.maximum(w >> mip, 1), np.maximum(ht >> mip, 1),
                np.maximum(slices >> mip, 1) if kind == "3D" else np.full(64, slices),
                np.full(64, 4)]
        want = np.stack([full[c] for c in range(4) if dmask >> c & 1], 1)
        np.testing.assert_array_equal(got, want, dim)
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    try:
        k = load_kernel(dev, code_bytes, "resinfo_2d")
        with pytest.raises(QueueError) as err:  # LAST_LEVEL 0: levels 1-3 are past it
            dev.dispatch(k, 64, 64, (dev.buffer(np.zeros(256, np.uint32)),
                                     dev.buffer(tsharp(0x10000, 63, 4, 4, target=target))
                                     )).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    assert "image_get_resinfo at a mip level past LAST_LEVEL 0 is not modelled" in text, text
    assert "code-object offset 0x" in text and "\n" not in text


@pytest.mark.parametrize("target", ["gfx1100", "gfx1201"])
@pytest.mark.parametrize("mode", [WRAP, CLAMP_BORDER])
def test_gather4(target, mode):
    """image_gather4_lz (clang's builtin; gfx90a's LLVM has no gather) with DMASK 0x2 (the
    texels' y; whether DST_SEL applies before the gather is not checked here) on a point S#: per
    Vulkan's OpImageGather, the texels bilinear filtering would blend, i0 = floor(u - 0.5)
    (8-bit sub-texel coordinates), in the order (i0, j1), (i1, j1), (i1, j0), (i0, j0);
    border texels give the border colour's y (opaque white: 1)."""
    h, code = _harness(target)
    w, ht, n = 6, 5, 128
    rng = np.random.default_rng(80 + mode)
    texels = rng.standard_normal((ht, w, 4)).astype(np.float32)
    src, _ = _image(h, texels, 63, (w, ht), "2D")
    u = (rng.integers(-w * 256, 2 * w * 256, n) / 256 / w).astype(np.float32)
    v = (rng.integers(-ht * 256, 2 * ht * 256, n) / 256 / ht).astype(np.float32)
    out = h.alloc(n * 16)
    h.dispatch(code, "gather4_lz_2d", (n,), (64,), [out, src, h.buffer(ssharp(mode, border=2)),
                                                   h.buffer(np.stack([u, v], 1))])
    cu = np.round((u.astype(np.float64) * w - 0.5) * 256) / 256
    cv = np.round((v.astype(np.float64) * ht - 0.5) * 256) / 256
    i0, j0 = np.floor(cu).astype(np.int64), np.floor(cv).astype(np.int64)
    want = np.zeros((n, 4), np.float32)
    for k, (di, dj) in enumerate(((0, 1), (1, 1), (1, 0), (0, 0))):
        x, bx = _nearest(i0 + di, w, mode)
        y, by = _nearest(j0 + dj, ht, mode)
        want[:, k] = np.where(bx | by, np.float32(1), texels[y, x, 1])
    np.testing.assert_array_equal(h.read(out, np.float32, n * 4).reshape(n, 4), want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["aniso", "mips"])
def test_unmodelled_sampling_is_one_line(target, case):
    """Anisotropic filtering (S# XY_MAG/MIN_FILTER 3) and a mip-mapped T# (LAST_LEVEL 2: where
    levels 1-2 lie is not modelled) each stop the queue in one line."""
    import amdgpu
    from amdgpu.errors import QueueError

    _harness(target)
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    samp, desc = ssharp(CLAMP_LAST), tsharp(0, 63, 4, 4, target=target)
    if case == "aniso":
        samp[2] |= 3 << 20 | 3 << 22
        why = "image_sample: S# anisotropic filtering (XY_MAG/MIN_FILTER 3/3)"
    else:
        desc[3] |= np.uint32(2 << (15 if target.startswith("gfx12") else 16))
        why = "image_sample: a mip-mapped T# (LAST_LEVEL 2) is not modelled"
    try:
        k = load_kernel(dev, _CODE[target], "sample_2d")
        with pytest.raises(QueueError) as err:
            dev.dispatch(k, 32, 32, (dev.buffer(np.zeros(128, np.float32)),
                                     dev.buffer(desc), dev.buffer(samp),
                                     dev.buffer(np.zeros(64, np.float32)))).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    assert why in text, text
    assert "code-object offset 0x" in text and "\n" not in text


@pytest.mark.parametrize("target", TARGETS)
def test_unmodelled_image_instruction_is_one_line(tmp_path, target):
    """An image load with TFE (clang's texfailctrl 1: a fifth VGPR for the texel-fail status;
    gfx90a, without TFE, gets LWE: texfailctrl 2), not modelled: the queue stops naming it
    and its code-object offset."""
    import amdgpu
    from amdgpu.errors import QueueError
    from compiler import clang

    src = tmp_path / "tfe.cl"
    src.write_text("typedef float float4 __attribute__((ext_vector_type(4)));\n"
                   "kernel void k(global float4* out, __amdgpu_texture_t t) {\n"
                   "  out[get_global_id(0)] = __builtin_amdgcn_image_load_2d_v4f32_i32(\n"
                   f"      15, get_global_id(0), 0, t, {2 if target == 'gfx90a' else 1}, 0);"
                   "\n}\n")
    code = clang.compile_opencl(src, target)
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    try:
        k = load_kernel(dev, code, "k")
        with pytest.raises(QueueError) as err:
            dev.dispatch(k, 32, 32, (dev.buffer(np.zeros(128, np.float32)),
                                     dev.buffer(tsharp(0, 22, 4, 4, target=target)))).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    flag = "LWE" if target == "gfx90a" else "TFE"
    assert "image_load with " in text and flag in text and "is not modelled" in text, text
    assert "code-object offset 0x" in text and "\n" not in text


@pytest.mark.parametrize("target, why", [
    ("gfx90a", "image_load_mip_pck is not modelled"),
    ("gfx942", "gfx942 has no image instructions")])
def test_gfx9_mimg_refusals_name_the_instruction(target, why):
    """llvm-mc-19 -mcpu=gfx90a's image_load_mip_pck v4, v[2:3], s[8:15] dmask:0x1 (f0100100
    00020402): gfx90a names the opcode it does not model; gfx942 (no image-insts in LLVM)
    refuses every MIMG word as foreign to the target."""
    from hsa.virtual.gfx9 import family

    fam = family(target)
    inst = fam.decode_one((0xF0100100, 0x00020402), 0, 0)
    compiled = fam.compile(inst)
    assert compiled.fn is None and why in compiled.error


WRAP_KERNEL = "_Z11sample_wrapP15HIP_vector_typeIfLj4EEP13__hip_texturePKS_IfLj2EEi"
LINEAR_KERNEL = "_Z13sample_linearPfP13__hip_texturePK15HIP_vector_typeIfLj2EEi"


@pytest.mark.slow  # sid's hipcc compiles the object: ~36 s on the 2-core VM
def test_hip_tex2d_on_gfx1201():
    """HIP 6.4's tex2D for gfx1201 (sid's hipcc through scripts/rocm6.sh, device code of
    tests/data/isa/hip_textures.hip): its image_sample_lz through a gfx12 T# and S# laid out
    as HIP's __hip_texture (T# dwords 0-7, width at dword 10, S# at dwords 12-15), normalised
    coordinates from -2 to 3 image sizes with wrap, which HIP snaps to texel edges; against
    numpy's nearest texel. Then its tex2D<float> through a bilinear S# against `_bilinear`."""
    import subprocess

    from rocm6_rootfs import ensure_rootfs

    ensure_rootfs("sid")  # sid's hipcc, in the ROCm 6 root filesystem (built on first use)
    root = Path(__file__).resolve().parent.parent
    out = root / "build" / "test-images" / "hip_textures_gfx1201.co"
    out.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["bash", "scripts/rocm6.sh", "hipcc", "-O2", "--offload-arch=gfx1201",
                           "--cuda-device-only", "--no-gpu-bundle-output", "-c", "-o",
                           f"/amdgpu-direct/{out.relative_to(root)}",
                           "/amdgpu-direct/tests/data/isa/hip_textures.hip"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    from hsa.virtual.gfx11.testing import Harness

    h = Harness("gfx1201")
    code = h.load(out.read_bytes())
    w, ht, n = 12, 7, 256
    rng = np.random.default_rng(30)
    texels = rng.standard_normal((ht, 32, 4)).astype(np.float32)  # rows of 512 bytes
    addr = h.buffer(texels)
    tex = np.zeros(16, np.uint32)
    tex[:8] = tsharp(addr, 63, w, ht, "2D", pitch=32, target="gfx1201")
    tex[10] = w
    tex[12:16] = ssharp(WRAP)
    x, y = rng.integers(-2 * w, 3 * w, n), rng.integers(-2 * ht, 3 * ht, n)
    uv = np.stack([(x + rng.uniform(0.1, 0.9, n)) / w, (y + rng.uniform(0.1, 0.9, n)) / ht], 1)
    res = h.alloc(n * 16)
    h.dispatch(code, WRAP_KERNEL, (n,), (64,), [res, h.buffer(tex),
                                                h.buffer(uv.astype(np.float32)), n])
    np.testing.assert_array_equal(h.read(res, np.float32, n * 4).reshape(n, 4),
                                  texels[y % ht, x % w])
    # the same object's tex2D<float> as HIP compiles it for hipFilterModeLinear (the S# says
    # bilinear, unnormalised, clamp): one float channel, against Vulkan's linear filter
    lin = rng.standard_normal((ht, 64)).astype(np.float32)  # rows of 256 bytes
    tex[:8] = tsharp(h.buffer(lin), 22, w, ht, "2D", pitch=64, target="gfx1201")
    tex[12:16] = ssharp(CLAMP_LAST, unnormalized=True, bilinear=True)
    uv = np.stack([rng.integers(-w * 128, 3 * w * 128, n) / 256,
                   rng.integers(-ht * 128, 3 * ht * 128, n) / 256], 1).astype(np.float32)
    h.dispatch(code, LINEAR_KERNEL, (n,), (64,), [res, h.buffer(tex), h.buffer(uv), n])
    want = _bilinear(np.repeat(lin[:, :w, None], 4, 2), uv[:, 0].astype(np.float64),
                     uv[:, 1].astype(np.float64), CLAMP_LAST, 0.0)[:, 0]
    np.testing.assert_allclose(h.read(res, np.float32, n), want, rtol=0, atol=1e-5)
