"""Generate `opcodes.json`, the gfx11 opcode tables, from LLVM's own disassembler.

Run `python -m hsa.virtual.gfx11.gen_tables` (needs `llvm-mc-19`; takes about ten seconds).
For each encoding it builds one instruction per opcode value, with every register field set
to a distinct register, and asks `llvm-mc-19 --disassemble -mcpu=gfx1100` what it is. LLVM's
decoder rejects an instruction whose unused fields are not zero, so each opcode is tried
again with subsets of its optional fields cleared. The table records the mnemonic LLVM prints
and which fields it printed as operands, with their register widths (read back from the
register numbers in the text). Opcode values LLVM rejects are left out. The output is data:
facts read from LLVM, no LLVM code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

LLVM_MC = "llvm-mc-19"
OUT = Path(__file__).with_name("opcodes.json")

# Register numbers placed in each field; distinct, and aligned for wide operands.
SDST, SSRC0, SSRC1 = 16, 32, 48
VDST, VSRC0, VSRC1, VSRC2 = 16, 32, 48, 64
NOP = 0xBF800000  # s_nop 0
MARKER = 0xBF800007  # s_nop 7
ENCODINGS = ("SOP2", "SOPK", "SOP1", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3",
             "VOP3P", "DS", "FLAT", "GLOBAL", "SCRATCH", "MUBUF", "MTBUF", "VOPDX", "VOPDY")

# An optional field: (word index, shift, width).
Field = tuple[int, int, int]
Candidate = tuple[int, list[int], list[Field], dict[int, str], dict[int, str]]


def _w(*words: int) -> list[int]:
    return [w & 0xFFFFFFFF for w in words]


def candidates() -> dict[str, list[Candidate]]:
    """encoding -> [(opcode, words, optional fields, sgpr number -> field, vgpr -> field)]"""
    s3 = {SDST: "sdst", SSRC0: "ssrc0", SSRC1: "ssrc1"}
    out: dict[str, list[Candidate]] = {k: [] for k in ENCODINGS}
    for op in range(0x60):
        w = 2 << 30 | op << 23 | SDST << 16 | SSRC1 << 8 | SSRC0
        out["SOP2"].append((op, _w(w), [], s3, {}))
    for op in range(0x1D):
        w = 0xB << 28 | op << 23 | SDST << 16 | 0x10
        out["SOPK"].append((op, _w(w), [(0, 16, 7)], s3, {}))
    for op in range(0x100):
        w = 0x17D << 23 | SDST << 16 | op << 8 | SSRC0
        out["SOP1"].append((op, _w(w), [(0, 16, 7), (0, 0, 8)], s3, {}))
    for op in range(0x80):
        out["SOPC"].append((op, _w(0x17E << 23 | op << 16 | SSRC1 << 8 | SSRC0), [], s3, {}))
        out["SOPP"].append((op, _w(0x17F << 23 | op << 16 | 0x10), [(0, 0, 16)], {}, {}))
    for op in range(0x100):  # sbase = s[2:3], sdata = s16, offset 0x10, soffset null
        words = _w(0x3D << 26 | op << 18 | SDST << 6 | 1, 124 << 25 | 0x10)
        out["SMEM"].append((op, words, [(0, 6, 7), (0, 0, 6), (1, 0, 21)],
                            {SDST: "sdata", 2: "sbase"}, {}))
    v = {VDST: "vdst", VSRC0: "src0", VSRC1: "vsrc1", VSRC2: "src2"}
    for op in range(0x100):
        w = 0x3F << 25 | VDST << 17 | op << 9 | (256 + VSRC0)
        out["VOP1"].append((op, _w(w), [(0, 17, 8), (0, 0, 9)], {}, v))
        w = 0x3E << 25 | op << 17 | VSRC1 << 9 | (256 + VSRC0)
        out["VOPC"].append((op, _w(w), [], {}, v))
    for op in range(0x3E):
        w = op << 25 | VDST << 17 | VSRC1 << 9 | (256 + VSRC0)
        out["VOP2"].append((op, _w(w), [], {}, v))
    v3 = {VDST: "vdst", VSRC0: "src0", VSRC1: "src1", VSRC2: "src2"}
    for op in range(0x400):
        w0 = 0x35 << 26 | op << 16 | VDST
        w1 = (256 + VSRC2) << 18 | (256 + VSRC1) << 9 | (256 + VSRC0)
        out["VOP3"].append((op, _w(w0, w1), [(1, 18, 9), (1, 9, 9), (1, 0, 9), (0, 0, 8)],
                            {}, v3))
    for op in range(0x80):  # op_sel_hi all set (the usual form)
        w0 = 0xCC << 24 | op << 16 | 1 << 14 | VDST
        w1 = 3 << 27 | (256 + VSRC2) << 18 | (256 + VSRC1) << 9 | (256 + VSRC0)
        out["VOP3P"].append((op, _w(w0, w1), [(1, 18, 9), (1, 9, 9)], {}, v3))
    vds = {VDST: "vdst", VSRC0: "addr", VSRC1: "data0", VSRC2: "data1"}
    for op in range(0x100):
        w0 = 0x36 << 26 | op << 18 | 8 << 8 | 4
        w1 = VDST << 24 | VSRC2 << 16 | VSRC1 << 8 | VSRC0
        out["DS"].append((op, _w(w0, w1),
                          [(1, 24, 8), (1, 16, 8), (1, 8, 8), (1, 0, 8), (0, 0, 16)], {}, vds))
    vfl = {VDST: "vdst", VSRC0: "addr", VSRC1: "data"}
    for seg, name in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
        for op in range(0x80):
            w0 = 0x37 << 26 | op << 18 | seg << 16 | 0x10
            sve = 1 << 23 if seg == 1 else 0
            w1 = VDST << 24 | sve | 124 << 16 | VSRC1 << 8 | VSRC0
            out[name].append((op, _w(w0, w1), [(1, 24, 8), (1, 8, 8)], {}, vfl))
    vbuf = {VSRC0: "vaddr", VSRC1: "vdata"}
    for op in range(0x100):  # offen, srsrc s[16:19], soffset 0
        w1 = 0x80 << 24 | 1 << 22 | (SDST // 4) << 16 | VSRC1 << 8 | VSRC0
        out["MUBUF"].append((op, _w(0x38 << 26 | op << 18 | 0x10, w1),
                             [(1, 8, 8), (1, 0, 8), (1, 16, 5), (1, 22, 1), (0, 0, 12),
                              (1, 24, 8)], {SDST: "srsrc"}, vbuf))
    for op in range(0x10):
        w1 = 0x80 << 24 | 1 << 22 | (SDST // 4) << 16 | VSRC1 << 8 | VSRC0
        out["MTBUF"].append((op, _w(0x3A << 26 | 1 << 19 | op << 15 | 0x10, w1), [],
                             {SDST: "srsrc"}, vbuf))
    # VOPD: each X op paired with Y = v_dual_mov_b32, each Y op with X = v_dual_mov_b32.
    vdx = {VDST: "vdstx", VSRC0: "src0x", VSRC1: "vsrc1x", 81: "vdsty", 96: "src0y",
           80: "vsrc1y"}
    for op in range(0x10):
        w0 = 0x32 << 26 | op << 22 | 16 << 17 | VSRC1 << 9 | (256 + VSRC0)
        w1 = VDST << 24 | (81 >> 1) << 17 | (256 + 96)
        out["VOPDX"].append((op, _w(w0, w1), [(0, 9, 8)], {}, vdx))
    for op in range(0x20):
        w0 = 0x32 << 26 | 8 << 22 | op << 17 | (256 + VSRC0)
        w1 = VDST << 24 | (81 >> 1) << 17 | 80 << 9 | (256 + 96)
        out["VOPDY"].append((op, _w(w0, w1), [(1, 9, 8)], {}, vdx))
    return out


def _variants(words: list[int], fields: list[Field]) -> list[list[int]]:
    """The words with each subset of `fields` cleared, fewest cleared first."""
    result = []
    for mask in sorted(range(1 << len(fields)), key=lambda m: bin(m).count("1")):
        w = list(words)
        for i, (idx, shift, width) in enumerate(fields):
            if mask >> i & 1:
                w[idx] &= ~(((1 << width) - 1) << shift) & 0xFFFFFFFF
        result.append(w)
    return result


def disassemble_many(items: list[list[int]], mcpu: str = "gfx1100") -> list[str | None]:
    """Disassemble many instructions in one llvm-mc run. Each item is on its own input line,
    followed by three s_nop 0 (room for garbage that an invalid item may decode into) and the
    marker s_nop 7; an item is valid when LLVM reports no invalid encoding at its first byte,
    and its text is then the first instruction printed after the previous marker."""
    lines = []
    for ws in items:
        data = b"".join(w.to_bytes(4, "little") for w in ws + [NOP, NOP, NOP, MARKER])
        lines.append(",".join(f"0x{b:02x}" for b in data))
    run = subprocess.run(
        [LLVM_MC, "--disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
    )
    invalid = {int(m.group(1)) for m in re.finditer(
        r"<stdin>:(\d+):1: warning: invalid instruction encoding", run.stderr)}
    segments: list[list[str]] = [[]]
    for line in run.stdout.splitlines():
        text = line.strip()
        if not text or text == ".text":
            continue
        if text == "s_nop 7":
            segments.append([])
        else:
            segments[-1].append(text)
    result: list[str | None] = []
    for i in range(len(items)):
        ok = (i + 1) not in invalid and i < len(segments) and segments[i]
        result.append(segments[i][0] if ok else None)
    return result


# a[..] (gfx9's AccVGPRs) reads like a VGPR: the instruction's acc bits say which file
_REG = re.compile(r"^(v|s|a)(?:(\d+)|\[(\d+):(\d+)\])$")


def operand_fields(text: str, sregs: dict[int, str], vregs: dict[int, str]) -> list:
    """[[field, width]] for register operands, [token] for anything else."""
    body = text.split(None, 1)[1] if " " in text else ""
    result = []
    for part in body.split(","):
        tok = part.strip().split(" ")[0]
        if not tok:
            continue
        m = _REG.match(tok)
        if m:
            lo = int(m.group(2) or m.group(3))
            hi = int(m.group(2) or m.group(4))
            table = sregs if m.group(1) == "s" else vregs
            result.append([table.get(lo, tok), hi - lo + 1])
        else:
            result.append([tok])
    return result


# Instructions that LLVM 19's disassembler cannot decode though newer LLVM emits them (true16
# VOP3 forms, e.g. `v_mov_b16_e64 v194.h, v204.l` in Triton 3.9 output): their encodings come
# from clang 22's assembler (the `ziglang` wheel) instead.
CLANG22_ONLY = [("VOP3", "v_mov_b16_e64 v16.l, v32.l")]


def clang22_cc1as(mcpu: str, true16: bool = True) -> list[str]:
    """The command line of clang 22's integrated assembler (the `ziglang` wheel) for `mcpu`,
    run directly: the clang driver cannot pass it target features such as real-true16 (the
    mode compilers use, where 16-bit operands are VGPR halves such as v16.l)."""
    return [sys.executable, "-m", "ziglang", "clang", "-cc1as", "-triple", "amdgcn-amd-amdhsa",
            "-target-cpu", mcpu, *(["-target-feature", "+real-true16"] if true16 else [])]


def assemble_clang22(source: str, mcpu: str = "gfx1100") -> tuple[bytes, str]:
    """(.text bytes, stderr) of `source` assembled for `mcpu` by clang 22 from the ziglang
    wheel; empty bytes when it reports errors."""
    import struct
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "a.s", Path(tmp) / "a.o"
        src.write_text(source)
        run = subprocess.run([*clang22_cc1as(mcpu), "-filetype", "obj", "-o", str(obj),
                              str(src)], capture_output=True, text=True)
        if run.returncode:
            return b"", run.stderr
        elf = obj.read_bytes()
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    strtab = sections[shstrndx][4]
    for name, _type, _flags, _addr, offset, size in sections:
        if elf[strtab + name:elf.index(b"\0", strtab + name)] == b".text":
            return elf[offset:offset + size], run.stderr
    return b"", run.stderr


_ASM_ERROR = re.compile(r":(\d+):\d+: error:")


def clang22_encodings(texts: list[str], mcpu: str, chunk: int = 1500,
                      true16: bool = False) -> list[bytes | None]:
    """Each instruction text assembled alone by clang 22 (the ziglang wheel) for `mcpu`:
    its bytes, or None where clang rejects it. Each goes into a section of its own, so the
    section sizes are the instruction sizes (no decoder is asked). `true16`: in the
    real-true16 mode (16-bit operands as VGPR halves, v1.l)."""
    import struct
    import tempfile

    out: list[bytes | None] = [None] * len(texts)
    for first in range(0, len(texts), chunk):
        todo = list(range(first, min(first + chunk, len(texts))))
        for _ in range(20):  # drop the lines clang rejects, then assemble the rest
            if not todo:
                break
            src = "".join(f".section .text.i{i},\"ax\"\n{texts[i]}\n" for i in todo)
            with tempfile.TemporaryDirectory() as tmp:
                path, obj = Path(tmp) / "a.s", Path(tmp) / "a.o"
                path.write_text(src)
                run = subprocess.run([*clang22_cc1as(mcpu, true16=true16), "-filetype", "obj",
                                      "-o", str(obj), str(path)], capture_output=True,
                                     text=True)
                bad = {(int(m.group(1)) - 1) // 2 for m in _ASM_ERROR.finditer(run.stderr)}
                if run.returncode == 0 and not bad:
                    elf = obj.read_bytes()
                else:
                    if not bad:
                        break
                    todo = [i for k, i in enumerate(todo) if k not in bad]
                    continue
            shoff, = struct.unpack_from("<Q", elf, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
            heads = [struct.unpack_from("<IIQQQQ", elf, shoff + k * shentsize)
                     for k in range(shnum or struct.unpack_from("<Q", elf, shoff + 32)[0])]
            strtab = heads[shstrndx if shstrndx != 0xFFFF else
                           struct.unpack_from("<I", elf, shoff + 40)[0]][4]
            for name, _t, _f, _a, offset, size in heads:
                label = elf[strtab + name:elf.index(b"\0", strtab + name)]
                if label.startswith(b".text.i"):
                    out[int(label[7:])] = elf[offset:offset + size]
            break
    return out


def clang22_entries(tables: dict[str, dict[str, dict]], mcpu: str = "gfx1100") -> None:
    """Add CLANG22_ONLY to `tables`, the opcode read from clang 22's encoding for `mcpu`
    (gfx12 keeps gfx11's VOP3 layout, so gfx11's decoder reads the opcode there too)."""
    from hsa.virtual.gfx11.decoder import decode_one

    for enc, text in CLANG22_ONLY:
        code, err = assemble_clang22(text + "\n", mcpu)
        if not code:
            raise RuntimeError(f"clang 22 cannot assemble {text!r}: {err.strip()}")
        words = [int.from_bytes(code[k:k + 4], "little") for k in range(0, len(code), 4)]
        inst = decode_one(words + [0, 0], 0, 0)
        assert inst.encoding == enc, (text, inst.encoding)
        tables[enc][str(inst.op)] = {
            "name": text.split()[0], "sample": text, "source": "clang 22",
            # the register of a true16 half (v16.l) is the field's register; op_sel the half
            "operands": operand_fields(re.sub(r"\.[lh]\b", "", text), {},
                                       {VDST: "vdst", VSRC0: "src0"})}


def build(cands: dict[str, list[Candidate]] | None = None,
          mcpu: str = "gfx1100") -> dict[str, dict[str, dict]]:
    """Tables for `cands` (default: gfx11's candidates) as LLVM disassembles them for
    `mcpu` (gfx12's generator reuses this with its own encodings)."""
    tables: dict[str, dict[str, dict]] = {}
    for enc, items in (candidates() if cands is None else cands).items():
        tries = [_variants(words, fields) for _, words, fields, _, _ in items]
        if cands is None and enc == "DS":  # GWS and ordered-count ops exist only with gds set
            tries = [t + [[w[0] | 1 << 17] + w[1:] for w in t] for t in tries]
        if enc == "DS":  # ds_nop: LLVM decodes it only with every field zero
            tries = [t + [[t[0][0] & ~0x1FFFF, 0] + t[0][2:]] for t in tries]
        found: dict[int, str] = {}
        for level in range(max(len(t) for t in tries)):
            todo = [i for i in range(len(items)) if i not in found and level < len(tries[i])]
            texts = disassemble_many([tries[i][level] for i in todo], mcpu) if todo else []
            for i, text in zip(todo, texts, strict=True):
                if not text or text.startswith("."):
                    continue
                if text.startswith("s_nop") and not (enc == "SOPP" and items[i][0] == 0):
                    continue
                found[i] = text
        table: dict[str, dict] = {}
        for i, (op, _words, _fields, sregs, vregs) in enumerate(items):
            text = found.get(i)
            if text is None:
                continue
            if enc.startswith("VOPD"):
                text = text.split("::")[0 if enc == "VOPDX" else 1].strip()
            table[str(op)] = {"name": text.split()[0],
                              "operands": operand_fields(text, sregs, vregs), "sample": text}
        tables[enc] = table
        print(f"{enc}: {len(table)} opcodes")
    if cands is None:  # gfx11's own tables
        clang22_entries(tables)
    return tables


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
