"""The gfx9/gfx12 MC-test yardstick (`hsa.virtual.mc_agreement`) on test files made here.

LLVM's own test files are not stored in the repository; these tests write files of the
same form (byte lines) from encodings llvm-mc-19 assembles, and check that the runner finds
right what is right, catches an encoding LLVM rejects that a decoder takes, and that the
gfx9 decoder refuses the operand forms LLVM's disassembler refuses (odd MFMA tuples,
register pairs past the file, SDWA on 64-bit sources, literals in VOP3)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hsa.virtual import mc_agreement as mc

pytestmark = [pytest.mark.isa_gfx9, pytest.mark.isa_gfx12,
              pytest.mark.skipif(shutil.which("llvm-mc-19") is None,
                                 reason="llvm-mc-19 is not installed")]

GFX940 = """ds_gws_init v2 offset:16 gds
ds_gws_barrier v2 offset:16 gds
ds_gws_sema_v offset:16 gds
ds_nop
v_mfma_f32_32x32x8_f16 v[0:15], v[16:17], v[18:19], v[0:15]
v_fmac_f64_e32 v[4:5], v[2:3], v[4:5]
buffer_wbl2 sc0 sc1
buffer_inv sc0 sc1
global_load_lds_dword v[2:3], off
s_dcache_wb
"""
GFX1201 = """image_load v[0:3], v0, s[0:7] dmask:0xf dim:SQ_RSRC_IMG_1D
s_add_co_u32 s1, s2, s3
v_max_num_f32_e32 v1, v2, v3
s_cvt_f32_u32 s1, s2
s_fmaak_f32 s1, s2, s3, 0x3f800000
v_s_rcp_f32 s1, s2
global_inv scope:SCOPE_SYS
global_atomic_add_u32 v1, v2, v3, s[4:5] th:TH_ATOMIC_RETURN
ds_nop
"""
# encodings LLVM 19's disassembler rejects on gfx940 though their opcode is known
REJECTED_GFX940 = [
    "0x01,0x05,0xfe,0x09",  # v_fmac_f64_e32 v[255:256]: past the register file
    "0xf9,0x04,0x0a,0x08,0x01,0x06,0x06,0x06",  # v_fmac_f64 SDWA (no SDWA on f64)
    "0x05,0x00,0x04,0xd1,0xff,0x05,0x02,0x00",  # v_fmac_f64_e64 with a literal code
    "0x05,0x00,0x04,0xd1,0x67,0x04,0x02,0x00",  # s[103:104]: runs into xnack_mask
]


def _assembled(source: str, mcpu: str) -> list[str]:
    out = subprocess.run(["llvm-mc-19", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}",
                          "-show-encoding"], input=source, capture_output=True, text=True,
                         check=True).stdout
    lines = [m.group(1) for m in re.finditer(r"encoding: \[([^\]]*)\]", out)]
    assert len(lines) == len(source.splitlines()), out
    return lines


def _measure(tmp_path: Path, name: str, lines: list[str], target: str) -> dict:
    (tmp_path / name).write_text("\n\n".join(lines) + "\n")
    per_file, per_format, examples = mc.measure(tmp_path, mc._targets()[target])
    return {"file": per_file[name], "examples": examples}


def test_gfx942_right_encodings_measure_right(tmp_path: Path):
    got = _measure(tmp_path, "gfx940_made.txt", _assembled(GFX940, "gfx940"), "gfx942")
    assert got["file"]["right"] == len(GFX940.splitlines()), got["examples"]


def test_gfx1201_right_encodings_measure_right(tmp_path: Path):
    got = _measure(tmp_path, "gfx12_dasm_made.txt", _assembled(GFX1201, "gfx1201"),
                   "gfx1201")
    assert got["file"]["right"] == len(GFX1201.splitlines()), got["examples"]


def test_gfx9_decoder_refuses_what_llvm_refuses(tmp_path: Path):
    assert mc.llvm_decode([bytes(int(b, 16) for b in line.split(","))
                           for line in REJECTED_GFX940], "gfx940") == [None] * 4
    got = _measure(tmp_path, "gfx940_bad.txt", REJECTED_GFX940, "gfx942")
    assert got["file"]["right"] == len(REJECTED_GFX940), got["examples"]


def test_an_accepted_invalid_encoding_is_counted(tmp_path: Path, monkeypatch):
    """A decoder that takes an encoding LLVM rejects is caught (here: the gfx9 decoder
    with its validity rules switched off)."""
    from hsa.virtual.gfx9 import decoder as d9

    monkeypatch.setattr(d9, "_invalid", lambda *a: None)
    got = _measure(tmp_path, "gfx940_bad.txt", REJECTED_GFX940, "gfx942")
    assert got["file"]["accepts_invalid"] == len(REJECTED_GFX940)


# register operands of every kind the listings spell: AccVGPRs (MAI C/D, acc loads), SGPR
# pairs written by VOP3 and SDWA compares, specials, scratch "off", SDWA scalar sources
GFX940_REGS = """v_mfma_f32_32x32x8_f16 a[0:15], v[16:17], v[18:19], a[0:15]
v_mfma_f32_16x16x16_f16 v[0:3], a[4:5], v[6:7], v[0:3]
v_accvgpr_write_b32 a3, v7
v_accvgpr_read_b32 v2, a9
global_load_dword a1, v[2:3], off
scratch_load_dword v5, off, s2
v_cmp_lt_f32_e64 s[6:7], v1, s3
v_cmp_eq_f16_sdwa s[6:7], v1, v2 src0_sel:WORD_1 src1_sel:DWORD
v_add_co_u32_e64 v1, s[4:5], v2, v3
v_cndmask_b32_e64 v5, v1, v2, s[6:7]
v_readlane_b32 s5, v1, s2
s_load_dwordx2 s[10:11], s[2:3], s0 offset:0x10
buffer_load_dword v1, v2, s[4:7], s3 offen
ds_write_b64 v1, v[2:3] offset:8
v_smfmac_f32_16x16x32_f16 a[0:3], v[0:1], v[2:5], v6
s_mov_b64 exec, vcc
"""


def test_gfx942_register_operands_agree(tmp_path: Path):
    got = _measure(tmp_path, "gfx940_regs.txt", _assembled(GFX940_REGS, "gfx940"), "gfx942")
    lines = len(GFX940_REGS.splitlines())
    assert got["file"]["right"] == lines, got["examples"]
    per_file, per_format, _ = mc.measure(tmp_path, mc._targets()["gfx942"])
    assert sum(c["no_regs"] for c in per_format.values()) == 0  # all compared


def test_an_odd_sgpr_pair_is_the_aligned_pair(tmp_path: Path):
    """src0 code 3 as a 64-bit source: LLVM reads s[2:3] (SGPR pairs are even-aligned);
    the decoder names the same pair (before, s[3:4]: a wrong_regs)."""
    from hsa.virtual.gfx9 import decoder as d9

    got = _measure(tmp_path, "gfx940_odd.txt", ["0x03,0x08,0x08,0x08"], "gfx942")
    assert got["file"]["right"] == 1, got["examples"]
    assert d9.decode_one([0x08080803, 0, 0], 0, 0, "gfx942").f["src0"] == 2


def test_a_wrong_register_is_counted(tmp_path: Path, monkeypatch):
    """A decoder that reads a register field wrong is caught by the register comparison
    (here: the gfx9 and gfx12 decoders with VOP2's vsrc1 one register off)."""
    from hsa.virtual.gfx9 import decoder as d9
    from hsa.virtual.gfx12 import decoder as d12

    for module, target, mcpu, text in ((d9, "gfx942", "gfx940", "v_add_f32 v1, v2, v3"),
                                       (d12, "gfx1201", "gfx1201", "v_add_f32 v1, v2, v3")):
        real = module.decode_one

        def off_by_one(words, *a, real=real):
            inst = real(words, *a)
            if inst.encoding == "VOP2":
                inst.f["vsrc1"] += 1
            return inst

        monkeypatch.setattr(module, "decode_one", off_by_one)
        prefix = "gfx940" if target == "gfx942" else "gfx12_dasm"
        got = _measure(tmp_path, f"{prefix}_one.txt", _assembled(text + "\n", mcpu), target)
        assert got["file"]["wrong_regs"] == 1, got["examples"]
        monkeypatch.undo()


def test_missing_lists_refused_opcodes():
    cov = mc.missing("gfx942")
    refused = {n for _, names in cov.values() for n in names}
    assert "s_dcache_wb" not in refused and "buffer_wbl2" not in refused
    assert not {n for n in refused if "mfma" in n}  # dense and sparse (v_smfmac_*) MFMA
    assert sum(t for t, _ in cov.values()) > 1000


def test_command_line_refuses_a_missing_directory(tmp_path: Path):
    run = subprocess.run([sys.executable, "-m", "hsa.virtual.mc_agreement",
                          str(tmp_path / "absent"), "--target", "gfx90a"],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert "is not a directory" in run.stderr and "Traceback" not in run.stderr


def test_clang22_targets_measure_right(tmp_path: Path):
    """gfx950 and gfx1250 (unknown to LLVM 19): the check lines' texts, assembled by clang 22
    each into a section of its own, decode to their mnemonic and size; gfx90a's MFMA
    spelling is gfx940's instruction."""
    from toolchains import require_clang

    require_clang()
    lines = ["# GFX940: v_mfma_f32_4x4x1f32 v[0:3], v0, v1, v[2:5] ; encoding: [0x00]",
             "# GFX940: v_fmac_f64_e32 v[4:5], v[2:3], v[4:5] ; encoding: [0x00]",
             "# GFX940: buffer_wbl2 sc0 sc1 ; encoding: [0x00]",
             "# GFX940: not_an_instruction v1 ; encoding: [0x00]"]
    (tmp_path / "gfx940_made.txt").write_text("\n".join(lines) + "\n")
    per_file, _, examples = mc.measure(tmp_path, mc._targets()["gfx950"])
    assert per_file["gfx940_made.txt"]["right"] == 3, examples  # clang rejects the 4th
    (tmp_path / "gfx12_dasm_made.txt").write_text(
        "# GFX12: s_cvt_f32_u32 s1, s2 ; encoding: [0x00]\n"
        "# GFX12: v_max_num_f32_e32 v1, v2, v3 ; encoding: [0x00]\n")
    per_file, _, examples = mc.measure(tmp_path, mc._targets()["gfx1250"], own=False)
    assert per_file["gfx12_dasm_made.txt"]["right"] == 2, examples


# gfx1250's own instructions (no LLVM 19 test file has them): VOP2/VOP3 64-bit integer ops,
# an SGPR written through vdst, a constant operand that may be m0, a transposing load, and
# VOPD3 pairs (third VGPR source, the lane-mask SGPR)
GFX1250_OWN = ["v_add_nc_u64_e32 v[0:1], v[2:3], v[4:5]",
               "v_mad_nc_u64_u32 v[0:1], s4, ttmp9, v[0:1]",
               "v_s_rcp_f32 s16, s4",
               "s_get_barrier_state s0, -1",
               "global_load_tr8_b64 v[16:17], v[32:33], off offset:16",
               "v_dual_fma_f32 v0, v1, v2, v3 :: v_dual_fma_f32 v5, v6, v7, v9",
               "v_dual_cndmask_b32 v0, v1, v2, s3 :: v_dual_fma_f32 v5, v6, v7, v9"]


def _judge_own(texts: list[str]) -> Counter:
    from hsa.virtual.gfx12.gen_gfx1250 import encode, register_variants

    target = mc._targets()["gfx1250"]
    variants = [v for t in texts for v in register_variants(t)]
    got: Counter = Counter()
    for text, data in zip(variants, encode(variants), strict=True):
        if data is not None:
            name, _, operands = text.partition(" ")
            got[mc.judge(target, data, (name, len(data), operands))[1]] += 1
    return got


def test_gfx1250_own_instructions_agree_with_clang22():
    """Each of gfx1250's own table entries has an operand list (derived from clang 22's
    encoding of its sample), and its register variants that clang 22 takes decode to the
    registers their text names (m0 where the sample had -1, v255, ttmp, SGPR bases)."""
    from toolchains import require_clang

    from hsa.virtual.gfx12 import decoder as d12

    require_clang()
    tables = d12.opcode_tables("gfx1250")
    assert all("operands" in info for table in tables.values() for info in table.values())
    got = _judge_own(GFX1250_OWN)
    assert got["right"] >= 40 and set(got) == {"right"}, got


def test_gfx1250_wrong_third_source_is_caught(monkeypatch):
    """A VOPD3 decoder that reads the X half's third source one register off is caught."""
    from toolchains import require_clang

    from hsa.virtual.gfx12 import decoder as d12

    require_clang()
    real = d12._decode_vopd3

    def off_by_one(*a):
        inst = real(*a)
        inst.f["vsrc2x"] += 1
        return inst

    monkeypatch.setattr(d12, "_decode_vopd3", off_by_one)
    got = _judge_own(GFX1250_OWN[5:6])
    assert got["wrong_regs"] >= 4 and not got["right"], got
