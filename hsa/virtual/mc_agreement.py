"""Decoder agreement with LLVM's own MC disassembler tests, for gfx9 and gfx12 targets.

    python -m hsa.virtual.mc_agreement DIR --target gfx942 [--missing] [--show 3]
    python -m hsa.virtual.mc_agreement DIR --target gfx1201
    python -m hsa.virtual.mc_agreement DIR --target gfx950|gfx1250   (needs clang 22)

DIR holds LLVM's `llvm/test/MC/Disassembler/AMDGPU` (Debian's `llvm-toolchain-19` source
package, unpacked outside the repository: nothing of LLVM's is stored here). The test
encodings are the byte lines of the target's files (gfx90a: `gfx9_*`, `gfx9-*`,
`gfx90a*`; gfx942: those and `gfx940*`; gfx1201: `gfx12_dasm_*`). LLVM's `gfx9_*` files
check gfx900's reading, so the truth for every encoding is what
`llvm-mc-19 --disassemble -mcpu=TARGET` makes of it (gfx942 as gfx940, which LLVM 19
spells it; gfx1201 as itself), fed the same encodings LLVM's tests feed it. For each
encoding LLVM accepts we decode the bytes with the target's decoder and compare the size
and the mnemonic (encoding suffixes aside; gfx12's renames through the decoder's
`core_name`); an encoding LLVM rejects must not decode to a known instruction.
MIMG/VIMAGE/VSAMPLE and EXP, image and export formats with no table here, count as right
when our decoder names no other instruction for them and the size agrees; so do the
graphics formats VINTERP and LDSDIR/VDSDIR, which the executor refuses by format.

gfx950 and gfx1250, which LLVM 19 does not know, are measured the other way round
(`--target gfx950|gfx1250`): the check-line texts of the gfx9/gfx940 (or gfx12) files that
clang 22 from the ziglang wheel assembles for the target, each into a section of its own,
must decode to their mnemonic (gfx90a's MFMA spellings being gfx940's instructions), their
size and the registers the text names. gfx1250 adds its own instructions, which no LLVM 19
file has: every entry of its table (`opcodes_gfx1250.json`) spelled with other registers in
each operand (low, middle, top of the file, SGPRs for VGPRs, special registers, an SGPR
base for `off`), as clang 22 takes them (`own_corpus`).

`--missing` lists the opcodes of the target's tables that have no semantics (the executor
refuses them by name), found by compiling a probe instruction of each opcode. Needs
llvm-mc-19.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ground.errors import CompileError
from hsa.virtual.gfx11.gen_tables import clang22_encodings
from hsa.virtual.isa.operands import Instruction
from hsa.virtual.isa.valu import base_name

LLVM_MC = "llvm-mc-19"
NOP, MARKER = b"\x00\x00\x80\xbf", b"\x07\x00\x80\xbf"  # s_nop 0, s_nop 7 (all families)
_LINE = re.compile(r"^\s*(\S+)(.*?)\s*(?://.*)?; encoding: \[([^\]]*)\]")
_IMAGE = ("image_", "buffer_load_lds", "exp")  # formats the decoders leave to the executor
IMAGE_FORMATS = {"MIMG", "VIMAGE", "VSAMPLE", "EXP"}
# graphics formats the executor refuses by format: right when named with the right size
GRAPHICS = {"VINTERP", "LDSDIR", "VDSDIR"}


@dataclass(frozen=True)
class Target:
    name: str
    mcpu: str  # what llvm-mc-19 calls it
    files: tuple[str, ...]  # glob patterns of LLVM's test files for the family
    decode: Callable[[list[int]], Instruction]
    canonical: Callable[[str], str]  # LLVM's mnemonic -> the one our decoder reports
    clang22: bool = False  # the truth: clang 22 assembling the files' check-line texts
    # the registers an instruction names, in LLVM's spelling and order (None: not listed),
    # and the register tokens of LLVM's operand text
    registers: Callable[[Instruction], list[str] | None] | None = None
    llvm_registers: Callable[[str], list[str]] | None = None


def _targets() -> dict[str, Target]:
    from hsa.virtual.gfx9 import decoder as d9
    from hsa.virtual.gfx9 import listing as l9
    from hsa.virtual.gfx11 import listing as l11
    from hsa.virtual.gfx12 import decoder as d12

    def gfx9_decoder(target: str) -> Callable[[list[int]], Instruction]:
        return lambda w: d9.decode_one(w, 0, 0, target)

    def gfx12_decoder(target: str) -> Callable[[list[int]], Instruction]:
        return lambda w: d12.decode_one(w, 0, 0, target)

    def same(n: str) -> str:
        return n

    def regs9(t: str) -> Callable[[Instruction], list[str] | None]:
        return lambda inst: l9.register_operands(inst, t)

    def regs12(t: str) -> Callable[[Instruction], list[str] | None]:
        return lambda inst: l11.register_operands(inst, d12.opcode_tables(t)) or None

    gfx9 = ("gfx9_*.txt", "gfx9-*.txt", "gfx90a*.txt")  # gfx900's and gfx90a's tests
    files = {"gfx90a": gfx9, "gfx942": (*gfx9, "gfx940*.txt")}
    out = {t: Target(t, "gfx940" if t == "gfx942" else t, files[t], gfx9_decoder(t), same,
                     registers=regs9(t), llvm_registers=l9.llvm_registers)
           for t in ("gfx90a", "gfx942")}
    out["gfx1201"] = Target("gfx1201", "gfx1201", ("gfx12_dasm_*.txt",),
                            gfx12_decoder("gfx1201"), d12.core_name,
                            registers=regs12("gfx1201"), llvm_registers=l11.llvm_registers)
    # LLVM 19 knows neither: their instructions are the gfx940 / gfx12 check lines' texts
    # that clang 22 assembles for them
    out["gfx950"] = Target("gfx950", "gfx950", files["gfx942"], gfx9_decoder("gfx950"), same,
                           True, registers=regs9("gfx950"), llvm_registers=l9.llvm_registers)
    out["gfx1250"] = Target("gfx1250", "gfx1250", ("gfx12_dasm_*.txt",),
                            gfx12_decoder("gfx1250"), d12.core_name, True,
                            registers=regs12("gfx1250"), llvm_registers=l11.llvm_registers)
    return out


def test_encodings(directory: Path, patterns: tuple[str, ...]) -> list[tuple[str, int, bytes]]:
    """(file, line, bytes) of every byte line of the matching test files."""
    out = []
    for path in sorted(directory.glob("*.txt")):
        if not any(fnmatch.fnmatch(path.name, p) for p in patterns):
            continue
        for n, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#")[0].strip()
            if not line.startswith("0x"):
                continue
            try:
                data = bytes(int(b, 16) for b in re.split(r"[\s,]+", line) if b)
            except ValueError:
                continue
            out.append((path.name, n, data))
    return out


def llvm_decode(items: list[bytes], mcpu: str) -> list[tuple[str, int, str] | None]:
    """(mnemonic, size in bytes, operand text) of the first instruction of each item as
    llvm-mc-19 reads it for `mcpu`, or None where it reports the encoding invalid. Items
    are fed one a line, each followed by three s_nop 0 and an s_nop 7 that marks its end."""
    lines = [",".join(f"0x{b:02x}" for b in data + NOP * 3 + MARKER) for data in items]
    run = subprocess.run([LLVM_MC, "--disassemble", "-triple=amdgcn-amd-amdhsa",
                          f"-mcpu={mcpu}", "--show-encoding"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=False)
    invalid = {int(m.group(1)) for m in re.finditer(
        r"<stdin>:(\d+):\d+: warning: invalid instruction encoding", run.stderr)}
    segments: list[list[tuple[str, bytes, str]]] = [[]]  # (mnemonic, encoding, operands)
    for line in run.stdout.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        name, encoding = m.group(1), m.group(3)
        if name == "s_nop" and encoding.replace(" ", "") == "0x07,0x00,0x80,0xbf":
            segments.append([])
        else:
            encoded = bytes(int(b, 16) for b in encoding.split(",") if b.strip())
            segments[-1].append((name, encoded, m.group(2)))
    out: list[tuple[str, int, str] | None] = []
    for i, data in enumerate(items):
        if (i + 1) in invalid or i >= len(segments) or not segments[i]:
            out.append(None)
            continue
        name, encoded, operands = segments[i][0]
        # LLVM prints its re-encoding: where that is not what the test bytes hold (an inline
        # float constant printed as a 16-bit literal), the test line is one instruction
        out.append((name, len(encoded) if data.startswith(encoded) else len(data), operands))
    return out


_MFMA_NAME = re.compile(r"^v_mfma_(f32|i32|f64)_(\d+)x(\d+)x(\d+)(?:_\d+b)?_?(\w+?)(?:_1k)?$")


def _mfma_key(name: str) -> tuple | None:
    """An MFMA's (out, M, N, K, input type) whatever the spelling: gfx90a's
    v_mfma_f32_4x4x1f32 and v_mfma_f32_32x32x8bf16_1k are gfx940's v_mfma_f32_4x4x1_16b_f32
    and v_mfma_f32_32x32x8_bf16 (clang 22 takes both)."""
    m = _MFMA_NAME.match(base_name(name))
    return m.groups() if m else None


def _spellings(target: Target, name: str) -> set[str]:
    """LLVM's mnemonic as our decoder may report it: renamed (gfx12's s_add_co_u32 is the
    core's s_add_u32; the renames are keyed by e32/e64 names), encoding suffixes aside."""
    base = base_name(name)
    return {base_name(target.canonical(n)) for n in (name, base, base + "_e32", base + "_e64")}


