"""gfx950 (CDNA4) additions against facts nobody here wrote: the encodings below are what
clang 22 (the ziglang wheel, -mcpu=gfx950) assembles for the text in each comment, and the
expected values follow AMD's CDNA4 ISA guide, written out with plain numpy / Python ints.
IREE's gfx950 matmul-f16 (v_bitop3_b32, ds_read_b64_tr_b16, buffer loads to LDS,
v_mfma_f32_16x16x32_f16) is checked end to end against numpy in test_gfx9_foreign."""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual import gfx9
from hsa.virtual.gfx9 import decoder as d9
from hsa.virtual.gfx9 import gfx950
from hsa.virtual.isa.state import WaveGroup

pytestmark = pytest.mark.isa_gfx9

u32 = np.uint32


def _group(rows: int = 64) -> WaveGroup:
    s = np.zeros((1, 128), u32)
    s[:, 126] = s[:, 127] = 0xFFFFFFFF
    return WaveGroup(s, np.zeros((rows, 1, 64), u32), np.zeros(1, bool), np.arange(1), 0)


def _run(words: tuple[int, ...], g: WaveGroup) -> str:
    inst = d9.decode_one(words, 0, 0, "gfx950")
    c = gfx9.family("gfx950").compile(inst)
    assert c.fn is not None, (inst.name, c.error)
    c.fn(g)
    return inst.name


