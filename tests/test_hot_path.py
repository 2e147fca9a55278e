"""The compiled immediate-dispatch hot path (amdgpu/hsa_backend/hotpath.c) against the
Python steps of the same protocol (QueueLane.dispatcher's Python form, HsaDevice.dispatch,
packets.Ring's publish_ready/publish_rows/publish_many for replays, blocks and barriers: the
compiled Lane's submit_block and submit_rows).

The same dispatch sequence goes through a device on each path; the packets in the ring,
the kernarg bytes, the timeline values, the write index and the doorbells must agree, the
kernels' results must be right, and every case the C code hands to the Python method
(keyword arguments, waits, a trace sink, a timer, refused arguments, a closed device) must
behave as the Python path does."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading

import numpy as np
import pytest

import amdgpu
import compiler
import packets
from amdgpu.errors import (
    BufferStateError,
    DeviceError,
    HsaUnavailable,
    KernelArgumentError,
    PacketError,
    QueueError,
    QueueFullError,
)
from amdgpu.hsa_backend import hotpath

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx11]

N = 256


def test_the_compiled_path_is_built():
    """scripts/setup.sh builds it: a missing build would silently cost half the speed."""
    if os.environ.get(hotpath.ENV_VAR, "") not in ("", "0"):
        pytest.skip(f"{hotpath.ENV_VAR} is set: the Python steps were asked for")
    assert hotpath.MODULE is not None, hotpath.status()
    assert hotpath.status() == "compiled (hotpath.c)"


@pytest.fixture(scope="module")
def code():
    return compiler.compile("saxpy_hidden", targets=["gfx1100"])


def _open(compiled: bool, monkeypatch, **kw):
    if compiled and hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    monkeypatch.setattr(hotpath, "MODULE", hotpath.MODULE if compiled else None)
    dev = amdgpu.open("amdgpu:virtual", **{"lanes": 1, **kw})
    # chosen once, for the device's class: no method is installed on the instance
    assert "dispatch" not in vars(dev) and "submit" not in vars(dev)
    entries = (type(dev).dispatch, type(dev).submit)
    assert [type(e).__name__ for e in entries] == (
        ["Dispatch", "Submit"] if compiled else ["function", "function"])
    return dev


def _paused(dev):
    dev.lanes_[0].queue.processor.stop()  # nothing consumes: the ring keeps what was published
    return dev


def _state(dev, first: int, count: int):
    """What the dispatches left: each packet with its kernarg address made relative to
    the lane's kernarg memory and its kernel object and completion signal dropped (all
    three differ per device),
    that kernarg block's bytes, and the lane's counters."""
    ln = dev.lanes_[0]
    ring = ln.queue.ring
    out, objects = [], set()
    for idx in range(first, first + count):
        slot = idx % ln.queue.size
        pkt = bytearray(ring[slot * 64 : slot * 64 + 64].tobytes())
        words = memoryview(pkt).cast("Q")
        off = words[5] - ln.kernarg_address
        words[5] = off
        words[7] = 0  # completion_signal
        objects.add(words[4])  # kernel_object: where this device loaded the code
        words[4] = 0
        block = ln.kernarg_memory[off : off + dev._launch_size].tobytes()
        for tag, address in dev._addresses.items():  # per-device addresses, named
            block = block.replace(address.to_bytes(8, "little"), tag)
        out.append((bytes(pkt), block))
    assert len(objects) == 1  # one kernel throughout
    return out, (ln.submitted, ln.queue.load_write_index(), ln.doorbells,
                 ln.aql.kernarg_blocks())


def _sequence(dev, code):
    k = dev.load(code).kernel("saxpy_hidden")
    dev._launch_size = k.layout.size
    x, y = dev.buffer(N * 4), dev.buffer(N * 4)
    dev._addresses = {b"<buffery": y.address, b"<bufferx": x.address,
                      b"<queue!>": dev.lanes_[0].queue.handle}
    same = (y, x, np.float32(2.0), N)
    values = []
    for i in range(40):
        args = same if i % 3 else (y, x, np.float32(i), N)  # cached bytes, and packed anew
        grid, block = (N, 64) if i % 2 else (2 * N, 128)
        values.append(dev.dispatch(k, grid, block, args).value)
    values.append(dev.dispatch(k, N, None, [y, x, np.float32(3.0), N]).value)  # a list
    values.append(dev.dispatch(k, N, 64, same, 0).value)  # lane given
    values.append(dev.dispatch(k, N, 64, same, 0, ()).value)  # empty waits
    return values


def test_same_packets_kernargs_and_counters_on_both_paths(code, monkeypatch):
    results = []
    for compiled in (True, False):
        dev = _paused(_open(compiled, monkeypatch))
        first = dev.lanes_[0].queue.load_write_index()
        values = _sequence(dev, code)
        results.append((values, *_state(dev, first, len(values))))
        dev.close(timeout=0)
    (cv, cpk, cst), (pv, ppk, pst) = results
    assert cv == pv == list(range(1, 44))
    assert cst == pst
    assert len(cpk) == len(ppk) == 43
    for i, (c, p) in enumerate(zip(cpk, ppk, strict=True)):
        assert c == p, f"dispatch {i}: the packet or its kernarg block differs"


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_results_and_kernarg_ring_reuse(code, monkeypatch, compiled):
    """A kernarg ring small enough to wrap many times (KernargRing.allocate's slow path,
    waiting for completed blocks) and a ring that wraps: every result right."""
    dev = _open(compiled, monkeypatch, queue_size=64, kernarg_bytes=4096)
    k = dev.load(code).kernel("saxpy_hidden")
    x = dev.buffer(np.arange(N, dtype=np.float32))
    y = dev.buffer(np.zeros(N, dtype=np.float32))
    args = (y, x, np.float32(1.0), N)
    for _ in range(150):  # 150 * 288 bytes of kernargs through a 4 KB ring
        point = dev.dispatch(k, N, 64, args)
    point.wait()
    np.testing.assert_array_equal(y.to_numpy(np.float32), 150 * np.arange(N, dtype=np.float32))
    assert point.value == 150 and dev.lanes_[0].queue.load_write_index() >= 150
    dev.close()


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_the_slow_cases_behave_alike(code, monkeypatch, compiled):
    dev = _open(compiled, monkeypatch)
    k = dev.load(code).kernel("saxpy_hidden")
    x = dev.buffer(np.ones(N, dtype=np.float32))
    y = dev.buffer(np.zeros(N, dtype=np.float32))
    args = (y, x, np.float32(1.0), N)
    p1 = dev.dispatch(k, N, 64, args)
    p2 = dev.dispatch(k, N, 64, args, dynamic_lds=0)  # keyword: the Python method
    p3 = dev.dispatch(k, N, 64, args, 0, [p2])  # a wait
    sink = packets.trace.MemorySink()
    previous = packets.trace.set_sink(sink)  # a trace sink: the dispatch is traced
    try:
        p4 = dev.dispatch(k, N, 64, args)
    finally:
        packets.trace.set_sink(previous)
    assert [p.value for p in (p1, p2, p3, p4)] == [1, 2, 3, 4]
    traced = [r for r in sink.records if isinstance(r, packets.trace.PacketRecord)]
    assert len(traced) == 1 and traced[0].kernarg is not None
    p4.wait()
    np.testing.assert_array_equal(y.to_numpy(np.float32), np.full(N, 4.0, np.float32))
    with pytest.raises(KernelArgumentError) as e:
        dev.dispatch(k, N, 64, (y, x, "two", N))  # refused by the converters: one line
    assert "\n" not in str(e.value)
    with pytest.raises(DeviceError):
        dev.dispatch(k, N, 64, args, 5)  # no lane 5
    with pytest.raises(KernelArgumentError):
        dev.dispatch(k, N, 64, args[:3])  # an argument short
    with pytest.raises(KernelArgumentError):
        dev.dispatch(None, N, 64, args)
    dev.close()
    with pytest.raises(DeviceError, match="was closed: open it again"):
        dev.dispatch(k, N, 64, args)  # the cached launch too


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_threads_sharing_a_lane_get_distinct_values(code, monkeypatch, compiled):
    dev = _paused(_open(compiled, monkeypatch, queue_size=4096))
    k = dev.load(code).kernel("saxpy_hidden")
    x, y = dev.buffer(N * 4), dev.buffer(N * 4)
    args = (y, x, np.float32(1.0), N)
    got: list[list[int]] = [[] for _ in range(4)]

    def work(i):
        for _ in range(300):
            got[i].append(dev.dispatch(k, N, 64, args).value)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ln = dev.lanes_[0]
    assert sorted(v for g in got for v in g) == list(range(1, 1201))
    assert ln.submitted == 1200 and ln.doorbells == 1200
    assert ln.queue.load_write_index() == 1200
    headers = ln.queue.ring.view(np.uint16)[::32][:1200]
    assert ((headers & 0xFF) != packets.INVALID_HEADER).all()  # every slot published
    dev.close(timeout=0)


def _block(n: int, tag: int) -> np.ndarray:
    """n packets of recognisable bytes, the first header INVALID (publish_ready's form)."""
    block = np.arange(n * 64, dtype=np.uint32).astype(np.uint8).reshape(n, 64) ^ np.uint8(tag)
    block.view(np.uint32)[:, 0] = 0x1502  # barrier | kernel dispatch, system scopes
    block.view(np.uint32)[0, 0] = packets.INVALID_HEADER
    return block


def _ready_sequence(dev) -> tuple:
    """publish_ready of blocks of 1..40 packets on a 64-packet ring (it wraps, and waits for
    room: the read index is moved up by hand, the processor being paused), then what the
    Python method refuses: (ids, ring bytes, write index, doorbells, hint, errors)."""
    ln = dev.lanes_[0]
    q = ln.queue
    ids = []
    for i, n in enumerate((1, 3, 40, 2, 17, 40, 1, 64, 5)):
        q._store_read_index(q.load_write_index())  # consumed
        block = _block(n, i)
        ids.append(ln.submit_block(block if i % 2 else memoryview(block).cast("B"), 0x1502 + i))
    ids.append(ln.submit_block(_block(4, 9)[::1], 0x1502))  # a plain view of an array
    for i, (n, k, row) in enumerate(((3, 2, 2), (40, 40, 39), (30, 29, 29), (1, 0, 0))):
        q._store_read_index(q.load_write_index())  # publish_rows, wrapping too
        offsets = np.arange(k, dtype=np.uint64) * np.uint64(48) + np.uint64(i)
        block = _block(n, 20 + i)
        before = block.copy()
        ids.append(ln.submit_rows(block, 0x1502, 0x7F0000001000 + i, offsets, row, 0xABC + i))
        assert np.array_equal(block, before)  # the block itself is left as it was
    for i, n in enumerate((1, 3, 40, 33)):  # ready packets (a barrier, a block), wrapping
        q._store_read_index(q.load_write_index())
        block = _block(n, 40 + i)
        block.view(np.uint32)[0, 0] = 0x1503  # barrier-AND, its own header in place
        ids.append(ln.publish_block(block))
    q._store_read_index(q.load_write_index())
    ids.append(ln.publish(packets.barrier_and(dep_signals=(), completion_signal=7, barrier=True)))
    q._store_read_index(q.load_write_index())
    errors = []
    # too many, a first header not INVALID, none, and a strided block (copied: published)
    for bad in (_block(65, 1), np.zeros((2, 64), np.uint8), np.zeros((0, 64), np.uint8),
                _block(3, 1)[::2]):
        try:
            ln.submit_block(bad, 0x1502)
            errors.append(None)
        except Exception as e:  # noqa: BLE001 - the class and message are compared
            errors.append((type(e).__name__, str(e)))
    offsets = np.zeros(3, np.uint64)
    for args in ((_block(2, 1), 0x1502, 0, offsets, 0, 0),  # more offsets than packets
                 (_block(3, 1), 0x1502, 0, offsets, 3, 0),  # no such signal row
                 (np.zeros((3, 64), np.uint8), 0x1502, 0, offsets, 0, 0)):  # not INVALID
        try:
            ln.submit_rows(*args)
            errors.append(None)
        except PacketError as e:
            errors.append(("PacketError", str(e)))
    return (ids, q.ring.tobytes(), q.load_write_index(), ln.doorbells, ln.aql.hint, errors)


@pytest.fixture(params=["avx2", "plain"])
def row_copy(request):
    """The compiled module with its row copy in one of its two forms (two 32-byte moves a
    row where the CPU has AVX2, memcpy or plain stores otherwise), put back after."""
    if hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    module = hotpath.MODULE
    was = module.copy_rows()
    try:
        module.copy_rows(request.param)
    except ValueError:
        pytest.skip(f"this CPU has no {request.param}")
    yield module
    module.copy_rows(was)


def test_publish_ready_is_the_same_on_both_paths(monkeypatch, row_copy):
    """Each kept-block form through the compiled Lane and packets.Ring: with the row copy
    of publish_rows in both of its forms."""
    got = []
    for compiled in (True, False):
        dev = _paused(_open(compiled, monkeypatch, queue_size=64))
        assert (type(dev.lanes_[0].aql).__name__ == "Lane") == compiled
        got.append(_ready_sequence(dev))
        dev.close(timeout=0)
    (cids, cring, cw, cd, ch, cerr), (pids, pring, pw, pd, ph, perr) = got
    assert cids == pids == [0, 1, 4, 44, 46, 63, 103, 104, 168, 173, 177, 180, 220, 250,
                            251, 252, 255, 295, 328]
    assert (cw, cd, ch) == (pw, pd, ph) == (331, 20, 331)  # the strided block went out
    assert cring == pring
    assert cerr == perr
    assert [e[0] if e else None for e in cerr] == ["PacketError"] * 3 + [None] + [
        "PacketError"] * 3


def _repeating_block(n: int, k: int) -> np.ndarray:
    """n packets that repeat with period 3 but for word 5 (each row's own), the first
    header INVALID: rows < k are kernarg rows (word 5 set by each replay), rows >= k keep
    theirs. Rows k.. repeat rows 1.. byte for byte but for word 5."""
    block = np.zeros((n, 64), np.uint8)
    for i in range(n):
        block[i] = (np.arange(64) * 7 + i % 3) % 251
    words = block.view(np.uint64)
    words[:, 5] = np.arange(n, dtype=np.uint64) * np.uint64(0x1001) + np.uint64(0xABC)
    block.view(np.uint32)[:, 0] = 0x1502
    block.view(np.uint32)[0, 0] = packets.INVALID_HEADER
    return block


def test_rows_replays_write_what_the_block_would(monkeypatch, row_copy):
    """A segment's Rows (hotpath.c: its distinct rows once each, which the compiled lane
    expands into the ring) publishes the bytes the block itself does (packets.Ring on the
    Python lane, and the numpy expectation): each kernarg row's word 5 = base + offset
    (the block's own word 5 ignored, so rows that differ only there share a template),
    rows past the kernarg rows with their own word 5 kept, the completion signal on its
    row, the first header last, across the ring's wrap; in both row-copy forms."""
    module = row_copy
    cases = [(40, 30, 29), (30, 30, 29), (7, 0, 6), (64, 60, 63), (1, 1, 0)]
    made = [_repeating_block(n, k) for n, k, _ in cases]
    forms = [module.Rows(memoryview(b).cast("B"), k)
             for b, (_, k, _) in zip(made, cases, strict=True)]
    # rows < k differ only in word 5: the period's 3 rows (row 0 apart: its header) and,
    # past k, one template per row
    assert [r.distinct for r in forms] == [1 + 3 + 10, 1 + 3, 1 + 6, 1 + 3 + 4, 1]
    assert [(r.n, r.k) for r in forms] == [(n, k) for n, k, _ in cases]
    got = []
    for compiled in (True, False):
        dev = _paused(_open(compiled, monkeypatch, queue_size=64))
        ln, q = dev.lanes_[0], dev.lanes_[0].queue
        with ln.aql:
            ln.submit_block(_block(37, 1), 0x1502)  # the first replay wraps
        q._store_read_index(q.load_write_index())
        ids, rings = [], []
        for i, ((n, k, row), block, form) in enumerate(zip(cases, made, forms, strict=True)):
            offsets = np.arange(k, dtype=np.uint64) * np.uint64(96) + np.uint64(i)
            before = block.copy()
            src = form if compiled else block
            with ln.aql:
                ids.append(ln.submit_rows(src, 0x1503, 0x7F0000002000 + i, offsets, row,
                                          0xAB0 + i))
            assert np.array_equal(block, before)  # the block itself is left as it was
            rings.append(q.ring.tobytes())
            q._store_read_index(q.load_write_index())  # consumed
            # what the ring must hold: the block, word 5 of rows < k set, the signal,
            # the first header
            want = block.copy()
            words = want.view(np.uint64)
            words[:k, 5] = offsets + np.uint64(0x7F0000002000 + i)
            words[row, 7] = 0xAB0 + i
            want.view(np.uint32)[0, 0] = 0x1503
            slots = (ids[-1] + np.arange(n)) % 64
            assert q.ring.reshape(64, 64)[slots].tobytes() == want.tobytes(), (
                f"case {i} ({'compiled' if compiled else 'python'})")
        got.append((ids, rings, q.load_write_index(), ln.doorbells))
        dev.close(timeout=0)
    assert got[0] == got[1]
    assert got[0][0] == [37, 77, 107, 114, 178]


def test_rows_refuse_what_they_were_not_made_for(monkeypatch):
    """Rows of another block size or kernarg row count, a block too large for the ring or
    a first header not INVALID: one error each, nothing published."""
    if hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    module = hotpath.MODULE
    for bad, k in ((np.zeros((3, 64), np.uint8), 0), (_repeating_block(3, 0), 4),
                   (np.zeros(100, np.uint8), 0), (_repeating_block(3, 0), -1)):
        with pytest.raises(ValueError, match="Rows takes a packet block"):
            module.Rows(memoryview(bad).cast("B"), k)
    with pytest.raises(ValueError, match="Rows takes a packet block"):
        module.Rows(b"", 0)
    dev = _paused(_open(True, monkeypatch, queue_size=64))
    ln, q = dev.lanes_[0], dev.lanes_[0].queue
    form = module.Rows(memoryview(_repeating_block(8, 4)).cast("B"), 4)
    with pytest.raises(ValueError, match="Rows of 8 rows with 4 kernarg rows given 8 rows "
                                         "and 3 kernarg offsets"):
        with ln.aql:
            ln.submit_rows(form, 0x1503, 0, np.zeros(3, np.uint64), 7, 0)
    big = module.Rows(memoryview(_repeating_block(65, 4)).cast("B"), 4)
    with pytest.raises(PacketError, match="publish_rows takes 1..64 packets"):
        with ln.aql:
            ln.submit_rows(big, 0x1503, 0, np.zeros(4, np.uint64), 7, 0)
    assert q.load_write_index() == 0 and ln.doorbells == 0
    assert (q.ring.view(np.uint16)[::32] == packets.INVALID_HEADER).all()
    dev.close(timeout=0)


def _replays(dev, code, rounds: int) -> list:
    """Command buffers of 3, 1 and 12 dispatches replayed over binding tables
    that come again (kept instances) and new ones (the ring path): each submission's
    packets with the kernarg block they point at, addresses named."""
    ln = dev.lanes_[0]
    k = dev.load(code).kernel("saxpy_hidden")
    bufs = [dev.buffer(2 * N * 4) for _ in range(3)]
    names = {b.address.to_bytes(8, "little"): f"<buf{i}>".encode() for i, b in enumerate(bufs)}
    names[ln.queue.handle.to_bytes(8, "little")] = b"<queue!>"
    cbs = []
    for n in (3, 1, 12):  # 12: past SMALL_ROWS, the ring path sets its fields on the way
        cb = dev.command_buffer()
        for i in range(n):
            cb.dispatch(k, N, 64, (cb.binding(0), cb.binding(1), np.float32(i), N))
        cbs.append(cb.finalize())
    out = []
    for r in range(rounds):
        cb = cbs[r % 3]
        table = [bufs[r % 3], bufs[(r + 1) % 3]]
        if r % 5 == 0:  # a view never bound before: the ring path
            table = [bufs[2].view(16 * r, N * 4), bufs[0]]
            names[table[0].address.to_bytes(8, "little")] = f"<v{r:04}>".encode()
        first = ln.queue.load_write_index()
        point = dev.submit(cb, table)
        last = ln.queue.load_write_index()
        for idx in range(first, last):
            pkt = bytearray(ln.queue.ring[idx % ln.queue.size * 64:][:64].tobytes())
            words = memoryview(pkt).cast("Q")
            block = b""
            if pkt[0] == packets.PacketType.KERNEL_DISPATCH:  # (the last may be a barrier)
                off = words[5] - ln.kernarg_address
                block = ln.kernarg_memory[off : off + k.layout.size].tobytes()
                for address, name in names.items():
                    block = block.replace(address, name)
            words[4] = 0  # kernel object, completion signal, kernarg address: per device
            words[5] = 0
            words[7] = words[7] != 0
            out.append((point.value, bytes(pkt), block))
    return out


def test_replays_are_the_same_on_both_paths(code, monkeypatch):
    got = []
    for compiled in (True, False):
        dev = _paused(_open(compiled, monkeypatch, queue_size=1024))
        got.append(_replays(dev, code, 30))
        dev.close(timeout=0)
    # 3 dispatches and a trailing barrier, 1 dispatch, 12 and a barrier: 10 replays each
    assert len(got[0]) == len(got[1]) == 10 * (4 + 1 + 13)
    for i, (c, p) in enumerate(zip(*got, strict=True)):
        assert c == p, f"packet {i} of the replays differs"


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_replayed_results(code, monkeypatch, compiled):
    """12 saxpy dispatches (y += i * x) replayed into a small queue that wraps: over a
    table bound again and again (a kept instance) and over new views (the ring path)."""
    dev = _open(compiled, monkeypatch, queue_size=64)
    k = dev.load(code).kernel("saxpy_hidden")
    cb = dev.command_buffer()
    for i in range(12):
        cb.dispatch(k, N, 64, (cb.binding(0), cb.binding(1), np.float32(i), N))
    cb.finalize()
    x = dev.buffer(np.arange(N, dtype=np.float32))
    ys = [dev.buffer(np.zeros(2 * N, np.float32)) for _ in range(2)]
    for r in range(8):
        y = ys[0] if r % 2 else ys[1].view(4 * r, 4 * N)  # again and again / new each time
        point = dev.submit(cb, [y, x])
    point.wait()
    total = sum(range(12)) * np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(ys[0].to_numpy(np.float32)[:N], 4 * total)
    got = ys[1].to_numpy(np.float32)
    expect = np.zeros(2 * N, np.float32)
    for r in range(0, 8, 2):
        expect[r : r + N] += total
    np.testing.assert_array_equal(got, expect)
    dev.close()


def _submit_outcomes(dev, code) -> list:
    """Submits the compiled short way must hand to the Python method, and what each gave:
    the same error (class and message) or the same timeline value on both paths."""
    k = dev.load(code).kernel("saxpy_hidden")
    x, y, small = dev.buffer(N * 4), dev.buffer(N * 4), dev.buffer(16)
    other = amdgpu.open("amdgpu:virtual", lanes=1)
    try:
        cb = dev.command_buffer()
        cb.dispatch(k, N, 64, (cb.binding(0), cb.binding(1), np.float32(1.0), N))
        cb.finalize()
        pcb = dev.command_buffer()  # one with a parameter
        pcb.dispatch(k, pcb.param("n"), 64, (pcb.binding(0), pcb.binding(1), np.float32(1.0),
                                            N))
        pcb.finalize()
        foreign = other.command_buffer()
        foreign.dispatch(other.load(code).kernel("saxpy_hidden"), N, 64,
                         (foreign.binding(0), foreign.binding(1), np.float32(1.0), N))
        foreign.finalize()
        freed = dev.buffer(N * 4)
        freed.free()
        calls = [
            lambda: dev.submit(cb, [y, x]),  # first: the ring path, then kept
            lambda: dev.submit(cb, [y, x]),
            lambda: dev.submit(cb, [y, x]),  # the short way
            lambda: dev.submit(cb, (y, x), 0),
            lambda: dev.submit(cb, [y, x], 0, ()),
            lambda: dev.submit(cb, [y, x], lane=0),  # keyword: the Python method
            lambda: dev.submit(cb, [y]),
            lambda: dev.submit(cb, [y, x, x]),
            lambda: dev.submit(cb, [y, small]),
            lambda: dev.submit(cb, [y, freed]),
            lambda: dev.submit(cb, [y, other.buffer(N * 4)]),
            lambda: dev.submit(cb, [y, "x"]),
            lambda: dev.submit(cb, y),
            lambda: dev.submit(cb, [y, x], 3),
            lambda: dev.submit(cb, [y, x], True),
            lambda: dev.submit(foreign, [y, x]),
            lambda: dev.submit(pcb, [y, x]),
            lambda: dev.submit(pcb, [y, x], params={"n": N}),
            lambda: dev.submit(cb, [y, x], 0, [dev.barrier()]),
            lambda: dev.submit(dev.command_buffer(), [y, x]),  # not finalized
            lambda: dev.submit(cb, [x, y]),
        ]
        out = []
        for call in calls:
            try:
                out.append(("point", call().value))
            except Exception as e:  # noqa: BLE001 - the class and message are compared
                out.append((type(e).__name__, re.sub(r"0x[0-9a-f]+", "0x?", str(e))))
        dev.close()
        try:  # and a cached instance's table on the closed device
            out.append(("closed", "point", dev.submit(cb, [y, x]).value))
        except Exception as e:  # noqa: BLE001 - the class and message are compared
            out.append(("closed", type(e).__name__, str(e)))
        return out
    finally:
        other.close()


def test_submit_slow_cases_behave_alike(code, monkeypatch):
    got = [_submit_outcomes(_open(compiled, monkeypatch), code) for compiled in (True, False)]
    assert got[0] == got[1]
    kinds = [o[0] for o in got[0]]
    assert kinds[:6] == ["point"] * 6
    assert [o[1] for o in got[0][:6]] == [1, 2, 3, 4, 5, 6]
    assert "KernelArgumentError" in kinds and "DeviceError" in kinds
    assert got[0][-1][1] == "DeviceError" and "was closed" in got[0][-1][2]


def _open_emulated(compiled: bool, monkeypatch, **kw):
    if compiled and hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    monkeypatch.setattr(hotpath, "MODULE", hotpath.MODULE if compiled else None)
    try:
        return amdgpu.open("amdgpu:emulated", lanes=1, **kw)
    except HsaUnavailable as e:
        pytest.skip(f"amdgpu:emulated unavailable: {e}")


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_rocr_queue_calls_and_results(monkeypatch, compiled):
    """On real ROCr (amdgpu:emulated) the compiled path calls ROCr's add_write_index and
    doorbell functions itself (`native` 2; the virtual queue's are 1): immediate and
    replayed saxpys give the right result and the same counters as the Python path; once
    the queue is destroyed it calls them no more (the Python methods raise)."""
    gfx90a = compiler.compile("saxpy_hidden", targets=["gfx90a"])
    dev = _open_emulated(compiled, monkeypatch, queue_size=64)
    ln = dev.lanes_[0]
    assert (getattr(ln.aql, "native", None) == 2) == compiled
    k = dev.load(gfx90a).kernel("saxpy_hidden")
    x = dev.buffer(np.arange(N, dtype=np.float32))
    y = dev.buffer(np.zeros(N, np.float32))
    for _ in range(10):
        dev.dispatch(k, N, 64, (y, x, np.float32(1.0), N))
    cb = dev.command_buffer(mode="aql")  # the AQL ring calls (gfx90a replays PM4 by default)
    for _ in range(12):
        cb.dispatch(k, N, 64, (cb.binding(0), cb.binding(1), np.float32(1.0), N))
    cb.finalize()
    for _ in range(3):  # the ring path, then a kept instance twice
        point = dev.submit(cb, [y, x])
    point.wait(60)
    np.testing.assert_array_equal(y.to_numpy(np.float32), 46 * np.arange(N, dtype=np.float32))
    assert (ln.submitted, ln.doorbells, ln.queue.load_write_index()) == (13, 13, 10 + 3 * 13)
    queue = ln.queue
    dev.close()
    assert queue.destroyed
    with pytest.raises(QueueError, match="was destroyed"):
        ln.submit_block(_block(1, 0), 0x1502)


def test_virtual_queue_words_are_written_natively():
    if hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    dev = amdgpu.open("amdgpu:virtual", lanes=1)
    assert dev.lanes_[0].aql.native == 1
    dev.close()


def test_room_is_read_at_the_virtual_queues_words(monkeypatch):
    """The compiled lane's room check reads the virtual queue's write and read index
    words itself when its cached indices say full (a drained queue: the processor moved
    the read index since): Room.before_reserve, a Python call, only when the queue is
    full by those words too."""
    if hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    calls = []

    def before_reserve(room, n):
        calls.append(n)
        raise QueueFullError(f"full: no room for {n}")

    monkeypatch.setattr(packets.ring.Room, "before_reserve", before_reserve)
    dev = _paused(_open(True, monkeypatch, queue_size=64))
    ln, q = dev.lanes_[0], dev.lanes_[0].queue
    for i in range(5):  # 40 of 64 each time: the cached read index says full from the 2nd
        with ln.aql:
            ln.submit_block(_block(40, i), 0x1502)
        q._store_read_index(q.load_write_index())  # drained
    assert calls == [] and q.load_write_index() == 200
    with ln.aql:
        ln.submit_block(_block(40, 9), 0x1502)
    with pytest.raises(QueueFullError, match="full: no room for 40"), ln.aql:
        ln.submit_block(_block(40, 9), 0x1502)  # not drained: full by the words too
    assert calls == [40] and q.load_write_index() == 240
    dev.close(timeout=0)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_doorbells_take_the_locked_path_while_the_flag_word_says_so(code, monkeypatch,
                                                                     compiled):
    """The doorbell reads the virtual queue's flag word once (hsa/virtual/queues.py): a
    waiter on the doorbell signal is woken by a dispatch's doorbell, and a note on it is
    cleared (the signal table's locked store ran), on both paths; the plain case leaves
    the word's unusual bytes zero."""
    from hsa.provider import SignalCondition

    dev = _paused(_open(compiled, monkeypatch))
    q = dev.lanes_[0].queue
    k = dev.load(code).kernel("saxpy_hidden")
    x, y = dev.buffer(N * 4), dev.buffer(N * 4)
    args = (y, x, np.float32(1.0), N)
    dev.dispatch(k, N, 64, args)
    assert bytes(q.flags[:4]) == bytes(4) and dev.provider.signal_load(q.doorbell_signal) == 0
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(dev.provider.signal_wait(
        q.doorbell_signal, SignalCondition.GTE, 1, 5.0)))
    waiter.start()
    while not q.flags[0]:  # FLAG_WAITERS: the waiter is registered
        threading.Event().wait(0.001)
    dev.dispatch(k, N, 64, args)  # packet id 1: the locked store notifies the waiter
    waiter.join(5.0)
    assert seen == [1] and not q.flags[0]
    dev.provider._signals.annotate([q.doorbell_signal], "a note")
    assert q.flags[1]  # FLAG_NOTE
    dev.dispatch(k, N, 64, args)
    assert not q.flags[1] and dev.provider._signals.signal(q.doorbell_signal).note == ""
    assert dev.provider.signal_load(q.doorbell_signal) == 2 and q.processor._doorbell == 2
    dev.close(timeout=0)
    assert q.flags[2]  # FLAG_DESTROYED


