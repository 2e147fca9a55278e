"""Batch builders: N packets at once from arrays, returned as numpy structured arrays.

Command buffers build thousands of packets this way. Every field accepts a scalar (the
same for all packets) or an array of N values; validation is vectorized and an error names
the first bad packet. Vector-valued fields:

- `workgroup_size`, `grid_size`: an int (1-D, shared), a tuple/list of 1-3 ints (shared), a
  1-D ndarray of N ints (1-D, per packet) or an (N, k) array with k in 1..3 (per packet).
- `dep_signals` (up to 5) and `args` (up to 4): a 1-D sequence (shared) or an (N, k) array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ground.errors import PacketError

from .layout import (
    AGENT_DISPATCH,
    BARRIER_AND,
    BARRIER_OR,
    BARRIER_VALUE,
    EXT_KERNEL_DISPATCH,
    KERNEL_DISPATCH,
    MAX_DEP_SIGNALS,
    MAX_WORKGROUP_PRODUCT,
    AmdVendorFormat,
    FenceScope,
    PacketType,
)

_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_SYSTEM = int(FenceScope.SYSTEM)


def kernel_dispatch_batch(
    *,
    workgroup_size,
    grid_size,
    private_segment_size=0,
    group_segment_size=0,
    kernel_object,
    kernarg_address,
    completion_signal=0,
    barrier=True,
    acquire_fence_scope=_SYSTEM,
    release_fence_scope=_SYSTEM,
    dims=None,
    count: int | None = None,
) -> np.ndarray:
    """N hsa_kernel_dispatch_packet_t as a KERNEL_DISPATCH structured array."""
    wg, kw = _sizes("workgroup_size", workgroup_size)
    grid, kg = _sizes("grid_size", grid_size)
    private = _uint("private_segment_size", private_segment_size, _U32)
    group = _uint("group_segment_size", group_segment_size, _U32)
    kobj = _uint("kernel_object", kernel_object)
    karg = _uint("kernarg_address", kernarg_address)
    signal = _uint("completion_signal", completion_signal)
    header = _header(PacketType.KERNEL_DISPATCH, barrier, acquire_fence_scope,
                     release_fence_scope)
    if dims is None:
        dims_arr = np.asarray(max(kw, kg), dtype=np.int64)
    else:
        dims_arr = _int_array("dims", dims)
    n = _count(count, wg[:, 0], grid[:, 0], private, group, kobj, karg, signal, header,
               dims_arr)

    _first_bad(n, (dims_arr < 1) | (dims_arr > 3), "dims={} is out of range; use 1, 2 or 3",
               dims_arr)
    _first_bad(n, (wg < 1).any(axis=-1), "workgroup_size={} has an entry < 1", wg)
    _first_bad(n, (grid < 1).any(axis=-1), "grid_size={} has an entry < 1", grid)
    _first_bad(n, wg.prod(axis=-1) > MAX_WORKGROUP_PRODUCT,
               f"workgroup_size={{}} has more than {MAX_WORKGROUP_PRODUCT} work-items", wg)
    _first_bad(n, (wg > _U16).any(axis=-1), "workgroup_size={} does not fit in 16 bits", wg)
    _first_bad(n, (grid > _U32).any(axis=-1), "grid_size={} does not fit in 32 bits", grid)
    unused = np.arange(3) >= np.reshape(dims_arr, (-1, 1))
    _first_bad(n, ((wg != 1) & unused).any(axis=-1) | ((grid != 1) & unused).any(axis=-1),
               "workgroup_size={} / grid_size={}: dimensions beyond dims must be 1", wg, grid)
    _first_bad(n, kobj == 0, "kernel_object is 0; pass the kernel descriptor address{}", None)
    _first_bad(n, karg == 0, "kernarg_address is 0; allocate the kernarg block{}", None)
    _first_bad(n, (karg & np.uint64(15)) != 0,
               "kernarg_address={} is not 16-byte aligned", karg)

    out = np.zeros(n, KERNEL_DISPATCH)
    out["header"] = header
    out["setup"] = dims_arr
    if wg.shape[0] == 1:
        out["workgroup_size_x"], out["workgroup_size_y"], out["workgroup_size_z"] = wg[0]
    else:
        out["workgroup_size_x"] = wg[:, 0]
        out["workgroup_size_y"] = wg[:, 1]
        out["workgroup_size_z"] = wg[:, 2]
    if grid.shape[0] == 1:
        out["grid_size_x"], out["grid_size_y"], out["grid_size_z"] = grid[0]
    else:
        out["grid_size_x"] = grid[:, 0]
        out["grid_size_y"] = grid[:, 1]
        out["grid_size_z"] = grid[:, 2]
    out["private_segment_size"] = private
    out["group_segment_size"] = group
    out["kernel_object"] = kobj
    out["kernarg_address"] = karg
    out["completion_signal"] = signal
    return out


def ext_kernel_dispatch_batch(
    *,
    workgroup_size,
    cluster_count,
    cluster_size=1,
    private_segment_size=0,
    group_segment_size=0,
    kernel_object,
    kernarg_address,
    dep_signal=0,
    completion_signal=0,
    perf_hint=0,
    barrier=True,
    acquire_fence_scope=_SYSTEM,
    release_fence_scope=_SYSTEM,
    dims=None,
    count: int | None = None,
) -> np.ndarray:
    """N hsa_amd_ext_kernel_dispatch_packet_t (gfx1250) as an EXT_KERNEL_DISPATCH array;
    the same rules as packets.ext_kernel_dispatch, checked for every packet."""
    wg, kw = _sizes("workgroup_size", workgroup_size)
    clusters, kc = _sizes("cluster_count", cluster_count)
    csize, ks = _sizes("cluster_size", cluster_size)
    private = _uint("private_segment_size", private_segment_size, _U32)
    group = _uint("group_segment_size", group_segment_size, _U32)
    kobj = _uint("kernel_object", kernel_object)
    karg = _uint("kernarg_address", kernarg_address)
    dep = _uint("dep_signal", dep_signal)
    signal = _uint("completion_signal", completion_signal)
    hint = _uint("perf_hint", perf_hint, 0xFF)
    header = _header(PacketType.VENDOR_SPECIFIC, barrier, acquire_fence_scope,
                     release_fence_scope)
    dims_arr = np.asarray(max(kw, kc, ks), np.int64) if dims is None else _int_array("dims", dims)
    n = _count(count, wg[:, 0], clusters[:, 0], csize[:, 0], private, group, kobj, karg, dep,
               signal, hint, header, dims_arr)

    _first_bad(n, (dims_arr < 1) | (dims_arr > 3), "dims={} is out of range; use 1, 2 or 3",
               dims_arr)
    for name, arr in (("workgroup_size", wg), ("cluster_size", csize),
                      ("cluster_count", clusters)):
        _first_bad(n, (arr < 1).any(axis=-1), name + "={} has an entry < 1", arr)
    _first_bad(n, wg.prod(axis=-1) > MAX_WORKGROUP_PRODUCT,
               f"workgroup_size={{}} has more than {MAX_WORKGROUP_PRODUCT} work-items", wg)
    _first_bad(n, (wg > _U16).any(axis=-1), "workgroup_size={} does not fit in 16 bits", wg)
    _first_bad(n, (csize > 0xFF).any(axis=-1), "cluster_size={} does not fit in 8 bits", csize)
    _first_bad(n, (clusters[:, 0] > _U32) | (clusters[:, 1:] > _U16).any(axis=-1),
               "cluster_count={} does not fit (x: 32 bits, y and z: 16 bits)", clusters)
    unused = np.arange(3) >= np.reshape(dims_arr, (-1, 1))
    _first_bad(n, ((wg != 1) & unused).any(axis=-1) | ((clusters != 1) & unused).any(axis=-1)
               | ((csize != 1) & unused).any(axis=-1),
               "workgroup_size={} / cluster_count={} / cluster_size={}: dimensions beyond dims "
               "must be 1", wg, clusters, csize)
    _first_bad(n, kobj == 0, "kernel_object is 0; pass the kernel descriptor address{}", None)
    _first_bad(n, karg == 0, "kernarg_address is 0; allocate the kernarg block{}", None)
    _first_bad(n, (karg & np.uint64(15)) != 0,
               "kernarg_address={} is not 16-byte aligned", karg)

    out = np.zeros(n, EXT_KERNEL_DISPATCH)
    out["header"] = header
    out["amd_format"] = AmdVendorFormat.EXT_KERNEL_DISPATCH
    out["setup"] = dims_arr
    for prefix, arr in (("workgroup_size", wg), ("cluster_count", clusters),
                        ("cluster_size", csize)):
        for i, d in enumerate("xyz"):
            out[f"{prefix}_{d}"] = arr[:, i] if arr.shape[0] > 1 else arr[0, i]
    out["perf_hint"] = hint
    out["private_segment_size"] = private
    out["group_segment_size"] = group
    out["kernel_object"] = kobj
    out["kernarg_address"] = karg
    out["dep_signal"] = dep
    out["completion_signal"] = signal
    return out


def barrier_and_batch(
    *,
    dep_signals=(),
    completion_signal=0,
    barrier=True,
    acquire_fence_scope=_SYSTEM,
    release_fence_scope=_SYSTEM,
    count: int | None = None,
) -> np.ndarray:
    """N hsa_barrier_and_packet_t as a BARRIER_AND structured array."""
    return _barrier_batch(PacketType.BARRIER_AND, BARRIER_AND, dep_signals, completion_signal,
                          barrier, acquire_fence_scope, release_fence_scope, count)


def barrier_or_batch(
    *,
    dep_signals=(),
    completion_signal=0,
    barrier=True,
    acquire_fence_scope=_SYSTEM,
    release_fence_scope=_SYSTEM,
    count: int | None = None,
) -> np.ndarray:
    """N hsa_barrier_or_packet_t as a BARRIER_OR structured array."""
    return _barrier_batch(PacketType.BARRIER_OR, BARRIER_OR, dep_signals, completion_signal,
                          barrier, acquire_fence_scope, release_fence_scope, count)


def _barrier_batch(packet_type, dtype, dep_signals, completion_signal, barrier,
                   acquire_fence_scope, release_fence_scope, count):
    deps = _vectors("dep_signals", dep_signals, MAX_DEP_SIGNALS)
    signal = _uint("completion_signal", completion_signal)
    header = _header(packet_type, barrier, acquire_fence_scope, release_fence_scope)
    n = _count(count, deps[:, 0], signal, header)
    out = np.zeros(n, dtype)
    out["header"] = header
    out["dep_signal"] = deps
    out["completion_signal"] = signal
    return out


def barrier_value_batch(
    *,
    signal,
    value,
    mask=-1,
    cond,
    completion_signal=0,
    barrier=True,
    acquire_fence_scope=_SYSTEM,
    release_fence_scope=_SYSTEM,
    count: int | None = None,
) -> np.ndarray:
    """N hsa_amd_barrier_value_packet_t as a BARRIER_VALUE structured array."""
    sig = _uint("signal", signal)
    val = _int64("value", value)
    msk = _int64("mask", mask)
    cnd = _int_array("cond", cond)
    done = _uint("completion_signal", completion_signal)
    header = _header(PacketType.VENDOR_SPECIFIC, barrier, acquire_fence_scope,
                     release_fence_scope)
    n = _count(count, sig, val, msk, cnd, done, header)
    _first_bad(n, (cnd < 0) | (cnd > 3), "cond={} is out of range; use EQ=0, NE=1, LT=2, GTE=3",
               cnd)
    out = np.zeros(n, BARRIER_VALUE)
    out["header"] = header
    out["AmdFormat"] = AmdVendorFormat.BARRIER_VALUE
    out["signal"] = sig
    out["value"] = val
    out["mask"] = msk
    out["cond"] = cnd
    out["completion_signal"] = done
    return out


def agent_dispatch_batch(
    *,
    type,  # noqa: A002 - hsa.h's field name
    return_address=0,
    args=(0, 0, 0, 0),
    completion_signal=0,
    barrier=True,
    acquire_fence_scope=_SYSTEM,
    release_fence_scope=_SYSTEM,
    count: int | None = None,
) -> np.ndarray:
    """N hsa_agent_dispatch_packet_t as an AGENT_DISPATCH structured array."""
    function = _uint("type", type, _U16)
    ret = _uint("return_address", return_address)
    arg = _vectors("args", args, 4)
    done = _uint("completion_signal", completion_signal)
    header = _header(PacketType.AGENT_DISPATCH, barrier, acquire_fence_scope,
                     release_fence_scope)
    n = _count(count, function, ret, arg[:, 0], done, header)
    out = np.zeros(n, AGENT_DISPATCH)
    out["header"] = header
    out["type"] = function
    out["return_address"] = ret
    out["arg"] = arg
    out["completion_signal"] = done
    return out


# --- vectorized conversion and checks ----------------------------------------------------


def _int_array(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise PacketError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.ndim > 1:
        raise PacketError(f"{name} must be a scalar or a 1-D array, got shape {arr.shape}")
    return arr.astype(np.int64, copy=False) if arr.dtype.kind == "u" and arr.dtype.itemsize < 8 \
        else arr


def _uint(name: str, value, limit: int | None = None) -> np.ndarray:
    """Unsigned field as a 0-D or 1-D uint64 array (python ints up to 2**64 - 1 allowed)."""
    arr = np.asarray(value)
    if arr.dtype.kind == "O":  # python ints beyond int64 mixed with small ones
        try:
            arr = np.array([int(v) for v in arr.reshape(-1)], dtype=np.uint64).reshape(arr.shape)
        except (OverflowError, TypeError, ValueError):
            raise PacketError(f"{name} holds values that are not unsigned 64-bit ints") from None
    if arr.dtype.kind not in "iub":
        raise PacketError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.ndim > 1:
        raise PacketError(f"{name} must be a scalar or a 1-D array, got shape {arr.shape}")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise PacketError(f"{name} has a negative entry ({arr.min()}); the field is unsigned")
    arr = arr.astype(np.uint64, copy=False)
    if limit is not None and arr.size and arr.max() > limit:
        raise PacketError(f"{name} has an entry {arr.max()} that does not fit; max is {limit:#x}")
    return arr


def _int64(name: str, value) -> np.ndarray:
    """64-bit field stored as int64 bits; unsigned spellings >= 2**63 wrap like C."""
    arr = np.asarray(value)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False).view(np.int64)  # same bits, like C
    if arr.dtype.kind == "O":
        try:
            flat = [int(v) for v in arr.reshape(-1)]
        except (TypeError, ValueError):
            raise PacketError(f"{name} must be integers") from None
        if any(not -(1 << 63) <= v < (1 << 64) for v in flat):
            raise PacketError(f"{name} has an entry that does not fit in 64 bits")
        arr = np.array([v - (1 << 64) if v >= (1 << 63) else v for v in flat],
                       dtype=np.int64).reshape(arr.shape)
    if arr.dtype.kind not in "ib":
        raise PacketError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.ndim > 1:
        raise PacketError(f"{name} must be a scalar or a 1-D array, got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _sizes(name: str, value) -> tuple[np.ndarray, int]:
    """(rows, 3) int64 array padded with 1, and the number of dimensions given."""
    if isinstance(value, (tuple, list)):
        arr = np.asarray(value, dtype=np.int64)
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
    else:
        arr = np.asarray(value)
        if arr.dtype.kind not in "iu":
            raise PacketError(f"{name} must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64).reshape((-1, 1) if arr.ndim <= 1 else arr.shape)
    if arr.ndim != 2 or not 1 <= arr.shape[1] <= 3:
        raise PacketError(f"{name} must have 1 to 3 dimensions per packet, got {arr.shape}")
    k = arr.shape[1]
    if k < 3:
        arr = np.concatenate([arr, np.ones((arr.shape[0], 3 - k), np.int64)], axis=1)
    return arr, k


def _vectors(name: str, value: Any, width: int) -> np.ndarray:
    """(rows, width) uint64 array, zero padded; 1-D input is shared by every packet."""
    arr: Any = np.asarray(value)
    if arr.size == 0:
        return np.zeros((1, width), np.uint64)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise PacketError(f"{name} must be a 1-D sequence or an (N, k) array, got {arr.shape}")
    if arr.shape[1] > width:
        raise PacketError(f"{name} has {arr.shape[1]} entries per packet; at most {width}")
    arr = _uint(name, arr.reshape(-1)).reshape(arr.shape)
    if arr.shape[1] < width:
        arr = np.concatenate([arr, np.zeros((arr.shape[0], width - arr.shape[1]), np.uint64)],
                             axis=1)
    return arr


def _header(packet_type, barrier, acquire, release) -> np.ndarray:
    acq = _int_array("acquire_fence_scope", acquire)
    rel = _int_array("release_fence_scope", release)
    for name, arr in (("acquire_fence_scope", acq), ("release_fence_scope", rel)):
        if arr.size and (arr.min() < 0 or arr.max() > 2):
            raise PacketError(
                f"{name} has an entry out of range; use FenceScope NONE=0, AGENT=1 or SYSTEM=2"
            )
    bar = np.asarray(barrier).astype(bool).astype(np.uint16)
    return (int(packet_type) | bar << 8 | acq.astype(np.uint16) << 9
            | rel.astype(np.uint16) << 11).astype(np.uint16)


def _count(count: int | None, *arrays: np.ndarray) -> int:
    lengths = {a.shape[0] for a in arrays if a.ndim >= 1 and a.shape[0] != 1}
    if len(lengths) > 1:
        raise PacketError(f"batch fields have different lengths {sorted(lengths)}; "
                          "give N values or one value per field")
    n = lengths.pop() if lengths else (count if count is not None else 1)
    if count is not None and count != n:
        raise PacketError(f"count={count} but the fields hold {n} packets")
    return n


def _first_bad(n: int, bad: Any, message: str, *values: Any) -> None:
    bad = np.broadcast_to(bad, (n,)) if np.ndim(bad) else np.full(n, bool(bad))
    if not bad.any():
        return
    i = int(np.argmax(bad))
    shown: list[Any] = []
    for v in values:
        if v is None:
            shown.append("")
            continue
        v = np.asarray(v)
        row = v if v.ndim == 0 else v[i if v.shape[0] > 1 else 0]
        shown.append(tuple(int(x) for x in row) if np.ndim(row) else
                     (hex(int(row)) if "address" in message else int(row)))
    raise PacketError(f"packet {i}: " + message.format(*shown))
