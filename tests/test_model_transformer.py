"""A real model end to end: the transformer block exported from PyTorch by iree-turbine
(examples/model/export_transformer.py: layer norm, 4-head attention, GELU MLP, random
weights as dense resources) runs whole through amdgpu-run on every device, each result
checked against IREE's own CPU runtime on the same MLIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amdgpu.cli import main

MODEL = Path(__file__).resolve().parents[1] / "examples" / "model" / "transformer_block.mlir"


def _run(capsys, device: str) -> dict:
    rc = main([str(MODEL), "--device", device, "--replay", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    return json.loads(out[-1])


def test_model_is_the_exported_torch_program():
    text = MODEL.read_text()
    for op in ("torch.aten.layer_norm", "torch.aten.softmax", "torch.aten.gelu",
               "dense_resource<"):
        assert op in text, op


def test_model_on_virtual(capsys):
    d = _run(capsys, "amdgpu:virtual")
    assert d["correct"] is True and d["dispatches"] >= 10, d


@pytest.mark.vulkan
def test_model_on_vulkan(capsys):
    from amdgpu import vulkan

    if not any(r.available for r in vulkan.list_devices()):
        pytest.skip("no Vulkan device (lavapipe) here")
    d = _run(capsys, "vulkan")
    assert d["correct"] is True, d


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx90a"])
def test_model_on_cdna(capsys, target):
    d = _run(capsys, f"amdgpu:virtual:{target}")
    assert d["correct"] is True, d
