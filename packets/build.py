"""Checked builders for single AQL packets, each returning 64 bytes.

Keyword names follow hsa.h. Every builder validates its fields and raises `PacketError` with
a one-line message naming the field, the bad value and what would be accepted. The hot path
is one `struct.pack` plus a handful of integer comparisons; the detailed diagnosis runs only
after a check has failed.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from typing import Any

from ground.errors import PacketError

from .layout import (
    MAX_DEP_SIGNALS,
    MAX_WORKGROUP_PRODUCT,
    AmdVendorFormat,
    FenceScope,
    PacketType,
)

_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF

# header | setup << 16, workgroup x | y << 16, z, (reserved0), grid x y z, private, group,
# kernel_object, kernarg_address, (reserved2), completion_signal: the reserved fields as pad
# bytes and the 16-bit pairs as one word each, so a pack takes 12 values, not 15 (the
# checks before it bound every workgroup size to MAX_WORKGROUP_PRODUCT, header and setup
# to 16 bits, so no field spills into its neighbour)
_KERNEL_DISPATCH = struct.Struct("<IIH2xIIIIIQQ8xQ")
_BARRIER = struct.Struct("<HHI5QQQ")
_AGENT_DISPATCH = struct.Struct("<HHIQ4QQQ")
_BARRIER_VALUE = struct.Struct("<HBBIQqqIIQQQ")
_EXT_KERNEL_DISPATCH = struct.Struct("<HBBHHHHIHHBBBBIIQQQQ")
_U8 = 0xFF

_SYSTEM = int(FenceScope.SYSTEM)


def header_word(
    packet_type: int,
    barrier: bool,
    acquire_fence_scope: int,
    release_fence_scope: int,
) -> int:
    """Checked 16-bit header: type | barrier << 8 | acquire << 9 | release << 11."""
    if not (0 <= acquire_fence_scope <= 2 and 0 <= release_fence_scope <= 2):
        _scope_error(acquire_fence_scope, release_fence_scope)
    return (packet_type | (256 if barrier else 0) | acquire_fence_scope << 9
            | release_fence_scope << 11)


def kernel_dispatch(
    *,
    workgroup_size: int | Sequence[int],
    grid_size: int | Sequence[int],
    private_segment_size: int = 0,
    group_segment_size: int = 0,
    kernel_object: int,
    kernarg_address: int,
    completion_signal: int = 0,
    barrier: bool = True,
    acquire_fence_scope: int = _SYSTEM,
    release_fence_scope: int = _SYSTEM,
    dims: int | None = None,
) -> bytes:
    """hsa_kernel_dispatch_packet_t. Sizes are an int (1-D) or a tuple of up to 3 ints;
    `grid_size` counts work-items, not workgroups. `dims` defaults to the longer tuple."""
    # An int, a tuple or a list of 1 to 3 ints inline (the common forms cost about the
    # same as an int); everything else through the general normaliser (_dim3).
    wx: Any
    wy: Any
    wz: Any
    gx: Any
    gy: Any
    gz: Any
    t = type(workgroup_size)
    if t is int:
        wx, wy, wz, nw = workgroup_size, 1, 1, 1
    elif t is tuple or t is list:  # inline: a helper call costs more than this
        nw = len(workgroup_size)  # type: ignore[arg-type]
        if nw == 3:
            wx, wy, wz = workgroup_size  # type: ignore[misc]
        elif nw == 2:
            wx, wy = workgroup_size  # type: ignore[misc]
            wz = 1
        elif nw == 1:
            wx, wy, wz = workgroup_size[0], 1, 1  # type: ignore[index]
        else:
            wx = wy = wz = None
        if type(wx) is not int or type(wy) is not int or type(wz) is not int:
            wx, wy, wz, nw = _dim3("workgroup_size", workgroup_size)  # type: ignore[arg-type]
    else:
        wx, wy, wz, nw = _dim3("workgroup_size", workgroup_size)
    t = type(grid_size)
    if t is int:
        gx, gy, gz, ng = grid_size, 1, 1, 1
    elif t is tuple or t is list:
        ng = len(grid_size)  # type: ignore[arg-type]
        if ng == 3:
            gx, gy, gz = grid_size  # type: ignore[misc]
        elif ng == 2:
            gx, gy = grid_size  # type: ignore[misc]
            gz = 1
        elif ng == 1:
            gx, gy, gz = grid_size[0], 1, 1  # type: ignore[index]
        else:
            gx = gy = gz = None
        if type(gx) is not int or type(gy) is not int or type(gz) is not int:
            gx, gy, gz, ng = _dim3("grid_size", grid_size)  # type: ignore[arg-type]
    else:
        gx, gy, gz, ng = _dim3("grid_size", grid_size)
    if dims is None:
        dims = nw if nw > ng else ng
    elif dims not in (1, 2, 3):
        raise PacketError(f"dims={dims!r} is out of range; a kernel dispatch has 1, 2 or 3 dims")
    if dims < 3 and (wz != 1 or gz != 1 or (dims == 1 and (wy != 1 or gy != 1))):
        _unused_dims_error(dims, (wx, wy, wz), (gx, gy, gz))
    if not (
        wx >= 1 and wy >= 1 and wz >= 1 and wx * wy * wz <= MAX_WORKGROUP_PRODUCT
        and gx >= 1 and gy >= 1 and gz >= 1
    ):
        _size_error((wx, wy, wz), (gx, gy, gz))
    if not kernel_object:
        raise PacketError("kernel_object is 0; pass the kernel descriptor address (symbol .kd)")
    if not kernarg_address or kernarg_address & 15:
        _kernarg_error(kernarg_address)
    if acquire_fence_scope == 2 and release_fence_scope == 2:  # the default: system scope
        header = 0x1502 if barrier else 0x1402
    else:
        header = header_word(2, barrier, acquire_fence_scope, release_fence_scope)
    try:
        return _KERNEL_DISPATCH.pack(
            header | dims << 16, wx | wy << 16, wz, gx, gy, gz,
            private_segment_size, group_segment_size,
            kernel_object, kernarg_address, completion_signal,
        )
    except struct.error:
        _range_error(
            workgroup_size_x=(wx, _U16), workgroup_size_y=(wy, _U16),
            workgroup_size_z=(wz, _U16), grid_size_x=(gx, _U32), grid_size_y=(gy, _U32),
            grid_size_z=(gz, _U32), private_segment_size=(private_segment_size, _U32),
            group_segment_size=(group_segment_size, _U32), kernel_object=(kernel_object, _U64),
            kernarg_address=(kernarg_address, _U64),
            completion_signal=(completion_signal, _U64),
        )
        raise


def ext_kernel_dispatch(
    *,
    workgroup_size: int | Sequence[int],
    cluster_count: int | Sequence[int],
    cluster_size: int | Sequence[int] = 1,
    private_segment_size: int = 0,
    group_segment_size: int = 0,
    kernel_object: int,
    kernarg_address: int,
    dep_signal: int = 0,
    completion_signal: int = 0,
    perf_hint: int = 0,
    barrier: bool = True,
    acquire_fence_scope: int = _SYSTEM,
    release_fence_scope: int = _SYSTEM,
    dims: int | None = None,
) -> bytes:
    """hsa_amd_ext_kernel_dispatch_packet_t (gfx1250): a vendor-specific packet with
    amd_format EXT_KERNEL_DISPATCH. The grid is cluster_count x cluster_size x workgroup_size
    work-items per dimension; `dep_signal` (0: none) must reach 0 before the dispatch starts.
    The rules checked are ROCr's: setup (dims) 1-3, no zero workgroup or cluster size."""
    wx, wy, wz, nw = _dim3("workgroup_size", workgroup_size)
    cx, cy, cz, nc = _dim3("cluster_count", cluster_count)
    sx, sy, sz, ns = _dim3("cluster_size", cluster_size)
    if dims is None:
        dims = max(nw, nc, ns)
    elif dims not in (1, 2, 3):
        raise PacketError(f"dims={dims!r} is out of range; a kernel dispatch has 1, 2 or 3 dims")
    ext_dispatch_check(dims, (wx, wy, wz), (cx, cy, cz), (sx, sy, sz))
    if not kernel_object:
        raise PacketError("kernel_object is 0; pass the kernel descriptor address (symbol .kd)")
    if not kernarg_address or kernarg_address & 15:
        _kernarg_error(kernarg_address)
    header = header_word(0, barrier, acquire_fence_scope, release_fence_scope)
    try:
        return _EXT_KERNEL_DISPATCH.pack(
            header, AmdVendorFormat.EXT_KERNEL_DISPATCH, dims, wx, wy, wz, 0, cx, cy, cz,
            sx, sy, sz, perf_hint, private_segment_size, group_segment_size,
            kernel_object, kernarg_address, dep_signal, completion_signal,
        )
    except struct.error:
        _range_error(
            workgroup_size_x=(wx, _U16), workgroup_size_y=(wy, _U16),
            workgroup_size_z=(wz, _U16), cluster_count_x=(cx, _U32),
            cluster_count_y=(cy, _U16), cluster_count_z=(cz, _U16),
            cluster_size_x=(sx, _U8), cluster_size_y=(sy, _U8), cluster_size_z=(sz, _U8),
            perf_hint=(perf_hint, _U8), private_segment_size=(private_segment_size, _U32),
            group_segment_size=(group_segment_size, _U32), kernel_object=(kernel_object, _U64),
            kernarg_address=(kernarg_address, _U64), dep_signal=(dep_signal, _U64),
            completion_signal=(completion_signal, _U64),
        )
        raise


