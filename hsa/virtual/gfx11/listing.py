"""Register-level listings of decoded gfx11 instructions, in LLVM's operand spelling.

`register_operands(inst)` names the registers an instruction reads and writes, in the order
and spelling llvm-objdump prints them (v[0:1], s15, vcc_lo, exec_lo, null, off); constants
and modifiers are left out. Tests compare it with llvm-objdump-19's disassembly; it is also
handy in error reports.
"""

from __future__ import annotations

import re

from hsa.virtual.gfx11 import decoder as d

_SPECIAL = {d.VCC_LO: "vcc_lo", d.VCC_HI: "vcc_hi", d.NULL: "null", d.M0: "m0",
            d.EXEC_LO: "exec_lo", d.EXEC_HI: "exec_hi"}
_SPECIAL64 = {d.VCC_LO: "vcc", d.EXEC_LO: "exec", d.NULL: "null"}
REGISTER_TOKEN = re.compile(
    r"^(v\d+|v\[\d+:\d+\]|s\d+|s\[\d+:\d+\]|vcc_lo|vcc_hi|vcc|exec_lo|exec_hi|exec|m0|null|"
    r"ttmp\d+|ttmp\[\d+:\d+\]|off)$")


_INVALID = re.compile(r"^v(32|48|64)/\*Invalid")
_PROBE_FIELDS = {32: "src0", 48: "src1", 64: "src2"}  # the VGPRs gen_tables put there


def register_range(prefix: str, lo: int, width: int) -> str:
    return f"{prefix}{lo}" if width == 1 else f"{prefix}[{lo}:{lo + width - 1}]"


_range = register_range


def scalar_spelling(code: int, width: int, sgprs: int, special: dict[int, str],
                    special64: dict[int, str]) -> str | None:
    """A scalar operand code in LLVM's spelling for a family with `sgprs` SGPRs (codes 0 ..
    sgprs-1), trap temporaries at 108-123 and its own named codes, or None for a constant.
    gfx9's listing uses it with its own numbers."""
    if code < sgprs:
        return _range("s", code, width)
    if 108 <= code <= 123:
        return _range("ttmp", code - 108, width)
    if width == 2 and code in special64:
        return special64[code]
    return special.get(code)


def scalar_name(code: int, width: int = 1) -> str | None:
    """The spelling of a scalar operand code, or None for a constant."""
    return scalar_spelling(code, width, 106, _SPECIAL, _SPECIAL64)


def source_name(code: int, width: int = 1) -> str | None:
    if code >= d.VGPR0:
        return _range("v", code - d.VGPR0, width)
    return scalar_name(code, width)


_VGPR_FIELDS = {"vdst", "vdstx", "vdsty", "addr", "data", "data0", "data1", "vdata", "vaddr"}
_SRC_FIELDS = {"src0", "src1", "src2", "vsrc1", "src0x", "src0y", "vsrc1x", "vsrc1y"}
_SGPR_FIELDS = {"sdst", "ssrc0", "ssrc1", "sdata", "sbase", "srsrc"}


def _field_name(inst: d.Instruction, field: str, width: int) -> str | None:
    f = inst.f
    if field == "src0" and "dpp" in f:
        return _range("v", f["dpp"] & 0xFF, width)
    if field in _SRC_FIELDS:
        return source_name(f[field], width)
    if field in _SGPR_FIELDS:
        return scalar_name(f[field], width)
    if field in _VGPR_FIELDS:
        return _range("v", f[field], width)
    return None


