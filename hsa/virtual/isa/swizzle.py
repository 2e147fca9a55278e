"""A tiled surface's texel offsets from its swizzle equation: the one evaluation both
families' layout modules use (tiling_gfx9 builds gfx9's equations from addrlib's rules,
tiling_gfx11 reads gfx11's and gfx12's from addrlib's pattern rows).

Within a block of 2**block_log2 bytes, address bit i is the XOR of the coordinate bits its
equation names; blocks follow each other row-major over the padded pitch, then down the
padded rows, then (3D blocks hold `depth` slices) slice group after slice group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Term = tuple[int, int]  # (axis 0/1/2 = x/y/z, bit of that coordinate)


def texel_offsets(equation: Sequence[Sequence[Term]], block: tuple[int, int, int],
                  pitch: int, rows: int, block_log2: int) -> Callable:
    """fn(x, y, z) -> int64 byte offsets of those texels from the surface's base.
    `equation`: per address bit of a block (bit 0 up), the terms XORed into it ([] for a
    byte-within-element bit); `block`: its (width, height, depth) in elements; `pitch`,
    `rows`: the surface's width and height padded to whole blocks, in elements."""
    weights: dict[Term, int] = {}  # each coordinate bit's address bits within the block
    for pos, terms in enumerate(equation):
        for term in terms:
            weights[term] = weights.get(term, 0) ^ (1 << pos)
    pairs = sorted(weights.items())
    bw, bh, bd = block
    per_row = pitch // bw
    per_slice_group = per_row * (rows // bh)

    def offsets(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        c = [np.asarray(v, np.int64) for v in (x, y, z)]
        within = np.zeros(c[0].shape, np.int64)
        for (axis, bit), weight in pairs:  # XOR of each set coordinate bit's address bits
            within ^= ((c[axis] >> bit) & 1) * weight
        index = (c[2] // bd) * per_slice_group + (c[1] // bh) * per_row + c[0] // bw
        return (index << block_log2) | within

    return offsets
