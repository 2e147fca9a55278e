"""Register-level listings of decoded gfx9 (CDNA) instructions, in LLVM's operand spelling.

`register_operands(inst, target)` names the registers an instruction reads and writes, in
the order and spelling llvm-mc prints them (v[0:1], a[0:3], s15, vcc, exec, m0, ttmp4,
flat_scratch, off); constants and modifiers are left out. The order and widths come from the
opcode tables' `operands` (gen_tables.py, read from LLVM's own disassembly of each opcode);
the registers from the instruction's fields. `hsa.virtual.mc_agreement` compares it with
llvm-mc-19's reading of LLVM's MC tests (gfx11's counterpart: hsa.virtual.gfx11.listing).
"""

from __future__ import annotations

import re

from hsa.virtual.gfx9 import decoder as d
from hsa.virtual.gfx11.listing import register_range as _range
from hsa.virtual.gfx11.listing import scalar_spelling
from hsa.virtual.isa.operands import DPP16, NULL, SDWA, VGPR0, Instruction

REGISTER_TOKEN = re.compile(
    r"^(v\d+|v\[\d+:\d+\]|a\d+|a\[\d+:\d+\]|s\d+|s\[\d+:\d+\]|vcc_lo|vcc_hi|vcc|exec_lo|"
    r"exec_hi|exec|m0|ttmp\d+|ttmp\[\d+:\d+\]|flat_scratch(_lo|_hi)?|xnack_mask(_lo|_hi)?|off)$")
# gfx9 scalar codes: its own numbers for these (the decoder renames m0 and off only)
_SPECIAL = {102: "flat_scratch_lo", 103: "flat_scratch_hi", 104: "xnack_mask_lo",
            105: "xnack_mask_hi", 106: "vcc_lo", 107: "vcc_hi", 125: "m0", 126: "exec_lo",
            127: "exec_hi"}
_SPECIAL64 = {102: "flat_scratch", 104: "xnack_mask", 106: "vcc", 126: "exec"}
_SCALAR = {"sdst", "ssrc0", "ssrc1", "sdata", "sbase", "srsrc"}
_SOURCES = {"src0", "src1", "src2", "vsrc1"}
_MAI = ("v_mfma", "v_smfmac")
_SGPR = re.compile(r"^s(\d+|\[)")
_INVALID = re.compile(r"^v(?:(\d+)|\[(\d+:\d+)\])/\*Invalid")
_PROBE_SOURCES = {32: "src0", 48: "src1", 64: "src2"}  # the VGPRs gen_tables put there


def token_is_vcc(inst: Instruction, field: str) -> bool:
    return field == "vcc" and inst.encoding == "VOPC" and "sdwa" in inst.f


def scalar_name(code: int, width: int = 1) -> str | None:
    """The spelling of a scalar operand code (after the decoder's renames), or None for a
    constant."""
    return scalar_spelling(code, width, 102, _SPECIAL, _SPECIAL64)


def _vector(number: int, width: int) -> str:
    """A VGPR field's register: AccVGPRs are the decoder's rows from AGPR_ROW on."""
    if number >= d.AGPR_ROW:
        return _range("a", number - d.AGPR_ROW, width)
    return _range("v", number, width)


def _source(inst: Instruction, field: str, width: int) -> str | None:
    f, code = inst.f, inst.f[field]
    if field == "src0" and code == DPP16 and "dpp" in f:
        return _range("v", f["dpp"] & 0xFF, width)
    if "sdwa" in f and field in ("src0", "vsrc1"):
        word = f["sdwa"]  # src0 [7:0] with S0 [23]; S1 [31] makes vsrc1 a scalar code
        raw, scalar = (word & 0xFF, word >> 23 & 1) if field == "src0" else \
            (code - VGPR0, word >> 31 & 1)
        if field == "src0" and code != SDWA:
            return _range("v", code - VGPR0, width) if code >= VGPR0 else \
                scalar_name(code, width)
        if not scalar:
            return _range("v", raw, width)
        return "m0" if raw == d.GFX9_M0 else scalar_name(raw, width)  # gfx9's own numbering
    if inst.name.startswith("v_accvgpr_") and field == "src0" and code >= VGPR0 and \
            not inst.name.startswith("v_accvgpr_write"):
        return _range("a", code - VGPR0, width)  # read/mov read an AccVGPR
    if code >= VGPR0:
        number = code - VGPR0
        agpr = inst.name.startswith(_MAI) and (
            (field == "src2" and f.get("acc_cd") and inst.name.startswith("v_mfma")) or
            (field in ("src0", "src1") and f.get("acc", 0) >> ("src0", "src1").index(field) & 1))
        return _range("a" if agpr or number >= d.AGPR_ROW else "v", number % d.AGPR_ROW, width)
    return scalar_name(code, width)


