"""T# descriptors as ROCr's image managers write them, for the image tests (issue 32):
`tsharp` (gfx9's image_manager_ai.cpp, gfx11's image_manager_gfx11.cpp, gfx12's
image_manager_gfx12.cpp, linear layout) and the unified format numbers they use."""

from __future__ import annotations

import numpy as np

TYPES = {"1D": 8, "2D": 9, "3D": 10, "1D_ARRAY": 12, "2D_ARRAY": 13}
XYZW, BGRA = (4, 5, 6, 7), (6, 5, 4, 7)  # DST_SEL: 4..7 pick x..w
# gfx9 T#s name formats by (BUF_DATA_FORMAT, BUF_NUM_FORMAT) (llvm-mc-19's tbuffer names):
# the gfx11 unified formats these tests use -> gfx9's pair
GFX9_FORMATS = {63: (14, 7), 42: (10, 0), 11: (2, 4), 6: (1, 5), 48: (11, 4), 55: (12, 4),
                29: (5, 7), 22: (4, 7), 57: (12, 7), 20: (4, 4), 21: (4, 5)}


def tsharp(base: int, fmt: int, width: int, height: int = 1, kind: str = "2D", pitch: int = 0,
           slices: int = 1, sel: tuple[int, ...] = XYZW, target: str = "gfx1100",
           sw_mode: int = 0) -> np.ndarray:
    """The 8-dword T# ROCr's PopulateImageSrd writes for a linear image: gfx11's
    (image_manager_gfx11.cpp), gfx12's (image_manager_gfx12.cpp: FORMAT moved to word 1
    [24:17], PITCH-1 in word 4's DEPTH for 1D/2D) or gfx9's (image_manager_ai.cpp:
    DATA/NUM_FORMAT, WIDTH-1 in word 2, DEPTH-1 and PITCH-1 side by side in word 4 for every
    type). `sw_mode`: word 3's SW_MODE [24:20] (0: linear; a tiled T#'s PITCH is the padded
    pitch)."""
    w = [0] * 8
    w[0] = (base >> 8) & 0xFFFFFFFF
    w[3] = (sel[0] | sel[1] << 3 | sel[2] << 6 | sel[3] << 9 | (sw_mode & 0x1F) << 20
            | TYPES[kind] << 28)
    if target.startswith("gfx9"):
        data, num = GFX9_FORMATS[fmt]
        w[1] = ((base >> 40) & 0xFF) | data << 20 | num << 26
        w[2] = (width - 1) | (height - 1) << 14
        w[4] = (slices - 1) | ((pitch or width) - 1) << 13
        return np.array(w, np.uint32)
    flat = kind in ("1D", "2D")
    if target.startswith("gfx12"):  # image_manager_gfx12.cpp: FORMAT at word 1 [24:17]
        w[1] = ((base >> 40) & 0xFF) | (fmt << 17) | (((width - 1) & 3) << 30)
        w[2] = ((width - 1) >> 2) | ((height - 1) << 14)
        w[4] = (pitch or width) - 1 if flat else slices - 1  # pitch-1 < 2**14 here
        return np.array(w, np.uint32)
    w[1] = ((base >> 40) & 0xFF) | (fmt << 20) | (((width - 1) & 3) << 30)
    w[2] = ((width - 1) >> 2) | ((height - 1) << 14)
    w[4] = (slices - 1) if kind in ("3D", "1D_ARRAY", "2D_ARRAY") else (pitch or width) - 1
    return np.array(w, np.uint32)
