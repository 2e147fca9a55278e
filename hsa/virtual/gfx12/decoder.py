"""Decode gfx12 (gfx1201 RDNA4, gfx1250 CDNA5) machine code into typed `Instruction`s.

gfx12 keeps gfx11's bit layouts for SOP1/SOP2/SOPK/SOPC/SOPP, VOP1/VOP2/VOPC/VOP3/VOP3P,
VOPD and DS: those are decoded by the gfx11 decoder and named from gfx12's own table
(`opcodes.json`, generated from LLVM's gfx1201 disassembler by `gen_tables.py`), since gfx12
renumbers and renames opcodes. SMEM, VFLAT/VGLOBAL/VSCRATCH (96 bits) and VBUFFER (96 bits)
are gfx12 layouts, decoded here into the field names the shared core reads. Where gfx12
renamed an instruction whose semantics are gfx11's (`s_add_co_u32` for `s_add_u32`,
`v_mad_co_u64_u32`, the `*_num_*` min/max...), the Instruction carries the core's name.
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path

from hsa.virtual.gfx11 import decoder as gfx11
from hsa.virtual.isa.operands import LITERAL, LITERAL64, VGPR0, Instruction
from hsa.virtual.isa.valu import base_name

# gfx12 mnemonic -> the core's (gfx11) mnemonic for the same operation.
RENAMED = {
    "s_add_co_u32": "s_add_u32", "s_sub_co_u32": "s_sub_u32", "s_add_co_i32": "s_add_i32",
    "s_sub_co_i32": "s_sub_i32", "s_add_co_ci_u32": "s_addc_u32",
    "s_sub_co_ci_u32": "s_subb_u32", "s_addk_co_i32": "s_addk_i32",
    "v_mad_co_u64_u32": "v_mad_u64_u32", "v_mad_co_i64_i32": "v_mad_i64_i32",
    "global_atomic_sub_clamp_u32": "global_atomic_csub_u32",
    "s_wait_alu": "s_waitcnt_depctr",
    "s_get_pc_i64": "s_getpc_b64", "s_set_pc_i64": "s_setpc_b64",
    "s_swap_pc_i64": "s_swappc_b64", "s_rfe_i64": "s_rfe_b64", "s_call_i64": "s_call_b64",
}
# Top six bits of the gfx12-only layouts; gfx1250's VOPD3 is the top byte 0xCF.
SMEM, VFLAT, VBUFFER = 0x3D, 0x3B, 0x31
VIMAGE, VSAMPLE = 0x34, 0x39  # 96-bit image formats: named by format, refused by the core
VOPD3 = 0xCF
# Source fields that may hold gfx1250's 64-bit literal (operand 254).
SOURCE_FIELDS = ("ssrc0", "ssrc1", "src0", "src1", "src2", "src0x", "src0y")
FLAT_SEGMENTS = ("FLAT", "SCRATCH", "GLOBAL", "FLAT")


# Opcode tables per target: gfx1201 from llvm-mc-19's disassembler (gen_tables.py), gfx1250
# from clang 22's assembler (gen_gfx1250.py).
TABLE_FILES = {"gfx1201": "opcodes.json", "gfx1250": "opcodes_gfx1250.json"}


@lru_cache(maxsize=4)
def opcode_tables(target: str = "gfx1201") -> dict[str, dict[int, dict]]:
    raw = json.loads(Path(__file__).with_name(TABLE_FILES[target]).read_text())
    return {enc: {int(op): info for op, info in table.items()} for enc, table in raw.items()}


@lru_cache(maxsize=1)
def _core_names() -> frozenset[str]:
    """The core's mnemonics, with and without their encoding suffixes (gfx11 has only
    VOP3's v_min_f64 where gfx12 has v_min_num_f64_e32 and _e64 too)."""
    names = {info["name"] for table in gfx11.opcode_tables().values()
             for info in table.values()}
    return frozenset(names | {base_name(n) for n in names})


