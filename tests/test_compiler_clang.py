"""OpenCL C front end: clang of the ziglang wheel -> HSACO for every target, the built-in
header (work-item functions, hidden arguments, barrier, atomics), diagnostics, caching."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import compiler
from amdgpu.errors import CompileError
from compiler import clang, library
from compiler.cache import KernelCache
from hsa.abi.codeobject import read_code_object

pytestmark = pytest.mark.generic

TARGETS = ("gfx950", "gfx1250", "gfx1100", "gfx942", "gfx1201")
MACH = {"gfx950": 0x4F, "gfx1250": 0x49, "gfx1100": 0x41, "gfx942": 0x4C, "gfx1201": 0x4E}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.getbasetemp() / "compiler-cache")


def _kinds(kernel) -> list[str]:
    return [a.value_kind for a in kernel.args]


@pytest.mark.parametrize("name", library.opencl_names())
def test_library_kernel_compiles_for_every_target(name, cache):
    bundle = compiler.compile(name, targets=list(TARGETS), cache=cache)
    assert sorted(v.target for v in bundle.variants) == sorted(TARGETS)
    assert bundle.program is None
    for target in TARGETS:
        variant = bundle.variant_for(target)
        co = read_code_object(variant.data)
        assert co.mach == MACH[target]
        assert co.code_object_version == 5
        assert list(co.kernels) == [library.spec(name).kernel]
        assert variant.info["kernels"] == [name]
        assert variant.info["compiler"].startswith("clang ")


def test_fill_arguments_and_wave_size(cache):
    bundle = compiler.compile("fill", targets=["gfx1100", "gfx942"], cache=cache)
    k11 = read_code_object(bundle.variant_for("gfx1100").data).kernels["fill"]
    assert [(a.offset, a.size, a.value_kind) for a in k11.explicit_args] == [
        (0, 8, "global_buffer"), (8, 4, "by_value"), (12, 4, "by_value")]
    assert k11.wavefront_size == 32
    k9 = read_code_object(bundle.variant_for("gfx942").data).kernels["fill"]
    assert k9.wavefront_size == 64


def test_hidden_arguments_come_from_the_header(cache):
    """get_local_size/get_num_groups read the v5 hidden block count, group size, remainder."""
    bundle = compiler.compile("saxpy_hidden", targets=["gfx1100"], cache=cache)
    kernel = read_code_object(bundle.variant_for("gfx1100").data).kernels["saxpy_hidden"]
    kinds = _kinds(kernel)
    assert kinds[:4] == ["global_buffer", "global_buffer", "by_value", "by_value"]
    for hidden in ("hidden_block_count_x", "hidden_group_size_x", "hidden_remainder_x"):
        assert hidden in kinds
    offsets = {a.value_kind: a.offset for a in kernel.args}
    base = offsets["hidden_block_count_x"]
    assert base % 8 == 0
    assert offsets["hidden_group_size_x"] - base == 12
    assert offsets["hidden_remainder_x"] - base == 18


def test_lds_reduce_uses_lds_barriers_and_atomics(cache, tmp_path):
    bundle = compiler.compile("lds_reduce", targets=["gfx1100"], cache=cache)
    data = bundle.variant_for("gfx1100").data
    kernel = read_code_object(data).kernels["lds_reduce"]
    assert kernel.group_segment_fixed_size == 256 * 4
    assert kernel.reqd_workgroup_size in ((256, 1, 1), [256, 1, 1])
    objdump = shutil.which("llvm-objdump-19")
    if objdump is None:
        pytest.skip("llvm-objdump-19 is not installed (Debian llvm-19) to disassemble")
    path = tmp_path / "lds_reduce.hsaco"
    path.write_bytes(data)
    text = subprocess.run([objdump, "-d", "--mcpu=gfx1100", str(path)],
                          capture_output=True, text=True, check=True).stdout
    assert "s_barrier" in text
    assert "ds_store_b32" in text and "ds_load" in text
    assert "global_atomic_add_u32" in text


HEADER_PROBE = r"""
__kernel void probe(__global int *gi, __global uint *gu, __global ulong *sizes) {
    __local int li[64];
    __local uint lu[64];
    uint lid = (uint)get_local_id(0);
    li[lid] = 0; lu[lid] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    atomic_add(&gi[0], 1); atomic_sub(&gi[1], 1); atomic_inc(&gu[0]); atomic_dec(&gu[1]);
    atomic_max(&gi[2], (int)lid); atomic_min(&gu[2], lid); atomic_xchg(&gi[3], 7);
    atomic_cmpxchg(&gi[4], 0, 1); atomic_cmpxchg(&gu[3], 0u, 1u);
    atomic_add(&li[0], 1); atomic_max(&lu[1], lid); atomic_cmpxchg(&li[2], 0, 1);
    atomic_and(&gu[4], 1u); atomic_or(&gu[5], 2u); atomic_xor(&gu[6], 3u);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_global_id(0) == 0) {
        sizes[0] = get_global_size(0); sizes[1] = get_local_size(1);
        sizes[2] = get_num_groups(2); sizes[3] = get_group_id(0);
        sizes[4] = get_enqueued_local_size(0) + (ulong)li[0] + lu[1];
        float4 v = (float4)(1.0f, 2.0f, 3.0f, 4.0f);
        sizes[5] = (ulong)fmax(v.x, fabs(v.w)) + (uchar)1 + (ushort)2 + max(1u, 2u);
    }
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_header_covers_work_items_barrier_and_atomics(tmp_path, target):
    src = tmp_path / "probe.cl"
    src.write_text(HEADER_PROBE)
    warnings: list[str] = []
    data = clang.compile_opencl(src, target, warnings=warnings)
    kernel = read_code_object(data).kernels["probe"]
    kinds = _kinds(kernel)
    assert "hidden_block_count_z" in kinds and "hidden_remainder_x" in kinds
    assert kernel.group_segment_fixed_size >= 2 * 64 * 4