def test_a_stale_build_is_not_loaded(tmp_path, monkeypatch):
    lib = hotpath.build(tmp_path / "_hotpath.so")
    assert lib.exists()
    assert not hotpath.is_stale(lib)
    stamp = lib.with_name(lib.name + ".sha256")
    stamp.write_text("0" * 64 + "\n")  # built from another hotpath.c
    assert hotpath.is_stale(lib)
    stamp.unlink()
    assert hotpath.is_stale(lib)


# --- one set of checks on every path (issue 35) ----------------------------------------------
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_freed_foreign_and_closed_buffers_are_refused_on_every_path(code, monkeypatch, compiled):
    """A freed buffer (its address may already be another buffer's), a closed device's and
    an unreachable device's buffer: one line naming the buffer and where it was freed or
    which device owns it, on the launch cache's path, the converters' path and replays."""
    dev = _open(compiled, monkeypatch)
    other = amdgpu.open("amdgpu:virtual:2xgfx1100:1", lanes=1)
    try:
        k = dev.load(code).kernel("saxpy_hidden")
        x = dev.buffer(np.ones(N, dtype=np.float32))
        y = dev.buffer(np.zeros(N, dtype=np.float32))
        args = (y, x, np.float32(1.0), N)
        dev.dispatch(k, N, 64, args).wait()  # cached: launch and the argument tuple's bytes
        dev.dispatch(k, N, 64, args).wait()
        freed_line = _next_line()
        x.free()
        for call_args in (args, (y, x, np.float32(1.0), N), [y, x, np.float32(1.0), N]):
            with pytest.raises(BufferStateError) as e:  # the same tuple: the cached bytes too
                dev.dispatch(k, N, 64, call_args)
            msg = str(e.value)
            assert isinstance(e.value, BufferError) and "\n" not in msg
            assert f"test_hot_path.py:{freed_line}" in msg and f"0x{x.address:x}" in msg
            assert "argument 1 " in msg
        z = dev.buffer(N * 4)
        view = z.view(64, 256)
        z.free()
        with pytest.raises(BufferStateError, match="was freed at"):  # a view of a freed root
            dev.dispatch(k, N, 64, (view, y, np.float32(1.0), N))
        foreign = other.buffer(N * 4)  # another system's GPU: not reachable from dev
        with pytest.raises(BufferStateError, match="belongs to another device.*cannot reach"):
            dev.dispatch(k, N, 64, (y, foreign, np.float32(1.0), N))
        sibling = amdgpu.open("amdgpu:virtual", lanes=1)  # the same GPU: its buffers work
        kept = sibling.buffer(np.zeros(N, dtype=np.float32))
        dev.dispatch(k, N, 64, (kept, y, np.float32(1.0), N)).wait()
        np.testing.assert_array_equal(kept.to_numpy(np.float32), y.to_numpy(np.float32))
        sibling.close()  # ... until it is closed: its memory is gone
        with pytest.raises(BufferStateError, match="belongs to another device.*was closed"):
            dev.dispatch(k, N, 64, (kept, y, np.float32(1.0), N))
        for bad in (None, 3, y):  # not an argument tuple: a project error, not Python's
            with pytest.raises(KernelArgumentError, match="tuple or list"):
                dev.dispatch(k, N, 64, bad)
        # a replay whose recorded (not bound) buffer was freed after recording
        w = dev.buffer(np.ones(N, dtype=np.float32))
        cb = dev.command_buffer()
        cb.dispatch(k, N, 64, (cb.binding(0), w, np.float32(1.0), N))
        cb.finalize()
        for _ in range(3):  # the ring path, then the kept instance (the compiled short way)
            dev.submit(cb, [y]).wait()
        w.free()
        with pytest.raises(BufferStateError, match="recorded into this command buffer.*freed"):
            dev.submit(cb, [y])
        bound = dev.command_buffer()
        bound.dispatch(k, N, 64, (bound.binding(0), bound.binding(1), np.float32(1.0), N))
        bound.finalize()
        with pytest.raises(BufferStateError, match="binding 1.*freed"):
            dev.submit(bound, [y, x])
        dev.dispatch(k, N, 64, (y, y, np.float32(1.0), N)).wait()  # the device keeps working
    finally:
        other.close()
        dev.close()


