"""The driver conformance suite: the same tests against every lab device.

Areas: identity; every built-in workload against its reference, immediate and replayed;
timeline and barrier semantics across lanes; memory (buffers, views, copies; on HSA, pools
and access rules); faults and recovery; packet-trace capture; the backends' optimized paths.

Each test carries hardware-class markers; hwlab skips a test (with the reason) on a device
that lacks one. `runs_kernels` is what a virtual agent without an ISA executor lacks.
"""

from __future__ import annotations

import numpy as np
import pytest

from amdgpu.errors import (
    BufferRangeError,
    BufferStateError,
    DeviceError,
    HsaError,
    KernelArgumentError,
    QueueError,
    SignalTimeout,
)
from compiler import library
from tools.hwlab.fixtures import empty_submission, library_bundle

MLIR_WORKLOADS = ["saxpy", "chain-4", "reduction", "softmax", "matmul-f32", "matmul-f16", "mlp"]
OPENCL_WORKLOADS = ["fill", "copy", "saxpy-hidden", "lds-reduce"]
WAIT_S = 60.0


def assert_close(got, want, name: str) -> None:
    """Outputs against the reference (f16 programs compare loosely)."""
    assert len(got) == len(want), f"{name}: {len(got)} outputs, reference has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{name} output {i}: shape {g.shape}, reference {w.shape}"
        if np.issubdtype(w.dtype, np.floating):
            tol = 2e-2 if (g.dtype == np.float16 or w.dtype == np.float16) else 1e-4
            err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)), initial=0))
            assert np.allclose(g, w, rtol=tol, atol=tol), (
                f"{name} output {i}: max |error| {err:.3g} > tolerance {tol}"
            )
        else:
            assert (g == w).all(), f"{name} output {i}: {int((g != w).sum())} elements differ"


# --- identity --------------------------------------------------------------------------------
@pytest.mark.generic
def test_device_identity_matches_the_inventory(device, lab_device):
    assert device.spec == lab_device.spec
    assert device.backend == lab_device.backend
    assert device.driver == ("amdgpu" if device.backend == "hsa" else "vulkan")
    assert device.target == lab_device.target
    assert device.name == lab_device.name
    assert device.lanes >= 1
    for path, cap in device.paths.items():
        assert bool(cap.available) == lab_device.paths.get(path, bool(cap.available)), path


# --- workloads -------------------------------------------------------------------------------
@pytest.mark.generic
@pytest.mark.runs_kernels
@pytest.mark.parametrize("workload", MLIR_WORKLOADS)
def test_workload_immediate(device, workload):
    from amdgpu.workloads import run_workload

    result = run_workload(device, workload)
    assert result.correct, (
        f"{workload} on {device.spec}: max |error| {result.max_abs_error:.3g} vs the reference"
    )


@pytest.mark.generic
@pytest.mark.runs_kernels
@pytest.mark.parametrize("workload", MLIR_WORKLOADS)
def test_workload_replayed(device, workload):
    """Record the program once, replay it with two different binding tables."""
    from amdgpu.program import ProgramRunner

    name = workload.replace("-", "_")
    runner = ProgramRunner(device, library_bundle(device, name))
    cb = runner.record()
    for seed in (0, 1):
        inputs = library.example_inputs(name, seed)
        buffers = runner.allocate(inputs)
        try:
            runner.replay(buffers, lane=seed % device.lanes)
            device.synchronize(WAIT_S)
            assert_close(runner.read_outputs(buffers), library.reference(name, *inputs), workload)
        finally:
            buffers.free()
    assert runner.record() is cb  # replayed, never re-recorded


@pytest.mark.hsa
@pytest.mark.runs_kernels
@pytest.mark.parametrize("workload", OPENCL_WORKLOADS)
def test_opencl_workload_immediate(device, workload):
    from amdgpu.workloads import run_workload

    result = run_workload(device, workload)
    assert result.correct, (
        f"{workload} on {device.spec}: max |error| {result.max_abs_error:.3g} vs the reference"
    )


@pytest.mark.hsa
@pytest.mark.runs_kernels
@pytest.mark.parametrize("workload", OPENCL_WORKLOADS)
def test_opencl_workload_replayed(device, workload):
    """One command buffer over binding slots for the buffer arguments, submitted twice with
    new buffers (the scalars are recorded)."""
    name = workload.replace("-", "_")
    spec = library.spec(name)
    kernel = device.load(library_bundle(device, name)).kernel(spec.kernel)
    recorded = library.example_inputs(name, 0)
    cb = device.command_buffer()
    args, buffer_args = [], []
    for i, ((_, kind), value) in enumerate(zip(spec.args, recorded, strict=True)):
        if kind.startswith("buffer:"):
            args.append(cb.binding(len(buffer_args)))
            buffer_args.append(i)
        else:
            args.append(np.dtype(kind).type(value))
    cb.dispatch(kernel, spec.grid, spec.block, args)
    cb.finalize()
    for seed in (1, 2):
        values = library.example_inputs(name, seed)
        values = [values[i] if i in buffer_args else recorded[i] for i in range(len(values))]
        want = library.reference(name, *values)
        bufs = [device.buffer(np.asarray(values[i])) for i in buffer_args]
        device.submit(cb, bufs, lane=seed % device.lanes).wait(WAIT_S)
        got = [
            b.to_numpy(np.asarray(values[i]).dtype) for b, i in zip(bufs, buffer_args, strict=True)
        ]
        assert_close(got, [np.asarray(want[i]).reshape(-1) for i in buffer_args], workload)
        for b in bufs:
            b.free()


# --- timelines and barriers -------------------------------------------------------------------
@pytest.mark.generic
def test_timeline_advances_once_per_submission(device):
    points = {lane: [empty_submission(device, lane) for _ in range(3)] for lane in (0, 1)}
    for lane, pts in points.items():
        values = [p.value for p in pts]
        assert values == sorted(values) and len(set(values)) == 3, values
        assert values[1] - values[0] == 1 and all(p.lane == lane for p in pts)
    device.synchronize(WAIT_S)
    assert all(p.done() for pts in points.values() for p in pts)


