"""Command buffers on the virtual provider: the packet block, patch sites, barrier bits, and
replay with one doorbell. The lane is held on a gate signal while the ring is inspected, so
nothing here needs the ISA executor."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import amdgpu
import packets
from amdgpu.errors import DeviceError, KernelArgumentError

pytestmark = pytest.mark.hsa_virtual

SOURCE = r"""
__kernel void saxpy(__global float *y, __global const float *x, float a, uint n) {
  size_t i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture(scope="module")
def code_object(tmp_path_factory):
    from compiler.clang import compile_opencl

    path = tmp_path_factory.mktemp("cb") / "saxpy.cl"
    path.write_text(SOURCE)
    return compile_opencl(path, "gfx1100", code_object_version=5)


@pytest.fixture
def dev():
    d = amdgpu.open("amdgpu:virtual")
    yield d
    d.close()  # a teardown error (queue or memory release) fails the test


def _gate(dev, lane):
    gate = dev.provider.signal_create(1)
    dev.lanes_[lane].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
    return gate


def _ring_packets(lane, first_id, n):
    ring = lane.queue.ring.reshape(-1, 64)
    return [packets.decode(ring[(first_id + i) % lane.queue.size].tobytes()) for i in range(n)]


def _kernarg_words(lane, address, count):
    off = address - lane.kernarg_address
    return struct.unpack_from(f"<{count}Q", lane.kernarg_memory, off)


def _record(dev, code_object, n=1024):
    saxpy = dev.load(code_object).kernel("saxpy")
    cb = dev.command_buffer()
    y, x = cb.binding(0), cb.binding(1)
    cb.dispatch(saxpy, n, 256, (y, x, np.float32(2.0), np.uint32(n)))
    cb.dispatch(saxpy, n, 256, (y, x, np.float32(3.0), np.uint32(n)))
    cb.barrier()
    cb.dispatch(saxpy, n, 256, (y, x.view(16), np.float32(4.0), np.uint32(n - 4)))
    cb.dispatch(saxpy, n, 128, (x, y, np.float32(5.0), np.uint32(n)))
    cb.finalize()
    return saxpy, cb


def test_packet_block_barrier_bits_and_tail(dev, code_object):
    saxpy, cb = _record(dev, code_object)
    (block,) = cb.packets
    decoded = packets.decode_many(block)
    assert [d["type"] for d in decoded] == [packets.PacketType.KERNEL_DISPATCH] * 4 + [
        packets.PacketType.BARRIER_AND
    ]
    # first packet: lane order; third: the recorded barrier; tail: carries the signal
    assert [d["barrier"] for d in decoded] == [True, False, True, False, True]
    assert all(d["kernel_object"] == saxpy.kernel_object for d in decoded[:4])
    assert decoded[3]["workgroup_size_x"] == 128


def test_replay_patches_bindings_with_one_doorbell(dev, code_object):
    saxpy, cb = _record(dev, code_object)
    ln = dev.lanes_[0]
    gate = _gate(dev, 0)
    bufs = [dev.buffer(4096) for _ in range(4)]
    results = []
    for y, x in ((bufs[0], bufs[1]), (bufs[2], bufs[3])):
        first = ln.queue.load_write_index()
        bells = ln.doorbells
        point = dev.submit(cb, [y, x])
        assert ln.doorbells == bells + 1  # one doorbell for the whole block
        got = _ring_packets(ln, first, 5)
        assert got[-1]["completion_signal"] == ln.signal
        assert all(d["completion_signal"] == 0 for d in got[:4])
        kargs = [d["kernarg_address"] for d in got[:4]]
        assert all(k % 16 == 0 for k in kargs) and len(set(kargs)) == 4
        assert _kernarg_words(ln, kargs[0], 2) == (y.address, x.address)
        assert _kernarg_words(ln, kargs[2], 2) == (y.address, x.address + 16)
        assert _kernarg_words(ln, kargs[3], 2) == (x.address, y.address)
        results.append((point, kargs))
    (p1, k1), (p2, k2) = results
    assert p2.value == p1.value + 1
    assert set(k1).isdisjoint(k2)  # per-submission kernarg blocks
    assert _kernarg_words(ln, k1[0], 2) == (bufs[0].address, bufs[1].address)  # untouched
    dev.provider.signal_store(gate, 0)


def test_one_command_buffer_on_two_lanes(dev, code_object):
    _, cb = _record(dev, code_object)
    gates = [_gate(dev, 0), _gate(dev, 1)]
    a, b = dev.buffer(4096), dev.buffer(4096)
    firsts = [ln.queue.load_write_index() for ln in dev.lanes_[:2]]
    dev.submit(cb, [a, b], lane=0)
    dev.submit(cb, [b, a], lane=1)
    for lane, first, (y, x) in zip(dev.lanes_[:2], firsts, ((a, b), (b, a)), strict=False):
        got = _ring_packets(lane, first, 5)
        assert got[-1]["completion_signal"] == lane.signal
        assert _kernarg_words(lane, got[0]["kernarg_address"], 2) == (y.address, x.address)
    for g in gates:
        dev.provider.signal_store(g, 0)


def test_replay_of_many_dispatches_is_one_block(dev, code_object):
    saxpy = dev.load(code_object).kernel("saxpy")
    cb = dev.command_buffer()
    for i in range(300):
        cb.dispatch(saxpy, 64, 64, (cb.binding(i % 2), cb.binding(1 - i % 2), 1.0, 64))
        cb.barrier()
    cb.finalize()
    ln = dev.lanes_[0]
    gate = _gate(dev, 0)
    sink = packets.MemorySink()
    old = packets.set_sink(sink)
    try:
        bells = ln.doorbells
        dev.submit(cb, [dev.buffer(256), dev.buffer(256)])
    finally:
        packets.set_sink(old)
    assert ln.doorbells == bells + 1
    pkts = [r for r in sink.records if isinstance(r, packets.trace.PacketRecord)]
    assert len(pkts) == 300  # the last dispatch has the barrier bit: no tail
    assert len({r.doorbell_ns for r in pkts}) == 1
    assert all(r.decode()["barrier"] for r in pkts)
    # the sink came after the load: the replay told it the kernel's name, once
    syms = [r for r in sink.records if isinstance(r, packets.trace.KernelSymbolRecord)]
    assert [(s.kernel_object, s.name) for s in syms] == [(saxpy.kernel_object, "saxpy")]
    dev.provider.signal_store(gate, 0)


def test_submit_errors(dev, code_object):
    saxpy, cb = _record(dev, code_object)
    with pytest.raises(KernelArgumentError, match="2 binding"):
        dev.submit(cb, [dev.buffer(64)])
    fresh = dev.command_buffer()
    fresh.dispatch(saxpy, 64, 64, (fresh.binding(0), fresh.binding(0), 1.0, 64))
    with pytest.raises(DeviceError, match="finalize"):
        dev.submit(fresh, [dev.buffer(64)])
    with pytest.raises(DeviceError, match="finalized"):
        cb.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(0), 1.0, 64))
    with pytest.raises(KernelArgumentError, match="argument 2"):
        fresh.dispatch(saxpy, 64, 64, (fresh.binding(0), fresh.binding(1), fresh.binding(2), 1))