def core_name(name: str) -> str:
    """The mnemonic the shared core implements for gfx12's `name`."""
    if name in RENAMED:
        return RENAMED[name]
    if "_num_" in name:  # v_max_num_f32, ds_min_num_f32, v_dual_min_num_f32: IEEE minNum
        old = name.replace("_num_", "_")
        if base_name(old) in _core_names():
            return old
    if name.endswith("_num") and name[:-4] in _core_names():
        return name[:-4]
    return name


def _name(enc: str, op: int, target: str = "gfx1201") -> str:
    info = opcode_tables(target).get(enc, {}).get(op)
    return core_name(info["name"]) if info else "<unknown>"


def decoder_for(target: str):
    """decode_one for one gfx12 target (its own opcode table)."""
    def decode(words, index: int, pc: int) -> Instruction:
        return decode_one(words, index, pc, target)
    return decode


def decode_one(words: list[int] | tuple[int, ...], index: int, pc: int,
               target: str = "gfx1201") -> Instruction:
    def word(k: int) -> int:
        return words[index + k] if index + k < len(words) else 0

    w0 = word(0)
    top6 = w0 >> 26
    if top6 == SMEM:
        w1 = word(1)
        op = (w0 >> 13) & 0x3F  # bit 20 is gfx1250's nv, bits 22:21 the scope
        f = dict(sdata=(w0 >> 6) & 0x7F, sbase=(w0 & 0x3F) * 2, glc=0, dlc=0,
                 offset=gfx11._sext(w1 & 0xFFFFFF, 24), soffset=(w1 >> 25) & 0x7F,
                 th=(w0 >> 23) & 7, scope=(w0 >> 21) & 3)
        return Instruction(pc, 8, "SMEM", op, _name("SMEM", op, target), f, None, (w0, w1))
    if top6 == VFLAT:
        w1, w2 = word(1), word(2)
        seg = (w0 >> 24) & 3
        enc = FLAT_SEGMENTS[seg]
        op = (w0 >> 14) & 0x7F
        f = dict(seg=seg, offset=gfx11._sext(w2 >> 8, 24), glc=0, slc=0, dlc=0,
                 addr=w2 & 0xFF, data=(w1 >> 23) & 0xFF, saddr=w0 & 0x7F,
                 sve=(w1 >> 17) & 1, vdst=w1 & 0xFF, th=(w1 >> 20) & 7,
                 scope=(w1 >> 18) & 3)
        if target == "gfx1250" and (w1 >> 16) & 1:
            f["scale_offset"] = 1  # the VGPR offset is in elements of the access's size
        name = _name(enc, op, target)
        if "_atomic_" in name:  # TH_ATOMIC_RETURN (th bit 0): the core's glc for atomics
            f["glc"] = f["th"] & 1
        return Instruction(pc, 12, enc, op, name, f, None, (w0, w1, w2))
    if top6 == VBUFFER:
        w1, w2 = word(1), word(2)
        op = (w0 >> 14) & 0xFF
        # LLVM's VBUFFER: tfe [22], th [54:52], scope [51:50], format [61:55]
        f = dict(offset=w2 >> 8, glc=0, dlc=0, slc=0, vaddr=w2 & 0xFF, vdata=w1 & 0xFF,
                 srsrc=(w1 >> 9) & 0x1FF, tfe=(w0 >> 22) & 1, offen=(w1 >> 30) & 1,
                 idxen=(w1 >> 31) & 1, soffset=w0 & 0x7F, format=(w1 >> 23) & 0x7F,
                 th=(w1 >> 20) & 7, scope=(w1 >> 18) & 3)
        if target == "gfx1250":
            f["vsharp57"] = 1  # gfx1250's V#: 57-bit base, 45-bit num_records
        name = _name("VBUFFER", op, target)
        if "_atomic_" in name:  # TH_ATOMIC_RETURN: the core's glc for atomics
            f["glc"] = f["th"] & 1
        enc = "MTBUF" if name.startswith("tbuffer") else "MUBUF"
        return Instruction(pc, 12, enc, op, name, f, None, (w0, w1, w2))
    if top6 in (VIMAGE, VSAMPLE):
        enc = "VIMAGE" if top6 == VIMAGE else "VSAMPLE"
        op = (w0 >> 14) & 0xFF
        return Instruction(pc, 12, enc, op, "<unknown>", {}, None, (w0, word(1), word(2)))
    if w0 >> 24 == VOPD3 and target == "gfx1250":
        return _decode_vopd3(word, pc, target)
    inst = gfx11.decode_one(words, index, pc)
    if target == "gfx1250" and inst.literal is None and LITERAL64 in (
            inst.f.get(k) for k in SOURCE_FIELDS):
        # operand 254: a 64-bit literal, low dword first, after the instruction's words
        n = inst.size // 4
        inst.literal = word(n) | word(n + 1) << 32
        inst.size += 8
        inst.words = tuple(word(k) for k in range(n + 2))
    if inst.encoding == "SOP2" and inst.literal is None and _name("SOP2", inst.op, target) in (
            "s_fmaak_f32", "s_fmamk_f32", "s_fmaak_f16", "s_fmamk_f16"):
        # gfx12 scalar float: the K constant is a literal dword after the instruction
        inst.literal = word(1)
        inst.size = 8
        inst.words = (w0, word(1))
    if inst.encoding == "VOPD":
        x, y = _name("VOPDX", inst.f["opx"], target), _name("VOPDY", inst.f["opy"], target)
        inst.name = "<unknown>" if "<unknown>" in (x, y) else f"{x} :: {y}"
    elif inst.name != "<outside code>" and inst.encoding in opcode_tables(target):
        inst.name = _name(inst.encoding, inst.op, target)
    if inst.encoding == "VOP3P" and inst.name.startswith("v_wmma_"):
        inst.f["gfx12_wmma"] = 1  # gfx12's A/B/D register layouts, not gfx11's
    return inst


