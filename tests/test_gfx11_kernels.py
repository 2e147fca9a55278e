"""clang-compiled OpenCL kernels on the gfx11 executor, against numpy.

The kernel suite itself is tests/kernel_checks.py (tests/test_gfx9_kernels.py runs the same
checks on the gfx9 targets); this module runs it on gfx1100 and adds gfx11's own cases."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_checks import (  # noqa: F401 - the shared kernel tests, collected here
    test_2d_grid,
    test_3d_grid_packs_workitem_ids,
    test_calls_stack_and_generic_pointers,
    test_copy_with_partial_workgroups,
    test_double_division_and_clamps,
    test_empty_grid_runs_nothing,
    test_fill,
    test_flat_access_mixing_apertures,
    test_float_ops,
    test_integer_ops_bit_exact,
    test_lds_address_wraps_at_32_bits,
    test_lds_reduction_with_barriers,
    test_math_library_expansions,
    test_out_of_bounds_write_faults_with_kernel_pc_and_address,
    test_saxpy,
    test_trap_is_a_queue_exception,
    test_workgroups_run_in_batches,
)

from amdgpu.errors import IllegalInstruction
from hsa.status import HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION
from hsa.virtual.executor import executor_for
from hsa.virtual.gfx11.testing import (
    ILLEGAL_KERNEL_S,
    TEST_KERNELS_CL,
    Harness,
    build_code_object,
)

pytestmark = pytest.mark.isa_gfx11

@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness()


@pytest.fixture(scope="module")
def code(harness):
    return harness.load(build_code_object(TEST_KERNELS_CL, "cl"))


def test_registered_as_gfx11():
    ex = executor_for("gfx11")
    assert ex is not None and ex.family == "gfx11"


def test_unsupported_instruction_is_illegal(harness):
    bad = harness.load(build_code_object(ILLEGAL_KERNEL_S, "assembler"))
    with pytest.raises(IllegalInstruction) as info:
        harness.dispatch(bad, "illegal", (32,), (32,), [])
    e = info.value
    assert e.status == HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION
    assert "v_mullit_f32 (VOP3)" in str(e) and "kernel illegal" in str(e)
    entry = bad.kernel("illegal").descriptor.kernel_code_entry_byte_offset
    offset = bad.kernel_object("illegal") - bad.base + entry + 4  # the second instruction
    assert f"at code-object offset 0x{offset:x} (v_mullit_f32)" in str(e)


def test_dispatch_ptr_sgprs_point_at_the_packet(harness):
    """A kernel that reads its own AQL packet through the dispatch ptr SGPRs."""
    src = r"""
    __kernel void grid_from_packet(__global unsigned int *out) {
      const __constant unsigned short *p =
          (const __constant unsigned short *)__builtin_amdgcn_dispatch_ptr();
      const __constant unsigned int *q = (const __constant unsigned int *)p;
      if (__builtin_amdgcn_workitem_id_x() == 0 && __builtin_amdgcn_workgroup_id_x() == 0) {
        out[0] = p[2]; out[1] = q[3]; out[2] = q[6]; out[3] = q[7];
      }
    }
    """
    code = harness.load(build_code_object(src, "cl"))
    out = harness.alloc(16)
    harness.dispatch(code, "grid_from_packet", (96,), (32,), [out], group_segment_size=256,
                     private_segment_size=16)
    assert list(harness.read(out, np.uint32, 4)) == [32, 96, 16, 256]
