"""The code-object reader on objects clang 22 built, checked against llvm-readelf-19."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from codeobject_builds import BUILDS, Built
from llvm_readelf import llvm_readelf_metadata

from amdgpu.errors import CodeObjectError
from hsa.abi.codeobject import KernelDescriptor, read_code_object, read_offload_bundle
from hsa.abi.targets import lookup

pytestmark = pytest.mark.generic

EXPECTED_TARGET_ID = {
    "gfx942:sramecc+:xnack-": "gfx942:sramecc+:xnack-",
    "gfx942": "gfx942",
    "gfx950": "gfx950",
    "gfx1100": "gfx1100",
    "gfx1201": "gfx1201",
    "gfx1250": "gfx1250",
    "gfx11-generic": "gfx11-generic",
}


@pytest.mark.parametrize("key", BUILDS, ids=[f"{m}-v{v}" for m, v in BUILDS])
@pytest.mark.parametrize("linked", [True, False], ids=["hsaco", "o"])
def test_header_kernels_and_descriptors(code_objects, key, linked) -> None:
    mcpu, version = key
    co = read_code_object(code_objects[key].read(linked))
    assert co.target_id == EXPECTED_TARGET_ID[mcpu]
    assert co.code_object_version == version
    assert co.is_relocatable is (not linked)
    assert co.mach == lookup(co.processor).mach
    assert co.generic_version == (1 if mcpu.endswith("generic") else 0)
    assert set(co.kernels) == {"saxpy", "lds_reverse", "scratch"}
    wave = lookup(co.processor).wave_size
    for k in co.kernels.values():
        d = k.descriptor
        assert k.symbol == k.name + ".kd"
        assert d.kernarg_size == k.kernarg_segment_size
        assert d.group_segment_fixed_size == k.group_segment_fixed_size
        assert d.private_segment_fixed_size == k.private_segment_fixed_size
        assert k.wavefront_size == wave == (32 if d.wavefront_size32 else 64)
        assert d.enable_sgpr_kernarg_segment_ptr
        assert co.symbols[k.symbol].size == 64 and co.symbols[k.symbol].type == "OBJECT"
        assert d.enable_sgpr_workgroup_id_x or k.name != "saxpy"  # saxpy reads it
        if co.processor in ("gfx942", "gfx950") and k.agpr_count == 0:
            assert k.vgpr_count <= d.accum_offset < k.vgpr_count + 4
    lds = co.kernels["lds_reverse"]
    assert lds.group_segment_fixed_size == 256
    assert lds.reqd_workgroup_size == (64, 1, 1)
    assert co.kernels["saxpy"].reqd_workgroup_size is None
    scratch = co.kernels["scratch"]
    assert scratch.private_segment_fixed_size > 0 and scratch.descriptor.enable_private_segment


@pytest.mark.parametrize("version", [4, 5, 6])
def test_explicit_and_hidden_args(code_objects, version) -> None:
    co = read_code_object(code_objects[("gfx942:sramecc+:xnack-", version)].read())
    saxpy = co.kernels["saxpy"]
    explicit = [(a.offset, a.size, a.value_kind) for a in saxpy.explicit_args]
    assert explicit == [(0, 8, "global_buffer"), (8, 8, "global_buffer"),
                        (16, 4, "by_value"), (20, 4, "by_value")]
    assert [a.type_name for a in saxpy.explicit_args] == ["float*", "float*", "float", "uint"]
    assert saxpy.explicit_args[1].is_const and not saxpy.explicit_args[0].is_const
    assert saxpy.explicit_args[0].address_space == "global"
    hidden = {a.value_kind: a for a in saxpy.hidden_args}
    assert all(a.is_hidden for a in saxpy.hidden_args)
    if version == 4:
        # v4 reads the workgroup size from the dispatch packet, not from hidden args.
        assert "hidden_block_count_x" not in hidden
        assert saxpy.kernarg_segment_size == 24
    else:
        base = saxpy.hidden_args_offset
        assert base == 24
        # v5 hidden layout, offsets from the start of the hidden block (REFERENCE.md).
        assert hidden["hidden_block_count_x"].offset - base == 0
        assert hidden["hidden_group_size_x"].offset - base == 12
        assert hidden["hidden_group_size_x"].size == 2
        assert hidden["hidden_remainder_x"].offset - base == 18
        assert hidden["hidden_global_offset_x"].offset - base == 40
        assert hidden["hidden_grid_dims"].offset - base == 64
        assert saxpy.kernarg_segment_size == base + 256


def test_linked_addresses_symbols_and_segments(code_objects) -> None:
    co = read_code_object(code_objects[("gfx1100", 5)].read())
    assert any(s.executable for s in co.segments)
    for k in co.kernels.values():
        assert co.read(k.descriptor_address, 64) == k.descriptor.to_bytes()
        entry = co.symbols[k.name]
        assert entry.type == "FUNC" and entry.binding == "GLOBAL"
        assert k.kernel_code_address == entry.value
        seg = next(s for s in co.segments
                   if s.vaddr <= k.kernel_code_address < s.vaddr + s.memsz)
        assert seg.executable
    assert co.image_size >= max(s.vaddr + s.memsz for s in co.segments)
    with pytest.raises(CodeObjectError, match="no PT_LOAD segment"):
        co.read(co.image_size + 0x10000, 4)


def test_relocatable_object_relocations(code_objects) -> None:
    co = read_code_object(code_objects[("gfx1100", 5)].read(linked=False))
    assert co.segments == []
    rel = {r.symbol: r for r in co.relocations}
    for name in ("saxpy", "lds_reverse", "scratch"):
        r = rel[name]
        assert r.type_name == "R_AMDGPU_REL64" and r.section == ".rela.rodata"
        # The REL64 fills kernel_code_entry_byte_offset at descriptor offset 16.
        assert r.offset == co.kernels[name].descriptor_address + 16
        assert r.symbol_value == co.symbols[name].value


def test_descriptor_from_bytes_round_trip_and_bits() -> None:
    raw = struct.pack("<III4xq20xIIIHH4x", 256, 16, 280, -128, 0x3, 0x00AF_0041,
                      0x0000_1A8D, 0x040B, (3 << 7) | 2)
    d = KernelDescriptor.from_bytes(raw)
    assert d.to_bytes() == raw
    assert (d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size) == (
        256, 16, 280)
    assert d.kernel_code_entry_byte_offset == -128
    assert d.enable_sgpr_private_segment_buffer and d.enable_sgpr_dispatch_ptr
    assert d.enable_sgpr_kernarg_segment_ptr and not d.enable_sgpr_queue_ptr
    assert d.wavefront_size32
    assert d.enable_private_segment and d.user_sgpr_count == 6
    assert d.enable_sgpr_workgroup_id_x and not d.enable_sgpr_workgroup_id_y
    assert d.enable_vgpr_workitem_id == 3 and d.enable_sgpr_workgroup_id_z
    assert d.granulated_workitem_vgpr_count == 1 and d.granulated_wavefront_sgpr_count == 1
    assert d.kernarg_preload_length == 2 and d.kernarg_preload_offset == 3
    assert d.user_sgprs_from_properties == 4 + 2 + 2 + 2
    with pytest.raises(CodeObjectError, match="truncated kernel descriptor"):
        KernelDescriptor.from_bytes(raw[:40])


def _offload_bundle(entries: list[tuple[str, bytes]]) -> bytes:
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries))
    table_size = sum(24 + len(e.encode()) for e, _ in entries)
    offset = len(header) + table_size
    table, blobs = b"", b""
    for entry_id, blob in entries:
        table += struct.pack("<QQQ", offset + len(blobs), len(blob), len(entry_id.encode()))
        table += entry_id.encode()
        blobs += blob
    return header + table + blobs


def test_offload_bundle_from_hipcc_genco(code_objects) -> None:
    gfx942 = code_objects[("gfx942:sramecc+:xnack-", 5)].read()
    gfx1100 = code_objects[("gfx1100", 5)].read()
    one = _offload_bundle([("host-x86_64-unknown-linux-gnu-", b""),
                           ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", gfx942)])
    assert read_code_object(one).target_id == "gfx942:sramecc+:xnack-"
    two = _offload_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", gfx942),
                           ("hipv4-amdgcn-amd-amdhsa--gfx1100", gfx1100)])
    assert set(read_offload_bundle(two)) == {
        "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "hipv4-amdgcn-amd-amdhsa--gfx1100"}
    with pytest.raises(CodeObjectError, match="holds 2 AMDGPU code objects"):
        read_code_object(two)
    with pytest.raises(CodeObjectError, match="truncated offload bundle"):
        read_code_object(one[:-100])


# ---- llvm-readelf-19 as the oracle ------------------------------------------------------
@pytest.mark.skipif(shutil.which("llvm-readelf-19") is None,
                    reason="llvm-readelf-19 not installed (Debian package llvm-19)")
@pytest.mark.parametrize("key", [("gfx942:sramecc+:xnack-", 5), ("gfx1100", 5),
                                 ("gfx1100", 4), ("gfx1201", 5)],
                         ids=["gfx942-v5", "gfx1100-v5", "gfx1100-v4", "gfx1201-v5"])
def test_metadata_matches_llvm_readelf(code_objects, key) -> None:
    built: Built = code_objects[key]
    oracle = llvm_readelf_metadata(built.hsaco)
    co = read_code_object(built.read())
    assert oracle["amdhsa.target"] == "amdgcn-amd-amdhsa--" + co.target_id
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
        assert tuple(t.get(".reqd_workgroup_size") or ()) == (k.reqd_workgroup_size or ())
        assert [(a[".offset"], a[".size"], a[".value_kind"], a.get(".type_name"),
                 a.get(".address_space")) for a in t.get(".args", [])] == [
            (a.offset, a.size, a.value_kind, a.type_name, a.address_space) for a in k.args]


IREE_ADD = """
func.func @add(%a: tensor<4096xf32>, %b: tensor<4096xf32>) -> tensor<4096xf32> {
  %0 = arith.addf %a, %b : tensor<4096xf32>
  return %0 : tensor<4096xf32>
}
"""


def test_reads_an_iree_code_object(tmp_path) -> None:
    iree_compile = Path(sys.executable).with_name("iree-compile")
    if not iree_compile.exists():
        pytest.skip("iree-compile not installed next to this Python (iree-base-compiler)")
    src = tmp_path / "add.mlir"
    src.write_text(IREE_ADD)
    dump = tmp_path / "binaries"
    subprocess.run([str(iree_compile), "--iree-hal-target-device=hip",
                    "--iree-rocm-target=gfx942", f"--iree-hal-dump-executable-binaries-to={dump}",
                    str(src), "-o", str(tmp_path / "add.vmfb")], check=True, capture_output=True)
    (hsaco,) = dump.glob("*.hsaco")
    co = read_code_object(hsaco.read_bytes())
    assert co.processor == "gfx942" and co.code_object_version in (5, 6)
    (kernel,) = co.kernels.values()
    # IREE: one pointer per binding, no hidden args; gfx942 preloads kernargs into SGPRs.
    assert [a.value_kind for a in kernel.args] == ["global_buffer"] * 3
    assert kernel.kernarg_segment_size == 24 and kernel.wavefront_size == 64
    assert kernel.descriptor.kernarg_preload_length > 0
    assert co.metadata["amdhsa.target"].endswith("gfx942")
