"""The one fill rule both backends share: which byte pattern a fill `value` stands for.

A fill repeats a pattern of 1, 2 or 4 bytes, and the width is always explicit:

- a Python int is one byte, 0..255 (as memset takes it);
- a numpy scalar is its own bytes (np.uint8/int8: 1, np.uint16/float16: 2,
  np.uint32/int32/float32: 4);
- bytes or bytearray of length 1, 2 or 4 are the pattern as given.

Anything else (a wider int, a Python float, whose width would be a guess, an 8-byte numpy
scalar, other bytes lengths) is a DeviceError naming the explicit form. The filled length
must be a whole number of patterns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ground.errors import DeviceError

WIDTHS = (1, 2, 4)


def fill_pattern(value: Any) -> np.ndarray:
    """The pattern bytes (uint8 array of 1, 2 or 4) `value` repeats; DeviceError if none."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) in WIDTHS:
            return np.frombuffer(bytes(value), np.uint8).copy()
        raise DeviceError(
            f"a fill pattern is 1, 2 or 4 bytes, not {len(value)}: pass bytes of that length"
        )
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):
        if value.dtype.itemsize in WIDTHS:
            return np.frombuffer(value.tobytes(), np.uint8).copy()
        raise DeviceError(
            f"cannot fill with a {value.dtype.itemsize}-byte {value.dtype}: patterns are 1, 2 "
            f"or 4 bytes (np.uint8, np.uint16, np.uint32, np.float32, ...)"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < 256:
            return np.array([value], np.uint8)
        raise DeviceError(
            f"an int fill value is one byte (0..255), not {value}: pass np.uint16(...) or "
            f"np.uint32(...) for a wider pattern"
        )
    if isinstance(value, float):
        raise DeviceError(
            f"cannot fill with the Python float {value}: its width is a guess; pass "
            f"np.float32({value}) (or np.float16)"
        )
    raise DeviceError(
        f"cannot fill with a {type(value).__name__}: pass an int (one byte), a numpy scalar "
        f"of 1, 2 or 4 bytes, or bytes"
    )


def check_fill_length(pattern: np.ndarray, nbytes: int) -> None:
    """A fill covers whole patterns: DeviceError otherwise."""
    if nbytes % pattern.size:
        raise DeviceError(
            f"a fill of {nbytes} bytes is not a whole number of {pattern.size}-byte patterns: "
            f"fill a multiple of {pattern.size} bytes"
        )


def fill_word(pattern: np.ndarray) -> int:
    """The pattern repeated to one little-endian 32-bit word (vkCmdFillBuffer's `data`)."""
    return int(np.tile(pattern, 4 // pattern.size).view("<u4")[0])
