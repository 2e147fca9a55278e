"""gfx11 and gfx12 kernels in wave64 mode (clang -mwavefrontsize64), against numpy.

RDNA runs wave32 or wave64, as each kernel descriptor says (kernel_code_properties bit 10).
ROCr's own blit kernels (fill and the copies: hsa_amd_memory_fill, the unaligned copies) are
wave64 on every gfx10+ target (its blit_shaders/*.s use 64-bit exec and VCC), so ROCr 6.4 on
an emulated gfx1100 or gfx1201 needs the mode (tests/test_rocm6_suites.py). The kernels and
checks are the shared ones of tests/kernel_checks.py: the same answers as in wave32.
"""

from __future__ import annotations

import pytest
from kernel_checks import (  # noqa: F401 - the shared kernel tests, collected here
    test_2d_grid,
    test_copy_with_partial_workgroups,
    test_fill,
    test_integer_ops_bit_exact,
    test_lds_reduction_with_barriers,
    test_saxpy,
    test_workgroups_run_in_batches,
)

from hsa.virtual.gfx11.testing import TEST_KERNELS_CL, Harness, build_code_object

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.slow]


@pytest.fixture(scope="module", params=["gfx1100", "gfx1201"])
def harness(request) -> Harness:
    return Harness(request.param)


@pytest.fixture(scope="module")
def code(harness):
    data = build_code_object(TEST_KERNELS_CL, "cl", mcpu=harness.target, wave64=True)
    from hsa.abi.codeobject import read_code_object

    kernels = read_code_object(data).kernels
    # the compiler did build wave64 descriptors (bit 10 clear): else this tests wave32 again
    assert kernels and all(k.wavefront_size == 64 for k in kernels.values()), kernels
    return harness.load(data)