def _next_line() -> int:
    """The line after the caller's (where it frees a buffer)."""
    return sys._getframe(1).f_lineno + 1


def test_the_launch_plan_fields_are_where_the_c_code_reads_them(code, monkeypatch):
    """hotpath.c reads executable.LaunchPlan by position (its LAUNCH_* enum): each name
    there is the field at that position, and HsaKernel.launch builds one."""
    from amdgpu.hsa_backend.executable import LaunchPlan

    source = hotpath.SOURCE.read_text()
    enum = dict(re.findall(r"\bLAUNCH_([A-Z]+) = (\d+)", source))
    assert enum.pop("FIELDS") == str(len(LaunchPlan._fields)) and len(enum) >= 5
    for name, index in enum.items():
        assert LaunchPlan._fields[int(index)] == name.lower(), name
    dev = _open(True, monkeypatch)
    k = dev.load(code).kernel("saxpy_hidden")
    plan = k.launch(N, 64, 0, dev.lanes_[0])
    assert type(plan) is LaunchPlan and plan.lane is dev.lanes_[0] and plan.size == k.layout.size
    dev.close()


# --- one lane type that owns submission (issue 30) ------------------------------------------
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_the_lane_owns_its_submission_state(monkeypatch, compiled):
    """The counter, the lock, the ring indices and the kernarg ring live in the lane's Lane
    (the compiled one, or PythonLane): QueueLane holds none of them, nothing outside the
    Lane can set the counter, and `with lane.aql as value` moves it only on success."""
    dev = _open(compiled, monkeypatch)
    ln = dev.lanes_[0]
    assert type(ln.aql).__name__ == ("Lane" if compiled else "PythonLane")
    for name in ("submitted", "ring", "kernargs", "_hint", "_read", "doorbells"):
        assert name not in vars(ln), name
    assert ln.lock is ln.aql.lock
    for obj in (ln, ln.aql):
        with pytest.raises(AttributeError):
            obj.submitted = 7
    with ln.aql as value:
        assert value == ln.submitted + 1 == 1
        assert not ln.lock.acquire(blocking=False)  # held for the submission
        ln.publish(packets.barrier_and(dep_signals=(), completion_signal=ln.signal, barrier=True))
    assert ln.submitted == 1
    with pytest.raises(ZeroDivisionError), ln.aql as value:
        1 / 0  # noqa: B018 - a failure inside the submission
    assert ln.submitted == 1 and value == 2  # no counter move, the lock released
    assert ln.lock.acquire(blocking=False)
    ln.lock.release()
    dev.synchronize()
    dev.close()


