"""Image loads, stores, samples and atomics of compute kernels (gfx9/gfx11 MIMG, gfx12
VIMAGE/VSAMPLE) through T# and S#.

One implementation (`_compile`) for every family; a family brings its decoding
(`compile_gfx11`, `compile_gfx9`, `compile_gfx12`) and its T# layout (`_tsharp_gfx11`,
`_tsharp_gfx9`, `_tsharp_gfx12`). The S# is the same on all three (ROCr's resource_ai.h,
resource_gfx11.h and resource_gfx12.h agree on every field `_sampler` reads). gfx9's
MIMG (LLVM's MIMG_gfx9, checked with llvm-mc-19 -mcpu=gfx90a): dword 0 DMASK [11:8], UNORM
[12], GLC [13], DA [14], A16 [15], TFE (gfx90a: ACC) [16], LWE [17], op [24:18], SLC [25];
dword 1 VADDR [7:0], VDATA [15:8], SRSRC/4 [20:16], SSAMP/4 [25:21], D16 [31]. It has no DIM
field: the T#'s TYPE says how many address VGPRs an access reads. gfx90a has image_load(_mip),
image_store(_mip) and image_sample (no _lz); gfx940+ have no image instructions.

What runs: image_load / image_store and their _mip forms at mip level 0, on 1D, 2D, 3D,
1D-array and 2D-array images in linear layout (SW_MODE 0) or in a tiled layout the family's
swizzle module models (the T#'s SW_MODE; `_TILINGS` routes a tiled T# to its family's
swizzle: hsa.virtual.isa.tiling_gfx9 for gfx9, hsa.virtual.isa.tiling_gfx11 for gfx11 and
gfx12, each with the target's GB_ADDR_CONFIG), in any unified format of
`bufformat` (8/16/32-bit UNORM/SNORM/UINT/SINT/FLOAT..., 1-4 channels), with the T#'s
DST_SEL swizzle and the instruction's DMASK; image_sample / image_sample_lz of float formats
with a point or bilinear S# (see `_compile_sample`), and on gfx11/gfx12 image_sample_l over
one-level T#s and image_gather4(_lz); image atomics on 32- and 64-bit texels
(`_compile_atomic`); image_get_resinfo (`_compile_resinfo`); D16 data (two 16-bit channels
a VGPR, through bufformat's to_d16/from_d16) and A16 addresses for all of them. Everything
else an image instruction or descriptor can ask for (anisotropic filtering, tiled modes a
family does not model, mips, MSAA, cubes, TFE/LWE) stops the queue with one line naming it
(a tiled one names its SW_MODE): nothing is guessed. gfx9's DA bit on a 1D/2D/3D T#
addresses it by the T#'s TYPE (see `_descriptor`).

The MIMG encoding (LLVM's MIMGe_gfx11): dword 0 NSA [0], DIM [4:2], UNORM [7], DMASK [11:8],
GLC [14], A16 [16], D16 [17], op [25:18]; dword 1 VADDR [7:0], VDATA [15:8], SRSRC/4 [20:16],
TFE [21], LWE [22], SSAMP/4 [30:26]; with NSA, dword 2 holds address VGPRs 1-4, a byte each.

The T# (ROCr's src/image/resource_gfx11.h, as ROCr's image manager fills it): base address
>> 8 in word 0 and word 1 [7:0]; FORMAT word 1 [27:20]; WIDTH-1 word 1 [31:30] (low bits)
and word 2 [11:0]; HEIGHT-1 word 2 [27:14]; DST_SEL_X..W word 3 [11:0]; BASE_LEVEL [15:12],
LAST_LEVEL [19:16], SW_MODE [24:20], TYPE [31:28] (8 1D, 9 2D, 10 3D, 12 1D array, 13 2D
array); word 4: PITCH-1 [13:0] for 1D/2D, DEPTH-1 or the last array slice [12:0] for 3D and
arrays, BASE_ARRAY [28:16]. Linear 3D and array images carry no pitch: their rows are the
width rounded up to 256 bytes (the linear alignment of gfx10+'s address library), a slice
is pitch x height elements.

Coordinates are unnormalised integers; a lane outside the image (or past the last slice)
loads zeros and stores nothing. gfx11/gfx12: a 1D/2D T# under a 1D/2D-array access (HIP's
image blit kernels address every image so) is the image at layer 0, another layer stops the
queue (what hardware does there is not documented where we looked); a 3D T# under a
2D-array load, store or atomic is addressed as 3D, the layer coordinate being z (samples
and resinfo of that pairing stop the queue).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from hsa.abi import targets
from hsa.virtual.isa import bufformat, mem, tiling_gfx9, tiling_gfx11
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import WaveGroup

u32, u64 = np.uint32, np.uint64

# gfx11 MIMG opcodes (LLVM's MIMGInstructions.td): the ones modelled, and names of others
_LOADS = {0x00: "image_load", 0x01: "image_load_mip"}
_STORES = {0x06: "image_store", 0x07: "image_store_mip"}
_SAMPLES = {0x1B: "image_sample", 0x1D: "image_sample_l", 0x1F: "image_sample_lz",
            0x2F: "image_gather4", 0x32: "image_gather4_lz"}  # gfx11 MIMG = gfx12 VSAMPLE
_OTHERS = {0x02: "image_load_pck", 0x03: "image_load_pck_sgn", 0x04: "image_load_mip_pck",
           0x05: "image_load_mip_pck_sgn", 0x08: "image_store_pck", 0x09: "image_store_mip_pck",
           0x17: "image_get_resinfo", 0x1C: "image_sample_d", 0x1E: "image_sample_b"}
# gfx9 MIMG opcodes (LLVM's MIMGInstructions.td, checked with llvm-mc-19 -mcpu=gfx90a)
_GFX9_LOADS = {0x00: "image_load", 0x01: "image_load_mip"}
_GFX9_STORES = {0x08: "image_store", 0x09: "image_store_mip"}
_GFX9_SAMPLES = {0x20: "image_sample", 0x27: "image_sample_lz"}
_GFX9_OTHERS = {0x02: "image_load_pck", 0x03: "image_load_pck_sgn", 0x04: "image_load_mip_pck",
                0x05: "image_load_mip_pck_sgn", 0x0A: "image_store_pck",
                0x0B: "image_store_mip_pck", 0x0E: "image_get_resinfo", 0x10: "image_atomic_swap",
                0x11: "image_atomic_cmpswap", 0x12: "image_atomic_add", 0x24: "image_sample_l"}
# image atomics: opcode -> LLVM's name suffix (gfx11 and gfx12 share the numbers; gfx12 renamed
# some, llvm-mc-19 -mcpu=gfx1100/gfx1201/gfx90a disassembling each)
_ATOMICS = {0x0A: "swap", 0x0B: "cmpswap", 0x0C: "add", 0x0D: "sub", 0x0E: "smin",
            0x0F: "umin", 0x10: "smax", 0x11: "umax", 0x12: "and", 0x13: "or", 0x14: "xor",
            0x15: "inc", 0x16: "dec"}
_GFX9_ATOMICS = {op + 6: name for op, name in _ATOMICS.items()}  # swap 0x10 .. dec 0x1C
_GFX12_ATOMIC_NAMES = {"add": "add_uint", "sub": "sub_uint", "smin": "min_int",
                       "umin": "min_uint", "smax": "max_int", "umax": "max_uint",
                       "inc": "inc_uint", "dec": "dec_uint"}
_GFX12_FLOAT_ATOMICS = {0x83: "add_flt", 0x84: "min_num_flt", 0x85: "max_num_flt",
                        0x86: "pk_add_f16", 0x87: "pk_add_bf16"}
# each atomic's operation as hsa.virtual.isa.atomics names it, and the type letter (u, i, b,
# f) its width completes: add -> add_u32 (DMASK 0x1) or add_u64 (DMASK 0x3)
_ATOMIC_OPS = {"swap": ("swap", "b"), "cmpswap": ("cmpswap", "b"), "add": ("add", "u"),
               "sub": ("sub", "u"), "smin": ("min", "i"), "umin": ("min", "u"),
               "smax": ("max", "i"), "umax": ("max", "u"), "and": ("and", "b"),
               "or": ("or", "b"), "xor": ("xor", "b"), "inc": ("inc", "u"), "dec": ("dec", "u"),
               "add_flt": ("add", "f"), "min_num_flt": ("min_num", "f"),
               "max_num_flt": ("max_num", "f"), "pk_add_f16": ("pk_add", "f16"),
               "pk_add_bf16": ("pk_add", "bf16")}
_RESINFO, _GFX9_RESINFO = 0x17, 0x0E  # image_get_resinfo (gfx11 and gfx12; gfx9)
_GFX9_DA = -1  # the `dim` of a gfx9 access with DA set: an array, the T# says which
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
SUBTEXEL = 256  # steps per texel of a sample's texel coordinate (8 fraction bits)


class ImageError(Exception):
    """An image instruction or descriptor the virtual GPU does not model (one line)."""


def mimg_name(op: int) -> str:
    if op in _ATOMICS:
        return f"image_atomic_{_ATOMICS[op]}"
    return {**_LOADS, **_STORES, **_SAMPLES, **_OTHERS}.get(op, f"MIMG opcode 0x{op:02x}")


def mimg_name_gfx9(op: int) -> str:
    if op in _GFX9_ATOMICS:
        return f"image_atomic_{_GFX9_ATOMICS[op]}"
    return {**_GFX9_LOADS, **_GFX9_STORES, **_GFX9_SAMPLES, **_GFX9_OTHERS}.get(
        op, f"MIMG opcode 0x{op:02x}")


def compile_gfx11(inst: d.Instruction) -> tuple[Callable | None, str]:
    """(fn(g, ctx), "") for a modelled gfx11 MIMG instruction, else (None, why)."""
    w0, w1 = inst.words[0], inst.words[1]
    op = (w0 >> 18) & 0xFF
    name = mimg_name(op)
    if op == _RESINFO:
        return _compile_resinfo(name, _flags_of(inst), (w0 >> 2) & 7, (w0 >> 8) & 0xF,
                                w1 & 0xFF, (w1 >> 8) & 0xFF, ((w1 >> 16) & 0x1F) * 4,
                                _tsharp_gfx11, bool((w0 >> 16) & 1))
    if op not in _LOADS and op not in _STORES and op not in _SAMPLES and op not in _ATOMICS:
        return None, f"{name} is not modelled (image loads, stores, samples and atomics are)"
    sample = op in _SAMPLES
    flags = _flags_of(inst)
    vaddr = [w1 & 0xFF]
    if w0 & 1:  # NSA: one VGPR per address component
        w2 = inst.words[2]
        vaddr += [(w2 >> (8 * k)) & 0xFF for k in range(4)]
    else:
        vaddr += [vaddr[0] + k for k in range(1, 5)]
    return _compile(inst, name, op in (0x01, 0x07), op in _STORES, sample, flags,
                    (w0 >> 2) & 7, (w0 >> 8) & 0xF, vaddr, (w1 >> 8) & 0xFF,
                    ((w1 >> 16) & 0x1F) * 4, ((w1 >> 26) & 0x1F) * 4, bool((w0 >> 7) & 1),
                    bool((w0 >> 16) & 1), _tsharp_gfx11,
                    atomic=(_ATOMICS[op], bool((w0 >> 14) & 1)) if op in _ATOMICS else None)


def _flags_of(inst: d.Instruction) -> list[str]:
    """gfx11 MIMG modifiers `_compile` sorts out (D16) or refuses."""
    w0, w1 = inst.words[0], inst.words[1]
    return [n for n, bit in (("D16", (w0 >> 17) & 1), ("TFE", (w1 >> 21) & 1),
                             ("LWE", (w1 >> 22) & 1)) if bit]


def compile_gfx9(inst: d.Instruction, target: str = "gfx90a") -> tuple[Callable | None, str]:
    """(fn(g, ctx), "") for a modelled gfx9 MIMG instruction of `target`, else (None, why)."""
    w0, w1 = inst.words[0], inst.words[1]
    op = (w0 >> 18) & 0x7F
    name = mimg_name_gfx9(op)
    flags = [n for n, bit in (("TFE/ACC", (w0 >> 16) & 1), ("LWE", (w0 >> 17) & 1),
                              ("D16", (w1 >> 31) & 1)) if bit]
    a16 = bool((w0 >> 15) & 1)
    # no DIM field: the T#'s TYPE says how many address VGPRs there are (DA: an array)
    dim = _GFX9_DA if (w0 >> 14) & 1 else None
    if op == _GFX9_RESINFO:
        return _compile_resinfo(name, flags, dim, (w0 >> 8) & 0xF, w1 & 0xFF,
                                (w1 >> 8) & 0xFF, ((w1 >> 16) & 0x1F) * 4,
                                functools.partial(_tsharp_gfx9, target=target), a16)
    if (op not in _GFX9_LOADS and op not in _GFX9_STORES and op not in _GFX9_SAMPLES
            and op not in _GFX9_ATOMICS):
        return None, f"{name} is not modelled (image loads, stores, samples and atomics are)"
    vaddr = [(w1 & 0xFF) + k for k in range(5)]
    return _compile(inst, name, op in (0x01, 0x09), op in _GFX9_STORES, op in _GFX9_SAMPLES,
                    flags, dim, (w0 >> 8) & 0xF, vaddr, (w1 >> 8) & 0xFF,
                    ((w1 >> 16) & 0x1F) * 4, ((w1 >> 21) & 0x1F) * 4, bool((w0 >> 12) & 1),
                    a16, functools.partial(_tsharp_gfx9, target=target),
                    atomic=(_GFX9_ATOMICS[op], bool((w0 >> 13) & 1))
                    if op in _GFX9_ATOMICS else None)


# gfx12 VIMAGE / VSAMPLE opcodes (llvm-mc-19 -mcpu=gfx1201 disassembling each): loads, stores
# and the point samples share gfx11's numbers; names of others, for messages
_GFX12_ATOMICS = {**_ATOMICS, **_GFX12_FLOAT_ATOMICS}
_GFX12_OTHERS = {"VIMAGE": {**{k: v for k, v in _OTHERS.items() if k < 0x17},
                            **{op: f"image_atomic_{_GFX12_ATOMIC_NAMES.get(n, n)}"
                               for op, n in _GFX12_ATOMICS.items()},
                            0x17: "image_get_resinfo"},
                 "VSAMPLE": {0x1C: "image_sample_d", 0x1E: "image_sample_b",
                             0x20: "image_sample_c", 0x24: "image_sample_c_lz",
                             0x40: "image_sample_cl"}}


def image_name_gfx12(encoding: str, op: int) -> str:
    known = {**_LOADS, **_STORES} if encoding == "VIMAGE" else dict(_SAMPLES)
    return {**known, **_GFX12_OTHERS.get(encoding, {})}.get(op, f"{encoding} opcode 0x{op:02x}")


def compile_gfx12(inst: d.Instruction) -> tuple[Callable | None, str]:
    """(fn(g, ctx), "") for a modelled gfx12 VIMAGE/VSAMPLE instruction, else (None, why).

    LLVM's VIMAGE/VSAMPLE_gfx12 (checked with llvm-mc-19 -mcpu=gfx1201): dword 0 DIM [2:0],
    TFE [3] (VSAMPLE), R128 [4], D16 [5], A16 [6], UNORM [13] (VSAMPLE), op [21:14], DMASK
    [25:22]; dword 1 VDATA [7:0], LWE [8] (VSAMPLE), RSRC [17:9] (an SGPR number), TH/SCOPE
    [22:18], TFE [23] (VIMAGE) or SAMP [31:23] (VSAMPLE), VADDR4 [31:24] (VIMAGE); dword 2
    VADDR0-3, a byte each: addresses are always separate VGPRs."""
    w0, w1, w2 = inst.words[0], inst.words[1], inst.words[2]
    op = (w0 >> 14) & 0xFF
    sampler = inst.encoding == "VSAMPLE"
    name = image_name_gfx12(inst.encoding, op)
    modelled = _SAMPLES if sampler else {**_LOADS, **_STORES, **_GFX12_ATOMICS,
                                         _RESINFO: "image_get_resinfo"}
    if op not in modelled:
        return None, f"{name} is not modelled (image loads, stores, samples and atomics are)"
    tfe = (w0 >> 3) & 1 if sampler else (w1 >> 23) & 1
    flags = [n for n, bit in (("D16", (w0 >> 5) & 1),
                              ("R128", (w0 >> 4) & 1), ("TFE", tfe),
                              ("LWE", sampler and (w1 >> 8) & 1)) if bit]
    vaddr = [(w2 >> (8 * k)) & 0xFF for k in range(4)] + [(w1 >> 24) & 0xFF]
    if not sampler and op == _RESINFO:
        return _compile_resinfo(name, flags, w0 & 7, (w0 >> 22) & 0xF, vaddr[0], w1 & 0xFF,
                                (w1 >> 9) & 0x1FF, _tsharp_gfx12, bool((w0 >> 6) & 1))
    return _compile(inst, name, op in (0x01, 0x07), op in _STORES, sampler, flags, w0 & 7,
                    (w0 >> 22) & 0xF, vaddr, w1 & 0xFF, (w1 >> 9) & 0x1FF,
                    (w1 >> 23) & 0x1FF, bool(sampler and (w0 >> 13) & 1),
                    bool((w0 >> 6) & 1), _tsharp_gfx12,
                    atomic=(_GFX12_ATOMICS[op], bool((w1 >> 20) & 1))  # TH[0]: return
                    if not sampler and op in _GFX12_ATOMICS else None)


def _compile(inst: d.Instruction, name: str, mip: bool, store: bool, sample: bool,
             flags: list[str], dim: int | None, dmask: int, vaddr: list[int], vdata: int,
             srsrc: int, ssamp: int, unnormalized: bool, a16: bool, layout: Callable,
             atomic: tuple[str, bool] | None = None) -> tuple[Callable | None, str]:
    """The one implementation of every family's image loads, stores, samples and atomics;
    `dim` is the instruction's DIM field (None or _GFX9_DA: gfx9's T# TYPE decides), `layout`
    reads the family's T#, `atomic` is (the atomic's name suffix, whether it returns the
    value it saw: GLC, or gfx12's TH[0])."""
    d16 = "D16" in flags and atomic is None  # 16-bit data, two channels a VGPR
    flags = [f for f in flags if f != "D16" or not d16]
    if flags:
        return None, f"{name} with {'/'.join(flags)} is not modelled"
    if dim is not None and dim != _GFX9_DA and dim not in _DIMS:
        return None, f"{name} on a {_DIM_NAMES[dim]} image is not modelled"
    if sample:
        gather = name.startswith("image_gather4")
        if gather and (dmask & (dmask - 1) or not dmask):
            return None, f"{name} with DMASK 0x{dmask:x} (not one channel) is not modelled"
        if gather and dim not in (1, 5):
            return None, f"{name} outside 2D and 2D-array images is not modelled"
        return _compile_sample(inst, name, dim, dmask, vaddr, vdata, srsrc, ssamp,
                               unnormalized, a16, layout, d16, gather), ""
    if atomic is not None:
        return _compile_atomic(inst, name, atomic[0], atomic[1], dim, dmask, vaddr, vdata,
                               srsrc, layout, a16)

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        t, dim_name, ncoord = _descriptor(g, srsrc, name, dim, layout)
        coords = _int_coords(g, idx, vaddr, ncoord + int(mip), a16)
        if mip and np.any(coords.pop()):
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
            _put_channels(g, idx, vdata, dmask, channels, fmt, d16)
            return
        # a store writes the channels DMASK enables, from consecutive VGPRs (D16: two a
        # VGPR, low half first); the format's other components keep what memory holds
        values: list[np.ndarray | None] = []
        k = 0
        for c in range(4):
            if dmask >> c & 1:
                if d16:
                    half = mem._sel(g.v[vdata + k // 2], idx) >> u32(16 * (k % 2))
                    values.append(bufformat.from_d16(fmt, half))
                else:
                    values.append(mem._sel(g.v[vdata + k], idx))
                k += 1
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


def _int_coords(g: WaveGroup, idx: np.ndarray | None, vaddr: list[int], count: int,
                a16: bool) -> list[np.ndarray]:
    """The first `count` integer address components (signed): a VGPR each, or with A16 two
    16-bit ones a VGPR, the first in the low half."""
    if not a16:
        return [mem._sel(g.v[vaddr[k]], idx).view(np.int32).astype(np.int64)
                for k in range(count)]
    return [((mem._sel(g.v[vaddr[k // 2]], idx) >> u32(16 * (k % 2))) & u32(0xFFFF))
            .astype(np.uint16).view(np.int16).astype(np.int64) for k in range(count)]


def _put_channels(g: WaveGroup, idx: np.ndarray | None, vdata: int, dmask: int,
                  channels: list[np.ndarray], fmt: bufformat.Format, d16: bool) -> None:
    """The channels DMASK enables (32-bit register values) into consecutive VGPRs; with D16
    each as the 16 bits bufformat.to_d16 keeps, two a VGPR, low half first (an odd last
    channel leaves the high half 0)."""
    kept = [channels[c] for c in range(4) if dmask >> c & 1]
    if d16:
        halves = [bufformat.to_d16(fmt, ch) for ch in kept]
        kept = [halves[k] | (halves[k + 1] << u32(16) if k + 1 < len(halves) else u32(0))
                for k in range(0, len(halves), 2)]
    for k, value in enumerate(kept):
        mem._put(g, vdata + k, idx, value)


def _compile_atomic(inst: d.Instruction, name: str, kind: str, returns: bool, dim: int | None,
                    dmask: int, vaddr: list[int], vdata: int, srsrc: int, layout: Callable,
                    a16: bool) -> tuple[Callable | None, str]:
    """An image atomic: the read-modify-write of one texel per lane (hsa.virtual.isa.atomics,
    lanes that hit one texel in lane order), on a T# whose texels are as wide as the atomic.
    DMASK gives the width (the ISA guides' "image atomic" data: 0x1 32-bit, 0x3 64-bit;
    cmpswap, which carries the compare value after the new one, 0x3 and 0xF); the value a
    lane saw comes back in VDATA when `returns`. Lanes outside the image do nothing and get
    0 back."""
    operation, letter = _ATOMIC_OPS[kind]
    cmpswap = kind == "cmpswap"
    widths = {0x3: 32, 0xF: 64} if cmpswap else {0x1: 32, 0x3: 64}
    bits = widths.get(dmask)
    if bits is None or (bits == 64 and (letter == "f" or operation == "pk_add")):
        return None, f"{name} with DMASK 0x{dmask:x} is not modelled"
    op = f"{operation}_{letter}" if operation == "pk_add" else f"{operation}_{letter}{bits}"

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        t, dim_name, ncoord = _descriptor(g, srsrc, name, dim, layout)
        fmt = t["format"]
        wanted = ("FLOAT",) if letter.startswith(("f", "bf")) else (
            ("UINT", "SINT") if letter in ("u", "i") else ("UINT", "SINT", "FLOAT"))
        if fmt.size * 8 != bits or fmt.kind not in wanted:
            raise ImageError(f"{name}: a {fmt.name} T# for a {bits}-bit atomic is not modelled")
        coords = _int_coords(g, idx, vaddr, ncoord, a16)
        addr, inside = _addresses(t, coords, dim_name)
        lanes = np.arange(g.count * g.lanes) if idx is None else idx
        mem.run_atomic(g, mem.GlobalSpace(ctx, inst), addr[inside], lanes[inside], op, vdata,
                       vdata, returns)
        if returns and not inside.all():
            for k in range(bits // 32):
                mem._put(g, vdata + k, lanes[~inside], np.zeros(int((~inside).sum()), u32))

    return run, ""


def _compile_resinfo(name: str, flags: list[str], dim: int | None, dmask: int, vaddr: int,
                     vdata: int, srsrc: int, layout: Callable, a16: bool
                     ) -> tuple[Callable | None, str]:
    """image_get_resinfo: the RDNA3/RDNA4 ISA guides' VDATA3-0 = {#mipLevels, depth, height,
    width} of the mip level in the address VGPR, as 32-bit integers, the channels DMASK
    enables in consecutive VGPRs. A level's sizes are max(1, size >> level) (Vulkan's "Image
    Mip Level Sizing"); array layers do not shrink; the level count is LAST_LEVEL + 1 (the
    view's levels, BASE_LEVEL being 0). Not modelled (one line each): a level past
    LAST_LEVEL, a component the image type does not define (height of a 1D image, depth of
    a 1D or 2D one), 1D arrays (which component holds their layers differs between gfx9,
    which lays 1D out as 2D, and later families), a BASE_ARRAY other than 0, MSAA/cube."""
    if flags:
        return None, f"{name} with {'/'.join(flags)} is not modelled"
    if dim is not None and dim != _GFX9_DA and dim not in _DIMS:
        return None, f"{name} on a {_DIM_NAMES[dim]} image is not modelled"

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        t, dim_name, _ = _descriptor(g, srsrc, name, dim, layout)
        if t.get("array_as_3d"):
            raise ImageError(f"{name}: a 3D T# for a 2D_ARRAY access is not modelled")
        if dim_name == "1D_ARRAY" or t["base_array"]:
            raise ImageError(f"{name} on a 1D array or with BASE_ARRAY {t['base_array']} is "
                             "not modelled")
        undefined = {"1D": {1, 2}, "2D": {2}}.get(dim_name, set())
        asked = {c for c in range(4) if dmask >> c & 1}
        if asked & undefined:
            raise ImageError(f"{name}: DMASK 0x{dmask:x} asks a {dim_name} image for "
                             f"{'/'.join('whd'[c] for c in sorted(asked & undefined))}, "
                             "which it does not have: not modelled")
        levels = t["last_level"] + 1
        level = _int_coords(g, idx, [vaddr], 1, a16)[0]
        if np.any((level < 0) | (level >= levels)):
            raise ImageError(f"{name} at a mip level past LAST_LEVEL {levels - 1} is not "
                             "modelled")
        depth = (np.maximum(t["depth"] >> level, 1) if dim_name == "3D"
                 else np.full(level.shape, t["depth"]))
        values = [np.maximum(t["width"] >> level, 1), np.maximum(t["height"] >> level, 1),
                  depth, np.full(level.shape, levels)]
        reg = vdata
        for c in range(4):
            if dmask >> c & 1:
                mem._put(g, reg, idx, values[c].astype(u32))
                reg += 1

    return run, ""


def _descriptor(g: WaveGroup, srsrc: int, name: str, dim: int | None, layout: Callable
                ) -> tuple[dict, str, int]:
    """(the fields of the T# in s[srsrc:srsrc+8], the access's dimension name, its address
    components); one T# for the whole group. `dim`: the instruction's DIM field, or None /
    _GFX9_DA where the T#'s TYPE decides (gfx9; DA set: an array type)."""
    words = g.s[:, srsrc:srsrc + 8]
    if not np.all(words == words[0]):
        raise ImageError(f"{name}: waves of one group use different T# descriptors")
    w = [int(x) for x in words[0]]
    t = layout(w)
    kind = (w[3] >> 28) & 0xF
    sw_mode = (w[3] >> 20) & 0x1F
    base_level = t.get("base_level", (w[3] >> 12) & 0xF)
    problems = []
    if t["format"] is None:
        problems.append(f"T# format {t['format_number']}")
    if sw_mode and t["family"] not in _TILINGS:
        problems.append(f"tiled layout (T# SW_MODE {sw_mode})")
    if base_level:
        problems.append(f"T# BASE_LEVEL {base_level}")
    if dim is None or dim == _GFX9_DA:
        # gfx9: the T#'s TYPE decides. DA (an array access) on a 1D/2D/3D T# addresses it by
        # its type, the extra slice VGPR unread: ROCclr's blit kernels (HIP 5.2.3's
        # hipMemcpy2DToArray, compiled by its comgr for gfx90a) store through 2D T#s with DA
        # set, which real MI200s run; a non-array access to an array T# stays refused
        by_type = {want: (dname, n) for dname, want, n in _DIMS.values()}
        if kind not in by_type or (dim is None and kind in (12, 13)):
            problems.append(f"a {_TYPE_NAMES.get(kind, f'type {kind}')} T# for "
                            f"{'an array' if dim == _GFX9_DA else 'a non-array'} access")
            dim_name, ncoord = "", 0
        else:
            dim_name, ncoord = by_type[kind]
    else:
        dim_name, want_type, ncoord = _DIMS[dim]
        # HIP's image blit kernels (ROCclr's, as hipcc 6.4 builds them) address every image
        # as a 2D array: a 1D/2D T# under a 1D/2D-array access is the image at layer 0
        # (another layer is refused); a 3D T# under a 2D-array access is addressed as 3D, the
        # layer coordinate being z (loads, stores, atomics: integer coordinates either way)
        layer0 = (kind, want_type) in ((8, 12), (9, 13))
        if (kind, want_type) == (10, 13):
            dim_name, t["array_as_3d"] = "3D", True
        elif kind != want_type and not layer0:
            problems.append(f"a {_TYPE_NAMES.get(kind, f'type {kind}')} T# for a {dim_name} "
                            "access")
    if problems:
        raise ImageError(f"{name}: {', '.join(problems)} is not modelled")
    if dim is not None and dim != _GFX9_DA and (kind, _DIMS[dim][1]) in ((8, 12), (9, 13)):
        t["depth"], t["base_array"], t["layer0_only"] = 1, 0, True
    if dim_name == "1D_ARRAY":
        t["height"] = 1
    if dim_name in ("1D", "2D"):
        t["depth"], t["base_array"] = 1, 0
    if t["pitch"] is None:  # gfx10+ linear 3D and arrays: rows aligned to 256 bytes
        align = max(1, LINEAR_ROW_ALIGN // t["format"].size)
        t["pitch"] = -(-t["width"] // align) * align
    t.setdefault("last_level", (w[3] >> 16) & 0xF)
    if sw_mode:  # the family's swizzle of this surface, or why it has none
        t["kind"] = kind
        tiled = _TILINGS[t["family"]](t, sw_mode)
        if isinstance(tiled, str):
            raise ImageError(f"{name}: {tiled} is not modelled")
        t["tiled"] = tiled
    t["word3"] = np.asarray(u32(w[3]))
    t["base"] = (w[0] | (w[1] & 0xFF) << 32) << 8
    return t, dim_name, ncoord


def _tsharp_gfx11(w: list[int]) -> dict:
    """gfx11's T# fields (see the module docstring); pitch None where the T# has none."""
    number = (w[1] >> 20) & 0xFF
    kind = (w[3] >> 28) & 0xF
    flat = kind in (8, 9)  # 1D and 2D carry PITCH-1; 3D and arrays DEPTH-1 and BASE_ARRAY
    return {"family": "gfx11", "format": bufformat.format_of(number), "format_number": number,
            "width": (((w[1] >> 30) & 3) | ((w[2] & 0xFFF) << 2)) + 1,
            "height": ((w[2] >> 14) & 0x3FFF) + 1,
            "pitch": (w[4] & 0x3FFF) + 1 if flat else None,
            "depth": (w[4] & 0x1FFF) + 1, "base_array": 0 if flat else (w[4] >> 16) & 0x1FFF}


def _tsharp_gfx12(w: list[int]) -> dict:
    """gfx12's T# (ROCr's resource_gfx12.h, as image_manager_gfx12.cpp fills it): FORMAT word 1
    [24:17], BASE_LEVEL [29:25], WIDTH-1 word 1 [31:30] and word 2 [13:0], HEIGHT-1 word 2
    [29:14]; word 3 as gfx11's but LAST_LEVEL [19:15]; word 4 for 1D/2D: PITCH-1 in DEPTH
    [13:0] and PITCH_MSB [15:14]; for 3D and arrays DEPTH-1 [13:0], BASE_ARRAY [28:16]."""
    number = (w[1] >> 17) & 0xFF
    kind = (w[3] >> 28) & 0xF
    flat = kind in (8, 9)
    return {"family": "gfx12", "format": bufformat.format_of(number), "format_number": number,
            "width": (((w[1] >> 30) & 3) | ((w[2] & 0x3FFF) << 2)) + 1,
            "height": ((w[2] >> 14) & 0xFFFF) + 1,
            "pitch": (w[4] & 0xFFFF) + 1 if flat else None,
            "depth": (w[4] & 0x3FFF) + 1, "base_array": 0 if flat else (w[4] >> 16) & 0x1FFF,
            "base_level": (w[1] >> 25) & 0x1F, "last_level": (w[3] >> 15) & 0x1F}


# gfx9 T#s name a format by DATA_FORMAT and NUM_FORMAT (LLVM's BUF_DATA_FORMAT_* and
# BUF_NUM_FORMAT_* numbers, which the image formats share): the pair names a unified format
_GFX9_DATA = {1: "8", 2: "16", 3: "8_8", 4: "32", 5: "16_16", 6: "10_11_11", 7: "11_11_10",
              8: "10_10_10_2", 9: "2_10_10_10", 10: "8_8_8_8", 11: "32_32",
              12: "16_16_16_16", 13: "32_32_32", 14: "32_32_32_32"}
_GFX9_NUM = {0: "UNORM", 1: "SNORM", 2: "USCALED", 3: "SSCALED", 4: "UINT", 5: "SINT",
             7: "FLOAT"}


def gfx9_format(data_format: int, num_format: int) -> bufformat.Format | None:
    """The unified format of a gfx9 (DATA_FORMAT, NUM_FORMAT) pair, None if it has none."""
    name = f"{_GFX9_DATA.get(data_format)}_{_GFX9_NUM.get(num_format)}"
    return bufformat.format_by_name(name)


def _tsharp_gfx9(w: list[int], target: str = "gfx90a") -> dict:
    """gfx9's T# (ROCr's image_manager_ai.cpp PopulateImageSrd): base >> 8 in word 0 and word 1
    [7:0], DATA_FORMAT word 1 [25:20], NUM_FORMAT [29:26]; WIDTH-1 word 2 [13:0], HEIGHT-1
    [27:14]; word 3 as gfx11's; word 4 DEPTH-1 (or the last array slice) [12:0], PITCH-1
    [28:13] for every type; BASE_ARRAY word 5 [12:0]. A slice is pitch x height texels."""
    data, num = (w[1] >> 20) & 0x3F, (w[1] >> 26) & 0xF
    return {"family": "gfx9", "target": target, "format": gfx9_format(data, num),
            "format_number": f"{data}/{num} (DATA/NUM)",
            "width": (w[2] & 0x3FFF) + 1, "height": ((w[2] >> 14) & 0x3FFF) + 1,
            "pitch": ((w[4] >> 13) & 0xFFFF) + 1, "depth": (w[4] & 0x1FFF) + 1,
            "base_array": w[5] & 0x1FFF}


def _tiled_gfx9(t: dict, sw_mode: int) -> Callable | str:
    """gfx9's swizzle of the T#'s surface (hsa.virtual.isa.tiling_gfx9), or why not."""
    config = targets.lookup(t["target"]).gb_addr_config
    if t["last_level"]:  # a mip chain moves even level 0's blocks (addrlib's mipChainPitch)
        return f"tiled layout (T# SW_MODE {sw_mode}) with LAST_LEVEL {t['last_level']}"
    if config is None:
        return f"tiled layout (T# SW_MODE {sw_mode}) without a GB_ADDR_CONFIG for {t['target']}"
    return tiling_gfx9.texel_offsets(sw_mode, t["format"].size, t["pitch"], t["height"],
                                     t["depth"], t["kind"] == 10, config)


def _tiled_gfx1x(t: dict, sw_mode: int) -> Callable | str:
    """gfx11's and gfx12's swizzles of the T#'s surface (hsa.virtual.isa.tiling_gfx11), or
    why not. 1D images (T# TYPE 8/12) are refused: ROCr creates them linear."""
    if t["kind"] in (8, 12):
        return f"tiled layout (T# SW_MODE {sw_mode}) of a 1D image"
    slices = t["depth"] if t["kind"] in (10, 13) else 1
    # the gfx11/gfx12 decoders are not told their target: the virtual gfx11 is a gfx1100,
    # the gfx12 a gfx1201 (the GB_ADDR_CONFIG the emulated kernel reports for them)
    config = targets.lookup({"gfx11": "gfx1100", "gfx12": "gfx1201"}[t["family"]])
    assert config.gb_addr_config is not None
    return tiling_gfx11.texel_offsets(t["family"], sw_mode, t["format"].size, t["width"],
                                      t["height"], slices, t["kind"] == 10,
                                      config.gb_addr_config)


# a family's tiled layouts: fn(T# fields, SW_MODE) -> fn(x, y, z) -> byte offsets of those
# texels from the base (int64 arrays, coordinates inside the image), or a one-line why not
_TILINGS: dict[str, Callable[[dict, int], Callable | str]] = {
    "gfx9": _tiled_gfx9, "gfx11": _tiled_gfx1x, "gfx12": _tiled_gfx1x}


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
    if t.get("layer0_only") and np.any(z != 0):
        raise ImageError(f"array layer {int(z[z != 0][0])} of a non-array T# (an array access "
                         "on a 1D/2D image) is not modelled")
    inside = ((x >= 0) & (x < t["width"]) & (y >= 0) & (y < t["height"]) & (z >= 0)
              & (z < max(slices, 1)))
    if "tiled" in t:  # the family's swizzle: byte offsets of in-image texels
        offset = t["tiled"](*(np.where(inside, c, 0) for c in (x, y, z)))
    else:
        offset = ((z * t["height"] + y) * t["pitch"] + x) * t["format"].size
    addr = np.where(inside, t["base"] + offset, t["base"])
    return addr.astype(u64), inside


def _compile_sample(inst: d.Instruction, name: str, dim: int | None, dmask: int,
                    vaddr: list[int], vdata: int, srsrc: int, ssamp: int, unnormalized: bool,
                    a16: bool, layout: Callable, d16: bool = False, gather: bool = False
                    ) -> Callable:
    """image_sample / image_sample_lz through the S#'s point or bilinear filter.

    Each lane's float coordinates are normalised unless the instruction's UNORM bit or the
    S#'s FORCE_UNNORMALIZED says otherwise; array layers are rounded to the nearest and never
    filtered. Texel coordinates keep 8 fraction bits (SUBTEXEL). Point filtering reads the
    texel holding the coordinate; bilinear filtering (Vulkan's "Texel Filtering", D3D's
    bilinear: the coordinate less half a texel, i0 = floor, a = its fraction) blends the
    2 (1D) or 2x2 (2D) texels around it with weights (1 - a) and a per axis, a in steps of
    1/256 (D3D11's 8-bit sub-texel precision, like CUDA's documented 1.8 fixed-point
    weights; not stated for AMD in the ISA guides), summed in float64 and rounded once to
    float32. Each texel is placed by the S#'s clamp mode (wrap, mirror, clamp to the last
    texel, or the border colour). Only level 0 exists in a T# with LAST_LEVEL 0, so the
    LOD, implicit or image_sample_l's explicit one (the address VGPR after the coordinates),
    plays no part: it picks the level (clamped to the one there is) and the MAG or MIN
    filter, which must agree.

    `gather` (image_gather4 / _lz): whatever the S#'s filter, the 2x2 texels bilinear
    filtering would blend, placed as it places them; the one channel DMASK names (after
    DST_SEL) of each, in Vulkan's OpImageGather (D3D Gather4) order x = (i0, j1),
    y = (i1, j1), z = (i1, j0), w = (i0, j0)."""

    def run(g: WaveGroup, ctx) -> None:
        idx = mem._active(g)
        if idx is not None and idx.size == 0:
            return
        t, dim_name, ncoord = _descriptor(g, srsrc, name, dim, layout)
        if t.get("array_as_3d"):  # a filtered z or a rounded layer: not pinned down
            raise ImageError(f"{name}: a 3D T# for a 2D_ARRAY access is not modelled")
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
        linear = samp["linear"] or gather
        if linear and dim_name == "3D":
            raise ImageError(f"{name}: bilinear filtering of a 3D image (S# Z_FILTER "
                             f"{samp['z_filter']}) is not modelled")
        taps_per_axis: list[list[tuple]] = []  # per axis: [(texel, border lanes, weight)]
        for k, axis in enumerate(axes):
            size = sizes[axis]
            c = coords[k] if unnorm else coords[k] * size
            if linear:
                c = c - 0.5
            # texel coordinates are fixed point with 8 fraction bits (D3D's minimum sub-texel
            # precision): HIP's gfx9 point samples snap u to floor(u*w)*rcp(w), which lands a
            # float ulp either side of a texel edge and must still name that texel
            c = np.round(np.nan_to_num(c, nan=0.0, posinf=1e9, neginf=-1e9) * SUBTEXEL)
            i = np.floor(c / SUBTEXEL).astype(np.int64)
            if linear:
                a = (c - i * SUBTEXEL) / SUBTEXEL
                taps_per_axis.append([(*_place(i, size, samp["clamp"][axis]), 1.0 - a),
                                      (*_place(i + 1, size, samp["clamp"][axis]), a)])
            else:
                taps_per_axis.append([(*_place(i, size, samp["clamp"][axis]), None)])
        zero = layer = np.zeros(coords[0].shape, np.int64)
        if layered:  # the layer: rounded to nearest, clamped to the layers in view
            layer = np.rint(np.nan_to_num(coords[len(axes)], nan=0.0)).astype(np.int64)
            layer = np.clip(layer, 0, t["depth"] - 1 - t["base_array"])
        fmt = t["format"]
        if not fmt.floats:
            raise ImageError(f"{name}: sampling a {fmt.name} (integer) image is not modelled")
        colour = _BORDERS[samp["border"]]
        total: list[np.ndarray] | None = None
        gathered: list[np.ndarray] = []
        for taps in _product(taps_per_axis):
            texel = [tap[0] for tap in taps]
            border = np.zeros(zero.shape, bool)
            for tap in taps:
                border |= tap[1]
            while len(texel) < 2:
                texel.append(zero)
            if layered:
                texel.append(layer)
            elif len(texel) < 3:
                texel.append(zero)
            addr, inside = _addresses(t, texel, "3D" if len(axes) == 3 else "2D_ARRAY")
            words = [np.zeros(addr.size, u32) for _ in range(max(1, fmt.size // 4))]
            read = inside & ~border
            if np.any(read):
                for k, w in enumerate(bufformat._fetch(ctx, inst, fmt, addr[read])):
                    words[k][read] = w
            channels = bufformat.select(bufformat.decode(fmt, words), t["word3"], fmt.floats)
            for c in range(4):
                channels[c] = np.where(border, np.float32(colour[c]).view(u32), channels[c])
            if not linear:
                total = channels
                break
            if gather:  # the combinations come (i0,j0), (i1,j0), (i0,j1), (i1,j1)
                gathered.append(channels[dmask.bit_length() - 1])
                continue
            weight = np.ones(zero.shape)
            for tap in taps:
                weight = weight * tap[2]
            part = [weight * ch.view(np.float32).astype(np.float64) for ch in channels]
            total = part if total is None else [a + b for a, b in zip(total, part, strict=True)]
        if gather:
            order = [gathered[2], gathered[3], gathered[1], gathered[0]]
            _put_channels(g, idx, vdata, 0xF, order, fmt, d16)
            return
        assert total is not None
        if linear:
            total = [x.astype(np.float32).view(u32) for x in total]
        _put_channels(g, idx, vdata, dmask, total, fmt, d16)

    return run


def _product(taps_per_axis: list[list[tuple]]) -> list[list[tuple]]:
    """Every combination of one tap per axis (x varying fastest)."""
    combos: list[list[tuple]] = [[]]
    for taps in taps_per_axis:
        combos = [combo + [tap] for tap in taps for combo in combos]
    return combos


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
    if mag > 1 or minf > 1:
        problems.append(f"S# anisotropic filtering (XY_MAG/MIN_FILTER {mag}/{minf})")
    elif mag != minf:  # which one applies depends on the LOD the quad's derivatives give
        problems.append(f"S# XY_MAG_FILTER {mag} unlike XY_MIN_FILTER {minf}")
    if (w[2] >> 24) & 3 > 1 or (w[2] >> 26) & 3 > 1:
        problems.append("S# linear Z or mip filtering")
    border = (w[3] >> 30) & 3
    if border not in _BORDERS:
        problems.append("S# border colour from the border colour palette")
    if problems:
        raise ImageError(f"{name}: {', '.join(problems)} is not modelled (point and "
                         "bilinear sampling are)")
    return {"clamp": clamp, "unnormalized": bool((w[0] >> 15) & 1), "border": border,
            "linear": mag == 1, "z_filter": (w[2] >> 24) & 3}
