"""Asynchronous transfers on lanes, pinned host memory and placement (issue 20), on every
lab device (amdgpu:virtual, amdgpu:emulated through real ROCr, vulkan:0).

Exact bytes after each transfer; a transfer's point orders later work on another lane
(a large copy on one lane, then work on another lane waiting on its point); bad input is
one error of the project's hierarchy and leaves the destination untouched.
"""

from __future__ import annotations

import numpy as np
import pytest

from amdgpu.buffer import HostBuffer
from amdgpu.device import TimelinePoint
from amdgpu.errors import BufferRangeError, DeviceError, KernelArgumentError

WAIT_S = 60.0
BIG = 4 << 20  # large enough that an unordered reader would see the copy unfinished


def pattern(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


@pytest.mark.generic
def test_write_async_then_read_async_round_trips_exact_bytes(device):
    data = pattern(4096 + 12, 1)
    buf = device.buffer(len(data) + 64)
    buf.write(np.zeros(len(data) + 64, np.uint8))
    p = buf.write_async(data, 32, lane=device.lanes - 1)
    assert isinstance(p, TimelinePoint) and p.lane == device.lanes - 1
    got = buf.read_async(lane=0, wait=[p]).result(WAIT_S)
    assert got.dtype == np.uint8 and len(got) == len(data) + 64
    assert (got[32 : 32 + len(data)] == data).all()
    assert not got[:32].any() and not got[32 + len(data) :].any()
    out = np.empty(len(data) // 4, np.uint32)
    assert buf.read_async(out, 32).result(WAIT_S) is out
    assert (out.view(np.uint8) == data[: out.nbytes]).all()
    buf.free()


@pytest.mark.generic
def test_a_write_point_orders_a_copy_on_another_lane(device):
    if device.lanes < 2:
        pytest.skip(f"{device.spec} has one lane")
    data = pattern(BIG, 2)
    src, dst = device.buffer(BIG), device.buffer(BIG)
    dst.write(np.zeros(BIG, np.uint8))
    p = src.write_async(data, lane=1)
    q = device.copy(dst, src, lane=0, wait=[p])
    r = dst.read_async(lane=1, wait=[q])
    assert (r.result(WAIT_S) == data).all()
    src.free()
    dst.free()


@pytest.mark.generic
def test_read_async_waits_for_a_fill_on_another_lane(device):
    if device.lanes < 2:
        pytest.skip(f"{device.spec} has one lane")
    buf = device.buffer(BIG)
    f = device.fill(buf, np.uint32(0xA5A5A5A5), lane=1)
    got = buf.read_async(lane=0, wait=[f], dtype=np.uint32).result(WAIT_S)
    assert (got == 0xA5A5A5A5).all()
    buf.free()


@pytest.mark.generic
def test_pinned_host_buffer_is_zero_copy_both_ways(device):
    data = pattern(8192, 3)
    host = device.host_buffer(data)
    assert isinstance(host, HostBuffer) and (host.array == data).all()
    buf = device.buffer(8192)
    p = buf.write_async(host, lane=0)
    host_out = device.host_buffer(8192)
    host_out.array[:] = 0
    r = buf.read_async(host_out, lane=device.lanes - 1, wait=[p])
    assert r.result(WAIT_S) is host_out
    assert (host_out.array == data).all()
    # the host's view is the memory itself: a change shows without a copy
    host.numpy(np.uint32)[0] = 0xDEADBEEF
    assert host.array[:4].tobytes() == (0xDEADBEEF).to_bytes(4, "little")
    # a device copy into and out of pinned memory, ordered on one lane
    back = device.host_buffer(8192)
    device.copy(back, buf, lane=0).wait(WAIT_S)
    assert (back.array == data).all()
    for b in (host, host_out, back, buf):
        b.free()


@pytest.mark.generic
@pytest.mark.parametrize("memory", ["device", "device-fine", "host"])
def test_placement_holds_exact_bytes(device, memory):
    if memory == "device-fine" and getattr(device, "fine_pool", True) is None:
        with pytest.raises(DeviceError, match="fine-grained"):
            device.buffer(64, memory=memory)
        return
    data = pattern(1000, 4)
    buf = device.buffer(data, memory=memory)
    assert isinstance(buf, HostBuffer) == (memory == "host")
    assert (buf.to_numpy() == data).all()
    other = device.buffer(1000)
    device.copy(other, buf, lane=0).wait(WAIT_S)
    assert (other.read_async().result(WAIT_S) == data).all()
    buf.free()
    other.free()


@pytest.mark.hsa_virtual
def test_virtual_agent_reports_a_fine_grained_device_pool(device):
    fine = [
        x
        for x in device.provider.agent_pools(device.agent.handle)
        if x.segment == 0 and x.is_fine_grained and x.runtime_alloc_allowed
    ]
    assert len(fine) == 1 and device.fine_pool == fine[0].handle


@pytest.mark.generic
def test_bad_transfers_are_one_clear_error_and_copy_nothing(device):
    buf = device.buffer(64)
    buf.write(np.full(64, 7, np.uint8))
    with pytest.raises(BufferRangeError, match="outside a buffer of 64"):
        buf.write_async(np.zeros(65, np.uint8))
    with pytest.raises(BufferRangeError, match="outside a buffer of 64"):
        buf.write_async(np.zeros(8, np.uint8), 60)
    with pytest.raises(BufferRangeError):
        buf.read_async(np.empty(17, np.uint32))
    with pytest.raises(BufferRangeError, match="whole number"):
        buf.read_async(offset=2, dtype=np.uint32)
    with pytest.raises(KernelArgumentError, match="C-contiguous"):
        buf.read_async(np.empty((8, 8), np.uint8)[:, ::2])
    with pytest.raises(KernelArgumentError, match="host data"):
        buf.write_async(device.buffer(8))
    with pytest.raises(DeviceError, match="lanes"):
        buf.write_async(np.zeros(4, np.uint8), lane=99)
    with pytest.raises(KernelArgumentError, match="wait must be a list"):
        buf.write_async(np.zeros(4, np.uint8), wait=5)
    with pytest.raises(DeviceError, match="placement"):
        device.buffer(64, memory="vram")
    assert (buf.to_numpy() == 7).all()  # nothing half-copied
    host = device.host_buffer(64)
    host.free()
    with pytest.raises(DeviceError, match="freed"):
        buf.write_async(host)
    buf.free()
    with pytest.raises(DeviceError, match="freed"):
        buf.write_async(np.zeros(4, np.uint8))
    with pytest.raises(DeviceError, match="freed"):
        buf.read_async()
