"""Canonical operand codes and the decoded-instruction record shared by every family.

The core reads operands in one numbering (RDNA's, which the gfx11 decoder emits as is):
a family whose hardware numbers a register differently renames it while decoding (gfx9's
M0 is code 124, here M0). Scalar register file: SGPRs 0-105, VCC 106-107, TTMP 108-123,
NULL 124, M0 125, EXEC 126-127; vector sources add 128-255 constants and VGPRs from 256.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VCC_LO, VCC_HI, NULL, M0, EXEC_LO, EXEC_HI = 106, 107, 124, 125, 126, 127
SRC_SHARED_BASE, SRC_SHARED_LIMIT, SRC_PRIVATE_BASE, SRC_PRIVATE_LIMIT = 235, 236, 237, 238
DPP8, DPP8FI, DPP16 = 233, 234, 250
SDWA = 249  # gfx9: the source is in an SDWA extension dword (never emitted by RDNA3)
VCCZ, EXECZ, SCC, LITERAL = 251, 252, 253, 255
LITERAL64 = 254  # gfx1250: a 64-bit literal (two dwords) follows the instruction
VGPR0 = 256
AGPR0 = 512  # gfx90a+: accumulation VGPRs (acc_cd / MFMA operands); never RDNA


@dataclass(slots=True)
class Instruction:
    pc: int  # byte address
    size: int  # bytes, literal and DPP words included
    encoding: str
    op: int
    name: str
    f: dict[str, int] = field(default_factory=dict)  # the encoding's fields
    literal: int | None = None
    words: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.name} {self.f} lit={self.literal}"
