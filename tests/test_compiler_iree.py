"""MLIR front end: IREE -> HSACO per AMD target + SPIR-V per Vulkan ABI + the host program."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from amdgpu.errors import CompileError
from compiler import iree, library, spirv
from compiler.__main__ import main as cli_main
from compiler.bundle import KernelBundle
from compiler.cache import KernelCache
from hsa.abi.codeobject import read_code_object

pytestmark = pytest.mark.generic


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.getbasetemp() / "compiler-cache")


@pytest.fixture(scope="module")
def saxpy(cache) -> KernelBundle:
    return compiler.compile("saxpy", targets=["gfx1100", "vulkan"], cache=cache)


@pytest.fixture(scope="module")
def chain4(cache) -> KernelBundle:
    return compiler.compile("chain_4", targets=["gfx1100", "gfx942", "vulkan"], cache=cache)


def test_saxpy_variants_and_program(saxpy):
    kinds = sorted((v.kind, v.target, v.abi or "") for v in saxpy.variants)
    assert kinds == [("hsaco", "gfx1100", ""), ("spirv", "vulkan", "bda"),
                     ("spirv", "vulkan", "descriptors")]
    program = saxpy.program
    assert program["inputs"] == [{"shape": [], "dtype": "float32"},
                                 {"shape": [1024], "dtype": "float32"},
                                 {"shape": [1024], "dtype": "float32"}]
    assert [(o["shape"], o["dtype"]) for o in program["outputs"]] == [([1024], "float32")]
    assert program["transients"] == []
    (dispatch,) = program["dispatches"]
    assert dispatch["barrier_before"] is False
    assert [(b["kind"], b["index"], b["readonly"]) for b in dispatch["bindings"]] == [
        ("input", 0, True), ("input", 1, True), ("input", 2, True), ("output", 0, False)]
    assert [b["length"] for b in dispatch["bindings"]] == [4, 4096, 4096, 4096]
    size, count = dispatch["workgroup_size"], dispatch["workgroup_count"]
    assert size[0] * count[0] * 4 >= 1024  # IREE vectorizes by 4 at most here
    assert dispatch["spirv_entry"] == dispatch["kernel"]


def test_saxpy_hsaco_args_are_binding_pointers(saxpy):
    variant = saxpy.variant_for("gfx1100")
    co = read_code_object(variant.data)
    assert co.code_object_version == 5 and co.target_id.endswith("gfx1100")
    kernel = co.kernels[saxpy.program["dispatches"][0]["kernel"]]
    assert [(a.offset, a.size, a.value_kind) for a in kernel.args] == [
        (0, 8, "global_buffer"), (8, 8, "global_buffer"), (16, 8, "global_buffer"),
        (24, 8, "global_buffer")]
    assert kernel.hidden_args == [] or not kernel.hidden_args
    assert list(kernel.reqd_workgroup_size) == saxpy.program["dispatches"][0]["workgroup_size"]


def test_chain4_hsaco_args_are_pointers_then_i32(chain4):
    for target in ("gfx1100", "gfx942"):
        variant = chain4.variant_for(target)
        kernel = read_code_object(variant.data).kernels[variant.info["dispatches"][0]["kernel"]]
        layout = [(a.offset, a.size, a.value_kind) for a in kernel.args]
        assert layout == [(0, 8, "global_buffer"), (8, 8, "global_buffer"),
                          (16, 4, "by_value"), (20, 4, "by_value")]
        assert variant.info["dispatches"][1]["constant_count"] == 2


def test_chain4_program_dispatches_barriers_and_buffers(chain4):
    program = chain4.program
    dispatches = program["dispatches"]
    assert len(dispatches) == 4
    assert [d["barrier_before"] for d in dispatches] == [False, True, True, True]
    first, last = dispatches[0], dispatches[-1]
    assert first["bindings"][0]["kind"] == "input" and first["bindings"][0]["readonly"]
    assert last["bindings"][-1]["kind"] == "output"
    assert last["bindings"][-1]["length"] == 4096 * 4
    # Each step reads what the previous one wrote: writes go to a transient until the last.
    for d in dispatches[:-1]:
        assert d["bindings"][-1]["kind"] == "transient"
    for d in dispatches[1:]:
        assert d["bindings"][0]["kind"] == "transient"
    assert len(program["transients"]) >= 1
    for d in dispatches:
        for b in d["bindings"]:
            if b["kind"] == "transient":
                size = program["transients"][b["index"]]["size"]
                assert b["offset"] + b["length"] <= size
    # IREE packs the intermediates into one transient and passes offsets as constants:
    # the written (constant) offsets of step i are the read offsets of step i + 1.
    middle = [d["constants"] for d in dispatches[1:3]]
    assert middle[0][1] == middle[1][0]
    assert all(len(d["constants"]) == 2 for d in dispatches)


def test_per_target_launch_shapes(chain4):
    wave32 = chain4.variant_for("gfx1100").info["dispatches"]
    wave64 = chain4.variant_for("gfx942").info["dispatches"]
    assert len(wave32) == len(wave64) == 4
    for d32, d64 in zip(wave32, wave64, strict=True):
        total32 = d32["workgroup_size"][0] * d32["workgroup_count"][0]
        total64 = d64["workgroup_size"][0] * d64["workgroup_count"][0]
        assert total32 == total64
    assert wave64[0]["workgroup_size"][0] == 64
    assert chain4.program["dispatches"][0]["workgroup_size"] == wave32[0]["workgroup_size"]


def test_spirv_descriptors_layout(chain4):
    variant = chain4.spirv("descriptors")
    info = variant.info
    assert info["abi"] == "descriptors"
    entry = info["entry_points"][chain4.program["dispatches"][0]["spirv_entry"]]
    assert entry["bindings"] == [[0, 0], [0, 1]]
    assert entry["push_constant_words"] == entry["constant_count"] == 2
    assert entry["constant_offset_words"] == 0 and entry["bda"] is None
    module = info["modules"][entry["module"]]
    blob = variant.data[module["offset"] : module["offset"] + module["size"]]
    assert struct.unpack_from("<I", blob)[0] == spirv.MAGIC
    parsed = spirv.read_spirv(blob)
    assert list(parsed.entry_points) == module["entry_points"]
    assert parsed.entry_points[module["entry_points"][0]].workgroup_size == tuple(
        entry["workgroup_size"])
    assert "PhysicalStorageBufferAddresses" not in info["capabilities"]


def test_spirv_bda_layout(chain4):
    info = chain4.spirv("bda").info
    entry = info["entry_points"][chain4.program["dispatches"][0]["spirv_entry"]]
    assert entry["bindings"] == []  # no descriptor sets: addresses come from the table
    bda = entry["bda"]
    assert (bda["root_words"], bda["table_address_words"], bda["table_entry_bytes"],
            bda["binding_count"]) == (8, [0, 1], 8, 2)
    assert bda["root_fields"]["binding_table_address"] == 0
    assert entry["constant_offset_words"] == 8
    assert entry["push_constant_words"] == 8 + entry["constant_count"]
    assert "PhysicalStorageBufferAddresses" in info["capabilities"]
    assert info["modules"][0]["addressing_model"] == "PhysicalStorageBuffer64"


def test_library_program_is_cached(tmp_path, monkeypatch):
    store = KernelCache(tmp_path / "cache")
    first = compiler.compile("saxpy", targets=["gfx1100"], cache=store)
    assert store.misses == 1

    def no_compiles(*args, **kwargs):
        raise AssertionError("iree-compile ran although the bundle was cached")

    monkeypatch.setattr(iree, "_run_iree", no_compiles)
    second = compiler.compile("saxpy", targets=["gfx1100"], cache=store)
    assert store.hits == 1
    assert second.program == first.program
    assert second.variant_for("gfx1100").data == first.variant_for("gfx1100").data


def test_mlir_error_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.mlir"
    bad.write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                   "  %y = arith.addf %x, %z : tensor<4xf32>\n  return %y : tensor<4xf32>\n}\n")
    with pytest.raises(CompileError) as info:
        compiler.compile(bad, targets=["gfx1100"], cache=False)
    assert f"{bad}:2:" in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.diagnostics


def test_code_object_v6_is_refused_for_mlir():
    with pytest.raises(CompileError, match="v5 only"):
        compiler.compile("saxpy", targets=["gfx1100"], code_object_version=6, cache=False)


def test_vulkan_only_and_single_abi(cache):
    bundle = compiler.compile("saxpy", targets=["vulkan"], abi="bda", cache=cache)
    assert [(v.kind, v.abi) for v in bundle.variants] == [("spirv", "bda")]
    assert bundle.program["dispatches"][0]["workgroup_size"] == \
        bundle.spirv("bda").info["dispatches"][0]["workgroup_size"]


def test_cli_compile_writes_a_bundle(tmp_path, capsys, monkeypatch, cache):
    monkeypatch.setenv("AMDGPU_DIRECT_CACHE", str(cache.dir))
    out = tmp_path / "saxpy.bundle"
    assert cli_main(["compile", "saxpy", "--target", "gfx1100,vulkan", "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and "saxpy" in line and "1 dispatches" in line
    bundle = KernelBundle.load(out)
    assert bundle.variant_for("gfx1100").kind == "hsaco"
    assert cli_main(["compile", "nonexistent_kernel", "--target", "gfx1100"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


SMALL_MATRIX = [("saxpy", "gfx942"), ("chain_4", "gfx1201"), ("reduction", "gfx1100")]


@pytest.mark.parametrize("name,target", SMALL_MATRIX)
def test_small_matrix(name, target, cache):
    bundle = compiler.compile(name, targets=[target], cache=cache)
    variant = bundle.variant_for(target)
    kernels = read_code_object(variant.data).kernels
    for d in bundle.program["dispatches"]:
        assert d["kernel"] in kernels
        assert len(d["bindings"]) == len(
            [a for a in kernels[d["kernel"]].args if a.value_kind == "global_buffer"])
    assert library.spec(name).inputs == tuple(bundle.program["inputs"])


_OPCODES = [10, 14, 15, 16, 17, 21, 22, 23, 28, 29, 30, 32, 43, 59, 71, 72]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_OPCODES),
                          st.lists(st.integers(0, 40), max_size=6)), max_size=40),
       st.lists(st.integers(0, 2**32 - 1), max_size=8))
def test_spirv_reader_rejects_garbage_cleanly(instructions, tail):
    """Random instruction streams (plausible opcodes, random operands) and random trailing
    words: the reader returns a module or raises CompileError, nothing else."""
    words = []
    for opcode, operands in instructions:
        words += [(len(operands) + 1) << 16 | opcode, *operands]
    words += tail
    data = struct.pack(f"<{5 + len(words)}I", spirv.MAGIC, 0x10000, 0, 64, 0, *words)
    try:
        module = spirv.read_spirv(data)
    except CompileError:
        return
    assert module.size == len(data)


# iree-compile 3.13's stderr when it crashed compiling gpt2-decode-bf16 for gfx950 (the
# model zoo's decoder in bf16), cut to its first frames (long ones continued with a backslash).
_IREE_CRASH = """\
Please report issues to https://github.com/iree-org/iree/issues and include the crash backtrace.
Stack dump:
0.	Program arguments: iree-compile gpt2_prefill.mlir ...
 #0 0x00007fec3175a0ab llvm::sys::PrintStackTrace(llvm::raw_ostream&, int) Signals.cpp:0:0
 #1 0x00007fec317571fe llvm::sys::RunSignalHandlers() Signals.cpp:0:0
 #2 0x00007fec3175ac10 SignalHandler(int, siginfo_t*, void*) Signals.cpp:0:0
 #3 0x00007fec2b85a050 (/lib/x86_64-linux-gnu/libc.so.6+0x3c050)
 #4 0x00007fec31b86a8a mlir::iree_compiler::getXorShuffleParamsForTunedChipset(\
