"""The Vulkan SPIR-V target comes from the device's own features: an i8 program that the
lowest-common "portable" target (32-bit storage only) cannot compile builds for a device
with 8-bit storage and Int8, and each dispatch ABI is built and kept on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

import compiler.iree as iree
from amdgpu.errors import CompileError

I8 = Path(__file__).parent / "data" / "iree" / "i8_add.mlir"


def test_target_names_only_features_that_change_the_target():
    got = iree.vulkan_target_for({"storageBuffer8BitAccess", "shaderInt8", "timelineSemaphore"})
    assert got == "features:shaderInt8,storageBuffer8BitAccess"
    flags = iree.vulkan_device_flags("descriptors", got)[0]
    assert "compute = fp32|fp16|int32|int8" in flags and "storage = b32|b8" in flags
    with pytest.raises(CompileError, match="unknown Vulkan features"):
        iree.vulkan_device_flags("descriptors", "features:shaderWarp9")


def test_i8_uses_the_device_features():
    """The portable target emulates i8 over 32-bit storage; the device target stores bytes."""
    (portable,) = iree.compile_mlir(I8, vulkan_abis=["descriptors"]).variants
    assert "StorageBuffer8BitAccess" not in portable.info["capabilities"]
    target = iree.vulkan_target_for({"shaderInt8", "storageBuffer8BitAccess"})
    result = iree.compile_mlir(I8, vulkan_abis=["descriptors"], vulkan_target=target)
    (variant,) = result.variants
    assert {"Int8", "StorageBuffer8BitAccess"} <= set(variant.info["capabilities"])


def test_a_program_that_cannot_compile_gets_one_line():
    target = iree.vulkan_target_for(set())
    bad = I8.with_name("i8_add.mlir").read_text().replace("arith.addi", "arith.addf")
    path = Path(__import__("tempfile").mkdtemp()) / "bad.mlir"
    path.write_text(bad)
    with pytest.raises(CompileError) as info:
        iree.compile_mlir(path, vulkan_abis=["descriptors"], vulkan_target=target)
    message = str(info.value)
    assert "\n" not in message and message.startswith("iree-compile (vulkan descriptors):")
    assert "error" in message


def test_each_abi_is_kept_on_its_own(monkeypatch):
    real = iree._run_iree

    def failing_bda(source, flags, label, extra):
        if label == "vulkan bda":
            raise CompileError("iree-compile (vulkan bda): error: no Int64 here")
        return real(source, flags, label, extra)

    monkeypatch.setattr(iree, "_run_iree", failing_bda)
    target = iree.vulkan_target_for({"shaderInt8", "storageBuffer8BitAccess"})
    result = iree.compile_mlir(I8, vulkan_abis=["descriptors", "bda"], vulkan_target=target)
    assert [v.abi for v in result.variants] == ["descriptors"]
    with pytest.raises(CompileError, match="no Int64 here"):
        iree.compile_mlir(I8, vulkan_abis=["bda"], vulkan_target=target)


@pytest.mark.vulkan
def test_i8_runs_on_vulkan_with_its_features(capsys):
    import json

    from amdgpu import vulkan
    from amdgpu.cli import main

    if not any(r.available for r in vulkan.list_devices()):
        pytest.skip("no Vulkan device (lavapipe) here")
    rc = main([str(I8), "--device", "vulkan", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and json.loads(out[-1])["correct"] is True, out