def test_code_object_version_6_on_request(tmp_path):
    data = clang.compile_opencl(library.path("fill"), "gfx1100", code_object_version=6)
    assert read_code_object(data).code_object_version == 6
    assert read_code_object(clang.compile_opencl(library.path("fill"), "gfx1100")
                            ).code_object_version == 5
    with pytest.raises(CompileError, match="code object version 3"):
        clang.compile_opencl(library.path("fill"), "gfx1100", code_object_version=3)


def test_target_id_features_reach_the_code_object(cache):
    bundle = compiler.compile("copy", targets=["gfx942:xnack-", "cdna3"], cache=cache)
    assert sorted(v.target for v in bundle.variants) == ["gfx942", "gfx942:xnack-"]
    assert read_code_object(bundle.variant_for("gfx942:xnack-").data).target_id.endswith(
        "gfx942:xnack-")


def test_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "broken_kernel.cl"
    bad.write_text("__kernel void k(__global float *o) {\n    o[0] = 1.0f\n    o[1] = y;\n}\n")
    with pytest.raises(CompileError) as info:
        compiler.compile(bad, targets=["gfx1100"], cache=False)
    message = str(info.value)
    assert f"{bad}:2:" in message
    assert "\n" not in message
    assert "expected ';'" in message
    assert "use of undeclared identifier 'y'" in info.value.diagnostics


def test_defines_and_warnings(tmp_path):
    src = tmp_path / "scaled.cl"
    src.write_text("__kernel void scaled(__global float *o) { int unused; o[0] = SCALE; }\n")
    with pytest.raises(CompileError, match="SCALE"):
        compiler.compile(src, targets=["gfx1100"], cache=False)
    bundle = compiler.compile(src, targets=["gfx1100"], cache=False, defines={"SCALE": "2.0f"})
    assert bundle.variant_for("gfx1100").info["kernels"] == ["scaled"]


def test_opencl_for_vulkan_is_an_error():
    with pytest.raises(CompileError, match="Vulkan"):
        compiler.compile("fill", targets=["gfx1100", "vulkan"], cache=False)


def test_default_targets_skip_vulkan_for_opencl(cache):
    bundle = compiler.compile("copy", cache=cache)
    assert sorted(v.target for v in bundle.variants) == sorted(TARGETS)


def test_cache_hit_and_header_in_key(tmp_path):
    store = KernelCache(tmp_path / "cache")
    first = compiler.compile("fill", targets=["gfx1100"], cache=store)
    assert store.misses == 1 and store.hits == 0
    second = compiler.compile("fill", targets=["gfx1100"], cache=store)
    assert store.hits == 1
    assert second.variant_for("gfx1100").data == first.variant_for("gfx1100").data
    compiler.compile("fill", targets=["gfx1100"], cache=store, code_object_version=6)
    assert store.misses == 2


def test_missing_source_and_unknown_target():
    with pytest.raises(CompileError, match="does not exist"):
        compiler.compile("/nonexistent/kernel.cl", targets=["gfx1100"], cache=False)
    with pytest.raises(CompileError, match="gfx9999"):
        compiler.compile("fill", targets=["gfx9999"], cache=False)
    with pytest.raises(CompileError, match="not a file or a library kernel"):
        compiler.compile("no_such_kernel", targets=["gfx1100"], cache=False)
