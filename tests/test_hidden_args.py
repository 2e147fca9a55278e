"""Hidden kernel arguments against their definitions, for partial work-groups.

The definitions are LLVM's AMDGPUUsage (code object v5 hidden arguments) as AMD's device
libraries read them (ockl, ABI 5): get_num_groups = hidden_block_count +
(hidden_remainder > 0), get_global_size = block_count * group_size + remainder, the local
size of group i = group_size if i < block_count else remainder. One implementation
(hsa.abi.hidden_args) serves the driver and the virtual GPU's test harness; both are
checked here against those formulas and against each other, on metadata hipcc wrote.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from amdgpu.hsa_backend.kernargs import KernargLayout
from hsa.abi.codeobject import read_code_object, read_offload_bundle
from hsa.abi.hidden_args import V5_LAYOUT, hidden_value
from hsa.virtual.gfx11.testing import build_kernargs

FIXTURE = "tests/data/codeobjects/hipcc_builtins.hsaco"  # hipcc, code object v5 (README)
SHAPES = [  # (grid in work-items, block): partial last groups on every axis
    ((1000, 1, 1), (256, 1, 1)),
    ((256, 1, 1), (256, 1, 1)),
    ((1, 1, 1), (64, 1, 1)),
    ((33, 7, 3), (16, 4, 2)),
    ((64, 65, 1), (8, 8, 1)),
    ((4097, 3, 5), (1024, 1, 1)),
]


def _ockl(grid, block, dims):
    """What the device libraries compute from the hidden args, per axis."""
    out = []
    for name in "xyz":
        bc = hidden_value(f"hidden_block_count_{name}", grid, block, dims)
        gs = hidden_value(f"hidden_group_size_{name}", grid, block, dims)
        rem = hidden_value(f"hidden_remainder_{name}", grid, block, dims)
        num_groups = bc + (rem > 0)
        global_size = bc * gs + rem
        local_sizes = [gs if i < bc else rem for i in range(num_groups)]
        out.append((num_groups, global_size, local_sizes))
    return out


@pytest.mark.parametrize("grid,block", SHAPES)
def test_device_libraries_get_the_dispatch_back(grid, block):
    for axis, (num_groups, global_size, local_sizes) in enumerate(_ockl(grid, block, 3)):
        assert num_groups == math.ceil(grid[axis] / block[axis])
        assert global_size == grid[axis]
        assert sum(local_sizes) == grid[axis]  # every work-item once, the last group partial
        assert all(0 < s <= block[axis] for s in local_sizes)


def test_block_count_is_the_floor_not_the_ceiling():
    grid, block = (1000, 1, 1), (256, 1, 1)
    assert hidden_value("hidden_block_count_x", grid, block, 1) == 3  # 3 full groups
    assert hidden_value("hidden_remainder_x", grid, block, 1) == 232  # + one of 232
    assert hidden_value("hidden_grid_dims", grid, block, 1) == 1
    assert hidden_value("hidden_queue_ptr", grid, block, 1) is None  # not a geometry value


@pytest.fixture(scope="module")
def hipcc_kernel():
    bundle = read_offload_bundle(open(FIXTURE, "rb").read())
    (key,) = [k for k in bundle if k.endswith("gfx90a")]
    return read_code_object(bundle[key]).kernels["hip_saxpy"]


def test_the_v5_layout_is_what_hipcc_emits(hipcc_kernel):
    hidden = {a.value_kind: (a.offset, a.size) for a in hipcc_kernel.hidden_args}
    base = hidden["hidden_block_count_x"][0]
    checked = 0
    for kind, (offset, size) in V5_LAYOUT.items():
        if kind in hidden:
            assert (hidden[kind][0] - base, hidden[kind][1]) == (offset, size), kind
            checked += 1
    assert checked >= 9  # block counts, group sizes, remainders at least


@pytest.mark.parametrize("grid,block", SHAPES)
def test_driver_and_harness_write_the_same_hidden_bytes(hipcc_kernel, grid, block):
    dims = 1 if grid[1:] == (1, 1) and block[1:] == (1, 1) else 3
    layout = KernargLayout.from_kernel(hipcc_kernel)
    driver = layout.hidden_bytes(grid, block, dims)
    args = [0] * len(hipcc_kernel.explicit_args)
    harness = build_kernargs(hipcc_kernel, args, grid, block, dims)
    start = layout.hidden_start
    for a in hipcc_kernel.hidden_args:
        if hidden_value(a.value_kind, grid, block, dims) is None:
            continue
        lo, hi = a.offset - start, a.offset - start + a.size
        assert driver[lo:hi] == harness[a.offset : a.offset + a.size], a.value_kind
        want = hidden_value(a.value_kind, grid, block, dims)
        assert int.from_bytes(driver[lo:hi], "little") == want, a.value_kind


def test_every_axis_combination_round_trips():
    rng = np.random.default_rng(5)
    for _ in range(200):
        block = tuple(int(x) for x in rng.integers(1, 33, 3))
        grid = tuple(int(b * rng.integers(0, 5) + rng.integers(1, b + 1)) for b in block)
        for axis, (ng, gsize, ls) in enumerate(_ockl(grid, block, 3)):
            assert (ng, gsize, sum(ls)) == (-(-grid[axis] // block[axis]), grid[axis], grid[axis])
    assert list(itertools.islice(V5_LAYOUT, 3)) == [
        "hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z",
    ]
