"""Opcode coverage of the gfx11 tables: how many opcodes the executor runs, per encoding.

    python -m hsa.virtual.gfx11.coverage [--missing]

Each table opcode is compiled with a probe instruction (ordinary register operands); an
opcode counts as implemented when the core gives it a semantic function. The others stop
a queue with an IllegalInstruction naming them.
"""

from __future__ import annotations

import sys

from hsa.virtual.gfx11 import decoder as d

PROBE = dict(sdst=16, ssrc0=32, ssrc1=48, simm16=0x10, vdst=16, src0=288, src1=304,
             src2=320, vsrc1=304, sdata=16, sbase=2, offset=0, soffset=124, glc=0, dlc=0,
             abs=0, neg=0, opsel=0, clamp=0, omod=0, opsel_hi=7, neg_hi=0, offset0=0,
             offset1=0, gds=0, addr=32, data0=48, data1=64, data=48, saddr=124, sve=0,
             slc=0, seg=0, vaddr=32, vdata=48, srsrc=16, tfe=0, offen=1, idxen=0, format=1)


def coverage() -> dict[str, tuple[int, int, list[str]]]:
    """encoding -> (implemented, total, names not implemented); VOPD halves left out."""
    from hsa.virtual.gfx11.semantics import compile_gfx11 as compile_instruction

    out = {}
    for enc, table in sorted(d.opcode_tables().items()):
        if enc.startswith("VOPD"):
            continue
        missing = []
        for op, info in sorted(table.items()):
            inst = d.Instruction(0, 8, enc, op, info["name"], dict(PROBE), None, ())
            if compile_instruction(inst).fn is None:
                missing.append(info["name"])
        out[enc] = (len(table) - len(missing), len(table), missing)
    return out


def main() -> None:
    cov = coverage()
    done = sum(c[0] for c in cov.values())
    total = sum(c[1] for c in cov.values())
    for enc, (n, t, missing) in cov.items():
        print(f"{enc:8} {n:4} / {t:4}" + (f"  missing: {' '.join(missing)}"
                                           if "--missing" in sys.argv and missing else ""))
    print(f"total    {done:4} / {total:4} ({100 * done / total:.1f}%)")


if __name__ == "__main__":
    main()
