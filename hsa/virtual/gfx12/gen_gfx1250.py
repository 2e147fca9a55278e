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
import sys
import tempfile
from pathlib import Path

from hsa.virtual.gfx12 import decoder

HERE = Path(__file__).parent
OUT = HERE / "opcodes_gfx1250.json"

# Instructions gfx1250 has and gfx1201 does not (mnemonics from LLVM's gfx1250 tests and
# clang's gfx1250 code generation), with operands that assemble.
GFX1250_ONLY = [
    "v_mad_nc_u64_u32 v[0:1], s4, ttmp9, v[0:1]",
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
    "s_barrier_signal -1",
    "s_barrier_wait -1",
    "s_barrier_signal -3",
    "s_barrier_wait -3",
]


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
    return out + GFX1250_ONLY


def assemble(lines: list[str]) -> list[tuple[str, list[int]]]:
    """(text, dwords) for each line clang accepts for gfx1250."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as fh:
        fh.write("\n".join(lines) + "\n")
        path = fh.name
    run = subprocess.run(
        [sys.executable, "-m", "ziglang", "clang", "-cc1as", "-triple", "amdgcn-amd-amdhsa",
         "-target-cpu", "gfx1250", "-show-encoding", "-filetype", "asm", "-o", "-", path],
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
    for text, words in assemble(samples()):
        inst = decoder.decode_one(words + [0, 0, 0], 0, 0)
        enc = inst.encoding
        if enc == "VOPD":
            x, y = (p.strip() for p in text.split("::"))
            tables.setdefault("VOPDX", {})[str(inst.f["opx"])] = {
                "name": x.split()[0], "sample": x}
            tables.setdefault("VOPDY", {})[str(inst.f["opy"])] = {
                "name": y.split()[0], "sample": y}
            continue
        if enc in ("MUBUF", "MTBUF"):
            enc = "VBUFFER"
        name = text.split()[0]
        tables.setdefault(enc, {}).setdefault(str(inst.op), {"name": name, "sample": text})
    for enc, table in sorted(tables.items()):
        print(f"{enc}: {len(table)} opcodes")
    return tables


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
