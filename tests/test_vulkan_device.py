"""The Vulkan backend on a real Vulkan 1.3 device (lavapipe here): reports, the three
dispatch paths running IREE SPIR-V, command-buffer replay without re-recording, lanes and
timelines, host-wait timeouts, and errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from amdgpu.errors import DeviceError, KernelArgumentError, SignalTimeout, VulkanError
from amdgpu.vulkan import TimelinePoint, VulkanDevice, list_devices
from hsa.provider import Capability

N = 4096
ADDONE = f"""func.func @addone(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %c = arith.constant dense<1.0> : tensor<{N}xf32>
  %r = arith.addf %x, %c : tensor<{N}xf32>
  return %r : tensor<{N}xf32>
}}
"""


def _usable() -> tuple[bool, str]:
    reports = list_devices()
    if not reports:
        return False, "no Vulkan device (install mesa-vulkan-drivers for lavapipe)"
    if not reports[0].available:
        return False, f"vulkan:0 not usable: {reports[0].reason}"
    return True, ""


USABLE, WHY = _usable()
BDA = USABLE and list_devices()[0].paths["bda"].available
PUSH = USABLE and list_devices()[0].paths["push_descriptors"].available
needs_vulkan = pytest.mark.skipif(not USABLE, reason=WHY)

PATHS = [
    pytest.param(
        "bda",
        marks=[
            pytest.mark.vulkan_bda,
            pytest.mark.skipif(not BDA, reason="device lacks bufferDeviceAddress"),
        ],
    ),
    pytest.param(
        "push_descriptors",
        marks=pytest.mark.skipif(not PUSH, reason="device lacks VK_KHR_push_descriptor"),
    ),
    "descriptor_sets",
]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """x+1 on 4096 floats and saxpy (compiler/kernels), both ABIs, via IREE."""
    if not USABLE:
        pytest.skip(WHY)
    saved = os.environ.get("AMDGPU_VULKAN_TEST_BUNDLES")  # for machines without iree-compile
    if saved:
        from compiler.bundle import KernelBundle

        return {
            name: KernelBundle.load(os.path.join(saved, f"{name}.bundle"))
            for name in ("addone", "saxpy", "mlp")
            if os.path.exists(os.path.join(saved, f"{name}.bundle"))
        }
    iree = pytest.importorskip("compiler.iree", reason="compiler.iree not available")
    src = tmp_path_factory.mktemp("vk") / "addone.mlir"
    src.write_text(ADDONE)
    addone = iree.compile_mlir(src, vulkan_abis=("descriptors", "bda"))
    library = os.path.join(os.path.dirname(iree.__file__), "kernels")
    return {
        "addone": addone,
        "saxpy": iree.compile_mlir(
            os.path.join(library, "saxpy.mlir"), vulkan_abis=("descriptors", "bda")
        ),
        "mlp": iree.compile_mlir(
            os.path.join(library, "mlp.mlir"), vulkan_abis=("descriptors", "bda")
        ),
    }


def _grid(compiled, i: int = 0):
    d = compiled.program["dispatches"][i]
    return d["kernel"], [
        c * w for c, w in zip(d["workgroup_count"], d["workgroup_size"], strict=False)
    ]


@pytest.fixture(params=PATHS)
def dev(request):
    if not USABLE:
        pytest.skip(WHY)
    device = VulkanDevice(0, path=request.param)
    yield device
    device.close()


# --- reports -----------------------------------------------------------------------------
@pytest.mark.vulkan
@needs_vulkan
def test_device_report_fields():
    report = list_devices()[0]
    assert report.spec == "vulkan:0"
    assert report.backend == "vulkan" and report.target == "vulkan"
    assert report.available and report.reason == ""
    assert set(report.paths) == {"bda", "push_descriptors"}
    assert all(isinstance(c, Capability) for c in report.paths.values())
    for cap in report.paths.values():
        assert cap.available or cap.reason
    major, minor = (int(v) for v in report.versions["api"].split(".")[:2])
    assert (major, minor) >= (1, 3)
    assert report.versions["driver"]


@pytest.mark.vulkan
@needs_vulkan
def test_missing_device_lists_devices():
    with pytest.raises(
        VulkanError,
        match=r"no Vulkan device vulkan:99; devices: vulkan:0 .*"
        r"\(Vulkan \d+\.\d+",
    ):
        VulkanDevice(99)


@pytest.mark.vulkan
@needs_vulkan
def test_unknown_path_is_refused():
    with pytest.raises(VulkanError, match="unknown Vulkan dispatch path"):
        VulkanDevice(0, path="fast")


@pytest.mark.vulkan
@needs_vulkan
def test_peer_access_links_and_copy_async_are_the_device_api_here_too():
    """The Device surface amdgpu.open returns is the same on Vulkan: copy_async is a copy
    command on its lane; there is no peer access or link topology, which is the API's
    one-line DeviceError naming the backend, never an AttributeError."""
    with VulkanDevice(0) as a, VulkanDevice(0) as b:
        data = np.arange(256, dtype=np.uint8)
        src, dst = a.buffer(data), a.buffer(256)
        point = a.copy_async(dst, src, lane=1)
        assert isinstance(point, TimelinePoint) and point.lane == 1
        point.wait(10.0)
        np.testing.assert_array_equal(dst.to_numpy(), data)
        host = a.host_buffer(256)
        host.array[:] = 0
        a.copy_async(host, src, 100, lane=2).wait(10.0)
        assert (host.array[:100] == data[:100]).all() and not host.array[100:].any()
        a.enable_peer_access(a)  # itself: nothing to do
        assert a.can_access_peer(a) and not a.can_access_peer(b)
        for call in (lambda: a.enable_peer_access(b), lambda: a.links(b), a.links):
            with pytest.raises(DeviceError) as e:
                call()
            assert "\n" not in str(e.value) and "vulkan backend" in str(e.value)
        other = b.buffer(256)
        with pytest.raises(DeviceError, match="cannot reach: copy through the host"):
            a.copy_async(dst, other)
        a.close()
        with pytest.raises(VulkanError, match="closed"):
            a.copy_async(dst, src)


@needs_vulkan
def test_device_attributes_follow_the_contract():
    with VulkanDevice() as device:
        assert device.spec == "vulkan:0"
        assert (device.backend, device.driver, device.target) == ("vulkan", "vulkan", "vulkan")
        assert device.path == ("bda" if BDA else "push_descriptors" if PUSH else "descriptor_sets")
        assert device.lanes >= 2
        from amdgpu.device import Device

        assert isinstance(device, Device)


# --- each path runs IREE's kernels -----------------------------------------------------------
@pytest.mark.vulkan
def test_addone_and_saxpy_match_numpy(dev, kernels):
    name, grid = _grid(kernels["addone"])
    addone = dev.load(kernels["addone"]).kernel(name)
    assert addone.path == dev.path
    x = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    xb, yb = dev.buffer(x), dev.buffer(N * 4)
    dev.dispatch(addone, grid, args=(xb, yb)).wait()
    np.testing.assert_array_equal(yb.to_numpy(np.float32), x + 1)

    name, grid = _grid(kernels["saxpy"])
    saxpy = dev.load(kernels["saxpy"]).kernel(name)
    n = 1024
    xs = np.arange(n, dtype=np.float32)
    ys = np.linspace(-1, 1, n, dtype=np.float32)
    out = dev.buffer(n * 4)
    a = dev.buffer(np.array([2.5], np.float32))
    dev.dispatch(saxpy, grid, args=(a, dev.buffer(xs), dev.buffer(ys), out)).wait()
    np.testing.assert_allclose(out.to_numpy(np.float32), np.float32(2.5) * xs + ys, rtol=1e-6)


@pytest.mark.vulkan
def test_views_bind_at_their_offset(dev, kernels):
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    big = dev.buffer(np.arange(3 * N, dtype=np.float32))
    dst = dev.buffer(np.zeros(3 * N, np.float32))
    dev.dispatch(k, grid, args=(big.view(N * 4, N * 4), dst.view(2 * N * 4, N * 4))).wait()
    out = dst.to_numpy(np.float32)
    np.testing.assert_array_equal(out[2 * N :], np.arange(N, 2 * N, dtype=np.float32) + 1)
    assert not out[: 2 * N].any()


# --- command buffers -------------------------------------------------------------------------
def _chain(device, kernel, grid, n):
    cb = device.command_buffer()
    s0, s1 = cb.binding(0), cb.binding(1)
    for i in range(n):
        cb.dispatch(kernel, grid, args=(s0, s1) if i % 2 == 0 else (s1, s0))
        cb.barrier()
    return cb.finalize()


@pytest.mark.vulkan
def test_replay_with_new_bindings(dev, kernels):
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    cb = _chain(dev, k, grid, 6)
    pairs = [(dev.buffer(np.full(N, v, np.float32)), dev.buffer(N * 4)) for v in (0, 10, 20)]
    handles = []
    for a, b in pairs:
        dev.submit(cb, bindings=[a, b]).wait()
        handles.append(cb.last_handle)
    for (a, _), v in zip(pairs, (0, 10, 20), strict=False):
        np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, v + 6, np.float32))
    # Replaying with buffers seen before never re-records, on any path.
    records = cb.record_count
    a, b = pairs[0]
    dev.submit(cb, bindings=[a, b]).wait()
    assert cb.record_count == records
    np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, 12, np.float32))
    if dev.path == "bda" or (dev.path == "descriptor_sets" and dev.update_after_bind):
        # Only the address table (or the update-after-bind descriptors) changes: one
        # VkCommandBuffer, recorded once.
        assert cb.record_count == 1
        assert len(set(handles)) == 1 and cb.last_handle == handles[0]
    else:
        # Descriptors are baked into the recording: one recording per binding set.
        assert cb.record_count == 3


@pytest.mark.vulkan
@needs_vulkan
def test_repeated_replay_still_refuses_a_freed_buffer(dev, kernels):
    """A replay with the same buffer objects as the last skips the binding checks only
    while no buffer's lifetime has ended: freeing one of them (any buffer, in fact) makes
    the next replay check again and refuse it, naming where it was freed."""
    from amdgpu.errors import BufferStateError

    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    cb = _chain(dev, k, grid, 2)
    a, b = dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)
    bindings = [a, b]
    for _ in range(3):
        dev.submit(cb, bindings).wait()
    np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, 6, np.float32))
    b.free()
    with pytest.raises(BufferStateError, match="binding 1.*was freed at .*test_vulkan_device"):
        dev.submit(cb, bindings)
    with pytest.raises(KernelArgumentError, match="1 buffer"):
        dev.submit(cb, [a])  # fewer bindings than slots: checked, not the fast path
    a.free()


@pytest.mark.vulkan
@needs_vulkan
def test_repeated_replay_after_a_refused_submit_rebinds(dev, kernels):
    """A replay with the same buffers as the last reuses the last submission's instance as
    it is (its table or descriptors already hold those buffers). A submit refused after it
    bound other buffers into a second instance (the first one in flight) must not leave the
    first one standing as "the last": the next replay of those other buffers lands in them,
    not in the first instance's."""
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    cb = _chain(dev, k, grid, 2)
    gate = TimelinePoint(1, 1)  # lane 1 never reaches 1 until the host signals
    x = [dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)]
    y = [dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)]
    p = dev.submit(cb, x, wait=[gate])  # in flight until the gate opens
    try:
        with pytest.raises(DeviceError, match="has lanes 0"):
            dev.submit(cb, y, lane=10_000)  # bound into a second instance, then refused
    finally:
        dev.signal(gate)
    p.wait()
    dev.submit(cb, y).wait()
    dev.submit(cb, y).wait()
    np.testing.assert_array_equal(x[0].to_numpy(np.float32), np.full(N, 2, np.float32))
    np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 4, np.float32))


