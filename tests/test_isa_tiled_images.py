"""Tiled (swizzled) images on gfx11 and gfx12 (issue 32): hsa.virtual.isa.tiling_gfx11 and
image.py's gfx11/gfx12 branch of the tiled-layout hook.

- The swizzles: every mode is a bijection of the surface's element coordinates onto its
  bytes (element-aligned, nothing past addrlib's size); coordinates worked by hand from
  addrlib's swizzle pattern rows (gfx11SwizzlePattern.h / gfx12SwizzlePattern.h, named per
  case).
- The real ROCr 6.4.3 (scripts/rocm6.sh's sid root filesystem, slow): for images of each
  geometry and element size, hsa_ext_image_data_get_info's size and alignment equal the
  geometry here for the SW_MODE ROCr's own hsa_ext_image_create writes into the T#
  (tests/c/image_layouts.c, built with the root filesystem's clang), on the
  emulated gfx1100 and gfx1201, and every mode it picks is modelled.
- clang 22's image loads and stores (tests/data/isa/images.cl) on the virtual gfx1100 and
  gfx1201 through T#s ROCr wrote (logged from image_layouts, base address replaced):
  these stopped with "tiled layout (T# SW_MODE n)" before.
- A HIP program (hipMallocArray, hipMemcpy2DToArray, tex2D on a texture object of the
  array, hipMemcpy2DFromArray) built by sid's hipcc runs under HIP/ROCr 6.4.3 over the
  emulated kernel on gfx1100 and gfx1201 (slow).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from toolchains import require_clang

from hsa.abi.targets import lookup
from hsa.virtual.isa import tiling_gfx11 as tiling

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "tests" / "data" / "isa" / "images.cl"
_CODE: dict[str, bytes] = {}
# the GB_ADDR_CONFIG of the virtual gfx11 (gfx1100) and gfx12 (gfx1201)
CONFIG = {"gfx11": lookup("gfx1100").gb_addr_config, "gfx12": lookup("gfx1201").gb_addr_config}


def _all_modes():
    return [(family, mode, bpe) for family, modes in tiling.MODES.items()
            for mode in modes for bpe in (1, 2, 4, 8, 16)]


def _check_bijection(family: str, large: bool) -> None:
    """Each mode and element size: the image one element past a block each way (thick
    modes: past a block's slices too), so a padded surface of 2 x 2 (x 2) blocks. Blocks
    (0, 0, 0) and (1, 1, 1) (thin modes: the second slice/layer) each map their elements
    onto their own block's bytes, element-aligned, one offset each; the surface's size and
    alignment are addrlib's (pitch x height x slices x bytes, the block size)."""
    checked = 0
    for fam, mode, bpe in _all_modes():
        m = tiling.MODES[fam][mode]
        if fam != family or (m.block_log2 > 12) != large:
            continue
        block = tiling.surface(family, mode, bpe, 1, 1, 1).block
        bw, bh, bd = block
        w, h, d = bw + 1, bh + 1, bd + 1 if m.thick else 2
        geo = tiling.surface(family, mode, bpe, w, h, d)
        assert (geo.pitch, geo.height) == (2 * bw, 2 * bh)
        assert geo.size == geo.pitch * geo.height * geo.slices * bpe
        assert geo.align == 1 << m.block_log2 == bw * bh * bd * bpe
        f = tiling.texel_offsets(family, mode, bpe, w, h, d, m.thick, CONFIG[family])
        assert callable(f), f
        for b in (0, 1):
            x, y, z = (a.ravel() for a in np.meshgrid(
                np.arange(bw) + b * bw, np.arange(bh) + b * bh, np.arange(bd) + b * bd,
                indexing="ij"))
            off = f(x, y, z)
            start = b * (geo.slice_bytes * bd + (2 + 1) * geo.align)
            assert np.all(off % bpe == 0), (m.name, bpe)
            assert off.min() == start and off.max() == start + geo.align - bpe, (m.name, bpe)
            assert np.unique(off).size == off.size, (m.name, bpe)
        checked += 1
    assert checked >= 10


@pytest.mark.hsa_virtual
@pytest.mark.parametrize("family", ["gfx11", "gfx12"])
def test_256b_and_4kb_swizzles_are_bijections_onto_their_blocks(family):
    _check_bijection(family, large=False)


@pytest.mark.slow
@pytest.mark.hsa_virtual
@pytest.mark.parametrize("family", ["gfx11", "gfx12"])
def test_64kb_and_256kb_swizzles_are_bijections_onto_their_blocks(family):
    _check_bijection(family, large=True)


@pytest.mark.hsa_virtual
@pytest.mark.parametrize("family, mode, bpe, width, height, texel, offset", [
    # GFX11_SW_256_D_PATINFO row 2 (4-byte elements, any pipes): bits 2-7 X0 Y0 X1 Y1 X2 Y2;
    # a block is 8x8. (5, 3) = (101b, 011b): X0 4 + Y0 8 + Y1 32 + X2 64 = 108
    ("gfx11", 2, 4, 67, 35, (5, 3, 0), 108),
    # the same; width 67 pads to 72 = 9 blocks a row; (13, 10) is in block 1 + 9 = 10 (2560),
    # (13 % 8, 10 % 8) = (101b, 010b) inside: X0 4 + Y1 32 + X2 64 = 100 -> 2660
    ("gfx11", 2, 4, 67, 35, (13, 10, 0), 2660),
    # GFX11_SW_4K_D_X_PATINFO row 69 (32 pipes, 32 packers, 16-byte elements): bits 4-7
    # X0 Y0 X1 Y1, bits 8-11 Y2^Z3^X5, X2^Z2^Y5, Z1^Y3^X4, Z0^X3^Y4; a block is 16x16, width
    # 129 pads to 144 = 9 blocks. (21, 6) = (10101b, 110b): block 1 (4096); X0 16, Y1 128,
    # bit 8 Y2 = 1 (256), bit 9 X2 = 1 (512), bit 10 X4 = 1 (1024), bit 11 X3^Y4 = 0 -> 6032
    ("gfx11", 22, 16, 129, 77, (21, 6, 0), 6032),
    # GFX11_SW_256K_ZR_X_1xaa_PATINFO row 67 (ADDR_SW_256KB_R_X, 32/32, 4-byte): bits 2-7
    # X0 Y0 X1 Y1 X2 Y2, 8-17 Y4^X9^Y9, Z1^X4^Y4, Z0^Y5^X8, X5^Y8, Y6^X7, X3, Y3, X7^Y8,
    # Y7^X8, X6^Y7. (37, 90) = (100101b, 1011010b): X0 4, Y1 32, X2 64, bit 8 Y4 (256), bit 9
    # Y4 (512), bit 11 X5 (2048), bit 12 Y6 (4096), bit 14 Y3 (16384) -> 23396
    ("gfx11", 31, 4, 256, 256, (37, 90, 0), 23396),
    # GFX12_SW_256KB_2D_1xAA_PATINFO row 2 (4-byte): bits 2-17 X0 Y0 X1 Y1 X2 Y2 Y3 X3 Y4 X4
    # Y5 X5 Y6 X6 Y7 X7. (200, 100) = (11001000b, 1100100b): Y2 bit 7 (128), X3 bit 9 (512),
    # Y5 bit 12 (4096), Y6 bit 14 (16384), X6 bit 15 (32768), X7 bit 17 (131072) -> 184960
    ("gfx12", 4, 4, 256, 256, (200, 100, 0), 184960),
    # GFX12_SW_256B_2D_1xAA_PATINFO row 0 (1-byte): X0 X1 Y0 X2 Y1 Y2 X3 Y3, blocks 16x16;
    # width 40 pads to 48 = 3 blocks a row, 2D array slices of 48 x 16 bytes. (19, 5) in
    # layer 2: 2 * 768 + block 1 (256) + (3, 5) = (0011b, 0101b): X0 1, X1 2, Y0 4, Y2 32 -> 1831
    ("gfx12", 1, 1, 40, 9, (19, 5, 2), 1831),
])
def test_offsets_worked_by_hand_from_addrlibs_pattern_rows(family, mode, bpe, width, height,
                                                           texel, offset):
    f = tiling.texel_offsets(family, mode, bpe, width, height, 3, False, CONFIG[family])
    got = f(*(np.array([c]) for c in texel))
    assert int(got[0]) == offset


@pytest.mark.hsa_virtual
def test_what_is_not_modelled_says_so_in_one_line():
    """A mode without rows here, a thick mode on a 2D image, gfx11's XOR rows for another
    pipe count: one line naming it (image.py stops the queue with it)."""
    why = tiling.texel_offsets("gfx11", 9, 4, 8, 8, 1, False, CONFIG["gfx11"])
    assert isinstance(why, str) and "SW_MODE 9" in why and "\n" not in why
    why = tiling.texel_offsets("gfx12", 5, 4, 8, 8, 1, False, CONFIG["gfx12"])
    assert isinstance(why, str) and "ADDR3_4KB_3D" in why and "1D/2D" in why
    why = tiling.texel_offsets("gfx11", 22, 4, 8, 8, 1, False, 0x00000444)
    assert isinstance(why, str) and "16 pipes" in why
    assert callable(tiling.texel_offsets("gfx11", 6, 4, 8, 8, 1, False, 0x00000444))


@pytest.mark.generic
@pytest.mark.parametrize("target, want", [("gfx1100", 0x545), ("gfx1201", 0x444)])
def test_the_emulated_kernel_reports_the_gb_addr_config_the_executor_tiles_with(target, want):
    """KFD GET_TILE_CONFIG's gb_addr_config (which ROCr's image manager creates addrlib
    with) and DRM READ_MMR_REG of GB_ADDR_CONFIG give hsa.abi.targets' value, the one whose
    rows tiling_gfx11 holds (gfx11: 32 pipes and 32 packers); another is refused."""
    from types import SimpleNamespace

    from hsa.abi import targets
    from hsa.emulated import abi, drm
    from hsa.emulated.models import MODELS
    from hsa.emulated.server import Kfd

    assert targets.lookup(target).gb_addr_config == want
    node = SimpleNamespace(model=MODELS[target])
    args = bytearray(abi.kfd_ioctl_get_tile_config_args(gpu_id=0x1234, gb_addr_config=7))
    fake = SimpleNamespace(server=SimpleNamespace(node=lambda gpu_id: node))
    Kfd.nr_12(fake, args, None, None)
    reply = abi.kfd_ioctl_get_tile_config_args.from_buffer_copy(args)
    assert (reply.gb_addr_config, reply.num_tile_configs) == (want, 0)
    request = drm.drm_amdgpu_info(return_pointer=0x1000, return_size=4,
                                  query=drm.AMDGPU_INFO_READ_MMR_REG)
    request.read_mmr_reg.dword_offset, request.read_mmr_reg.count = drm.GB_ADDR_CONFIG, 1
    [(_, data)] = drm.pointer_writes(drm.DRM_IOCTL_AMDGPU_INFO, bytes(request), node)
    assert int.from_bytes(data, "little") == want
    family = target[:5]
    xor_mode = 22 if family == "gfx11" else 4
    assert callable(tiling.texel_offsets(family, xor_mode, 4, 8, 8, 1, False, want))


# T#s the real ROCr 6.4.3 wrote (image_layouts on the emulated gfx1100 / gfx1201; words 0-4,
# the rest 0): (target, words, geometry, bytes a texel, width, height, slices, SW_MODE)
ROCR_TSHARPS = [
    ("gfx1100", (0x8cf6c000, 0x03f0007f, 0x00130020, 0x91600fac, 0x0000008f), "2D", 16, 129,
     77, 1, 22),  # RGBA32F, ADDR_SW_4KB_D_X
    ("gfx1201", (0x3cc3e000, 0x007e007f, 0x00130020, 0x90200fac, 0x0000008f), "2D", 16, 129,
     77, 1, 2),  # RGBA32F, ADDR3_4KB_2D
    ("gfx1100", (0x8cf6c000, 0xc160007f, 0x000c4018, 0xd3b00204, 0x00000003), "2D_ARRAY", 4,
     100, 50, 4, 27),  # R32F 2D array, ADDR_SW_64KB_R_X (its Z terms: the layer)
    ("gfx1100", (0x8cf6c000, 0xc160007f, 0x00074009, 0xa3500204, 0x00000013), "3D", 4, 40,
     30, 20, 21),  # R32F 3D, ADDR_SW_4KB_S_X (thick)
    ("gfx1201", (0x3cc3e000, 0xc02c007f, 0x00074009, 0xa2200204, 0x00000013), "3D", 4, 40,
     30, 20, 2),  # R32F 3D in ADDR3_4KB_2D, slice after slice
    ("gfx1100", (0xbb1ca000, 0x0160007f, 0x00050008, 0xa3900204, 0x0000000a), "3D", 4, 33,
     21, 11, 25),  # R32F 3D, ADDR_SW_64KB_S_X (thick)
    ("gfx1100", (0xbb1ca000, 0xc160007f, 0x0031c04a, 0xa3c00204, 0x00000002), "3D", 4, 300,
     200, 3, 28),  # R32F 3D, ADDR_SW_256KB_Z_X: thin, the slice in its XOR terms
]


def _harness(target: str):
    from hsa.virtual.gfx11.testing import Harness

    if target not in _CODE:
        require_clang()
        from compiler import clang

        _CODE[target] = clang.compile_opencl(SOURCE, target, extra_flags=[
            "-Xclang", "-target-feature", "-Xclang", "+extended-image-insts"])
    h = Harness(target)
    return h, h.load(_CODE[target])


def _with_base(words: tuple[int, ...], base: int) -> np.ndarray:
    w = np.zeros(8, np.uint32)
    w[:5] = words
    w[0] = (base >> 8) & 0xFFFFFFFF
    w[1] = (w[1] & ~np.uint32(0xFF)) | np.uint32((base >> 40) & 0xFF)
    return w


@pytest.mark.hsa_virtual
@pytest.mark.parametrize("case", ROCR_TSHARPS, ids=lambda c: f"{c[0]}-{c[2]}-sw{c[7]}")
def test_compiled_image_loads_and_stores_through_rocrs_tiled_tsharps(case):
    """clang 22's image_load (2D, 2D array, 3D) and image_store (2D) through the T# ROCr
    wrote: each texel comes from (and the store goes to) the offset of its swizzle. Before
    the gfx11/gfx12 tiling this stopped with "tiled layout (T# SW_MODE n)"."""
    target, words, kind, bpe, w, ht, slices, mode = case
    family = target[:5]
    h, code = _harness(target)
    geo = tiling.surface(family, mode, bpe, w, ht, slices)
    where = tiling.texel_offsets(family, mode, bpe, w, ht, slices, kind == "3D",
                                  CONFIG[family])
    assert callable(where), where
    rng = np.random.default_rng(mode)
    lanes = bpe // 4
    texels = rng.standard_normal((slices, ht, w, lanes)).astype(np.float32)
    z, y, x = (a.ravel() for a in np.meshgrid(np.arange(slices), np.arange(ht), np.arange(w),
                                              indexing="ij"))
    element = (where(x, y, z) // bpe).astype(np.int64)
    memory = np.zeros((geo.size // bpe, lanes), np.float32)
    memory[element] = texels.reshape(-1, lanes)
    src_addr = h.buffer(memory)
    src = h.buffer(_with_base(words, src_addr))
    out = h.alloc(slices * ht * w * 16)
    want = np.zeros((slices, ht, w, 4), np.float32)
    want[..., :lanes] = texels
    if lanes == 1:
        want[..., 3] = 1.0  # ROCr's R swizzle: DST_SEL (x, 0, 0, 1)
    if kind == "2D":
        dst_addr = h.buffer(np.zeros_like(memory))
        dst = h.buffer(_with_base(words, dst_addr))
        h.dispatch(code, "load_store_2d", (w, ht), (8, 4), [out, src, dst, w])
        stored = h.read(dst_addr, np.float32, memory.size).reshape(memory.shape)[element]
        np.testing.assert_array_equal(stored, texels.reshape(-1, lanes) * np.float32(2)
                                      + np.float32(1))
    else:
        kernel = "load_3d" if kind == "3D" else "load_2d_array"
        h.dispatch(code, kernel, (w, ht, slices), (8, 4, 1), [out, src, w, ht])
    got = h.read(out, np.float32, slices * ht * w * 4).reshape(slices, ht, w, 4)
    np.testing.assert_array_equal(got, want)


# ---- the real ROCr and HIP 6.4.3 in scripts/rocm6.sh's root filesystem (slow) ----

def _rocm6(*args: str, node: str, timeout: int = 600, stdin: str | None = None
           ) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "rocm6.sh"), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, "AMDGPU_EMULATED_NODE": node}, input=stdin)


def _built(source: str, name: str, command: list[str], libraries: tuple[str, ...] = ()
           ) -> str:
    """SOURCE (a path in the checkout) built inside the root filesystem (again only when the source
    changed: a stamp beside it holds its hash); the path relative to the checkout."""
    from rocm6_rootfs import ensure_rootfs

    ensure_rootfs("sid")
    out = REPO / "build" / "rocm6" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256((REPO / source).read_bytes()).hexdigest()
    stamp = out.with_name(name + ".stamp")
    rel = str(out.relative_to(REPO))
    if not (out.exists() and stamp.exists() and stamp.read_text() == key):
        made = _rocm6(*command, "-o", rel, source, *libraries, node="1xgfx1100")
        assert made.returncode == 0, (made.stdout + made.stderr)[-3000:]
        stamp.write_text(key)
    return rel


# (geometry, bytes a texel, width, height, depth or layers): small and large 2D (each
# element size), 2D arrays, 3D
IMAGES = [("2d", 4, 67, 35, 1), ("2d", 1, 300, 200, 1), ("2d", 2, 1000, 3, 1),
          ("2d", 8, 50, 40, 1), ("2d", 16, 129, 77, 1), ("2d", 4, 256, 256, 1),
          ("2da", 4, 100, 50, 4), ("2da", 16, 64, 64, 3), ("3d", 4, 40, 30, 20),
          ("3d", 16, 64, 64, 64), ("3d", 1, 8, 8, 8), ("3d", 4, 33, 21, 11),
          ("3d", 4, 300, 200, 3)]
# HSA's geometry enum, and the channel (order, type) HIP would use for a texel of N bytes
_GEOMETRY = {"2d": 1, "3d": 2, "2da": 4}
_FORMAT = {1: (1, 11), 2: (1, 12), 4: (1, 15), 8: (3, 15), 16: (8, 15)}


def _descriptor_line(geometry: str, bpe: int, w: int, h: int, d: int) -> str:
    """tests/c/image_layouts.c's input: geometry order type width height depth layers."""
    order, kind = _FORMAT[bpe]
    depth, layers = (d, 0) if geometry == "3d" else (0, d if geometry == "2da" else 0)
    return f"{_GEOMETRY[geometry]} {order} {kind} {w} {h} {depth} {layers}\n"


@pytest.mark.slow
@pytest.mark.generic
@pytest.mark.parametrize("target", ["gfx1100", "gfx1201"])
def test_rocrs_image_size_and_alignment_agree_with_the_geometry(target):
    """hsa_ext_image_data_get_info (ROCr's addrlib) for the opaque layout: size and
    alignment equal tiling_gfx11.surface for the SW_MODE that hsa_ext_image_create wrote,
    whose texel offsets are modelled; the T#'s width/height are the image's."""
    tool = _built("tests/c/image_layouts.c", "image_layouts", ["clang-21", "-O1"],
                  ("-lhsa-runtime64",))
    run = _rocm6(tool, node=f"1x{target.upper()}",
                 stdin="".join(_descriptor_line(*image) for image in IMAGES))
    out = run.stdout + run.stderr[-2000:]
    agent, config, *lines = run.stdout.splitlines()
    assert run.returncode == 0 and agent == f"agent {target}", out
    assert config == "gb_addr_config unknown", out  # no hsakmt.h in ROCm 6.4's root filesystem
    assert len(lines) == len(IMAGES), out
    family = target[:5]
    modes = set()
    for (geometry, bpe, w, ht, d), line in zip(IMAGES, lines, strict=True):
        assert not line.startswith("error"), (geometry, bpe, w, ht, d, line)
        size, align, *words = (int(v, 16) if k > 1 else int(v)
                               for k, v in enumerate(line.split()))
        mode = (words[3] >> 20) & 0x1F
        kind = (words[3] >> 28) & 0xF
        assert kind == {"2d": 9, "2da": 13, "3d": 10}[geometry], line
        geo = tiling.surface(family, mode, bpe, w, ht, d if geometry != "2d" else 1)
        assert (geo.size, geo.align) == (size, align), (line, geo)
        assert callable(tiling.texel_offsets(family, mode, bpe, w, ht, d, geometry == "3d",
                                             CONFIG[family])), line
        modes.add(mode)
    # the modes seen when this was written: small and large blocks, XOR and not
    assert modes >= ({2, 21, 22, 25, 27, 28, 29, 31} if family == "gfx11" else {1, 2, 3, 4}), modes


@pytest.mark.slow
@pytest.mark.generic
@pytest.mark.parametrize("target", ["gfx1100", "gfx1201"])
def test_hip_array_texture_under_hip64(target):
    """tests/data/isa/hip_array_texture.hip by sid's hipcc, run by HIP/ROCr 6.4.3 over the
    emulated kernel: a 67x35 and a 256x256 float array (gfx1100: ADDR_SW_256B_D and
    ADDR_SW_256KB_R_X; gfx1201: ADDR3_256B_2D and ADDR3_256KB_2D) written by
    hipMemcpy2DToArray (HIP's blit kernel: image stores through a 2D T# as a 2D array,
    layer 0), read back by hipMemcpy2DFromArray and by tex2D on a texture object."""
    program = _built("tests/data/isa/hip_array_texture.hip", "hip_array_texture",
                     ["hipcc", "--offload-arch=gfx1100", "--offload-arch=gfx1201"])
    run = _rocm6(program, "67", "35", "256", "256", node=f"1x{target.upper()}")
    out = run.stdout + run.stderr[-2000:]
    for case in ("67x35 float round trip: 0 of 2345 wrong", "67x35 tex2D: 0 of 2345 wrong",
                 "256x256 float round trip: 0 of 65536 wrong",
                 "256x256 tex2D: 0 of 65536 wrong"):
        assert f"array {case}" in run.stdout, out
    assert run.returncode == 0 and "array texture ok" in run.stdout, out


@pytest.mark.slow
@pytest.mark.generic
@pytest.mark.parametrize("target", ["gfx1100", "gfx1201"])
def test_hip_arrays_layered_3d_and_surfaces_under_hip64(target):
    """tests/data/isa/hip_arrays.hip (written for HIP 5.2.3 on gfx90a) by sid's hipcc under
    HIP/ROCr 6.4.3: tex2D (point, linear, wrap) on arrays, tex2DLayered, tex3D on thick and
    thin 3D layouts, surf2Dwrite, copies in and out (ROCclr's blit kernels address a 3D
    image as a 2D array: z is the layer coordinate). gfx1100 takes ADDR_SW_256B_D,
    256KB_R_X, 64KB_S_X and 256KB_Z_X; gfx1201 256B_2D, 256KB_2D and 4KB_2D."""
    program = _built("tests/data/isa/hip_arrays.hip", "hip_arrays64",
                     ["hipcc", "--offload-arch=gfx1100", "--offload-arch=gfx1201"])
    run = _rocm6(program, node=f"1x{target.upper()}")
    out = run.stdout + run.stderr[-2000:]
    results = [ln for ln in run.stdout.splitlines() if " wrong" in ln]
    assert len(results) == 9 and all(": 0 of " in ln for ln in results), out
    assert "tex3D float 3D array (thin)" in run.stdout, out
    assert run.returncode == 0 and "arrays ok" in run.stdout, out


@pytest.mark.hsa_virtual
def test_a_2d_tsharp_under_an_array_access_is_layer_0_only():
    """clang 22's 2D-array image_load through ROCr's 2D T# (what HIP's blit kernels do):
    layer 0 reads the image; a lane asking for layer 1 stops the queue in one line (what
    hardware returns there is not documented where we looked)."""
    target, words, _, bpe, w, ht, _, mode = ROCR_TSHARPS[1]  # gfx1201 2D RGBA32F 4KB_2D
    h, code = _harness(target)
    geo = tiling.surface("gfx12", mode, bpe, w, ht, 1)
    texels = np.arange(geo.size // 4, dtype=np.float32)
    src = h.buffer(_with_base(words, h.buffer(texels)))
    out = h.alloc(2 * ht * w * 16)
    h.dispatch(code, "load_2d_array", (w, ht, 1), (8, 4, 1), [out, src, w, ht])
    where = tiling.texel_offsets("gfx12", mode, bpe, w, ht, 1, False, CONFIG["gfx12"])
    y, x = (a.ravel() for a in np.meshgrid(np.arange(ht), np.arange(w), indexing="ij"))
    first = where(x, y, np.zeros_like(x)) // 4  # the texel's first float
    got = h.read(out, np.float32, ht * w * 4).reshape(ht * w, 4)
    np.testing.assert_array_equal(got[:, 0], texels[first])
    with pytest.raises(Exception) as err:
        h.dispatch(code, "load_2d_array", (w, ht, 2), (8, 4, 1), [out, src, w, ht])
    text = str(err.value)
    assert "array layer 1 of a non-array T#" in text and "\n" not in text, text
