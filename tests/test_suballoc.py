"""The small-buffer sub-allocator (amdgpu/suballoc.py) and pinned arrays (dev.pin), issue 20:
slabs instead of one HSA allocation per buffer, reuse only after the GPU is done, and
zero-copy async transfers from and into the caller's own numpy arrays."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import amdgpu
import packets
from amdgpu.errors import DeviceError, KernelArgumentError
from amdgpu.suballoc import MAX_BLOCK, MIN_BLOCK, SlabAllocator, size_class

pytestmark = pytest.mark.hsa_virtual
WAIT_S = 30.0


class FakeLane:
    def __init__(self) -> None:
        self.submitted = 0
        self.done = 0

    def completed(self) -> int:
        return self.done


def test_size_classes():
    assert [size_class(n) for n in (1, 256, 257, 1000, 4096, 4097)] == [
        256, 256, 512, 1024, 4096, 8192]


def test_blocks_come_back_only_after_the_lanes_pass_their_release():
    calls = []
    lane = FakeLane()
    alloc = SlabAllocator(lambda n: calls.append(n) or 0x10_0000 * len(calls), lambda a: None,
                          lambda: [lane], slab_bytes=64 * MIN_BLOCK, max_block=MIN_BLOCK)
    first = alloc.take(100)
    lane.submitted = 5  # work that may use `first` is in flight
    alloc.release(first)
    second = alloc.take(100)
    assert second.address != first.address
    assert alloc.stats()["blocks_waiting_for_gpu"] == 1
    lane.done = 4
    assert alloc.take(100).address != first.address
    lane.done = 5
    assert alloc.take(100).address == first.address  # now, and only now
    assert len(calls) == 1  # one slab for all of it


def test_empty_slabs_go_back_to_the_pool_once_the_lanes_pass_their_blocks():
    allocated, freed = [], []
    lane = FakeLane()
    alloc = SlabAllocator(lambda n: allocated.append(0x10_0000 * (len(allocated) + 1))
                          or allocated[-1], freed.append, lambda: [lane],
                          slab_bytes=4 * MIN_BLOCK, max_block=MIN_BLOCK)
    blocks = [alloc.take(MIN_BLOCK) for _ in range(12)]  # three full slabs
    assert len(allocated) == 3
    lane.submitted = 7  # work that may use them is in flight
    for b in blocks:
        alloc.release(b)
    alloc.trim()
    assert freed == [] and alloc.stats()["slabs"] == 3  # the GPU may still use every block
    lane.done = 6
    alloc.trim()
    assert freed == []
    lane.done = 7
    alloc.trim()  # all blocks free and their points reached: keep one spare, free two
    assert len(freed) == 2 and set(freed) < set(allocated)
    assert alloc.stats() == {"slabs": 1, "slab_bytes": 4 * MIN_BLOCK, "blocks_in_use": 0,
                             "blocks_waiting_for_gpu": 0, "slabs_returned": 2}
    (spare,) = set(allocated) - set(freed)
    again = [alloc.take(MIN_BLOCK) for _ in range(4)]  # the spare's blocks, no HSA call
    assert {b.base for b in again} == {spare} and len(allocated) == 3
    assert alloc.take(MIN_BLOCK).base not in freed and len(allocated) == 4
    alloc.close()
    assert sorted(freed[2:]) == sorted({spare, allocated[3]})


def test_one_spare_slab_keeps_churn_at_a_slab_edge_off_the_pool():
    calls = []
    lane = FakeLane()
    alloc = SlabAllocator(lambda n: calls.append(n) or 0x10_0000 * len(calls),
                          lambda a: calls.append(-a), lambda: [lane],
                          slab_bytes=4 * MIN_BLOCK, max_block=MIN_BLOCK)
    full = [alloc.take(MIN_BLOCK) for _ in range(4)]
    for _ in range(100):  # the fifth buffer opens a second slab, empty again when freed
        alloc.release(alloc.take(MIN_BLOCK))
    assert len(calls) == 2 and alloc.stats()["slabs"] == 2
    for b in full:
        alloc.release(b)
    assert len(calls) == 3 and calls[2] < 0  # now one of the two empty slabs goes back
    none_kept = SlabAllocator(lambda n: calls.append(n) or 0x90_0000, lambda a: calls.append(-a),
                              lambda: [lane], slab_bytes=4 * MIN_BLOCK, max_block=MIN_BLOCK,
                              spare_slabs=0)
    none_kept.release(none_kept.take(1))
    assert calls[3:] == [4 * MIN_BLOCK, -0x90_0000] and none_kept.stats()["slabs"] == 0


def _counting(provider, names):
    counts = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(provider, name)

        def counted(*args, _real=real, _name=name):
            counts[_name] += 1
            return _real(*args)

        setattr(provider, name, counted)
    return counts


def test_ten_thousand_small_buffers_make_a_handful_of_hsa_calls():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        counts = _counting(dev.provider, ("memory_pool_allocate", "memory_pool_free",
                                          "agents_allow_access", "memory_copy"))
        try:
            bufs = [dev.buffer(16 + (i % 64) * 64) for i in range(10_000)]  # 16 B .. 4 KiB
            assert len({b.address for b in bufs}) == 10_000
            ends = sorted((b.address, b.address + b.nbytes) for b in bufs)
            pairs = zip(ends, ends[1:], strict=False)
            assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairs)
            total = sum(counts.values())
            assert total == counts["memory_pool_allocate"] <= 40, counts
            for b in bufs:
                b.free()
            dev.synchronize(WAIT_S)
            # empty slabs went back to the pool, one spare per size class stayed
            returned = dev.allocator_stats()["slabs_returned"]
            assert counts["memory_pool_free"] == returned > 0
            assert dev.allocator_stats()["slabs"] == 5  # classes 256 B .. 4 KiB
            again = [dev.buffer(16 + (i % 64) * 64) for i in range(10_000)]
            # the spares' blocks reused, only the returned slabs allocated again
            assert counts["memory_pool_allocate"] == total + returned
            assert dev.allocator_stats()["blocks_in_use"] == 10_000
            del again
        finally:
            for name in counts:
                delattr(dev.provider, name)


def test_a_freed_block_is_not_reused_while_the_gpu_may_still_use_it():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        ln = dev._timeline(0)  # the QueueLane behind dev.lane(0)
        gate = dev.provider.signal_create(1)
        with ln.aql:  # one submission: lane 0 stays busy until `gate` reaches 0
            ln.publish_block(packets.barrier_and_batch(
                dep_signals=(gate,), completion_signal=ln.signal, barrier=True, count=1,
            ).view(packets.PACKET))
        buf = dev.buffer(256)
        address = buf.address
        buf.free()
        assert dev.buffer(256).address != address
        assert dev.allocator_stats()["blocks_waiting_for_gpu"] == 1
        dev.provider.signal_store(gate, 0)
        dev.synchronize(WAIT_S)
        assert dev.buffer(256).address == address
        dev.provider.signal_destroy(gate)


def test_dropped_small_buffers_return_to_their_slab():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        buf = dev.buffer(np.arange(32, dtype=np.int32))
        address = buf.address
        del buf
        gc.collect()
        assert dev.buffer(128).address == address  # reaped at this allocation


def test_small_buffers_hold_data_and_run_kernels():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        a = dev.buffer(np.arange(64, dtype=np.float32))
        b = dev.buffer(256)
        dev.copy(b, a).wait(WAIT_S)  # the library copy kernel
        np.testing.assert_array_equal(b.to_numpy(np.float32), np.arange(64))
        assert a.handle.base == b.handle.base  # one slab


def test_suballocation_is_off_by_default_on_the_virtual_system():
    """Its memory map faults on an overrun of any one buffer; a slab would hide it."""
    with amdgpu.open("amdgpu:virtual") as dev:
        assert dev.suballocate == 0
        counts = _counting(dev.provider, ("memory_pool_allocate",))
        for _ in range(10):
            dev.buffer(64)
        assert counts["memory_pool_allocate"] == 10
        del dev.provider.memory_pool_allocate


# --- pinned arrays ----------------------------------------------------------------------------
def test_pinned_arrays_are_copied_in_place_without_staging():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        data = np.arange(1 << 15, dtype=np.float32)
        out = np.zeros_like(data)
        pin_in, pin_out = dev.pin(data), dev.pin(out)
        buf = dev.buffer(data.nbytes)
        staged = []
        real = dev._staging_buffer
        dev._staging_buffer = lambda n: staged.append(n) or real(n)
        point = buf.write_async(data, zero_copy=True, lane=0)
        back = buf.read_async(out, zero_copy=True, lane=1, wait=[point])
        assert back.result(WAIT_S) is out
        np.testing.assert_array_equal(out, data)
        half = buf.read_async(out[: 1 << 14], lane=0).result(WAIT_S)  # a pinned slice
        np.testing.assert_array_equal(half, data[: 1 << 14])
        assert staged == []
        del dev._staging_buffer
        pin_in.unpin()
        pin_out.unpin()
        with pytest.raises(DeviceError, match="is not pinned for amdgpu:virtual.*dev.pin"):
            buf.write_async(data, zero_copy=True)


def test_pinned_array_in_a_kernel_and_a_command_buffer_copy():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        host = np.zeros(1024, dtype=np.uint32)
        pinned = dev.pin(host)
        src = dev.buffer(np.arange(1024, dtype=np.uint32))
        cb = dev.command_buffer()
        cb.copy(pinned, src, host.nbytes)  # device -> host memory, recorded once
        cb.finalize()
        dev.submit(cb).wait(WAIT_S)
        np.testing.assert_array_equal(host, np.arange(1024))
        back = dev.buffer(host.nbytes)
        host[:] = 7
        cb2 = dev.command_buffer()
        cb2.copy(back, pinned, host.nbytes)  # host memory -> device
        dev.submit(cb2.finalize()).wait(WAIT_S)
        assert (back.to_numpy(np.uint32) == 7).all()
        pinned.unpin()


def test_pin_refuses_bad_arrays_in_one_line():
    with amdgpu.open("amdgpu:virtual", suballocate=MAX_BLOCK) as dev:
        with pytest.raises(KernelArgumentError, match="C-contiguous"):
            dev.pin(np.zeros((8, 8))[:, 1])
        a = np.zeros(100)
        p = dev.pin(a)
        with pytest.raises(DeviceError, match="overlaps memory already pinned"):
            dev.pin(a[10:20])
        p.unpin()
        with pytest.raises(DeviceError, match="freed"):
            _ = p.array
