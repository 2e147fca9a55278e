"""amdgpu/hsa_backend/command_patching.py: the bits a parameter site stores, against numpy's
own conversions (float bits by dtype views, two's complement by astype), and the hidden
block count and remainder against the code-object ABI's definition (hidden_block_count:
whole workgroups, grid // block; hidden_remainder: grid % block)."""

from __future__ import annotations

import numpy as np
import pytest

from amdgpu.errors import KernelArgumentError
from amdgpu.hsa_backend.command_patching import derive
from hsa.abi.hidden_args import geometry_value


def _key(op, operand=0, code="I"):
    return ("p", op, operand, code, "k", "arg")


@pytest.mark.parametrize("code,dtype,bits", [("e", np.float16, np.uint16),
                                             ("f", np.float32, np.uint32),
                                             ("d", np.float64, np.uint64)])
def test_float_slots_store_the_ieee_bits(code, dtype, bits):
    for v in (0.0, -1.5, 3.14159, 65504.0 if code == "e" else 1e30):
        want = int(np.array([v], dtype).view(bits)[0])
        assert derive(_key("arg", code=code), {"p": v}) == want


@pytest.mark.parametrize("code,dtype", [("B", np.uint8), ("H", np.uint16), ("I", np.uint32),
                                        ("Q", np.uint64), ("b", np.int8), ("i", np.int32)])
def test_integer_slots_wrap_negative_values_as_twos_complement(code, dtype):
    size = np.dtype(dtype).itemsize
    unsigned = np.dtype(f"u{size}")
    for v in (0, 1, -1, 100, -100):
        want = int(np.array([v]).astype(np.int64).astype(unsigned)[0])
        assert derive(_key("arg", code=code), {"p": v}) == want


def test_block_count_and_remainder_of_an_axis():
    # a replay's parameter grid gives the same hidden values as an immediate dispatch's
    # kernarg fill (hsa.abi.hidden_args.geometry_value) and as the ABI's floor definition
    for grid in (1, 63, 64, 65, 1000, 2**20 + 3):
        for block in (1, 32, 64, 256):
            g, b = (1, grid, 1), (1, block, 1)  # axis y
            count = geometry_value("block_count", 1, g, b, 2)
            rest = geometry_value("remainder", 1, g, b, 2)
            assert (count, rest) == (grid // block, grid % block)
            assert derive(_key("div", block), {"p": grid}) == count
            assert derive(_key("mod", block), {"p": grid}) == rest


def test_out_of_range_values_are_one_line_errors():
    with pytest.raises(KernelArgumentError, match="grid axis counts 1.."):
        derive(_key("grid"), {"p": 0})
    with pytest.raises(KernelArgumentError, match=r"does not fit .*\(1 bytes\)"):
        derive(_key("arg", code="B"), {"p": 300})
    assert derive(_key("grid"), {"p": 4096}) == 4096