def test_host_fill_and_copy_in_a_command_buffer(dev):
    a = dev.buffer(np.arange(16, dtype=np.float32))
    b = dev.buffer(64)
    cb = dev.command_buffer()
    cb.copy(cb.binding(1), cb.binding(0), 64)
    cb.fill(cb.binding(0).view(32), np.float32(9.0), 32)
    cb.finalize()
    point = dev.submit(cb, [a, b])
    point.wait(5.0)
    np.testing.assert_array_equal(b.to_numpy(np.float32), np.arange(16))
    np.testing.assert_array_equal(a.to_numpy(np.float32)[8:], np.full(8, 9.0))
    np.testing.assert_array_equal(a.to_numpy(np.float32)[:8], np.arange(8))


def test_fill_and_copy_record_as_library_blit_kernels(dev, monkeypatch):
    """Where the agent runs kernels, fill/copy are dispatches of the compiler library's
    fill/copy kernels inside the packet block (checked here without running them)."""
    from amdgpu.hsa_backend.device import HsaDevice

    monkeypatch.setattr(HsaDevice, "runs_kernels", property(lambda self: True))
    blits = dev.blit_kernels()
    assert blits is not None and set(blits) == {"fill", "copy"}
    cb = dev.command_buffer()
    cb.fill(cb.binding(0), np.float32(1.5), 4096)
    cb.copy(cb.binding(1), cb.binding(0).view(64), 1024)
    cb.fill(cb.binding(1), np.uint32(0x7F800001), 64)  # a signalling NaN pattern: kept on the host
    cb.finalize()
    assert cb.segments == 2  # one packet block, then the host fill
    decoded = packets.decode_many(cb.packets[0])
    assert [d["kernel_object"] for d in decoded[:2]] == [
        blits["fill"].kernel_object,
        blits["copy"].kernel_object,
    ]
    assert all(d["barrier"] for d in decoded)
    ln = dev.lanes_[0]
    gate = _gate(dev, 0)
    a, b = dev.buffer(4096), dev.buffer(4096)
    first = ln.queue.load_write_index()
    seg = cb._segments[0]
    cb._segments = [seg]  # submit the kernel block only (the host fill would wait)
    dev.submit(cb, [a, b])
    got = _ring_packets(ln, first, len(decoded))
    fill_args = struct.unpack_from(
        "<QfI", ln.kernarg_memory, got[0]["kernarg_address"] - ln.kernarg_address
    )
    assert fill_args == (a.address, 1.5, 1024)
    copy_args = struct.unpack_from(
        "<QQI", ln.kernarg_memory, got[1]["kernarg_address"] - ln.kernarg_address
    )
    assert copy_args == (b.address, a.address + 64, 256)
    dev.provider.signal_store(gate, 0)


