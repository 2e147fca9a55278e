"""Code object v5 hidden kernel arguments: what each one holds for a dispatch.

One implementation for the driver (`amdgpu.hsa_backend.kernargs`) and the virtual GPU's
test harness (`hsa.virtual.gfx11.testing`). The definitions are LLVM's AMDGPUUsage
("Code Object V5 Metadata", the hidden argument kinds), as AMD's device libraries read
them (ockl's workitem functions, ABI version 5):

    hidden_block_count_{x,y,z}  u32  grid // block: the number of *full* work-groups
    hidden_group_size_{x,y,z}   u16  the work-group size
    hidden_remainder_{x,y,z}    u16  grid % block: the size of the partial last group
    hidden_global_offset_*      u64  0 (the driver has no global offsets)
    hidden_grid_dims            u16  the packet's dimensions
    hidden_dynamic_lds_size     u32  dynamic LDS bytes of this dispatch

so the device libraries get back what they need: get_num_groups = block_count +
(remainder > 0), get_global_size = block_count * group_size + remainder, and
get_local_size of group i = group_size if i < block_count else remainder.
The floor is the definition: a ceiling in block_count would make a partial grid count one
group too many.
"""

from __future__ import annotations

#: value_kind -> (source, axis): the hidden arguments computed from a dispatch's shape.
GEOMETRY_KINDS: dict[str, tuple[str, int]] = {
    "hidden_block_count_x": ("block_count", 0),
    "hidden_block_count_y": ("block_count", 1),
    "hidden_block_count_z": ("block_count", 2),
    "hidden_group_size_x": ("group_size", 0),
    "hidden_group_size_y": ("group_size", 1),
    "hidden_group_size_z": ("group_size", 2),
    "hidden_remainder_x": ("remainder", 0),
    "hidden_remainder_y": ("remainder", 1),
    "hidden_remainder_z": ("remainder", 2),
    "hidden_global_offset_x": ("global_offset", 0),
    "hidden_global_offset_y": ("global_offset", 1),
    "hidden_global_offset_z": ("global_offset", 2),
    "hidden_grid_dims": ("grid_dims", 0),
    "hidden_dynamic_lds_size": ("dynamic_lds", 0),
}

#: Offsets inside the v5 implicit-argument block (from its start) and sizes, as the
#: device libraries index it (IMPLICITARG(uint)[0..2], (ushort)[6..11], (ulong)[5..7],
#: (ushort)[32]).
V5_LAYOUT: dict[str, tuple[int, int]] = {
    "hidden_block_count_x": (0, 4),
    "hidden_block_count_y": (4, 4),
    "hidden_block_count_z": (8, 4),
    "hidden_group_size_x": (12, 2),
    "hidden_group_size_y": (14, 2),
    "hidden_group_size_z": (16, 2),
    "hidden_remainder_x": (18, 2),
    "hidden_remainder_y": (20, 2),
    "hidden_remainder_z": (22, 2),
    "hidden_global_offset_x": (40, 8),
    "hidden_global_offset_y": (48, 8),
    "hidden_global_offset_z": (56, 8),
    "hidden_grid_dims": (64, 2),
}


def geometry_value(
    source: str,
    axis: int,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    dims: int,
    dynamic_lds: int = 0,
) -> int:
    """The value of one geometry hidden argument (see the module doc)."""
    if source == "block_count":
        return grid[axis] // block[axis]
    if source == "group_size":
        return block[axis]
    if source == "remainder":
        return grid[axis] % block[axis]
    if source == "grid_dims":
        return dims
    if source == "dynamic_lds":
        return dynamic_lds
    return 0  # global offsets


def hidden_value(
    kind: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    dims: int,
    dynamic_lds: int = 0,
) -> int | None:
    """The value of hidden argument `kind`, or None for a kind not computed from the
    dispatch's shape (pointers: queue, printf, hostcall, ...)."""
    entry = GEOMETRY_KINDS.get(kind)
    if entry is None:
        return None
    return geometry_value(entry[0], entry[1], grid, block, dims, dynamic_lds)
