"""gfx9 tiled surface layouts (the T#'s SW_MODE): where a texel of a swizzled image lies.

Work in progress (issue 32): no swizzle mode is modelled yet, so every tiled T# stops the
queue with one line naming its SW_MODE.
"""

from __future__ import annotations

from collections.abc import Callable


def texel_offsets(sw_mode: int, bpe: int, pitch: int, height: int, depth: int,
                  is_3d: bool) -> Callable | str:
    """fn(x, y, z) -> byte offsets of those texels from the surface's base, or why not."""
    return f"tiled layout (T# SW_MODE {sw_mode})"
