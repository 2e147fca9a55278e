"""Generate `opcodes_gfx1250.json`, the gfx1250 opcode tables, with clang 22's assembler.

`llvm-mc-19` does not know gfx1250, and no disassembler here does; clang 22 (the `ziglang`
wheel) assembles it. So this runs the other way round from `gen_tables.py`: it assembles the
sample text of every gfx1201 opcode (`opcodes.json`) plus `GFX1250_ONLY`, samples of
instructions gfx1250 adds, with `clang -cc1as -target-cpu gfx1250 -show-encoding`, and
reads the encoding and opcode of each accepted line back from the bytes clang printed.
Lines clang rejects are instructions gfx1250 does not have. Run
`python -m hsa.virtual.gfx12.gen_gfx1250` (about a second). The output is data: facts read
from LLVM's assembler.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

from hsa.virtual.gfx11.gen_tables import clang22_cc1as, clang22_encodings
from hsa.virtual.gfx12 import decoder

HERE = Path(__file__).parent
OUT = HERE / "opcodes_gfx1250.json"

# Instructions gfx1250 has and gfx1201 does not (mnemonics from LLVM's gfx1250 tests and
# clang's gfx1250 code generation), with operands that assemble.
GFX1250_ONLY = [
    # gfx1201 has these too, but their gfx1201 samples do not assemble for gfx1250 (true16
    # operands, named barriers spelled differently)
    "v_fmaak_f16 v0.l, v1.l, v2.l, 0x1234",
    "v_fmamk_f16 v0.l, v1.l, 0x1234, v2.l",
    "s_barrier_init -1",
    "s_barrier_join -1",
    "s_wakeup_barrier -1",
    "s_get_barrier_state s0, -1",
    "v_mad_nc_u64_u32 v[0:1], s4, ttmp9, v[0:1]",
    "v_mad_u32 v0, s4, s3, v0",
    "v_mad_nc_i64_i32 v[0:1], s4, ttmp9, v[0:1]",
    "v_add_nc_u64 v[0:1], v[2:3], v[4:5]",
    "v_sub_nc_u64 v[0:1], v[2:3], v[4:5]",
    "v_mul_u64 v[0:1], v[2:3], v[4:5]",
    "v_lshl_add_u64 v[0:1], v[2:3], 2, v[4:5]",
    "v_pk_add_f32 v[0:1], v[2:3], v[4:5]",
    "v_pk_mul_f32 v[0:1], v[2:3], v[4:5]",
    "v_pk_fma_f32 v[0:1], v[2:3], v[4:5], v[6:7]",
    "s_wait_xcnt 0x0",
    "global_prefetch_b8 v[0:1], off",
    "flat_prefetch_b8 v[0:1]",
    "global_inv",
    "global_wb",
    "global_wbinv",
    "s_get_pc_i64 s[0:1]",
    "s_set_pc_i64 s[0:1]",
    "s_swap_pc_i64 s[0:1], s[2:3]",
    "s_add_pc_i64 s[0:1]",
    "v_wmma_f32_16x16x32_f16 v[0:7], v[8:15], v[16:23], v[0:7]",
    "v_wmma_f32_16x16x4_f32 v[0:7], v[8:9], v[10:11], v[0:7]",
    "v_wmma_i32_16x16x64_iu8 v[0:7], v[8:15], v[16:23], v[0:7]",
    "s_barrier_signal -1",
    "s_barrier_wait -1",
    "s_barrier_signal -3",
    "s_barrier_wait -3",
    "s_barrier_signal_isfirst -1",
    "s_or_b64 s[0:1], s[2:3], 0x123456789",  # operand 254: a 64-bit literal
    "v_wmma_f32_16x16x32_bf16 v[0:7], v[8:15], v[16:23], v[0:7]",
    "v_wmma_f32_16x16x32_f16 v[0:7], v[8:15], v[16:23], 0",
    "v_mov_b64 v[0:1], v[2:3]",
    # transposing loads (LDS and global) and the VGPR bank select of 1024-VGPR waves
    "ds_load_tr16_b128 v[0:3], v4",
    "ds_load_tr8_b64 v[0:1], v4",
    "ds_load_tr4_b64 v[0:1], v4",
    "ds_load_tr6_b96 v[0:2], v4",
    "global_load_tr16_b128 v[0:3], v[4:5], off",
    "global_load_tr8_b64 v[0:1], v[4:5], off",
    "global_load_tr4_b64 v[0:1], v[4:5], off",
    "global_load_tr6_b96 v[0:2], v[4:5], off",
    "s_set_vgpr_msb 0x41",
]
# VOPD Y ops gfx1250 adds (LLVM's VOPDYOnlyPseudosGFX1250), beside X = v_dual_mov_b32
GFX1250_VOPDY = ["v_dual_sub_nc_u32", "v_dual_lshrrev_b32", "v_dual_ashrrev_i32",
                 "v_dual_max_i32", "v_dual_min_i32"]
# VOPD3 (top byte 0xCF, 96 bits): the X and Y components LLVM lists for gfx1250
# (VOPD3XPseudosGFX1250, VOPD3YPseudosGFX1250); each is assembled beside a v_dual_fma_f32,
# which only VOPD3 encodes, with registers in different banks.
VOPD3_COMMON = ["fmac_f32", "mul_f32", "add_f32", "sub_f32", "subrev_f32",
                "mul_dx9_zero_f32", "mov_b32", "cndmask_b32", "max_num_f32", "min_num_f32",
                "dot2acc_f32_f16", "dot2acc_f32_bf16", "add_nc_u32", "lshlrev_b32", "fma_f32",
                "sub_nc_u32", "lshrrev_b32", "ashrrev_i32"]
VOPD3_X = VOPD3_COMMON + ["fma_f64", "add_f64", "mul_f64", "max_num_f64", "min_num_f64"]
VOPD3_Y = VOPD3_COMMON + ["max_i32", "min_i32", "bitop2_b32"]


def _vopd3_operands(op: str, regs: tuple[str, str, str, str], sgpr: str) -> str:
    d, a, b, c = regs
    if op == "mov_b32":
        return f"{d}, {a}"
    if op == "cndmask_b32":
        return f"{d}, {a}, {b}, {sgpr}"
    if op == "bitop2_b32":
        return f"{d}, {a}, {b} bitop3:0x80"
    return f"{d}, {a}, {b}" + (f", {c}" if op.startswith("fma_") else "")


def vopd3_samples() -> list[str]:
    fma_x = "v_dual_fma_f32 v0, v1, v2, v3"
    out = []
    for op in VOPD3_X:
        if op.endswith("f64"):
            x = f"v_dual_{op} " + _vopd3_operands(op, ("v[0:1]", "v[2:3]", "v[4:5]", "v[6:7]"),
                                                  "s3")
            out.append(f"{x} :: v_dual_fma_f32 v9, v13, v15, v17")
        else:
            x = f"v_dual_{op} " + _vopd3_operands(op, ("v0", "v1", "v2", "v3"), "s3")
            out.append(f"{x} :: v_dual_fma_f32 v5, v6, v7, v9")
    for op in VOPD3_Y:
        y = f"v_dual_{op} " + _vopd3_operands(op, ("v5", "v6", "v7", "v8"), "s5")
        # (clang wants src1 v3 beside dot2acc_f32_bf16, v2 beside the others)
        x = "v_dual_fma_f32 v0, v1, v3, v4" if op == "dot2acc_f32_bf16" else fma_x
        out.append(f"{x} :: {y}")
    out += [f"v_dual_mov_b32 v0, v1 :: {y} v5, v6, v7" for y in GFX1250_VOPDY]
    return out


def samples() -> list[str]:
    tables = json.loads((HERE / "opcodes.json").read_text())
    out = []
    for enc, table in tables.items():
        for info in table.values():
            # LLVM 19 printed a wave64-only operand as a VGPR with a comment: gfx1250 is
            # wave32, its lane masks are one SGPR
            text = re.sub(r"v\d+/\*Invalid register.*?\*/", "s4", info["sample"])
            if enc == "VOPDX" or enc == "VOPDY":
                continue  # VOPD pairs are taken from the pairs below
            out.append(text)
    # VOPD: each X op beside Y = v_dual_mov_b32, each Y op beside X = v_dual_mov_b32, with
    # registers in different banks and destinations of different parity
    out += [f"{x['sample']} :: v_dual_mov_b32 v17, v99" for x in tables["VOPDX"].values()]
    out += [f"v_dual_mov_b32 v16, v99 :: {y['sample']}" for y in tables["VOPDY"].values()]
    return out + GFX1250_ONLY + vopd3_samples()


def assemble(lines: list[str], true16: bool = False) -> list[tuple[str, list[int]]]:
    """(text, dwords) for each line clang accepts for gfx1250 (with true16: in the
    real-true16 mode that compilers use for gfx1250, where 16-bit operands are VGPR halves
    such as v16.l)."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as fh:
        fh.write("\n".join(lines) + "\n")
        path = fh.name
    run = subprocess.run(
        [*clang22_cc1as("gfx1250", true16), "-show-encoding", "-filetype", "asm", "-o", "-",
         path],
        capture_output=True, text=True, timeout=300)
    Path(path).unlink()
    out = []
    for line in run.stdout.splitlines():
        m = re.match(r"\s*(.*?)\s*; encoding: \[(.*)\]", line)
        if not m:
            continue
        data = bytes(int(b, 16) for b in m.group(2).split(","))
        words = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
        out.append((m.group(1), words))
    return out


