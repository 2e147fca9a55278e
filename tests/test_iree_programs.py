"""Whole IREE programs beyond one command buffer of fresh results: several results in one
allocation (argmax), results that alias or are inputs (reshape, in-place sort), queue copies
(slice), padding (fills/copies), bf16. Each is compiled by IREE, run by amdgpu-run (immediate
and replayed) and checked against IREE's own CPU runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amdgpu import dtypes
from amdgpu.cli import main
from amdgpu.workloads import _compare

DATA = Path(__file__).parent / "data" / "iree"
PROGRAMS = ["argmax", "reshape", "slice", "sort", "pad", "bf16"]


def _run(capsys, path, device) -> dict:
    rc = main([str(path), "--device", device, "--replay", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    return json.loads(out[-1])


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_on_virtual(capsys, name):
    d = _run(capsys, DATA / f"{name}.mlir", "amdgpu:virtual")
    assert d["correct"] is True, d


@pytest.mark.vulkan
@pytest.mark.parametrize("name", ["argmax", "reshape", "slice", "sort"])
def test_program_on_vulkan(capsys, name):
    from amdgpu import vulkan

    if not any(r.available for r in vulkan.list_devices()):
        pytest.skip("no Vulkan device (lavapipe) here")
    d = _run(capsys, DATA / f"{name}.mlir", "vulkan")
    assert d["correct"] is True, d


def test_reader_places_outputs():
    import compiler.iree as iree

    argmax = iree.compile_mlir(DATA / "argmax.mlir", ["gfx1100"]).program
    outs = argmax["outputs"]
    # IREE packs both results into one allocation: both are read from that transient.
    assert [o["at"]["kind"] for o in outs] == ["transient", "transient"]
    assert outs[0]["at"]["index"] == outs[1]["at"]["index"]
    assert outs[0]["at"]["offset"] != outs[1]["at"]["offset"]
    reshape = iree.compile_mlir(DATA / "reshape.mlir", ["gfx1100"]).program
    assert reshape["dispatches"] == []
    assert [o["at"] for o in reshape["outputs"]] == [
        {"kind": "input", "index": 0, "offset": 0}] * 2
    sl = iree.compile_mlir(DATA / "slice.mlir", ["gfx1100"]).program
    (copy,) = sl["steps"]
    assert copy["op"] == "copy" and copy["src"]["offset"] == 3 * 16 * 4
    assert copy["length"] == 2 * 16 * 4


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"])
def test_sub_byte_packing_round_trips(name):
    d = dtypes.dtype(name)
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 1 << dtypes.bits(d), 37).astype(np.uint8)
    packed = np.zeros(-(-37 * dtypes.bits(d) // 8), np.uint8)
    for k, c in enumerate(codes):  # element k in bits [k*w, (k+1)*w), lowest first
        w = dtypes.bits(d)
        packed[k * w // 8] |= c << (k * w % 8)
    arr = dtypes.unpack(packed, name, [37])
    assert arr.dtype == d and arr.shape == (37,)
    assert (dtypes.pack(arr) == packed).all()


def test_ml_dtypes_names():
    import ml_dtypes

    assert dtypes.dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16)
    assert dtypes.dtype("float8_e4m3fn") == np.dtype(ml_dtypes.float8_e4m3fn)
    assert dtypes.storage_nbytes([3, 3], "int4") == 5
    assert dtypes.is_float("bfloat16") and not dtypes.is_float("int4")


def test_compare_nan_equals_nan_and_per_type_tolerance():
    nan = np.array([1.0, np.nan, np.inf], np.float32)
    assert _compare([nan], [nan.copy()], False)[0]
    assert not _compare([np.array([np.nan], np.float32)], [np.array([1.0], np.float32)],
                        False)[0]
    import ml_dtypes

    want = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    got = np.array([1.0078125, 2.0], ml_dtypes.bfloat16)  # one bf16 ulp at 1.0
    assert _compare([got], [want], False)[0]
    assert not _compare([got.astype(np.float32)], [want.astype(np.float32)], False)[0]
