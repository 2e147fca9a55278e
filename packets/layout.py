"""AQL packet layouts: enums, numpy structured dtypes and header/setup bit fields.

Every layout is 64 bytes with the field names and offsets of `hsa.h` (and `hsa_ext_amd.h`
for the AMD vendor BARRIER_VALUE and EXT_KERNEL_DISPATCH packets). The byte-exact test compiles a
C program against
the installed headers and compares offsets and encoded bytes with these dtypes.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

PACKET_SIZE = 64


class PacketType(IntEnum):
    """hsa_packet_type_t: bits 0-7 of the packet header."""

    VENDOR_SPECIFIC = 0
    INVALID = 1
    KERNEL_DISPATCH = 2
    BARRIER_AND = 3
    AGENT_DISPATCH = 4
    BARRIER_OR = 5


class FenceScope(IntEnum):
    """hsa_fence_scope_t: acquire (bits 9-10) and release (bits 11-12) header fields."""

    NONE = 0
    AGENT = 1
    SYSTEM = 2


class BarrierValueCondition(IntEnum):
    """hsa_signal_condition_t as used by the AMD BARRIER_VALUE packet's `cond`."""

    EQ = 0
    NE = 1
    LT = 2
    GTE = 3


class AmdVendorFormat(IntEnum):
    """hsa_amd_packet_type_t: the AmdFormat byte of an AMD vendor-specific packet (PM4_IB is
    ROCr's internal AMD_AQL_FORMAT_PM4_IB: see packets.pm4.pm4_ib_aql_packet)."""

    PM4_IB = 1
    BARRIER_VALUE = 2
    EXT_KERNEL_DISPATCH = 3


# Header bit positions and widths (hsa_packet_header_t / hsa_packet_header_width_t).
HEADER_TYPE_SHIFT = 0
HEADER_BARRIER_SHIFT = 8
HEADER_ACQUIRE_FENCE_SCOPE_SHIFT = 9
HEADER_RELEASE_FENCE_SCOPE_SHIFT = 11
HEADER_TYPE_MASK = 0xFF
HEADER_SCOPE_MASK = 0x3
SETUP_DIMENSIONS_MASK = 0x3

# The 16-bit header of a slot that holds no packet; the 32-bit word ROCr's protocol stores
# last is `header | setup << 16`.
INVALID_HEADER = int(PacketType.INVALID)

KERNEL_DISPATCH = np.dtype(
    [
        ("header", "<u2"),
        ("setup", "<u2"),
        ("workgroup_size_x", "<u2"),
        ("workgroup_size_y", "<u2"),
        ("workgroup_size_z", "<u2"),
        ("reserved0", "<u2"),
        ("grid_size_x", "<u4"),
        ("grid_size_y", "<u4"),
        ("grid_size_z", "<u4"),
        ("private_segment_size", "<u4"),
        ("group_segment_size", "<u4"),
        ("kernel_object", "<u8"),
        ("kernarg_address", "<u8"),
        ("reserved2", "<u8"),
        ("completion_signal", "<u8"),
    ]
)

AGENT_DISPATCH = np.dtype(
    [
        ("header", "<u2"),
        ("type", "<u2"),
        ("reserved0", "<u4"),
        ("return_address", "<u8"),
        ("arg", "<u8", (4,)),
        ("reserved2", "<u8"),
        ("completion_signal", "<u8"),
    ]
)

_BARRIER_FIELDS = [
    ("header", "<u2"),
    ("reserved0", "<u2"),
    ("reserved1", "<u4"),
    ("dep_signal", "<u8", (5,)),
    ("reserved2", "<u8"),
    ("completion_signal", "<u8"),
]
BARRIER_AND = np.dtype(_BARRIER_FIELDS)
BARRIER_OR = np.dtype(_BARRIER_FIELDS)

# hsa_amd_barrier_value_packet_t; its 4-byte hsa_amd_vendor_packet_header_t
# {header, AmdFormat, reserved} is flattened into the first three fields.
BARRIER_VALUE = np.dtype(
    [
        ("header", "<u2"),
        ("AmdFormat", "u1"),
        ("reserved", "u1"),
        ("reserved0", "<u4"),
        ("signal", "<u8"),
        ("value", "<i8"),
        ("mask", "<i8"),
        ("cond", "<u4"),
        ("reserved1", "<u4"),
        ("reserved2", "<u8"),
        ("reserved3", "<u8"),
        ("completion_signal", "<u8"),
    ]
)