def ext_dispatch_check(dims: int, wg: tuple, count: tuple, size: tuple,
                       reserved0: int = 0) -> None:
    """ROCr's rules for an extended dispatch packet; raises PacketError naming the first
    broken one. Shared by the builder and the virtual packet processor."""
    if dims not in (1, 2, 3):
        raise PacketError(f"setup={dims} is out of range; the dimensions are 1, 2 or 3")
    if reserved0:
        raise PacketError(f"reserved0={reserved0:#x} is not 0; reserved fields must be 0")
    for name, vec in (("workgroup_size", wg), ("cluster_size", size),
                      ("cluster_count", count)):
        if min(vec) < 1:
            raise PacketError(f"{name}={tuple(vec)} has an entry < 1; every dimension "
                              "must be >= 1")
        if dims < 3 and (vec[2] != 1 or (dims == 1 and vec[1] != 1)):
            raise PacketError(f"dims={dims} but {name}={tuple(vec)}: dimensions beyond dims "
                              "must be 1")
    if wg[0] * wg[1] * wg[2] > MAX_WORKGROUP_PRODUCT:
        raise PacketError(f"workgroup_size={tuple(wg)} has {wg[0] * wg[1] * wg[2]} "
                          f"work-items; at most {MAX_WORKGROUP_PRODUCT} per workgroup")