class _FakeQueue:
    """The producer side of a queue over host memory, for a Lane without a device."""

    def __init__(self, size: int):
        self.size, self.id, self.write, self.read, self.bells = size, 3, 0, 0, []
        self.ring = np.zeros((size, 64), np.uint8)
        self.ring.view(np.uint32)[:, 0] = packets.INVALID_HEADER

    def load_write_index(self):
        return self.write

    def load_read_index(self):
        return self.read

    def add_write_index(self, n):
        self.write += n
        return self.write - n

    def doorbell(self, idx):
        self.bells.append(idx)


def _kernarg_lane(compiled: bool, kbytes: int, completed, wait):
    from amdgpu.hsa_backend.kernargs import KernargRing
    from amdgpu.hsa_backend.python_lane import PythonLane

    q, mem = _FakeQueue(16), np.zeros(kbytes, np.uint8)
    if not compiled:
        return PythonLane(q, 0x10000, mem, completed, wait)
    room = packets.ring.Room(q.size, q.load_write_index, q.load_read_index, q.id, 0.01)
    return hotpath.MODULE.Lane(q.ring.reshape(-1), q.size, q.add_write_index, q.doorbell, room,
                               0, 0, None, mem, 0x10000, KernargRing.capacity_for(kbytes),
                               completed, wait, packets.ring)


