"""Image loads, stores and samples of compute kernels (gfx11 MIMG) through T# and S#.

What runs: image_load / image_store and their _mip forms at mip level 0, on 1D, 2D, 3D,
1D-array and 2D-array images in linear layout (SW_MODE 0), in any unified format of
`bufformat` (8/16/32-bit UNORM/SNORM/UINT/SINT/FLOAT..., 1-4 channels), with the T#'s
DST_SEL swizzle and the instruction's DMASK; image_sample / image_sample_lz of float
formats with a point-filtering S# (see `_compile_sample`; A16 coordinates too). Everything
else an image instruction or descriptor can ask for (bilinear filtering, gathers, atomics,
tiled layouts, mips, MSAA, cubes, D16, TFE/LWE) stops the queue with one line naming it:
nothing is guessed.

The MIMG encoding (LLVM's MIMGe_gfx11): dword 0 NSA [0], DIM [4:2], UNORM [7], DMASK [11:8],
A16 [16], D16 [17], op [25:18]; dword 1 VADDR [7:0], VDATA [15:8], SRSRC/4 [20:16], TFE [21],
LWE [22], SSAMP/4 [30:26]; with NSA, dword 2 holds address VGPRs 1-4, a byte each.

The T# (ROCr's src/image/resource_gfx11.h, as ROCr's image manager fills it): base address
>> 8 in word 0 and word 1 [7:0]; FORMAT word 1 [27:20]; WIDTH-1 word 1 [31:30] (low bits)
and word 2 [11:0]; HEIGHT-1 word 2 [27:14]; DST_SEL_X..W word 3 [11:0]; BASE_LEVEL [15:12],
LAST_LEVEL [19:16], SW_MODE [24:20], TYPE [31:28] (8 1D, 9 2D, 10 3D, 12 1D array, 13 2D
array); word 4: PITCH-1 [13:0] for 1D/2D, DEPTH-1 or the last array slice [12:0] for 3D and
arrays, BASE_ARRAY [28:16]. Linear 3D and array images carry no pitch: their rows are the
width rounded up to 256 bytes (the linear alignment of gfx10+'s address library), a slice
is pitch x height elements.

Coordinates are unnormalised integers; a lane outside the image (or past the last slice)
loads zeros and stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hsa.virtual.isa import bufformat, mem
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup

u32, u64 = np.uint32, np.uint64

# gfx11 MIMG opcodes (LLVM's MIMGInstructions.td): the ones modelled, and names of others
_LOADS = {0x00: "image_load", 0x01: "image_load_mip"}
_STORES = {0x06: "image_store", 0x07: "image_store_mip"}
_SAMPLES = {0x1B: "image_sample", 0x1F: "image_sample_lz"}
_OTHERS = {0x02: "image_load_pck", 0x03: "image_load_pck_sgn", 0x04: "image_load_mip_pck",
           0x05: "image_load_mip_pck_sgn", 0x08: "image_store_pck", 0x09: "image_store_mip_pck",
           0x17: "image_get_resinfo", 0x1C: "image_sample_l"}
# S# CLAMP_X/Y/Z modes modelled (SQ_TEX_CLAMP) and border colours (BORDER_COLOR_TYPE)
_WRAP, _MIRROR, _CLAMP_LAST, _CLAMP_BORDER = 0, 1, 2, 6
_BORDERS = {0: (0.0, 0.0, 0.0, 0.0), 1: (0.0, 0.0, 0.0, 1.0), 2: (1.0, 1.0, 1.0, 1.0)}
# DIM field -> (T# TYPE it addresses, coordinates: x, y, z or slice)
_DIMS = {0: ("1D", 8, 1), 1: ("2D", 9, 2), 2: ("3D", 10, 3), 4: ("1D_ARRAY", 12, 2),
         5: ("2D_ARRAY", 13, 3)}
_DIM_NAMES = {3: "CUBE", 6: "2D_MSAA", 7: "2D_MSAA_ARRAY"}
_TYPE_NAMES = {8: "1D", 9: "2D", 10: "3D", 11: "CUBE", 12: "1D_ARRAY", 13: "2D_ARRAY",
               14: "2D_MSAA", 15: "2D_MSAA_ARRAY"}
LINEAR_ROW_ALIGN = 256  # bytes: gfx10+ linear surfaces' pitch alignment


class ImageError(Exception):
    """An image instruction or descriptor the virtual GPU does not model (one line)."""


def mimg_name(op: int) -> str:
    return {**_LOADS, **_STORES, **_SAMPLES, **_OTHERS}.get(op, f"MIMG opcode 0x{op:02x}")


def compile_gfx11(inst: d.Instruction) -> tuple[Callable | None, str]:
    """(fn(g, ctx), "") for a modelled gfx11 MIMG instruction, else (None, why)."""
    w0, w1 = inst.words[0], inst.words[1]
    op = (w0 >> 18) & 0xFF
    name = mimg_name(op)
    if op not in _LOADS and op not in _STORES and op not in _SAMPLES:
        return None, f"{name} is not modelled (image loads, stores and point samples are)"
    dim = (w0 >> 2) & 7
    sample = op in _SAMPLES
    a16 = bool((w0 >> 16) & 1) and sample  # samples take f16 coordinates, two a VGPR
    flags = [n for n, bit in (("A16", (w0 >> 16) & 1 and not sample), ("D16", (w0 >> 17) & 1),
                              ("TFE", (w1 >> 21) & 1), ("LWE", (w1 >> 22) & 1)) if bit]
    if flags:
        return None, f"{name} with {'/'.join(flags)} is not modelled"
    if dim not in _DIMS:
        return None, f"{name} on a {_DIM_NAMES[dim]} image is not modelled"
    dim_name, want_type, ncoord = _DIMS[dim]
    mip = op in (0x01, 0x07)
    dmask = (w0 >> 8) & 0xF
    vaddr = [w1 & 0xFF]
    if w0 & 1:  # NSA: one VGPR per address component
        w2 = inst.words[2]
        vaddr += [(w2 >> (8 * k)) & 0xFF for k in range(4)]
    else:
        vaddr += [vaddr[0] + k for k in range(1, 5)]
    vdata = (w1 >> 8) & 0xFF
    srsrc = ((w1 >> 16) & 0x1F) * 4
    store = op in _STORES
    if sample:
        return _compile_sample(inst, name, dim_name, want_type, ncoord, dmask, vaddr, vdata,
                               srsrc, ((w1 >> 26) & 0x1F) * 4, bool((w0 >> 7) & 1), a16), ""

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        t = _descriptor(g, srsrc, name, dim_name, want_type)
        coords = [mem._sel(g.v[vaddr[k]], idx).astype(np.int64) for k in range(ncoord)]
        if mip and np.any(mem._sel(g.v[vaddr[ncoord]], idx)):
            raise ImageError(f"{name} at a mip level other than 0 is not modelled")
        addr, inside = _addresses(t, coords, dim_name)
        fmt = t["format"]
        if not store:
            words = [np.zeros(addr.size, u32) for _ in range(max(1, fmt.size // 4))]
            if np.any(inside):
                got = bufformat._fetch(ctx, inst, fmt, addr[inside])
                for k, w in enumerate(got):
                    words[k][inside] = w
            channels = bufformat.select(bufformat.decode(fmt, words), t["word3"], fmt.floats)
            channels = [np.where(inside, c, u32(0)) for c in channels]
            reg = vdata
            for c in range(4):
                if dmask >> c & 1:
                    mem._put(g, reg, idx, channels[c])
                    reg += 1
            return
        # a store writes the channels DMASK enables, from consecutive VGPRs; the format's
        # other components keep what memory holds
        values: list[np.ndarray | None] = []
        reg = vdata
        for c in range(4):
            if dmask >> c & 1:
                values.append(mem._sel(g.v[reg], idx))
                reg += 1
            else:
                values.append(None)
        addr, keep = addr[inside], [v[inside] if v is not None else None for v in values]
        if addr.size == 0:
            return
        old = bufformat._fetch(ctx, inst, fmt, addr)
        current = bufformat.decode(fmt, old)
        channels = []
        for c in range(4):
            kept = keep[c]
            channels.append(kept if kept is not None else current[c])
        bufformat._write(ctx, inst, fmt, addr, bufformat.encode(fmt, channels, old))

    return run, ""


def _descriptor(g: WaveGroup, srsrc: int, name: str, dim_name: str, want_type: int) -> dict:
    """The fields of the T# in s[srsrc:srsrc+8] (one T# for the whole group)."""
    words = g.s[:, srsrc:srsrc + 8]
    if not np.all(words == words[0]):
        raise ImageError(f"{name}: waves of one group use different T# descriptors")
    w = [int(x) for x in words[0]]
    fmt_number = (w[1] >> 20) & 0xFF
    fmt = bufformat.format_of(fmt_number)
    kind = (w[3] >> 28) & 0xF
    sw_mode = (w[3] >> 20) & 0x1F
    base_level, last_level = (w[3] >> 12) & 0xF, (w[3] >> 16) & 0xF
    problems = []
    if fmt is None:
        problems.append(f"T# format {fmt_number}")
    if sw_mode:
        problems.append(f"tiled layout (T# SW_MODE {sw_mode})")
    if base_level:
        problems.append(f"T# BASE_LEVEL {base_level}")
    if kind != want_type:
        problems.append(f"a {_TYPE_NAMES.get(kind, f'type {kind}')} T# for a {dim_name} access")
    if problems:
        raise ImageError(f"{name}: {', '.join(problems)} is not modelled")
    assert fmt is not None  # (a None format is one of the problems above)
    width = (((w[1] >> 30) & 3) | ((w[2] & 0xFFF) << 2)) + 1
    height = ((w[2] >> 14) & 0x3FFF) + 1
    bpp = fmt.size
    if dim_name in ("1D", "2D"):
        pitch, depth, base_array = (w[4] & 0x3FFF) + 1, 1, 0
    else:  # linear 3D and arrays: rows aligned to 256 bytes
        align = max(1, LINEAR_ROW_ALIGN // bpp)
        pitch = -(-width // align) * align
        depth, base_array = (w[4] & 0x1FFF) + 1, (w[4] >> 16) & 0x1FFF
    if dim_name == "1D_ARRAY":
        height = 1
    base = (w[0] | (w[1] & 0xFF) << 32) << 8
    return {"format": fmt, "word3": np.asarray(u32(w[3])), "width": width, "height": height,
            "pitch": pitch, "depth": depth, "base_array": base_array, "base": base,
            "last_level": last_level}


def _addresses(t: dict, coords: list[np.ndarray], dim_name: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """(byte address, inside the image) per lane."""
    x = coords[0]
    y = coords[1] if dim_name in ("2D", "3D", "2D_ARRAY") else np.zeros_like(x)
    z = (coords[2] if dim_name in ("3D", "2D_ARRAY") else coords[1] if dim_name == "1D_ARRAY"
         else np.zeros_like(x))
    x, y, z = (c.astype(np.int32).astype(np.int64) for c in (x, y, z))  # signed coordinates
    slices = t["depth"]
    if dim_name in ("1D_ARRAY", "2D_ARRAY"):  # the slice is the array layer past BASE_ARRAY
        z = z + t["base_array"]
        slices = t["depth"]  # the last slice in view + 1
    inside = ((x >= 0) & (x < t["width"]) & (y >= 0) & (y < t["height"]) & (z >= 0)
              & (z < max(slices, 1)))
    element = (z * t["height"] + y) * t["pitch"] + x
    addr = np.where(inside, t["base"] + element * t["format"].size, t["base"])
    return addr.astype(u64), inside


def _compile_sample(inst: d.Instruction, name: str, dim_name: str, want_type: int,
                    ncoord: int, dmask: int, vaddr: list[int], vdata: int, srsrc: int,
                    ssamp: int, unnormalized: bool, a16: bool) -> Callable:
    """image_sample / image_sample_lz with a point-filtering S#: the nearest texel of each
    lane's float coordinates (normalised unless the instruction's UNORM bit or the S#'s
    FORCE_UNNORMALIZED says otherwise; array layers are rounded to the nearest), each axis
    placed by the S#'s clamp mode (wrap, mirror, clamp to the last texel, or the border
    colour). Only level 0 exists in a T# with LAST_LEVEL 0, so the LOD plays no part."""

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        t = _descriptor(g, srsrc, name, dim_name, want_type)
        samp = _sampler(g, ssamp, name)
        if t["last_level"]:
            raise ImageError(f"{name}: a mip-mapped T# (LAST_LEVEL {t['last_level']}) is not "
                             "modelled")
        if a16:  # two f16 coordinates a VGPR, x in the low half
            regs = [mem._sel(g.v[vaddr[k // 2]], idx) for k in range(ncoord)]
            coords = [((r >> np.uint32(16 * (k % 2))) & np.uint32(0xFFFF)).astype(np.uint16)
                      .view(np.float16).astype(np.float64) for k, r in enumerate(regs)]
        else:
            coords = [mem._sel(g.v[vaddr[k]], idx).view(np.float32).astype(np.float64)
                      for k in range(ncoord)]
        unnorm = unnormalized or samp["unnormalized"]
        layered = dim_name in ("1D_ARRAY", "2D_ARRAY")
        sizes = [t["width"], t["height"], t["depth"]]
        axes = ([0] if dim_name in ("1D", "1D_ARRAY") else [0, 1]) + (
            [2] if dim_name == "3D" else [])
        texel, border = [], np.zeros(coords[0].shape, bool)
        for k, axis in enumerate(axes):
            size = sizes[axis]
            c = coords[k] if unnorm else coords[k] * size
            i = np.floor(np.nan_to_num(c, nan=0.0, posinf=1e9, neginf=-1e9)).astype(np.int64)
            i, out = _place(i, size, samp["clamp"][axis])
            texel.append(i)
            border |= out
        while len(texel) < 2:
            texel.append(np.zeros_like(texel[0]))
        if layered:  # the layer: rounded to nearest, clamped to the layers in view
            layer = np.rint(np.nan_to_num(coords[len(axes)], nan=0.0)).astype(np.int64)
            texel.append(np.clip(layer, 0, t["depth"] - 1 - t["base_array"]))
        elif len(texel) < 3:
            texel.append(np.zeros_like(texel[0]))
        addr, inside = _addresses(t, [texel[0], texel[1], texel[2]],
                                  "3D" if len(axes) == 3 else "2D_ARRAY")
        fmt = t["format"]
        words = [np.zeros(addr.size, u32) for _ in range(max(1, fmt.size // 4))]
        read = inside & ~border
        if np.any(read):
            for k, w in enumerate(bufformat._fetch(ctx, inst, fmt, addr[read])):
                words[k][read] = w
        channels = bufformat.decode(fmt, words)
        if not fmt.floats:
            raise ImageError(f"{name}: sampling a {fmt.name} (integer) image is not modelled")
        channels = bufformat.select(channels, t["word3"], fmt.floats)
        colour = _BORDERS[samp["border"]]
        for c in range(4):
            b = np.float32(colour[c]).view(u32)
            channels[c] = np.where(border, b, channels[c])
        reg = vdata
        for c in range(4):
            if dmask >> c & 1:
                mem._put(g, reg, idx, channels[c])
                reg += 1

    return run


def _place(i: np.ndarray, size: int, mode: int) -> tuple[np.ndarray, np.ndarray]:
    """(texel index inside [0, size), lanes that take the border colour) of one axis."""
    if mode == _WRAP:
        return np.mod(i, size), np.zeros(i.shape, bool)
    if mode == _MIRROR:
        m = np.mod(i, 2 * size)
        return np.where(m < size, m, 2 * size - 1 - m), np.zeros(i.shape, bool)
    if mode == _CLAMP_LAST:
        return np.clip(i, 0, size - 1), np.zeros(i.shape, bool)
    out = (i < 0) | (i >= size)  # _CLAMP_BORDER
    return np.clip(i, 0, size - 1), out


def _sampler(g: WaveGroup, ssamp: int, name: str) -> dict:
    """The fields of the S# in s[ssamp:ssamp+4] (ROCr's resource_gfx11.h SQ_IMG_SAMP_WORD*)."""
    words = g.s[:, ssamp:ssamp + 4]
    if not np.all(words == words[0]):
        raise ImageError(f"{name}: waves of one group use different S# descriptors")
    w = [int(x) for x in words[0]]
    clamp = [(w[0] >> (3 * k)) & 7 for k in range(3)]
    problems = []
    bad = sorted({m for m in clamp if m not in (_WRAP, _MIRROR, _CLAMP_LAST, _CLAMP_BORDER)})
    if bad:
        problems.append(f"S# clamp mode {bad[0]}")
    if (w[0] >> 29) & 3:
        problems.append(f"S# FILTER_MODE {(w[0] >> 29) & 3} (min/max blending)")
    mag, minf = (w[2] >> 20) & 3, (w[2] >> 22) & 3
    if mag or minf:
        problems.append("S# bilinear or anisotropic filtering (XY_MAG/MIN_FILTER "
                        f"{mag}/{minf})")
    if (w[2] >> 24) & 3 > 1 or (w[2] >> 26) & 3 > 1:
        problems.append("S# linear Z or mip filtering")
    border = (w[3] >> 30) & 3
    if border not in _BORDERS:
        problems.append("S# border colour from the border colour palette")
    if problems:
        raise ImageError(f"{name}: {', '.join(problems)} is not modelled (point sampling is)")
    return {"clamp": clamp, "unnormalized": bool((w[0] >> 15) & 1), "border": border}
