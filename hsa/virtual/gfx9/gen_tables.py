"""Generate the gfx9 (CDNA) opcode tables, `opcodes_<target>.json`, from LLVM's disassembler.

Run `python -m hsa.virtual.gfx9.gen_tables` (needs `llvm-mc-19`, which knows gfx90a and
gfx942). As for gfx11 (see hsa/virtual/gfx11/gen_tables.py): one instruction per opcode
value of each encoding, with distinct registers in its fields, disassembled by LLVM; an
opcode is tried again with optional fields cleared when LLVM rejects it. The tables record
the mnemonic LLVM prints and a sample; opcode values LLVM rejects are left out. Data only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

LLVM_MC = "llvm-mc-19"
TARGETS = ("gfx90a", "gfx942")
NOP = 0xBF800000  # s_nop 0
MARKER = 0xBF800007  # s_nop 7
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


def _variants(words: list[int], fields: list[Field]) -> list[list[int]]:
    result = []
    for mask in sorted(range(1 << len(fields)), key=lambda m: bin(m).count("1")):
        w = list(words)
        for i, (idx, shift, width) in enumerate(fields):
            if mask >> i & 1:
                w[idx] &= ~(((1 << width) - 1) << shift) & 0xFFFFFFFF
        result.append(w)
    return result


def disassemble_many(items: list[list[int]], mcpu: str) -> list[str | None]:
    """One llvm-mc run for many instructions, each on its own line followed by s_nop
    padding and an s_nop 7 marker (see the gfx11 generator)."""
    lines = []
    for ws in items:
        data = b"".join(w.to_bytes(4, "little") for w in ws + [NOP, NOP, NOP, MARKER])
        lines.append(",".join(f"0x{b:02x}" for b in data))
    run = subprocess.run(
        [LLVM_MC, "--disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
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


def build(target: str) -> dict[str, dict[str, dict]]:
    tables: dict[str, dict[str, dict]] = {}
    for enc, items in candidates().items():
        tries = [_variants(words, fields) for _, words, fields in items]
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
    return tables


def main() -> None:
    for target in TARGETS:
        table_path(target).write_text(json.dumps(build(target), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
