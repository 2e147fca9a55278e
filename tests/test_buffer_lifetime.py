"""Buffers dropped without free() are released by the driver, once, and only after the
lanes have finished the work submitted before the drop (issue 17)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import amdgpu
from amdgpu.errors import DeviceError


@pytest.fixture(params=["amdgpu:virtual", "vulkan"])
def dev(request):
    try:
        d = amdgpu.open(request.param)
    except DeviceError as exc:  # pragma: no cover - both exist wherever setup ran
        pytest.skip(f"{request.param}: {exc}")
    yield d
    d.close()


def _pending(d) -> int:
    return len(d.__dict__.get("_dropped", ()))


def test_dropped_buffer_is_released_at_synchronize(dev):
    buf = dev.buffer(np.arange(1024, dtype=np.uint32))
    handle = buf.handle
    del buf
    gc.collect()
    assert _pending(dev) == 1
    dev.synchronize()
    assert _pending(dev) == 0
    if dev.backend == "vulkan":
        assert handle.freed
    else:
        assert handle not in dev.provider._user_allocs


def test_many_dropped_buffers_do_not_pile_up(dev):
    for _ in range(300):
        dev.buffer(1 << 16)  # dropped at once: released at the next allocation
    gc.collect()
    dev.synchronize()
    assert _pending(dev) == 0
    if dev.backend != "vulkan":
        assert len(dev.provider._user_allocs) < 20


def test_freed_then_dropped_is_released_once(dev):
    buf = dev.buffer(64)
    view = buf.view(16, 16)
    buf.free()
    del buf
    gc.collect()
    assert _pending(dev) == 0  # free() already released it: the finalizer does nothing
    with pytest.raises(DeviceError):
        view.to_numpy()


def test_a_view_keeps_its_buffer_alive(dev):
    buf = dev.buffer(np.arange(16, dtype=np.uint8))
    view = buf.view(4, 4)
    del buf
    gc.collect()
    assert _pending(dev) == 0
    assert view.to_numpy().tolist() == [4, 5, 6, 7]


class _Lane:
    def __init__(self, submitted: int, completed: int) -> None:
        self.submitted = submitted
        self.done = completed

    def completed(self) -> int:
        return self.done


def test_release_waits_for_work_submitted_before_the_drop():
    """The reuse rule itself: a dropped handle is freed only when every lane has completed
    the value it had submitted at the drop."""
    from amdgpu.device import Device

    released = []
    lane = _Lane(submitted=5, completed=3)
    d = type("Stub", (), {})()  # only the state the two methods use
    d._live_lanes = lambda: [lane]
    d._release_handle = released.append
    Device._dropped_buffer(d, "h")
    Device._reap_dropped(d)
    assert released == []  # the GPU may still use it
    lane.submitted, lane.done = 9, 5  # work after the drop does not matter
    Device._reap_dropped(d)
    assert released == ["h"]
    Device._reap_dropped(d)
    assert released == ["h"]