def build() -> dict[str, dict[str, dict]]:
    tables: dict[str, dict[str, dict]] = {}
    lines = samples()
    # the default (fake16) mode first, then real-true16 for the 16-bit forms only it takes
    for text, words in assemble(lines) + assemble(lines, true16=True):
        inst = decoder.decode_one(words + [0, 0, 0], 0, 0, "gfx1250")
        enc = inst.encoding
        if enc in ("VOPD", "VOPD3"):
            x, y = (p.strip() for p in text.split("::"))
            tables.setdefault(enc + "X", {}).setdefault(str(inst.f["opx"]), {
                "name": x.split()[0], "sample": text})
            tables.setdefault(enc + "Y", {}).setdefault(str(inst.f["opy"]), {
                "name": y.split()[0], "sample": text})
            continue
        if enc in ("MUBUF", "MTBUF"):
            enc = "VBUFFER"
        name = text.split()[0]
        tables.setdefault(enc, {}).setdefault(str(inst.op), {"name": name, "sample": text})
    for enc, table in sorted(tables.items()):
        print(f"{enc}: {len(table)} opcodes")
    return with_gfx1201_operands(tables)


def with_gfx1201_operands(tables: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """Give an entry gfx1201's operand list where clang printed gfx1201's own probe sample
    back unchanged (same mnemonic, same registers in the same fields); VOPD halves are
    matched half by half. Other entries (gfx1250's own, or reworded) get none: their
    registers are not compared."""
    gfx1201 = json.loads((HERE / "opcodes.json").read_text())
    by_sample = {(enc, info["sample"]): info["operands"] for enc, table in gfx1201.items()
                 for info in table.values() if "operands" in info}
    for enc, table in tables.items():
        for info in table.values():
            text = info["sample"]
            if enc in ("VOPDX", "VOPDY"):
                text = text.split("::")[0 if enc == "VOPDX" else 1].strip()
            operands = by_sample.get((enc, text))
            if operands is not None and text.split()[0] == info["name"]:
                info["operands"] = operands
    return tables


# A register token of an instruction text: v7, v[8:9], v7.l (a true16 half), s3, s[4:5],
# ttmp9, ttmp[4:5] (trap temporaries are SGPR codes 108 and up)
REGISTER = re.compile(r"(?<![\w\[])(v|s|ttmp)(?:(\d+)|\[(\d+):(\d+)\])(\.[lh])?(?![\w\[])")


def _tokens(text: str) -> list[tuple[re.Match, str, int]]:
    """(match, kind "v" or "s", width) of each register token of `text`, in order."""
    out = []
    for m in REGISTER.finditer(text):
        lo = int(m.group(2) or m.group(3))
        hi = int(m.group(2) or m.group(4))
        out.append((m, "v" if m.group(1) == "v" else "s", hi - lo + 1))
    return out


def _spell(kind: str, lo: int, width: int, half: str | None) -> str:
    reg = f"{kind}{lo}" if width == 1 else f"{kind}[{lo}:{lo + width - 1}]"
    return reg + (half or "")


def renumber(text: str, vgpr: int, sgpr: int, top: bool = False) -> str:
    """`text` with its register tokens given fresh numbers, one after another without
    overlap (VGPRs from `vgpr`, SGPRs from `sgpr`; with `top`, the last ones end at v255 and
    s105), tuples aligned as LLVM wants them (VGPR pairs even, SGPR pairs even and wider
    SGPR tuples 4-aligned)."""
    toks = _tokens(text)

    def align(kind: str, n: int, width: int) -> int:
        step = 1 if width == 1 else (2 if kind == "v" or width == 2 else 4)
        return -(-n // step) * step

    dual = "::" in text  # VOPD: each VGPR keeps its bank (number mod 4), in steps of 4
    if top:  # start where the tokens fill the file up to its end
        need = {"v": 0, "s": 0}
        for _m, kind, width in toks:
            need[kind] = (need[kind] + 4) if dual and kind == "v" else \
                align(kind, need[kind], width) + width
        vgpr, sgpr = 256 - need["v"] - (3 if dual else 1), 106 - need["s"] - 3
    nxt = {"v": vgpr, "s": sgpr}
    out, last = [], 0
    for m, kind, width in toks:
        if dual and kind == "v":
            lo = nxt["v"] // 4 * 4 + int(m.group(2) or m.group(3)) % 4
            nxt["v"] = nxt["v"] // 4 * 4 + 4
        else:
            lo = align(kind, nxt[kind], width)
            nxt[kind] = lo + width
        out += [text[last:m.start()], _spell(kind, lo, width, m.group(5))]
        last = m.end()
    return "".join(out) + text[last:]


# special registers an SGPR operand may name instead, by width
_SPECIAL_SGPRS = {1: ("vcc_lo", "ttmp3", "m0", "null", "exec_hi"),
                  2: ("vcc", "exec", "ttmp[4:5]", "null")}


def register_variants(text: str) -> list[str]:
    """Spellings of one instruction with other registers in every register operand: low,
    middle and top-of-file numbers, each VGPR operand in turn as an SGPR, each SGPR operand
    as a special register or trap temporary, and `off` as an SGPR base. Some are not
    instructions (clang 22 rejects those); what it takes is the corpus of gfx1250's own
    entries in the agreement runner."""
    out = [renumber(text, 40, 2), renumber(text, 1, 0), renumber(text, 131, 37),
           renumber(text, 0, 0, top=True)]
    base = renumber(text, 9, 14)
    for m in _NUMBER.finditer(base):  # a constant operand as a register, where it may be
        out += [base[:m.start()] + reg + base[m.end():] for reg in _IN_PLACE_OF_NUMBERS]
    for k, (m, kind, width) in enumerate(_tokens(base)):
        if kind == "v" and width <= 2 and not m.group(5):
            swap = "s7" if width == 1 else "s[10:11]"
        elif kind == "s" and width in _SPECIAL_SGPRS:
            names = _SPECIAL_SGPRS[width]
            swap = names[k % len(names)]
        else:
            continue
        out.append(base[:m.start()] + swap + base[m.end():])
    if re.search(r"\boff\b", base):
        out += [re.sub(r"\boff\b", "s[20:21]", base), re.sub(r"\boff\b", "s20", base)]
    return list(dict.fromkeys(out))


# where a decoded instruction keeps each register: VGPR numbers, operand codes (VGPR0 + n
# for VGPR n, n for SGPR n), SGPR numbers
_RAW_VGPR = ("vdst", "addr", "data", "data0", "data1", "vaddr", "vdata", "vdstx", "vdsty",
             "vsrc2x", "vsrc2y")
_CODES = ("src0", "src1", "src2", "vsrc1", "src0x", "vsrc1x", "src0y", "vsrc1y")
_RAW_SGPR = ("sdst", "ssrc0", "ssrc1", "sdata", "sbase", "srsrc", "saddr", "soffset")
_TTMP0 = 108
_SPECIAL_CODES = {"vcc_lo": (106, 1), "vcc": (106, 2), "null": (124, 1), "m0": (125, 1),
                  "exec_lo": (126, 1), "exec": (126, 2)}


def _number(m: re.Match, kind: str, enc: str) -> int:
    n = int(m.group(2) or m.group(3))
    if m.group(1) == "ttmp":
        return _TTMP0 + n
    if m.group(5) == ".h" and enc in ("VOP1", "VOP2", "VOPC"):
        return n + 128  # a high half is register field 128 + N there
    return n


def derive_operands(text: str, inst, half: str = "") -> list | None:
    """The operand list (gen_tables' form: [field, width] per register, [token] for the
    rest) of `text`, whose register tokens have distinct numbers (`renumber`), from the
    fields of its decoding `inst`; `half` "x"/"y" keeps a VOPD half to its own fields. None
    where a register is found in no field."""
    from hsa.virtual.isa.operands import VGPR0

    f = inst.f
    used: set[str] = set()
    out: list = []
    body = text.split(None, 1)[1] if " " in text else ""
    toks = {m.start(): (m, kind, width) for m, kind, width in _tokens(body)}
    for part in re.finditer(r"[^,\s]+(?:\[[^\]]*\])?", body):
        special = _SPECIAL_CODES.get(part.group(0))
        if special is not None:  # a named SGPR: its field where one holds it, else implicit
            code, width = special
            found = [k for k in _RAW_SGPR + _CODES if f.get(k) == code and k not in used]
            if found:
                used.add(found[0])
            out.append([found[0], width] if found else [part.group(0)])
            continue
        if part.start() not in toks:
            out.append([part.group(0)])
            continue
        m, kind, width = toks[part.start()]
        n = _number(m, kind, inst.encoding)
        if kind == "v":
            want = [(k, n) for k in _RAW_VGPR] + [(k, VGPR0 + n) for k in _CODES]
        else:
            want = [(k, n) for k in _RAW_SGPR + _CODES] + [("vdst", n)]
            if half:
                want.append(("vsrc2" + half, n))  # v_dual_cndmask_b32's lane mask
        found = [k for k, v in want if k in f and f[k] == v and k not in used
                 and (not half or k[-1] not in "xy" or k.endswith(half))]
        if not found:
            return None
        field = found[0]
        used.add(field)
        if kind == "s" and field == "vdst":
            field = "s1"  # an SGPR written through vdst (the listing's convention)
        elif kind == "s" and field.startswith("vsrc2"):
            field = "s" + field  # the SGPR in a VOPD3 half's third source
        out.append([field, width])
    return out


# a bare number among an instruction's operands (a constant where a register may stand)
_NUMBER = re.compile(r"(?<=[\s,])-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?)(?=,|\s|$)")
# what a constant operand is tried as, in turn: an SGPR, an SGPR pair, m0
_IN_PLACE_OF_NUMBERS = ("s9", "s[10:11]", "m0")


def registers_for_numbers(texts: list[str]) -> list[str]:
    """Each text with every constant operand that may be a register (clang 22 takes it)
    replaced by the first of _IN_PLACE_OF_NUMBERS it takes there: the sample then shows the
    operand's field and width (`s_barrier_signal -1` is `s_barrier_signal m0`)."""
    tries = [(i, m, reg) for i, text in enumerate(texts) for m in _NUMBER.finditer(text)
             for reg in _IN_PLACE_OF_NUMBERS]
    taken = encode([texts[i][:m.start()] + reg + texts[i][m.end():] for i, m, reg in tries])
    choice: dict[tuple[int, int], tuple[re.Match, str]] = {}
    for (i, m, reg), data in zip(tries, taken, strict=True):
        if data is not None:
            choice.setdefault((i, m.start()), (m, reg))
    out = list(texts)
    for (i, _start), (m, reg) in sorted(choice.items(), reverse=True):  # right to left
        out[i] = out[i][:m.start()] + reg + out[i][m.end():]
    return out


def with_own_operands(tables: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """Give each entry that has no operand list (gfx1250's own, or reworded) one derived from
    its sample (constants that may be registers made registers) renumbered with distinct
    registers, assembled by clang 22 and decoded."""
    todo = [(enc, op, info) for enc, table in tables.items() for op, info in table.items()
            if "operands" not in info]
    plain = [renumber(info["sample"], 40, 2) for _, _, info in todo]
    texts = [renumber(t, 40, 2) for t in registers_for_numbers(plain)]
    # (where the registers together are not an instruction, the plain sample)
    texts = [t if data is not None else p
             for t, p, data in zip(texts, plain, encode(texts), strict=True)]
    for (enc, _op, info), text, data in zip(todo, texts, encode(texts), strict=True):
        if data is None:
            continue
        words = [int.from_bytes(data[k:k + 4], "little") for k in range(0, len(data), 4)]
        inst = decoder.decode_one(words + [0, 0, 0], 0, 0, "gfx1250")
        if enc in ("VOPDX", "VOPDY", "VOPD3X", "VOPD3Y"):
            half = "x" if enc.endswith("X") else "y"
            text = text.split("::")[0 if half == "x" else 1].strip()
        else:
            half = ""
        operands = derive_operands(text, inst, half)
        if operands is not None:
            info["operands"] = operands
    return tables


def encode(texts: list[str]) -> list[bytes | None]:
    """Each text assembled alone for gfx1250 by clang 22 (fake16, else real-true16), or
    None where it takes neither."""
    out = clang22_encodings(texts, "gfx1250")
    again = [i for i, data in enumerate(out) if data is None]
    for i, data in zip(again, clang22_encodings([texts[i] for i in again], "gfx1250",
                                                true16=True), strict=True):
        out[i] = data
    return out


def main() -> None:
    OUT.write_text(json.dumps(with_own_operands(build()), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
