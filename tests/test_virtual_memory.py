"""The virtual system's memory map: per-lane gather/scatter against a byte-level model
(aligned, unaligned, across allocations), faults outside allocations and for agents without
access, and the consistency of lookups while allocations come and go."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amdgpu.errors import MemoryFault
from hsa.virtual.memory import MemoryMap

pytestmark = pytest.mark.hsa_virtual
AGENT, OTHER = 7, 8
DTYPES = [np.uint8, np.uint16, np.int32, np.float32, np.uint64, np.float64,
          np.dtype((np.void, 12)), np.dtype((np.void, 16))]  # dwordx3 / dwordx4 loads


@pytest.fixture(scope="module")
def mm():
    m = MemoryMap()
    allocs = [m.allocate(size, owner=AGENT, pool=0) for size in (4096, 100, 8192)]
    return m, allocs


@given(
    data=st.data(),
    dtype=st.sampled_from(DTYPES),
    lanes=st.integers(1, 64),
)
@settings(max_examples=150, deadline=None)
def test_gather_scatter_match_a_byte_model(mm, data, dtype, lanes):
    m, allocs = mm
    dtype = np.dtype(dtype)
    size = dtype.itemsize
    picks = data.draw(st.lists(
        st.tuples(st.integers(0, len(allocs) - 1), st.integers(0, 10**6)),
        min_size=lanes, max_size=lanes))
    addresses = np.array(
        [allocs[i].base + off % (allocs[i].size - size + 1) for i, off in picks], np.uint64)
    for a in allocs:
        a.data[:] = np.frombuffer(np.random.default_rng(lanes).bytes(a.size), np.uint8)
    model = {a.base: a.data.copy() for a in allocs}

    def locate(addr: int):
        a = next(a for a in allocs if a.base <= addr < a.end)
        return model[a.base], addr - a.base

    got = m.gather(addresses, dtype, AGENT)
    want = [np.frombuffer(buf[o:o + size].tobytes(), dtype)[0]
            for buf, o in map(locate, map(int, addresses))]
    assert got.dtype == dtype
    assert got.tobytes() == np.array(want, dtype).tobytes()

    values = np.frombuffer(np.random.default_rng(1).bytes(size * lanes), dtype)
    m.scatter(addresses, values, AGENT)
    for addr, v in zip(map(int, addresses), values, strict=True):  # later lanes win
        buf, o = locate(addr)
        buf[o:o + size] = np.frombuffer(v.tobytes(), np.uint8)
    for a in allocs:
        assert a.data.tobytes() == model[a.base].tobytes()


def test_unaligned_wide_access_makes_no_per_byte_index():
    """A dwordx4 access at dword (not 16-byte) addresses, a convolution's sliding window, is
    one 16-byte item per lane: its peak memory is the result, not an index array of 8 bytes
    per byte (the former path: 128 bytes a lane, most of a 4096x4096 convolution's time)."""
    import tracemalloc

    m = MemoryMap()
    a = m.allocate(1 << 20, owner=AGENT, pool=0)
    a.data[:] = np.frombuffer(np.random.default_rng(0).bytes(a.size), np.uint8)
    lanes = 1 << 14
    offsets = (np.arange(lanes, dtype=np.uint64) * 52 + 4) % np.uint64(a.size - 16)
    x4 = np.dtype((np.void, 16))
    tracemalloc.start()
    try:
        got = m.gather(a.base + offsets, x4, AGENT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    words = got.view("<u4").reshape(lanes, 4)
    want = np.stack([a.data.view("<u4")[(offsets // 4 + k).astype(np.int64)]
                     for k in range(4)], axis=1)
    assert (words == want).all()
    assert peak < 4 * lanes * 16, peak  # result, offsets and their int64 copy: 48 B a lane

    m.scatter(a.base + offsets[:8] + np.uint64(2), got[:8], AGENT)  # unaligned stores too
    for k, off in enumerate(offsets[:8].astype(np.int64) + 2):
        assert a.data[off:off + 16].tobytes() == got[k].tobytes()


def test_faults_outside_and_without_access():
    m = MemoryMap()
    a = m.allocate(4096, owner=AGENT, pool=0)
    inside = np.array([a.base, a.base + 4092], np.uint64)
    assert m.gather(inside, np.uint32, AGENT).size == 2
    for bad in ([a.base + 4093], [a.base - 4], [a.base, a.base + 4096]):
        with pytest.raises(MemoryFault) as info:
            m.gather(np.array(bad, np.uint64), np.uint32, AGENT)
        assert info.value.address in [int(x) for x in bad]
        with pytest.raises(MemoryFault):
            m.scatter(np.array(bad, np.uint64), np.zeros(len(bad), np.uint32), AGENT)
    with pytest.raises(MemoryFault) as info:
        m.gather(inside, np.uint32, OTHER)
    assert "not mapped for agent" in str(info.value)
    a.allowed.add(OTHER)
    m.gather(inside, np.uint32, OTHER)
    assert m.gather(inside, np.uint32).size == 2, "the host is never checked"
    m.free(a.base)
    with pytest.raises(MemoryFault):
        m.gather(inside, np.uint32, AGENT)


def test_lookups_stay_consistent_while_allocations_change():
    m = MemoryMap()
    keep = m.allocate(4096, owner=AGENT, pool=0)
    keep.data[:] = 5
    addresses = keep.base + np.arange(0, 4096, 4, dtype=np.uint64)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn():
        while not stop.is_set():
            m.free(m.allocate(4096, owner=AGENT, pool=0).base)

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(2000):
            try:
                assert (m.gather(addresses, np.uint8, AGENT) == 5).all()
                m.find(keep.base + 100, 4, AGENT)
            except BaseException as exc:  # noqa: BLE001 - report after stopping the thread
                errors.append(exc)
                break
    finally:
        stop.set()
        t.join()
    assert not errors, errors[0]


def test_gather_scatter_keep_the_shape_of_the_addresses():
    m = MemoryMap()
    a = m.allocate(4096, owner=AGENT, pool=0)
    b = m.allocate(4096, owner=AGENT, pool=0)
    lanes = np.arange(32, dtype=np.uint64) * 4
    addresses = np.stack([a.base + lanes, b.base + lanes + 2])  # (waves, lanes), unaligned
    values = np.arange(64, dtype=np.uint32).reshape(2, 32)
    m.scatter(addresses, values, AGENT)
    got = m.gather(addresses, np.uint32, AGENT)
    assert got.shape == (2, 32) and (got == values).all()
    m.scatter(addresses[:1], np.uint32(7), AGENT)  # a scalar broadcasts to every lane
    assert (m.gather(addresses[:1], np.uint32, AGENT) == 7).all()
    assert m.gather(np.empty((3, 0), np.uint64), np.float32).shape == (3, 0)
