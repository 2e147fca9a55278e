"""HIP texture objects end to end on the emulated gfx90a (issue 32): Debian's hipcc 5.2.3
builds tests/data/isa/hip_textures.hip, and the real HIP 5.2.3 runtime over ROCr 5.2.3 and
the emulated kernel (scripts/emulated.sh) creates the texture objects (ROCr's gfx9 image
manager writes the T# and S#), the kernels' tex2D (image_sample through hsa.virtual.isa.image)
and tex1Dfetch (buffer_load_format_x through a V#) read them, and the program compares every
result with its host's reading of the same texels: a float texture at unnormalised texel
centres with clamp, a float4 texture at normalised coordinates from -2 to 3 image sizes with
wrap (HIP snaps those to texel edges, which the 8-bit sub-texel precision has to keep), a
float texture with hipFilterModeLinear (bilinear S#) at unnormalised coordinates with clamp.
HIP arrays (tiled by ROCr's addrlib) through ROCclr's blit kernels, tex2D/tex2DLayered/tex3D
and surf2Dwrite (tests/data/isa/hip_arrays.hip), and the sizes ROCr reports for tiled images
against hsa.virtual.isa.tiling_gfx9's geometry (tests/c/image_layouts.c)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hip_emulated import run_hip_program

from hsa.abi.targets import lookup

HERE = Path(__file__).resolve().parent
MI200_CONFIG = lookup("gfx90a").gb_addr_config
SOURCE = HERE / "data" / "isa" / "hip_textures.hip"

pytestmark = [pytest.mark.generic, pytest.mark.slow]


def test_hip_texture_objects(tmp_path):
    run = run_hip_program(SOURCE, tmp_path)
    out = run.stdout + run.stderr[-2000:]
    for case in ("tex2D float pitch 256: 0 of 185 wrong",
                 "tex2D float4 normalised wrap: 0 of 1024 wrong",
                 "tex2D float linear clamp: 0 of 256 wrong", "tex1Dfetch: 0 of 185 wrong"):
        assert case in run.stdout, out
    assert run.returncode == 0 and "textures ok" in run.stdout, out


ARRAYS = HERE / "data" / "isa" / "hip_arrays.hip"
NODE = "gfx90a"


def test_hip_arrays_tiled_by_rocr(tmp_path):
    """hipMallocArray / hipMalloc3DArray images, which ROCr's addrlib tiles (4KB_D_X,
    64KB_D_X, 64KB_Z_X: the program prints each T#'s SW_MODE): ROCclr's blit kernels copy
    host rows in and out (hipMemcpy2DToArray / FromArray, hipMemcpy3D), tex2D point and
    bilinear, tex2DLayered and tex3D read them, surf2Dwrite writes one; every value against
    the host's own texels (tests/data/isa/hip_arrays.hip). Before tiled layouts were
    modelled the first copy stopped the queue ("tiled layout (T# SW_MODE 22)")."""
    run = run_hip_program(ARRAYS, tmp_path, node=NODE)
    out = run.stdout + run.stderr[-2000:]
    for case in ("tex2D float array point (SW_MODE 22): 0 of 256 wrong",
                 "tex2D float array linear (SW_MODE 22): 0 of 256 wrong",
                 "float array round trip (SW_MODE 22): 0 of 851 wrong",
                 "tex2D float4 array wrap (SW_MODE 26): 0 of 256 wrong",
                 "float4 array round trip (SW_MODE 26): 0 of 7000 wrong",
                 "surf2Dwrite float array (SW_MODE 26): 0 of 30000 wrong",
                 "tex2DLayered float layered array (SW_MODE 22): 0 of 3404 wrong",
                 "tex3D float 3D array (SW_MODE 24): 0 of 7659 wrong",
                 "tex3D float 3D array (thin) (SW_MODE 26): 0 of 60000 wrong"):
        assert case in run.stdout, out
    assert run.returncode == 0 and "arrays ok" in run.stdout, out


# image descriptors (HSA geometry, channel order, channel type, width, height, depth, layers):
# 2D at 1 to 16 bytes a texel and sizes that get 4 KiB or 64 KiB blocks, 1D (linear), 2D
# arrays and 3D images that get thick and thin layouts
DESCRIPTORS = [(1, 1, 11, 37, 23, 0, 0), (1, 1, 14, 37, 23, 0, 0), (1, 1, 15, 37, 23, 0, 0),
               (1, 3, 15, 37, 23, 0, 0), (1, 8, 15, 37, 23, 0, 0), (1, 1, 15, 100, 70, 0, 0),
               (1, 8, 15, 100, 70, 0, 0), (1, 1, 15, 300, 200, 0, 0),
               (1, 1, 11, 300, 200, 0, 0), (1, 1, 15, 1, 1, 0, 0), (1, 1, 15, 4096, 1, 0, 0),
               (0, 1, 15, 100, 0, 0, 0), (3, 1, 15, 100, 0, 0, 5), (4, 1, 15, 37, 23, 0, 4),
               (4, 8, 15, 100, 70, 0, 3), (2, 1, 15, 5, 3, 9, 0), (2, 1, 15, 16, 16, 16, 0),
               (2, 1, 15, 64, 64, 8, 0), (2, 8, 15, 32, 32, 32, 0), (2, 1, 11, 64, 64, 64, 0),
               (2, 1, 15, 200, 100, 3, 0)]


def test_rocr_sizes_tiled_images_as_the_executor_lays_them_out(tmp_path):
    """What ROCr 5.2.3's own addrlib makes of each descriptor on the emulated gfx90a (given
    the GB_ADDR_CONFIG the emulated kernel reports, checked to be hsa.abi.targets' gfx90a
    value through libhsakmt's hsaKmtGetTileConfig): hsa_ext_image_data_get_info's size and
    alignment and hsa_ext_image_create's T# (tests/c/image_layouts.c). For every tiled T#,
    hsa.virtual.isa.tiling_gfx9 pads the image to the same pitch (the T#'s PITCH), surface
    size and block alignment; 1D images stay linear. The swizzle modes seen are the ones
    the executor models."""
    import shutil
    import subprocess

    from hsa.emulated import build
    from hsa.virtual.isa import image, tiling_gfx9

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    build.ensure_built()
    exe = tmp_path / "image_layouts"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(HERE / "c" / "image_layouts.c"),
                    "-lhsa-runtime64", "-lhsakmt"], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(AMDGPU_EMULATED_NODE=NODE, PYTHONPATH=str(HERE.parent))
    run = subprocess.run(["bash", str(HERE.parent / "scripts" / "emulated.sh"), str(exe)],
                         input="".join(" ".join(map(str, d)) + "\n" for d in DESCRIPTORS),
                         env=env, capture_output=True, text=True, timeout=300)
    agent, config, *lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) == len(DESCRIPTORS), run.stdout + run.stderr
    assert agent == "agent gfx90a", agent
    assert config == f"gb_addr_config 0x{MI200_CONFIG:08x}"  # ROCr's addrlib gets the target's
    modes = set()
    for desc, line in zip(DESCRIPTORS, lines, strict=True):
        geometry, _, _, width, height, depth, layers = desc
        size, align, *words = (int(v, 16) if k > 1 else int(v)
                               for k, v in enumerate(line.split()))
        sw_mode = words[3] >> 20 & 0x1F
        modes.add(sw_mode)
        if geometry in (0, 3):  # 1D and 1D arrays: addrlib lays 1D out linearly
            assert sw_mode == 0, (desc, line)
            continue
        t = image._tsharp_gfx9(words)
        bpe = t["format"].size
        slices = depth if geometry == 2 else max(layers, 1)
        pitch, want_size, want_align = tiling_gfx9.surface_bytes(
            sw_mode, bpe, width, max(height, 1), slices, geometry == 2)
        assert (t["pitch"], size, align) == (pitch, want_size, want_align), (desc, line)
        assert callable(tiling_gfx9.texel_offsets(sw_mode, bpe, t["pitch"], height, slices,
                                                  geometry == 2, MI200_CONFIG))
    assert modes == {0, 20, 22, 24, 26}, modes