def _operand_list(inst: d.Instruction, info: dict, gfx12: bool = False) -> list[str]:
    out: list[str] = []
    soffset_listed = False
    f = inst.f
    enc = inst.encoding
    for entry in info["operands"]:
        if len(entry) == 2:
            field, width = entry
            if field.startswith("s") and field[1:].isdigit():  # an SGPR written through vdst/sdst
                code = f["sdst"] if int(field[1:]) == 0 and "sdst" in f else f.get("vdst", 0)
                if enc == "VOP3" and inst.op < 0x100:
                    code = f["vdst"]
                name = scalar_name(code, width)
            elif enc == "GLOBAL" and field == "addr" and f["saddr"] != d.NULL:
                name = _range("v", f["addr"], 1)
            elif enc == "SCRATCH" and field == "addr" and not f["sve"]:
                name = "off"
            elif enc == "SMEM" and field.startswith("s["):  # s_buffer_*: the V# at sbase
                name = _range("s", f["sbase"] & ~3, width)
            elif enc in ("MUBUF", "MTBUF") and field == "vaddr":
                n = f["offen"] + f["idxen"]
                name = _range("v", f["vaddr"], n) if n else "off"
            else:
                name = _field_name(inst, field, width)
            if name:
                out.append(name)
            continue
        token = entry[0]
        invalid = _INVALID.match(token)
        if invalid and enc == "VOP3":  # an SGPR operand that our probe filled with a VGPR
            name = source_name(f[_PROBE_FIELDS[int(invalid.group(1))]], 1)
            if name:
                out.append(name)
        elif token == "off" and enc in ("GLOBAL", "SCRATCH", "FLAT"):
            out.append("off" if f["saddr"] == d.NULL else
                       scalar_name(f["saddr"], 2 if enc == "GLOBAL" else 1) or "off")
        elif enc == "SMEM" and token == "null" and gfx12:  # s_prefetch_*'s soffset
            out.append(scalar_name(f["soffset"]) or "")
            soffset_listed = True
        elif enc in ("MUBUF", "MTBUF") and token in ("0", "null"):  # soffset (gfx12: null)
            name = scalar_name(f["soffset"])
            if name:
                out.append(name)
        elif REGISTER_TOKEN.match(token):
            out.append(token)
    if enc in ("FLAT", "GLOBAL", "SCRATCH") and "_atomic_" in inst.name and f["glc"]:
        width = 2 if inst.name.endswith(("_b64", "_u64", "_i64", "_f64")) else 1
        out.insert(0, _range("v", f["vdst"], width))  # returns the old value (glc)
    if enc == "SMEM" and gfx12:  # gfx12 spells a null soffset as nothing ("0x0")
        if not soffset_listed and f.get("soffset", d.NULL) != d.NULL and info["operands"]:
            out.append(scalar_name(f["soffset"]) or "")
    elif enc == "SMEM" and "sbase" in f and info["operands"]:  # (s_dcache_inv has none)
        # LLVM spells a zero offset with no SGPR as "null"
        if f["soffset"] != d.NULL:
            out.append(scalar_name(f["soffset"]) or "")
        elif f["offset"] == 0 and inst.name.startswith("s_"):
            out.append("null")
    return [x for x in out if x]


def register_operands(inst: d.Instruction, tables: dict | None = None) -> list[str]:
    """`tables`: the opcode tables `inst` was decoded with (default gfx11's; gfx12's share
    the field names, with its buffer opcodes under VBUFFER)."""
    if tables is None:
        tables = d.opcode_tables()
    if inst.encoding in ("VOPD", "VOPD3"):  # (VOPD3: gfx1250's, with a third source)
        x = tables[inst.encoding + "X"].get(inst.f["opx"])
        y = tables[inst.encoding + "Y"].get(inst.f["opy"])
        if not x or not y or "operands" not in x or "operands" not in y:
            return []
        fx = dict(inst.f)
        ops = []
        for info in (x, y):
            for entry in info["operands"]:
                if len(entry) == 2:
                    field, width = entry
                    name: str | None
                    if field in ("vsrc2x", "vsrc2y"):  # a VGPR number, not an operand code
                        name = _range("v", fx[field], width)
                    elif field.startswith("svsrc2"):  # v_dual_cndmask_b32's lane mask
                        name = scalar_name(fx[field[1:]], width)
                    elif field.startswith(("src", "vsrc")):
                        name = source_name(fx[field], width)
                    else:
                        name = _range("v", fx[field], width)
                    if name:
                        ops.append(name)
                elif REGISTER_TOKEN.match(entry[0]):
                    ops.append(entry[0])
        return ops
    enc = inst.encoding
    if enc in ("MUBUF", "MTBUF") and "VBUFFER" in tables:
        enc = "VBUFFER"
    found = tables.get(enc, {}).get(inst.op)
    if found is None or "operands" not in found:
        return []
    return _operand_list(inst, found, gfx12="VBUFFER" in tables)


def llvm_registers(operand_text: str) -> list[str]:
    """Register tokens of an llvm-objdump operand string, in order."""
    text = re.sub(r"abs\(|[|()\-]", " ", operand_text.replace("::", " "))
    tokens = re.split(r"[\s,]+", text)
    return [t for t in tokens if REGISTER_TOKEN.match(t)]
