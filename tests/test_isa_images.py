"""Image loads and stores of gfx11 compute kernels (issue 32): clang 22's image builtins
(tests/data/isa/images.cl: image_load / image_store, 1D, 2D, 3D, 1D and 2D arrays, DMASK)
on the virtual gfx1100, through T# descriptors written here bit for bit as ROCr's gfx11
image manager writes them (src/image/image_manager_gfx11.cpp, resource_gfx11.h: linear
layout, the unified format, DST_SEL swizzle, PITCH-1 for 1D/2D, DEPTH-1 for 3D and arrays),
against numpy's reading of the same texels. An image sample, which the executor does not
model, stops the queue with one line naming it and its code-object offset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from codeobjects import load_kernel
from toolchains import require_clang

pytestmark = pytest.mark.hsa_virtual

SOURCE = Path(__file__).parent / "data" / "isa" / "images.cl"
TYPES = {"1D": 8, "2D": 9, "3D": 10, "1D_ARRAY": 12, "2D_ARRAY": 13}
XYZW, BGRA = (4, 5, 6, 7), (6, 5, 4, 7)  # DST_SEL: 4..7 pick x..w
_CODE: list[bytes] = []


def _harness():
    from hsa.virtual.gfx11.testing import Harness

    if not _CODE:
        require_clang()
        from compiler import clang

        _CODE.append(clang.compile_opencl(SOURCE, "gfx1100"))
    h = Harness("gfx1100")
    return h, h.load(_CODE[0])


def tsharp(base: int, fmt: int, width: int, height: int = 1, kind: str = "2D", pitch: int = 0,
           slices: int = 1, sel: tuple[int, ...] = XYZW) -> np.ndarray:
    """The 8-dword gfx11 T# ROCr's PopulateImageSrd writes for a linear image."""
    w = [0] * 8
    w[0] = (base >> 8) & 0xFFFFFFFF
    w[1] = ((base >> 40) & 0xFF) | (fmt << 20) | (((width - 1) & 3) << 30)
    w[2] = ((width - 1) >> 2) | ((height - 1) << 14)
    w[3] = sel[0] | sel[1] << 3 | sel[2] << 6 | sel[3] << 9 | TYPES[kind] << 28
    w[4] = (slices - 1) if kind in ("3D", "1D_ARRAY", "2D_ARRAY") else (pitch or width) - 1
    return np.array(w, np.uint32)


def _image(h, data: np.ndarray, fmt: int, shape: tuple[int, ...], kind: str, **kw) -> tuple:
    """(T# pointer, data address) of an image holding `data`'s bytes."""
    addr = h.buffer(np.ascontiguousarray(data))
    width = shape[0]
    height = shape[1] if kind in ("2D", "3D", "2D_ARRAY") else 1
    return h.buffer(tsharp(addr, fmt, width, height, kind, **kw)), addr


def _unorm8(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.float64) / 255.0).astype(np.float32)


def test_2d_rgba32f_load_and_store():
    h, code = _harness()
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


def test_2d_rgba8_unorm_bgra_swizzle_and_pitch():
    """8_8_8_8_UNORM with a BGRA swizzle (DST_SEL z, y, x, w) and rows of a wider pitch."""
    h, code = _harness()
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
def test_2d_integer_formats(fmt, dtype, channels):
    """16_UINT, 8_SINT (sign-extended), 32_32_UINT, 16_16_16_16_UINT: the integers come back
    as they are, missing channels as 0 (w: 1); stores keep the low bits."""
    h, code = _harness()
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


def test_one_channel_and_out_of_range_reads_zero():
    """DMASK 0x2 (y of 16_16_FLOAT); coordinates x - 1, y - 1 leave the image at the edges."""
    h, code = _harness()
    w, ht = 7, 4
    half = np.random.default_rng(3).standard_normal((ht, w, 2)).astype(np.float16)
    src, _ = _image(h, half, 29, (w, ht), "2D")
    out = h.alloc(ht * w * 4)
    h.dispatch(code, "load_2d_y", (w, ht), (8, 4), [out, src, w, ht])
    got = h.read(out, np.float32, ht * w).reshape(ht, w)
    want = np.zeros((ht, w), np.float32)
    want[1:, 1:] = half[:-1, :-1, 1].astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_1d_3d_and_array_images():
    h, code = _harness()
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
        src, _ = _image(h, raw, 42, (w, ht), kind, slices=dp)
        out = h.alloc(dp * ht * w * 16)
        h.dispatch(code, kernel, (w, ht, dp), (4, 4, 2), [out, src, w, ht])
        got = h.read(out, np.float32, dp * ht * w * 4).reshape(dp, ht, w, 4)
        np.testing.assert_array_equal(got, _unorm8(raw[:, :, :w]), kind)
    # 1D array, 16_16_16_16_FLOAT, 5 layers of 24 texels (rows of 32: 256 bytes)
    layers = rng.standard_normal((5, 32, 4)).astype(np.float16)
    src, _ = _image(h, layers, 57, (24,), "1D_ARRAY", slices=5)
    out = h.alloc(5 * 24 * 16)
    h.dispatch(code, "load_1d_array", (24, 5), (8, 1), [out, src, 24])
    got = h.read(out, np.float32, 5 * 24 * 4).reshape(5, 24, 4)
    np.testing.assert_array_equal(got, layers[:, :24].astype(np.float32))


def test_unmodelled_image_instruction_is_one_line():
    import amdgpu
    from amdgpu.errors import QueueError

    _harness()
    dev = amdgpu.open("amdgpu:virtual:gfx1100")
    try:
        k = load_kernel(dev, _CODE[0], "sample_2d")
        tex = dev.buffer(np.zeros(8, np.uint32))
        with pytest.raises(QueueError) as err:
            dev.dispatch(k, 32, 32, (dev.buffer(np.zeros(128, np.float32)), tex,
                                     dev.buffer(np.zeros(4, np.int32)))).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    assert "image_sample" in text and "code-object offset 0x" in text and "\n" not in text


def test_tiled_descriptor_is_one_line():
    """A T# in a tiled layout (SW_MODE 1): the executor reads linear images only."""
    import amdgpu
    from amdgpu.errors import QueueError

    _harness()
    dev = amdgpu.open("amdgpu:virtual:gfx1100")
    try:
        k = load_kernel(dev, _CODE[0], "load_1d")
        words = tsharp(0, 22, 16, kind="1D")  # refused before any texel is read
        words[3] |= 1 << 20  # SW_MODE 1
        with pytest.raises(QueueError) as err:
            dev.dispatch(k, 16, 16, (dev.buffer(np.zeros(64, np.float32)),
                                     dev.buffer(words))).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    assert "tiled layout (T# SW_MODE 1)" in text and "code-object offset 0x" in text
    assert "\n" not in text
