"""Read-modify-write atomics of many lanes at once, exactly as if applied one lane at a time.

The hardware serialises the lanes of an atomic that hit one address in some order; the
executor's order is lane order of the flattened wave group (wave by wave, lane by lane),
and every lane gets back the value it saw before its own update. `atomic_rmw` computes
that with whole-array numpy instead of a Python loop per lane:

* lanes are stably sorted by address, so the lanes of one address form a contiguous
  group in lane order;
* add/sub (integers, modulo 2^32 or 2^64) and xor are invertible: one running sum (xor)
  over all lanes, minus the sum before each group, gives every lane's old value;
* swap: a lane sees its predecessor's value (the first lane the memory's);
* min/max/and/or and float add/min/max (which must round step by step in lane order) go
  through `ufunc.accumulate` along the rows of a (group, rank) table that starts with the
  memory's value; groups much larger than the rest get a row of their own;
* cmpswap stays exact per collision group: each round finds, in every group at once, the
  next lane whose compare value equals the group's current value;
* anything else (inc, dec, csub, rsub, ds_mskor, packed f16 adds) runs its `fn` once per
  rank, over all groups at once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

u32, u64 = np.uint32, np.uint64
_WIDE = ("u64", "i64", "b64", "f64")
# the table of the ufunc path may hold this many cells per lane before the largest groups
# get rows of their own
_TABLE_CELLS_PER_LANE = 4


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> the bf16 bits (uint32, low half) nearest, ties to even (not NaN)."""
    bits = x.astype(np.float32).view(u32)
    return ((bits + u32(0x7FFF) + ((bits >> u32(16)) & u32(1))) >> u32(16)) & u32(0xFFFF)