mlir::iree_compiler::IREE::GPU::TargetAttr, int) GPUUtils.cpp:0:0
 #5 0x00007fec31b86fb4 mlir::iree_compiler::getXorShuffleAttr(mlir::MLIRContext*, \
mlir::Attribute) GPUUtils.cpp:0:0
"""


def test_a_compiler_crash_names_where():
    """Not "Please report issues ...": the first frame of IREE's own code."""
    assert iree._first_diagnostic(_IREE_CRASH) == (
        "IREE crashed in mlir::iree_compiler::getXorShuffleParamsForTunedChipset "
        "(its bug, not the program's)")


SKINNY = Path(__file__).parent / "data" / "iree" / "skinny_matmul_vdmfma.mlir"


@pytest.mark.slow
def test_iree_failures_on_a_skinny_matmul_are_compiled_around():
    """IREE 3.13 gives a skinny f16 matmul sparse MFMA (VDMFMA) and then crashes on it for
    gfx950 (SIGFPE in getXorShuffleParamsForTunedChipset) and refuses it for gfx90a (no
    smfmac there): compile_mlir compiles again with the flag that avoids each and says so in
    the variant's info. gfx942 compiles it as it is: no flag there."""
    result = iree.compile_mlir(SKINNY, ["gfx942", "gfx950", "gfx90a"])
    used = {v.target: v.info.get("iree_workaround") for v in result.variants}
    assert used == {"gfx942": None, "gfx950": ["--iree-llvmgpu-use-direct-load=false"],
                    "gfx90a": ["--iree-codegen-llvmgpu-use-tile-and-fuse-matmul=false"]}


