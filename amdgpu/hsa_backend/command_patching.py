"""Patching a command buffer's segment for one submit: binding addresses and parameter
values into the kernarg template's sites (u64 in one write, narrower widths in one more),
grid sizes into the packet block, and the values parameters derive."""

from __future__ import annotations

import struct

import numpy as np

from amdgpu.geometry import MAX_SIZE
from amdgpu.hsa_backend.command_segments import M64, SMALL_SITES, Segment
from ground.errors import KernelArgumentError


def patch_template(seg: Segment, addrs: tuple) -> None:
    """Write binding address + offset into every patch site of the segment's template, and
    the parameters' bits (`addrs` goes on with the values of seg.param_keys): the u64 sites
    in one write, each narrower width in one more."""
    if len(seg.sites) <= SMALL_SITES and not seg.narrow_sites:
        tw = seg.template_words
        for word, binding, plus in seg.sites:
            tw[word] = (addrs[binding] + plus) & M64
        return
    table = np.array(addrs, np.uint64)  # one vectorized write for many sites
    if seg.site_words.size:
        seg.template.view(np.uint64)[seg.site_words] = table[seg.site_binding] + seg.site_offset
    for width, index, src in seg.narrow_sites:
        seg.template.view(_NARROW[width])[index] = table[src]


def patch_grids(seg: Segment, table: tuple) -> None:
    """The grid_size fields of the packets whose grid axes are parameters."""
    if seg.grid_words.size:
        seg.block.view(np.uint32)[seg.grid_words] = np.array(table, np.uint64)[seg.grid_src]


_NARROW = {2: np.uint16, 4: np.uint32}


def derive(key: tuple, values: dict) -> int:
    """The bits a parameter site stores: key = (name, op, operand, struct code, kernel,
    what). op "arg": the value in the slot's code; "grid": a grid axis (checked 1..2**32-1);
    "div"/"mod": the hidden block count / remainder of that axis for a block of `operand`."""
    name, op, operand, code, kernel, what = key
    v = values[name]
    if op == "grid":
        if not 1 <= v <= MAX_SIZE:
            raise KernelArgumentError(
                f"parameter {name!r} = {v} makes kernel {kernel!r}'s {what} invalid: a grid "
                f"axis counts 1..{MAX_SIZE} work-items"
            )
        return v
    if op == "div":
        v = max(v, 1) // operand
    elif op == "mod":
        v = max(v, 1) % operand
    if code in "efd":
        return int.from_bytes(struct.pack("<" + code, v), "little")
    try:
        raw = struct.pack("<" + code, v)
    except struct.error:
        size = struct.calcsize("<" + code)
        try:  # an integer scalar wraps to its slot like an immediate argument's
            raw = struct.pack("<" + code.lower() if v < 0 else "<" + code.upper(), v)
        except struct.error:
            raise KernelArgumentError(
                f"parameter {name!r} = {v} does not fit kernel {kernel!r} argument {what!r} "
                f"({size} bytes): pass a value in range"
            ) from None
    return int.from_bytes(raw, "little")
