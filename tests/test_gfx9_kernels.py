"""clang-compiled OpenCL kernels on the gfx9 (CDNA, wave64) executor, against numpy.

The kernels and checks are gfx11's (tests/test_gfx11_kernels.py), compiled for gfx90a,
gfx942 and gfx950 and run in wave64: the same source must give the same answers on every
family the core serves."""

from __future__ import annotations

import pytest

import tests.test_gfx11_kernels as gfx11_tests
from hsa.virtual.executor import executor_for
from hsa.virtual.gfx11.testing import TEST_KERNELS_CL, Harness, build_code_object

pytestmark = pytest.mark.isa_gfx9

TARGETS = ["gfx90a", "gfx942", "gfx950"]


@pytest.fixture(scope="module", params=TARGETS)
def harness(request) -> Harness:
    return Harness(request.param)


@pytest.fixture(scope="module")
def code(harness):
    return harness.load(build_code_object(TEST_KERNELS_CL, "cl", mcpu=harness.target))


def test_registered_as_gfx9():
    ex = executor_for("gfx9")
    assert ex is not None and ex.family == "gfx9"


# gfx11's kernel tests, run on the fixtures above
for _name in ("test_fill", "test_copy_with_partial_workgroups", "test_saxpy",
              "test_lds_reduction_with_barriers", "test_2d_grid",
              "test_3d_grid_packs_workitem_ids", "test_integer_ops_bit_exact",
              "test_float_ops", "test_math_library_expansions",
              "test_double_division_and_clamps", "test_calls_stack_and_generic_pointers",
              "test_workgroups_run_in_batches", "test_empty_grid_runs_nothing",
              "test_flat_access_mixing_apertures",
              "test_out_of_bounds_write_faults_with_kernel_pc_and_address",
              "test_trap_is_a_queue_exception"):
    globals()[_name] = getattr(gfx11_tests, _name)