_CHECK_TEXT = re.compile(r"^#\s*[A-Z0-9-]+:\s*([a-z_][^;]*?)\s*(?:;|$)")


def check_texts(directory: Path, patterns: tuple[str, ...]) -> list[tuple[str, int, str]]:
    """(file, line, instruction text) of the check lines of the matching test files."""
    out = []
    for path in sorted(directory.glob("*.txt")):
        if not any(fnmatch.fnmatch(path.name, p) for p in patterns):
            continue
        for n, raw in enumerate(path.read_text().splitlines(), 1):
            m = _CHECK_TEXT.match(raw.strip())
            if m and "warning" not in m.group(1) and "error" not in m.group(1):
                out.append((path.name, n, m.group(1).strip()))
    return out


VERDICTS = ("right", "unknown", "wrong_name", "wrong_size", "wrong_regs", "accepts_invalid")
MISDECODED = ("wrong_name", "wrong_size", "wrong_regs", "accepts_invalid")
_COMMENT = re.compile(r"/\*.*?\*/")


def judge(target: Target, data: bytes, theirs: tuple[str, int, str] | None
          ) -> tuple[str, str, str]:
    """(format, verdict, detail) of our decoding of `data` against LLVM's: right (or
    right_no_regs where no register operand was compared), unknown, wrong_name, wrong_size,
    wrong_regs, accepts_invalid."""
    padded = data + bytes(-len(data) % 4) + bytes(20)
    words = [int.from_bytes(padded[i:i + 4], "little") for i in range(0, len(padded), 4)]
    inst = target.decode(words)
    fmt = inst.encoding
    known = inst.name not in ("<unknown>", "<outside code>")
    if theirs is None:
        return fmt, "accepts_invalid" if known else "right", inst.name
    name, size, operands = theirs
    if inst.size != size:
        return fmt, "wrong_size", f"{name} {size} -> {inst.name} {inst.size}"
    if fmt in GRAPHICS:
        return fmt, "right_no_regs", name  # a graphics format, refused by format; size right
    if not known:
        if name.startswith(_IMAGE) or fmt in IMAGE_FORMATS:
            return fmt, "right_no_regs", name  # refused by format, size right
        return fmt, "unknown", name
    ours = inst.name.split(" :: ")[0]
    if not (_mfma_key(ours) is not None and _mfma_key(ours) == _mfma_key(name)) and \
            base_name(ours) not in _spellings(target, name):
        return fmt, "wrong_name", f"{name}->{inst.name}"
    got = target.registers(inst) if target.registers else None
    if got is None or target.llvm_registers is None:
        return fmt, "right_no_regs", name
    from hsa.virtual.gfx11.mc_agreement import _true16

    want = target.llvm_registers(_true16(_COMMENT.sub("", operands), fmt))
    if got != want:
        return fmt, "wrong_regs", f"{name} {','.join(want)} -> {','.join(got)}"
    return fmt, "right" if want else "right_no_regs", name