@pytest.mark.vulkan
@pytest.mark.vulkan_bda
@pytest.mark.skipif(not BDA, reason="device lacks bufferDeviceAddress")
def test_bda_in_flight_submissions_use_separate_tables(kernels):
    with VulkanDevice(0, path="bda") as device:
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        cb = _chain(device, k, grid, 2)
        gate = TimelinePoint(1, 1)  # lane 1 never reaches 1 until the host signals
        a1, b1 = device.buffer(np.zeros(N, np.float32)), device.buffer(N * 4)
        a2, b2 = device.buffer(np.full(N, 5, np.float32)), device.buffer(N * 4)
        p1 = device.submit(cb, [a1, b1], lane=0, wait=[gate])
        handle1 = cb.last_handle
        p2 = device.submit(cb, [a2, b2], lane=2)  # first instance still in flight
        assert cb.last_handle != handle1 and cb.record_count == 2
        assert not p1.done()
        # (On a device with one queue, p2 queues behind the gated p1: signal first.)
        device.signal(gate)
        p1.wait()
        p2.wait()
        np.testing.assert_array_equal(a1.to_numpy(np.float32), np.full(N, 2, np.float32))
        np.testing.assert_array_equal(a2.to_numpy(np.float32), np.full(N, 7, np.float32))


