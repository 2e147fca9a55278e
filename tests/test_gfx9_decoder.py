"""gfx9 (CDNA) decoding and instruction semantics against facts nobody here wrote: LLVM's
encodings (the bytes below are llvm-mc-19 -show-encoding output for gfx942/gfx90a), and
numpy models of the hardware's MFMA register layouts written out element by element."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hsa.virtual import gfx9
from hsa.virtual.gfx9 import decoder as d9
from hsa.virtual.gfx9 import gen_tables
from hsa.virtual.isa.state import AGPR_ROW, WaveGroup

pytestmark = pytest.mark.isa_gfx9


def _words(encoding: list[int]) -> tuple[int, ...]:
    return tuple(np.frombuffer(bytes(encoding), "<u4").tolist())


def _run(target: str, encoding: list[int], g: WaveGroup) -> None:
    inst = d9.decode_one(_words(encoding), 0, 0, target)
    c = gfx9.family(target).compile(inst)
    assert c.fn is not None, (inst.name, c.error)
    c.fn(g)


def _group(rows: int = 600, waves: int = 1) -> WaveGroup:
    s = np.zeros((waves, 128), np.uint32)
    s[:, 126] = s[:, 127] = 0xFFFFFFFF  # EXEC: all 64 lanes
    return WaveGroup(s, np.zeros((rows, waves, 64), np.uint32), np.zeros(waves, bool),
                     np.arange(waves), 0)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
def test_mnemonics_of_llvm_encodings(target):
    cases = {
        (0x00, 0x80, 0xCC, 0xD3, 0x00, 0x05, 0x02, 0x04): (
            "v_mfma_f32_32x32x8f16" if target == "gfx90a" else "v_mfma_f32_32x32x8_f16"),
        (0x02, 0x00, 0xCC, 0xD0, 0x00, 0x03, 0x02, 0x00): "v_cmp_gt_u32_e64",
        (0x00, 0x40, 0xD8, 0xD3, 0x01, 0x01, 0x00, 0x18): "v_accvgpr_read_b32",
    }
    for enc, name in cases.items():
        assert d9.decode_one(_words(list(enc)), 0, 0, target).name == name


def test_m0_is_renamed_to_the_canonical_code():
    inst = d9.decode_one(_words([0x80, 0x00, 0xFC, 0xBE]), 0, 0, "gfx942")  # s_mov_b32 m0, 0
    assert inst.name == "s_mov_b32" and inst.f["sdst"] == 125


def _mfma_case(target, encoding, m, n, k, kind, c_zero):
    """Fill A (v0..), B (v2..) per the layout below, run, and read D (AGPR or v4..)."""
    rng = np.random.default_rng(m * 100 + k)
    if kind == "i8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    else:
        a = rng.standard_normal((m, k)).astype(np.float16 if kind == "f16" else np.float32)
        b = rng.standard_normal((k, n)).astype(np.float16 if kind == "f16" else np.float32)
    g = _group()
    per = m * k // 64  # values of A per lane
    item = a.dtype.itemsize
    regs_in = max(1, per * item // 4)
    # The layout (AMD's matrix instruction calculator): A[i][kk] sits in lane
    # i + m * (kk // per), element kk % per of that lane's registers; B[kk][j] in lane
    # j + n * (kk // per).
    a_lanes = np.zeros((64, regs_in * 4), np.uint8)
    b_lanes = np.zeros((64, regs_in * 4), np.uint8)
    for i in range(m):
        for kk in range(k):
            lane, e = i + m * (kk // per), kk % per
            a_lanes[lane, e * item:(e + 1) * item] = np.frombuffer(a[i, kk].tobytes(), np.uint8)
    for kk in range(k):
        for j in range(n):
            lane, e = j + n * (kk // per), kk % per
            b_lanes[lane, e * item:(e + 1) * item] = np.frombuffer(b[kk, j].tobytes(), np.uint8)
    inst = d9.decode_one(_words(encoding), 0, 0, target)
    ra, rb = inst.f["src0"] - 256, inst.f["src1"] - 256
    g.v[ra:ra + regs_in, 0] = a_lanes.view("<u4").T
    g.v[rb:rb + regs_in, 0] = b_lanes.view("<u4").T
    regs_out = m * n // 64
    c = rng.standard_normal((m, n)).astype(np.float32) if not c_zero else np.zeros((m, n))
    dst = AGPR_ROW if not c_zero else 4
    # D/C[i][j]: lane j + n * ((i // 4) % (64 // n)), register 4 * (i // (4 * 64 // n)) + i % 4
    groups = 64 // n

    def where(i, j):
        return 4 * (i // (4 * groups)) + i % 4, j + n * ((i // 4) % groups)

    if not c_zero:
        for i in range(m):
            for j in range(n):
                r, lane = where(i, j)
                g.v[dst + r, 0, lane] = np.float32(c[i, j]).view(np.uint32)
    _run(target, encoding, g)
    got = np.zeros((m, n), np.int64 if kind == "i8" else np.float32)
    for i in range(m):
        for j in range(n):
            r, lane = where(i, j)
            word = g.v[dst + r, 0, lane]
            got[i, j] = np.uint32(word).view(np.int32) if kind == "i8" else np.uint32(
                word).view(np.float32)
    if kind == "i8":
        want = a.astype(np.int64) @ b.astype(np.int64)
        np.testing.assert_array_equal(got, want)
    else:
        want = a.astype(np.float64) @ b.astype(np.float64) + c
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    return regs_out


@pytest.mark.parametrize("target, encoding, shape, kind, c_zero", [
    ("gfx942", [0x00, 0x80, 0xCC, 0xD3, 0x00, 0x05, 0x02, 0x04], (32, 32, 8), "f16", False),
    ("gfx90a", [0x00, 0x80, 0xCC, 0xD3, 0x00, 0x05, 0x02, 0x04], (32, 32, 8), "f16", False),
    ("gfx942", [0x04, 0x00, 0xCD, 0xD3, 0x00, 0x05, 0x02, 0x02], (16, 16, 16), "f16", True),
    ("gfx942", [0x00, 0x80, 0xC5, 0xD3, 0x00, 0x03, 0x02, 0x04], (16, 16, 4), "f32", False),
    ("gfx942", [0x04, 0x00, 0xD6, 0xD3, 0x00, 0x05, 0x02, 0x02], (32, 32, 16), "i8", True),
])
def test_mfma_layout_against_numpy_model(target, encoding, shape, kind, c_zero):
    _mfma_case(target, encoding, *shape, kind, c_zero)


def test_mfma_xf32_rounds_inputs_to_tf32():
    """v_mfma_f32_16x16x8_xf32: inputs already on the tf32 grid (13 low mantissa bits
    clear) multiply exactly; one bit below that grid is rounded away."""
    rng = np.random.default_rng(7)
    grid = (rng.standard_normal((4, 64)).astype(np.float32).view(np.uint32)
            & np.uint32(0xFFFFE000))
    outs = []
    for extra in (0, 1):  # bit 0 set: below tf32 precision, must not change the result
        g = _group()
        g.v[0:4, 0] = grid | np.uint32(extra)
        _run("gfx942", [0x04, 0x00, 0xBE, 0xD3, 0x00, 0x05, 0x02, 0x02], g)
        outs.append(g.v[4:8, 0].copy())
    assert np.array_equal(outs[0], outs[1]) and np.abs(outs[0].view(np.float32)).sum() > 0


def test_accvgpr_read_moves_an_agpr_into_a_vgpr():
    g = _group()
    g.v[AGPR_ROW + 1, 0] = np.arange(64, dtype=np.uint32) * 3
    _run("gfx942", [0x00, 0x40, 0xD8, 0xD3, 0x01, 0x01, 0x00, 0x18], g)
    assert np.array_equal(g.v[0, 0], np.arange(64, dtype=np.uint32) * 3)


def test_sdwa_selects_a_byte_and_preserves_the_rest():
    g = _group()
    g.v[0, 0] = 0x11223344 + np.arange(64, dtype=np.uint32)
    g.v[1, 0] = 0xAAAABBBB
    # v_mov_b32_sdwa v1, v0 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_2
    _run("gfx942", [0xF9, 0x02, 0x02, 0x7E, 0x00, 0x15, 0x02, 0x00], g)
    src = 0x11223344 + np.arange(64, dtype=np.uint32)
    want = (((src >> 16) & 0xFF) << 16) | 0xBBBB
    assert np.array_equal(g.v[1, 0], want.astype(np.uint32))


def test_dpp_row_bcast15_feeds_the_next_row():
    g = _group()
    g.v[0, 0] = np.arange(64, dtype=np.uint32)
    g.v[1, 0] = 1000
    # v_mov_b32_dpp v1, v0 row_bcast:15 row_mask:0xa bank_mask:0xf: rows 1 and 3 get the
    # value of lane 15 of the row before; rows 0 and 2 are masked off
    _run("gfx942", [0xFA, 0x02, 0x02, 0x7E, 0x00, 0x42, 0x01, 0xAF], g)
    row = np.arange(64) // 16
    want = np.where(row == 1, 15, np.where(row == 3, 47, 1000))
    assert np.array_equal(g.v[1, 0], want.astype(np.uint32))


@pytest.mark.parametrize("encoding, lo, hi", [
    # v_pk_mov_b32 v[0:1], v[2:3], v[4:5] op_sel:[1,0]: the swap LLVM's SIMergeVGPRCopies
    # emits (op_sel_hi stays at its default [1,1]); D.lo = S0.hi, D.hi = S1.lo
    ([0x00, 0x48, 0xB3, 0xD3, 0x02, 0x09, 0x02, 0x18], 3, 4),
    # op_sel:[0,1]: the plain 64-bit copy; D.lo = S0.lo, D.hi = S1.hi
    ([0x00, 0x50, 0xB3, 0xD3, 0x02, 0x09, 0x02, 0x18], 2, 5),
    # op_sel:[1,0] op_sel_hi:[0,0]: op_sel_hi plays no part in v_pk_mov_b32
    ([0x00, 0x48, 0xB3, 0xD3, 0x02, 0x09, 0x02, 0x00], 3, 4),
])
def test_pk_mov_b32_picks_each_half_by_op_sel(encoding, lo, hi):
    """CDNA3 ISA: V_PK_MOV_B32 D[31:0] = S0 half OPSEL[0], D[63:32] = S1 half OPSEL[1]. The
    high half used to follow op_sel_hi, so the swap read S1.hi: IREE's log1p/pow on gfx942
    were off (log_plus_one(0.5) by -2*ln(0.75))."""
    g = _group()
    for r in (2, 3, 4, 5):
        g.v[r, 0] = np.arange(64, dtype=np.uint32) + 1000 * r
    _run("gfx942", encoding, g)
    assert np.array_equal(g.v[0, 0], np.arange(64, dtype=np.uint32) + 1000 * lo)
    assert np.array_equal(g.v[1, 0], np.arange(64, dtype=np.uint32) + 1000 * hi)


def test_compare_writes_a_64_bit_lane_mask_pair():
    g = _group()
    g.v[0, 0] = np.arange(64, dtype=np.uint32)
    g.v[1, 0] = 40
    _run("gfx942", [0x02, 0x00, 0xCC, 0xD0, 0x00, 0x03, 0x02, 0x00], g)  # v_cmp_gt_u32 s[2:3]
    mask = int(g.s[0, 2]) | int(g.s[0, 3]) << 32
    assert mask == sum(1 << lane for lane in range(41, 64))


def test_cdna_agents_report_the_real_parts():
    from hsa.virtual.provider import VirtualProvider

    p = VirtualProvider(gpus=("gfx90a", "gfx942", "gfx950"))
    try:
        gpus = {a.name: a for a in p.gpu_agents()}
        assert {n: (a.compute_units, a.wavefront_size) for n, a in gpus.items()} == {
            "gfx90a": (110, 64), "gfx942": (304, 64), "gfx950": (256, 64)}
        assert gpus["gfx942"].isa == "gfx942:sramecc+:xnack-"
    finally:
        p.shut_down()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("llvm-mc-19") is None, reason="llvm-mc-19 is not installed")
@pytest.mark.parametrize("target", [*gen_tables.TARGETS, "gfx950"])
def test_checked_in_tables_are_reproducible(target):
    build = gen_tables.build_gfx950 if target == "gfx950" else lambda: gen_tables.build(target)
    fresh = json.loads(json.dumps(build()))
    assert fresh == json.loads(gen_tables.table_path(target).read_text())
