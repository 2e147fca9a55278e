"""Fuzz: every ALU opcode the executor implements, fed random register contents and random
operand codes (VGPRs, SGPRs, integer and float inline constants, literals, SCC, EXEC), runs
without a Python or numpy exception escaping it. An instruction may refuse an operand with
a queue error (HsaError); anything else is a gap that a real kernel would hit as an
"unsupported use" stop.
"""

from __future__ import annotations

import numpy as np
import pytest

from amdgpu.errors import HsaError
from hsa.virtual.gfx11 import decoder as d
from hsa.virtual.gfx11.semantics import compile_gfx11 as compile_instruction
from hsa.virtual.isa.executor import SIMPLE
from hsa.virtual.isa.state import LANES, WaveGroup

pytestmark = pytest.mark.isa_gfx11

ALU = ("SOP1", "SOP2", "SOPC", "SOPK", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P")
WAVES, NVGPR = 3, 128
CONSTANTS = list(range(128, 209)) + list(range(240, 249))
SCALAR_CODES = ("ssrc0", "ssrc1")
VECTOR_CODES = ("src0", "src1", "src2")
SKIP = {"s_sendmsg_rtn_b32", "s_sendmsg_rtn_b64"}  # the field is a message id: tested apart


def _probe(enc: str, op: int) -> d.Instruction | None:
    """The instruction gen_tables probed LLVM with, decoded."""
    for o, words, *_ in _CANDIDATES.get(enc, ()):
        if o == op:
            return d.decode_one(words + [0, 0], 0, 0)
    return None


def _candidates():
    from hsa.virtual.gfx11 import gen_tables

    return gen_tables.candidates()


_CANDIDATES = _candidates()


def _source(rng, vector: bool, wide_ok: bool = True) -> int:
    r = rng.random()
    if r < 0.35 and vector:
        return d.VGPR0 + 2 * int(rng.integers(0, 16))
    if r < 0.6:
        return 2 * int(rng.integers(0, 48))
    if r < 0.9:
        return int(rng.choice(CONSTANTS))
    if r < 0.95:
        return d.LITERAL
    return (d.EXEC_LO, d.VCC_LO, d.SCC, d.M0)[int(rng.integers(0, 4))]


def _mutate(inst: d.Instruction, rng) -> d.Instruction:
    f = dict(inst.f)
    vector = inst.encoding.startswith("VOP")
    for key in SCALAR_CODES + VECTOR_CODES:
        if key not in f:
            continue
        if f[key] >= d.VGPR0 and key in VECTOR_CODES and inst.encoding == "VOP3P" and (
                "wmma" in inst.name):
            continue  # WMMA operands must be VGPRs
        if key == "src0" or inst.encoding in ("VOP3", "VOP3P") or not vector:
            f[key] = _source(rng, vector)
    for key in ("vdst",):
        if key in f and vector:
            f[key] = 2 * int(rng.integers(0, 16)) + (0 if "wmma" in inst.name else 32)
    for key, bits in (("abs", 3), ("neg", 3), ("opsel", 4), ("clamp", 1), ("omod", 2),
                      ("opsel_hi", 3), ("neg_hi", 3)):
        if key in f and inst.encoding in ("VOP3", "VOP3P"):
            f[key] = int(rng.integers(0, 1 << bits))
    literal = int(rng.integers(0, 2**32, dtype=np.uint64))
    return d.Instruction(inst.pc, inst.size, inst.encoding, inst.op, inst.name, f, literal,
                         inst.words)


def _wave_group(rng) -> WaveGroup:
    s = rng.integers(0, 2**32, (WAVES, 128), dtype=np.uint64).astype(np.uint32)
    s[:, d.M0] = rng.integers(0, 8, WAVES)  # movrel offsets mostly in range
    s[:, d.EXEC_HI] = 0
    v = rng.integers(0, 2**32, (NVGPR, WAVES, LANES), dtype=np.uint64).astype(np.uint32)
    # some float specials and small values where floats and shifts get interesting
    v[::3] = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 1, 0x3F800000,
                       0x00800000], np.uint32)[rng.integers(0, 8, (WAVES, LANES))]
    scc = rng.random(WAVES) < 0.5
    return WaveGroup(s, v, scc, np.arange(WAVES), 0)


def _implemented():
    out = []
    for enc, table in d.opcode_tables().items():
        if enc not in ALU:
            continue
        for op, info in sorted(table.items()):
            if info["name"] in SKIP:
                continue
            inst = _probe(enc, op)
            if inst is None or inst.name != info["name"]:
                continue
            c = compile_instruction(inst)
            if c.fn is not None and c.kind == SIMPLE:
                out.append(inst)
    return out


IMPLEMENTED = _implemented()


def test_fuzz_covers_the_implemented_alu():
    assert len(IMPLEMENTED) > 850


@pytest.mark.parametrize("enc", ALU)
def test_no_exception_escapes(enc: str):
    rng = np.random.default_rng(sum(map(ord, enc)))
    escaped = {}
    with np.errstate(all="ignore"):  # as the executor runs every dispatch
        for base in (i for i in IMPLEMENTED if i.encoding == enc):
            for _ in range(12):
                inst = _mutate(base, rng)
                c = compile_instruction(inst)
                if c.fn is None:
                    continue
                try:
                    c.fn(_wave_group(rng))
                except HsaError:
                    pass
                except Exception as e:  # noqa: BLE001 - what the test is looking for
                    escaped.setdefault(inst.name, f"{type(e).__name__}: {e} ({inst.f})")
    assert not escaped, "\n".join(f"{k}: {v}" for k, v in sorted(escaped.items()))
