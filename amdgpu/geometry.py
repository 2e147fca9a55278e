"""The one launch-geometry normaliser both backends use.

`grid` counts work-items (HSA's convention, kept by the Vulkan backend too: it divides by
the work-group size, rounding up), `block` the work-items of one work-group. Each is a
positive int or a tuple/list of 1 to 3 positive ints; anything else (0, a negative, a
float, a bool, 4 sizes) is a KernelArgumentError naming the kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ground.errors import KernelArgumentError

MAX_SIZE = 0xFFFFFFFF  # the packet's 32-bit grid and work-group fields


def _size(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        return None
    return int(v)


def dim3(value: Any, what: str, kernel: str) -> tuple[int, int, int]:
    """`value` as three sizes (missing ones 1), every one a positive int."""
    if isinstance(value, (tuple, list)):
        if not 1 <= len(value) <= 3:
            raise KernelArgumentError(f"kernel {kernel!r}: {what} {value!r} needs 1 to 3 sizes")
        vals = [_size(v) for v in value]
    else:
        vals = [_size(value)]
    sizes = [v for v in vals if v is not None]
    if len(sizes) != len(vals):
        raise KernelArgumentError(
            f"kernel {kernel!r}: {what} must be a positive int or a tuple of 1 to 3 of them, "
            f"got {value!r}"
        )
    sizes += [1] * (3 - len(sizes))
    if min(sizes) < 1 or max(sizes) > MAX_SIZE:
        raise KernelArgumentError(
            f"kernel {kernel!r}: {what} {tuple(sizes)} has a size out of range (1..{MAX_SIZE})"
        )
    return sizes[0], sizes[1], sizes[2]


def size_key(value: Any) -> Any:
    """`value` (a grid or block) as a cache key that no value of another type equals
    (1 == True == 1.0 as dict keys): an exact int as itself, a tuple of exact ints tagged
    with `tuple`; None for anything else (bools, floats, numpy ints, lists), which callers
    do not cache but normalise every time (`dim3` refuses what is wrong)."""
    cls = value.__class__
    if cls is int:
        return value
    if cls is tuple and all(v.__class__ is int for v in value):
        return (tuple, *value)
    return None


def rank(value: Any) -> int:
    """How many axes a grid or block names (1 for an int)."""
    return len(value) if isinstance(value, (tuple, list)) else 1


def workgroups(grid: tuple[int, int, int], block: tuple[int, int, int]) -> tuple[int, int, int]:
    """Work-groups per axis for a grid in work-items: the last one may be partial."""
    return (
        -(-grid[0] // block[0]),
        -(-grid[1] // block[1]),
        -(-grid[2] // block[2]),
    )
