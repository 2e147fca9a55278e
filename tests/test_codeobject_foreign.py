"""The code-object reader, and the virtual gfx1100, on objects other compilers built:
Triton 3.9's AMD backend and Debian's hipcc --genco (clang 15, ROCm 5.2).

The objects are committed fixtures (tests/data/codeobjects, see its README); this module
only reads them, so it needs neither Triton nor hipcc. `manifest.json` there holds what
Triton's launcher knows besides the code object (workgroup = num_warps waves, `shared`
bytes of dynamic LDS, argument order).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from codeobjects import DATA, MANIFEST, TRITON, hip_entries, launch_triton_fixture, load_kernel
from llvm_readelf import llvm_readelf_metadata

from amdgpu.errors import BundleError, CodeObjectError
from hsa.abi.codeobject import CodeObject, read_code_object
from hsa.abi.targets import lookup

HOST_ENTRY = "host-x86_64-unknown-linux"


def _all_objects() -> list[tuple[str, bytes]]:
    """(label, code object bytes) for every fixture, bundles unpacked."""
    out = [(name, (DATA / name).read_bytes()) for name in sorted(TRITON)]
    for bundle in sorted(MANIFEST["hipcc"]["builds"]):
        for entry, data in sorted(hip_entries(bundle).items()):
            if data:
                out.append((f"{bundle}:{entry.rsplit('--', 1)[1]}", data))
    return out


OBJECTS = _all_objects()


def _check_descriptor(co: CodeObject) -> None:
    """Each kernel's descriptor agrees with its metadata and sits where its symbol says."""
    for k in co.kernels.values():
        d = k.descriptor
        assert co.read(k.descriptor_address, 64) == d.to_bytes()
        assert co.symbols[k.symbol].size == 64 and co.symbols[k.symbol].type == "OBJECT"
        assert d.kernarg_size == k.kernarg_segment_size
        assert d.group_segment_fixed_size == k.group_segment_fixed_size
        assert d.private_segment_fixed_size == k.private_segment_fixed_size
        assert d.wavefront_size32 == (k.wavefront_size == 32)
        assert d.enable_sgpr_kernarg_segment_ptr and d.enable_sgpr_workgroup_id_x
        seg = next(s for s in co.segments
                   if s.vaddr <= k.kernel_code_address < s.vaddr + s.memsz)
        assert seg.executable and co.symbols[k.name].type == "FUNC"


# ---- reading ----------------------------------------------------------------------------
@pytest.mark.generic
@pytest.mark.parametrize("name", sorted(TRITON))
def test_triton_object(name: str) -> None:
    facts = TRITON[name]
    co = read_code_object((DATA / name).read_bytes())
    # Triton leaves xnack and sramecc "any" (e_flags 0x54c on gfx942): a bare target id.
    assert co.target_id == co.processor == facts["arch"]
    assert co.mach == lookup(facts["arch"]).mach
    assert co.code_object_version == 5 and not co.is_relocatable
    # Triton's LLVM spells the target the new way: "amdgpu9.42-amd-amdhsa-unknown-gfx942".
    assert co.metadata["amdhsa.target"].endswith("-amd-amdhsa-unknown-" + facts["arch"])
    (kernel,) = co.kernels.values()
    assert kernel.name == facts["kernel"] and kernel.symbol == facts["kernel"] + ".kd"
    assert kernel.wavefront_size == facts["warp_size"] == lookup(facts["arch"]).wave_size
    assert kernel.max_flat_workgroup_size == facts["num_warps"] * facts["warp_size"]
    assert kernel.uniform_work_group_size
    # The user's args in order (pointers, i32s), then Triton's global and profile scratch
    # pointers; no hidden args at all, so the segment ends with the last pointer.
    want = [("global_buffer", 8) if t.startswith("*") else ("by_value", 4)
            for _, t in facts["args"]] + [("global_buffer", 8)] * 2
    assert [(a.value_kind, a.size) for a in kernel.args] == want
    assert kernel.hidden_args == [] and kernel.explicit_args == kernel.args
    assert all(a.address_space == "global" for a in kernel.args if a.size == 8)
    assert kernel.kernarg_segment_size == kernel.args[-1].offset + 8
    # Triton's LDS is dynamic: the metadata says 0, the launcher passes `shared` bytes.
    assert kernel.group_segment_fixed_size == 0
    _check_descriptor(co)
    if facts["arch"] == "gfx942":  # gfx942 preloads the whole kernarg segment into SGPRs
        assert kernel.descriptor.kernarg_preload_length * 4 == kernel.kernarg_segment_size
    else:
        assert kernel.descriptor.kernarg_preload_length == 0


