"""Protocol-buffer wire encoding, one message at a time and many rows at once with numpy.

Only what the Perfetto export needs: varints, length-delimited fields, fixed64. The
vectorised form (`Rows`) holds N byte strings as a padded (N, W) uint8 matrix plus a length
per row; concatenating fields row by row is an hstack and a boolean mask (row-major order
keeps each row's pieces together), so a million trace events cost a few numpy calls, not a
Python step each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VARINT, FIXED64, LEN = 0, 1, 2


# --- scalar ------------------------------------------------------------------------------

def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def uint_field(field: int, value: int) -> bytes:
    return tag(field, VARINT) + varint(value)


def bytes_field(field: int, value: bytes | str) -> bytes:
    if isinstance(value, str):
        value = value.encode()
    return tag(field, LEN) + varint(len(value)) + value


def fixed64_field(field: int, value: int) -> bytes:
    return tag(field, FIXED64) + int(value).to_bytes(8, "little")


# --- vectorised --------------------------------------------------------------------------

@dataclass
class Rows:
    """N byte strings: row i is matrix[i, :lengths[i]] (`data`: the one string of a constant)."""

    matrix: np.ndarray  # (N, W) uint8
    lengths: np.ndarray  # (N,) int64
    data: bytes | None = None

    @property
    def count(self) -> int:
        return int(self.lengths.shape[0])

    def flat(self) -> np.ndarray:
        """The rows one after another, as one uint8 array."""
        width = self.matrix.shape[1]
        return self.matrix[np.arange(width) < self.lengths[:, None]]


def const(data: bytes, n: int) -> Rows:
    row = np.frombuffer(data, np.uint8)
    return Rows(np.broadcast_to(row, (n, row.size)), np.full(n, row.size, np.int64), data)


def choose(table: list[bytes], index: np.ndarray) -> Rows:
    """Row i is table[index[i]]."""
    width = max((len(t) for t in table), default=0)
    mat = np.zeros((len(table), max(width, 1)), np.uint8)
    lens = np.zeros(len(table), np.int64)
    for i, t in enumerate(table):
        mat[i, :len(t)] = np.frombuffer(t, np.uint8)
        lens[i] = len(t)
    return Rows(mat[index, :width], lens[index])


def varints(values: np.ndarray) -> Rows:
    """Each value (uint64) as a varint."""
    v = np.asarray(values, np.uint64)
    width = len(varint(int(v.max()))) if v.size else 1
    shifts = np.arange(0, 7 * width, 7, dtype=np.uint64)
    groups = ((v[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    # Bytes needed: 1 + index of the highest non-zero group.
    nonzero = groups != 0
    last = np.where(nonzero.any(axis=1), width - 1 - np.argmax(nonzero[:, ::-1], axis=1), 0)
    groups[np.arange(width)[None, :] < last[:, None]] |= 0x80
    return Rows(groups, (last + 1).astype(np.int64))


def concat(*parts: Rows) -> Rows:
    """Row-wise concatenation (adjacent constants are merged first)."""
    merged: list[Rows] = []
    for p in parts:
        if p.data is not None and merged and merged[-1].data is not None:
            merged[-1] = const(merged[-1].data + p.data, p.count)
        else:
            merged.append(p)
    n = merged[0].count
    mat = np.concatenate([p.matrix for p in merged], axis=1)
    mask = np.concatenate([np.ones((n, p.matrix.shape[1]), bool) if p.data is not None
                           else np.arange(p.matrix.shape[1]) < p.lengths[:, None]
                           for p in merged], axis=1)
    lengths = np.sum([p.lengths for p in merged], axis=0).astype(np.int64)
    width = int(lengths.max()) if n else 0
    out = np.zeros((n, max(width, 1)), np.uint8)
    out[np.arange(out.shape[1]) < lengths[:, None]] = mat[mask]
    return Rows(out[:, :width], lengths)


def uint_fields(field: int, values: np.ndarray) -> list[Rows]:
    """Pieces of a varint field per row (join them with `concat`)."""
    v = np.asarray(values, np.uint64)
    return [const(tag(field, VARINT), v.shape[0]), varints(v)]


def len_fields(field: int, body: list[Rows]) -> list[Rows]:
    """Pieces of a length-delimited field `field` around the pieces `body`: the length is
    summed from the pieces, so nested messages are joined by one `concat` at the end."""
    total = np.sum([p.lengths for p in body], axis=0).astype(np.int64)
    return [const(tag(field, LEN), body[0].count), varints(total), *body]