def register_operands(inst: Instruction, target: str) -> list[str] | None:
    """The registers `inst` names, as LLVM spells them; None where the table has no operand
    list for it."""
    info = d.opcode_tables(target).get(inst.encoding, {}).get(inst.op)
    if info is None or "operands" not in info:
        return None
    f, enc = inst.f, inst.encoding
    out: list[str | None] = []
    # gfx940's scratch probe (SVE 0) printed "off, off": the first is the address
    scratch_addr = enc == "SCRATCH" and not any(e[0] == "addr" for e in info["operands"])
    for entry in info["operands"]:
        if len(entry) == 1:
            token = entry[0]
            if token == "off" and scratch_addr:
                out.append(_range("v", f["addr"], 1) if f.get("sve") else "off")
                scratch_addr = False
            elif enc in ("MUBUF", "MTBUF") and token == "0":  # soffset
                out.append(scalar_name(f["soffset"]))
            elif token == "off" and enc in ("GLOBAL", "SCRATCH", "FLAT"):
                saddr = f.get("saddr", NULL)
                out.append("off" if saddr == NULL else
                           scalar_name(saddr, 2 if enc == "GLOBAL" else 1))
            elif token_is_vcc(inst, token):
                word = f["sdwa"]  # a VOPC SDWA result goes to sdst [14:8] when SD [15] is set
                out.append(scalar_name(word >> 8 & 0x7F, 2) if word >> 15 & 1 else "vcc")
            elif _INVALID.match(token):  # an SGPR operand the probe filled with a VGPR
                m = _INVALID.match(token)
                assert m is not None
                lo, hi = (int(x) for x in (m.group(2) or f"{m.group(1)}:{m.group(1)}").split(":"))
                out.append(_source(inst, _PROBE_SOURCES[lo], hi - lo + 1))
            elif REGISTER_TOKEN.match(token):
                out.append(token)
            continue
        field, width = entry
        if enc == "SMEM" and field.startswith("s["):  # s_buffer_*: the V# at sbase
            out.append(_range("s", f["sbase"] & ~3, width))
        elif _SGPR.match(field):  # an SGPR written through vdst/sdst
            code = f["sdst"] if "sdst" in f and (enc != "VOP3" or inst.op >= 0x100) else \
                f.get("vdst", f.get("sdst"))
            out.append(scalar_name(code, width) if code is not None else field)
        elif field.startswith(("v", "a")) and field not in f:  # a register LLVM printed
            out.append(field)  # that no probe field held (a fixed operand)
        elif field in _SCALAR:
            code = f[field]
            if enc == "SMEM" and field == "sbase":
                code &= ~1
            out.append(scalar_name(code, width))
        elif field in _SOURCES:
            out.append(_source(inst, field, width))
        elif enc == "VOP3P" and field == "vdst" and inst.name.startswith(_MAI):
            out.append(_range("a" if f.get("acc_cd") else "v", f["vdst"], width))
        elif enc == "GLOBAL" and field == "addr" and f.get("saddr", NULL) != NULL:
            out.append(_range("v", f["addr"], 1))
        elif enc == "SCRATCH" and field == "addr" and not f.get("sve", 1):
            out.append("off")
        elif enc in ("MUBUF", "MTBUF") and field == "vaddr":
            n = f.get("offen", 0) + f.get("idxen", 0)
            out.append(_range("v", f["vaddr"], n) if n else "off")
        elif f.get("lds") and (enc, field) in (("MUBUF", "vdata"), ("GLOBAL", "vdst"),
                                                ("SCRATCH", "vdst"), ("FLAT", "vdst")):
            continue  # a load into LDS names no data register
        elif enc == "DS" and inst.name.startswith("ds_gws") and f.get("data0", 0) >= d.AGPR_ROW:
            out.append(_range("a", f[field], width))  # the acc bit applies to its one VGPR
        elif field == "vdst" and inst.name.startswith(("v_accvgpr_write", "v_accvgpr_mov")):
            out.append(_range("a", f["vdst"], width))
        else:
            out.append(_vector(f[field], width))
    if enc == "SMEM" and f.get("soffset", NULL) != NULL and any(
            e[0] == "sbase" or e[0].startswith("s[") for e in info["operands"]):
        out.append(scalar_name(f["soffset"]))
    if enc in ("FLAT", "GLOBAL", "SCRATCH") and "_atomic_" in inst.name and f.get("glc"):
        width = 2 if "x2" in inst.name or inst.name.endswith(("_f64", "_u64")) else 1
        out.insert(0, _vector(f["vdst"], width))  # returns the old value (glc)
    return [x for x in out if x]


def llvm_registers(operand_text: str) -> list[str]:
    """Register tokens of an llvm-mc operand string, in order."""
    text = re.sub(r"abs\(|[|()\-]", " ", operand_text)
    return [t for t in re.split(r"[\s,]+", text) if REGISTER_TOKEN.match(t)]
