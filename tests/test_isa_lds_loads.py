"""DS loads with every lane active take BatchContext.lds_gather (one OR bounds and aligns
all addresses, then one shift, add and gather); anything it cannot prove in range and
aligned goes to ByteSpace.gather. Both must read the same: every typed ds_load (the
canonical names; gfx9's ds_read_* decode to them) runs both ways on the same LDS over
in-range, last-element, out-of-range, 32-bit-wrapping and unaligned addresses; the
two-address loads, which gather straight into the VGPRs, against the words themselves."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hsa.virtual.isa import mem
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.executor import BatchContext
from hsa.virtual.isa.state import WaveGroup

pytestmark = pytest.mark.generic
u32 = np.uint32
LDS = 4096  # bytes a workgroup


FAST: list[bool] = []  # whether each fast run's lds_gather read the lanes itself


def _run(name: str, offset: int, addr: np.ndarray, lds: np.ndarray, fast: bool) -> np.ndarray:
    waves = addr.shape[0]
    ctx = BatchContext(SimpleNamespace(agent=0, kernel_name="k"), None, LDS, 2, 0, 0)
    ctx.lds[:lds.size] = lds
    ctx.wave_wg = np.arange(waves) % 2  # two workgroups: the bases matter
    if not fast:
        ctx.lds_gather = lambda *a: None  # type: ignore[method-assign]
    else:
        inner = ctx.lds_gather

        def recorded(*a):
            r = inner(*a)
            FAST.append(r is not None)
            return r
        ctx.lds_gather = recorded  # type: ignore[method-assign]
    f = {"addr": 1, "vdst": 2, "data0": 0, "data1": 0, "offset0": offset & 0xFF,
         "offset1": offset >> 8, "gds": 0}
    fn = mem.compile_ds(d.Instruction(0, 8, "DS", 0, name, f, None, (0, 0)))
    assert fn is not None
    s = np.zeros((waves, 128), u32)
    s[:, d.EXEC_LO] = s[:, d.EXEC_HI] = 0xFFFFFFFF
    v = np.full((4, waves, 64), 0xA5A5A5A5, u32)
    v[1] = addr
    g = WaveGroup(s, v, np.zeros(waves, bool), np.arange(waves), 0)
    fn(g, ctx)
    return g.v[2]


@pytest.mark.parametrize("name", ["ds_load_u8", "ds_load_i8", "ds_load_u16", "ds_load_i16",
                                  "ds_load_b32", "ds_load_u16_d16", "ds_load_u16_d16_hi",
                                  "ds_load_i8_d16"])
def test_fast_lds_loads_equal_the_general_path(name):
    rng = np.random.default_rng(1)
    lds = rng.integers(0, 256, 2 * LDS, dtype=np.uint8)
    cases = {
        "in range": (rng.integers(0, LDS // 8, (3, 64)) * 4, 16),  # OR of them < LDS - 16
        "last element": (np.full((3, 64), LDS - 4), 0),
        "past the end": (rng.integers(0, LDS // 4, (3, 64)) * 4, 64),
        "wrapping": ((0 - 4 * np.arange(64, dtype=np.int64)) & 0xFFFFFFFF, 252),
        "odd": (rng.integers(0, LDS - 8, (3, 64)) | 1, 2),
    }
    FAST.clear()
    for why, (addr, offset) in cases.items():
        addr = np.broadcast_to(np.asarray(addr, np.int64), (3, 64)).astype(u32)
        want = _run(name, offset, addr, lds, fast=False)
        got = _run(name, offset, addr, lds, fast=True)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {why}")
        assert not np.all(want == 0xA5A5A5A5), why  # the load wrote its register
    # the fast path read the in-range and last-element cases, the general one the rest
    assert FAST == [True, True, False, False, False]


@pytest.mark.parametrize("name, width", [("ds_load_2addr_b32", 4), ("ds_load_2addr_b64", 8),
                                         ("ds_load_2addr_stride64_b64", 512)])
def test_two_address_loads_read_each_lanes_words(name, width):
    """ds_load_2addr with every lane active writes its one gather straight into the VGPRs:
    each lane's words at its workgroup's LDS + addr + offset0/1 * stride."""
    rng = np.random.default_rng(2)
    lds = rng.integers(0, 256, 2 * LDS, dtype=np.uint8)
    ctx = BatchContext(SimpleNamespace(agent=0, kernel_name="k"), None, LDS, 2, 0, 0)
    ctx.lds[:lds.size] = lds
    ctx.wave_wg = np.array([0, 1, 1])
    f = {"addr": 1, "vdst": 2, "data0": 0, "data1": 0, "offset0": 1, "offset1": 3, "gds": 0}
    fn = mem.compile_ds(d.Instruction(0, 8, "DS", 0, name, f, None, (0, 0)))
    assert fn is not None
    s = np.zeros((3, 128), u32)
    s[:, d.EXEC_LO] = s[:, d.EXEC_HI] = 0xFFFFFFFF
    v = np.zeros((8, 3, 64), u32)
    stride = width if width < 512 else 8 * 64
    v[1] = rng.integers(0, (LDS - 3 * stride - 8) // 8, (3, 64)) * 8
    g = WaveGroup(s, v, np.zeros(3, bool), np.arange(3), 0)
    fn(g, ctx)
    words = lds.view(u32)
    nw = 2 if "b64" in name else 1
    for w in range(3):
        base = ctx.wave_wg[w] * LDS + v[1, w].astype(np.int64)
        for k, off in enumerate((1, 3)):
            for j in range(nw):
                want = words[(base + off * stride + 4 * j) // 4]
                np.testing.assert_array_equal(g.v[2 + k * nw + j, w], want, err_msg=f"{w} {k} {j}")


def test_kept_positions_follow_the_address_register():
    """One group runs ds_load_u16 again and again on one address register: the positions
    it keeps serve a new offset while the words are the same, and a change of one lane's
    address (or an offset past the end) is seen. Each load against the words themselves."""
    rng = np.random.default_rng(3)
    lds = rng.integers(0, 256, 2 * LDS, dtype=np.uint8)
    ctx = BatchContext(SimpleNamespace(agent=0, kernel_name="k"), None, LDS, 2, 0, 0)
    ctx.lds[:lds.size] = lds
    ctx.wave_wg = np.array([0, 1, 1])
    s = np.zeros((3, 128), u32)
    s[:, d.EXEC_LO] = s[:, d.EXEC_HI] = 0xFFFFFFFF
    v = np.zeros((4, 3, 64), u32)
    v[1] = rng.integers(0, LDS // 4, (3, 64)) * 2
    g = WaveGroup(s, v, np.zeros(3, bool), np.arange(3), 0)
    half = lds.view(np.uint16)
    for step, offset in enumerate((0, 64, 64, 2 * LDS)):
        if step == 2:
            g.v[1, 2, 5] += 2  # one lane of the last wave moves
        f = {"addr": 1, "vdst": 2, "data0": 0, "data1": 0, "offset0": offset & 0xFF,
             "offset1": offset >> 8, "gds": 0}
        fn = mem.compile_ds(d.Instruction(0, 8, "DS", 0, "ds_load_u16", f, None, (0, 0)))
        fn(g, ctx)
        byte = ctx.wave_wg[:, None] * LDS + g.v[1].astype(np.int64) + offset
        inside = g.v[1].astype(np.int64) + offset + 2 <= LDS
        want = np.where(inside, half[np.where(inside, byte, 0) // 2], 0)
        np.testing.assert_array_equal(g.v[2], want, err_msg=f"step {step}")
    assert len(g.memo["lds_positions"]) == 1  # one register, one element size