def _decode_vopd3(word, pc: int, target: str) -> Instruction:
    """gfx1250's VOPD3 (96 bits, LLVM's VOPD3e): two VOP3-like halves with a third source
    and neg modifiers. opY [17:12], opX [23:18], src0X [8:0]; src0Y [40:32], neg bits
    [46:41] (src0X, vsrc1X, vsrc2X, src0Y, vsrc1Y, vsrc2Y); vsrc1X [55:48], vsrc2X [63:56];
    vdstX [71:64], vsrc1Y [79:72], vsrc2Y or bitop3 [87:80], vdstY [95:88]. vsrc fields
    are VGPRs, except v_dual_cndmask_b32's vsrc2 (the lane mask SGPR)."""
    w0, w1, w2 = word(0), word(1), word(2)
    opx, opy = (w0 >> 18) & 0x3F, (w0 >> 12) & 0x3F
    f = dict(opx=opx, opy=opy, src0x=w0 & 0x1FF, src0y=w1 & 0x1FF,
             negx=(w1 >> 9) & 7, negy=(w1 >> 12) & 7,
             vsrc1x=VGPR0 + ((w1 >> 16) & 0xFF), vsrc2x=(w1 >> 24) & 0xFF,
             vdstx=w2 & 0xFF, vsrc1y=VGPR0 + ((w2 >> 8) & 0xFF), vsrc2y=(w2 >> 16) & 0xFF,
             vdsty=(w2 >> 24) & 0xFF)
    x, y = _name("VOPD3X", opx, target), _name("VOPD3Y", opy, target)
    name = "<unknown>" if "<unknown>" in (x, y) else f"{x} :: {y}"
    size, literal = 12, None
    if LITERAL in (f["src0x"], f["src0y"]):
        literal, size = word(3), 16
    elif LITERAL64 in (f["src0x"], f["src0y"]):
        literal, size = word(3) | word(4) << 32, 20
    return Instruction(pc, size, "VOPD3", 0, name, f, literal,
                       tuple(word(k) for k in range(size // 4)))


# gfx1250's s_set_vgpr_msb: its immediate's low byte holds four 2-bit fields, bits [9:8] of
# the VGPR number of four operand slots (src0 [1:0], src1 [3:2], src2 [5:4], dst [7:6]; the
# high byte only records the previous mode). Which operand each slot addresses depends on
# the encoding (LLVM's AMDGPULowerVGPREncoding pass and getVGPRLoweringOperandTables):
# VALU src0/src1/src2/vdst; DS addr/data0/data1/vdst; FLAT/GLOBAL/SCRATCH vaddr/vdata/-/vdst;
# buffers vaddr/-/-/vdata; VOPD both halves' src0/vsrc1/vsrc2/vdst; a literal in the second
# source (fmamk) shifts the next source into slot 2. The mode lasts until the next
# s_set_vgpr_msb; LLVM's ABI has it zero at entry.
_MSB_SLOTS = {
    "DS": ("addr", "data0", "data1", "vdst"),
    "FLAT": ("addr", "data", None, "vdst"), "GLOBAL": ("addr", "data", None, "vdst"),
    "SCRATCH": ("addr", "data", None, "vdst"),
    "MUBUF": ("vaddr", None, None, "vdata"), "MTBUF": ("vaddr", None, None, "vdata"),
}
_VALU = ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P")
_SGPR_DEST = ("v_cmp", "v_readlane_b32", "v_readfirstlane_b32")  # vdst names an SGPR
_OPERAND_CODES = ("src0", "src1", "src2", "vsrc1", "src0x", "src0y", "vsrc1x", "vsrc1y")


def _banked(f: dict, key: str, bank: int) -> None:
    """Add `bank` * 256 to the VGPR in field `key` (an operand code for sources: only VGPR
    codes move; a raw VGPR number otherwise)."""
    if not bank or key not in f:
        return
    if key in _OPERAND_CODES:
        if f[key] >= VGPR0:
            f[key] += 256 * bank
    else:
        f[key] += 256 * bank


def apply_vgpr_msb(inst: Instruction, msb: int) -> Instruction | None:
    """`inst` as it executes under s_set_vgpr_msb mode `msb` (VGPR numbers 256 and up), or
    None where its encoding is not modelled here (DPP sources, images)."""
    bank = [(msb >> (2 * k)) & 3 for k in range(4)]
    f = dict(inst.f)
    enc, name = inst.encoding, inst.name
    if enc in ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM"):
        return inst
    if enc in _MSB_SLOTS:
        for key, b in zip(_MSB_SLOTS[enc], bank, strict=True):
            if key is not None:
                _banked(f, key, b)
    elif enc in _VALU:
        if "dpp" in f and bank[0]:
            return None
        fmamk = name.startswith(("v_fmamk_", "v_madmk_"))
        src1 = "src1" if enc in ("VOP3", "VOP3P") else "vsrc1"
        for key, b in zip(("src0", None if fmamk else src1, src1 if fmamk else "src2",
                           None if name.startswith(_SGPR_DEST) else "vdst"), bank,
                          strict=True):
            if key is not None:
                _banked(f, key, b)
    elif enc in ("VOPD", "VOPD3"):
        tables = opcode_tables("gfx1250")[enc + "X"], opcode_tables("gfx1250")[enc + "Y"]
        for half, table, op in (("x", tables[0], f["opx"]), ("y", tables[1], f["opy"])):
            fmamk = table.get(op, {}).get("name", "").startswith("v_dual_fmamk")
            lanemask = table.get(op, {}).get("name", "") in ("v_dual_cndmask_b32",
                                                            "v_dual_bitop2_b32")
            src2 = None if enc == "VOPD" or lanemask else "vsrc2" + half
            keys = ("src0" + half, None if fmamk else "vsrc1" + half,
                    "vsrc1" + half if fmamk else src2, "vdst" + half)
            for key, b in zip(keys, bank, strict=True):
                if key is not None:
                    _banked(f, key, b)
    else:
        return None
    return dataclasses.replace(inst, f=f)


def decode_all(code: bytes, base: int, target: str = "gfx1201") -> list[Instruction]:
    """Decode a whole code region linearly (for tests and disassembly listings)."""
    import numpy as np

    n = len(code) // 4
    words = np.frombuffer(code[: n * 4], dtype="<u4").tolist()
    out, i = [], 0
    while i < n:
        inst = decode_one(words, i, base + 4 * i, target)
        out.append(inst)
        i += inst.size // 4
    return out