@pytest.mark.vulkan
def test_back_to_back_replays_take_an_instance_holding_their_buffers(dev, kernels):
    """A replay of the last buffers while the last replay still runs takes another recorded
    instance as it is only when that instance's table already holds those buffers; else it
    is rewritten first (bda), or another instance is picked or recorded."""
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    cb = _chain(dev, k, grid, 2)  # each replay adds 2 to its first buffer
    x = [dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)]
    y = [dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)]

    def gated(bindings, value):
        return dev.submit(cb, bindings, wait=[TimelinePoint(1, value)])

    gated(x, 1)  # instance A, table x, in flight
    gated(y, 1)  # A busy: instance B, table y
    dev.signal(TimelinePoint(1, 1))
    dev.synchronize()
    gated(y, 2)  # B again (the last one, idle)
    gated(y, 2)  # B busy; A is idle but its table holds x: rewritten for y, not taken as is
    dev.signal(TimelinePoint(1, 2))
    dev.synchronize()
    np.testing.assert_array_equal(x[0].to_numpy(np.float32), np.full(N, 2, np.float32))
    np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 6, np.float32))
    records = cb.record_count
    handles = []
    for _ in range(2):  # the last one (idle), then, it busy, the other, which holds y
        gated(y, 3)
        handles.append(cb.last_handle)
    dev.signal(TimelinePoint(1, 3))
    dev.synchronize()
    np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 10, np.float32))
    np.testing.assert_array_equal(x[0].to_numpy(np.float32), np.full(N, 2, np.float32))
    if dev.path == "bda":
        assert cb.record_count == records == 2 and handles[0] != handles[1]


