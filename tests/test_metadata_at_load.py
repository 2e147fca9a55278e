"""Kernel metadata is validated when a code object is read, so `dev.load` refuses an
inconsistent one with one line (issue 35): before, a damaged hidden-argument size loaded
and a dispatch raised struct.error from KernargLayout.hidden_bytes.

Each case damages clang's own `fill` object (compiler/kernels/fill.cl, code object v5) in
its NT_AMDGPU_METADATA note: the msgpack is decoded, one field changed, re-encoded to the
same length and put back in place, so the ELF stays intact and only the metadata lies. The
value kinds accepted are LLVM's (AMDGPUMetadataVerifier.cpp); the v5 implicit-argument
offsets are AMDGPUUsage's table. Every real compiler output in tests/data still reads
(tests/test_codeobject_validation.py)."""

from __future__ import annotations

import copy
import re

import msgpack
import numpy as np
import pytest

import amdgpu
from amdgpu.errors import CodeObjectError
from hsa.abi.codeobject import read_code_object

TARGET = "gfx1100"


@pytest.fixture(scope="module")
def fill_object() -> bytes:
    import compiler

    return compiler.compile("fill", targets=[TARGET]).variant_for(TARGET).data


def damaged(data: bytes, edit) -> bytes:
    meta = read_code_object(data).metadata
    blob = msgpack.packb(meta, use_bin_type=True)
    assert data.count(blob) == 1, "the note's msgpack is not canonical: cannot patch in place"
    changed = copy.deepcopy(meta)
    edit(changed["amdhsa.kernels"][0])
    new = msgpack.packb(changed, use_bin_type=True)
    assert len(new) == len(blob), "a damage case must keep the note's length"
    at = data.find(blob)
    return data[:at] + new + data[at + len(blob):]


def set_arg(index: int, key: str, value):
    def edit(kernel: dict) -> None:
        kernel[".args"][index][key] = value
    return edit


def set_kernel(key: str, value):
    def edit(kernel: dict) -> None:
        kernel[key] = value
    return edit


# fill's args: 0 float* out @0 (8), 1 float value @8 (4), 2 uint n @12 (4), then the v5
# hidden block at 16: block_count_x @16 (arg 3), group_size_x @28 (arg 6), grid_dims @80
# (the last, arg 15).
CASES = {
    # the case: loaded, then struct.error at dispatch
    "hidden size 3": (set_arg(3, ".size", 3), "hidden_block_count_x argument is 4 bytes"),
    "hidden size 16": (set_arg(3, ".size", 16), "hidden_block_count_x argument is 4 bytes"),
    "pointer size 4": (set_arg(0, ".size", 4), "global_buffer argument is 8 bytes"),
    "float of 3 bytes": (set_arg(1, ".size", 3), "its type 'float' is 4 bytes"),
    "float of 0 bytes": (set_arg(1, ".size", 0), "its type 'float' is 4 bytes"),
    "overlapping explicit args": (set_arg(2, ".offset", 10), "overlaps arg 1"),
    "misaligned hidden arg": (set_arg(6, ".offset", 29), "not aligned to its size"),
    "hidden arg moved in its block": (set_arg(15, ".offset", 82), "is not at +64"),
    "explicit arg after the hidden block": (set_arg(2, ".offset", 96),
                                            "lies before the end of the explicit"),
    "unknown kind": (set_arg(1, ".value_kind", "by_valuX"), "unknown .value_kind"),
    "segment align 3": (set_kernel(".kernarg_segment_align", 3), "is not a power of two"),
}


@pytest.mark.parametrize("case", CASES)
def test_inconsistent_metadata_is_refused_by_the_reader(fill_object, case):
    edit, why = CASES[case]
    with pytest.raises(CodeObjectError) as info:
        read_code_object(damaged(fill_object, edit))
    text = str(info.value)
    assert why in text and "kernel 'fill'" in text and "\n" not in text, text


@pytest.mark.hsa_virtual
@pytest.mark.parametrize("case", ["hidden size 3", "float of 3 bytes",
                                  "hidden arg moved in its block"])
def test_dev_load_refuses_it_in_one_line_and_keeps_nothing(fill_object, case):
    edit, why = CASES[case]
    dev = amdgpu.open("amdgpu:virtual")
    try:
        executables = len(dev.provider._loader._executables)
        with pytest.raises(CodeObjectError, match=re.escape(why)):
            dev.load(damaged(fill_object, edit))
        assert len(dev.provider._loader._executables) == executables
        fill = dev.load(fill_object).kernel("fill")  # the intact object still runs
        out = dev.buffer(256)
        dev.dispatch(fill, 64, 64, (out, np.float32(2), 64)).wait(30)
        assert (out.to_numpy(np.float32) == 2).all()
    finally:
        dev.close()


def test_an_argument_past_the_segment_is_refused(fill_object):
    """.kernarg_segment_size 272 -> 64, written as a (valid, non-canonical) msgpack uint16
    so the note keeps its length: the hidden args at 64..82 end past it."""
    key = b"\xb5.kernarg_segment_size"  # fixstr of 21 bytes
    assert fill_object.count(key + b"\xcd\x01\x10") == 1
    data = fill_object.replace(key + b"\xcd\x01\x10", key + b"\xcd\x00\x40")
    with pytest.raises(CodeObjectError, match="ends past .kernarg_segment_size 64"):
        read_code_object(data)


def test_the_intact_object_and_same_length_rewrites_read(fill_object):
    """The patching itself changes nothing: the same metadata re-encoded reads, and the
    hidden block moved as a whole (all of it 8 bytes later, still after the explicit
    args) is a consistent layout."""
    assert damaged(fill_object, lambda k: None) == fill_object
    co = read_code_object(damaged(fill_object, lambda k: None))
    assert [a.offset for a in co.kernels["fill"].args][:4] == [0, 8, 12, 16]
