"""End to end on amdgpu:virtual: kernels run by the gfx11 ISA executor.

Also the point of the virtual system: a wrong kernarg, a wrong grid or a missing
cross-lane wait gives a wrong result or a queue error, deterministically."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_checks import missing_barrier_case

import amdgpu
import packets
from amdgpu.errors import QueueError

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx11]


def _executor_present() -> bool:
    from hsa.virtual.executor import executor_for

    return executor_for("gfx11") is not None


@pytest.fixture(scope="module")
def kernels_code():
    if not _executor_present():
        pytest.skip("gfx11 executor not present")
    import compiler

    return {
        name: compiler.compile(name, targets=["gfx1100"])
        for name in ("fill", "copy", "saxpy_hidden")
    }


@pytest.fixture
def dev():
    d = amdgpu.open("amdgpu:virtual")
    yield d
    d.close()  # a teardown error (queue or memory release) fails the test


def _k(dev, code, name):
    return dev.load(code[name]).kernel(name)


def test_saxpy_fill_copy_immediate(dev, kernels_code):
    n = 1000
    saxpy = _k(dev, kernels_code, "saxpy_hidden")
    fill = _k(dev, kernels_code, "fill")
    copy = _k(dev, kernels_code, "copy")
    x = dev.buffer(np.arange(n, dtype=np.float32))
    y = dev.buffer(np.ones(n, dtype=np.float32))
    dev.dispatch(saxpy, 256, 64, (y, x, np.float32(2.0), np.uint32(n)))  # grid-stride
    np.testing.assert_allclose(y.to_numpy(np.float32), 2 * np.arange(n) + 1)
    z = dev.buffer(n * 4)
    dev.dispatch(fill, n, 256, (z, np.float32(-3.0), n))
    assert (z.to_numpy(np.float32) == -3.0).all()
    w = dev.buffer(n * 4)
    dev.dispatch(copy, n, 128, (w, y, n)).wait(30)
    np.testing.assert_array_equal(w.to_numpy(np.float32), y.to_numpy(np.float32))


def test_command_buffer_replay_with_new_bindings(dev, kernels_code, monkeypatch):
    from amdgpu.hsa_backend.command_buffer import HsaCommandBuffer
    from amdgpu.hsa_backend.kernargs import KernargLayout

    n = 512
    saxpy = _k(dev, kernels_code, "saxpy_hidden")
    cb = dev.command_buffer()
    y, x = cb.binding(0), cb.binding(1)
    cb.dispatch(saxpy, 128, 64, (y, x, np.float32(2.0), np.uint32(n)))
    cb.barrier()
    cb.dispatch(saxpy, 128, 64, (y, x, np.float32(1.0), np.uint32(n)))  # y += 3x in total
    cb.finalize()
    blocks = [id(seg.block) for seg in cb._segments]  # the finalized packet blocks

    # replay must not re-record: no packet block is rebuilt, no kernarg is encoded again
    def re_record(*_a, **_k):
        raise AssertionError("submit re-recorded the command buffer")

    monkeypatch.setattr(HsaCommandBuffer, "_build", re_record)
    monkeypatch.setattr(KernargLayout, "values", re_record)
    monkeypatch.setattr(KernargLayout, "pack", re_record)
    pairs = []
    for seed in range(3):
        xs = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        pairs.append((dev.buffer(np.zeros(n, np.float32)), dev.buffer(xs), xs))
    for i, (yb, xb, _) in enumerate(pairs):
        dev.submit(cb, [yb, xb], lane=i % dev.lanes)
    dev.synchronize(60)
    for yb, _, xs in pairs:
        np.testing.assert_allclose(yb.to_numpy(np.float32), 3 * xs, rtol=1e-6)
    assert [id(seg.block) for seg in cb._segments] == blocks and cb.dispatches == 2


def test_cross_lane_wait_orders_producer_and_consumer(dev, kernels_code):
    """Lane 0 is held on a gate before a fill; lane 1 copies the filled buffer. With the
    wait the copy sees the fill; without it, the copy runs first and sees zeros."""
    n = 256
    fill = _k(dev, kernels_code, "fill")
    copy = _k(dev, kernels_code, "copy")
    for with_wait in (True, False):
        src, dst = dev.buffer(n * 4), dev.buffer(n * 4)
        gate = dev.provider.signal_create(1)
        dev.lanes_[0].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
        produced = dev.dispatch(fill, n, 64, (src, np.float32(5.0), n), lane=0)
        consumed = dev.dispatch(
            copy, n, 64, (dst, src, n), lane=1, wait=[produced] if with_wait else ()
        )
        if not with_wait:
            consumed.wait(30)  # runs while lane 0 is still held
        dev.provider.signal_store(gate, 0)
        dev.synchronize(30)
        got = dst.to_numpy(np.float32)
        if with_wait:
            assert (got == 5.0).all()
        else:
            assert (got == 0.0).all()  # the missing wait shows as a wrong result


def test_the_virtual_gpu_runs_what_the_aql_packet_in_the_ring_says(dev, kernels_code):
    """The dispatch is held behind a gate, its packet already published; the test then
    rewrites grid_size_x in the ring itself. The result follows the ring's bytes: the
    virtual GPU reads the AQL packet from the queue, it has no side channel."""
    n = 1024
    fill = _k(dev, kernels_code, "fill")
    ln = dev.lanes_[0]
    gate = dev.provider.signal_create(1)
    ln.publish(packets.barrier_and(dep_signals=[gate], barrier=True))
    a = dev.buffer(n * 4)
    first = ln.queue.load_write_index()
    point = dev.dispatch(fill, n, 64, (a, np.float32(1.0), n), lane=0)
    slot = ln.queue.ring.reshape(-1, 64)[first % ln.queue.size]
    pkt = packets.decode(slot.tobytes())
    assert pkt["type"] == packets.PacketType.KERNEL_DISPATCH and pkt["grid_size_x"] == n
    offset = packets.KERNEL_DISPATCH.fields["grid_size_x"][1]
    slot[offset : offset + 4].view(np.uint32)[0] = n // 4  # still whole workgroups of 64
    dev.provider.signal_store(gate, 0)
    point.wait(30)
    got = a.to_numpy(np.float32)
    assert (got[: n // 4] == 1).all() and (got[n // 4 :] == 0).all()


def test_wrong_count_and_wrong_grid_give_wrong_results(dev, kernels_code):
    n = 1024
    fill = _k(dev, kernels_code, "fill")
    a = dev.buffer(n * 4)
    dev.dispatch(fill, n, 256, (a, np.float32(1.0), n // 2))  # wrong kernarg: n/2
    got = a.to_numpy(np.float32)
    assert (got[: n // 2] == 1).all() and (got[n // 2 :] == 0).all()
    b = dev.buffer(n * 4)
    dev.dispatch(fill, n // 4, 64, (b, np.float32(1.0), n))  # grid too small, no stride loop
    got = b.to_numpy(np.float32)
    assert (got[: n // 4] == 1).all() and (got[n // 4 :] == 0).all()


def test_out_of_bounds_write_is_a_queue_error_other_lanes_keep_working(dev, kernels_code):
    fill = _k(dev, kernels_code, "fill")
    small = dev.buffer(64)
    dev.dispatch(fill, 1 << 16, 256, (small, np.float32(1.0), 1 << 16), lane=0)
    with pytest.raises(QueueError) as e:
        dev.synchronize(30)
    assert e.value.status != 0
    ok = dev.buffer(256)
    dev.dispatch(fill, 64, 64, (ok, np.float32(2.0), 64), lane=1).wait(30)
    assert dev.lanes_[1].completed() >= 1
    with pytest.raises(QueueError):
        dev.dispatch(fill, 64, 64, (ok, np.float32(2.0), 64), lane=0)


def test_second_agent_of_a_two_gpu_system(kernels_code):
    spec = "amdgpu:virtual:gfx1100,gfx1100"
    with amdgpu.open(spec) as d0, amdgpu.open(spec + ":1") as d1:
        fill = _k(d1, kernels_code, "fill")
        buf = d1.buffer(4096)
        d1.dispatch(fill, 1024, 256, (buf, np.float32(4.0), 1024))
        out = d0.buffer(4096)
        d0.enable_peer_access(d1)
        d0.copy(out, buf)
        assert (out.to_numpy(np.float32) == 4.0).all()


def test_program_runner_immediate_and_replay(dev):
    if not _executor_present():
        pytest.skip("gfx11 executor not present")
    import compiler
    from amdgpu.program import ProgramRunner
    from compiler import library

    runner = ProgramRunner(dev, compiler.compile("chain_3", targets=["gfx1100"]))
    inputs = library.example_inputs("chain_3")
    want = library.reference("chain_3", *inputs)
    for replay in (False, True):
        (got,) = runner.run(inputs, replay=replay)
        np.testing.assert_allclose(got, want[0], rtol=1e-6)


def test_fill_and_copy_as_blit_kernels_in_a_command_buffer(dev, kernels_code):
    n = 512
    saxpy = _k(dev, kernels_code, "saxpy_hidden")
    cb = dev.command_buffer()
    x, y, out = cb.binding(0), cb.binding(1), cb.binding(2)
    cb.fill(y, np.float32(1.0), n * 4)
    cb.dispatch(saxpy, 128, 64, (y, x, np.float32(2.0), np.uint32(n)))
    cb.copy(out, y, n * 4)
    cb.finalize()
    assert cb.segments == 1  # all three on the queue: no host operation
    for seed in range(2):
        xs = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        bufs = [dev.buffer(xs), dev.buffer(n * 4), dev.buffer(n * 4)]
        dev.submit(cb, bufs).wait(30)
        np.testing.assert_allclose(bufs[2].to_numpy(np.float32), 2 * xs + 1, rtol=1e-6)
    a = dev.buffer(n * 4)
    p = dev.fill(a, np.int32(-7))  # immediate: the fill kernel on lane 0
    b = dev.buffer(n * 4)
    dev.copy(b, a, wait=[p]).wait(30)
    assert (b.to_numpy(np.int32) == -7).all()


def test_missing_barrier_in_a_command_buffer_gives_a_wrong_result(kernels_code, monkeypatch):
    """A virtual system with overlap="reverse" runs dispatches without the barrier bit
    last-first (what hardware may do): a consumer recorded without `barrier()` reads stale
    data. (A fresh two-GPU system, so that the setting applies to it.)"""
    monkeypatch.setenv("AMDGPU_VIRTUAL_OVERLAP", "reverse")
    with amdgpu.open("amdgpu:virtual:gfx1100,gfx1100") as dev:
        assert dev.provider.overlap == "reverse"
        missing_barrier_case(dev, kernels_code)


def test_repeated_identical_dispatches_in_a_command_buffer(dev, kernels_code):
    n = 256
    saxpy = _k(dev, kernels_code, "saxpy_hidden")
    cb = dev.command_buffer()
    for _ in range(3):
        cb.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(1), np.float32(2.0), n))
        cb.barrier()
    cb.finalize()
    xs = np.arange(n, dtype=np.float32)
    y, x = dev.buffer(np.ones(n, np.float32)), dev.buffer(xs)
    dev.submit(cb, [y, x]).wait(30)
    np.testing.assert_allclose(y.to_numpy(np.float32), 1 + 3 * 2 * xs)


def test_replay_larger_than_the_ring_runs_in_chunks(kernels_code):
    """150 dependent dispatches through a 64-slot queue: the block goes out in chunks, the
    header words apart (packets.Ring.publish_many(..., headers=)), and every one runs."""
    d = amdgpu.open("amdgpu:virtual", queue_size=64, lanes=1)
    try:
        saxpy = _k(d, kernels_code, "saxpy_hidden")
        n = 64
        x = d.buffer(np.ones(n, np.float32))
        y = d.buffer(np.zeros(n, np.float32))
        cb = d.command_buffer()
        for _ in range(150):
            cb.dispatch(saxpy, n, 64, (cb.binding(0), cb.binding(1), np.float32(1.0), n))
            cb.barrier()
        cb.finalize()
        d.submit(cb, [y, x])
        d.submit(cb, [y, x]).wait(60)
        np.testing.assert_array_equal(y.to_numpy(np.float32), np.full(n, 300.0, np.float32))
    finally:
        d.close()