@pytest.mark.vulkan
def test_fill_copy_and_fixed_buffers(dev, kernels):
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    fixed = dev.buffer(N * 4)
    cb = dev.command_buffer()
    cb.fill(cb.binding(0), np.float32(3.0))
    cb.barrier()
    cb.dispatch(k, grid, args=(cb.binding(0), fixed))
    cb.barrier()
    cb.copy(cb.binding(1), fixed, N * 4)
    cb.finalize()
    src, dst = dev.buffer(N * 4), dev.buffer(N * 4)
    dev.submit(cb, [src, dst]).wait()
    np.testing.assert_array_equal(dst.to_numpy(np.float32), np.full(N, 4, np.float32))


@pytest.mark.vulkan
def test_replays_rebind_slots_beside_a_fixed_buffer(dev, kernels):
    """A submit's checks and the bda table's rewrite (one call for the whole table, bound
    and fixed entries together) over new buffers, views of one allocation (the overlap
    test then looks at their ranges) and buffers seen before; a non-buffer is refused with
    the binding check's own line."""
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    fixed = dev.buffer(N * 4)
    cb = dev.command_buffer()
    s0, s1 = cb.binding(0), cb.binding(1)
    cb.dispatch(k, grid, args=(s0, fixed))  # fixed = s0 + 1
    cb.barrier()
    cb.dispatch(k, grid, args=(fixed, s1))  # s1 = s0 + 2
    cb.barrier()
    cb.dispatch(k, grid, args=(s1, s0))  # s0 = s0 + 3
    cb.finalize()
    one = dev.buffer(np.full(2 * N, 100, np.float32))
    sets = [[dev.buffer(np.full(N, 10 * i, np.float32)), dev.buffer(N * 4)] for i in range(2)]
    sets.append([one.view(N * 4, N * 4), one.view(0, N * 4)])  # one allocation, apart
    start = [0.0, 10.0, 100.0]
    for rounds in range(2):
        for (a, b), v in zip(sets, start, strict=True):
            dev.submit(cb, [a, b]).wait()
            base = v + 3 * rounds
            np.testing.assert_array_equal(fixed.to_numpy(np.float32), np.full(N, base + 1))
            np.testing.assert_array_equal(b.to_numpy(np.float32), np.full(N, base + 2))
            np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, base + 3))
    with pytest.raises(KernelArgumentError, match="binding 1 .* is not a buffer"):
        dev.submit(cb, [sets[0][0], np.zeros(N, np.float32)])


@pytest.mark.vulkan
@needs_vulkan
def test_wrong_arguments_are_refused(kernels):
    with VulkanDevice() as device:
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        x = device.buffer(N * 4)
        with pytest.raises(KernelArgumentError, match="takes 2 buffers"):
            device.dispatch(k, grid, args=(x,))
        with pytest.raises(KernelArgumentError, match="workgroup size"):
            device.dispatch(k, grid, block=(k.workgroup_size[0] * 2,), args=(x, x))
        cb = device.command_buffer()
        cb.dispatch(k, grid, args=(cb.binding(0), cb.binding(1)))
        cb.finalize()
        with pytest.raises(KernelArgumentError, match="2 binding slot"):
            device.submit(cb, bindings=[x])
        cb2 = device.command_buffer()
        cb2.dispatch(k, grid, args=(cb2.binding(0).view(64), cb2.binding(1)))
        cb2.finalize()
        with pytest.raises(KernelArgumentError, match="smaller than the 64 bytes"):
            device.submit(cb2, bindings=[device.buffer(32), x])
        with pytest.raises(KernelArgumentError, match="no single kernel"):
            device.load(kernels["addone"]).kernel("nope")


# --- lanes and timelines ---------------------------------------------------------------------
@pytest.mark.vulkan
@needs_vulkan
def test_timelines_order_work_across_lanes(kernels):
    with VulkanDevice() as device:
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        a = device.buffer(np.zeros(N, np.float32))
        b, c = device.buffer(N * 4), device.buffer(N * 4)
        gate = TimelinePoint(3, 1)
        p0 = device.dispatch(k, grid, args=(a, b), lane=0, wait=[gate])  # held by the gate
        p1 = device.dispatch(k, grid, args=(b, c), lane=1, wait=[p0])
        assert (p0.lane, p1.lane) == (0, 1)
        assert not p1.done()
        device.signal(gate)
        p1.wait()
        assert p0.done()
        np.testing.assert_array_equal(c.to_numpy(np.float32), np.full(N, 2, np.float32))
        # Within a lane, submissions run in order.
        q = [
            device.dispatch(k, grid, args=(c, b) if i % 2 == 0 else (b, c), lane=2)
            for i in range(4)
        ]
        assert [p.value for p in q] == [1, 2, 3, 4]
        device.synchronize(timeout=10)
        np.testing.assert_array_equal(c.to_numpy(np.float32), np.full(N, 6, np.float32))