def test_kernels_and_command_buffers_belong_to_their_device(code_object):
    spec = "amdgpu:virtual:gfx1100,gfx1100"
    with amdgpu.open(spec) as d0, amdgpu.open(spec + ":1") as d1:
        assert isinstance(d0, amdgpu.Device)
        k0 = d0.load(code_object).kernel("saxpy")
        buf = d1.buffer(256)
        with pytest.raises(KernelArgumentError, match="this device"):
            d1.dispatch(k0, 64, 64, (buf, buf, 1.0, 64))
        cb = d1.command_buffer()
        with pytest.raises(KernelArgumentError, match="this device"):
            cb.dispatch(k0, 64, 64, (buf, buf, 1.0, 64))
        cb0 = d0.command_buffer().finalize()
        with pytest.raises(DeviceError, match="another device"):
            d1.submit(cb0)


def test_identical_dispatches_share_one_kernarg_block(dev, code_object):
    saxpy = dev.load(code_object).kernel("saxpy")
    cb = dev.command_buffer()
    for _ in range(10):
        cb.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(1), 2.0, 64))
        cb.barrier()
    cb.dispatch(saxpy, 64, 64, (cb.binding(1), cb.binding(0), 2.0, 64))  # a different one
    cb.finalize()
    seg = cb._segments[0]
    assert seg.template.size == 2 * saxpy.layout.size
    assert len(set(seg.kernarg_offsets[:10].tolist())) == 1
    assert seg.kernarg_offsets[10] != seg.kernarg_offsets[0]


