"""HIP texture objects end to end on the emulated gfx90a (issue 32): Debian's hipcc 5.2.3
builds tests/data/isa/hip_textures.hip, and the real HIP 5.2.3 runtime over ROCr 5.2.3 and
the emulated kernel (scripts/emulated.sh) creates the texture objects (ROCr's gfx9 image
manager writes the T# and S#), the kernels' tex2D (image_sample through hsa.virtual.isa.image)
and tex1Dfetch (buffer_load_format_x through a V#) read them, and the program compares every
result with its host's reading of the same texels: a float texture at unnormalised texel
centres with clamp, a float4 texture at normalised coordinates from -2 to 3 image sizes with
wrap (HIP snaps those to texel edges, which the 8-bit sub-texel precision has to keep), a
float texture with hipFilterModeLinear (bilinear S#) at unnormalised coordinates with clamp."""

from __future__ import annotations

from pathlib import Path

import pytest
from hip_emulated import run_hip_program

HERE = Path(__file__).resolve().parent
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
