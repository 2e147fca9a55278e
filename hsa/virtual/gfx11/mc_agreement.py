"""Decoder agreement with LLVM's own gfx11 MC disassembler tests.

    python -m hsa.virtual.gfx11.mc_agreement DIR [--show 3] [--files GLOB]

DIR holds LLVM's `llvm/test/MC/Disassembler/AMDGPU/gfx11_dasm_*.txt` (e.g. from Debian's
`llvm-toolchain-19` source package, unpacked outside the repository: nothing of LLVM's is
stored here). Every byte line of a file is one test encoding; the check line before it
(`# GFX11: v_add_f32_e32 v5, v1, v2 ; encoding: [0x..]`) is what LLVM's disassembler makes
of it. For each we decode the bytes and compare the size with the checked encoding's, the
mnemonic (encoding suffixes aside) and the register operands in LLVM's spelling
(`listing.register_operands`). Graphics encodings (VINTERP, LDSDIR, MIMG, EXP) count as
right when we name their format with the right size and never another mnemonic: the
executor refuses them by format. Encodings LLVM checks as invalid must not decode to a
known instruction.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hsa.virtual.gfx11 import decoder as d
from hsa.virtual.gfx11.listing import llvm_registers, register_operands
from hsa.virtual.isa.valu import base_name

GRAPHICS = {"VINTERP", "LDSDIR", "MIMG", "EXP"}
# Which check line stands for our wave32, fake16 reading when a test checks several runs
PREFERENCE = ("GFX11", "W32", "GFX11-FAKE16", "CHECK", "GFX11-REAL16", "W64")
_CHECK = re.compile(r"^#\s*([A-Z0-9-]+):\s*(.*)$")
_ENCODING = re.compile(r";\s*encoding:\s*\[([^\]]*)\]?")
_COMMENT = re.compile(r"/\*.*?\*/")
_HALF = re.compile(r"\bv(\d+)\.([lh])\b")


@dataclass
class Case:
    file: str
    line: int
    data: bytes
    text: str | None  # LLVM's instruction text, None: LLVM checks it invalid
    size: int  # bytes of LLVM's instruction (the whole line when invalid)


def parse(path: Path) -> list[Case]:
    """Test encodings of one MC disassembler test file, each with its preferred check."""
    cases = []
    checks: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        m = _CHECK.match(line)
        if m:
            prefix, body = m.groups()
            if prefix.endswith("-NEXT"):
                prefix = prefix[:-5]
            if prefix not in ("RUN", "COM"):
                checks[prefix] = body
            continue
        if not line.startswith("0x"):
            continue
        data = bytes(int(b, 16) for b in re.split(r"[\s,]+", line.split("#")[0].strip()) if b)
        body = next((checks[p] for p in PREFERENCE if p in checks), None)
        checks = {}
        if body is None:
            continue  # no check: the test only runs it (e.g. for a crash)
        if "invalid instruction encoding" in body:
            cases.append(Case(path.name, n, data, None, len(data)))
            continue
        enc = _ENCODING.search(body)
        encoding = bytes(int(b, 16) for b in enc.group(1).split(",") if b.strip()) if enc else b""
        # LLVM re-encodes what it printed: where that differs from the test bytes (a float
        # inline constant printed as a 16-bit literal), or is not checked, the test line is
        # what it consumed
        size = len(encoding) if encoding and data.startswith(encoding) else len(data)
        text = body[: enc.start()] if enc else body
        cases.append(Case(path.name, n, data, text.strip(), size))
    return cases


def _true16(operands: str, fmt: str) -> str:
    """LLVM's true16 halves in our register numbering: in VOP1/VOP2/VOPC a high half vN.h
    is register field 128+N; in VOP3 the half is op_sel and the register is vN."""
    def half(m: re.Match) -> str:
        n = int(m.group(1))
        return f"v{n + 128}" if m.group(2) == "h" and fmt in ("VOP1", "VOP2", "VOPC") else f"v{n}"
    return _HALF.sub(half, operands)


def judge(case: Case) -> tuple[str, str, str]:
    """(format, verdict, detail): verdict is right (right_no_regs: with no register operand
    to compare), wrong_size, unknown, wrong_name, wrong_regs, or accepts_invalid."""
    padded = case.data + bytes(-len(case.data) % 4) + bytes(16)
    words = [int.from_bytes(padded[i:i + 4], "little") for i in range(0, len(padded), 4)]
    inst = d.decode_one(words, 0, 0)
    fmt = inst.encoding
    if case.text is None:
        known = inst.name != "<unknown>"
        return fmt, "accepts_invalid" if known else "right", inst.name
    theirs, _, operands = case.text.partition(" ")
    if inst.size != case.size:
        return fmt, "wrong_size", f"{theirs} {case.size} -> {inst.size}"
    ours = inst.name.split(" :: ")[0]
    if fmt in GRAPHICS and (inst.name == "<unknown>" or base_name(ours) == base_name(theirs)):
        return fmt, "right", theirs
    if inst.name == "<unknown>":
        return fmt, "unknown", theirs
    if base_name(ours) != base_name(theirs):
        return fmt, "wrong_name", f"{theirs}->{inst.name}"
    want = llvm_registers(_true16(_COMMENT.sub("", operands), fmt))
    got = register_operands(inst)
    if got != want:
        return fmt, "wrong_regs", f"{theirs} {','.join(want)} -> {','.join(got)}"
    return fmt, "right" if want else "right_no_regs", theirs


VERDICTS = ("right", "unknown", "wrong_name", "wrong_size", "wrong_regs", "accepts_invalid")


def measure(directory: Path, pattern: str) -> tuple[dict, dict, dict]:
    """Counters per file and per format, and example details per (format, verdict)."""
    per_file: dict[str, Counter] = {}
    per_format: dict[str, Counter] = {}
    examples: dict[tuple[str, str], Counter] = {}
    for path in sorted(directory.glob("*.txt")):
        if not fnmatch.fnmatch(path.name, pattern):
            continue
        for case in parse(path):
            fmt, verdict, detail = judge(case)
            if verdict == "right_no_regs":  # right, with no register operand to compare
                per_format.setdefault(fmt, Counter())["no_regs"] += 1
                verdict = "right"
            per_file.setdefault(path.name, Counter())[verdict] += 1
            per_format.setdefault(fmt, Counter())[verdict] += 1
            if verdict != "right":
                examples.setdefault((fmt, verdict), Counter())[detail] += 1
    return per_file, per_format, examples


def _row(name: str, c: Counter) -> str:
    total = sum(c[v] for v in VERDICTS)
    rest = ", ".join(f"{v} {c[v]}" for v in VERDICTS[1:] if c[v])
    return (f"{name:40} {c['right']:6}/{total:6} right ({100 * c['right'] / max(1, total):5.1f}%)"
            + (f"  {rest}" if rest else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="LLVM's llvm/test/MC/Disassembler/AMDGPU")
    p.add_argument("--files", default="gfx11_dasm_*.txt", help="file name pattern")
    p.add_argument("--show", type=int, default=3, help="examples listed per format and verdict")
    args = p.parse_args()
    if not args.directory.is_dir():
        raise SystemExit(f"mc_agreement: {args.directory} is not a directory; unpack LLVM's "
                         "llvm/test/MC/Disassembler/AMDGPU there")
    per_file, per_format, examples = measure(args.directory, args.files)
    if not per_file:
        raise SystemExit(f"mc_agreement: no {args.files} test encodings in {args.directory}")
    print("per file")
    for name, c in per_file.items():
        print(_row(name, c))
    print("per format")
    total: Counter = Counter()
    for fmt, c in sorted(per_format.items()):
        total.update(c)
        print(_row(fmt + (" (graphics)" if fmt in GRAPHICS else ""), c))
        for verdict in VERDICTS[1:]:
            for detail, n in examples.get((fmt, verdict), Counter()).most_common(args.show):
                print(f"    {verdict}: {detail} x{n}")
    print(_row("all", total))
    compute: Counter[str] = sum((c for f, c in per_format.items() if f not in GRAPHICS),
                                Counter())
    print(_row("compute formats", compute))
    print(f"registers compared on {sum(compute[v] for v in VERDICTS) - compute['no_regs']} "
          "compute encodings (the rest have no register operand or are graphics)")


if __name__ == "__main__":
    main()