def _random_regs(g: WaveGroup, n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    vals = [rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(u32) for _ in range(n)]
    for k, v in enumerate(vals):
        g.v[k, 0] = v
    return vals


@pytest.mark.parametrize("words, table, want", [
    # v_bitop3_b32 v3, v0, v1, v2 bitop3:0x96 (three-way xor)
    ((0xD2340203, 0xD40A0300), 0x96, lambda a, b, c: a ^ b ^ c),
    # v_bitop3_b32 v3, v0, v1, v2 bitop3:0xe8 (majority)
    ((0xD2340503, 0x1C0A0300), 0xE8, lambda a, b, c: (a & b) | (a & c) | (b & c)),
])
def test_bitop3_truth_table(words, table, want):
    g = _group()
    a, b, c = _random_regs(g, 3)
    assert _run(words, g) == "v_bitop3_b32"
    assert gfx950.bitop3_table(d9.decode_one(words, 0, 0, "gfx950").f) == table
    np.testing.assert_array_equal(g.v[3, 0], want(a, b, c))


def test_bitop3_every_table_is_its_minterms():
    """The word-operation form against the definition: bit i is table[a_i b_i c_i]."""
    rng = np.random.default_rng(5)
    a, b, c = (rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    for table in range(256):
        want = np.zeros(64, np.uint32)
        for index in range(8):
            if table >> index & 1:
                want |= ((a if index & 4 else ~a) & (b if index & 2 else ~b)
                         & (c if index & 1 else ~c))
        np.testing.assert_array_equal(gfx950.bitop3(a, b, c, table), want, err_msg=hex(table))
        np.testing.assert_array_equal(gfx950.bitop3(a, b, c, table, 16), want & 0xFFFF)


def test_bitop3_b16_op_sel_reads_and_writes_high_halves():
    g = _group()
    a, b, c = _random_regs(g, 3)
    g.v[3, 0] = 0x0000BEEF
    # v_bitop3_b16 v3, v0, v1, v2 bitop3:0x80 op_sel:[1,0,0,1]: hi(v0) & lo(v1) & lo(v2)
    _run((0xD2334803, 0x140A0300), g)
    want = ((a >> 16) & b & c & 0xFFFF).astype(u32)
    np.testing.assert_array_equal(g.v[3, 0], (want << 16) | u32(0xBEEF))


@pytest.mark.parametrize("words, rows", [
    ((0x7E00B301,), 1),  # v_permlane16_swap_b32 v0, v1
    ((0xD19A0000, 0x00000101), 2),  # v_permlane32_swap_b32_e64 v0, v1
])
def test_permlane_swaps(words, rows):
    g = _group()
    g.v[0, 0] = np.arange(64, dtype=u32)
    g.v[1, 0] = np.arange(64, dtype=u32) + 100
    _run(words, g)
    lane = np.arange(64)
    row = lane // (16 * rows)
    # the odd rows (16-lane rows, or 32-lane halves) of v0 trade with the even ones of v1
    want0 = np.where(row % 2 == 1, lane - 16 * rows + 100, lane)
    want1 = np.where(row % 2 == 0, lane + 16 * rows, lane + 100)
    np.testing.assert_array_equal(g.v[0, 0], want0)
    np.testing.assert_array_equal(g.v[1, 0], want1)


def test_cvt_pk_bf16_and_f16_round_to_nearest_even():
    g = _group()
    x = np.array([1.0, 1.00390625, 1.0078125 + 2 ** -9, -3.5, np.inf, 65504.0, 1e-8, 0.1]
                 * 8, np.float32)
    y = x[::-1].copy()
    g.v[0, 0], g.v[1, 0] = x.view(u32), y.view(u32)
    _run((0xD2680003, 0x00020300), g)  # v_cvt_pk_bf16_f32 v3, v0, v1
    bits = lambda v: (v.view(u32) >> 16).astype(np.uint64)  # noqa: E731
    # bf16 RNE by hand: add 0x7fff plus the lowest kept bit, then truncate
    rne = lambda v: ((v.view(u32).astype(np.uint64) + 0x7FFF + (bits(v) & 1)) >> 16)  # noqa: E731
    np.testing.assert_array_equal(g.v[3, 0], (rne(x) | rne(y) << 16).astype(u32))
    _run((0xD2670003, 0x00020300), g)  # v_cvt_pk_f16_f32 v3, v0, v1
    h = lambda v: v.astype(np.float16).view(np.uint16).astype(u32)  # noqa: E731
    np.testing.assert_array_equal(g.v[3, 0], h(x) | h(y) << 16)


def test_prng_is_the_documented_lfsr():
    g = _group()
    (a,) = _random_regs(g, 1)
    _run((0x7E06B100,), g)  # v_prng_b32 v3, v0
    want = [((int(v) << 1) & 0xFFFFFFFF) ^ (197 if int(v) >> 31 else 0) for v in a]
    assert g.v[3, 0].tolist() == want


def test_transpose_read_model_b16():
    """ds_read_b64_tr_b16: 16 lanes load a 4 x 16 tile of halves (row r by lanes 4r..4r+3,
    four halves each); lane i gets column i."""
    tile = np.arange(64 * 4, dtype=np.uint16).reshape(4, 4, 16)  # (block, row, column)
    loaded = np.zeros((64, 4), np.uint16)
    for blk in range(4):
        for lane in range(16):
            r, c0 = lane // 4, 4 * (lane % 4)
            loaded[16 * blk + lane] = tile[blk, r, c0:c0 + 4]
    out = gfx950.transpose_lanes(loaded.view("<u4").reshape(64, 2), 16)
    got = out.view(np.uint16).reshape(64, 4)
    for blk in range(4):
        for lane in range(16):
            np.testing.assert_array_equal(got[16 * blk + lane], tile[blk, :, lane])


def test_transpose_read_model_b8():
    """ds_read_b64_tr_b8: an 8 x 16 tile of bytes, row r by lanes 2r and 2r+1."""
    tile = np.random.default_rng(3).integers(0, 256, (4, 8, 16)).astype(np.uint8)
    loaded = np.zeros((64, 8), np.uint8)
    for blk in range(4):
        for lane in range(16):
            r, c0 = lane // 2, 8 * (lane % 2)
            loaded[16 * blk + lane] = tile[blk, r, c0:c0 + 8]
    got = gfx950.transpose_lanes(loaded.view("<u4").reshape(64, 2), 8).view(np.uint8)
    for blk in range(4):
        for lane in range(16):
            np.testing.assert_array_equal(got[16 * blk + lane], tile[blk, :, lane])


@pytest.mark.parametrize("name", ["ds_read_b64_tr_b16", "ds_read_b64_tr_b8"])
def test_transpose_reads_fast_and_general_paths_agree(name):
    """With every lane active and 8-byte-aligned in-range addresses, the transpose reads
    take one u64 gather (BatchContext.lds_gather); otherwise the per-dword path. Both ways
    over aligned, 4-aligned, past-the-end addresses of two workgroups' LDS give the same
    registers, and the aligned case equals transpose_lanes of each lane's own 8 bytes."""
    from types import SimpleNamespace

    from hsa.virtual.isa import operands as d
    from hsa.virtual.isa.executor import BatchContext

    lds_size = 2048
    rng = np.random.default_rng(11)
    lds = rng.integers(0, 256, 2 * lds_size, dtype=np.uint8)
    cases = {"aligned": (rng.integers(0, lds_size // 16, (3, 64)) * 8, 16, True),
             "4-aligned": (rng.integers(0, lds_size // 16, (3, 64)) * 8 + 4, 0, False),
             "past the end": (rng.integers(0, lds_size // 8, (3, 64)) * 8, 64, False)}
    for why, (addr, offset, fast) in cases.items():
        regs = []
        for use_fast in (True, False):
            ctx = BatchContext(SimpleNamespace(agent=0, kernel_name="k"), None, lds_size, 2,
                               0, 0)
            ctx.lds[:lds.size] = lds
            ctx.wave_wg = np.array([0, 1, 1])
            took = []
            inner = ctx.lds_gather

            def gather(*a, inner=inner, took=took, use_fast=use_fast):
                r = inner(*a) if use_fast else None
                took.append(r is not None)
                return r
            ctx.lds_gather = gather  # type: ignore[method-assign]
            f = {"addr": 1, "vdst": 2, "data0": 0, "data1": 0, "offset0": offset & 0xFF,
                 "offset1": offset >> 8, "gds": 0}
            fn = gfx950._compile_ds_tr(d.Instruction(0, 8, "DS", 0, name, f, None, (0, 0)), name)
            s = np.zeros((3, 128), u32)
            s[:, d.EXEC_LO] = s[:, d.EXEC_HI] = 0xFFFFFFFF
            v = np.full((4, 3, 64), 0xA5A5A5A5, u32)
            v[1] = addr
            g = WaveGroup(s, v, np.zeros(3, bool), np.arange(3), 0)
            fn(g, ctx)
            regs.append(g.v[2:4].copy())
            assert took == [fast and use_fast], why
        np.testing.assert_array_equal(regs[0], regs[1], err_msg=why)
        if fast:
            pos = ctx.wave_wg[:, None] * lds_size + addr + offset
            own = lds.view("<u4")[(pos.reshape(-1)[:, None] + [0, 4]) // 4]  # (lanes, 2)
            want = gfx950.transpose_lanes(own, 16 if name.endswith("b16") else 8)
            np.testing.assert_array_equal(regs[0].reshape(2, -1).T, want, err_msg=why)
