"""Element types of IREE programs as numpy dtypes, and how IREE lays them out in memory.

numpy has no bf16, f8 or f4; `ml_dtypes` (the JAX/TensorFlow library made for exactly this)
supplies them as real numpy dtypes. Types narrower than a byte (i2, i4, f4E2M1FN) are one
byte per element in numpy but packed densely in IREE's buffers: element k sits in bits
[k*w, (k+1)*w) of the buffer, lowest bits first (IREE's default packed storage for sub-byte
types). `pack`/`unpack` convert between the two.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ground.errors import KernelArgumentError

__all__ = ["dtype", "bits", "storage_nbytes", "pack", "unpack"]

# dtype name -> storage bits, for the types IREE packs below one byte.
_SUB_BYTE = {"int2": 2, "uint2": 2, "int4": 4, "uint4": 4, "float4_e2m1fn": 4}


@functools.cache
def _ml_dtypes() -> Any:
    # imported on first use: ml_dtypes takes seconds to import, and `import amdgpu` (which
    # imports this module through amdgpu.program) should not pay that without a program
    import ml_dtypes

    return ml_dtypes


def dtype(name: Any) -> np.dtype:
    """The numpy dtype for a program's dtype name ('float32', 'bfloat16', 'int4', ...)."""
    if isinstance(name, np.dtype):
        return name
    ml_dtypes = _ml_dtypes()  # registers its names with numpy first
    try:
        return np.dtype(name)
    except TypeError:
        pass
    found = getattr(ml_dtypes, str(name), None)
    if found is None:
        raise KernelArgumentError(
            f"element type {name!r} has no numpy dtype (neither numpy nor ml_dtypes know "
            "it); use a standard integer or float type"
        )
    return np.dtype(found)


def bits(name: Any) -> int:
    """Storage bits of one element as IREE lays it out."""
    d = dtype(name)
    return _SUB_BYTE.get(d.name, d.itemsize * 8)


def storage_nbytes(shape: Any, name: Any) -> int:
    n = int(np.prod(shape, dtype=np.int64))
    return (n * bits(name) + 7) // 8


def pack(array: np.ndarray) -> np.ndarray:
    """The bytes IREE's buffer holds for `array` (uint8, densely packed when sub-byte)."""
    a = np.ascontiguousarray(array)
    w = _SUB_BYTE.get(a.dtype.name)
    if w is None:
        return a.reshape(-1).view(np.uint8)
    codes = a.reshape(-1).view(np.uint8).astype(np.uint8) & ((1 << w) - 1)
    per = 8 // w
    codes = np.concatenate([codes, np.zeros((-len(codes)) % per, np.uint8)]).reshape(-1, per)
    shifts = (np.arange(per, dtype=np.uint8) * w).astype(np.uint8)
    return np.bitwise_or.reduce(codes << shifts, axis=1).astype(np.uint8)


def unpack(raw: np.ndarray, name: Any, shape: Any) -> np.ndarray:
    """An array of `shape` and dtype `name` from the bytes IREE's buffer holds."""
    d = dtype(name)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    w = _SUB_BYTE.get(d.name)
    if w is None:
        return raw[: n * d.itemsize].view(d).reshape(shape)
    per = 8 // w
    shifts = (np.arange(per, dtype=np.uint8) * w).astype(np.uint8)
    codes = ((raw[:, None] >> shifts) & ((1 << w) - 1)).reshape(-1)[:n].astype(np.uint8)
    if d.name.startswith("int"):  # sign-extend the w-bit two's complement codes
        codes = np.where(codes >= 1 << (w - 1), codes | (0xFF << w) & 0xFF, codes).astype(
            np.uint8
        )
    return codes.view(d).reshape(shape)


def is_float(name: Any) -> bool:
    """numpy floats and ml_dtypes' (bf16, f8, f6, f4), which numpy files under 'V'."""
    d = dtype(name)
    if np.issubdtype(d, np.floating):
        return True
    try:
        _ml_dtypes().finfo(d)
        return True
    except (ValueError, TypeError):
        return False


def tolerance(name: Any) -> tuple[float, float]:
    """(rtol, atol) for comparing results of this element type: a few units of its last
    place, from the type's own epsilon (f32 1e-4, f16 2e-2, bf16 ~6e-2, f8 ~0.25+)."""
    d = dtype(name)
    if d == np.float64 or d == np.float32:
        return 1e-4, 1e-4
    eps = float(_ml_dtypes().finfo(d).eps) if not np.issubdtype(d, np.floating) else float(
        np.finfo(d).eps
    )
    tol = max(2e-2, 8 * eps)
    return tol, tol


def int_range(name: Any) -> tuple[int, int]:
    """[low, high) of small random test integers that fit the type."""
    d = dtype(name)
    info = _ml_dtypes().iinfo(d) if d.name in _SUB_BYTE else np.iinfo(d)
    return max(int(info.min), -100), min(int(info.max), 100) + 1