def _kernarg_sequence(compiled: bool) -> list:
    """Allocations through the lane's kernarg ring (fast path, wrap, reclaim, waits for the
    oldest block, a block larger than the ring, a wait that times out): every offset, the
    blocks in use after each step, and each error's class and message."""
    from amdgpu.errors import SignalTimeout

    done = [0]
    waited: list[int] = []

    def wait(value, timeout):
        waited.append(value)
        if value == 2000:
            raise SignalTimeout(0x1001, "lane 0 did not reach value 2000 in 0.5 s", "wait")
        done[0] = max(done[0], value)

    lane = _kernarg_lane(compiled, 1024, lambda: done[0], wait)
    rng = np.random.default_rng(5)
    out: list = [lane.capacity]

    def step(size, value):
        try:
            out.append(("at", lane.allocate(size, value)))
        except Exception as e:  # noqa: BLE001 - the class and message are compared
            out.append((type(e).__name__, str(e), str(e.__cause__)))
        out.append((lane.kernarg_head, lane.in_use, lane.kernarg_blocks(), list(waited)))

    for value in range(1, 120):
        if value % 9 == 0:
            done[0] = value - 4  # some completed meanwhile
        step(int(rng.choice([0, 8, 24, 100, 288, 500, 2000])), value)
    done[0] = 119  # all completed: reclaimed at the next slow path
    step(600, 2000)
    step(600, 2001)  # no room: waits for 2000, which times out
    return out