def barrier_and(
    *,
    dep_signals: Sequence[int] = (),
    completion_signal: int = 0,
    barrier: bool = True,
    acquire_fence_scope: int = _SYSTEM,
    release_fence_scope: int = _SYSTEM,
) -> bytes:
    """hsa_barrier_and_packet_t: waits until every dependency signal is 0 (0 handles count
    as satisfied)."""
    return _barrier(3, dep_signals, completion_signal, barrier, acquire_fence_scope,
                    release_fence_scope)


def barrier_or(
    *,
    dep_signals: Sequence[int] = (),
    completion_signal: int = 0,
    barrier: bool = True,
    acquire_fence_scope: int = _SYSTEM,
    release_fence_scope: int = _SYSTEM,
) -> bytes:
    """hsa_barrier_or_packet_t: waits until any dependency signal is 0 (0 handles never
    satisfy)."""
    return _barrier(5, dep_signals, completion_signal, barrier, acquire_fence_scope,
                    release_fence_scope)


def _barrier(
    packet_type: int,
    dep_signals: Sequence[int],
    completion_signal: int,
    barrier: bool,
    acquire_fence_scope: int,
    release_fence_scope: int,
) -> bytes:
    deps = list(dep_signals)
    if len(deps) > MAX_DEP_SIGNALS:
        raise PacketError(
            f"{len(deps)} dependency signals given; a barrier packet holds at most "
            f"{MAX_DEP_SIGNALS}: chain several barrier packets"
        )
    deps += [0] * (MAX_DEP_SIGNALS - len(deps))
    header = header_word(packet_type, barrier, acquire_fence_scope, release_fence_scope)
    try:
        return _BARRIER.pack(header, 0, 0, *deps, 0, completion_signal)
    except struct.error:
        fields = {f"dep_signal[{i}]": (d, _U64) for i, d in enumerate(deps)}
        _range_error(completion_signal=(completion_signal, _U64), **fields)
        raise


def barrier_value(
    *,
    signal: int,
    value: int,
    mask: int = -1,
    cond: int,
    completion_signal: int = 0,
    barrier: bool = True,
    acquire_fence_scope: int = _SYSTEM,
    release_fence_scope: int = _SYSTEM,
) -> bytes:
    """hsa_amd_barrier_value_packet_t (AMD vendor packet, GPU agents only): waits until
    `(value_of(signal) & mask) cond value`. `value` and `mask` are 64-bit; unsigned
    spellings (e.g. 0xFFFF_FFFF_FFFF_FFFF) are stored as the same bits."""
    if not 0 <= cond <= 3:
        raise PacketError(
            f"cond={cond!r} is out of range; use BarrierValueCondition EQ=0, NE=1, LT=2, GTE=3"
        )
    value_bits = _signed64("value", value)
    mask_bits = _signed64("mask", mask)
    header = header_word(0, barrier, acquire_fence_scope, release_fence_scope)
    try:
        return _BARRIER_VALUE.pack(
            header, AmdVendorFormat.BARRIER_VALUE, 0, 0, signal, value_bits, mask_bits,
            cond, 0, 0, 0, completion_signal,
        )
    except struct.error:
        _range_error(signal=(signal, _U64), completion_signal=(completion_signal, _U64))
        raise


