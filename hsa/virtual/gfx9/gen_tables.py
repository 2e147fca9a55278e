"""Generate the gfx9 (CDNA) opcode tables, `opcodes_<target>.json`, from LLVM's disassembler.

Run `python -m hsa.virtual.gfx9.gen_tables` (needs `llvm-mc-19`, which knows gfx90a and
gfx942, and the `ziglang` wheel's clang 22 for gfx950: LLVM 19 cannot disassemble gfx950,
so its table is gfx942's plus the gfx950 instructions in `GFX950_ADDED`, whose opcodes are
read back from what clang 22 assembles). As for gfx11 (see hsa/virtual/gfx11/gen_tables.py):
one instruction per opcode value of each encoding, with distinct registers in its fields,
disassembled by LLVM; an
opcode is tried again with optional fields cleared when LLVM rejects it. The tables record
the mnemonic LLVM prints, a sample and the operands LLVM printed (`operands`: [field, width]
for a register read back to the field that held its number, [token] for anything else, as
gfx11's tables; hsa.virtual.gfx9.listing spells an instruction's registers from them);
opcode values LLVM rejects are left out. Data only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# One llvm-mc batch and the cleared-field retries, as for gfx11 (same s_nop markers on gfx9).
from hsa.virtual.gfx11.gen_tables import _variants, disassemble_many
from hsa.virtual.gfx11.gen_tables import operand_fields as gfx11_operand_fields

TARGETS = ("gfx90a", "gfx942")
SDST, SSRC0, SSRC1 = 16, 32, 48
VDST, VSRC0, VSRC1, VSRC2 = 16, 32, 48, 64

Field = tuple[int, int, int]  # (word index, shift, width) of an optional field
Candidate = tuple[int, list[int], list[Field]]


def table_path(target: str) -> Path:
    return Path(__file__).with_name(f"opcodes_{target}.json")


def _w(*words: int) -> list[int]:
    return [w & 0xFFFFFFFF for w in words]


def candidates() -> dict[str, list[Candidate]]:
    out: dict[str, list[Candidate]] = {}

    def add(enc: str, op: int, words: list[int], fields: list[Field] | None = None) -> None:
        out.setdefault(enc, []).append((op, _w(*words), fields or []))

    for op in range(0x80):
        add("SOP2", op, [2 << 30 | op << 23 | SDST << 16 | SSRC1 << 8 | SSRC0])
    for op in range(0x20):
        add("SOPK", op, [0xB << 28 | op << 23 | SDST << 16 | 0x10], [(0, 16, 7)])
    for op in range(0x100):
        add("SOP1", op, [0x17D << 23 | SDST << 16 | op << 8 | SSRC0], [(0, 16, 7), (0, 0, 8)])
    for op in range(0x80):
        add("SOPC", op, [0x17E << 23 | op << 16 | SSRC1 << 8 | SSRC0])
        add("SOPP", op, [0x17F << 23 | op << 16 | 0x10], [(0, 0, 16)])
    for op in range(0x100):  # imm=1, sbase s[2:3], sdata s16, offset 0x10
        add("SMEM", op, [0x30 << 26 | op << 18 | 1 << 17 | SDST << 6 | 1, 0x10],
            [(0, 6, 7), (0, 0, 6), (1, 0, 21), (0, 17, 1)])
    for op in range(0x100):
        add("VOP1", op, [0x3F << 25 | VDST << 17 | op << 9 | (256 + VSRC0)],
            [(0, 17, 8), (0, 0, 9)])
        add("VOPC", op, [0x3E << 25 | op << 17 | VSRC1 << 9 | (256 + VSRC0)])
    for op in range(0x40):
        add("VOP2", op, [op << 25 | VDST << 17 | VSRC1 << 9 | (256 + VSRC0)])
    for op in range(0x400):
        w1 = (256 + VSRC2) << 18 | (256 + VSRC1) << 9 | (256 + VSRC0)
        add("VOP3", op, [0x34 << 26 | op << 16 | VDST, w1],
            [(1, 18, 9), (1, 9, 9), (1, 0, 9), (0, 0, 8), (0, 8, 7)])
    for op in range(0x80):  # op_sel_hi all set (the usual form); MAI ops read AGPR C/D
        w1 = 3 << 27 | (256 + VSRC2) << 18 | (256 + VSRC1) << 9 | (256 + VSRC0)
        add("VOP3P", op, [0x1A7 << 23 | op << 16 | 1 << 14 | VDST, w1],
            [(1, 18, 9), (1, 9, 9), (0, 14, 1), (1, 27, 2), (0, 15, 1)])
    for op in range(0x100):
        w1 = VDST << 24 | VSRC2 << 16 | VSRC1 << 8 | VSRC0
        add("DS", op, [0x36 << 26 | op << 17 | 8 << 8 | 4, w1],
            [(1, 24, 8), (1, 16, 8), (1, 8, 8), (1, 0, 8)])
    for seg, name in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
        for op in range(0x80):  # saddr off
            w1 = VDST << 24 | 0x7F << 16 | VSRC1 << 8 | VSRC0
            add(name, op, [0x37 << 26 | op << 18 | seg << 14 | 0x10, w1],
                [(1, 24, 8), (1, 8, 8), (1, 16, 7), (1, 0, 8)])
    for op in range(0x80):  # offen, srsrc s[16:19], soffset 0
        w1 = 0x80 << 24 | (SDST // 4) << 16 | VSRC1 << 8 | VSRC0
        add("MUBUF", op, [0x38 << 26 | op << 18 | 1 << 12 | 0x10, w1],
            [(1, 8, 8), (1, 0, 8), (0, 12, 1), (0, 0, 12)])
    for op in range(0x10):
        w1 = 0x80 << 24 | (SDST // 4) << 16 | VSRC1 << 8 | VSRC0
        add("MTBUF", op, [0x3A << 26 | 1 << 19 | op << 15 | 1 << 12 | 0x10, w1])
    return out


# Which field held each register number of an encoding's probe (scalar, vector/AccVGPR).
_S3 = {SDST: "sdst", SSRC0: "ssrc0", SSRC1: "ssrc1"}
_V2 = {VDST: "vdst", VSRC0: "src0", VSRC1: "vsrc1", VSRC2: "src2"}
_V3 = {VDST: "vdst", VSRC0: "src0", VSRC1: "src1", VSRC2: "src2"}
_FLAT: tuple[dict[int, str], dict[int, str]] = ({}, {VDST: "vdst", VSRC0: "addr",
                                                     VSRC1: "data"})
_BUF: tuple[dict[int, str], dict[int, str]] = ({SDST: "srsrc"}, {VSRC0: "vaddr",
                                                                 VSRC1: "vdata"})
PROBE_FIELDS: dict[str, tuple[dict[int, str], dict[int, str]]] = {
    "SOP2": (_S3, {}), "SOPK": (_S3, {}), "SOP1": (_S3, {}), "SOPC": (_S3, {}),
    "SOPP": ({}, {}), "SMEM": ({SDST: "sdata", 2: "sbase"}, {}),
    "VOP1": ({}, _V2), "VOP2": ({}, _V2), "VOPC": ({}, _V2), "VOP3": ({}, _V3),
    "VOP3P": ({}, _V3), "DS": ({}, {VDST: "vdst", VSRC0: "addr", VSRC1: "data0",
                                    VSRC2: "data1"}),
    "FLAT": _FLAT, "GLOBAL": _FLAT, "SCRATCH": _FLAT, "MUBUF": _BUF, "MTBUF": _BUF}


def operand_fields(enc: str, text: str) -> list[list]:
    """[[field, width]] for the registers of LLVM's `text` of the probe of `enc` (an AccVGPR
    a[..] is read back like a VGPR: the instruction's acc bits say which file), [token] for
    anything else."""
    sregs, vregs = PROBE_FIELDS[enc]
    return gfx11_operand_fields(text, sregs, vregs)


def with_operands(tables: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    for enc, table in tables.items():
        for info in table.values():
            info["operands"] = operand_fields(enc, info["sample"])
    return tables


def build(target: str) -> dict[str, dict[str, dict]]:
    tables: dict[str, dict[str, dict]] = {}
    for enc, items in candidates().items():
        tries = [_variants(words, fields) for _, words, fields in items]
        if enc == "DS":  # the GWS ops exist only with gds (bit 16) set, ds_nop with all
            # fields zero
            tries = [t + [[w[0] | 1 << 16] + w[1:] for w in t] + [[t[0][0] & ~0x1FFFF, 0]]
                     for t in tries]
        found: dict[int, str] = {}
        for level in range(max(len(t) for t in tries)):
            todo = [i for i in range(len(items)) if i not in found and level < len(tries[i])]
            texts = disassemble_many([tries[i][level] for i in todo], target) if todo else []
            for i, text in zip(todo, texts, strict=True):
                if not text or text.startswith("."):
                    continue
                if text.startswith("s_nop") and not (enc == "SOPP" and items[i][0] == 0):
                    continue
                found[i] = text
        tables[enc] = {str(items[i][0]): {"name": text.split()[0], "sample": text}
                       for i, text in sorted(found.items())}
        print(f"{target} {enc}: {len(tables[enc])} opcodes", file=sys.stderr)
    return with_operands(tables)


# gfx950 additions (CDNA4): sample text as LLVM prints it; the encoding comes from clang 22.
GFX950_ADDED = {"VOP3P": [
    "v_mfma_f32_16x16x32_f16 v[4:7], v[0:3], v[8:11], 0",
    "v_mfma_f32_32x32x16_f16 v[16:31], v[0:3], v[8:11], 0",
    "v_mfma_f32_16x16x32_bf16 v[4:7], v[0:3], v[8:11], 0",
    "v_mfma_f32_32x32x16_bf16 v[16:31], v[0:3], v[8:11], 0",
    "v_mfma_i32_16x16x64_i8 v[4:7], v[0:3], v[8:11], 0",
    "v_mfma_i32_32x32x32_i8 v[16:31], v[0:3], v[8:11], 0",
    # the 8/6/4-bit float MFMA: cbsz / blgp pick A's / B's format (0 fp8, 1 bf8, ...)
    "v_mfma_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[0:3]",
    "v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15]",
    # sparse MFMA with twice gfx942's K: A 4 VGPRs, B 8, 16-bit index sets for 16-bit data
    "v_smfmac_f32_16x16x64_f16 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_f32_16x16x64_bf16 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_i32_16x16x128_i8 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_f32_16x16x128_bf8_bf8 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_f32_16x16x128_bf8_fp8 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_f32_16x16x128_fp8_bf8 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_f32_16x16x128_fp8_fp8 v[16:19], v[32:35], v[48:55], v64",
    "v_smfmac_f32_32x32x32_f16 v[16:31], v[32:35], v[48:55], v64",
    "v_smfmac_f32_32x32x32_bf16 v[16:31], v[32:35], v[48:55], v64",
    "v_smfmac_i32_32x32x64_i8 v[16:31], v[32:35], v[48:55], v64",
    "v_smfmac_f32_32x32x64_bf8_bf8 v[16:31], v[32:35], v[48:55], v64",
    "v_smfmac_f32_32x32x64_bf8_fp8 v[16:31], v[32:35], v[48:55], v64",
    "v_smfmac_f32_32x32x64_fp8_bf8 v[16:31], v[32:35], v[48:55], v64",
    "v_smfmac_f32_32x32x64_fp8_fp8 v[16:31], v[32:35], v[48:55], v64",
    "v_dot2_f32_bf16 v5, v1, v2, v3",
], "VOP3": [
    "v_bitop3_b32 v3, v18, v8, v7 bitop3:0x1e", "v_bitop3_b16 v3, v18, v8, v7 bitop3:0x1e",
    "v_cvt_pk_bf16_f32 v5, v1, v2", "v_cvt_pk_f16_f32 v5, v1, v2",
    "v_cvt_sr_bf16_f32 v5, v1, v2", "v_cvt_sr_f16_f32 v5, v1, v2",
    "v_ashr_pk_i8_i32 v5, v1, v2, v3", "v_ashr_pk_u8_i32 v5, v1, v2, v3",
    "v_minimum3_f32 v5, v1, v2, v3", "v_maximum3_f32 v5, v1, v2, v3",
    "v_permlane16_swap_b32_e64 v1, v2", "v_permlane32_swap_b32_e64 v1, v2",
    "v_prng_b32_e64 v1, v2", "v_cvt_f32_bf16_e64 v1, v2",
], "DS": [
    "ds_read_b64_tr_b16 v[0:1], v2", "ds_read_b64_tr_b8 v[0:1], v2",
    "ds_read_b64_tr_b4 v[0:1], v2", "ds_read_b96_tr_b6 v[0:2], v2",
], "VOP1": [
    "v_permlane32_swap_b32 v1, v2", "v_permlane16_swap_b32 v1, v2", "v_prng_b32 v1, v2",
    "v_cvt_f32_bf16 v1, v2",
], "GLOBAL": [
    "global_load_lds_dwordx3 v[2:3], off", "global_load_lds_dwordx4 v[2:3], off",
]}
_OPCODE = {"VOP3P": (16, 0x7F), "VOP3": (16, 0x3FF), "DS": (17, 0xFF), "VOP1": (9, 0xFF),
           "GLOBAL": (18, 0x7F)}


def assemble_gfx950(lines: list[str]) -> list[int]:
    """First dword of each line as clang 22 (ziglang wheel) assembles it for gfx950."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "a.s", Path(tmp) / "a.o"
        src.write_text("".join(line + "\n" for line in lines))
        subprocess.run([sys.executable, "-m", "ziglang", "clang", "-target",
                        "amdgcn-amd-amdhsa", "-mcpu=gfx950", "-c", "-x", "assembler",
                        str(src), "-o", str(obj)], check=True, capture_output=True)
        raw = Path(tmp) / "a.bin"
        subprocess.run(["llvm-objcopy-19", "-O", "binary", "--only-section=.text", str(obj),
                        str(raw)], check=True, capture_output=True)
        code = raw.read_bytes()
    words = [int.from_bytes(code[i:i + 4], "little") for i in range(0, len(code), 4)]
    firsts: list[int] = []
    i = 0
    while i < len(words) and len(firsts) < len(lines):  # VOP1 is one dword, the rest two
        firsts.append(words[i])
        i += 1 if words[i] >> 25 == 0x3F else 2
    return firsts


def build_gfx950() -> dict[str, dict[str, dict]]:
    tables = build("gfx942")
    for enc, lines in GFX950_ADDED.items():
        for line, w0 in zip(lines, assemble_gfx950(lines), strict=True):
            shift, mask = _OPCODE[enc]
            tables[enc][str((w0 >> shift) & mask)] = {"name": line.split()[0], "sample": line}
    return with_operands(tables)


def main() -> None:
    for target in TARGETS:
        table_path(target).write_text(json.dumps(build(target), indent=1, sort_keys=True) + "\n")
    table_path("gfx950").write_text(json.dumps(build_gfx950(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