@pytest.mark.parametrize("n", [3, 8, 9, 40])
def test_replay_patch_paths_small_and_vectorized(dev, code_object, n):
    """Segments up to SMALL_SITES sites / SMALL_ROWS rows patch through memoryviews, larger
    ones with numpy: both give every dispatch its own bindings, kernarg block and address,
    and rebinding re-patches only when the addresses change."""
    from amdgpu.hsa_backend import command_segments as cbm

    saxpy = dev.load(code_object).kernel("saxpy")
    cb = dev.command_buffer()
    y, x = cb.binding(0), cb.binding(1)
    for i in range(n):  # distinct constants: one kernarg block (two sites) per dispatch
        cb.dispatch(saxpy, 64, 64, (y, x.view(4 * i), np.float32(i), np.uint32(64)))
    cb.finalize()
    assert (2 * n <= cbm.SMALL_SITES) == (n <= 8)
    ln = dev.lanes_[0]
    gate = _gate(dev, 0)
    bufs = [dev.buffer(4096) for _ in range(3)]
    for yb, xb in ((bufs[0], bufs[1]), (bufs[2], bufs[0]), (bufs[2], bufs[0])):
        first = ln.queue.load_write_index()
        dev.submit(cb, [yb, xb])
        got = _ring_packets(ln, first, n + 1)
        assert got[-1]["completion_signal"] == ln.signal
        for i, d in enumerate(got[:n]):
            a, b = _kernarg_words(ln, d["kernarg_address"], 2)
            assert (a, b) == (yb.address, xb.address + 4 * i)
            (const,) = struct.unpack_from("<f", lane_bytes(ln, d["kernarg_address"] + 16, 4))
            assert const == float(i)
    dev.provider.signal_store(gate, 0)


def lane_bytes(lane, address, n):
    off = address - lane.kernarg_address
    return lane.kernarg_memory[off:off + n].tobytes()


@pytest.mark.parametrize("barrier_value", [True, False])
def test_replay_after_a_cross_lane_wait_is_one_block(code_object, barrier_value):
    """submit(..., wait=[point on another lane]): the wait packets lead the same block
    (one doorbell), every header valid once published, the dispatches after them."""
    d = amdgpu.open("amdgpu:virtual", use_barrier_value=barrier_value)
    try:
        _, cb = _record(d, code_object)
        gates = [_gate(d, 0), _gate(d, 1)]
        other = d.barrier(lane=1)  # a point on lane 1, held by its gate
        ln = d.lanes_[0]
        first, bells = ln.queue.load_write_index(), ln.doorbells
        a, b = d.buffer(4096), d.buffer(4096)
        d.submit(cb, [a, b], lane=0, wait=[other])
        assert ln.doorbells == bells + 1
        n = ln.queue.load_write_index() - first
        got = _ring_packets(ln, first, n)
        kinds = [g["type"] for g in got]
        wait_kind = (packets.PacketType.VENDOR_SPECIFIC if barrier_value
                     else packets.PacketType.BARRIER_AND)
        assert kinds == [wait_kind] + [packets.PacketType.KERNEL_DISPATCH] * 4 + [
            packets.PacketType.BARRIER_AND]
        assert got[-1]["completion_signal"] == ln.signal
        assert _kernarg_words(ln, got[1]["kernarg_address"], 2) == (a.address, b.address)
        for g in gates:
            d.provider.signal_store(g, 0)
    finally:
        d.close(timeout=0)


def _published(ln, first, cb_rows):
    """(kernarg addresses of the dispatch rows, completion signal of the last packet) of
    the block published at packet id `first`."""
    got = _ring_packets(ln, first, cb_rows + 1)
    return [d["kernarg_address"] for d in got[:cb_rows]], got[-1]["completion_signal"]


