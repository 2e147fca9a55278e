"""gfx9 tiled surface layouts (the T#'s SW_MODE): where a texel of a swizzled image lies.

The facts are AMD's address library for gfx9 (addrlib's Gfx9Lib, the copy ROCr builds into
its image manager and Mesa's src/amd/addrlib), restated here, not copied:

- A swizzle mode is a block size (256 B, 4 KiB or 64 KiB), a micro-tile kind (Z, S
  "standard", D "display", R "rotated") and an XOR flavour: none, _X (pipe/bank XOR, and the
  slice's bits XORed in too) or _T (the PRT XOR, within the block only). The mode numbers
  are addrlib's AddrSwizzleMode (4KB_D_X = 22, 64KB_D_X = 26, ...).
- Thin layouts (2D images, and a 3D image in a D or R mode) put one slice in a block; a
  block's byte address bits come from the element's x/y bits: the 256-byte micro tile by the
  mode's table per element size (below), the bits above it alternating y, x from bit 8 up
  (Z: x, y alternating from the element size's bit to bit 5, then y, x; a thin 3D image in
  a D mode takes the S table). Thick layouts (3D
  in Z or S) use 1 KiB micro tiles of x, y and z bits, then x, z, y in turn from bit 10.
- An XOR mode then XORs `pipe` address bits (from the pipe interleave bit up; pipe bits =
  min(block bits - interleave bits, log2 pipes + log2 shader engines)) and then `bank` bits
  (min(what is left, log2 banks)) with address bits above them taken in reverse order, as
  addrlib's equation generator does (thin: bit 2n-1-i of the field; thick: bits 3n-1-2i and
  3n-2-2i), with bits past the block's own taken from the same x/y(/z) sequence continued;
  a thin _X mode also XORs the slice index, bit-reversed, into the pipe and then bank bits.
  The pipe, bank and shader-engine counts and the interleave come from the GPU's
  GB_ADDR_CONFIG, so the layout depends on the part (hsa.abi.targets holds the value).
- Blocks follow in row-major order: x blocks in the padded pitch (the T#'s PITCH, a
  multiple of the block width), rows of blocks in the height padded to the block height,
  then slices (thick: groups of the block's depth).
  Block dimensions (elements): thin: the 256-byte tile (16x16, 16x8, 8x8, 8x4, 4x4 for
  1-16 byte elements) widened by half the extra block bits (rounded down) and heightened by
  the rest; thick: the 1 KiB tile (16x8x8, 8x8x8, 8x8x4, 8x4x4, 4x4x4) grown a third of the
  extra bits each, the remainder to depth first, then height.

One mip level only (level offsets and mip tails are not modelled) and one sample; a
pipe-bank XOR in the base address (ROCr writes none) is not applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hsa.virtual.isa import swizzle

# AddrSwizzleMode -> (block size log2, micro-tile kind, XOR: "" | "X" | "T")
MODES: dict[int, tuple[int, str, str]] = {
    1: (8, "S", ""), 2: (8, "D", ""), 3: (8, "R", ""),
    4: (12, "Z", ""), 5: (12, "S", ""), 6: (12, "D", ""), 7: (12, "R", ""),
    8: (16, "Z", ""), 9: (16, "S", ""), 10: (16, "D", ""), 11: (16, "R", ""),
    16: (16, "Z", "T"), 17: (16, "S", "T"), 18: (16, "D", "T"), 19: (16, "R", "T"),
    20: (12, "Z", "X"), 21: (12, "S", "X"), 22: (12, "D", "X"), 23: (12, "R", "X"),
    24: (16, "Z", "X"), 25: (16, "S", "X"), 26: (16, "D", "X"), 27: (16, "R", "X"),
}
NAMES = {m: f"ADDR_SW_{1 << (b - 10) if b > 8 else 256}{'KB' if b > 8 else 'B'}_{k}"
         + (f"_{x}" if x else "") for m, (b, k, x) in MODES.items()}

# The 256-byte micro tile of a thin layout: address bits from bit log2(element bytes) up,
# per element size log2 (addrlib's ComputeBlock256Equation tables); "x2" is bit 2 of the
# element's x coordinate
_MICRO_2D = {
    "S": ["x0 x1 x2 x3 y0 y1 y2 y3", "x0 x1 x2 y0 y1 y2 x3", "x0 x1 y0 y1 y2 x2",
          "x0 y0 y1 x1 x2", "y0 y1 x0 x1"],
    "D": ["x0 x1 x2 y1 y0 y2 x3 y3", "x0 x1 x2 y0 y1 y2 x3", "x0 x1 y0 x2 y1 y2",
          "x0 y0 x1 x2 y1", "x0 y0 x1 y1"],
    "R": ["y0 y1 y2 x1 x0 x2 x3 y3", "y0 y1 y2 x0 x1 x2 x3", "y0 y1 x0 y2 x1 x2",
          "y0 x0 y1 x1 x2"],
}
# The 1 KiB micro tile of a thick (3D) layout (addrlib's ComputeThickEquation tables)
_MICRO_3D = {
    "Z": ["x0 y0 x1 y1 z0 z1 x2 z2 y2 x3", "x0 y0 x1 y1 z0 z1 z2 y2 x2",
          "x0 y0 x1 z0 y1 z1 y2 x2", "x0 y0 z0 x1 z1 y1 x2", "x0 y0 z0 z1 y1 x1"],
    "S": ["x0 x1 x2 x3 y0 y1 z0 z1 z2 y2", "x0 x1 x2 y0 y1 z0 z1 z2 y2",
          "x0 x1 y0 y1 z0 z1 y2 x2", "x0 y0 y1 z0 z1 x1 x2", "y0 y1 z0 z1 x0 x1"],
}
_TILE_2D = [(16, 16), (16, 8), (8, 8), (8, 4), (4, 4)]  # 256-byte tile, elements
_TILE_3D = [(16, 8, 8), (8, 8, 8), (8, 8, 4), (8, 4, 4), (4, 4, 4)]  # 1 KiB tile

Bit = tuple[str, int]  # (coordinate "x" | "y" | "z", bit of it)


@dataclass(frozen=True)
class AddrConfig:
    """The GB_ADDR_CONFIG fields the layouts use (gfx9's register: NUM_PIPES [2:0],
    PIPE_INTERLEAVE_SIZE [5:3], NUM_BANKS [14:12], NUM_SHADER_ENGINES [20:19], each a log2;
    the interleave as 256 B << field)."""

    pipes_log2: int
    interleave_log2: int
    banks_log2: int
    engines_log2: int

    @classmethod
    def from_register(cls, value: int) -> AddrConfig:
        return cls(value & 7, 8 + (value >> 3 & 7), value >> 12 & 7, value >> 19 & 3)

    def pipe_bits(self, block_log2: int) -> int:
        return min(block_log2 - self.interleave_log2, self.pipes_log2 + self.engines_log2)

    def bank_bits(self, block_log2: int) -> int:
        return min(block_log2 - self.pipe_bits(block_log2) - self.interleave_log2,
                   self.banks_log2)


def is_thick(sw_mode: int, is_3d: bool) -> bool:
    """A 3D image in a Z or S mode is thick (blocks span slices); the rest are thin."""
    return is_3d and MODES[sw_mode][1] in ("Z", "S")


def block_shape(sw_mode: int, bpe_log2: int, is_3d: bool) -> tuple[int, int, int]:
    """(width, height, depth) of one block, in elements."""
    block_log2 = MODES[sw_mode][0]
    if is_thick(sw_mode, is_3d):
        w, h, d = _TILE_3D[bpe_log2]
        extra = block_log2 - 10
        each, rest = divmod(extra, 3)
        return w << each, h << (each + rest // 2), d << (each + (rest != 0))
    w, h = _TILE_2D[bpe_log2]
    extra = block_log2 - 8
    return w << extra // 2, h << (extra - extra // 2), 1


def equation(sw_mode: int, bpe_log2: int, is_3d: bool, cfg: AddrConfig
             ) -> list[list[Bit]]:
    """For each address bit of a block (bit 0 up), the coordinate bits XORed to make it;
    the bits below log2(element bytes) are empty (the byte within the element)."""
    block_log2, kind, xor = MODES[sw_mode]
    thick = is_thick(sw_mode, is_3d)
    pipes, banks = (cfg.pipe_bits(block_log2), cfg.bank_bits(block_log2)) if xor else (0, 0)
    start = cfg.interleave_log2
    # how far the coordinate bit sequence must run: XOR sources can lie above the block
    reach = block_log2
    if xor == "X":
        ways = 3 if thick else 2
        reach = max(reach, start + ways * pipes, start + pipes + ways * banks)
    bits: list[Bit | None] = [None] * bpe_log2
    if thick:
        micro = _MICRO_3D[kind][bpe_log2].split()
        tile = _TILE_3D[bpe_log2]
        cycle, low = "xzy", 10  # bit i >= 10: "xzy"[i % 3]
    elif kind == "Z":
        micro = ["xy"[k % 2] + str(k // 2) for k in range(6 - bpe_log2)]
        tile = (1 << -(-len(micro) // 2), 1 << len(micro) // 2, 1)
        cycle, low = "yx", 6
    else:  # a thin 3D image's D mode has the standard micro tile (addrlib's IsStandardSwizzle)
        micro = _MICRO_2D["S" if is_3d and kind == "D" else kind][bpe_log2].split()
        tile = (*_TILE_2D[bpe_log2], 1)
        cycle, low = "yx", 8
    bits += [(b[0], int(b[1:])) for b in micro]
    assert len(bits) == low, (sw_mode, bpe_log2)
    nxt = {"x": tile[0].bit_length() - 1, "y": tile[1].bit_length() - 1,
           "z": tile[2].bit_length() - 1}
    for i in range(low, reach):
        axis = cycle[i % len(cycle)]
        bits.append((axis, nxt[axis]))
        nxt[axis] += 1
    eq: list[list[Bit]] = [[b] if b is not None else [] for b in bits[:block_log2]]

    def source(pos: int) -> list[Bit]:  # a bit past the block exists only for _X
        b = bits[pos] if pos < len(bits) else None
        return [b] if b is not None and (pos < block_log2 or xor == "X") else []

    fields = [(start, pipes), (start + pipes, banks)]
    for first, count in fields:
        for i in range(count):
            if thick:
                eq[first + i] += source(first + 3 * count - 1 - 2 * i)
                eq[first + i] += source(first + 3 * count - 2 - 2 * i)
            else:
                eq[first + i] += source(first + 2 * count - 1 - i)
    if xor == "X" and not thick:  # the slice index, bit-reversed, into pipe then bank bits
        for i in range(pipes):
            eq[start + i].append(("z", pipes - 1 - i))
        for i in range(banks):
            eq[start + pipes + i].append(("z", pipes + banks - 1 - i))
    return eq


def texel_offsets(sw_mode: int, bpe: int, pitch: int, height: int, depth: int,
                  is_3d: bool, gb_addr_config: int) -> Callable | str:
    """fn(x, y, z) -> byte offsets of those texels (int64 arrays of element coordinates
    inside the image) from the surface's base, or a one-line why not."""
    name = f"tiled layout (T# SW_MODE {sw_mode}, {NAMES.get(sw_mode, 'reserved')})"
    if sw_mode not in MODES:
        return f"tiled layout (T# SW_MODE {sw_mode}, reserved or variable-size)"
    block_log2, kind, _ = MODES[sw_mode]
    bpe_log2 = bpe.bit_length() - 1
    if bpe != 1 << bpe_log2 or bpe_log2 > 4:
        return f"{name} with {bpe}-byte texels"
    if (kind == "R" and (is_3d or bpe_log2 == 4)) or (kind == "Z" and not is_3d
                                                      and bpe_log2 == 4):
        return f"{name} for {'a 3D image' if is_3d else '16-byte texels'}"
    if block_log2 == 8 and is_3d:
        return f"{name} for a 3D image"
    cfg = AddrConfig.from_register(gb_addr_config)
    if block_log2 - cfg.interleave_log2 < 0:
        return f"{name} with a pipe interleave wider than its block"
    bw, bh, bd = block_shape(sw_mode, bpe_log2, is_3d)
    if pitch % bw:
        return f"{name} with a pitch of {pitch} texels (not a multiple of {bw})"
    eq = equation(sw_mode, bpe_log2, is_3d, cfg)
    terms = [[("xyz".index(axis), bit) for axis, bit in sources] for sources in eq]
    return swizzle.texel_offsets(terms, (bw, bh, bd), pitch, -(-height // bh) * bh,
                                 block_log2)


def surface_bytes(sw_mode: int, bpe: int, width: int, height: int, depth: int,
                  is_3d: bool) -> tuple[int, int, int]:
    """(pitch in elements, bytes of the whole surface, base alignment) of one mip level as
    addrlib's ComputeSurfaceInfoTiled sizes it: pitch, height and slices padded to the block,
    XOR modes aligned to their block, the others to 256 bytes."""
    block_log2, _, xor = MODES[sw_mode]
    bw, bh, bd = block_shape(sw_mode, bpe.bit_length() - 1, is_3d)
    pitch = -(-width // bw) * bw
    rows = -(-height // bh) * bh
    slices = -(-depth // bd) * bd
    return pitch, pitch * rows * slices * bpe, (1 << block_log2) if xor else 256
