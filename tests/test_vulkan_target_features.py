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


def test_a_cached_abi_survives_the_other_failing_again(monkeypatch, tmp_path):
    """One ABI cached, the other failing again (i1 in packed storage: IREE cannot lower its
    atomics over buffer device addresses): the cached one is the bundle, no error."""
    import compiler

    real = iree._run_iree
    calls = []

    def failing_bda(source, flags, label, extra):
        calls.append(label)
        if label == "vulkan bda":
            raise CompileError("iree-compile (vulkan bda): error: no atomics here")
        return real(source, flags, label, extra)

    monkeypatch.setattr(iree, "_run_iree", failing_bda)
    target = iree.vulkan_target_for({"shaderInt8", "storageBuffer8BitAccess"})
    for _ in range(2):
        bundle = compiler.compile(I8, targets=["vulkan"], vulkan_target=target, cache=tmp_path)
        assert [v.abi for v in bundle.variants] == ["descriptors"]
    assert calls == ["vulkan descriptors", "vulkan bda", "vulkan bda"]
    with pytest.raises(CompileError, match="no atomics here"):
        compiler.compile(I8, targets=["vulkan"], abi=("bda",), vulkan_target=target,
                         cache=tmp_path)


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


# --- subgroup operations, pack/unpack, i1 (issue 15) -------------------------------------
LAVAPIPE_OPS = ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "quad")
DATA = I8.parent


def _vulkan_device():
    from amdgpu import vulkan

    if not any(r.available for r in vulkan.list_devices()):
        pytest.skip("no Vulkan device (lavapipe) here")
    import amdgpu

    return amdgpu.open("vulkan")


def test_subgroup_operations_enter_the_target():
    got = iree.vulkan_target_for({"shaderInt8"}, 8, LAVAPIPE_OPS)
    assert got == "features:shaderInt8,subgroup=8:shuffle|arithmetic"
    flags = iree.vulkan_device_flags("descriptors", got)[0]
    assert "subgroup = shuffle|arithmetic, subgroup_size_choices = [8]" in flags
    # IREE's shuffle needs shuffle_relative too; nothing without basic; nothing at size 0
    assert iree.vulkan_target_for((), 32, ("basic", "shuffle", "arithmetic")) == (
        "features:subgroup=32:arithmetic")
    assert iree.vulkan_target_for((), 32, ("shuffle", "arithmetic")) == "features:"
    assert iree.vulkan_target_for((), 0, LAVAPIPE_OPS) == "features:"
    plain = iree.vulkan_device_flags("descriptors", "features:")[0]
    assert "subgroup = none" in plain
    for bad in ("features:subgroup=0:shuffle", "features:subgroup=8:", "features:subgroup=8:warp"):
        with pytest.raises(CompileError, match="bad subgroup entry") as info:
            iree.vulkan_device_flags("descriptors", bad)
        assert "\n" not in str(info.value)


def test_subgroup_reduction_uses_group_operations():
    target = iree.vulkan_target_for((), 8, LAVAPIPE_OPS)
    (variant,) = iree.compile_mlir(DATA / "subgroup_reduce.mlir", vulkan_abis=["descriptors"],
                                   vulkan_target=target).variants
    assert "GroupNonUniformArithmetic" in variant.info["capabilities"]
    (plain,) = iree.compile_mlir(DATA / "subgroup_reduce.mlir", vulkan_abis=["descriptors"],
                                 vulkan_target="features:").variants
    assert not any(c.startswith("GroupNonUniform") for c in plain.info["capabilities"])


def test_pack_and_unpack_compile_for_vulkan():
    """IREE's SPIR-V code generation alone fails on linalg.pack ("failed to tile to
    invocations"); the Vulkan target decomposes pack/unpack before dispatches form."""
    result = iree.compile_mlir(DATA / "pack_pad.mlir", vulkan_abis=["descriptors"],
                               vulkan_target="features:")
    assert result.variants and result.program["dispatches"]


@pytest.mark.vulkan
def test_device_reports_its_subgroups():
    dev = _vulkan_device()
    try:
        assert dev.subgroup_size > 0 and "basic" in dev.subgroup_ops
        assert dev.versions["subgroup"].startswith(f"{dev.subgroup_size}: basic")
    finally:
        dev.close()


@pytest.mark.vulkan
@pytest.mark.parametrize("name", ["pack_pad", "subgroup_reduce", "i1_packed"])
def test_program_runs_on_vulkan_with_the_device_target(capsys, name):
    """Checked against IREE's CPU runtime by amdgpu-run, immediate and replayed."""
    import json

    from amdgpu.cli import main

    _vulkan_device().close()
    rc = main([str(DATA / f"{name}.mlir"), "--device", "vulkan", "--replay", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and json.loads(out[-1])["correct"] is True, out


@pytest.mark.vulkan
def test_subgroup_spirv_is_refused_on_a_device_without_them():
    from amdgpu.errors import VulkanError
    from amdgpu.workloads import _compile

    dev = _vulkan_device()
    try:
        if not {"basic", "arithmetic"} <= set(dev.subgroup_ops):
            pytest.skip(f"{dev.spec} has no subgroup arithmetic")
        bundle = _compile(str(DATA / "subgroup_reduce.mlir"), dev)
        dev.subgroup_ops = ("basic",)
        with pytest.raises(VulkanError, match="subgroup operations arithmetic") as info:
            dev.load(bundle)
        assert "\n" not in str(info.value)
    finally:
        dev.close()
