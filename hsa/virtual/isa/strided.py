"""Register-layout gathers as strided views.

Matrix instructions (MFMA, WMMA) read their operands from, and write their results to,
registers in fixed lane/register layouts. Written as index arrays (`take[i, j, ...]` = the
flat position of element (i, j, ...) in the source), numpy gathers them one element at a
time; but every layout the ISA guides define is a mixed-radix permutation: each axis of the
take array splits into sub-axes along which the source position moves by a constant step.
`plan` finds such a split once per layout (and checks it reproduces the take array exactly),
and `view` then reads the source through one `as_strided` view: the conversion or the
arithmetic that follows makes the only copy, with contiguous output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided


@dataclass(frozen=True)
class Plan:
    """A take array as sub-axes: `axes[a]` lists axis a's sub-axes outer to inner as
    (size, step per source coordinate); `base` is the source coordinate of element 0."""
    axes: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]
    base: tuple[int, ...]

    def shape(self) -> tuple[int, ...]:
        return tuple(size for axis in self.axes for size, _ in axis)


def _split(seq: np.ndarray) -> list[tuple[int, tuple[int, ...]]] | None:
    """Sub-axes (outer to inner) of one axis, `seq` = (n, C) source coordinates relative to
    element 0; None when no mixed-radix split makes every coordinate affine."""
    n = len(seq)
    if n == 1:
        return []
    for f in sorted((f for f in range(2, n + 1) if n % f == 0), reverse=True):
        step = seq[1] - seq[0]
        chunks = seq.reshape(n // f, f, -1)
        if ((chunks - chunks[:, :1]) == np.arange(f)[None, :, None] * step).all():
            outer = _split(seq[::f] - seq[0])
            if outer is not None:
                return outer + [(f, tuple(int(s) for s in step))]
    return None


def plan(coords: tuple[np.ndarray, ...]) -> Plan | None:
    """The strided form of a gather whose element at index i reads source coordinates
    (coords[0][i], coords[1][i], ...) (one integer array per source axis, all of the take
    array's shape), or None when there is none."""
    c = np.stack([np.asarray(x, np.int64) for x in coords], axis=-1)  # (..., C)
    base = c.reshape(-1, c.shape[-1])[0]
    axes = []
    for a in range(c.ndim - 1):
        index: list[int | slice] = [0] * (c.ndim - 1)
        index[a] = slice(None)
        sub = _split(c[tuple(index)] - base)
        if sub is None:
            return None
        axes.append(tuple(sub))
    p = Plan(tuple(axes), tuple(int(b) for b in base))
    # the split was made one axis at a time: check that the steps add up everywhere
    rebuilt = np.broadcast_to(np.asarray(p.base), c.shape).copy()
    for a, axis in enumerate(axes):
        n = c.shape[a]
        pos = np.arange(n)
        offset = np.zeros((n, c.shape[-1]), np.int64)
        for size, step in reversed(axis):
            offset += (pos % size)[:, None] * np.asarray(step)
            pos //= size
        shape = [1] * c.ndim
        shape[a], shape[-1] = n, c.shape[-1]
        rebuilt += offset.reshape(shape)
    return p if np.array_equal(rebuilt, c) else None


def view(x: np.ndarray, p: Plan, batch_axis: int, batch_at: int) -> np.ndarray:
    """A view of `x` holding the gather of `p` (its coordinates are x's axes other than
    `batch_axis`) for every index of x's `batch_axis`, which goes before axis `batch_at` of
    the take array: shape (sub-axes of axes < batch_at, batch, sub-axes of the rest)."""
    strides = [s for k, s in enumerate(x.strides) if k != batch_axis]
    start = list(p.base)
    start.insert(batch_axis, 0)
    origin = x[tuple(slice(b, None) for b in start)]
    shape: list[int] = []
    steps: list[int] = []
    for a, axis in enumerate(p.axes):
        if a == batch_at:
            shape.append(x.shape[batch_axis])
            steps.append(x.strides[batch_axis])
        for size, step in axis:
            shape.append(size)
            steps.append(sum(k * s for k, s in zip(step, strides, strict=True)))
    if batch_at >= len(p.axes):
        shape.append(x.shape[batch_axis])
        steps.append(x.strides[batch_axis])
    return as_strided(origin, tuple(shape), tuple(steps), writeable=False)


# converted operands a wave group keeps (by register, layout and type), each with the
# register bits it was converted from: at most 16, and at most 72 MB in all (gfx950's
# 16x16x128 fp8 operand of 512 waves is 9 MB; IREE's fp8 GEMM reuses as many with 8 kept
# as with 16, and the first run of a GEMM then touches 70 MB less fresh memory)
_KEPT = 16
_KEPT_BYTES = 72 << 20


def converted(memo: dict, key: tuple, words: np.ndarray,
              convert: Callable[[], np.ndarray]) -> np.ndarray:
    """convert() of the registers `words`, or the array an earlier call with the same `key`
    returned when `words` still hold the same bits as then (compared in full, so the reuse
    is exact): a GEMM's matrix instructions read each A (or B) fragment several times, and
    comparing the words costs a tenth of converting them again. `memo` is the wave group's;
    the result is shared, read-only."""
    kept = memo.setdefault("matrix_operands", {})
    hit = kept.get(key)
    if hit is not None and hit[0].shape == words.shape and np.array_equal(hit[0], words):
        return hit[1]
    out = convert()
    out.flags.writeable = False
    if key not in kept:  # the oldest go first
        size = words.nbytes + out.nbytes
        while kept and (len(kept) >= _KEPT or size + sum(
                w.nbytes + o.nbytes for w, o in kept.values()) > _KEPT_BYTES):
            kept.pop(next(iter(kept)))
    kept[key] = (words.copy(), out)
    return out


__all__ = ["Plan", "converted", "plan", "view"]
