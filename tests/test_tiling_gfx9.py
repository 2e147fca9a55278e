"""gfx9 tiled image layouts (issue 32): hsa.virtual.isa.tiling_gfx9 against AMD's address
library as published (addrlib's Gfx9Lib in ROCr 5.2.3's src/image/addrlib and Mesa's
src/amd/addrlib), and the virtual gfx90a running clang 22's image loads, stores, samples and
atomics through tiled T#s.

tiling_gfx9 builds addrlib's per-bit swizzle *equations* (Gfx9Lib::HwlComputeThinEquation /
HwlComputeThickEquation). The reference here, `_addrlib_offset`, restates addrlib's other,
independent description of the same layouts, the coordinate-to-address routine
(Gfx9Lib::HwlComputeSurfaceAddrFromCoordTiled with Lib::ComputeSurface2DMicroBlockOffset /
ComputeSurface3DMicroBlockOffset: micro-tile bit shuffles, Morton codes of the micro-tile
coordinates, FoldXor2d/FoldXor3d of the pipe and bank fields, the bit-reversed slice XOR).
The two agree on every mode and element size; the swizzle is a bijection onto the bytes
addrlib sizes the surface to; a few offsets are worked by hand below from addrlib's tables.
The sizes ROCr itself reports for real descriptors are checked in test_isa_images_hip.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from image_descriptors import tsharp
from toolchains import require_clang

from hsa.abi.targets import lookup
from hsa.virtual.isa import tiling_gfx9 as tiling

pytestmark = pytest.mark.hsa_virtual

MI200 = lookup("gfx90a").gb_addr_config
CFG = tiling.AddrConfig.from_register(MI200)


# --- addrlib's coordinate-to-address routine, restated (the reference) --------------------
def _bits(v: int, start: int, count: int, dst: int) -> int:  # addrlib's GetBits
    return ((v >> start) & ((1 << count) - 1)) << dst


def _morton2(a: int, b: int, n: int) -> int:  # MortonGen2d(a, b, n): b's bit i at 2i
    return sum(((b >> i) & 1) << 2 * i | ((a >> i) & 1) << (2 * i + 1) for i in range(n))


def _morton3(x: int, y: int, z: int, n: int) -> int:  # MortonGen3d: z at 3i, y 3i+1, x 3i+2
    return sum(((z >> i) & 1) << 3 * i | ((y >> i) & 1) << (3 * i + 1)
               | ((x >> i) & 1) << (3 * i + 2) for i in range(n))


def _reverse(v: int, n: int) -> int:  # ReverseBitVector
    return sum(((v >> (n - 1 - i)) & 1) << i for i in range(n))


def _fold2(v: int, n: int) -> int:  # FoldXor2d
    return (v & ((1 << n) - 1)) ^ _reverse(v >> n, n)


def _demort(v: int, n: int) -> int:
    return sum(((v >> 2 * i) & 1) << i for i in range(n))


def _fold3(v: int, n: int) -> int:  # FoldXor3d
    return ((v & ((1 << n) - 1)) ^ _reverse(_demort(v >> n, n), n)
            ^ _reverse(_demort(v >> (n + 1), n), n))


def _micro2d(kind: str, x: int, y: int, e: int) -> int:  # ComputeSurface2DMicroBlockOffset
    if kind == "S":
        xb = x << e
        off = (xb & 0xF) | (y & 3) << 4
        if e < 3:
            off |= (y & 4) << 4
            off |= (y & 8) << 4 if e == 0 else (xb & 0x10) << 3
        else:
            off |= (xb & 0x30) << 2
        return off
    if kind == "D":
        if e == 4:
            return (x & 1) << 4 | (y & 1) << 5 | (x >> 1 & 1) << 6 | (y >> 1 & 1) << 7
        off = _bits(x, 0, 3, e) | _bits(y, 1, 2, 3 + e) | _bits(x, 3, 1, 5 + e) | _bits(
            y, 3, 1, 6 + e)
        return _bits(off, 0, 4, 0) | (y & 1) << 4 | _bits(off, 4, 3, 5)
    off = _bits(y, 0, 3, e) | _bits(x, 1, 2, 3 + e) | _bits(x, 3, 1, 5 + e) | _bits(
        y, 3, 1, 6 + e)  # R
    off = _bits(off, 0, 4, 0) | (x & 1) << 4 | _bits(off, 4, 3, 5)
    return _bits(off, 0, 6, 0) | _bits(x, 1, 2, 6) if e == 3 else off


def _micro3d(kind: str, x: int, y: int, z: int, e: int) -> int:  # ...3DMicroBlockOffset
    if kind == "S":
        high = [(z & 4) >> 2 | (y & 4) >> 1, (z & 4) >> 2 | (y & 4) >> 1,
                (y & 4) >> 2 | (x & 4) >> 1, (x & 6) >> 1, x & 3][e]
        return high << 8 | ((x << e) & 0xF) | (y & 3) << 4 | (z & 3) << 6
    if e == 0:
        off = (x & 1) | (y & 1) << 1 | (x & 2) << 1 | (y & 2) << 2 | (z & 3) << 4 | (x & 4) << 4
        xh, yh, zh = x >> 3, y >> 2, z >> 2
    elif e == 1:
        off = ((x & 1) | (y & 1) << 1 | (x & 2) << 1 | (y & 2) << 2) << 1 | (z & 3) << 5
        xh, yh, zh = x >> 2, y >> 2, z >> 2
    elif e == 2:
        off = ((x & 1) | (y & 1) << 1 | (x & 2) << 1 | (z & 1) << 3) << 2 | (y & 2) << 5
        xh, yh, zh = x >> 2, y >> 2, z >> 1
    elif e == 3:
        off = ((x & 1) | (y & 1) << 1 | (z & 1) << 2 | (x & 2) << 2) << 3
        xh, yh, zh = x >> 2, y >> 1, z >> 1
    else:
        off = ((x & 1) | (y & 1) << 1 | (z & 1) << 2) << 4
        xh, yh, zh = x >> 1, y >> 1, z >> 1
    return off | (_morton3(xh, yh, zh, 1) << 7) & 0x380


def _addrlib_offset(mode: int, e: int, is_3d: bool, pitch: int, height: int,
                    x: int, y: int, z: int) -> int:
    block_log2, kind, xor = tiling.MODES[mode]
    thick = is_3d and kind in ("Z", "S")
    bw, bh, bd = tiling.block_shape(mode, e, is_3d)
    il = CFG.interleave_log2
    pipes, banks = (CFG.pipe_bits(block_log2), CFG.bank_bits(block_log2)) if xor else (0, 0)
    if thick:
        mw, mh, md = [(16, 8, 8), (8, 8, 8), (8, 8, 4), (8, 4, 4), (4, 4, 4)][e]
        off = _morton3(x // mw, y // mh, z // md, 8) << 10 | _micro3d(kind, x, y, z, e)
        fold = _fold3
    elif kind == "Z":
        if e in (0, 2):
            low = 6 - e
            off = _morton2(y, x, low // 2) | _morton2(x >> low // 2, y >> low // 2, 9) << low
        else:
            off = _morton2(y, x, 13)
        off <<= e
        fold = _fold2
    else:
        mw, mh = [(16, 16), (16, 8), (8, 8), (8, 4), (4, 4)][e]
        micro_kind = "S" if is_3d and kind == "D" else kind  # IsStandardSwizzle(3D, D)
        off = _micro2d(micro_kind, x, y, e) | _morton2(x // mw, y // mh, 12) << 8
        fold = _fold2
    if xor:
        if xor == "T":
            off &= (1 << block_log2) - 1
        keep, v = off & ((1 << il) - 1), off >> il
        pipe = fold(v, pipes)
        v >>= pipes
        bank = fold(v, banks)
        v >>= banks
        off = ((((v << banks) | bank) << pipes | pipe) << il) | keep
    if xor == "X" and not thick:
        off ^= _reverse(z, pipes) << il
        off ^= _reverse(z >> pipes, banks) << (il + pipes)
    off %= 1 << block_log2
    rows = -(-height // bh)
    block = (z // bd) * (pitch // bw) * rows + (y // bh) * (pitch // bw) + x // bw
    return off | block << block_log2


def _cases():
    for mode in tiling.MODES:
        for e in range(5):
            for is_3d in (False, True):
                if not isinstance(tiling.texel_offsets(mode, 1 << e, 4096, 8, 8, is_3d, MI200),
                                  str):
                    yield mode, e, is_3d


CASES = list(_cases())


def test_every_mode_rocr_makes_is_modelled():
    """ROCr 5.2.3 tiles 2D images and arrays 4KB_D_X / 64KB_D_X and 3D images 4KB_Z_X,
    64KB_Z_X or 64KB_D_X (thin) on the emulated gfx90a (test_isa_images_hip.py reads them
    off its T#s): all are modelled, and so is every other mode addrlib's equations define
    for the element sizes and image kinds it allows them on."""
    modelled = {(m, d) for m, _, d in CASES}
    assert {(22, False), (26, False), (20, True), (24, True), (26, True)} <= modelled
    assert len(CASES) == 179, len(CASES)  # 23 modes x 5 sizes x 2D/3D, less the refused


@pytest.mark.parametrize("mode, e, is_3d", CASES)
def test_swizzle_is_a_bijection_and_matches_addrlibs_coordinate_routine(mode, e, is_3d):
    """Every texel of a padded surface (2 x 2 blocks, 2 slabs of slices or 3 slices) lands
    on its own element of the surface addrlib sizes, at the address `_addrlib_offset`
    computes."""
    bw, bh, bd = tiling.block_shape(mode, e, is_3d)
    width, height, depth = 2 * bw - 1, 2 * bh - 1, (2 * bd if is_3d else 3)
    pitch, size, _ = tiling.surface_bytes(mode, 1 << e, width, height, depth, is_3d)
    offsets = tiling.texel_offsets(mode, 1 << e, pitch, height, depth, is_3d, MI200)
    assert not isinstance(offsets, str)
    z, y, x = (a.ravel() for a in np.meshgrid(np.arange(depth), np.arange(2 * bh),
                                              np.arange(pitch), indexing="ij"))
    got = offsets(x, y, z)
    np.testing.assert_array_equal(np.sort(got), np.arange(0, size, 1 << e))
    pick = np.random.default_rng(mode * 10 + e).choice(x.size, 64, replace=False)
    want = [_addrlib_offset(mode, e, is_3d, pitch, height, int(x[i]), int(y[i]), int(z[i]))
            for i in pick]
    np.testing.assert_array_equal(got[pick], want)


def test_offsets_worked_by_hand():
    """On the MI200's GB_ADDR_CONFIG (4 pipes, 8 shader engines, 16 banks, 256 B interleave):
    4KB_D_X, 4-byte texels: addrlib's display micro-tile table for 4 bytes puts x0 x1 y0 x2
    y1 y2 at address bits 2-7; bits 8-11 take y3 x3 y4 x4 and the XOR sources run on y5 x5
    y6 x6 (bits 12-15). Pipe bits = min(12 - 8, 2 + 3) = 4, bank bits 0, so bit 8+i ^= bit
    15-i and ^= slice bit 3-i: bits 8-11 = y3^x6^z3, x3^y6^z2, y4^x5^z1, x4^y5^z0.
    (40, 70, 0): x = 0b0101000, y = 0b1000110: bits 2-7 = 0,0,0,0,1,1 -> 0xC0; bits 8-11 =
    0, 1^1, 0^1, 0 -> 0x400; block (40 // 32, 70 // 32) = (1, 2) of 2 per row -> 5 * 4096:
    20480 + 0x4C0 = 21696. Slice 5 (0b0101) of a 70-row array (3 block rows): bits 9-11
    flip to 1, 1, 1 -> 0xEC0, block 5 * 6 + 5 = 35: 143360 + 3776 = 147136.
    64KB_D_X, 16-byte texels: bits 4-7 x0 y0 x1 y1, bits 8-15 y2 x2 y3 x3 y4 x4 y5 x5, then
    y6 x6 y7; pipe bits min(8, 5) = 5 (bit 8+i ^= bit 17-i), bank bits min(3, 4) = 3 (bit
    13+i ^= bit 18-i). (45, 50): x = 0b101101, y = 0b110010: bits 4-7 = 1,0,0,1 -> 0x90;
    bits 8-15 = 0^0, 1^0, 0^1, 1^1, 1^0, 0^0, 1^0, 1^0 -> 0xD600: 54928."""
    f = tiling.texel_offsets(22, 4, 64, 70, 8, False, MI200)
    assert not isinstance(f, str)
    assert list(f(np.array([40, 40]), np.array([70, 70]), np.array([0, 5]))) == [21696, 147136]
    f = tiling.texel_offsets(26, 16, 128, 70, 1, False, MI200)
    assert not isinstance(f, str)
    assert list(f(np.array([45]), np.array([50]), np.array([0]))) == [54928]


def test_what_is_not_modelled_says_so():
    assert tiling.texel_offsets(12, 4, 64, 8, 1, False, MI200) == (
        "tiled layout (T# SW_MODE 12, reserved or variable-size)")
    assert "with a pitch of 40 texels (not a multiple of 32)" in tiling.texel_offsets(
        22, 4, 40, 8, 1, False, MI200)
    assert "for a 3D image" in tiling.texel_offsets(23, 4, 64, 8, 1, True, MI200)
    assert "with 12-byte texels" in tiling.texel_offsets(22, 12, 64, 8, 1, False, MI200)


def test_gfx90a_gb_addr_config_is_one_value():
    """The emulated kernel reports the target's GB_ADDR_CONFIG (DRM's READ_MMR_REG, KFD's
    GET_TILE_CONFIG) and the executor lays tiled images out by it: the fields gfx_v9_0.c
    fixes for GC 9.4.2 (0x22014042 outside NUM_SHADER_ENGINES / NUM_RB_PER_SE), 8 SEs."""
    from hsa.emulated.models import MODELS

    assert MODELS["gfx90a"].gb_addr_config == MI200
    assert MI200 & ~0x0C188800 == 0x22014042
    assert CFG == tiling.AddrConfig(pipes_log2=2, interleave_log2=8, banks_log2=4,
                                    engines_log2=3)


# --- the virtual gfx90a through tiled T#s ----------------------------------------------------
SOURCE = Path(__file__).parent / "data" / "isa" / "images.cl"
_CODE: dict[str, bytes] = {}
_ATOMIC_IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.image.atomic.add.2d.i32.i32(i32, i32, i32, <8 x i32>, i32, i32)
define amdgpu_kernel void @atomic_add(ptr addrspace(1) %out, ptr addrspace(4) %t) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %x = urem i32 %i, 40
  %row = udiv i32 %i, 40
  %half = urem i32 %row, 2
  %y = mul i32 %half, 9
  %rsrc = load <8 x i32>, ptr addrspace(4) %t
  %old = call i32 @llvm.amdgcn.image.atomic.add.2d.i32.i32(i32 %i, i32 %x, i32 %y,
                                                           <8 x i32> %rsrc, i32 0, i32 0)
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %old, ptr addrspace(1) %po
  ret void
}
"""


def _harness(tmp_path_factory=None):
    from hsa.virtual.gfx11.testing import Harness

    if not _CODE:
        require_clang()
        from compiler import clang

        _CODE["cl"] = clang.compile_opencl(SOURCE, "gfx90a", defines={"NO_SAMPLE_LZ": 1})
        src = tmp_path_factory.mktemp("ir") / "tiled_atomic.ll"
        src.write_text(_ATOMIC_IR)
        _CODE["ir"] = clang.compile_llvm_ir(src, "gfx90a")
    h = Harness("gfx90a")
    return h, h.load(_CODE["cl"]), h.load(_CODE["ir"])


def _place(mode: int, e: int, is_3d: bool, texels: np.ndarray) -> tuple[np.ndarray, int]:
    """(surface bytes holding `texels` (depth, height, width, bytes) where
    `_addrlib_offset` puts them, the pitch)."""
    depth, height, width, nbytes = texels.shape
    pitch, size, _ = tiling.surface_bytes(mode, 1 << e, width, height, depth, is_3d)
    surface = np.zeros(size, np.uint8)
    for z in range(depth):
        for y in range(height):
            for x in range(width):
                at = _addrlib_offset(mode, e, is_3d, pitch, height, x, y, z)
                surface[at:at + nbytes] = texels[z, y, x]
    return surface, pitch


def _read(mode: int, e: int, is_3d: bool, surface: np.ndarray, shape: tuple[int, ...],
          pitch: int) -> np.ndarray:
    depth, height, width, nbytes = shape
    out = np.zeros(shape, np.uint8)
    for z in range(depth):
        for y in range(height):
            for x in range(width):
                at = _addrlib_offset(mode, e, is_3d, pitch, height, x, y, z)
                out[z, y, x] = surface[at:at + nbytes]
    return out


@pytest.mark.parametrize("mode, width, height", [(22, 37, 23), (26, 70, 66)])
def test_tiled_2d_load_and_store(mode, width, height, tmp_path_factory):
    """image_load / image_store of 32_32_32_32_FLOAT texels through a 4KB_D_X and a 64KB_D_X
    T# (the modes ROCr gives these sizes): the loads return the texels placed at addrlib's
    addresses, the stores (2v + 1) land at them."""
    h, code, _ = _harness(tmp_path_factory)
    texels = np.random.default_rng(mode).standard_normal((1, height, width, 4)).astype(
        np.float32)
    surface, pitch = _place(mode, 4, False, texels.view(np.uint8).reshape(1, height, width, 16))
    src = h.buffer(tsharp(h.buffer(surface), 63, width, height, "2D", pitch=pitch,
                          target="gfx90a", sw_mode=mode))
    dst_addr = h.buffer(np.zeros_like(surface))
    dst = h.buffer(tsharp(dst_addr, 63, width, height, "2D", pitch=pitch, target="gfx90a",
                          sw_mode=mode))
    out = h.alloc(height * width * 16)
    h.dispatch(code, "load_store_2d", (width, height), (8, 4), [out, src, dst, width])
    got = h.read(out, np.float32, height * width * 4).reshape(height, width, 4)
    np.testing.assert_array_equal(got, texels[0])
    stored = _read(mode, 4, False, h.read(dst_addr, np.uint8, surface.size),
                   (1, height, width, 16), pitch)
    np.testing.assert_array_equal(stored.view(np.float32).reshape(texels.shape),
                                  texels * np.float32(2) + np.float32(1))


@pytest.mark.parametrize("kind, mode", [("2D_ARRAY", 22), ("3D", 20), ("3D", 24), ("3D", 26),
                                        ("2D", 22)])
def test_tiled_array_and_3d_loads(kind, mode, tmp_path_factory):
    """8_8_8_8_UNORM 2D array (4KB_D_X: the slice XORs into the pipe bits) and 3D images in
    4KB_Z_X, 64KB_Z_X (thick: blocks span slices) and 64KB_D_X (thin) layouts; and a 2D T#
    read by the 2D-array load (MIMG DA set, as ROCclr's blit kernels do): addressed as 2D."""
    h, code, _ = _harness(tmp_path_factory)
    w, ht, dp = 21, 10, 1 if kind == "2D" else 5
    raw = np.random.default_rng(mode).integers(0, 256, (dp, ht, w, 4), dtype=np.uint8)
    surface, pitch = _place(mode, 2, kind == "3D", raw)
    src = h.buffer(tsharp(h.buffer(surface), 42, w, ht, kind, pitch=pitch, slices=dp,
                          target="gfx90a", sw_mode=mode))
    out = h.alloc(dp * ht * w * 16)
    kernel = "load_3d" if kind == "3D" else "load_2d_array"  # 2D_ARRAY and 2D: DA set
    h.dispatch(code, kernel, (w, ht, dp), (4, 4, 2), [out, src, w, ht])
    got = h.read(out, np.float32, dp * ht * w * 4).reshape(dp, ht, w, 4)
    np.testing.assert_array_equal(got, (raw / 255.0).astype(np.float32))


def test_tiled_bilinear_sample_and_atomic(tmp_path_factory):
    """image_sample with a bilinear S# (its 2x2 texels each found through the swizzle) on a
    4KB_D_X 32_FLOAT image at unnormalised texel positions on 1/256 steps, against the same
    filter on numpy's texels; image_atomic_add on a 4KB_D_X 32_UINT image, lanes in order,
    pre-op values returned."""
    h, code, atomic = _harness(tmp_path_factory)
    w, ht, n = 37, 23, 128
    rng = np.random.default_rng(5)
    texels = rng.standard_normal((ht, w)).astype(np.float32)
    surface, pitch = _place(22, 2, False, texels.view(np.uint8).reshape(1, ht, w, 4))
    src = h.buffer(tsharp(h.buffer(surface), 22, w, ht, "2D", pitch=pitch, target="gfx90a",
                          sw_mode=22))
    u = rng.integers(0, w * 256, n) / 256
    v = rng.integers(0, ht * 256, n) / 256
    clamp = 2  # SQ_TEX_CLAMP_LAST_TEXEL, FORCE_UNNORMALIZED, bilinear XY filters
    samp = np.array([clamp | clamp << 3 | clamp << 6 | 1 << 15, 4095 << 12, 1 << 20 | 1 << 22,
                     0], np.uint32)
    out = h.alloc(n * 16)
    h.dispatch(code, "sample_2d", (n,), (64,), [out, src, h.buffer(samp),
                                               h.buffer(np.stack([u, v], 1).astype(np.float32))])
    i0, j0 = np.floor(u - 0.5).astype(np.int64), np.floor(v - 0.5).astype(np.int64)
    a, b = u - 0.5 - i0, v - 0.5 - j0
    want = np.zeros(n)
    for di, wi in ((0, 1 - a), (1, a)):
        for dj, wj in ((0, 1 - b), (1, b)):
            want += wi * wj * texels[np.clip(j0 + dj, 0, ht - 1), np.clip(i0 + di, 0, w - 1)]
    got = h.read(out, np.float32, n * 4).reshape(n, 4)[:, 0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    image = rng.integers(0, 1000, (ht, w), dtype=np.uint32)
    surface, pitch = _place(22, 2, False, image.view(np.uint8).reshape(1, ht, w, 4))
    img_addr = h.buffer(surface)
    t = h.buffer(tsharp(img_addr, 20, w, ht, "2D", pitch=pitch, target="gfx90a", sw_mode=22))
    out = h.alloc(n * 4)
    h.dispatch(atomic, "atomic_add", (n,), (n,), [out, t])
    lane = np.arange(n)
    # lanes 80-127 hit the texels of lanes 0-47 again; x 37-39 lie outside: nothing happens
    # there and 0 comes back
    x, y = lane % 40, (lane // 40) % 2 * 9
    ref, old = image.copy().astype(np.int64), np.zeros(n, np.int64)
    for k in lane:
        if x[k] < w:
            old[k] = ref[y[k], x[k]]
            ref[y[k], x[k]] += k
    np.testing.assert_array_equal(h.read(out, np.uint32, n), old)
    after = _read(22, 2, False, h.read(img_addr, np.uint8, surface.size), (1, ht, w, 4), pitch)
    np.testing.assert_array_equal(after.view(np.uint32).reshape(ht, w), ref)


@pytest.mark.parametrize("sw_mode, levels, why", [
    (12, 0, "image_load: tiled layout (T# SW_MODE 12, reserved or variable-size) is not "
     "modelled"),
    (27, 0, "image_load: tiled layout (T# SW_MODE 27, ADDR_SW_64KB_R_X) for 16-byte texels "
     "is not modelled"),
    (22, 3, "image_load: tiled layout (T# SW_MODE 22) with LAST_LEVEL 3 is not modelled")])
def test_unmodelled_tiled_t_sharp_stops_the_queue_in_one_line(sw_mode, levels, why,
                                                               tmp_path_factory):
    """A reserved swizzle mode, a rotated one on 16-byte texels (addrlib defines no
    equation for it), a tiled mip chain (where even level 0's blocks lie depends on the
    chain): the queue stops naming the SW_MODE and the code-object offset."""
    from codeobjects import load_kernel

    import amdgpu
    from amdgpu.errors import QueueError

    _harness(tmp_path_factory)
    dev = amdgpu.open("amdgpu:virtual:gfx90a")
    try:
        k = load_kernel(dev, _CODE["cl"], "load_store_2d")
        desc = tsharp(0, 63, 4, 4, pitch=64, target="gfx90a", sw_mode=sw_mode)
        desc[3] |= np.uint32(levels << 16)  # LAST_LEVEL
        with pytest.raises(QueueError) as err:
            dev.dispatch(k, 4, 4, (dev.buffer(np.zeros(64, np.float32)), dev.buffer(desc),
                                   dev.buffer(desc), np.int32(4))).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    assert why in text, text
    assert "code-object offset 0x" in text and "\n" not in text