@pytest.mark.vulkan
@needs_vulkan
def test_host_wait_times_out():
    with VulkanDevice() as device:
        gate = TimelinePoint(1, 7)
        point = device._timeline(0).submit(None, [gate])  # waits on a value nobody signals yet
        with pytest.raises(SignalTimeout, match="lane 0 did not reach 1"):
            point.wait(timeout=0.05)
        with pytest.raises(SignalTimeout):
            device.synchronize(timeout=0.05)
        device.signal(gate)
        point.wait(timeout=10)
        assert point.done()


# --- errors ----------------------------------------------------------------------------------
@pytest.mark.vulkan
@needs_vulkan
def test_bad_spirv_raises_vulkan_error():
    with VulkanDevice() as device:
        with pytest.raises(VulkanError, match="not a SPIR-V module"):
            device.load(b"\x00" * 64)
        with pytest.raises(VulkanError, match="multiple of 4"):
            device.load(b"\x03\x02\x23\x07" + b"\x00" * 18)
        header = np.array([0x07230203, 0x00010000, 0, 8, 0], "<u4")
        truncated = np.concatenate([header, np.array([(9 << 16) | 17, 1], "<u4")])
        with pytest.raises(VulkanError, match="truncated SPIR-V"):
            device.load(truncated.tobytes())
        with pytest.raises(VulkanError, match="no GLCompute entry point"):
            device.load(header.tobytes())
        with pytest.raises(VulkanError, match="no SPIR-V variant"):
            device.load({})


@pytest.mark.vulkan
@needs_vulkan
def test_out_of_memory_is_a_vulkan_error():
    with VulkanDevice() as device:
        with pytest.raises(VulkanError, match="OUT_OF_(DEVICE|HOST)_MEMORY.*free buffers"):
            device.buffer(1 << 46)
        assert device.buffer(16).nbytes == 16  # the device is still usable


@pytest.mark.vulkan
@needs_vulkan
def test_closed_device_refuses_work():
    device = VulkanDevice()
    device.close()
    with pytest.raises(VulkanError, match="closed"):
        device.buffer(16)


@pytest.mark.vulkan
@needs_vulkan
def test_submissions_reach_the_trace_sink(kernels):
    from packets import trace

    sink = trace.MemorySink() if hasattr(trace, "MemorySink") else None
    if sink is None:
        pytest.skip("packets.trace has no in-memory sink")
    previous = trace.set_sink(sink)
    try:
        with VulkanDevice() as device:
            name, grid = _grid(kernels["addone"])
            k = device.load(kernels["addone"]).kernel(name)
            x = device.buffer(N * 4)
            device.dispatch(k, grid, args=(x, device.buffer(N * 4)), lane=1).wait()
    finally:
        trace.set_sink(previous)
    records = [r for r in sink.records if isinstance(r, trace.VulkanSubmissionRecord)]
    assert records and records[-1].payload["lane"] == 1
    assert records[-1].payload["kernels"] == [name]
    assert records[-1].payload["dispatches"] == 1


@pytest.mark.vulkan
@needs_vulkan
def test_spirv_needing_missing_features_is_refused_before_the_driver(kernels):
    with VulkanDevice() as device:
        device.enabled_features.discard("shaderInt64")  # as on a device without it
        abi = "bda" if device.path == "bda" else "descriptors"
        variants = [v for v in kernels["addone"].variants if v.abi == abi]
        if not any(11 in reflect_caps(v) for v in variants):
            pytest.skip(f"the {abi} kernel does not use Int64")
        with pytest.raises(VulkanError, match="needs device features shaderInt64"):
            device.load(kernels["addone"])


def reflect_caps(variant) -> set[int]:
    from amdgpu.vulkan.executable import _modules
    from compiler.spirv import reflect

    caps: set[int] = set()
    for module in _modules(variant.data, variant.info):
        caps |= reflect(module).capabilities
    return caps


@pytest.mark.vulkan
@needs_vulkan
def test_descriptor_sets_update_after_bind_replay(kernels, monkeypatch):
    report = list_devices()[0]
    native = VulkanDevice(0, path="descriptor_sets")
    supported = native.update_after_bind
    native.close()
    if not supported:
        if "llvmpipe" not in report.name:
            pytest.skip("device lacks descriptorBindingStorageBufferUpdateAfterBind")
        # lavapipe reads descriptors at execution time: exercise the path anyway.
        monkeypatch.setenv("AMDGPU_VULKAN_UPDATE_AFTER_BIND", "force")
    with VulkanDevice(0, path="descriptor_sets") as device:
        assert device.update_after_bind
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        cb = _chain(device, k, grid, 4)
        for v in range(5):
            a, b = device.buffer(np.full(N, v, np.float32)), device.buffer(N * 4)
            device.submit(cb, [a.view(0, N * 4), b]).wait()
            np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, v + 4, np.float32))
        assert cb.record_count == 1


@pytest.mark.vulkan
def test_binding_slot_views_apply_their_offset(dev, kernels):
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    cb = dev.command_buffer()
    cb.dispatch(k, grid, args=(cb.binding(0).view(N * 4), cb.binding(1)))
    cb.finalize()
    for base in (0.0, 100.0):
        src = dev.buffer(np.arange(2 * N, dtype=np.float32) + base)
        dst = dev.buffer(N * 4)
        dev.submit(cb, [src, dst]).wait()
        expected = np.arange(N, 2 * N, dtype=np.float32) + base + 1
        np.testing.assert_array_equal(dst.to_numpy(np.float32), expected)


