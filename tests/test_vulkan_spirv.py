"""The Vulkan backend's SPIR-V reader: interface facts read from the words (no device)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolchains import require_iree

from amdgpu.errors import VulkanError
from amdgpu.vulkan.command_buffer import to_u32
from compiler.spirv import (
    SC_PHYSICAL_STORAGE_BUFFER,
    SC_PUSH_CONSTANT,
    SC_STORAGE_BUFFER,
    reflect,
)

pytestmark = pytest.mark.generic


def _op(opcode: int, *operands: int) -> list[int]:
    return [((len(operands) + 1) << 16) | opcode, *operands]


def _name(text: str) -> list[int]:
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return list(np.frombuffer(raw, "<u4"))


def _module(*, bda: bool) -> bytes:
    """A compute module: two storage buffers in set 0 (or a PSB table), 3 push words."""
    words = [0x07230203, 0x00010000, 0, 40, 0]
    words += _op(17, 1)  # OpCapability Shader
    words += _op(14, 0, 1)  # OpMemoryModel Logical GLSL450
    words += _op(15, 5, 1, *_name("main"))  # OpEntryPoint GLCompute %1 "main"
    words += _op(16, 1, 17, 64, 2, 1)  # OpExecutionMode %1 LocalSize 64 2 1
    words += _op(72, 10, 0, 35, 0)  # OpMemberDecorate %10 0 Offset 0
    words += _op(71, 20, 34, 0) + _op(71, 20, 33, 0)  # %20: set 0, binding 0
    words += _op(71, 21, 34, 0) + _op(71, 21, 33, 1) + _op(71, 21, 24)  # binding 1, NonWritable
    words += _op(21, 2, 32, 0)  # %2 = OpTypeInt 32 0
    words += _op(43, 2, 3, 3)  # %3 = OpConstant %2 3
    words += _op(28, 4, 2, 3)  # %4 = OpTypeArray %2 %3  (3 x u32)
    words += _op(71, 4, 6, 4)  # ArrayStride 4
    words += _op(30, 10, 4)  # %10 = OpTypeStruct %4
    words += _op(32, 11, SC_PUSH_CONSTANT, 10)  # %11 = OpTypePointer PushConstant %10
    words += _op(59, 11, 12, SC_PUSH_CONSTANT)  # %12 = OpVariable
    words += _op(29, 5, 2)  # %5 = runtime array of u32
    words += _op(30, 6, 5)  # %6 = struct { u32[] }
    words += _op(32, 7, SC_STORAGE_BUFFER, 6)
    if bda:
        words += _op(32, 8, SC_PHYSICAL_STORAGE_BUFFER, 2)  # PSB pointer to u32
        words += _op(30, 9, 8, 8, 8)  # struct of three PSB pointers: the binding table
    else:
        words += _op(59, 7, 20, SC_STORAGE_BUFFER) + _op(59, 7, 21, SC_STORAGE_BUFFER)
    return np.array(words, "<u4").tobytes()


def test_descriptor_module_interface():
    info = reflect(_module(bda=False))
    entry = info.entries["main"]
    assert entry.local_size == (64, 2, 1)
    assert [(b.set, b.binding, b.readonly) for b in entry.bindings] == [(0, 0, False), (0, 1, True)]
    assert entry.push_constant_size == 12
    assert not info.uses_physical_storage_buffer and info.bda_table_entries == 0


def test_bda_module_interface():
    info = reflect(_module(bda=True))
    assert info.uses_physical_storage_buffer
    assert info.bda_table_entries == 3
    assert info.entries["main"].bindings == []


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "too short"),
        (b"\x00" * 21, "multiple of 4"),
        (b"\x01\x02\x03\x04" * 8, "magic"),
    ],
)
def test_not_spirv(data, message):
    with pytest.raises(VulkanError, match=message):
        reflect(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=40))
def test_garbage_after_header_raises_only_vulkan_error(body):
    data = np.array([0x07230203, 0x00010000, 0, 64, 0, *body], "<u4").tobytes()
    try:
        reflect(data)
    except VulkanError as error:  # anything else (IndexError, struct.error...) fails
        assert "\n" not in str(error) and str(error)


@pytest.mark.parametrize(
    "value, bits",
    [
        (1, 1),
        (-1, 0xFFFFFFFF),
        (np.float32(1.0), 0x3F800000),
        (2.0, 0x40000000),
        (np.int32(-2), 0xFFFFFFFE),
        (np.uint32(7), 7),
        (True, 1),
    ],
)
def test_constants_become_u32_bits(value, bits):
    assert to_u32(value) == bits


def test_iree_modules_read_as_the_abis_say(tmp_path):
    """compiler.spirv (the one reader) on IREE output, against what the two ABIs promise
    for saxpy's four buffers: descriptors = bindings (0, 0)..(0, 3), no push constants;
    bda = no bindings, 8 push-constant words, a table of four pointers. Both views of the
    reader (reflect for Vulkan, read_spirv for the compiler) must say the same."""
    iree = pytest.importorskip("compiler.iree", reason="compiler.iree not available")
    import os

    from compiler import spirv

    src = os.path.join(os.path.dirname(iree.__file__), "kernels", "saxpy.mlir")
    require_iree()  # skips only when IREE is absent; a failed compile fails
    result = iree.compile_mlir(src, vulkan_abis=("descriptors", "bda"))
    for variant in result.variants:
        for module in spirv.split_modules(variant.data, variant.info["modules"]):
            theirs = spirv.read_spirv(module)
            mine = reflect(module)
            assert set(mine.entries) == set(theirs.entry_points)
            for name, ep in theirs.entry_points.items():
                entry = mine.entries[name]
                assert entry.local_size == tuple(ep.workgroup_size)
                assert [(b.set, b.binding) for b in entry.bindings] == list(ep.bindings)
                assert entry.push_constant_size == 4 * ep.push_constant_words
                if variant.abi == "descriptors":
                    assert ep.bindings == [(0, 0), (0, 1), (0, 2), (0, 3)]
                else:
                    assert ep.bindings == [] and ep.push_constant_words == 8
            if variant.abi == "bda":
                assert mine.uses_physical_storage_buffer
                assert mine.bda_table_entries == 4
                assert "PhysicalStorageBufferAddresses" in theirs.capabilities
                assert theirs.addressing_model == "PhysicalStorageBuffer64"


def test_no_device_message_lists_devices_and_missing_features():
    from amdgpu.vulkan.device import _no_device_message
    from amdgpu.vulkan.instance import PhysicalDevice

    old = PhysicalDevice(
        index=0,
        handle=None,
        name="OldGPU",
        api_version=(1, 2, 190),
        driver="x",
        features={"timelineSemaphore": True},
        extensions=set(),
        max_push_descriptors=0,
        max_push_constants=128,
        min_storage_offset_alignment=16,
        update_after_bind=False,
        compute_family=0,
        compute_queue_count=1,
        missing=["Vulkan 1.3 (has 1.2.190)", "scalarBlockLayout", "synchronization2"],
    )
    text = _no_device_message([old], 0)
    assert "vulkan:0 OldGPU (Vulkan 1.2.190, missing Vulkan 1.3 (has 1.2.190), " in text
    assert "synchronization2" in text and "\n" not in text
    report = old.report()
    assert not report.available and "scalarBlockLayout" in report.reason
    assert report.paths["push_descriptors"].reason == "VK_KHR_push_descriptor not supported"
    assert "no Vulkan device found" in _no_device_message([], 0)
