"""Scratch dword accesses with a wave-uniform address (no VGPR or SGPR address: clang's
register spills, `scratch_load_b128 v[66:69], off, off offset:192`) read and write every
lane's private segment through one strided view (BatchContext.scratch_rows) when the
group's waves are one run of the batch; otherwise, or when the dwords are not inside the
segment, the general per-lane path runs (and faults). Both must do the same: the real
encodings from IREE's gfx1100 GEMM (llvm-objdump's words), decoded by the gfx11 decoder,
run both ways, and each lane's words sit at lane * private size + offset."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ground.errors import MemoryFault
from hsa.virtual.gfx11.decoder import decode_one
from hsa.virtual.isa import mem
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.executor import BatchContext
from hsa.virtual.isa.state import WaveGroup

pytestmark = pytest.mark.generic
u32 = np.uint32
PRIVATE = 400  # bytes a lane (IREE's gfx1100 GEMM spills 400)
BATCH_WAVES = 6

# llvm-objdump --mcpu=gfx1100 of IREE's 1024^3 f16 GEMM (benchmarks/gemm_bundles)
ENCODINGS = {
    "scratch_load_b128 v[66:69], off, off offset:192": (0xDC5D00C0, 0x427C0000),
    "scratch_load_b32 v65, off, off offset:328": (0xDC510148, 0x417C0000),
    "scratch_store_b128 off, v[89:92], off offset:64": (0xDC750040, 0x007C5900),
    "scratch_store_b32 off, v0, off offset:392": (0xDC690188, 0x007C0000),
}


def _inst(text: str, offset: int | None = None):
    words = ENCODINGS[text]
    if offset is not None:  # the same instruction at another offset (13-bit signed field)
        words = ((words[0] & ~0x1FFF) | (offset & 0x1FFF), words[1])
    inst = decode_one(words, 0, 0)
    assert inst.name == text.split()[0] and inst.encoding == "SCRATCH"
    assert inst.f["saddr"] == d.NULL and not inst.f["sve"]
    return inst


def _run(inst, waves: np.ndarray, scratch: np.ndarray, fast: bool, records: list):
    ctx = BatchContext(SimpleNamespace(agent=0, kernel_name="k"), None, 0, 1, PRIVATE,
                       BATCH_WAVES * 32)
    ctx.scratch[:scratch.size] = scratch
    inner = ctx.scratch_rows

    def rows(*a):
        r = None if not fast else inner(*a)
        records.append(r is not None)
        return r
    ctx.scratch_rows = rows  # type: ignore[method-assign]
    n = waves.size
    s = np.zeros((n, 128), u32)
    s[:, d.EXEC_LO] = 0xFFFFFFFF
    rng = np.random.default_rng(int(waves.sum()))
    v = rng.integers(0, 1 << 32, (256, n, 32), dtype=np.uint64).astype(u32)
    g = WaveGroup(s, v, np.zeros(n, bool), waves, 0)
    mem.compile_flat(inst)(g, ctx)
    return g.v, ctx.scratch


@pytest.mark.parametrize("text", list(ENCODINGS))
@pytest.mark.parametrize("waves", [np.arange(BATCH_WAVES), np.arange(2, 5),
                                   np.array([0, 2, 3])], ids=["all", "run", "gaps"])
def test_uniform_scratch_equals_the_general_path(text, waves):
    rng = np.random.default_rng(7)
    scratch = rng.integers(0, 256, PRIVATE * BATCH_WAVES * 32, dtype=np.uint8)
    inst = _inst(text)
    fast_rec: list[bool] = []
    v_fast, sc_fast = _run(inst, waves, scratch, True, fast_rec)
    v_slow, sc_slow = _run(inst, waves, scratch, False, [])
    np.testing.assert_array_equal(v_fast, v_slow)
    np.testing.assert_array_equal(sc_fast, sc_slow)
    assert fast_rec == [waves.size - 1 == waves[-1] - waves[0]]  # the run took the view
    # against the layout itself: lane L of wave w owns bytes (w * 32 + L) * PRIVATE + ...
    f = inst.f
    n = 4 if "b128" in text else 1
    lanes = (waves[:, None] * 32 + np.arange(32)).reshape(-1)
    pos = (lanes[:, None] * PRIVATE + f["offset"] + 4 * np.arange(n)) // 4
    if "load" in text:
        want = scratch.view(u32)[pos]
        got = v_fast[f["vdst"]:f["vdst"] + n].reshape(n, -1).T
    else:
        want = v_fast[f["data"]:f["data"] + n].reshape(n, -1).T
        got = sc_fast[:scratch.size].view(u32)[pos]
        untouched = np.ones(scratch.size // 4, bool)
        untouched[pos.reshape(-1)] = False
        np.testing.assert_array_equal(sc_fast[:scratch.size].view(u32)[untouched],
                                      scratch.view(u32)[untouched])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("offset, inside", [(PRIVATE - 16, True), (PRIVATE - 12, False),
                                            (-16, False)])
def test_uniform_scratch_at_and_past_the_segment_end(offset, inside):
    """The last four dwords of the segment take the view; one dword further, or below
    the segment, faults (the general path's MemoryFault), for the load and the store."""
    scratch = np.arange(PRIVATE * BATCH_WAVES * 32, dtype=np.uint32).astype(np.uint8)
    for text in ("scratch_load_b128 v[66:69], off, off offset:192",
                 "scratch_store_b128 off, v[89:92], off offset:64"):
        inst = _inst(text, offset)
        assert inst.f["offset"] == offset
        rec: list[bool] = []
        if inside:
            v_fast, sc_fast = _run(inst, np.arange(BATCH_WAVES), scratch, True, rec)
            v_slow, sc_slow = _run(inst, np.arange(BATCH_WAVES), scratch, False, [])
            np.testing.assert_array_equal(v_fast, v_slow)
            np.testing.assert_array_equal(sc_fast, sc_slow)
            assert rec == [True]
        else:
            with pytest.raises(MemoryFault, match="private segment"):
                _run(inst, np.arange(BATCH_WAVES), scratch, True, rec)
            assert rec == [False]
