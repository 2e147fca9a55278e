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

from hsa.virtual.gfx11.gen_tables import clang22_cc1as
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


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
