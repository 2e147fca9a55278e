"""Fixtures every hwlab suite gets (registered by the runner as a pytest plugin, so a suite
file anywhere, e.g. one passed with --suite PATH, can use them).

`lab_device` is parametrized by the runner over the selected devices (session scope);
`device` is that device opened once (`amdgpu.open(spec)`) for all of its tests and closed
when the run moves on to the next device. A test that leaves it broken (a lane in the error
state, a lost device) gets it closed and reopened for the next test, so one fault shows up
as one failure, not as a failure of every test after it;
`fresh_device` opens a separate one for tests that break their device on purpose;
`trace_sink` installs an in-memory packet-trace sink for one test; `hold(lane)` holds a lane
until released. The helpers `library_bundle`, `empty_submission` and `hold_lane` are plain
functions that suites import from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import amdgpu
from amdgpu.device import TimelinePoint
from ground.errors import AmdgpuError


class OpenDevices:
    """The lab devices opened so far: one at a time (the runner groups tests by device)."""

    def __init__(self) -> None:
        self.devices: dict[str, Any] = {}
        self.reopened: dict[str, int] = {}

    def get(self, spec: str):
        for other in [s for s in self.devices if s != spec]:
            self.close(other)
        if spec not in self.devices:
            self.devices[spec] = amdgpu.open(spec)
        return self.devices[spec]

    def check(self, spec: str) -> None:
        """After a test: a device whose work does not complete cleanly is closed (the
        next test reopens it)."""
        dev = self.devices.get(spec)
        if dev is None:
            return
        try:
            dev.synchronize(30.0)
        except AmdgpuError:
            self.close(spec)
            self.reopened[spec] = self.reopened.get(spec, 0) + 1

    def close(self, spec: str) -> None:
        dev = self.devices.pop(spec, None)
        if dev is not None:
            try:
                dev.close()
            except AmdgpuError:  # a lane in the error state: closing frees what it can
                pass

    def close_all(self) -> None:
        for spec in list(self.devices):
            self.close(spec)


@pytest.fixture(scope="session")
def open_devices():
    cache = OpenDevices()
    yield cache
    cache.close_all()


@pytest.fixture
def device(lab_device, open_devices):
    """The lab device, opened once for all of its tests (reopened after a test broke it)."""
    yield open_devices.get(lab_device.spec)
    open_devices.check(lab_device.spec)


@pytest.fixture
def fresh_device(lab_device):
    """A factory of separately opened devices for `lab_device`, closed after the test."""
    opened = []

    def open_one(**options):
        dev = amdgpu.open(lab_device.spec, **options)
        opened.append(dev)
        return dev

    yield open_one
    for dev in opened:
        try:
            dev.close()
        except AmdgpuError:
            pass


@pytest.fixture
def trace_sink():
    """An in-memory packet-trace sink, active for this test only."""
    import packets

    sink = packets.MemorySink()
    previous = packets.set_sink(sink)
    yield sink
    packets.set_sink(previous)


# --- helpers of the suites ----------------------------------------------------------------
BUNDLES: dict[tuple[str, str], object] = {}


def library_bundle(device, name: str):
    """The compiler library's `name` compiled for `device` (cached on disk and here)."""
    import compiler

    targets = ["vulkan"] if device.backend == "vulkan" else [device.target]
    key = (name, ",".join(targets))
    if key not in BUNDLES:
        BUNDLES[key] = compiler.compile(name, targets=targets)
    return BUNDLES[key]


def empty_submission(device, lane: int = 0, wait=()) -> TimelinePoint:
    """A submission with no commands: only advances `lane`'s timeline (after `wait`)."""
    cb = device.command_buffer()
    cb.finalize()
    return device.submit(cb, [], lane=lane, wait=list(wait))


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def call() -> None:
        if not done:
            done.append(True)
            fn()

    return call


def hold_lane(device, lane: int) -> Callable[[], None]:
    """Hold `lane`: work submitted to it from now on waits until the returned release()
    is called. HSA: a barrier-AND packet on a host signal; Vulkan: a wait on a future value
    of the last lane's timeline, which the host then signals."""
    if device.backend == "hsa":
        import packets

        gate = device.provider.signal_create(1)
        device.lanes_[lane].publish(packets.barrier_and(dep_signals=[gate], barrier=True))

        def release() -> None:
            device.provider.signal_store(gate, 0)

        return _once(release)
    if device.backend == "vulkan":
        gate_lane = device.lanes - 1
        if lane == gate_lane:
            raise ValueError(f"lane {lane} is the gate lane: hold a lower lane")
        gate = device.lane(gate_lane)
        point = gate.point(gate.submitted + 1)
        empty_submission(device, lane, wait=[point])

        def release() -> None:
            device.signal(point)

        return _once(release)
    pytest.skip(f"no way to hold a lane of a {device.backend} device")


@pytest.fixture
def hold(device):
    """hold(lane) -> release; every hold still in place is released after the test."""
    releases: list[Callable[[], None]] = []

    def make(lane: int) -> Callable[[], None]:
        release = hold_lane(device, lane)
        releases.append(release)
        return release

    yield make
    for release in releases:
        release()
    device.synchronize(30)
