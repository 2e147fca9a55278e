"""The fill rule both backends share: which byte pattern a fill `value` stands for."""

from __future__ import annotations

from typing import Any

import numpy as np

from amdgpu.errors import DeviceError


def fill_pattern(value: Any) -> np.ndarray:
    """The bytes `value` repeats: bytes as given, a numpy scalar's own bytes, a float as
    float32, an int below 256 as one byte, a larger int as a uint32."""
    if isinstance(value, (bytes, bytearray)):
        return np.frombuffer(bytes(value), np.uint8)
    if isinstance(value, (np.generic, np.ndarray)):
        return np.asarray(value).reshape(-1)[:1].view(np.uint8).copy()
    if isinstance(value, float):
        return np.array([value], np.float32).view(np.uint8)
    if isinstance(value, int):
        if 0 <= value < 256:
            return np.array([value], np.uint8)
        return np.array([value & 0xFFFFFFFF], np.uint32).view(np.uint8)
    raise DeviceError(
        f"cannot fill with a {type(value).__name__}: pass an int, float, numpy scalar or bytes"
    )