OWN = "(gfx1250 table samples, register variants)"


def own_corpus() -> tuple[list[tuple[str, int, bytes]], list[tuple[str, int, str]]]:
    """gfx1250's own instructions (LLVM 19's test files have none): each table entry's
    sample spelled with other registers (`gen_gfx1250.register_variants`), as clang 22
    assembles them; the texts it rejects are left out. Cases and truth as `measure` keeps
    them, under the file name OWN."""
    from hsa.virtual.gfx12 import decoder as d12
    from hsa.virtual.gfx12.gen_gfx1250 import encode, register_variants

    samples = {info["sample"] for table in d12.opcode_tables("gfx1250").values()
               for info in table.values()}
    texts = sorted({v for sample in samples for v in register_variants(sample)})
    cases, truth = [], []
    for k, (text, data) in enumerate(zip(texts, encode(texts), strict=True)):
        if data:
            name, _, operands = text.partition(" ")
            cases.append((OWN, k, data))
            truth.append((name, len(data), operands))
    return cases, truth


def measure(directory: Path, target: Target, own: bool = True) -> tuple[dict, dict, dict]:
    """Counters per file and per format, and example details per (format, verdict).
    `own`: gfx1250 adds its own instructions (`own_corpus`, under the file name OWN)."""
    if target.clang22:
        texts = check_texts(directory, target.files)
        unique = sorted({t for _, _, t in texts})
        encoded = dict(zip(unique, clang22_encodings(unique, target.mcpu), strict=True))
        cases: list[tuple[str, int, bytes]] = []
        truth: list[tuple[str, int, str] | None] = []
        for file, line, text in texts:
            data = encoded[text]
            if data:  # what clang 22 takes for this target
                cases.append((file, line, data))
                name, _, operands = text.partition(" ")
                truth.append((name, len(data), operands))
        if own and target.name == "gfx1250":  # and gfx1250's own, from its table
            own_cases, own_truth = own_corpus()
            cases += own_cases
            truth += own_truth
    else:
        cases = test_encodings(directory, target.files)
        truth = llvm_decode([c[2] for c in cases], target.mcpu)
    per_file: dict[str, Counter] = {}
    per_format: dict[str, Counter] = {}
    examples: dict[tuple[str, str], Counter] = {}
    for (file, _line, data), theirs in zip(cases, truth, strict=True):
        fmt, verdict, detail = judge(target, data, theirs)
        if theirs is None and verdict == "right":
            verdict, fmt = "right_no_regs", "(invalid)"
        if verdict == "right_no_regs":  # right, with no register operand compared
            per_format.setdefault(fmt, Counter())["no_regs"] += 1
            verdict = "right"
        per_file.setdefault(file, Counter())[verdict] += 1
        per_format.setdefault(fmt, Counter())[verdict] += 1
        if verdict != "right":
            examples.setdefault((fmt, verdict), Counter())[detail] += 1
    return per_file, per_format, examples


