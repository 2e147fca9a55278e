"""Generate `opcodes.json`, the gfx12 opcode tables, from LLVM's own disassembler.

Run `python -m hsa.virtual.gfx12.gen_tables` (needs `llvm-mc-19`, which knows gfx1201). The
method is gfx11's (`hsa.virtual.gfx11.gen_tables`): one instruction per opcode value with
distinct registers in every field, optional fields cleared until LLVM accepts it, and the
mnemonic and operand fields LLVM prints recorded. The scalar and vector ALU, DS and VOPD
encodings keep gfx11's bit layouts (their opcodes are renumbered and renamed in places,
which the tables capture); SMEM, VFLAT/VGLOBAL/VSCRATCH and VBUFFER are gfx12 layouts.
"""

from __future__ import annotations

import json
from pathlib import Path

from hsa.virtual.gfx11 import gen_tables as gfx11

OUT = Path(__file__).with_name("opcodes.json")
MCPU = "gfx1201"
SDST, VDST, VSRC0, VSRC1 = gfx11.SDST, gfx11.VDST, gfx11.VSRC0, gfx11.VSRC1
_w = gfx11._w


def candidates() -> dict[str, list]:
    out = gfx11.candidates()
    for old in ("SMEM", "FLAT", "GLOBAL", "SCRATCH", "MUBUF", "MTBUF"):
        del out[old]
    # SMEM: op [20:13], sdata [12:6], sbase [5:0] (pairs); offset [23:0] signed, soffset
    # [31:25] of the second dword. sbase = s[2:3], offset 0x10, soffset null.
    out["SMEM"] = []
    for op in range(0x100):
        w = _w(0x3D << 26 | op << 13 | SDST << 6 | 1, 124 << 25 | 0x10)
        out["SMEM"].append((op, w, [(0, 6, 7), (0, 0, 6), (1, 0, 24)],
                            {SDST: "sdata", 2: "sbase"}, {}))
    # VFLAT / VSCRATCH / VGLOBAL (96 bits): 0x3B [31:26], segment [25:24], op [20:14],
    # saddr [6:0]; vdst [39:32], sve [49], vdata [62:55]; vaddr [71:64], offset [95:72].
    vfl = {VDST: "vdst", VSRC0: "addr", VSRC1: "data"}
    for seg, name in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
        out[name] = []
        for op in range(0x80):
            w0 = 0x3B << 26 | seg << 24 | op << 14 | 124
            w1 = VSRC1 << 23 | (1 << 17 if seg == 1 else 0) | VDST
            w2 = 0x10 << 8 | VSRC0
            out[name].append((op, _w(w0, w1, w2), [(1, 0, 8), (1, 23, 8)], {}, vfl))
    # VBUFFER (96 bits): 0x31 [31:26], op [21:14], soffset [6:0]; vdata [39:32], rsrc
    # [49:41], offen [62]; vaddr [71:64], offset [95:72]. rsrc s[16:19], soffset null.
    out["VBUFFER"] = []
    for op in range(0x100):
        w0 = 0x31 << 26 | op << 14 | 124
        w1 = 1 << 30 | SDST << 9 | VSRC1
        w2 = 0x10 << 8 | VSRC0
        out["VBUFFER"].append((op, _w(w0, w1, w2), [(1, 0, 8), (2, 0, 8)],
                               {SDST: "srsrc"}, {VSRC0: "vaddr", VSRC1: "vdata"}))
    return out


def build() -> dict[str, dict[str, dict]]:
    """LLVM 19's gfx1201 tables plus the true16 forms only newer LLVM decodes (IREE's gfx1201
    matmuls emit `v_mov_b16_e64`), read from clang 22's encodings as for gfx11."""
    tables = gfx11.build(candidates(), MCPU)
    gfx11.clang22_entries(tables, MCPU)
    return tables


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
