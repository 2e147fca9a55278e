"""gfx11's own instruction semantics on top of the core: typed buffer formats.

The core runs MUBUF/MTBUF format instructions as raw dwords (what gfx9 and gfx12 still get);
gfx11 converts through the unified format of the V# (word 3 bits 18:12) or of the MTBUF
instruction (`hsa.virtual.isa.bufformat`), D16 forms included, and runs the buffer loads
that go to LDS; image loads and stores go through `hsa.virtual.isa.image`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hsa.virtual.isa import bufformat, image
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.executor import MEMORY, SIMPLE, Compiled, compile_instruction


def vsharp_format(word3: np.ndarray) -> np.ndarray:
    """The unified buffer format of gfx11 V#s (word 3 bits 18:12)."""
    return (word3 >> np.uint32(12)) & np.uint32(0x7F)


def compile_gfx11(inst: d.Instruction) -> Compiled:
    if inst.encoding in ("MUBUF", "MTBUF"):
        fn = (bufformat.compile_lds_load(inst, vsharp_format)
              or bufformat.compile_format(inst, vsharp_format))
        if fn is not None:
            return Compiled(inst, MEMORY, fn)
    if inst.encoding == "MIMG":  # image loads and stores through T# (isa.image)
        if inst.name == "<unknown>":  # the decoder leaves MIMG unnamed: name it for messages
            inst = dataclasses.replace(inst, name=image.mimg_name((inst.words[0] >> 18) & 0xFF))
        fn, why = image.compile_gfx11(inst)
        if fn is not None:
            return Compiled(inst, MEMORY, fn)
        return Compiled(inst, SIMPLE, None, f"{why}; the virtual GPU runs image_load/"
                        "image_store on linear 1D/2D/3D/array images")
    return compile_instruction(inst)
