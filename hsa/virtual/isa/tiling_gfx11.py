"""gfx11 and gfx12 tiled image layouts (the T#'s SW_MODE): where a texel of a swizzled
surface lies, and how big the surface is.

ROCr's image managers (image_manager_gfx11.cpp / image_manager_gfx12.cpp) create every
HSA_EXT_IMAGE_DATA_LAYOUT_OPAQUE image that is not a 1D buffer tiled, through AMD's address
library (addrlib) inside ROCr, and write addrlib's swizzle mode into the T#'s SW_MODE
unchanged. HIP's hipMallocArray images are such images. Which mode ROCr takes:
- gfx11: Addr2GetPreferredSurfaceSetting's choice: ADDR_SW_256B_D (2), 4KB_D (6) / 4KB_D_X (22),
  64KB_R_X (27), 256KB_R_X (31) for 2D images and arrays, 4KB_S(_X) (5, 21), 64KB_S_X (25)
  and 256KB_S_X (29) for 3D; also modelled: 64KB_S (9), 64KB_D_X (26), 256KB_D_X (30) and
  the Z_X twins of the R_X modes (24, 28: the same single-sample pattern);
- gfx12: addrlib3's possible modes, the largest block whose surface is at most twice the
  smallest one's: ADDR3_256B_2D (1), 4KB_2D (2), 64KB_2D (3), 256KB_2D (4), for 3D images
  too (then slice after slice); ADDR3_4KB_3D (5), 64KB_3D (6), 256KB_3D (7) are modelled
  as well.
Seen from the real ROCr 6.4.3 (tests/c/image_layouts.c): gfx1100 2D 67x35 float
256B_D, 129x77 RGBA32F 4KB_D_X, 256x256 float 256KB_R_X, 2D array 64KB_R_X, 3D 4KB_S_X,
64KB_S_X and 256KB_S_X; gfx1201 256B_2D, 4KB_2D, 64KB_2D, 256KB_2D (2D, 2D arrays and 3D).

Within a block of 2^n bytes, address bit i is the XOR (parity) of the coordinate bits its
swizzle pattern names: addrlib's GFX11_SW_*_PATINFO / GFX12_SW_*_PATINFO rows (its
gfx11SwizzlePattern.h / gfx12SwizzlePattern.h, one row per element size, gfx11's XOR rows
also per pipe/packer count), evaluated on the whole coordinates as addrlib's
ComputeOffsetFromSwizzlePattern does (XOR terms may name bits above the block: the block's
place feeds the pipe XOR). Written below as one word a bit, lowest first: `X3` is bit 3 of
x in elements, `Y2^Z3^X6` the XOR of three, `0` a byte-within-element bit. Blocks follow
each other row-major over the pitch (the width rounded up to the block width); a slice (2D
arrays: the array layer) is pitch x height (rounded to the block height) elements; 3D
("thick") blocks hold several slices: slice z lies in block row z // block depth
(addrlib's Gfx11Lib/Gfx12Lib ComputeSurfaceAddrFromCoord{Micro,Macro}Tiled). The pipe-bank
XOR of a T# is 0 (ROCr does not set one). A single mip level has no mip tail offset on
either family (gfx12's tail for one level starts at offset 0 of its one block).

gfx11's XOR ("_X") modes depend on GB_ADDR_CONFIG's NUM_PIPES and NUM_PKRS (addrlib's
m_colorBaseIndex picks the row); the rows here are for 32 pipes and 32 packers only (the
gfx1100's GB_ADDR_CONFIG in hsa.abi.targets, which the emulated kernel reports to ROCr's
addrlib), and another pipe/packer count is refused. gfx12's patterns depend on the element
size only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hsa.virtual.isa import swizzle


def _pipes_pkrs(config: int) -> tuple[int, int]:
    return config & 7, (config >> 8) & 7


# gfx11 (addrlib's AddrSwizzleMode numbers): mode -> (block bytes log2, 3D "thick", rows for
# 1, 2, 4, 8, 16-byte elements). Rows from gfx11SwizzlePattern.h: non-XOR modes rows 0-4;
# XOR modes rows m_colorBaseIndex + log2(bytes), which for 32 pipes and 32 packers is 65-69
# ("32 pipes (32 PKRs)"). A 64 KiB _X row is the 256 KiB one's first 16 bits.
_G11_256B_D = ["X0 X1 Y0 X2 Y1 Y2 X3 Y3", "0 X0 Y0 X1 Y1 X2 Y2 X3",
               "0 0 X0 Y0 X1 Y1 X2 Y2", "0 0 0 X0 Y0 X1 X2 Y1",
               "0 0 0 0 X0 Y0 X1 Y1"]  # GFX11_SW_256_D_PATINFO rows 0-4
_G11_4KB_D_HI = ["Y4 X4 Y5 X5", "Y3 X4 Y4 X5", "Y3 X3 Y4 X4", "Y2 X3 Y3 X4",
                 "Y2 X2 Y3 X3"]  # GFX11_SW_4K_D_PATINFO rows 0-4, bits 8-11
_G11_4KB_D_X_HI = ["Z3^Y4^X7 Z2^X4^Y7 Z1^Y5^X6 Z0^X5^Y6",
                   "Y3^Z3^X7 Z2^X4^Y6 Z1^Y4^X6 Z0^X5^Y5",
                   "Y3^Z3^X6 Z2^X3^Y6 Z1^Y4^X5 Z0^X4^Y5",
                   "Y2^Z3^X6 Z2^X3^Y5 Z1^Y3^X5 Z0^X4^Y4",
                   "Y2^Z3^X5 X2^Z2^Y5 Z1^Y3^X4 Z0^X3^Y4"]  # GFX11_SW_4K_D_X rows 65-69
_G11_256KB_D_X_HI = ["Y4^Z4^X8 Z3^X4^Y8 Z2^Y5^X7 Z1^X5^Y7 Z0^X6^Y6 X6 Y7 X7 Y8 X8",
                     "Y3^Z4^X8 Z3^X4^Y7 Z2^Y4^X7 Z1^X5^Y6 Z0^Y5^X6 X6 Y6 X7 Y7 X8",
                     "Y3^Z4^X7 X3^Z3^Y7 Z2^Y4^X6 Z1^X4^Y6 Z0^X5^Y5 X5 Y6 X6 Y7 X7",
                     "Y2^Z4^X7 X3^Z3^Y6 Z2^Y3^X6 Z1^X4^Y5 Z0^Y4^X5 X5 Y5 X6 Y6 X7",
                     "Y2^Z4^X6 X2^Z3^Y6 Z2^Y3^X5 Z1^X3^Y5 Z0^X4^Y4 X4 Y5 X5 Y6 X6"]
# GFX11_SW_256K_D_X_PATINFO rows 65-69, bits 8-17 (GFX11_SW_64K_D_X: bits 8-15 the same)
_G11_S3_LO = ["X0 X1 Z0 Y0 Y1 Z1 X2 Z2", "0 X0 Z0 Y0 X1 Z1 Y1 Z2", "0 0 X0 Y0 X1 Z0 Y1 Z1",
              "0 0 0 X0 Y0 Z0 X1 Z1", "0 0 0 0 X0 Z0 Y0 Z1"]  # GFX11_SW_4K_S3 rows 0-4, 0-7
_G11_4KB_S3_HI = ["Y2 X3 Z3 Y3", "Y2 X2 Z3 Y3", "Y2 X2 Z2 Y3", "Y1 X2 Z2 Y2",
                  "Y1 X1 Z2 Y2"]  # GFX11_SW_4K_S3_PATINFO rows 0-4, bits 8-11
_G11_64KB_S3_HI = ["Y2 X3 Z3 Y3 X4 Z4 Y4 X5", "Y2 X2 Z3 Y3 X3 Z4 Y4 X4",
                   "Y2 X2 Z2 Y3 X3 Z3 Y4 X4", "Y1 X2 Z2 Y2 X3 Z3 Y3 X4",
                   "Y1 X1 Z2 Y2 X2 Z3 Y3 X3"]  # GFX11_SW_64K_S3_PATINFO rows 0-4, bits 8-15
_G11_4KB_S3_X_HI = ["Y2^X6^Z6 X3^Y5^Z5 Z3^Y4^X5 Y3^X4^Z4",
                    "Y2^X5^Z6 X2^Y5^Z5 Z3^X4^Y4 X3^Y3^Z4",
                    "Y2^X5^Z5 X2^Z4^Y5 Z2^X4^Y4 X3^Y3^Z3",
                    "Y1^X5^Z5 X2^Y4^Z4 Z2^Y3^X4 Y2^X3^Z3",
                    "Y1^X4^Z5 X1^Y4^Z4 Z2^X3^Y3 X2^Y2^Z3"]  # GFX11_SW_4K_S3_X rows 65-69
_G11_256KB_S3_X_HI = ["Y2^X7^Z7 X3^Y6^Z6 Z3^Y5^X6 Y3^X5^Z5 X4^Y4^Z4 Z4 Y4 X5 Z5 Y5",
                      "Y2^X6^Z7 X2^Y6^Z6 Z3^X5^Y5 Y3^X4^Z5 X3^Y4^Z4 Z4 Y4 X4 Z5 Y5",
                      "Y2^X6^Z6 X2^Z5^Y6 Z2^X5^Y5 Y3^X4^Z4 X3^Z3^Y4 Z3 Y4 X4 Z4 Y5",
                      "Y1^X6^Z6 X2^Y5^Z5 Z2^Y4^X5 Y2^X4^Z4 X3^Y3^Z3 Z3 Y3 X4 Z4 Y4",
                      "Y1^X5^Z6 X1^Y5^Z5 Z2^X4^Y4 Y2^X3^Z4 X2^Y3^Z3 Z3 Y3 X3 Z4 Y4"]
# GFX11_SW_256K_S3_X_PATINFO rows 65-69, bits 8-17 (GFX11_SW_64K_S3_X: bits 8-15 the same)

_G11_64KB_ZR_X_HI = ["Y4^X9^Y9 Z1^X4^Y4 Z0^Y5^X8 X5^Y8 Y6^X7 X7 Y7 X6^Y7",
                     "Y4^X9^Y9 Z1^X4^Y4 Z0^Y5^X8 X5^Y8 Y6^X7 Y3 X7 X6^Y7",
                     "Y4^X9^Y9 Z1^X4^Y4 Z0^Y5^X8 X5^Y8 Y6^X7 X3 Y3 X6^Y7",
                     "Y4^X9^Y9 Z3^X4^Y4 Z2^Y5^X8 Z1^X5^Y8 Y2^Y6^X7 X3 Y3 Z0^X6^Y7",
                     "Y4^X9^Y9 Z2^X4^Y4 Z1^Y5^X8 Z0^X5^Y8 Y2^Y6^X7 X3 Y3 X2^X6^Y7"]
# GFX11_SW_64K_ZR_X_1xaa_PATINFO rows 65-69, bits 8-15 (64KB_Z_X and 64KB_R_X, one sample)
_G11_256KB_ZR_X_HI = ["Y4^X9^Y9 Z1^X4^Y4 Z0^Y5^X8 X5^Y8 Y6^X7 X7 Y7 X8^Y9 Y8^X9 X6^Y7",
                      "Y4^X9^Y9 Z1^X4^Y4 Z0^Y5^X8 X5^Y8 Y6^X7 Y3 X7 X8^Y8 Y7^X9 X6^Y7",
                      "Y4^X9^Y9 Z1^X4^Y4 Z0^Y5^X8 X5^Y8 Y6^X7 X3 Y3 X7^Y8 Y7^X8 X6^Y7",
                      "Y4^X9^Y9 X4^Y4^Z4 Z3^Y5^X8 Z2^X5^Y8 Z1^Y6^X7 Y2 X3 Y3^X8 X7^Y7 Z0^X6^Y7",
                      "Y4^X9^Y9 X4^Y4^Z4 Z3^Y5^X8 Z2^X5^Y8 Z1^Y6^X7 X2 Y2 Y3^X7 X3^Y7 Z0^X6^Y7"]
# GFX11_SW_256K_ZR_X_1xaa_PATINFO rows 65-69, bits 8-17 (256KB_Z_X and 256KB_R_X)

_GFX11_XOR_CONFIG = (5, 5)  # the (NUM_PIPES, NUM_PKRS) the _X rows above are for


def _rows(lo: list[str], hi: list[str], bits: int) -> list[str]:
    return [" ".join((a + " " + b).split()[:bits]) for a, b in zip(lo, hi, strict=True)]


# gfx12 (addrlib3's Addr3SwizzleMode numbers): 2D rows GFX12_SW_256KB_2D_1xAA_PATINFO, 3D rows
# GFX12_SW_256KB_3D_PATINFO (rows 0-4 each); a smaller block's row is the first bits of its
# 256 KiB row (gfx12SwizzlePattern.h: the 4KB and 64KB rows name the same nibbles)
_G12_2D = ["X0 X1 Y0 X2 Y1 Y2 X3 Y3 Y4 X4 Y5 X5 Y6 X6 Y7 X7 Y8 X8",
           "0 X0 Y0 X1 Y1 X2 Y2 X3 Y3 X4 Y4 X5 Y5 X6 Y6 X7 Y7 X8",
           "0 0 X0 Y0 X1 Y1 X2 Y2 Y3 X3 Y4 X4 Y5 X5 Y6 X6 Y7 X7",
           "0 0 0 X0 Y0 X1 X2 Y1 Y2 X3 Y3 X4 Y4 X5 Y5 X6 Y6 X7",
           "0 0 0 0 X0 Y0 X1 Y1 Y2 X2 Y3 X3 Y4 X4 Y5 X5 Y6 X6"]
_G12_3D = ["X0 X1 Z0 Y0 Y1 Z1 X2 Z2 Y2 X3 Z3 Y3 X4 Z4 Y4 X5 Z5 Y5",
           "0 X0 Z0 Y0 X1 Z1 Y1 Z2 Y2 X2 Z3 Y3 X3 Z4 Y4 X4 Z5 Y5",
           "0 0 X0 Y0 X1 Z0 Y1 Z1 Y2 X2 Z2 Y3 X3 Z3 Y4 X4 Z4 Y5",
           "0 0 0 X0 Y0 Z0 X1 Z1 Y1 X2 Z2 Y2 X3 Z3 Y3 X4 Z4 Y4",
           "0 0 0 0 X0 Z0 Y0 Z1 Y1 X1 Z2 Y2 X2 Z3 Y3 X3 Z4 Y4"]


@dataclass(frozen=True)
class Mode:
    name: str
    block_log2: int  # bytes
    thick: bool  # 3D blocks holding several slices
    rows: tuple[str, ...]  # per log2(element bytes) 0..4
    xor: bool = False  # gfx11 pipe/packer-dependent rows
    thin_3d: bool = False  # a thin mode that lays 3D images out too, slice after slice


def _modes() -> dict[str, dict[int, Mode]]:
    g11 = {
        2: Mode("ADDR_SW_256B_D", 8, False, tuple(_G11_256B_D)),
        6: Mode("ADDR_SW_4KB_D", 12, False, tuple(_rows(_G11_256B_D, _G11_4KB_D_HI, 12))),
        22: Mode("ADDR_SW_4KB_D_X", 12, False,
                 tuple(_rows(_G11_256B_D, _G11_4KB_D_X_HI, 12)), True),
        26: Mode("ADDR_SW_64KB_D_X", 16, False,
                 tuple(_rows(_G11_256B_D, _G11_256KB_D_X_HI, 16)), True),
        30: Mode("ADDR_SW_256KB_D_X", 18, False,
                 tuple(_rows(_G11_256B_D, _G11_256KB_D_X_HI, 18)), True),
        24: Mode("ADDR_SW_64KB_Z_X", 16, False,
                 tuple(_rows(_G11_256B_D, _G11_64KB_ZR_X_HI, 16)), True, True),
        27: Mode("ADDR_SW_64KB_R_X", 16, False,
                 tuple(_rows(_G11_256B_D, _G11_64KB_ZR_X_HI, 16)), True, True),
        28: Mode("ADDR_SW_256KB_Z_X", 18, False,
                 tuple(_rows(_G11_256B_D, _G11_256KB_ZR_X_HI, 18)), True, True),
        31: Mode("ADDR_SW_256KB_R_X", 18, False,
                 tuple(_rows(_G11_256B_D, _G11_256KB_ZR_X_HI, 18)), True, True),
        5: Mode("ADDR_SW_4KB_S", 12, True, tuple(_rows(_G11_S3_LO, _G11_4KB_S3_HI, 12))),
        21: Mode("ADDR_SW_4KB_S_X", 12, True,
                 tuple(_rows(_G11_S3_LO, _G11_4KB_S3_X_HI, 12)), True),
        9: Mode("ADDR_SW_64KB_S", 16, True, tuple(_rows(_G11_S3_LO, _G11_64KB_S3_HI, 16))),
        25: Mode("ADDR_SW_64KB_S_X", 16, True,
                 tuple(_rows(_G11_S3_LO, _G11_256KB_S3_X_HI, 16)), True),
        29: Mode("ADDR_SW_256KB_S_X", 18, True,
                 tuple(_rows(_G11_S3_LO, _G11_256KB_S3_X_HI, 18)), True),
    }
    g12 = {
        1: Mode("ADDR3_256B_2D", 8, False, tuple(_rows(_G12_2D, [""] * 5, 8)), thin_3d=True),
        2: Mode("ADDR3_4KB_2D", 12, False, tuple(_rows(_G12_2D, [""] * 5, 12)), thin_3d=True),
        3: Mode("ADDR3_64KB_2D", 16, False, tuple(_rows(_G12_2D, [""] * 5, 16)), thin_3d=True),
        4: Mode("ADDR3_256KB_2D", 18, False, tuple(_G12_2D), thin_3d=True),
        5: Mode("ADDR3_4KB_3D", 12, True, tuple(_rows(_G12_3D, [""] * 5, 12))),
        6: Mode("ADDR3_64KB_3D", 16, True, tuple(_rows(_G12_3D, [""] * 5, 16))),
        7: Mode("ADDR3_256KB_3D", 18, True, tuple(_G12_3D)),
    }
    return {"gfx11": g11, "gfx12": g12}


MODES = _modes()
# 3D blocks' (width, height, depth) log2 per log2(element bytes): addrlib's Block4K_Log2_3d,
# Block64K_Log2_3d, Block256K_Log2_3d (the same on gfx11 and gfx12)
_THICK = {12: [(4, 4, 4), (3, 4, 4), (3, 4, 3), (3, 3, 3), (2, 3, 3)],
          16: [(6, 5, 5), (5, 5, 5), (5, 5, 4), (5, 4, 4), (4, 4, 4)],
          18: [(6, 6, 6), (5, 6, 6), (5, 6, 5), (5, 5, 5), (4, 5, 5)]}


def equation(family: str, sw_mode: int, bpe: int) -> list[list[tuple[int, int]]]:
    """Per address bit of a block, its (axis 0/1/2 = x/y/z, bit) terms; [] for a byte bit."""
    row = MODES[family][sw_mode].rows[bpe.bit_length() - 1]
    return [[("XYZ".index(term[0]), int(term[1:])) for term in word.split("^")]
            if word != "0" else [] for word in row.split()]


@dataclass(frozen=True)
class Surface:
    """A tiled surface's geometry as addrlib computes it (ComputeSurfaceInfo*Tiled)."""

    block: tuple[int, int, int]  # width, height, depth in elements
    pitch: int  # elements a row of blocks spans
    height: int  # rows, rounded up to the block height
    slices: int  # rounded up to the block depth (3D)
    slice_bytes: int  # pitch * height * bpe
    size: int  # bytes (addrlib's surfSize, ROCr's image size)
    align: int  # bytes (addrlib's baseAlign: the block size)


