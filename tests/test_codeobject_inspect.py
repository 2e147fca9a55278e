"""`python -m compiler inspect FILE [--json]` on code objects, bundles and bad files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amdgpu.errors import CodeObjectError
from compiler.__main__ import main
from compiler.bundle import KernelBundle, Variant

pytestmark = pytest.mark.generic


def test_inspect_json_code_object(code_objects, capsys) -> None:
    built = code_objects[("gfx942:sramecc+:xnack-", 5)]
    assert main(["inspect", str(built.hsaco), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "code_object" and doc["target_id"] == "gfx942:sramecc+:xnack-"
    assert doc["code_object_version"] == 5
    saxpy = doc["kernels"]["saxpy"]
    assert saxpy["kernarg_segment_size"] == 280 and saxpy["wavefront_size"] == 64
    assert saxpy["args"][2]["value_kind"] == "by_value"
    assert saxpy["descriptor"]["kernarg_size"] == 280
    assert saxpy["descriptor"]["wavefront_size32"] is False


def test_inspect_tables(code_objects, capsys) -> None:
    built = code_objects[("gfx1100", 5)]
    assert main(["inspect", str(built.obj)]) == 0
    out = capsys.readouterr().out
    for text in ("gfx1100", "lds_reverse", "hidden_block_count_x", "kernel descriptor",
                 "compute_pgm_rsrc2", "relocatable"):
        assert text in out


def test_inspect_bundle(code_objects, tmp_path, capsys) -> None:
    bundle = KernelBundle("kernels", "ef" * 32, program={"dispatches": []})
    for key in (("gfx942:sramecc+:xnack-", 5), ("gfx1201", 5)):
        bundle.add(Variant.from_code_object(code_objects[key].read()))
    bundle.add(Variant("spirv", "vulkan", "bda", b"\x03\x02\x23\x07"))
    path = bundle.save(tmp_path / "kernels.kbundle")
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "bundle" and doc["name"] == "kernels"
    assert [v["target"] for v in doc["variants"]] == [
        "gfx942:sramecc+:xnack-", "gfx1201", "vulkan"]
    assert doc["code_objects"]["gfx1201"]["kernels"]["saxpy"]["wavefront_size"] == 32
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bundle 'kernels'" in out and "bda" in out and "gfx1201" in out


def test_inspect_bad_file_is_one_line_exit_1(tmp_path, capsys) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    assert main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: not an ELF file") and err.count("\n") == 1
    assert main(["inspect", str(tmp_path / "missing.hsaco")]) == 1
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(CodeObjectError):
        main(["inspect", str(bad), "--debug"])


def test_module_entry_point_has_no_traceback(tmp_path) -> None:
    bad = tmp_path / "bad.hsaco"
    bad.write_bytes(b"\x7fELF" + bytes(100))
    proc = subprocess.run([sys.executable, "-m", "compiler", "inspect", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: not an AMDGPU code object")