@pytest.mark.generic
def test_cross_lane_wait_holds_until_the_other_lane_completes(device, hold):
    release = hold(0)
    p0 = empty_submission(device, 0)
    p1 = empty_submission(device, 1, wait=[p0])
    with pytest.raises(SignalTimeout):
        p1.wait(0.3)
    assert not p0.done() and not p1.done()
    release()
    p1.wait(WAIT_S)
    assert p0.done()


@pytest.mark.generic
def test_lanes_are_independent(device, hold):
    queues = getattr(device, "queue_count", None)
    if device.backend == "vulkan" and queues is not None and queues < 2:
        pytest.skip(
            f"{device.spec} has {queues} compute queue: its lanes share one VkQueue, where a "
            f"held lane holds the others"
        )
    release = hold(0)
    blocked = empty_submission(device, 0)
    free = empty_submission(device, 1)
    free.wait(10.0)  # lane 1 completes while lane 0 is held
    assert not blocked.done()
    with pytest.raises(SignalTimeout) as e:
        device.synchronize(timeout=0.3)
    assert "\n" not in str(e.value)
    release()
    device.synchronize(WAIT_S)
    assert blocked.done()


@pytest.mark.generic
def test_cross_lane_data_dependency(device):
    """fill on lane 0 -> copy on lane 1 (waits) -> copy on lane 0 (waits): the value arrives."""
    n = 4096
    a, b, c = device.buffer(n), device.buffer(n), device.buffer(n)
    fill = device.command_buffer()
    fill.fill(fill.binding(0), np.float32(5.0), n)
    fill.finalize()
    copy = device.command_buffer()
    copy.copy(copy.binding(0), copy.binding(1), n)
    copy.finalize()
    p0 = device.submit(fill, [a], lane=0)
    p1 = device.submit(copy, [b, a], lane=1, wait=[p0])
    p2 = device.submit(copy, [c, b], lane=0, wait=[p1])
    p2.wait(WAIT_S)
    assert (c.to_numpy(np.float32) == 5.0).all()