@pytest.mark.vulkan
@needs_vulkan
def test_dropped_command_buffers_are_freed(kernels):
    import gc

    with VulkanDevice() as device:
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        a, b = device.buffer(np.zeros(N, np.float32)), device.buffer(N * 4)
        for _ in range(3):
            cb = _chain(device, k, grid, 2)
            device.submit(cb, [a, b])
            del cb
            gc.collect()
        assert device._retired  # handed over while possibly in flight
        device.synchronize()
        device.command_buffer()  # frees what has completed
        assert not device._retired
        np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, 6, np.float32))


@pytest.mark.vulkan
def test_iree_program_mlp_matches_numpy(dev, kernels):
    """bundle.program replayed as one command buffer: inputs, transients, barriers."""
    if "mlp" not in kernels:
        pytest.skip("no mlp bundle")
    program = kernels["mlp"].program
    exe = dev.load(kernels["mlp"])
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in program["inputs"]]
    cb = dev.command_buffer()
    kinds = ("input", "output", "transient")
    counts = [len(program["inputs"]), len(program["outputs"]), len(program["transients"])]
    first = dict(zip(kinds, np.cumsum([0, *counts[:-1]]).tolist(), strict=True))
    for d in program["dispatches"]:
        if d["barrier_before"]:
            cb.barrier()
        slots = [cb.binding(first[b["kind"]] + b["index"]).view(b["offset"]) for b in d["bindings"]]
        grid = [c * w for c, w in zip(d["workgroup_count"], d["workgroup_size"], strict=True)]
        cb.dispatch(exe.kernel(d["spirv_entry"]), grid, args=(*slots, *d["constants"]))
    cb.finalize()
    outputs = [dev.buffer(o["size"]) for o in program["outputs"]]
    transients = [dev.buffer(t["size"]) for t in program["transients"]]
    dev.submit(cb, [*[dev.buffer(x) for x in inputs], *outputs, *transients]).wait()
    x, w1, b1, w2, b2 = inputs
    expected = np.maximum(np.maximum(x @ w1 + b1, 0) @ w2 + b2, 0)
    got = outputs[0].to_numpy(np.float32, program["outputs"][0]["shape"])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# --- replay-latency tuning (amdgpu.vulkan.sync) ------------------------------------------
@pytest.mark.vulkan
@pytest.mark.parametrize(
    "barrier, elide, spin_us, memory",
    [
        ("tight", True, 200.0, "rebar"),
        ("compute", False, 0.0, "device"),
        ("full", True, 0.0, "rebar"),
    ],
)
def test_tuning_keeps_results(dev, kernels, barrier, elide, spin_us, memory):
    """Each barrier mode, with and without bind elision and host spinning, buffers in
    either memory: repeated bindings (left out when eliding), transfers next to dispatches,
    a fixed buffer."""
    dev.tuning.barrier, dev.tuning.elide, dev.tuning.spin_us = barrier, elide, spin_us
    dev.tuning.buffer_memory = memory
    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    fixed = dev.buffer(N * 4)
    cb = dev.command_buffer()
    s0, s1, s2 = cb.binding(0), cb.binding(1), cb.binding(2)
    cb.fill(s2, np.float32(-5.0))  # overwritten below: ordered by the barrier after it
    cb.barrier()
    cb.dispatch(k, grid, args=(s0, s1))  # s1 = s0 + 1
    cb.barrier()
    cb.dispatch(k, grid, args=(s0, s1))  # the same bindings again: nothing to rebind
    cb.barrier()
    cb.dispatch(k, grid, args=(s1, s2))  # s2 = s0 + 2
    cb.barrier()
    cb.copy(fixed, s2, N * 4)  # transfer after compute
    cb.barrier()
    cb.dispatch(k, grid, args=(fixed, s0))  # s0 = s0 + 3, compute after transfer
    cb.barrier()
    cb.fill(s1, np.float32(7.0))  # transfer after compute (write after read)
    cb.finalize()
    for base in (0.0, 10.0):
        bufs = [dev.buffer(np.full(N, base, np.float32)), dev.buffer(N * 4), dev.buffer(N * 4)]
        dev.submit(cb, bufs).wait()
        np.testing.assert_array_equal(bufs[0].to_numpy(np.float32), np.full(N, base + 3))
        np.testing.assert_array_equal(bufs[1].to_numpy(np.float32), np.full(N, 7.0))
        np.testing.assert_array_equal(bufs[2].to_numpy(np.float32), np.full(N, base + 2))
    a, b = dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)
    chain = _chain(dev, k, grid, 10)
    for _ in range(3):
        dev.submit(chain, [a, b]).wait()
    np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, 30.0))