def test_a_table_bound_again_replays_its_kept_instance(dev, code_object):
    """A binding table's second submission keeps an instance (its own kernarg block in the
    lane's allocation and its own packet block); later submissions of that table publish
    it again (same kernarg addresses, no kernarg copy), each other table keeps its own, and
    every published block holds the right binding addresses whatever came between."""
    saxpy, cb = _record(dev, code_object)
    ln = dev.lanes_[0]
    gate = _gate(dev, 0)  # nothing completes: instances are shared while in flight
    bufs = [dev.buffer(4096) for _ in range(4)]
    tables = [(bufs[0], bufs[1]), (bufs[2], bufs[3])]
    seen = {}
    for rnd in range(4):
        for t, (y, x) in enumerate(tables):
            first = ln.queue.load_write_index()
            head = ln.aql.kernarg_head
            dev.submit(cb, [y, x])
            kargs, signal = _published(ln, first, 4)
            assert signal == ln.signal
            assert _kernarg_words(ln, kargs[0], 2) == (y.address, x.address)
            assert _kernarg_words(ln, kargs[2], 2) == (y.address, x.address + 16)
            assert _kernarg_words(ln, kargs[3], 2) == (x.address, y.address)
            if rnd == 0:  # first sight: the ring path, a fresh block from the kernarg ring
                assert ln.aql.kernarg_head != head
            else:
                assert ln.aql.kernarg_head == head  # nothing taken from the ring
                if rnd >= 2:
                    assert kargs == seen[t]  # the kept instance, published again
                seen[t] = kargs
    assert set(seen[0]).isdisjoint(seen[1])
    (block,) = cb.packets  # the block last published: the second table's instance
    assert [d["kernarg_address"] for d in packets.decode_many(block)[:4]] == seen[1]
    dev.provider.signal_store(gate, 0)
    dev.synchronize()


def test_a_kept_instance_is_repatched_only_once_its_lane_completed_it(
        dev, code_object, monkeypatch):
    """With every instance slot taken, a new table re-patches the least recently used
    instance of the lane only once the lane has completed its last submission; until
    then it takes the ring path, and the instance in flight keeps its bytes."""
    from amdgpu.hsa_backend import command_replay as hcb

    monkeypatch.setattr(hcb, "MAX_INSTANCES", 1)
    saxpy, cb = _record(dev, code_object)
    ln = dev.lanes_[0]
    a, b, c, d = (dev.buffer(4096) for _ in range(4))
    gate = _gate(dev, 0)
    for _ in range(2):
        dev.submit(cb, [a, b])  # the second keeps an instance of (a, b)
    first = ln.queue.load_write_index()
    dev.submit(cb, [a, b])
    kept, _ = _published(ln, first, 4)
    for _ in range(2):  # (c, d) seen twice, but the one slot is in flight: ring path
        first = ln.queue.load_write_index()
        dev.submit(cb, [c, d])
        kargs, _ = _published(ln, first, 4)
        assert set(kargs).isdisjoint(kept)
        assert _kernarg_words(ln, kargs[0], 2) == (c.address, d.address)
    assert _kernarg_words(ln, kept[0], 2) == (a.address, b.address)  # untouched in flight
    dev.provider.signal_store(gate, 0)
    dev.synchronize()
    first = ln.queue.load_write_index()
    dev.submit(cb, [c, d])  # the lane completed (a, b)'s submissions: re-patched for (c, d)
    kargs, _ = _published(ln, first, 4)
    assert kargs == kept
    assert _kernarg_words(ln, kargs[0], 2) == (c.address, d.address)
    assert _kernarg_words(ln, kargs[3], 2) == (d.address, c.address)
    dev.synchronize()