def test_a_garbled_crash_dump_is_read_again_single_threaded(tmp_path, monkeypatch):
    """Two compile threads crashing at once cut IREE's stack dump short (seen on gpt2's
    prefill for gfx950: 3 runs in 4): iree-compile runs once more with
    --mlir-disable-threading, and the message names the frame that run printed."""
    calls = tmp_path / "calls"
    tool = tmp_path / "iree-compile"
    tool.write_text(f"""#!/bin/sh
echo "$*" >> {calls}
echo "Please report issues to https://github.com/iree-org/iree/issues and include the \\
crash backtrace." >&2
case " $* " in *" --mlir-disable-threading "*)
  echo ' #4 0x00007f0000000000 mlir::iree_compiler::pickTiles(int) KernelConfig.cpp:0:0' >&2;;
esac
kill -FPE $$
""")
    tool.chmod(0o755)
    monkeypatch.setattr(iree, "iree_compile_path", lambda: str(tool))
    with pytest.raises(CompileError) as err:
        iree.compile_mlir(SKINNY, ["gfx942"])
    assert str(err.value) == (
        "iree-compile (gfx942): IREE crashed in mlir::iree_compiler::pickTiles (its bug, not "
        "the program's); fix the source or the options and compile again")
    runs = calls.read_text().splitlines()
    assert len(runs) == 2 and runs[1] == runs[0] + " --mlir-disable-threading"