@pytest.mark.vulkan
@needs_vulkan
def test_spinning_wait_still_times_out():
    with VulkanDevice() as device:
        device.tuning.spin_us = 20_000.0  # longer than the timeout: the timeout wins
        gate = TimelinePoint(1, 1)
        point = device._timeline(0).submit(None, [gate])
        with pytest.raises(SignalTimeout, match="did not reach 1 within 0.01 s"):
            point.wait(timeout=0.01)
        device.signal(gate)
        point.wait(timeout=10)
        assert point.done()


@pytest.mark.vulkan
@pytest.mark.vulkan_bda
@pytest.mark.skipif(not BDA, reason="device lacks bufferDeviceAddress")
def test_bda_table_in_host_memory_gives_the_same_results(kernels):
    with VulkanDevice(0, path="bda") as device:
        device.tuning.table_memory = "host"
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        cb = _chain(device, k, grid, 4)
        a, b = device.buffer(np.zeros(N, np.float32)), device.buffer(N * 4)
        device.submit(cb, [a, b]).wait()
        (inst,) = [i for pool in cb._instances.values() for i in pool]
        flags = device.memory_properties.memoryTypes[inst.table_allocation.memory_type]
        assert flags.propertyFlags & 0x2  # host-visible: replay rewrites it with numpy
        np.testing.assert_array_equal(a.to_numpy(np.float32), np.full(N, 4.0))


# --- the same-buffers replay: fast_submit.c, or its Python form where not built (issue 31) --
def _python_way(monkeypatch) -> None:
    """VulkanDevice.submit as the Python method and the Python short way: the steps used
    where fast_submit.c is not built."""
    from amdgpu.vulkan import command_buffer, fast_submit

    if fast_submit.MODULE is not None:
        monkeypatch.setattr(VulkanDevice, "submit", VulkanDevice.__dict__["submit"].slow)
    monkeypatch.setattr(command_buffer, "SHORT_WAY_IN_PYTHON", True)


@pytest.fixture(params=["compiled", "python"])
def way(request, monkeypatch):
    from amdgpu.vulkan import fast_submit

    if request.param == "compiled":
        if os.environ.get(fast_submit.ENV_VAR, "") not in ("", "0"):
            pytest.skip(f"{fast_submit.ENV_VAR} is set: the Python steps were asked for")
        if fast_submit.MODULE is None:  # scripts/setup.sh builds it
            pytest.fail(f"the compiled Vulkan submit is not loaded: {fast_submit.status()}")
        assert type(VulkanDevice.__dict__["submit"]) is fast_submit.MODULE.Submit
    else:
        _python_way(monkeypatch)
    return request.param


def _count_checked(monkeypatch) -> list:
    """Calls of the checked (slow) submit, counted."""
    from amdgpu.vulkan.command_buffer import CommandBuffer

    calls: list = []
    checked = CommandBuffer._submit_checked

    def counted(self, *args, **kw):
        calls.append(args[0])
        return checked(self, *args, **kw)

    monkeypatch.setattr(CommandBuffer, "_submit_checked", counted)
    return calls


@pytest.mark.vulkan
def test_same_buffer_replays_take_the_short_way(dev, kernels, way, monkeypatch):
    """Replays of the last submit's buffers skip the checks (one checked submit), on the
    compiled and the Python way alike: consecutive timeline values on the lane, results
    right, each replay after the lane's earlier work. Back to back (the last replay still
    pending) another instance is taken as it is only when its table already holds those
    buffers (no new recording on bda); one that holds others is rewritten first."""
    import time

    name, grid = _grid(kernels["addone"])
    k = dev.load(kernels["addone"]).kernel(name)
    cb = _chain(dev, k, grid, 2)  # each replay adds 2 to its first buffer
    x = [dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)]
    y = [dev.buffer(np.zeros(N, np.float32)), dev.buffer(N * 4)]
    calls = _count_checked(monkeypatch)
    points = []
    for _ in range(3):
        points.append(dev.submit(cb, x))
        points[-1].wait()
    assert len(calls) == 1
    assert [p.value for p in points] == list(range(points[0].value, points[0].value + 3))
    assert {(p.lane, p.timeline) for p in points} == {(0, dev._timeline(0))}
    # lane 0 held behind a gate: each replay is still pending when the next comes
    gate = TimelinePoint(1, 1)
    dev.barrier(0, wait=[gate])
    held = dev.submit(cb, x)  # the last instance (A), idle: taken as it is, after the gate
    time.sleep(0.1)
    assert not held.done()
    lane = dev._timeline(0)  # what it was submitted with: a wait on the lane's last value
    assert lane._submit.waitSemaphoreInfoCount == 1 and lane._waits[0].value == held.value - 1
    assert lane._waits[0].semaphore == lane.semaphore and lane._signal.value == held.value
    dev.submit(cb, y)  # new buffers, A pending: another instance (B) for y
    records = cb.record_count
    dev.signal(gate)
    dev.synchronize()
    del calls[:]
    handles = []
    for _ in range(2):  # drained: B, then (B pending) A: its table holds x, so rewritten
        dev.submit(cb, y)
        handles.append(cb.last_handle)
    dev.synchronize()
    assert len(calls) == 0
    np.testing.assert_array_equal(x[0].to_numpy(np.float32), np.full(N, 8, np.float32))
    np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 6, np.float32))
    for _ in range(2):  # drained: the last one, then (it pending) the other, holding y
        dev.submit(cb, y)
        handles.append(cb.last_handle)
    dev.synchronize()
    assert len(calls) == 0
    if dev.path == "bda":  # (baked paths record one more where the driver is slower)
        assert cb.record_count == records == 2 and len(set(handles)) == 2
    np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 10, np.float32))
    np.testing.assert_array_equal(x[0].to_numpy(np.float32), np.full(N, 8, np.float32))