def missing(target: str) -> dict[str, tuple[int, list[str]]]:
    """encoding -> (table opcodes, those the executor has no semantics for: refused by
    name)."""
    from hsa.virtual.gfx11.coverage import PROBE
    from hsa.virtual.isa.executor import compile_instruction

    if target.startswith("gfx12") or target == "gfx1250":
        from hsa.virtual.gfx12 import FAMILIES
        from hsa.virtual.gfx12 import decoder as d12

        tables = d12.opcode_tables(target)
        fam = FAMILIES[target]

        def name_of(n: str) -> str:
            return d12.core_name(n)
    else:
        from hsa.virtual.gfx9 import decoder as d9
        from hsa.virtual.gfx9 import family

        tables = d9.opcode_tables(target)
        fam = family(target)

        def name_of(n: str) -> str:
            return n
    # as the executor compiles: the family's compiler, else the core's
    compile_fn = fam.compile or compile_instruction
    # the fields the gfx9 and gfx12 decoders add to gfx11's (MFMA, FLAT, buffers)
    probe = dict(PROBE, acc_cd=0, abid=0, cbsz=0, blgp=0, acc=0, lds=0, sc1=0, th=0, scope=0,
                 zero_hi16=1)
    encodings_of: dict[str, set[str]] = {}
    for e, t in tables.items():
        for info in t.values():
            encodings_of.setdefault(info["name"], set()).add(e)
    out: dict[str, tuple[int, list[str]]] = {}
    for enc, table in sorted(tables.items()):
        if enc.startswith("VOPD"):
            continue
        names: list[str] = []
        for op, info in sorted(table.items()):
            kind = enc
            if enc == "VBUFFER":  # what gfx12's decoder hands the core
                kind = "MTBUF" if info["name"].startswith("tbuffer") else "MUBUF"
            if enc in ("SOP2", "VOP3") and encodings_of[info["name"]] - {enc}:
                # another format's opcode seen through this one's wider opcode field (SOPK
                # or SOP1 through SOP2; gfx9's VOP3P, v_pk_*, through VOP3): counted there
                continue
            inst = Instruction(0, 8, kind, op, name_of(info["name"]), dict(probe), None, ())
            try:
                ok = compile_fn(inst).fn is not None
            except Exception:  # noqa: BLE001 - a probe the compiler cannot take: no semantics
                ok = False
            if not ok and info["name"] not in names:  # (gfx12 SMEM: one name, 4 codes)
                names.append(info["name"])
        out[enc] = (len(table), names)
    return out


