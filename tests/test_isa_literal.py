"""An instruction's literal operand (code 255, gfx1250's 64-bit 254) as the wave state
reads it, and the error when a decoder attaches none (a decoder gap, not a TypeError)."""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual.isa import operands as d
from hsa.virtual.isa.executor import compile_instruction
from hsa.virtual.isa.state import MissingLiteral, WaveGroup

pytestmark = pytest.mark.generic
u32, f32 = np.uint32, np.float32


def _group(waves: int = 2, lanes: int = 32) -> WaveGroup:
    s = np.zeros((waves, 128), u32)
    s[:, d.EXEC_LO] = 0xFFFFFFFF
    v = np.zeros((8, waves, lanes), u32)
    return WaveGroup(s, v, np.zeros(waves, bool), np.arange(waves), 0)


def test_literal_reads():
    g = _group()
    assert g.sread(d.LITERAL, 0xDEADBEEF) == 0xDEADBEEF
    assert g.sread(d.LITERAL, 0xDEADBEEF, wide=True) == 0xDEADBEEF  # zero-extended
    assert g.vread(d.LITERAL64, 0x1_2345_6789, "64") == 0x1_2345_6789
    assert g.vread(d.LITERAL64, 0x1_2345_6789) == 0x2345_6789  # 32-bit use: the low dword


@pytest.mark.parametrize("code", [d.LITERAL, d.LITERAL64])
def test_a_literal_operand_without_a_literal_names_the_gap(code):
    g = _group()
    with pytest.raises(MissingLiteral, match=f"operand code {code} reads a literal"):
        g.sread(code, None)
    with pytest.raises(MissingLiteral, match="decoder gap"):
        g.vread(code, None, "64")


def test_fmamk_multiplies_by_its_literal():
    # v_fmamk_f32 v3, v1, K, v2: D = S0 * K + S1, K the literal (2.5)
    g = _group()
    a = np.linspace(-4, 4, 64, dtype=f32).reshape(2, 32)
    b = np.full((2, 32), 0.25, f32)
    g.v[1], g.v[2] = a.view(u32), b.view(u32)
    k = int(np.array(2.5, f32).view(u32))
    inst = d.Instruction(0, 8, "VOP2", 0x2C, "v_fmamk_f32",
                         {"src0": d.VGPR0 + 1, "vsrc1": d.VGPR0 + 2, "vdst": 3}, k, ())
    compile_instruction(inst).fn(g)
    fused = (a.astype(np.float64) * 2.5 + b).astype(f32)  # exact in f64, rounded once
    np.testing.assert_array_equal(g.v[3].view(f32), fused)
    inst.literal = None  # what a decoder that lost the K word would hand the core
    with pytest.raises(MissingLiteral):
        compile_instruction(inst).fn(g)