@pytest.mark.generic
def test_barrier_orders_commands_in_a_command_buffer(device):
    """fill A; barrier; copy A->B; barrier; overwrite half of A: B has the first value
    (read-after-write and write-after-read both ordered)."""
    n = 4096
    cb = device.command_buffer()
    cb.fill(cb.binding(0), np.float32(2.5), n)
    cb.barrier()
    cb.copy(cb.binding(1), cb.binding(0), n)
    cb.barrier()
    cb.fill(cb.binding(0).view(n // 2), np.float32(-1.0), n // 2)
    cb.finalize()
    for lane in (0, 1):
        a, b = device.buffer(n), device.buffer(n)
        device.submit(cb, [a, b], lane=lane).wait(WAIT_S)
        assert (b.to_numpy(np.float32) == 2.5).all()
        got = a.to_numpy(np.float32)
        assert (got[: n // 8] == 2.5).all() and (got[n // 8 :] == -1.0).all()


@pytest.mark.generic
def test_wait_timeout_is_a_signal_timeout(device, hold):
    release = hold(0)
    point = empty_submission(device, 0)
    with pytest.raises(SignalTimeout) as e:
        point.wait(0.2)
    assert "\n" not in str(e.value)
    release()
    point.wait(WAIT_S)


# --- memory ----------------------------------------------------------------------------------
@pytest.mark.generic
@pytest.mark.parametrize("nbytes", [1, 4, 4099, 1 << 20])
def test_buffer_round_trip(device, nbytes):
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    buf = device.buffer(data)
    assert buf.nbytes == nbytes
    np.testing.assert_array_equal(buf.to_numpy(), data)
    buf.write(data[::-1].copy())
    np.testing.assert_array_equal(buf.to_numpy(), data[::-1])
    buf.free()


@pytest.mark.generic
def test_buffer_views(device):
    a = device.buffer(np.arange(64, dtype=np.float32))
    v = a.view(16, 64)  # floats 4..19
    assert v.nbytes == 64 and v.address == a.address + 16 and v.is_view
    np.testing.assert_array_equal(v.to_numpy(np.float32), np.arange(4, 20))
    v.write(np.full(4, -1, np.float32), offset=8)  # floats 6..9
    w = v.view(8, 16)
    assert w.address == a.address + 24
    assert (w.to_numpy(np.float32) == -1).all()
    want = np.arange(64, dtype=np.float32)
    want[6:10] = -1
    np.testing.assert_array_equal(a.to_numpy(np.float32), want)
    with pytest.raises(BufferRangeError):
        a.view(200, 64)
    with pytest.raises(BufferRangeError):
        v.write(np.zeros(17, np.float32))
    with pytest.raises(DeviceError):
        v.free()
    a.free()
    with pytest.raises(DeviceError):
        v.to_numpy()


@pytest.mark.generic
def test_fill_and_copy_replayed_with_new_bindings(device):
    n = 1024
    cb = device.command_buffer()
    cb.copy(cb.binding(1), cb.binding(0), n * 4)
    cb.fill(cb.binding(2), np.float32(7.0), n * 4)
    cb.finalize()
    for seed in range(3):
        data = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        src, dst, filled = device.buffer(data), device.buffer(n * 4), device.buffer(n * 4)
        device.submit(cb, [src, dst, filled], lane=seed % 2).wait(WAIT_S)
        np.testing.assert_array_equal(dst.to_numpy(np.float32), data)
        assert (filled.to_numpy(np.float32) == 7.0).all()
        for b in (src, dst, filled):
            b.free()


@pytest.mark.hsa
def test_hsa_memory_pools(device):
    """Buffers in a GPU-agent global pool, kernargs in a CPU kernarg pool, staging in a
    fine-grained host pool (what ROCr needs for VRAM)."""
    p = device.provider
    gpu_pools = {x.handle: x for x in p.agent_pools(device.agent.handle)}
    cpu_pools = {x.handle: x for a in p.cpu_agents() for x in p.agent_pools(a.handle)}
    buf_pool = gpu_pools.get(device.buffer_pool)
    assert buf_pool is not None and buf_pool.runtime_alloc_allowed, "buffer pool not on the GPU"
    assert buf_pool.is_coarse_grained or buf_pool.is_fine_grained
    assert cpu_pools[device.kernarg_pool].is_kernarg
    assert cpu_pools[device.host_pool].is_fine_grained or cpu_pools[device.host_pool].is_kernarg
    buf = device.buffer(np.arange(1024, dtype=np.uint32))
    assert buf.address % max(buf_pool.alignment, 1) == 0
    buf.free()


@pytest.mark.hsa_virtual
def test_hsa_access_rules(device):
    """A GPU pool allocation is mapped for its owner only, until agents_allow_access."""
    from amdgpu.errors import MemoryFault

    p = device.provider
    buf = device.buffer(4096)
    cpu = p.cpu_agents()[0].handle
    p.memory.find(buf.address, 4096, device.agent.handle)  # the owner: mapped
    with pytest.raises(MemoryFault):
        p.memory.find(buf.address, 4096, cpu)
    p.agents_allow_access([device.agent.handle, cpu], buf.address)
    p.memory.find(buf.address, 4096, cpu)
    buf.free()


@pytest.mark.hsa_virtual
def test_copy_between_agents_of_a_two_gpu_system(lab_device):
    import amdgpu

    system = "amdgpu:virtual:" + ",".join([lab_device.target] * 2)
    with amdgpu.open(system + ":0") as d0, amdgpu.open(system + ":1") as d1:
        assert d0.agent.handle != d1.agent.handle
        data = np.arange(4096, dtype=np.float32)
        src, dst = d0.buffer(data), d1.buffer(data.nbytes)
        d0.enable_peer_access(d1)  # without it the copy is refused (tests/test_multi_gpu.py)
        d0.copy(dst, src).wait(WAIT_S)
        np.testing.assert_array_equal(dst.to_numpy(np.float32), data)


# --- faults and recovery ---------------------------------------------------------------------
@pytest.mark.hsa_virtual
def test_faulting_kernel_is_a_queue_error_and_the_rest_keeps_working(device, fresh_device):
    """An out-of-bounds fill (or, without an ISA executor, any kernel) puts lane 0 of a
    separately opened device in the error state; its lane 1 and the other device go on."""
    bad = fresh_device()
    fill = bad.load(library_bundle(bad, "fill")).kernel("fill")
    small = bad.buffer(64)
    bad.dispatch(fill, 1 << 16, 256, (small, np.float32(1.0), np.uint32(1 << 16)), lane=0)
    with pytest.raises(HsaError) as e:
        bad.synchronize(WAIT_S)
    assert isinstance(e.value, QueueError) and e.value.status != 0, repr(e.value)
    assert "\n" not in str(e.value)
    empty_submission(bad, 1).wait(WAIT_S)  # the same device's other lane
    with pytest.raises(QueueError):
        empty_submission(bad, 0)  # the faulted lane refuses new work
    buf = device.buffer(np.arange(16, dtype=np.float32))  # another device of the system
    empty_submission(device, 0).wait(WAIT_S)
    np.testing.assert_array_equal(buf.to_numpy(np.float32), np.arange(16))


@pytest.mark.hsa_virtual
def test_invalid_packet_is_a_queue_error(fresh_device):
    import packets

    dev = fresh_device()
    bad = bytearray(packets.barrier_and(dep_signals=[], barrier=True))
    bad[0] = 0x7F  # packet type 127: no AQL type
    dev.lanes_[0].publish(bytes(bad))
    empty_submission(dev, 1).wait(WAIT_S)
    with pytest.raises(QueueError) as e:
        dev.synchronize(WAIT_S)
    assert e.value.status != 0


@pytest.mark.generic
def test_wrong_arguments_are_refused_and_the_device_keeps_working(device):
    from amdgpu.program import ProgramRunner

    runner = ProgramRunner(device, library_bundle(device, "saxpy"))
    kernel = runner.kernels[0]
    with pytest.raises((KernelArgumentError, DeviceError)):
        device.dispatch(kernel, 1024, 64, ())  # no arguments at all
    with pytest.raises((KernelArgumentError, DeviceError)):
        device.dispatch(kernel, 1024, 64, ("not a buffer",) * 8)
    empty_submission(device, 0).wait(WAIT_S)


# --- the API both backends share: byte-exact fill, copy, update ----------------------------
SENTINEL = 0xEE
FILL_VALUES = [  # (value, the pattern bytes it stands for: amdgpu.fill's rule)
    (7, b"\x07"),
    (np.uint8(0xAB), b"\xab"),
    (np.uint16(0x1234), b"\x34\x12"),
    (np.float16(1.0), b"\x00\x3c"),
    (np.uint32(0xDEADBEEF), b"\xef\xbe\xad\xde"),
    (np.float32(1.0), b"\x00\x00\x80\x3f"),
    (np.int32(-2), b"\xfe\xff\xff\xff"),
    (b"\x01\x02", b"\x01\x02"),
]


def _sentinel_buffer(device, nbytes: int = 64):
    return device.buffer(np.full(nbytes, SENTINEL, np.uint8))


def _expect_fill(nbytes: int, offset: int, length: int, pattern: bytes) -> np.ndarray:
    want = np.full(nbytes, SENTINEL, np.uint8)
    unit = np.frombuffer(pattern, np.uint8)
    want[offset : offset + length] = np.tile(unit, length // len(pattern))
    return want


@pytest.mark.generic
@pytest.mark.parametrize("value,pattern", FILL_VALUES, ids=[repr(v) for v, _ in FILL_VALUES])
@pytest.mark.parametrize("offset,length", [(0, 64), (8, 16), (4, 4), (12, 0)])
def test_fill_is_byte_exact_direct_and_in_slots(device, value, pattern, offset, length):
    # direct: a view of a buffer whose other bytes must stay untouched
    buf = _sentinel_buffer(device)
    device.fill(buf.view(offset, length), value).wait(WAIT_S)
    np.testing.assert_array_equal(buf.to_numpy(), _expect_fill(64, offset, length, pattern))
    # a slot view, replayed over two buffers: the view's length is kept (not the rest)
    cb = device.command_buffer()
    cb.fill(cb.binding(0).view(offset, length), value)
    cb.finalize()
    for _ in range(2):
        other = _sentinel_buffer(device)
        device.submit(cb, [other]).wait(WAIT_S)
        np.testing.assert_array_equal(other.to_numpy(), _expect_fill(64, offset, length, pattern))
        other.free()
    buf.free()


@pytest.mark.generic
@pytest.mark.parametrize("offset,length,value,pattern", [
    (1, 5, 9, b"\x09"), (3, 6, np.uint16(0xBEEF), b"\xef\xbe"), (2, 12, b"abcd", b"abcd"),
])
def test_direct_fill_at_unaligned_ranges(device, offset, length, value, pattern):
    buf = _sentinel_buffer(device)
    device.fill(buf.view(offset, length), value).wait(WAIT_S)
    np.testing.assert_array_equal(buf.to_numpy(), _expect_fill(64, offset, length, pattern))
    buf.free()


@pytest.mark.generic
@pytest.mark.parametrize("doff,soff,length", [(0, 0, 64), (4, 8, 32), (12, 0, 4), (1, 3, 7)])
def test_copy_is_byte_exact_direct(device, doff, soff, length):
    data = np.arange(128, dtype=np.uint8)
    src, dst = device.buffer(data), _sentinel_buffer(device, 128)
    device.copy(dst.view(doff, length), src.view(soff, length)).wait(WAIT_S)
    want = np.full(128, SENTINEL, np.uint8)
    want[doff : doff + length] = data[soff : soff + length]
    np.testing.assert_array_equal(dst.to_numpy(), want)
    src.free(), dst.free()


@pytest.mark.generic
def test_copy_async_is_byte_exact_on_its_lane(device):
    """Device.copy_async on every backend (HSA: the copy engine; Vulkan: a copy command):
    the point is on the lane asked for, and a peer-access request for the device itself
    is accepted on every backend."""
    data = np.arange(128, dtype=np.uint8)
    src, dst = device.buffer(data), _sentinel_buffer(device, 128)
    lane = device.lanes - 1
    point = device.copy_async(dst.view(4, 32), src.view(8, 32), lane=lane)
    assert point.lane == lane
    point.wait(WAIT_S)
    want = np.full(128, SENTINEL, np.uint8)
    want[4:36] = data[8:40]
    np.testing.assert_array_equal(dst.to_numpy(), want)
    device.enable_peer_access(device)
    assert device.can_access_peer(device)
    src.free(), dst.free()


@pytest.mark.generic
@pytest.mark.parametrize("doff,soff,length", [(0, 0, 64), (4, 8, 32), (12, 0, 4)])
def test_copy_is_byte_exact_in_slots(device, doff, soff, length):
    cb = device.command_buffer()
    cb.copy(cb.binding(1).view(doff), cb.binding(0).view(soff), length)
    cb.finalize()
    for seed in range(2):
        data = np.random.default_rng(seed).integers(0, 256, 128, dtype=np.uint8)
        src, dst = device.buffer(data), _sentinel_buffer(device, 128)
        device.submit(cb, [src, dst]).wait(WAIT_S)
        want = np.full(128, SENTINEL, np.uint8)
        want[doff : doff + length] = data[soff : soff + length]
        np.testing.assert_array_equal(dst.to_numpy(), want)
        src.free(), dst.free()


@pytest.mark.generic
def test_updates_at_offsets_are_byte_exact(device):
    buf = _sentinel_buffer(device)
    buf.write(np.array([1, 2, 3], np.uint8), offset=5)
    buf.view(16, 8).write(np.uint32([0x11223344, 0x55667788]))
    want = np.full(64, SENTINEL, np.uint8)
    want[5:8] = [1, 2, 3]
    want[16:24] = np.uint32([0x11223344, 0x55667788]).view(np.uint8)
    np.testing.assert_array_equal(buf.to_numpy(), want)
    buf.free()


@pytest.mark.generic
def test_barrier_is_a_timeline_point_after_its_waits(device):
    from amdgpu.device import TimelinePoint

    p0 = empty_submission(device, 0)
    p1 = device.barrier(1, wait=[p0])
    assert isinstance(p1, TimelinePoint) and p1.lane == 1
    p1.wait(WAIT_S)
    assert p0.done() and p1.done()



@pytest.mark.generic
def test_a_lane_is_the_same_object_on_every_backend(device):
    from amdgpu.device import Lane, TimelinePoint

    lane = device.lane(device.lanes - 1)
    assert isinstance(lane, Lane) and lane is device.lane(device.lanes - 1)
    assert lane.index == device.lanes - 1 and lane.device is device
    before = lane.submitted
    src = device.buffer(np.arange(64, dtype=np.uint8))
    dst = device.buffer(64)
    p_fill = lane.fill(dst, np.uint8(9))
    p_copy = lane.copy(dst, src, 16, wait=[p_fill])
    p_bar = lane.barrier(wait=[empty_submission(device, 0)])
    points = [p_fill, p_copy, p_bar]
    assert all(isinstance(p, TimelinePoint) and p.lane == lane.index for p in points)
    assert [p.value for p in points] == [before + 1, before + 2, before + 3]
    assert lane.submitted == before + 3 and lane.point() == p_bar
    lane.synchronize(WAIT_S)
    assert lane.completed() >= lane.submitted and all(p.done() for p in points)
    got = dst.to_numpy()
    assert (got[:16] == np.arange(16)).all() and (got[16:] == 9).all()
    assert lane.point(before + 1) == p_fill
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(DeviceError):
            lane.point(bad)


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_a_lane_dispatches_and_replays(device):
    from amdgpu.program import ProgramRunner

    runner = ProgramRunner(device, library_bundle(device, "saxpy"))
    inputs = library.example_inputs("saxpy", 0)
    want = library.reference("saxpy", *inputs)
    lane = device.lane(device.lanes - 1)
    buffers = runner.allocate(inputs)
    (kernel, grid, block, args), = runner.launches(buffers)
    p = lane.dispatch(kernel, grid, block, args)
    assert p.lane == lane.index and p == lane.point()
    lane.synchronize(WAIT_S)
    assert_close(runner.read_outputs(buffers), want, "saxpy via lane.dispatch")
    again = runner.allocate(inputs)
    p = lane.submit(runner.record().finalize(), again.table)
    assert p.lane == lane.index
    p.wait(WAIT_S)
    assert_close(runner.read_outputs(again), want, "saxpy via lane.submit")


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_a_cached_launch_never_serves_an_equal_value_of_another_type(device):
    """1 == True == 1.0 as dict keys: a launch cached for int sizes must not let a bool or
    float geometry through (the normaliser refuses those)."""
    from amdgpu.program import ProgramRunner

    runner = ProgramRunner(device, library_bundle(device, "saxpy"))
    buffers = runner.allocate(library.example_inputs("saxpy", 0))
    (kernel, grid, block, args), = runner.launches(buffers)
    device.dispatch(kernel, grid, block, args).wait(WAIT_S)
    device.dispatch(kernel, grid, block, args).wait(WAIT_S)  # now cached

    g0 = grid[0] if isinstance(grid, (tuple, list)) else grid
    b0 = block[0] if isinstance(block, (tuple, list)) else block
    g2, b2 = (g0, 1), (b0, 1)
    device.dispatch(kernel, g2, b2, args).wait(WAIT_S)  # cached with a size of 1 in each
    device.dispatch(kernel, g0, b0, args).wait(WAIT_S)  # and as plain ints
    for g, b in (((g0, True), b2), (g2, (b0, True)), ((float(g0), 1), b2), (g2, (b0, 1.0)),
                 (float(g0), b0), (g0, float(b0)), ((g0, 1.0), b2)):
        with pytest.raises(KernelArgumentError):
            device.dispatch(kernel, g, b, args)
    device.dispatch(kernel, g2, b2, args).wait(WAIT_S)  # the device keeps working


# --- one error vocabulary: the same class for the same mistake on every backend ------------
@pytest.mark.generic
def test_the_same_mistakes_raise_the_same_errors(device):
    buf = device.buffer(64)
    for lane in (device.lanes, 99, -1, "0", None):
        with pytest.raises(DeviceError, match="lanes"):
            device.lane(lane)
    with pytest.raises(DeviceError):
        device.barrier(lane=device.lanes)
    with pytest.raises(KernelArgumentError):
        device.dispatch(None, 1)
    with pytest.raises(DeviceError, match="numpy scalar"):
        device.buffer(np.int32(5))
    for value in (300, 1.0, np.float64(1.0), True, "x", b"abc"):
        with pytest.raises(DeviceError):
            device.fill(buf, value)
    with pytest.raises(DeviceError, match="whole number"):
        device.fill(buf, np.float32(1.0), 6)
    with pytest.raises(BufferRangeError):
        device.fill(buf, 0, 65)
    cb = device.command_buffer()
    with pytest.raises(DeviceError, match="whole number"):
        cb.fill(cb.binding(0), np.float32(1.0), 6)
    with pytest.raises(DeviceError):
        cb.fill(cb.binding(0), 1.5)
    with pytest.raises(KernelArgumentError):
        cb.fill("not a buffer", 0)
    with pytest.raises(KernelArgumentError):
        cb.binding(-1)
    cb.fill(cb.binding(0), 1, 16)
    with pytest.raises(DeviceError, match="finalize"):
        device.submit(cb, [buf])
    cb.finalize()
    with pytest.raises(DeviceError, match="finalized"):
        cb.fill(cb.binding(0), 1, 16)
    with pytest.raises(KernelArgumentError, match="binding slot"):
        device.submit(cb, [])
    with pytest.raises(KernelArgumentError, match="smaller"):
        device.submit(cb, [device.buffer(8)])
    with pytest.raises(KernelArgumentError):
        device.submit(cb, ["not a buffer"])
    with pytest.raises(KernelArgumentError):
        device.submit(cb, [buf], wait=[1])
    gone = device.buffer(64)
    gone.free()
    with pytest.raises(BufferStateError, match="freed at .*test_device_conformance"):
        device.submit(cb, [gone])
    with pytest.raises(DeviceError, match="freed"):
        device.fill(gone, 0)
    device.submit(cb, [buf]).wait(WAIT_S)  # and the device keeps working
    assert (buf.to_numpy()[:16] == 1).all()
    buf.free()


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_bad_launch_geometry_is_a_kernel_argument_error(device):
    from amdgpu.program import ProgramRunner

    kernel = ProgramRunner(device, library_bundle(device, "saxpy")).kernels[0]
    for grid in (0, -4, 1.5, True, (1, 2, 3, 4), (), "64", None):
        with pytest.raises(KernelArgumentError):
            device.dispatch(kernel, grid, None, ())
    with pytest.raises(KernelArgumentError):
        device.dispatch(kernel, 64, None, "not a sequence")
    empty_submission(device, 0).wait(WAIT_S)


# --- trace capture ---------------------------------------------------------------------------
@pytest.mark.hsa
def test_trace_of_a_dispatch_shows_its_packet(fresh_device, trace_sink):
    import packets

    dev = fresh_device()
    fill = dev.load(library_bundle(dev, "fill")).kernel("fill")
    out = dev.buffer(4096)
    dev.dispatch(fill, 1024, 256, (out, np.float32(1.0), np.uint32(1024)), lane=0)
    recs = [r for r in trace_sink.records if isinstance(r, packets.trace.PacketRecord)]
    dispatches = [(r, r.decode()) for r in recs if _is_dispatch(r.decode())]
    assert dispatches, f"no kernel-dispatch packet among {len(recs)} traced packets"
    rec, d = dispatches[-1]
    assert d["grid_size_x"] == 1024 and d["workgroup_size_x"] == 256
    assert d["kernel_object"] == fill.kernel_object
    assert rec.symbol and "fill" in rec.symbol
    assert rec.reserve_ns <= rec.publish_ns


def _is_dispatch(decoded: dict) -> bool:
    """A kernel dispatch: the classic packet, or gfx1250's extended (clustered) one."""
    import packets

    return decoded["type"] == packets.PacketType.KERNEL_DISPATCH or (
        decoded.get("kind") == "ext_kernel_dispatch")


@pytest.mark.hsa
def test_trace_of_a_replay_shows_one_packet_block(fresh_device, trace_sink):
    import packets

    dev = fresh_device()
    fill = dev.load(library_bundle(dev, "fill")).kernel("fill")
    cb = dev.command_buffer()
    for value in (1.0, 2.0, 3.0):
        cb.dispatch(fill, 1024, 256, (cb.binding(0), np.float32(value), np.uint32(1024)))
    cb.finalize()
    release = None
    try:
        from tools.hwlab.fixtures import hold_lane

        release = hold_lane(dev, 0)  # nothing runs while the trace is read
        start = len(trace_sink.records)
        dev.submit(cb, [dev.buffer(4096)], lane=0)
        if getattr(cb, "path", "aql") == "pm4":  # one PM4_IB packet: its IB holds all three
            from packets import pm4

            recs = [r for r in trace_sink.records[start:]
                    if isinstance(r, packets.trace.PacketRecord)
                    and r.decode()["type"] == packets.PacketType.VENDOR_SPECIFIC]
            assert len(recs) == 1 and recs[0].kernarg, "want one PM4_IB packet with its IB"
            lines = pm4.describe_stream(np.frombuffer(recs[0].kernarg, np.uint32),
                                        pm4.family_of(dev.target))
            launched = [ln for ln in lines if "-> dispatch program" in ln]
            entry = fill.kernel_object + fill.info.descriptor.kernel_code_entry_byte_offset
            assert len(launched) == 3 and all(f"program 0x{entry:x}:" in ln for ln in launched)
            return
        recs = [
            r
            for r in trace_sink.records[start:]
            if isinstance(r, packets.trace.PacketRecord) and _is_dispatch(r.decode())
        ]
        assert len(recs) == 3, f"{len(recs)} kernel-dispatch packets traced, want 3"
        ids = [r.packet_id for r in recs]
        assert ids == list(range(ids[0], ids[0] + 3)), ids
        assert len({r.doorbell_ns for r in recs}) == 1, "replay rang the doorbell more than once"
        assert all(r.decode()["kernel_object"] == fill.kernel_object for r in recs)
    finally:
        if release is not None:
            release()


@pytest.mark.vulkan
def test_trace_of_a_vulkan_submission(device, trace_sink):
    import packets

    empty_submission(device, 1).wait(WAIT_S)
    subs = [r for r in trace_sink.records if isinstance(r, packets.trace.VulkanSubmissionRecord)]
    assert subs, "no Vulkan submission record"
    assert subs[-1].payload["device"] == device.spec and subs[-1].payload["lane"] == 1


# --- optimized paths -------------------------------------------------------------------------
@pytest.mark.vulkan
@pytest.mark.runs_kernels
@pytest.mark.parametrize("path", ["bda", "push_descriptors", "descriptor_sets"])
def test_vulkan_dispatch_path(fresh_device, lab_device, path):
    from amdgpu.workloads import run_workload

    if path != "descriptor_sets" and not lab_device.paths.get(path):
        pytest.skip(f"{lab_device.spec} lacks {path}: {lab_device.path_reasons.get(path, '')}")
    dev = fresh_device(path=path)
    assert dev.path == path
    result = run_workload(dev, "chain-4", replay=True)
    assert result.correct, f"chain-4 on path {path}: max |error| {result.max_abs_error:.3g}"


@pytest.mark.vulkan_bda
def test_vulkan_bda_addresses_are_real(device):
    assert device.path == "bda"
    a, b = device.buffer(256), device.buffer(256)
    assert a.address and b.address and a.address != b.address


@pytest.mark.isa_gfx11
def test_gfx11_code_object_is_wave32_and_runs(device):
    bundle = library_bundle(device, "lds_reduce")
    variant = bundle.variant_for(device.isa)
    from hsa.abi.codeobject import read_code_object

    info = read_code_object(variant.data).kernels["lds_reduce"]
    assert info.wavefront_size == 32 and info.descriptor.wavefront_size32
    from amdgpu.workloads import run_workload

    assert run_workload(device, "lds-reduce").correct


def _text_section(data: bytes) -> tuple[bytes, int]:
    """(bytes, address) of an ELF64's .text section."""
    import struct

    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, strndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names = secs[strndx][4]
    for sec in secs:
        if data[names + sec[0]: data.index(b"\0", names + sec[0])] == b".text":
            return data[sec[4]: sec[4] + sec[5]], sec[3]
    raise AssertionError("no .text section")


@pytest.mark.isa_gfx12
def test_gfx12_wmma_code_object_is_wave32_and_runs(device):
    """IREE's f16 matmul for gfx1201/gfx1250: wave32 code whose inner loop is gfx12 WMMA
    (16x16x16 on gfx1201, 16x16x32 on gfx1250), correct against numpy."""
    from amdgpu.workloads import run_workload
    from hsa.abi.codeobject import read_code_object
    from hsa.virtual.gfx12 import decoder

    variant = library_bundle(device, "matmul_f16").variant_for(device.isa)
    assert all(k.wavefront_size == 32 for k in read_code_object(variant.data).kernels.values())
    names = {i.name for i in decoder.decode_all(*_text_section(variant.data), device.target)}
    wmma = {"gfx1201": "v_wmma_f32_16x16x16_f16", "gfx1250": "v_wmma_f32_16x16x32_f16"}
    assert wmma[device.target] in names
    assert run_workload(device, "matmul-f16").correct


@pytest.mark.hsa_rocr
def test_rocr_agent_facts(device):
    from hsa.abi.targets import lookup

    assert device.provider.name == "rocr"
    assert lookup(device.target).name == device.target
    assert device.agent.isa.startswith(device.target)
    assert device.provider.version()


# --- replays with parameters (cb.param / cb.scalar, submit(..., params=...)) ----------------
VULKAN_DATA = __import__("pathlib").Path(__file__).parent / "data" / "vulkan"


def _param_fill_kernel(device, abis=("bda", "descriptors")):
    """A kernel (out: float*, value: float, n: uint) writing out[i] = value for i < n: the
    library's OpenCL `fill` on HSA, its GLSL twins (tests/data/vulkan, glslang's SPIR-V for
    both dispatch ABIs; the device picks its path) on Vulkan."""
    if device.backend == "vulkan":
        from types import SimpleNamespace

        files = {"bda": "param_fill_bda.spv", "descriptors": "param_fill.spv"}
        variants = [SimpleNamespace(kind="spirv", abi=abi, info={"binding_count": 1},
                                    data=(VULKAN_DATA / files[abi]).read_bytes())
                    for abi in abis]
        return device.load(SimpleNamespace(variants=variants)).kernel("main")
    return device.load(library_bundle(device, "fill")).kernel("fill")


@pytest.mark.vulkan
@pytest.mark.runs_kernels
@pytest.mark.parametrize("abi", ["bda", "descriptors"])
def test_vulkan_parameters_on_both_dispatch_abis(device, abi):
    """Scalars land in the push constants after IREE's 8 root dwords (bda) or from word 0
    (descriptors); grids go through the indirect buffer; a repeated value re-records
    nothing, a grid change never does."""
    kernel = _param_fill_kernel(device, (abi,))
    if abi == "bda" and kernel.path != "bda":
        pytest.skip(f"{device.spec} has no bda path")
    cb = device.command_buffer()
    cb.dispatch(kernel, grid=cb.param("g"),
                args=(cb.binding(0), cb.scalar("value", np.float32), np.uint32(4096)))
    cb.finalize()
    out = device.buffer(np.zeros(4096, np.float32))
    want = np.zeros(4096, np.float32)
    recorded = []
    for g, value in [(1000, 2.5), (3000, 2.5), (64, 2.5), (10, 7.0), (1000, 2.5)]:
        device.submit(cb, [out], params={"g": g, "value": value}).wait(WAIT_S)
        want[: -(-g // 64) * 64] = value  # whole workgroups of 64 run
        np.testing.assert_array_equal(out.to_numpy(np.float32), want, err_msg=f"grid={g}")
        recorded.append(cb.record_count)
    # a new scalar value records an instance; a grid change or a value seen before does not
    assert recorded == [1, 1, 1, 2, 2], recorded
    out.free()


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_replay_changes_a_scalar_and_the_grid_without_re_recording(device):
    """One recorded dispatch, grid and `n` from one parameter, the value from a scalar:
    each submit writes exactly [0, n) with its value (a grid one too small or a stale value
    would show), including grids that end in a partial workgroup."""
    kernel = _param_fill_kernel(device)
    cb = device.command_buffer()
    n = cb.param("n")
    cb.dispatch(kernel, grid=n, args=(cb.binding(0), cb.scalar("value", np.float32), n))
    cb.finalize()
    assert cb.params == {"n": "int", "value": "float32"}
    out = device.buffer(np.zeros(4096, np.float32))
    want = np.zeros(4096, np.float32)
    for nv, value in [(1000, 2.5), (3000, -1.0), (10, 7.0), (4096, 0.25), (1000, 2.5), (257, 3.0)]:
        device.submit(cb, [out], params={"n": nv, "value": value}).wait(WAIT_S)
        want[:nv] = value
        np.testing.assert_array_equal(out.to_numpy(np.float32), want, err_msg=f"n={nv}")
    # a grid smaller than n: only the grid's work-items write (the grid is patched too)
    cb2 = device.command_buffer()
    cb2.dispatch(kernel, grid=cb2.param("g"), args=(cb2.binding(0), np.float32(9.0),
                                                   np.uint32(4096)))
    cb2.finalize()
    for g in (192, 64, 1):
        device.submit(cb2, [out], params=[("g", g)]).wait(WAIT_S)
        want[:g] = 9.0
        np.testing.assert_array_equal(out.to_numpy(np.float32), want, err_msg=f"grid={g}")
    out.free()


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_a_float_scalar_as_a_grid_axis_is_refused_on_every_backend(device):
    """The recording base's one check: a grid axis takes an integer parameter; a float
    scalar there is a KernelArgumentError naming the kernel and the axis, before anything
    is recorded (the command buffer stays usable)."""
    kernel = _param_fill_kernel(device)
    cb = device.command_buffer()
    with pytest.raises(KernelArgumentError, match=r"grid axis 0 takes an integer parameter"):
        cb.dispatch(kernel, grid=cb.scalar("g", np.float32),
                    args=(cb.binding(0), np.float32(1.0), np.uint32(64)))
    cb.dispatch(kernel, grid=64, args=(cb.binding(0), np.float32(5.0), np.uint32(64)))
    cb.finalize()
    out = device.buffer(np.zeros(64, np.float32))
    device.submit(cb, [out]).wait(WAIT_S)
    np.testing.assert_array_equal(out.to_numpy(np.float32), np.full(64, 5.0, np.float32))
    out.free()


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_many_parameter_sites_patch_in_one_replay(device):
    """24 dispatches, each on its own slot view with its own scalar and one shared grid
    parameter: past the small-segment thresholds, so the vectorized patch does the work."""
    kernel = _param_fill_kernel(device)
    cb = device.command_buffer()
    n = cb.param("n")
    rows = 24
    for i in range(rows):
        cb.dispatch(kernel, grid=n, args=(cb.binding(0).view(i * 1024, 1024),
                                          cb.scalar(f"v{i}", np.float32), n))
    cb.finalize()
    out = device.buffer(np.zeros(rows * 256, np.float32))
    for nv, scale in [(256, 1.0), (100, -2.0), (33, 0.5)]:
        params = {"n": nv, **{f"v{i}": scale * (i + 1) for i in range(rows)}}
        device.submit(cb, [out], params=params).wait(WAIT_S)
        got = out.to_numpy(np.float32).reshape(rows, 256)
        for i in range(rows):
            assert (got[i, :nv] == np.float32(scale * (i + 1))).all(), (nv, i)
    out.free()


@pytest.mark.generic
@pytest.mark.runs_kernels
def test_bad_parameters_are_one_line_and_submit_nothing(device):
    kernel = _param_fill_kernel(device)
    cb = device.command_buffer()
    n = cb.param("n")
    with pytest.raises(KernelArgumentError, match="declared twice"):
        cb.scalar("n", np.float32)
    for bad in ("", 5, None):
        with pytest.raises(KernelArgumentError):
            cb.param(bad)
    with pytest.raises(KernelArgumentError, match="dtype"):
        cb.scalar("x", "not a type")
    with pytest.raises(KernelArgumentError):  # a buffer argument cannot be a number
        cb.dispatch(kernel, 64, args=(cb.scalar("p", np.float32), np.float32(1), np.uint32(1)))
    with pytest.raises(KernelArgumentError):  # a float grid
        cb.dispatch(kernel, cb.scalar("f", np.float32), args=(cb.binding(0), np.float32(1), n))
    cb.dispatch(kernel, grid=n, args=(cb.binding(0), cb.scalar("value", np.float32), n))
    cb.finalize()
    out = device.buffer(np.zeros(64, np.float32))
    lane = device.lane(0)
    before = lane.submitted
    cases = [
        (None, "never bound"),
        ({"n": 16}, "never bound"),
        ([("n", 16), ("n", 17), ("value", 1.0)], "bound twice"),
        ({"n": 16, "value": 1.0, "m": 3}, "unknown parameter"),
        ({"n": 16, "value": "1.0"}, "float32"),
        ({"n": 16.0, "value": 1.0}, "integer"),
        ({"n": 16, "value": out}, "float32"),
        ({"n": 16, "value": np.ones(3, np.float32)}, "shape"),
        ({"n": 16, "value": 1e39}, "cannot hold"),
        ({"n": True, "value": 1.0}, "int"),
        ({"n": 0, "value": 1.0}, "invalid"),
        ({"n": -5, "value": 1.0}, "invalid"),
        ({"n": 1 << 32, "value": 1.0}, "invalid"),
        ("n=16", "dict"),
    ]
    for params, match in cases:
        with pytest.raises(KernelArgumentError, match=match) as e:
            device.submit(cb, [out], params=params)
        assert "\n" not in str(e.value), str(e.value)
    assert lane.submitted == before  # nothing reached the lane
    device.submit(cb, [out], params={"n": 16, "value": np.float32(4.0)}).wait(WAIT_S)
    got = out.to_numpy(np.float32)
    assert (got[:16] == 4.0).all() and (got[16:] == 0).all()
    out.free()


@pytest.mark.hsa
@pytest.mark.runs_kernels
def test_grid_parameters_keep_the_hidden_arguments_consistent(device):
    """saxpy_hidden strides by get_local_size * get_num_groups, which the device libraries
    read from hidden_block_count / hidden_remainder: a replay whose grid comes from a
    parameter must give the bytes and results of an immediate dispatch of that grid
    (hsa.abi.hidden_args computes both), partial last workgroups included."""
    kernel = device.load(library_bundle(device, "saxpy_hidden")).kernel("saxpy_hidden")
    cb = device.command_buffer()
    cb.dispatch(kernel, grid=cb.param("g"), block=64,
                args=(cb.binding(0), cb.binding(1), cb.scalar("a", np.float32),
                      np.uint32(4096)))
    cb.finalize()
    x = np.arange(4096, dtype=np.float32)
    xb = device.buffer(x)
    for g, a in [(4096, 2.0), (100, 3.0), (257, 0.5), (64, -1.0), (1, 1.5)]:
        replayed, immediate = (device.buffer(np.ones(4096, np.float32)) for _ in range(2))
        device.submit(cb, [replayed, xb], params={"g": g, "a": a}).wait(WAIT_S)
        device.dispatch(kernel, g, 64, (immediate, xb, np.float32(a), np.uint32(4096))).wait(
            WAIT_S)
        np.testing.assert_array_equal(replayed.to_numpy(np.float32),
                                      immediate.to_numpy(np.float32), err_msg=f"grid {g}")
        # the patched kernarg template is the immediate dispatch's block, byte for byte
        layout = kernel.layout
        want = layout.pack([replayed, xb, np.float32(a), np.uint32(4096)], (g, 1, 1),
                           (64, 1, 1), 1, 0, device._timeline(0).queue.handle)
        seg = cb._segments[0]
        assert seg.template[: layout.size].tobytes() == want, f"grid {g}"
        assert int(seg.block.view(np.uint32)[3]) == g  # the packet's grid_size_x
        replayed.free()
        immediate.free()
    xb.free()


@pytest.mark.hsa
@pytest.mark.runs_kernels
def test_trace_of_a_parameter_replay_shows_the_patched_grids(fresh_device, trace_sink):
    """A traced replay records the packets as they were published: grid_size from the
    parameter, not the recording's placeholder."""
    import packets

    dev = fresh_device()
    fill = dev.load(library_bundle(dev, "fill")).kernel("fill")
    cb = dev.command_buffer()
    n = cb.param("n")
    for _ in range(3):
        cb.dispatch(fill, n, 256, (cb.binding(0), cb.scalar("v", np.float32), n))
    cb.finalize()
    out = dev.buffer(4096)
    for nv in (1000, 300):
        start = len(trace_sink.records)
        dev.submit(cb, [out], params={"n": nv, "v": 1.0}).wait(WAIT_S)
        grids = [
            r.decode()["grid_size_x"]
            for r in trace_sink.records[start:]
            if isinstance(r, packets.trace.PacketRecord)
            and r.decode()["type"] == packets.PacketType.KERNEL_DISPATCH
        ]
        assert grids == [nv] * 3, grids
