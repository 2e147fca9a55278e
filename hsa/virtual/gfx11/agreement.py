"""Decoder agreement with LLVM's gfx11 disassembler, on random encodings we generate.

    python -m hsa.virtual.gfx11.agreement [--per-format 2000] [--seed 0] [--show 5]

For every instruction format it draws random instruction words under the format's fixed
top bits (the rest random, literals and DPP words too), asks `llvm-mc-19 --disassemble
-mcpu=gfx1100 --show-encoding` what each is, and keeps those LLVM accepts. For each it
compares our decoder's mnemonic (encoding suffixes aside) and size with LLVM's. Graphics
formats (VINTERP, LDSDIR, MIMG, EXP) count as right when we name the format and the size is
right, since the executor refuses them by format. Needs llvm-mc-19; nothing of LLVM's is
stored, the vectors are made here from a seed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter

import numpy as np

from hsa.virtual.gfx11 import decoder as d
from hsa.virtual.isa.valu import base_name

LLVM_MC = "llvm-mc-19"
NOP, MARKER = 0xBF800000, 0xBF800007
# format: (fixed top bits value, number of fixed bits)
FORMATS = {
    "SOP2": (0b10, 2), "SOPK": (0b1011, 4), "SOP1": (0x17D, 9), "SOPC": (0x17E, 9),
    "SOPP": (0x17F, 9), "VOP1": (0x3F, 7), "VOPC": (0x3E, 7), "VOP2": (0, 1),
    "SMEM": (0x3D, 6), "VOP3": (0x35, 6), "VOP3P": (0xCC, 8), "VINTERP": (0xCD, 8),
    "LDSDIR": (0xCE, 8), "VOPD": (0x32, 6), "DS": (0x36, 6), "FLAT": (0x37, 6),
    "MUBUF": (0x38, 6), "MTBUF": (0x3A, 6), "MIMG": (0x3C, 6), "EXP": (0x3E, 6),
}
GRAPHICS = {"VINTERP", "LDSDIR", "MIMG", "EXP"}
_LINE = re.compile(r"^\s*(\S+).*?; encoding: \[([^\]]*)\]")


def draw(fmt: str, n: int, rng: np.random.Generator) -> list[list[int]]:
    top, bits = FORMATS[fmt]
    words = rng.integers(0, 2**32, (n, 4), dtype=np.uint64).astype(np.int64)
    low = (1 << (32 - bits)) - 1
    words[:, 0] = (top << (32 - bits)) | (words[:, 0] & low)
    if fmt == "VOP2":  # top bit 0, and not VOP1/VOPC's 0x3E/0x3F prefixes
        words[:, 0] &= ~(1 << 30)
    return [list(map(int, w)) for w in words]


def llvm_decode(items: list[list[int]]) -> list[tuple[str, int] | None]:
    """(mnemonic, size in bytes) per item, or None where LLVM reports it invalid."""
    lines = []
    for ws in items:
        data = b"".join(w.to_bytes(4, "little") for w in ws + [NOP, NOP, NOP, MARKER])
        lines.append(",".join(f"0x{b:02x}" for b in data))
    run = subprocess.run([LLVM_MC, "--disassemble", "-triple=amdgcn-amd-amdhsa",
                          "-mcpu=gfx1100", "--show-encoding"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True)
    invalid = {int(m.group(1)) for m in re.finditer(
        r"<stdin>:(\d+):1: warning: invalid instruction encoding", run.stderr)}
    segments: list[list[tuple[str, int]]] = [[]]
    for line in run.stdout.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        if m.group(1) == "s_nop" and m.group(2) == "0x07,0x00,0x80,0xbf":
            segments.append([])
        else:
            segments[-1].append((m.group(1), len(m.group(2).split(","))))
    return [segments[i][0] if (i + 1) not in invalid and i < len(segments) and segments[i]
            else None for i in range(len(items))]


def measure(per_format: int, seed: int) -> dict[str, Counter]:
    rng = np.random.default_rng(seed)
    results: dict[str, Counter] = {}
    for fmt in FORMATS:
        items = draw(fmt, per_format, rng)
        c: Counter = Counter()
        for ws, theirs in zip(items, llvm_decode(items), strict=True):
            if theirs is None:
                c["llvm_rejects"] += 1
                continue
            name, size = theirs
            inst = d.decode_one(ws + [0, 0, 0], 0, 0)
            c["checked"] += 1
            if inst.size != size:
                c["wrong_size"] += 1
                c[f"size:{name}"] += 1
            elif fmt in GRAPHICS and inst.encoding == fmt:
                c["right"] += 1
            elif inst.name == "<unknown>":
                c["unknown"] += 1
                c[f"unknown:{name}"] += 1
            elif base_name(inst.name.split(" :: ")[0]) != base_name(name):
                c["wrong_name"] += 1
                c[f"name:{name}->{inst.name}"] += 1
            else:
                c["right"] += 1
        results[fmt] = c
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-format", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=3, help="worst cases listed per format")
    args = p.parse_args()
    results = measure(args.per_format, args.seed)
    total: Counter[str] = Counter()
    for fmt, c in results.items():
        total.update({k: v for k, v in c.items() if ":" not in k})
        worst = [f"{k} x{v}" for k, v in c.most_common() if ":" in k][: args.show]
        checked = c["checked"] or 1
        print(f"{fmt:8} {c['right']:5}/{c['checked']:5} right ({100 * c['right'] / checked:5.1f}%)"
              f"  unknown {c['unknown']}, wrong name {c['wrong_name']}, wrong size "
              f"{c['wrong_size']}" + (f"; {', '.join(worst)}" if worst else ""))
    print(f"all      {total['right']}/{total['checked']} right "
          f"({100 * total['right'] / max(1, total['checked']):.2f}%), "
          f"{total['llvm_rejects']} drawn words LLVM rejects")


if __name__ == "__main__":
    main()
