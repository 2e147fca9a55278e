"""Fixtures of the built-in hwlab suites.

`device` (the lab device opened once per `lab_device`, session scope), `fresh_device` and
`trace_sink` come from `tools.hwlab.fixtures`, which the runner registers as a plugin so
that suite files outside this folder get them too. This file adds the suites' helpers:
compiled library kernels, empty command buffers, and lane gates.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from amdgpu.device import TimelinePoint

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
    done = []

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
        device.lanes_[lane].ring.publish(packets.barrier_and(dep_signals=[gate], barrier=True))

        def release() -> None:
            device.provider.signal_store(gate, 0)

        return _once(release)
    if device.backend == "vulkan":
        gate_lane = device.lanes - 1
        if lane == gate_lane:
            raise ValueError(f"lane {lane} is the gate lane: hold a lower lane")
        timeline = device.lane(gate_lane)
        point = TimelinePoint(gate_lane, timeline.submitted + 1, timeline)
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