def test_the_least_recently_used_idle_instance_is_repatched(dev, code_object, monkeypatch):
    """With every instance slot taken, a new table (seen twice) re-patches the instance of
    the lane used longest ago (the lowest timeline value), not the one used last; the
    other keeps its table's bytes. On the compiled Submit and the Python method alike."""
    from amdgpu.hsa_backend import command_replay as hcb

    monkeypatch.setattr(hcb, "MAX_INSTANCES", 2)
    saxpy, cb = _record(dev, code_object)
    ln = dev.lanes_[0]
    a, b, c, d, e, f = (dev.buffer(4096) for _ in range(6))
    kept = {}
    for t in ([a, b], [c, d], [a, b], [c, d]):  # each kept from its second submission
        first = ln.queue.load_write_index()
        dev.submit(cb, t)
        kept[t[0].address] = _published(ln, first, 4)[0]
    dev.submit(cb, [a, b])  # (a, b) used last: (c, d) is the least recently used
    dev.synchronize()
    dev.submit(cb, [e, f])  # seen once: the ring path
    first = ln.queue.load_write_index()
    dev.submit(cb, [e, f])
    kargs, _ = _published(ln, first, 4)
    assert kargs == kept[c.address]  # (c, d)'s kept block, re-patched
    assert _kernarg_words(ln, kargs[0], 2) == (e.address, f.address)
    assert _kernarg_words(ln, kept[a.address][0], 2) == (a.address, b.address)
    dev.synchronize()


def test_a_dropped_command_buffer_gives_its_kept_blocks_back(dev, code_object):
    """Kept kernarg blocks return to the lane when their command buffer is dropped, and
    are handed out again only once the lane has completed what read them."""
    import gc

    ln = dev.lanes_[0]
    free_before = [list(r) for r in ln.kept._free]
    saxpy, cb = _record(dev, code_object)
    a, b = dev.buffer(4096), dev.buffer(4096)
    gate = _gate(dev, 0)
    for _ in range(2):
        point = dev.submit(cb, [a, b])
    assert ln.kept._free != free_before  # one block kept
    del cb
    gc.collect()
    assert ln.kept._pending and ln.kept._pending[0][2] == point.value
    assert ln.kept.take(16) is not None  # from the rest: the pending block is in flight
    assert ln.kept._pending
    dev.provider.signal_store(gate, 0)
    dev.synchronize()
    ln.kept.take(16)  # the lane passed the value: the block went back first
    assert not ln.kept._pending


def test_replays_from_threads_with_their_own_tables(code_object):
    """Several threads replaying one command buffer, each with its own buffers, on shared
    lanes: every run computes its own result (kept instances and the ring path mixed).
    The buffers are made and read on this thread (host reads and writes share one staging
    buffer), the threads only submit and wait."""
    import threading

    dev = amdgpu.open("amdgpu:virtual", lanes=2)
    try:
        assert dev.runs_kernels  # the virtual gfx1100 agent has the gfx11 ISA executor
        saxpy = dev.load(code_object).kernel("saxpy")
        n = 256
        cb = dev.command_buffer()
        y, x = cb.binding(0), cb.binding(1)
        cb.dispatch(saxpy, n, 64, (y, x, np.float32(2.0), np.uint32(n)))
        cb.finalize()
        threads_n, reps = 4, 6
        xs = [np.full(n, t + 1, np.float32) for t in range(threads_n)]
        ys = [[np.full(n, rep, np.float32) for rep in range(reps)] for _ in range(threads_n)]
        bufs = [[(dev.buffer(ys[t][rep]), dev.buffer(xs[t])) for rep in range(reps)]
                for t in range(threads_n)]
        errors = []

        def work(t):
            try:
                for yb, xb in bufs[t]:  # each table three times: kept from the second
                    for _ in range(3):
                        dev.submit(cb, [yb, xb], lane=t % 2).wait()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors[0]
        for t in range(threads_n):
            for rep, (yb, _xb) in enumerate(bufs[t]):
                got = yb.to_numpy(np.float32)
                assert np.array_equal(got, ys[t][rep] + 3 * 2 * xs[t]), (t, rep, got[:4])
        assert all(seg.instances for seg in cb._segments)  # the kept path ran too
    finally:
        dev.close()