def agent_dispatch(
    *,
    type: int,  # noqa: A002 - hsa.h's field name
    return_address: int = 0,
    args: Sequence[int] = (0, 0, 0, 0),
    completion_signal: int = 0,
    barrier: bool = True,
    acquire_fence_scope: int = _SYSTEM,
    release_fence_scope: int = _SYSTEM,
) -> bytes:
    """hsa_agent_dispatch_packet_t: `type` is the agent function id, `args` up to 4 u64."""
    arg = list(args)
    if len(arg) > 4:
        raise PacketError(f"{len(arg)} args given; an agent dispatch packet holds at most 4")
    arg += [0] * (4 - len(arg))
    header = header_word(4, barrier, acquire_fence_scope, release_fence_scope)
    try:
        return _AGENT_DISPATCH.pack(header, type, 0, return_address, *arg, 0, completion_signal)
    except struct.error:
        fields = {f"arg[{i}]": (a, _U64) for i, a in enumerate(arg)}
        _range_error(type=(type, _U16), return_address=(return_address, _U64),
                     completion_signal=(completion_signal, _U64), **fields)
        raise


def invalid() -> bytes:
    """A slot that holds no packet: header type INVALID, every other byte 0."""
    return _BARRIER.pack(int(PacketType.INVALID), 0, 0, 0, 0, 0, 0, 0, 0, 0)


# --- diagnosis (runs only after a fast check failed) -------------------------------------


def _dim3(name: str, value: Any) -> tuple[int, int, int, int]:
    """(x, y, z, dims) of an int, a numpy integer or a sequence of 1 to 3 of them."""
    if type(value) is not tuple and type(value) is not list:
        try:
            return operator.index(value), 1, 1, 1  # a numpy integer scalar
        except TypeError:
            pass
    try:
        items = [v if type(v) is int else operator.index(v) for v in value]
    except TypeError:
        raise PacketError(
            f"{name}={value!r} is not an int or a sequence of 1 to 3 ints"
        ) from None
    if not 1 <= len(items) <= 3:
        raise PacketError(f"{name}={tuple(items)!r} has {len(items)} entries; give 1 to 3")
    n = len(items)
    items += [1] * (3 - n)
    return items[0], items[1], items[2], n


def _scope_error(acquire: int, release: int) -> None:
    for name, scope in (("acquire_fence_scope", acquire), ("release_fence_scope", release)):
        if not 0 <= scope <= 2:
            raise PacketError(
                f"{name}={scope!r} is out of range; use FenceScope NONE=0, AGENT=1 or SYSTEM=2"
            )


def _unused_dims_error(dims: int, wg: tuple, grid: tuple) -> None:
    raise PacketError(
        f"dims={dims} but workgroup_size={wg} grid_size={grid}: dimensions beyond dims must be 1"
    )


def _size_error(wg: tuple, grid: tuple) -> None:
    if min(wg) < 1:
        raise PacketError(f"workgroup_size={wg} has an entry < 1; every dimension must be >= 1")
    if min(grid) < 1:
        raise PacketError(f"grid_size={grid} has an entry < 1; every dimension must be >= 1")
    raise PacketError(
        f"workgroup_size={wg} has {wg[0] * wg[1] * wg[2]} work-items; "
        f"at most {MAX_WORKGROUP_PRODUCT} per workgroup"
    )


def _kernarg_error(address: int) -> None:
    if not address:
        raise PacketError("kernarg_address is 0; allocate the kernarg block in the kernarg pool")
    raise PacketError(
        f"kernarg_address=0x{address:x} is not 16-byte aligned; kernarg blocks need 16-byte "
        "alignment"
    )


def _range_error(**fields: tuple[int, int]) -> None:
    for name, (value, limit) in fields.items():
        try:
            ok = 0 <= operator.index(value) <= limit
        except TypeError:
            raise PacketError(f"{name}={value!r} is not an integer") from None
        if not ok:
            raise PacketError(f"{name}={value!r} does not fit; the field holds 0..{limit:#x}")


def _signed64(name: str, value: int) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise PacketError(f"{name}={value!r} is not an integer") from None
    if not -(1 << 63) <= v < (1 << 64):
        raise PacketError(f"{name}={value!r} does not fit in 64 bits")
    return v - (1 << 64) if v >= (1 << 63) else v