def test_the_kernarg_ring_is_the_same_on_both_paths():
    if hotpath.MODULE is None:
        pytest.fail(f"the compiled hot path is not loaded: {hotpath.status()}")
    compiled, python = _kernarg_sequence(True), _kernarg_sequence(False)
    assert compiled == python
    kinds = {o[0] for o in compiled[1:] if isinstance(o[0], str)}
    assert {"at", "KernelArgumentError", "SignalTimeout"} <= kinds
    timeout = next(o for o in compiled[1:] if o[0] == "SignalTimeout")
    assert "kernarg ring full and lane 0 did not reach value 2000" in timeout[1]
    assert "did not reach" in timeout[2]  # the wait's own error is the cause


def _traced_sequence(dev) -> tuple:
    """Packets through QueueLane.publish / publish_block (ready, every header apart, a
    caller's record) with a trace sink and without: the ring,
    the ids and the records as published (times dropped, checked in order)."""
    ln, q = dev.lanes_[0], dev.lanes_[0].queue
    sink = packets.trace.MemorySink()
    ids, calls = [], []
    for traced in (False, True):
        previous = packets.trace.set_sink(sink) if traced else None
        try:
            for i, n in enumerate((1, 3, 40, 17)):
                q._store_read_index(q.load_write_index())
                block = _block(n, 60 + i)
                headers = block.view(np.uint32)[:, 0].copy()
                headers[0] = 0x1503
                block.view(np.uint32)[:, 0] = packets.INVALID_HEADER
                ids.append(ln.publish_block(block, headers if i % 2 else list(headers)))
                q._store_read_index(q.load_write_index())
                ready = _block(n, 70 + i)
                ready.view(np.uint32)[0, 0] = 0x1503
                ids.append(ln.publish_block(ready, None, (lambda *a: calls.append(a[:2] + a[5:]))
                                            if traced and i == 2 else None))
            q._store_read_index(q.load_write_index())
            ids.append(ln.publish(packets.barrier_and(dep_signals=(), completion_signal=9,
                                                     barrier=True), b"\x01" * 8, "k"))
        finally:
            if traced:
                packets.trace.set_sink(previous)
    records = []
    for r in sink.records:
        assert r.reserve_ns <= r.publish_ns <= r.doorbell_ns
        fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(r)
                  if not f.name.endswith("_ns")}
        # the queue's id is process-wide (which other devices opened first), not the path's
        assert fields["queue_id"] == q.id
        fields["queue_id"] = "this lane's queue"
        records.append(sorted((k, bytes(v) if isinstance(v, np.ndarray) else v)
                              for k, v in fields.items()))
    assert all(c[0] == q.id for c in calls)  # the caller's record: (queue_id, first, ...)
    calls = [("this lane's queue", *c[1:]) for c in calls]
    return ids, q.ring.tobytes(), ln.doorbells, records, calls


