"""clang-compiled OpenCL kernels on the gfx9 (CDNA, wave64) executor, against numpy.

The kernels and checks are gfx11's (tests/kernel_checks.py, which tests/test_gfx11_kernels.py
runs on gfx1100), compiled for gfx90a, gfx942 and gfx950 and run in wave64: the same source
must give the same answers on every family the core serves."""

from __future__ import annotations

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


@pytest.mark.hsa_virtual
@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("version", [4, 5])
def test_saxpy_hidden_grid_stride_in_every_code_object_version(target, version):
    """The kernel library's saxpy_hidden strides by get_local_size * get_num_groups. Built as
    code object v4 it used to read v5 hidden-argument offsets (v4 has global offsets there):
    stride 0, a loop that never ends. Now v4 takes the sizes from the dispatch packet."""
    import numpy as np
    from codeobjects import load_kernel

    import amdgpu
    from compiler import clang, library
    from hsa.abi.codeobject import read_code_object

    data = clang.compile_opencl(library.path("saxpy_hidden"), target,
                                code_object_version=version)
    assert read_code_object(data).code_object_version == version
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    try:
        kernel = load_kernel(dev, data, "saxpy_hidden")
        n = 3000  # grid 768 (3 groups of 256): four strides, the last one partial
        x = np.arange(n, dtype=np.float32)
        y = dev.buffer(np.ones(n, np.float32))
        dev.dispatch(kernel, 768, 256, (y, dev.buffer(x), np.float32(2), np.uint32(n))).wait(60)
        np.testing.assert_array_equal(y.to_numpy(np.float32), 2 * x + 1)
    finally:
        dev.close()


@pytest.mark.hsa_virtual
def test_overlap_reverse_on_cdna_agents(monkeypatch):
    """AMDGPU_VIRTUAL_OVERLAP=reverse on two gfx942 agents: dispatches recorded without a
    barrier run last-first, so the consumer reads stale data; with the barrier it is right."""
    from kernel_checks import missing_barrier_case

    import amdgpu
    import compiler

    monkeypatch.setenv("AMDGPU_VIRTUAL_OVERLAP", "reverse")
    code = {name: compiler.compile(name, targets=["gfx942"]) for name in ("fill", "copy")}
    with amdgpu.open("amdgpu:virtual:gfx942,gfx942") as dev:
        assert dev.provider.overlap == "reverse"
        missing_barrier_case(dev, code)


def test_unsupported_instruction_names_its_code_object_offset(harness):
    """An instruction the gfx9 semantics refuse (here a sparse MFMA whose abid names index
    set 4: a VGPR holds 4 sets of 8-bit indices for 16-bit data, and the ISA guide says
    nothing of others) is one queue error naming the kernel, the mnemonic and its offset
    in the code object, not a host address."""
    from amdgpu.errors import IllegalInstruction
    from hsa.virtual.gfx11.testing import ILLEGAL_KERNEL_S

    src = (ILLEGAL_KERNEL_S.replace("gfx1100", harness.target)
           .replace("  v_mullit_f32 v0, v1, v1, v1\n",
                    "  v_smfmac_f32_16x16x32_f16 v[4:7], v[0:1], v[8:11], v2 abid:4\n")
           .replace("  .amdhsa_wavefront_size32 1\n", "  .amdhsa_accum_offset 8\n")
           .replace(".amdhsa_next_free_vgpr 8", ".amdhsa_next_free_vgpr 16")
           .replace(".wavefront_size: 32", ".wavefront_size: 64"))
    if harness.target == "gfx90a":
        pytest.skip("gfx90a has no sparse MFMA")
    bad = harness.load(build_code_object(src, "assembler", mcpu=harness.target))
    with pytest.raises(IllegalInstruction) as info:
        harness.dispatch(bad, "illegal", (64,), (64,), [])
    text = str(info.value)
    entry = bad.kernel("illegal").descriptor.kernel_code_entry_byte_offset
    offset = bad.kernel_object("illegal") - bad.base + entry + 4  # the second instruction
    assert f"at code-object offset 0x{offset:x} (v_smfmac_f32_16x16x32_f16)" in text
    assert "kernel illegal" in text and f"0x{bad.base + offset:x}" not in text