def surface(family: str, sw_mode: int, bpe: int, width: int, height: int, slices: int,
            ) -> Surface:
    mode = MODES[family][sw_mode]
    e = bpe.bit_length() - 1
    if mode.thick:
        bw, bh, bd = (1 << k for k in _THICK[mode.block_log2][e])
    else:  # thin: the block's bits after the element's, x taking the odd one
        bits = mode.block_log2 - e
        bw, bh, bd = 1 << (bits + 1) // 2, 1 << bits // 2, 1
    pitch, rows = -(-width // bw) * bw, -(-height // bh) * bh
    depth = -(-slices // bd) * bd
    slice_bytes = pitch * rows * bpe
    return Surface((bw, bh, bd), pitch, rows, depth, slice_bytes, slice_bytes * depth,
                   1 << mode.block_log2)


def texel_offsets(family: str, sw_mode: int, bpe: int, width: int, height: int,
                  slices: int, is_3d: bool, config: int) -> Callable | str:
    """fn(x, y, z) -> byte offsets (int64) of texels inside the surface from its base, or a
    one-line why not. z is the slice (3D) or array layer; `config` the GB_ADDR_CONFIG.
    Fields (addrlib's GB_ADDR_CONFIG_GFX11): NUM_PIPES [2:0] (log2), PIPE_INTERLEAVE_SIZE
    [5:3] (0: 256 B, the only one addrlib's patterns support), NUM_PKRS [10:8] (log2)."""
    modes = MODES.get(family, {})
    mode = modes.get(sw_mode)
    if mode is None:
        known = ", ".join(f"{m.name} ({k})" for k, m in sorted(modes.items()))
        return (f"tiled layout (T# SW_MODE {sw_mode}; {family} modes modelled: {known})")
    # thin modes lay 3D images out slice after slice where addrlib allows it (gfx12's 2D
    # modes: ROCr picks ADDR3_4KB_2D for a 40x30x20 float image; gfx11's Z_X/R_X modes,
    # Gfx11Rsrc3dThinSwModeMask); gfx11's other 3D modes take the S3/D3 patterns
    if (mode.thick and not is_3d) or (is_3d and not mode.thick and not mode.thin_3d):
        return (f"tiled layout {mode.name} (T# SW_MODE {sw_mode}) on a "
                f"{'3D' if is_3d else '1D/2D'} image")
    if bpe not in (1, 2, 4, 8, 16):
        return f"tiled layout {mode.name} of {bpe}-byte elements"
    if (config >> 3) & 7:
        return f"tiled layout {mode.name} with a pipe interleave other than 256 B"
    if mode.xor and _pipes_pkrs(config) != _GFX11_XOR_CONFIG:
        pipes, pkrs = _pipes_pkrs(config)
        return (f"tiled layout {mode.name} for GB_ADDR_CONFIG 0x{config:x} ({1 << pipes} "
                f"pipes, {1 << pkrs} packers; rows are here for 32 and 32)")
    geo = surface(family, sw_mode, bpe, width, height, slices)
    return swizzle.texel_offsets(equation(family, sw_mode, bpe), geo.block, geo.pitch,
                                 geo.height, mode.block_log2)