@pytest.mark.generic
def test_hipcc_bundles() -> None:
    builtins = hip_entries("hipcc_builtins.hsaco")
    assert set(builtins) == {HOST_ENTRY, "hipv4-amdgcn-amd-amdhsa--gfx1100",
                             "hipv4-amdgcn-amd-amdhsa--gfx90a"}
    assert builtins[HOST_ENTRY] == b""  # --genco: the host entry is empty
    with pytest.raises(CodeObjectError, match="holds 2 AMDGPU code objects"):
        read_code_object((DATA / "hipcc_builtins.hsaco").read_bytes())
    saxpy_v5 = (0, 4, "by_value"), (8, 8, "global_buffer"), (16, 8, "global_buffer"), (
        24, 4, "by_value")
    for entry, target in (("hipv4-amdgcn-amd-amdhsa--gfx1100", "gfx1100"),
                          ("hipv4-amdgcn-amd-amdhsa--gfx90a", "gfx90a")):
        co = read_code_object(builtins[entry])
        assert co.target_id == target and co.code_object_version == 5
        assert co.metadata["amdhsa.target"] == "amdgcn-amd-amdhsa--" + target
        assert set(co.kernels) == {"hip_saxpy", "hip_block_sum"}
        saxpy, block_sum = co.kernels["hip_saxpy"], co.kernels["hip_block_sum"]
        assert tuple((a.offset, a.size, a.value_kind) for a in saxpy.explicit_args) == saxpy_v5
        # v5 hidden block after the explicit args (REFERENCE.md offsets), 256 bytes long.
        hidden = {a.value_kind: a.offset - saxpy.hidden_args_offset for a in saxpy.hidden_args}
        assert saxpy.hidden_args_offset == 32 and saxpy.kernarg_segment_size == 32 + 256
        assert hidden["hidden_block_count_x"] == 0 and hidden["hidden_group_size_x"] == 12
        assert hidden["hidden_global_offset_x"] == 40 and hidden["hidden_grid_dims"] == 64
        assert block_sum.group_segment_fixed_size == 256  # __shared__ float[64]
        assert block_sum.max_flat_workgroup_size == 64  # __launch_bounds__(64)
        assert block_sum.hidden_args == [] and block_sum.kernarg_segment_size == 16
        assert saxpy.wavefront_size == lookup(target).wave_size
        _check_descriptor(co)

    plain = hip_entries("hipcc_saxpy.hsaco")
    assert set(plain) == {HOST_ENTRY, "hipv4-amdgcn-amd-amdhsa--gfx1030",
                          "hipv4-amdgcn-amd-amdhsa--gfx90a"}
    for entry, target in (("hipv4-amdgcn-amd-amdhsa--gfx1030", "gfx1030"),
                          ("hipv4-amdgcn-amd-amdhsa--gfx90a", "gfx90a")):
        co = read_code_object(plain[entry])
        assert co.target_id == target and co.code_object_version == 4  # clang 15's default
        (saxpy,) = co.kernels.values()
        assert tuple((a.offset, a.size, a.value_kind) for a in saxpy.args) == saxpy_v5
        # v4: blockDim comes from the dispatch packet (ockl), not from hidden args.
        assert saxpy.descriptor.enable_sgpr_dispatch_ptr and saxpy.kernarg_segment_size == 28
        assert saxpy.wavefront_size == {"gfx1030": 32, "gfx90a": 64}[target]
        _check_descriptor(co)


@pytest.mark.generic
@pytest.mark.skipif(shutil.which("llvm-readelf-19") is None,
                    reason="llvm-readelf-19 not installed (Debian package llvm-19)")