def _pk_add(kind: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Two 16-bit float lanes in a dword added pairwise (pk_add_f16 / pk_add_bf16)."""
    def halves(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = w & u32(0xFFFF), w >> u32(16)
        if kind == "f16":
            return (lo.astype(np.uint16).view(np.float16).astype(np.float32),
                    hi.astype(np.uint16).view(np.float16).astype(np.float32))
        return (lo << u32(16)).view(np.float32), (hi << u32(16)).view(np.float32)

    def pack(x: np.ndarray) -> np.ndarray:
        # a NaN sum is the default quiet NaN (which input's payload numpy keeps depends on
        # its loop, and lane order must not change results)
        if kind == "f16":  # f32 holds an f16 sum exactly enough: one rounding to f16
            bits = x.astype(np.float16).view(np.uint16).astype(u32)
            return np.where(np.isnan(x), u32(0x7E00), bits)
        return np.where(np.isnan(x), u32(0x7FC0), _bf16_round(x))

    def add(old: np.ndarray, v: np.ndarray) -> np.ndarray:
        old, v = np.asarray(old, u32), np.asarray(v, u32)
        (a0, a1), (b0, b1) = halves(old), halves(v)
        return pack(a0 + b0) | (pack(a1 + b1) << u32(16))

    return add


def atomic_fn(op: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """fn(old, value) -> new for an atomic named <operation>_<type> (add_u32, max_i64, ...),
    on unsigned words of the type's width; None if unknown. cmpswap is handled apart."""
    operation, _, t = op.rpartition("_")
    if operation in ("pk_add", ) and t in ("f16", "bf16"):
        return _pk_add(t)
    if t not in ("u32", "i32", "b32", "f32") + _WIDE:
        return None
    wide = t in _WIDE
    unsigned = u64 if wide else u32
    signed = np.int64 if wide else np.int32
    flt = np.float64 if wide else np.float32
    one = unsigned(1)
    fmin, fmax = _float_min_max(False), _float_min_max(True)
    csub = lambda old, v: old - np.minimum(old, v)  # noqa: E731  clamps at 0
    return {
        "swap": lambda old, v: v,
        "storexchg": lambda old, v: v,
        "add": lambda old, v: (old.view(flt) + v.view(flt)).view(unsigned) if t[0] == "f"
        else old + v,
        "sub": lambda old, v: old - v,
        "rsub": lambda old, v: v - old,
        "min": lambda old, v: (np.minimum(old.view(signed), v.view(signed)).view(unsigned)
                               if t[0] == "i" else fmin(old, v) if t[0] == "f"
                               else np.minimum(old, v)),
        "max": lambda old, v: (np.maximum(old.view(signed), v.view(signed)).view(unsigned)
                               if t[0] == "i" else fmax(old, v) if t[0] == "f"
                               else np.maximum(old, v)),
        "min_num": fmin if t[0] == "f" else None,  # gfx12's names of the f32 min/max
        "max_num": fmax if t[0] == "f" else None,
        "and": lambda old, v: old & v, "or": lambda old, v: old | v,
        "xor": lambda old, v: old ^ v,
        "csub": csub, "sub_clamp": csub,  # gfx12 renamed csub
        "cond_sub": lambda old, v: np.where(old >= v, old - v, old),  # gfx12
        "inc": lambda old, v: np.where(old >= v, unsigned(0), old + one),
        "dec": lambda old, v: np.where((old == 0) | (old > v), v, old - one),
    }.get(operation)


def _order_keys(bits: np.ndarray) -> np.ndarray:
    """Signed integers that order float bit patterns as numbers, -0 below +0."""
    if bits.dtype == np.dtype(u64):
        s64 = bits.view(np.int64)
        return np.where(s64 < 0, s64 ^ np.int64(0x7FFFFFFFFFFFFFFF), s64)
    s32 = bits.view(np.int32)
    return np.where(s32 < 0, s32 ^ np.int32(0x7FFFFFFF), s32)


def _float_min_max(big: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The float atomics' min/max (IEEE 754-2019 minimumNumber/maximumNumber): a NaN loses
    to a number (two NaNs keep the memory's), and -0 is below +0."""
    def run(old: np.ndarray, v: np.ndarray) -> np.ndarray:
        ft = np.float64 if old.dtype == np.dtype(u64) else np.float32
        ko, kv = _order_keys(old), _order_keys(v)
        better = (kv > ko) if big else (kv < ko)
        take = ~np.isnan(v.view(ft)) & (better | np.isnan(old.view(ft)))
        return np.where(take, v, old)

    return run


_NAN_KEY = np.int64(1) << np.int64(40)  # beyond every f32 key


def _f32_keys(bits: np.ndarray, big: bool) -> np.ndarray:
    """int64 keys of f32 bit patterns for np.minimum/np.maximum: numbers in order (-0 below
    +0), every NaN one key that loses to all numbers."""
    keys = _order_keys(bits).astype(np.int64)
    return np.where(np.isnan(bits.view(np.float32)), -_NAN_KEY if big else _NAN_KEY, keys)


def _f32_from_keys(keys: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Bit patterns back from `_f32_keys`; a NaN key (only a row that began with NaNs
    still has one) is the row's first value, `first` (broadcast along rows)."""
    k32 = keys.astype(np.int32)
    bits = np.where(k32 < 0, k32 ^ np.int32(0x7FFFFFFF), k32).view(u32)
    return np.where(np.abs(keys) == _NAN_KEY, first, bits)


@cache
def _plan(op: str) -> tuple[str, np.ufunc | None, np.dtype | None]:
    """How `atomic_rmw` combines colliding lanes of `op`: ("sum" | "sub" | "xor" | "swap"
    | "ufunc" | "fkey" | "generic", the ufunc, the dtype to view the words as for it);
    "fkey": the ufunc over `_f32_keys`."""
    operation, _, t = op.rpartition("_")
    if t not in ("u32", "i32", "b32", "f32") + _WIDE:
        return "generic", None, None
    wide = t in _WIDE
    flt = np.dtype(np.float64 if wide else np.float32)
    signed = np.dtype(np.int64 if wide else np.int32)
    unsigned = np.dtype(u64 if wide else u32)
    if operation in ("swap", "storexchg"):
        return "swap", None, None
    if operation == "xor":
        return "xor", np.bitwise_xor, unsigned
    if operation in ("add", "sub") and t[0] != "f":  # the ufuncs wrap as the words do
        return (("sum", np.add, unsigned) if operation == "add" else
                ("sub", np.subtract, unsigned))
    if operation == "add":
        return "ufunc", np.add, flt
    if operation in ("and", "or"):
        return "ufunc", np.bitwise_and if operation == "and" else np.bitwise_or, unsigned
    if operation in ("min", "max", "min_num", "max_num"):
        big = operation.startswith("max")
        if t == "f32":
            return "fkey", np.maximum if big else np.minimum, None
        if t[0] == "f":
            return "generic", None, None
        return "ufunc", np.maximum if big else np.minimum, signed if t[0] == "i" else unsigned
    return "generic", None, None


def _equal(a: np.ndarray, b: np.ndarray, float_compare: bool) -> np.ndarray:
    if float_compare:  # cmpswap_f32: -0 equals +0, NaN equals nothing
        ft = np.float64 if a.dtype == np.dtype(u64) else np.float32
        return a.view(ft) == b.view(ft)
    return a == b


def atomic_rmw(old_read: Callable[[np.ndarray], np.ndarray],
               write: Callable[[np.ndarray, np.ndarray], None], addresses: np.ndarray,
               values: np.ndarray, fn, compare: np.ndarray | None = None,
               float_compare: bool = False, op: str = "", returns: bool = True
               ) -> np.ndarray | None:
    """Apply an atomic per lane in lane order; returns the value each lane saw before
    (None when not `returns`: then only the final memory is computed). Values are unsigned
    words (uint32 or uint64); `compare` makes it a compare-and-swap (cmpswap_f32 compares
    as floats: -0 equals +0, NaN equals nothing). `op` (add_u32, min_f32, ...) picks a
    whole-array way to combine colliding lanes; without one, `fn` runs once per rank of
    the largest collision group."""
    dtype = values.dtype
    n = addresses.size
    if n == 0:
        return np.empty(0, dtype) if returns else None
    if n == 1 or bool(np.all(addresses[1:] > addresses[:-1])):  # no two lanes collide
        return _distinct(old_read, write, addresses, values, fn, compare, float_compare)
    how, ufunc, view = _plan(op) if op and compare is None else ("generic", None, None)
    if not returns and ufunc is not None:
        done = _reduce_dense(old_read, write, addresses, values, ufunc, view)
        if done:
            return None
    if addresses[0] == addresses[-1] and bool(np.all(addresses == addresses[0])):
        order = None  # one address (a counter): lane order is already group order
        first = np.zeros(n, bool)
        first[0] = True
    else:
        order, first = _stable_order(addresses)
        if first.all():
            return _distinct(old_read, write, addresses, values, fn, compare, float_compare)
    starts = np.flatnonzero(first)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:] - 1
    ends[-1] = n - 1
    counts = ends - starts + 1
    keys = addresses[starts] if order is None else addresses[order[starts]]
    init = np.asarray(old_read(keys), dtype)
    sv = values if order is None else values[order]
    if compare is not None:
        cmp = compare if order is None else compare[order]
        gid = np.repeat(np.arange(starts.size), counts)  # each sorted lane's group
        old_sorted, final = _cmpswap(init, sv, cmp, gid, starts, float_compare)
    elif how in ("sum", "sub", "xor"):
        if how == "xor":
            run = np.bitwise_xor.accumulate(sv)
            before = run ^ sv  # xor of the lanes before, over all groups
            old_sorted = np.repeat(init ^ before[starts], counts) ^ before
            final = init ^ before[starts] ^ run[ends]
        else:
            run = np.cumsum(sv, dtype=dtype)  # wraps modulo the word size
            before = run - sv
            # a lane's old value: its group's initial value plus (minus) what the lanes
            # before it in the group added, i.e. before - before[group start]
            start_before = before[starts]
            total = run[ends] - start_before
            if how == "sum":  # (np.repeat spreads a group's value over its lanes)
                old_sorted = before
                old_sorted += np.repeat(init - start_before, counts)
                final = init + total
            else:
                old_sorted = np.repeat(init + start_before, counts)
                old_sorted -= before
                final = init - total
    elif how == "swap":
        old_sorted = np.empty(n, dtype)
        old_sorted[1:] = sv[:-1]
        old_sorted[starts] = init
        final = sv[ends]
    else:
        gid = np.repeat(np.arange(starts.size), counts)
        old_sorted, final = _table(init, sv, gid, starts, ends, fn, ufunc, view)
    write(keys, np.asarray(final, dtype))
    if not returns:
        return None
    if order is None:
        return old_sorted
    old = np.empty(n, dtype)
    old[order] = old_sorted
    return old


def _stable_order(addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lanes sorted by address, lane order kept among equal ones, and where in that order
    each address's group begins (a bool per sorted lane): (offset, lane) keys in one 32-
    or 64-bit word sorted, when they fit (offsets scaled by their common alignment), else
    a merge sort of the addresses."""
    lo = addresses.min()
    diff = addresses - lo
    either = int(np.bitwise_or.reduce(diff))
    shift = min((either & -either).bit_length() - 1, 3) if either else 0
    # one unstable sort of unique (offset, lane) keys is the stable order, and numpy's
    # SIMD sort of 32/64-bit keys is several times faster than a stable argsort; the
    # offsets' OR bounds their largest (no pass for the max), their common alignment (up
    # to 8) takes no key bits
    n = addresses.size
    lane_bits = max(1, (n - 1).bit_length())
    bits = lane_bits + max(1, (either >> shift).bit_length())
    first = np.empty(n, bool)
    first[0] = True
    if bits > 64:
        order = np.argsort(addresses, kind="stable")
        sa = addresses[order]
        np.not_equal(sa[1:], sa[:-1], out=first[1:])
        return order, first
    ut = np.uint32 if bits <= 32 else np.uint64
    keys = diff.astype(ut)
    if shift:
        keys >>= ut(shift)
    keys <<= ut(lane_bits)
    keys |= _lanes(n, ut)
    keys.sort()
    offsets = keys >> ut(lane_bits)
    np.not_equal(offsets[1:], offsets[:-1], out=first[1:])
    keys &= ut((1 << lane_bits) - 1)
    return keys.astype(np.intp), first  # (an intp index: numpy converts others per use)


@cache
def _lanes_cached(n: int, dtype: type) -> np.ndarray:
    lanes: np.ndarray = np.arange(n, dtype=dtype)
    lanes.flags.writeable = False
    return lanes


def _lanes(n: int, dtype: type) -> np.ndarray:
    """0..n-1 as `dtype` (kept for the usual lane counts)."""
    return _lanes_cached(n, dtype) if n <= 1 << 20 else np.arange(n, dtype=dtype)


_DENSE_PER_LANE = 4  # a dense table of addresses may be this many times the lanes


def _reduce_dense(old_read, write, addresses: np.ndarray, values: np.ndarray,
                  ufunc: np.ufunc, view: np.dtype | None) -> bool:
    """A non-returning atomic whose lanes span few addresses: `ufunc.at` over a table
    indexed by element offset, which applies the lanes one at a time in lane order
    (floats round step by step). False (nothing done) when the span is too large."""
    size = values.dtype.itemsize
    lo = addresses.min()
    diff = addresses - lo
    if int(np.bitwise_or.reduce(diff)) % size:
        return False  # addresses not a whole number of elements apart
    index = (diff // type(lo)(size)).astype(np.intp)
    width = int(index.max()) + 1
    if width > _DENSE_PER_LANE * index.size + 1024:
        return False
    present = np.flatnonzero(np.bincount(index, minlength=width))
    keys = lo + present.astype(addresses.dtype) * type(lo)(size)
    init = np.asarray(old_read(keys), values.dtype)
    if view is None:  # f32 min/max through order keys
        table = np.zeros(width, np.int64)
        big = ufunc is np.maximum
        table[present] = _f32_keys(init, big)
        ufunc.at(table, index, _f32_keys(values, big))
        final = _f32_from_keys(table[present], init)
    else:
        table = np.zeros(width, values.dtype)
        table[present] = init
        ufunc.at(table.view(view), index, values.view(view))
        final = table[present]
    write(keys, final)
    return True


def _distinct(old_read, write, addresses, values, fn, compare, float_compare) -> np.ndarray:
    old = np.asarray(old_read(addresses), values.dtype)
    if compare is not None:
        new = np.where(_equal(old, compare, float_compare), values, old)
    else:
        new = np.asarray(fn(old, values)).astype(values.dtype)
    write(addresses, new)
    return old


def _cmpswap(init: np.ndarray, new: np.ndarray, compare: np.ndarray, gid: np.ndarray,
             starts: np.ndarray, float_compare: bool) -> tuple[np.ndarray, np.ndarray]:
    """Sorted lanes of compare-and-swaps: each round, in every group at once, the first
    lane after the group's last success whose compare value equals the group's current
    value succeeds (a CAS loop's round has one success per address, then none)."""
    n = new.size
    if init.size == 1:  # one address (a CAS loop on a counter): walk its successes
        old = np.empty(n, new.dtype)
        current, pos = init[0], 0
        while pos < n:
            match = _equal(compare[pos:], np.asarray(current, new.dtype), float_compare)
            j = int(match.argmax())
            if not match[j]:
                break
            old[pos:pos + j + 1] = current
            current, pos = new[pos + j], pos + j + 1
        old[pos:] = current
        return old, np.array([current], new.dtype)
    lane = np.arange(n)
    state = init.copy()
    last = np.full(init.size, -1, np.int64)  # sorted position of each group's last success
    success = np.zeros(n, bool)
    while True:
        cand = (lane > last[gid]) & _equal(compare, state[gid], float_compare)
        hits = np.flatnonzero(cand)
        if hits.size == 0:
            break
        g = gid[hits]
        head = np.empty(g.size, bool)
        head[0] = True
        np.not_equal(g[1:], g[:-1], out=head[1:])
        firsts = hits[head]  # the first candidate of each group
        success[firsts] = True
        state[gid[firsts]] = new[firsts]
        last[gid[firsts]] = firsts
    # each lane saw the value of the last success before it in its group, or the memory's
    seen = np.maximum.accumulate(np.where(success, lane, -1))
    prev = np.empty(n, np.int64)
    prev[0] = -1
    prev[1:] = seen[:-1]
    inside = prev >= starts[gid]
    old = np.where(inside, new[np.maximum(prev, 0)], init[gid])
    return old, state


def _table(init: np.ndarray, sv: np.ndarray, gid: np.ndarray, starts: np.ndarray,
           ends: np.ndarray, fn, ufunc: np.ufunc | None, view: np.dtype | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Old values and finals through a (group, 1 + rank) table whose rows start with the
    memory's value: `ufunc.accumulate` along rows (sequential, so float adds round in lane
    order), or `fn` once per rank column. Groups far larger than the rest (which would
    make the table mostly padding) each get a row of their own."""
    dtype = sv.dtype
    n, groups = sv.size, init.size
    sizes = ends - starts + 1
    rank = np.arange(n) - starts[gid]
    by_size = np.argsort(-sizes, kind="stable")
    desc = sizes[by_size]
    # k largest groups alone, so that the table of the rest stays within budget
    cost = desc * (groups - np.arange(groups))
    k = int(np.argmax(cost <= _TABLE_CELLS_PER_LANE * n + 64))
    old_sorted = np.empty(n, dtype)
    final = np.empty(groups, dtype)
    for g in by_size[:k].tolist():
        s, e = int(starts[g]), int(ends[g]) + 1
        row = np.concatenate([init[g:g + 1], sv[s:e]])
        acc = _accumulate(row[None, :], fn, ufunc, view)[0]
        old_sorted[s:e] = acc[:-1]
        final[g] = acc[-1]
    if k == groups:
        return old_sorted, final
    rest = by_size[k:]
    row_of = np.full(groups, -1, np.int64)
    row_of[rest] = np.arange(rest.size)
    lanes = np.flatnonzero(row_of[gid] >= 0) if k else np.arange(n)
    width = int(desc[k]) + 1
    table = np.zeros((rest.size, width), dtype)
    table[:, 0] = init[rest]
    rows = row_of[gid[lanes]]
    table[rows, rank[lanes] + 1] = sv[lanes]
    acc = _accumulate(table, fn, ufunc, view, sizes[rest])
    old_sorted[lanes] = acc[rows, rank[lanes]]
    final[rest] = acc[np.arange(rest.size), sizes[rest]]
    return old_sorted, final


def _accumulate(table: np.ndarray, fn, ufunc: np.ufunc | None, view: np.dtype | None,
                sizes: np.ndarray | None = None) -> np.ndarray:
    """Running results along each row (column 0: the memory's value)."""
    if ufunc is not None:
        if view is None:  # f32 min/max through order keys
            big = ufunc is np.maximum
            acc = ufunc.accumulate(_f32_keys(table, big), axis=1)
            return _f32_from_keys(acc, table[:, :1])
        return ufunc.accumulate(table.view(view), axis=1).view(table.dtype)
    out = table.copy()
    for c in range(1, table.shape[1]):
        live = slice(None) if sizes is None else sizes >= c  # past a row's end: padding
        out[live, c] = np.asarray(fn(out[live, c - 1], table[live, c])).astype(table.dtype)
    return out