@pytest.mark.vulkan
@needs_vulkan
def test_a_failed_driver_submit_says_the_same_on_both_ways(kernels, monkeypatch):
    """vkQueueSubmit2 failing on a same-buffers replay: the same one-line VulkanError from
    the compiled submit (its Port's function pointer returning VK_ERROR_DEVICE_LOST) as from
    the Python lane (vk.lib's call returning it), nothing counted; the next replay goes."""
    import ctypes

    from amdgpu.vulkan import fast_submit, timeline
    from amdgpu.vulkan.instance import take_validation_messages

    lost = -4  # VK_ERROR_DEVICE_LOST
    messages = []
    for compiled in (True, False):
        if compiled and fast_submit.MODULE is None:
            continue
        with VulkanDevice(0, path="descriptor_sets") as device, monkeypatch.context() as m:
            if not compiled:
                _python_way(m)
            name, grid = _grid(kernels["addone"])
            k = device.load(kernels["addone"]).kernel(name)
            cb = _chain(device, k, grid, 2)
            y = [device.buffer(np.zeros(N, np.float32)), device.buffer(N * 4)]
            device.submit(cb, y).wait()
            lane = device._timeline(0)
            before = lane.submitted
            if compiled:
                failing = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint32,
                                           ctypes.c_void_p, ctypes.c_uint64)(lambda *a: lost)
                port = lane._port
                ffi = timeline.vk.ffi
                a = timeline._address
                m.setattr(lane, "_port", fast_submit.MODULE.Port(
                    ctypes.cast(failing, ctypes.c_void_p).value, a(lane.queue),
                    a(lane._submit), a(ffi.addressof(lane._submit, "waitSemaphoreInfoCount")),
                    a(ffi.addressof(lane._submit, "commandBufferInfoCount")),
                    a(ffi.addressof(lane._command, "commandBuffer")),
                    a(ffi.addressof(lane._signal, "value")),
                    a(ffi.addressof(lane._waits[0], "semaphore")),
                    a(ffi.addressof(lane._waits[0], "value")), a(lane.semaphore)))
            else:
                class Failing:
                    real = timeline.vk.lib

                    def __getattr__(self, name):
                        return getattr(self.real, name)

                    @staticmethod
                    def vkQueueSubmit2(*args):
                        return lost

                m.setattr(timeline.vk, "lib", Failing())
            take_validation_messages()  # earlier tests' layer messages would join the line
            with pytest.raises(VulkanError) as error:
                device.submit(cb, y)
            assert lane.submitted == before
            m.undo()
            if compiled:
                assert lane._port is port
            device.submit(cb, y).wait()
            np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 4, np.float32))
            messages.append(str(error.value))
    assert messages and "\n" not in messages[0] and "VK_ERROR_DEVICE_LOST" in messages[0]
    assert len(set(messages)) == 1, messages


@pytest.mark.vulkan
@needs_vulkan
def test_same_buffer_replays_from_two_threads_and_under_a_trace_sink(kernels, way):
    """Two threads replaying one command buffer with the same buffers (the locks taken, or
    the call left to the Python method while the other holds one): every replay runs once,
    in lane order; with a trace sink on, every replay is recorded."""
    import threading

    from packets import trace

    with VulkanDevice(0, path="bda" if BDA else "descriptor_sets") as device:
        name, grid = _grid(kernels["addone"])
        k = device.load(kernels["addone"]).kernel(name)
        cb = _chain(device, k, grid, 2)
        y = [device.buffer(np.zeros(N, np.float32)), device.buffer(N * 4)]
        values: list = []

        def replay():
            for _ in range(40):
                values.append(device.submit(cb, y).value)

        threads = [threading.Thread(target=replay) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        device.synchronize()
        assert sorted(values) == list(range(1, 81))
        np.testing.assert_array_equal(y[0].to_numpy(np.float32), np.full(N, 160, np.float32))
        sink = trace.MemorySink()
        previous = trace.set_sink(sink)
        try:
            for _ in range(3):
                device.submit(cb, y)
        finally:
            trace.set_sink(previous)
        device.synchronize()
        records = [r for r in sink.records if isinstance(r, trace.VulkanSubmissionRecord)]
        assert [r.payload["signal_value"] for r in records] == [81, 82, 83]