@pytest.mark.parametrize("label,data", OBJECTS, ids=[label for label, _ in OBJECTS])
def test_metadata_matches_llvm_readelf(label: str, data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "object.hsaco"
    path.write_bytes(data)
    oracle = llvm_readelf_metadata(path)
    co = read_code_object(data)
    assert oracle["amdhsa.target"] == co.metadata["amdhsa.target"]
    assert oracle["amdhsa.target"].endswith(co.processor)
    assert oracle["amdhsa.version"] == [1, co.code_object_version - 3]
    theirs = {k[".name"]: k for k in oracle["amdhsa.kernels"]}
    assert set(theirs) == set(co.kernels)
    for name, k in co.kernels.items():
        t = theirs[name]
        assert t[".symbol"] == k.symbol
        assert t[".kernarg_segment_size"] == k.kernarg_segment_size
        assert t[".kernarg_segment_align"] == k.kernarg_segment_align
        assert t[".group_segment_fixed_size"] == k.group_segment_fixed_size
        assert t[".private_segment_fixed_size"] == k.private_segment_fixed_size
        assert t[".sgpr_count"] == k.sgpr_count and t[".vgpr_count"] == k.vgpr_count
        assert t[".wavefront_size"] == k.wavefront_size
        assert t[".max_flat_workgroup_size"] == k.max_flat_workgroup_size
        assert bool(t.get(".uniform_work_group_size")) == bool(k.uniform_work_group_size)
        assert [(a[".offset"], a[".size"], a[".value_kind"], a.get(".address_space"))
                for a in t.get(".args", [])] == [
            (a.offset, a.size, a.value_kind, a.address_space) for a in k.args]


# ---- running on the virtual gfx1100 -----------------------------------------------------
@pytest.fixture
def dev():
    from hsa.virtual.executor import executor_for

    if executor_for("gfx11") is None:
        pytest.skip("gfx11 executor not present")
    import amdgpu

    d = amdgpu.open("amdgpu:virtual")
    yield d
    d.close()  # a teardown error (queue or memory release) fails the test


def gfx11(test):
    """Marks a test that runs gfx11 machine code on amdgpu:virtual."""
    return pytest.mark.hsa_virtual(pytest.mark.isa_gfx11(test))


@gfx11
@pytest.mark.parametrize("n", [1000, 256])
def test_triton_add_runs(dev, n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    bx, by, out = dev.buffer(x), dev.buffer(y), dev.buffer(np.full(n + 64, 7, np.float32))
    assert TRITON["triton_add_gfx1100.hsaco"]["constexprs"]["BLOCK"] == 256
    launch_triton_fixture(dev, "triton_add_gfx1100.hsaco", (-(-n // 256),),
                   (bx, by, out, np.int32(n)))
    got = out.to_numpy(np.float32)
    np.testing.assert_array_equal(got[:n], x + y)
    assert (got[n:] == 7).all()  # the mask kept the tail untouched


@gfx11
def test_triton_row_sum_and_dynamic_lds(dev) -> None:
    rows, cols, stride = 6, 100, 128
    a = np.random.default_rng(1).standard_normal((rows, stride)).astype(np.float32)
    ba, out = dev.buffer(a), dev.buffer(rows * 4)
    args = (ba, out, np.int32(cols), np.int32(stride))
    name = "triton_row_sum_gfx1100.hsaco"
    assert TRITON[name]["shared"] > 0  # the cross-wave step goes through LDS
    launch_triton_fixture(dev, name, (rows,), args)
    np.testing.assert_allclose(out.to_numpy(np.float32), a[:, :cols].sum(1), rtol=1e-5,
                               atol=1e-5)
    # Without the dynamic LDS the packet grants none: LDS stores drop and loads read 0,
    # as on hardware, so the sums come out 0.
    launch_triton_fixture(dev, name, (rows,), args, dynamic_lds=0)
    assert (out.to_numpy(np.float32) == 0).all()


@gfx11
def test_triton_softmax_runs(dev) -> None:
    rows, cols, stride = 5, 50, 64
    x = np.random.default_rng(2).standard_normal((rows, stride)).astype(np.float32)
    bx, out = dev.buffer(x), dev.buffer(np.zeros_like(x))
    launch_triton_fixture(dev, "triton_softmax_gfx1100.hsaco", (rows,),
                   (bx, out, np.int32(cols), np.int32(stride)))
    e = np.exp(x[:, :cols] - x[:, :cols].max(1, keepdims=True))
    got = out.to_numpy(np.float32).reshape(rows, stride)
    np.testing.assert_allclose(got[:, :cols], e / e.sum(1, keepdims=True), rtol=1e-5)
    assert (got[:, cols:] == 0).all()


@gfx11
def test_triton_matmul_wmma_runs(dev) -> None:
    m, n, k = 40, 48, 40  # not multiples of the 32 x 32 x 16 tiles: masks on every edge
    facts = TRITON["triton_matmul_gfx1100.hsaco"]["constexprs"]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.buffer(m * n * 4)
    launch_triton_fixture(dev, "triton_matmul_gfx1100.hsaco",
                   (-(-m // facts["BM"]), -(-n // facts["BN"])),
                   (dev.buffer(a), dev.buffer(b), c, np.int32(m), np.int32(n), np.int32(k)))
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.to_numpy(np.float32).reshape(m, n), want, rtol=1e-4,
                               atol=1e-4)


@gfx11
def test_hipcc_kernels_run(dev) -> None:
    data = hip_entries("hipcc_builtins.hsaco")["hipv4-amdgcn-amd-amdhsa--gfx1100"]
    n = 1000
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    by = dev.buffer(y)
    # blockDim comes from the v5 hidden hidden_group_size_x the driver fills.
    saxpy = load_kernel(dev, data, "hip_saxpy")
    dev.dispatch(saxpy, 1024, 128, (np.float32(2.5), dev.buffer(x), by, np.int32(n))).wait(30)
    np.testing.assert_allclose(by.to_numpy(np.float32), 2.5 * x + y, rtol=1e-6, atol=1e-6)

    block_sum = load_kernel(dev, data, "hip_block_sum")
    blocks = 7
    v = rng.standard_normal(64 * blocks, np.float32)
    out = dev.buffer(blocks * 4)
    dev.dispatch(block_sum, 64 * blocks, 64, (dev.buffer(v), out)).wait(30)
    np.testing.assert_allclose(out.to_numpy(np.float32), v.reshape(blocks, 64).sum(1),
                               rtol=1e-5, atol=1e-5)



def test_fat_binary_becomes_a_bundle_per_target() -> None:
    from compiler.bundle import KernelBundle

    bundle = KernelBundle.from_code_objects((DATA / "hipcc_builtins.hsaco").read_bytes())
    assert sorted(bundle.targets) == ["gfx1100", "gfx90a"]
    assert bundle.variant_for("gfx1100").code_object().target_id == "gfx1100"
    assert bundle.variant_for("gfx90a:sramecc+:xnack-").target == "gfx90a"
    with pytest.raises(BundleError, match="gfx942"):
        bundle.variant_for("gfx942")
    plain = KernelBundle.from_code_objects((DATA / "triton_add_gfx1100.hsaco").read_bytes())
    assert plain.targets == ["gfx1100"]


def test_inspect_lists_every_entry_of_a_fat_binary() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "compiler", "inspect", "--json",
                          str(DATA / "hipcc_builtins.hsaco")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert sorted(doc["code_objects"]) == ["gfx1100", "gfx90a"]
    names = set(doc["code_objects"]["gfx1100"]["kernels"])
    assert names == {"hip_saxpy", "hip_block_sum"}


@gfx11
def test_fat_binary_loads_by_the_agents_isa(dev) -> None:
    from compiler.bundle import KernelBundle

    bundle = KernelBundle.from_code_objects((DATA / "hipcc_builtins.hsaco").read_bytes())
    saxpy = dev.load(bundle).kernel("hip_saxpy")  # the gfx1100 entry, chosen by the driver
    x = np.arange(256, dtype=np.float32)
    by = dev.buffer(np.ones(256, np.float32))
    dev.dispatch(saxpy, 256, 64, (np.float32(3.0), dev.buffer(x), by, np.int32(256))).wait(30)
    np.testing.assert_array_equal(by.to_numpy(np.float32), 3.0 * x + 1.0)