# hsa_amd_ext_kernel_dispatch_packet_t (ROCr hsa_ext_amd.h, newer than Debian's headers):
# the gfx1250 dispatch packet with workgroup clusters. Its grid is, per dimension,
# cluster_count x cluster_size x workgroup_size work-items (whole workgroups only).
EXT_KERNEL_DISPATCH = np.dtype(
    [
        ("header", "<u2"),
        ("amd_format", "u1"),
        ("setup", "u1"),
        ("workgroup_size_x", "<u2"),
        ("workgroup_size_y", "<u2"),
        ("workgroup_size_z", "<u2"),
        ("reserved0", "<u2"),
        ("cluster_count_x", "<u4"),
        ("cluster_count_y", "<u2"),
        ("cluster_count_z", "<u2"),
        ("cluster_size_x", "u1"),
        ("cluster_size_y", "u1"),
        ("cluster_size_z", "u1"),
        ("perf_hint", "u1"),
        ("private_segment_size", "<u4"),
        ("group_segment_size", "<u4"),
        ("kernel_object", "<u8"),
        ("kernarg_address", "<u8"),
        ("dep_signal", "<u8"),
        ("completion_signal", "<u8"),
    ]
)

# A packet as raw bytes: the type of a ring slot or a mixed block of packets.
PACKET = np.dtype((np.void, PACKET_SIZE))

MAX_DEP_SIGNALS = 5
MAX_WORKGROUP_PRODUCT = 1024

for _dt in (
    KERNEL_DISPATCH, EXT_KERNEL_DISPATCH, AGENT_DISPATCH, BARRIER_AND, BARRIER_OR,
    BARRIER_VALUE, PACKET,
):
    assert _dt.itemsize == PACKET_SIZE, _dt


def encode_header(
    packet_type: int,
    barrier: bool = True,
    acquire_fence_scope: int = FenceScope.SYSTEM,
    release_fence_scope: int = FenceScope.SYSTEM,
) -> int:
    """The 16-bit AQL header (no validation; see packets.build for checked builders)."""
    return (
        (int(packet_type) & HEADER_TYPE_MASK)
        | (int(bool(barrier)) << HEADER_BARRIER_SHIFT)
        | ((int(acquire_fence_scope) & HEADER_SCOPE_MASK) << HEADER_ACQUIRE_FENCE_SCOPE_SHIFT)
        | ((int(release_fence_scope) & HEADER_SCOPE_MASK) << HEADER_RELEASE_FENCE_SCOPE_SHIFT)
    )


def decode_header(header: int) -> dict:
    """Split a 16-bit header into type, barrier bit and the two fence scopes."""
    header = int(header)
    return {
        "type": _packet_type(header & HEADER_TYPE_MASK),
        "barrier": bool((header >> HEADER_BARRIER_SHIFT) & 1),
        "acquire_fence_scope": _scope((header >> HEADER_ACQUIRE_FENCE_SCOPE_SHIFT) & 3),
        "release_fence_scope": _scope((header >> HEADER_RELEASE_FENCE_SCOPE_SHIFT) & 3),
    }


def encode_setup(dims: int) -> int:
    """Kernel dispatch `setup`: bits 0-1 hold the number of dimensions."""
    return int(dims) & SETUP_DIMENSIONS_MASK


def decode_setup(setup: int) -> int:
    """Number of dimensions of a kernel dispatch `setup` word."""
    return int(setup) & SETUP_DIMENSIONS_MASK


def _packet_type(value: int) -> PacketType | int:
    try:
        return PacketType(value)
    except ValueError:
        return value


def _scope(value: int) -> FenceScope | int:
    try:
        return FenceScope(value)
    except ValueError:
        return value  # 3 is not a valid scope; decode shows it rather than hiding it


def dtype_for(packet_type: int, amd_format: int | None = None) -> np.dtype:
    """The structured dtype that matches a header type (and vendor format)."""
    if packet_type == PacketType.KERNEL_DISPATCH:
        return KERNEL_DISPATCH
    if packet_type == PacketType.BARRIER_AND:
        return BARRIER_AND
    if packet_type == PacketType.BARRIER_OR:
        return BARRIER_OR
    if packet_type == PacketType.AGENT_DISPATCH:
        return AGENT_DISPATCH
    if packet_type == PacketType.VENDOR_SPECIFIC and amd_format == AmdVendorFormat.BARRIER_VALUE:
        return BARRIER_VALUE
    vendor = packet_type == PacketType.VENDOR_SPECIFIC
    if vendor and amd_format == AmdVendorFormat.EXT_KERNEL_DISPATCH:
        return EXT_KERNEL_DISPATCH
    return PACKET