def test_traced_and_plain_publishes_are_the_same_on_both_paths(monkeypatch):
    got = []
    for compiled in (True, False):
        dev = _paused(_open(compiled, monkeypatch, queue_size=64))
        got.append(_traced_sequence(dev))
        dev.close(timeout=0)
    assert got[0] == got[1]
    ids, _ring, bells, records, calls = got[0]
    assert len(ids) == bells == 18
    assert len(records) == 61 + 21 + 1 and len(calls) == 1  # one block: the caller's way


def test_no_module_writes_another_objects_private_fields():
    """`x._name = ...` only on self/cls, or on instances of a class of the same module
    (one that assigns self._name itself): the HSA backend and the packets library."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bad = []
    for folder in ("amdgpu/hsa_backend", "packets"):
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            own = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and isinstance(n.value, ast.Name) and n.value.id == "self"}
            for node in ast.walk(tree):
                targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                           if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
                for t in targets:
                    for a in ast.walk(t):
                        if (isinstance(a, ast.Attribute) and a.attr.startswith("_")
                                and not a.attr.startswith("__")
                                and not (isinstance(a.value, ast.Name)
                                         and a.value.id in ("self", "cls"))
                                and a.attr not in own):
                            bad.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(t)}")
    assert bad == []


# --- modes chosen once (issue 30) -------------------------------------------------------------
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_the_publish_mode_changes_when_a_timer_or_sink_starts_and_stops(code, monkeypatch,
                                                                         compiled):
    """Plain, traced, timed: a lane's mode is set by set_sink / set_timer (not looked up on
    each dispatch), and each mode's dispatches and replays go through its publisher: a
    traced dispatch is recorded, a timed one is timed, a plain one neither."""
    dev = _open(compiled, monkeypatch)
    ln = dev.lanes_[0]
    k = dev.load(code).kernel("saxpy_hidden")
    x, y = dev.buffer(N * 4), dev.buffer(N * 4)
    args = (y, x, np.float32(1.0), N)
    cb = dev.command_buffer(mode="aql")
    cb.dispatch(k, N, 64, (cb.binding(0), cb.binding(1), np.float32(1.0), N))
    cb.finalize()
    for _ in range(3):  # the kept instance exists: the compiled short way from here on
        dev.submit(cb, [y, x])
    assert (ln.aql.mode, ln.aql.watched) == ("plain", False)
    sink = packets.trace.MemorySink()
    previous = packets.trace.set_sink(sink)
    try:
        assert (ln.aql.mode, ln.aql.watched) == ("traced", True)
        dev.dispatch(k, N, 64, args)
        dev.submit(cb, [y, x])
    finally:
        packets.trace.set_sink(previous)
    recorded = [r for r in sink.records if isinstance(r, packets.trace.PacketRecord)]
    assert len(recorded) == 2  # the dispatch and the replay's one packet, recorded
    assert ln.aql.mode == "plain"
    count = len(sink.records)
    dev.dispatch(k, N, 64, args)
    dev.submit(cb, [y, x])
    assert len(sink.records) == count  # plain again: nothing recorded
    with dev.time_dispatches() as timer:
        assert (ln.aql.mode, ln.aql.timed) == ("timed", True)
        dev.dispatch(k, N, 64, args)
        dev.submit(cb, [y, x])
    assert (ln.aql.mode, ln.aql.timed, ln.aql.watched) == ("plain", False, False)
    assert len(timer.times) == 2  # one immediate, one replayed dispatch timed
    dev.synchronize()
    dev.close()


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_one_argument_tuple_on_two_lanes_and_shapes(code, monkeypatch, compiled):
    """The same argument tuple again with another lane or shape: its kept bytes serve only
    the launch they were packed for (kernel.last's plan must match the call's key)."""
    dev = _open(compiled, monkeypatch, lanes=2)
    for ln in dev.lanes_:  # nothing consumes: the ring keeps what was published
        ln.queue.processor.stop()
    k = dev.load(code).kernel("saxpy_hidden")
    x, y = dev.buffer(N * 4), dev.buffer(N * 4)
    args = (y, x, np.float32(1.0), N)
    calls = [(N, 64, 0), (N, 64, 1), (N, 64, 1), (N, 128, 1), (2 * N, 128, 1), (N, 64, 0)]
    got = []
    for grid, block, lane in calls:
        p = dev.dispatch(k, grid, block, args, lane)
        ln = dev.lanes_[lane]
        slot = (ln.queue.load_write_index() - 1) % ln.queue.size
        words = ln.queue.ring[slot * 64:(slot + 1) * 64].view(np.uint16)
        got.append((p.lane, p.value, int(words[2]), int(words[6])))  # block x, grid x
    assert got == [(0, 1, 64, N), (1, 1, 64, N), (1, 2, 64, N), (1, 3, 128, N),
                   (1, 4, 128, 2 * N), (0, 2, 64, N)]
    dev.close(timeout=0)
