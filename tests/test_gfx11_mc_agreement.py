"""The MC-test yardstick (`hsa.virtual.gfx11.mc_agreement`) on test files made here.

LLVM's own gfx11_dasm_*.txt files are not stored in the repository; these tests write files
of the same form from encodings clang 22 assembles and llvm-mc-19 disassembles, and check
that the measurement finds right what is right and each kind of disagreement."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hsa.virtual.gfx11 import mc_agreement as mc

pytestmark = [pytest.mark.isa_gfx11,
              pytest.mark.skipif(shutil.which("llvm-mc-19") is None,
                                 reason="llvm-mc-19 is not installed")]

SOURCE = """v_add_f32_e32 v5, v1, v2
v_ceil_f16_e32 v5.l, v1.h
s_buffer_load_b64 s[4:5], s[8:11], 0x10
ds_gws_init v3 offset:16 gds
ds_nop
ds_add_rtn_u32 v1, v2, v3 offset:8
global_load_b64 v[2:3], v4, s[6:7] offset:-16
buffer_load_format_d16_xy v1, v2, s[8:11], 0 offen
v_fma_mix_f32 v0, v1, v2, v3 op_sel_hi:[1,1,0]
v_interp_p10_f32 v0, v1, v2, v3
"""


def _lines(source: str) -> list[str]:
    """'# GFX11: text ; encoding: [..]' and byte lines, as LLVM's tests have them."""
    from hsa.virtual.gfx11.decoder import decode_all
    from hsa.virtual.gfx11.gen_tables import assemble_clang22

    code, err = assemble_clang22(source)
    assert code, err
    byte_lines = [",".join(f"0x{b:02x}" for b in code[i.pc:i.pc + i.size])
                  for i in decode_all(code, 0)]
    out = subprocess.run(["llvm-mc-19", "--disassemble", "-triple=amdgcn", "-mcpu=gfx1100",
                          "--show-encoding"], input="\n".join(byte_lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    checks = [line.strip() for line in out.splitlines() if "; encoding:" in line]
    assert len(checks) == len(byte_lines) == len(source.splitlines())
    lines = []
    for check, data in zip(checks, byte_lines, strict=True):
        lines += [f"# GFX11: {check}", data, ""]
    return lines


def _measure(tmp_path: Path, lines: list[str]) -> dict:
    (tmp_path / "gfx11_dasm_made.txt").write_text("\n".join(lines) + "\n")
    per_file, per_format, examples = mc.measure(tmp_path, "gfx11_dasm_*.txt")
    return {"file": per_file["gfx11_dasm_made.txt"], "format": per_format,
            "examples": examples}


def test_right_encodings_measure_right(tmp_path: Path):
    got = _measure(tmp_path, _lines(SOURCE))
    assert got["file"]["right"] == len(SOURCE.splitlines()), got["examples"]
    assert got["format"]["VINTERP"]["right"] == 1  # a graphics format, named
    # registers were compared, on every compute encoding but ds_nop
    compute = sum(c["right"] for f, c in got["format"].items() if f != "VINTERP")
    assert compute - sum(c["no_regs"] for c in got["format"].values()) == compute - 1


def test_each_kind_of_disagreement_is_found(tmp_path: Path):
    lines = _lines("v_add_f32_e32 v5, v1, v2\nv_mul_f32_e32 v5, v1, v2\n"
                   "v_sub_f32_e32 v5, v1, v2\nv_max_f32_e32 v5, v1, v2\n")
    lines[0] = lines[0].replace("v_add_f32", "v_min_f32")  # LLVM says another mnemonic
    lines[3] = lines[3].replace("v5, v1, v2", "v5, v1, v3")  # ... another register
    lines[7] = lines[7][: -len(",0x00,0x00")] + ",0x00,0x00,0x00,0x00"  # ... another size
    lines[9] = "# GFX11: warning: invalid instruction encoding"  # ... no instruction
    got = _measure(tmp_path, lines)
    c = got["file"]
    assert (c["wrong_name"], c["wrong_regs"], c["wrong_size"], c["accepts_invalid"]) == (
        1, 1, 1, 1), dict(c)
    assert c["right"] == 0


def test_true16_halves_are_read_as_our_register_fields(tmp_path: Path):
    """LLVM's real-true16 spelling (newer LLVM's tests, clang 22's syntax): v1.h in a VOP1
    is register field 129; in VOP3 the half is op_sel and the register keeps its number."""
    from hsa.virtual.gfx11.decoder import decode_all
    from hsa.virtual.gfx11.gen_tables import assemble_clang22

    texts = ["v_ceil_f16_e32 v5.l, v1.h", "v_mov_b16_e64 v16.h, v32.l",
             "v_add_f16_e32 v5.l, v1.h, v2.l"]
    code, err = assemble_clang22("\n".join(texts) + "\n")
    assert code, err
    lines = []
    for text, inst in zip(texts, decode_all(code, 0), strict=True):
        data = ",".join(f"0x{b:02x}" for b in code[inst.pc:inst.pc + inst.size])
        lines += [f"# GFX11-REAL16: {text} ; encoding: [{data}]", data, ""]
    got = _measure(tmp_path, lines)
    assert got["file"]["right"] == 3, got["examples"]
    lines[0] = lines[0].replace("v1.h", "v1.l")  # the low half is another register field
    assert _measure(tmp_path, lines)["file"]["wrong_regs"] == 1


def test_command_line_refuses_a_missing_directory(tmp_path: Path):
    import sys

    run = subprocess.run([sys.executable, "-m", "hsa.virtual.gfx11.mc_agreement",
                          str(tmp_path / "absent")], capture_output=True, text=True)
    assert run.returncode != 0
    assert "is not a directory" in run.stderr and "Traceback" not in run.stderr