def _row(name: str, c: Counter) -> str:
    total = sum(c[v] for v in VERDICTS)
    rest = ", ".join(f"{v} {c[v]}" for v in VERDICTS[1:] if c[v])
    return (f"{name:32} {c['right']:6}/{total:6} right ({100 * c['right'] / max(1, total):5.1f}%)"
            + (f"  {rest}" if rest else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="LLVM's llvm/test/MC/Disassembler/AMDGPU")
    p.add_argument("--target", default="gfx942",
                   choices=("gfx90a", "gfx942", "gfx1201", "gfx950", "gfx1250"))
    p.add_argument("--show", type=int, default=3, help="examples listed per format and verdict")
    p.add_argument("--missing", action="store_true",
                   help="also list the table opcodes the executor refuses")
    args = p.parse_args(argv)
    if not args.directory.is_dir():
        print(f"mc_agreement: {args.directory} is not a directory; unpack LLVM's "
              "llvm/test/MC/Disassembler/AMDGPU there", file=sys.stderr)
        return 2
    target = _targets()[args.target]
    try:
        per_file, per_format, examples = measure(args.directory, target)
    except FileNotFoundError:
        print(f"mc_agreement: {LLVM_MC} is not installed; apt-get install llvm-19",
              file=sys.stderr)
        return 2
    except CompileError as e:
        print(f"mc_agreement: {e}", file=sys.stderr)
        return 2
    if not per_file:
        print(f"mc_agreement: no {' '.join(target.files)} test encodings in {args.directory}",
              file=sys.stderr)
        return 2
    truth = "clang 22 assembling the check lines" if target.clang22 else "llvm-mc-19"
    print(f"{target.name} ({truth}, -mcpu={target.mcpu}) per file")
    for name, c in per_file.items():
        print(_row(name, c))
    print("per format")
    total: Counter = Counter()
    for fmt, c in sorted(per_format.items()):
        total.update(c)
        print(_row(fmt, c))
        for verdict in VERDICTS[1:]:
            for detail, n in examples.get((fmt, verdict), Counter()).most_common(args.show):
                print(f"    {verdict}: {detail} x{n}")
    print(_row("all", total))
    misdecoded = sum(total[v] for v in MISDECODED)
    compared = sum(total[v] for v in VERDICTS) - total["no_regs"]
    print(f"registers compared on {compared} encodings (the rest have none, are graphics, "
          "or are refused)")
    print("misdecoded (another mnemonic, size or register operands, or an invalid encoding "
          f"taken): {misdecoded}")
    if args.missing:
        cov = missing(target.name)
        done = sum(t - len(m) for t, m in cov.values())
        print(f"opcode coverage: {done}/{sum(t for t, _ in cov.values())} table opcodes have "
              "semantics; refused by name:")
        for enc, (t, names) in cov.items():
            print(f"  {enc:8} {t - len(names):4}/{t:4}" + (f"  {' '.join(names)}" if names
                                                             else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
