"""The HSA provider conformance suite (not a test module: test modules collect it with
`globals().update(suite_members())` and supply the `provider` fixture): signals, pools, queues
and barrier packets, executables and errors.

tests/test_provider_conformance.py runs it against the virtual AMD system ("virtual") and
against real ROCr ("rocr", skipped with ROCr's own reason where no GPU agent is present);
tests/test_rocr_conformance.py against RocrProvider over the stand-in ROCr library. Tests that
would crash a real runtime (ROCr dereferences signal handles without checking) run on the
virtual provider only, and say so.

The helpers are shared with the virtual system's own tests: `publish` (ROCr's publishing
protocol, written out), `raw_packet`, `compile_cl` and `CodeObjects` (KERNELS_CL per mcpu),
`load_executable`, `device_pool` and `kernarg_pool`.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from amdgpu.errors import HsaError, SignalTimeout
from hsa.provider import DeviceType, GlobalFlag, Segment, SignalCondition
from hsa.status import (
    HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
    HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
    HSA_STATUS_ERROR_INVALID_ALLOCATION,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
    HSA_STATUS_ERROR_INVALID_ISA,
    HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
    HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
    HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES,
)

try:  # the contract's names; fall back to the module while packets/__init__ fills in
    from packets import agent_dispatch, barrier_and, barrier_or, barrier_value
except ImportError:  # pragma: no cover
    from packets.build import agent_dispatch, barrier_and, barrier_or, barrier_value

LT, EQ, NE, GTE = SignalCondition.LT, SignalCondition.EQ, SignalCondition.NE, SignalCondition.GTE
PENDING_S = 0.05  # how long "still pending" is checked: a wait of this length must time out
DONE_S = 5.0  # generous upper bound for a completion that must happen


@pytest.fixture
def gpu(provider) -> int:
    gpus = provider.gpu_agents()
    assert gpus, "a provider must offer a GPU agent"
    return gpus[0].handle


@pytest.fixture
def queue(provider, gpu):
    q = provider.queue_create(gpu, 64)
    yield q
    provider.queue_destroy(q)


def virtual_only(provider, why: str) -> None:
    if provider.name != "virtual":
        pytest.skip(f"virtual provider only: {why}")


# --- publishing (ROCr's protocol, written out so the suite does not depend on packets.Ring)
def publish(queue, packet: bytes) -> int:
    idx = queue.add_write_index(1)
    deadline = time.monotonic() + DONE_S
    while idx - queue.load_read_index() >= queue.size:
        assert time.monotonic() < deadline, "ring stayed full"
        time.sleep(0.0005)
    off = (idx & (queue.size - 1)) * 64
    raw = np.frombuffer(packet, dtype=np.uint8)
    queue.ring[off + 4 : off + 64] = raw[4:]
    queue.ring[off : off + 4].view(np.uint32)[0] = raw[:4].view(np.uint32)[0]
    queue.doorbell(idx)
    return idx


def raw_packet(header: int, completion_signal: int = 0, words: dict | None = None) -> bytes:
    w = np.zeros(8, dtype=np.uint64)
    w[0] = header
    w[7] = completion_signal
    for i, v in (words or {}).items():
        w[i] = v
    return w.tobytes()


def pending(provider, signal: int, value: int = 1) -> bool:
    """True when `signal` still holds `value` after a short wait."""
    try:
        provider.signal_wait(signal, NE, value, PENDING_S)
    except SignalTimeout:
        return True
    return False


# --- signals -----------------------------------------------------------------------------
def test_signal_value_operations(provider):
    s = provider.signal_create(5)
    try:
        assert provider.signal_load(s) == 5
        provider.signal_store(s, -3)
        assert provider.signal_load(s) == -3
        provider.signal_add(s, 10)
        provider.signal_subtract(s, 2)
        assert provider.signal_load(s) == 5
        assert provider.signal_exchange(s, 42) == 5
        assert provider.signal_load(s) == 42
    finally:
        provider.signal_destroy(s)


@pytest.mark.parametrize(
    "cond,compare,value,holds",
    [(EQ, 3, 3, True), (EQ, 3, 4, False), (NE, 3, 4, True), (NE, 3, 3, False),
     (LT, 1, 0, True), (LT, 1, 1, False), (GTE, 2, 2, True), (GTE, 2, 1, False)],
)
def test_signal_wait_conditions(provider, cond, compare, value, holds):
    s = provider.signal_create(value)
    try:
        if holds:
            assert provider.signal_wait(s, cond, compare, 0.5) == value
        else:
            with pytest.raises(SignalTimeout):
                provider.signal_wait(s, cond, compare, 0.02)
    finally:
        provider.signal_destroy(s)


def test_signal_wait_wakes_on_store_from_another_thread(provider):
    s = provider.signal_create(1)
    try:
        t = threading.Timer(0.02, provider.signal_store, (s, 0))
        t.start()
        assert provider.signal_wait(s, EQ, 0, DONE_S) == 0
        t.join()
    finally:
        provider.signal_destroy(s)


def test_signal_wait_timeout_is_a_specific_error(provider):
    s = provider.signal_create(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(SignalTimeout) as info:
            provider.signal_wait(s, LT, 1, 0.05)
        assert time.monotonic() - t0 >= 0.04
        assert isinstance(info.value, HsaError)
    finally:
        provider.signal_destroy(s)


def test_signal_wait_any(provider):
    a, b = provider.signal_create(1), provider.signal_create(1)
    try:
        with pytest.raises(SignalTimeout):
            provider.signal_wait_any([a, b], [EQ, EQ], [0, 0], 0.02)
        threading.Timer(0.02, provider.signal_store, (b, 0)).start()
        assert provider.signal_wait_any([a, b], [EQ, EQ], [0, 0], DONE_S) == 1
    finally:
        provider.signal_destroy(a)
        provider.signal_destroy(b)


def test_invalid_signal_handles(provider):
    virtual_only(provider, "ROCr dereferences signal handles; an invalid one crashes")
    s = provider.signal_create(0)
    provider.signal_destroy(s)
    for op in (
        lambda: provider.signal_load(s),
        lambda: provider.signal_store(s, 1),
        lambda: provider.signal_destroy(s),
        lambda: provider.signal_wait(s, EQ, 0, 0.01),
        lambda: provider.signal_load(0x1234),
    ):
        with pytest.raises(HsaError) as info:
            op()
        assert info.value.status == HSA_STATUS_ERROR_INVALID_SIGNAL


# --- agents and pools --------------------------------------------------------------------
def test_agents_and_pools(provider):
    cpus, gpus = provider.cpu_agents(), provider.gpu_agents()
    assert cpus and gpus
    for g in gpus:
        assert g.device_type == DeviceType.GPU
        assert g.wavefront_size in (32, 64)
        assert g.queue_min_size <= 0x40 and g.queue_max_size >= 0x1000
        pools = provider.agent_pools(g.handle)
        device = [p for p in pools if p.segment == Segment.GLOBAL and p.is_coarse_grained]
        assert device, "every GPU has a coarse-grained device pool"
        assert device[0].runtime_alloc_allowed and device[0].granule == 4096
        assert not device[0].accessible_by_all
    kernarg = [p for c in cpus for p in provider.agent_pools(c.handle) if p.is_kernarg]
    assert kernarg, "the kernarg pool is a CPU-agent pool"
    assert kernarg[0].global_flags & GlobalFlag.FINE_GRAINED
    assert kernarg[0].alignment >= 16


def kernarg_pool(provider) -> int:
    return next(p.handle for c in provider.cpu_agents() for p in provider.agent_pools(c.handle)
                if p.is_kernarg)


def device_pool(provider, gpu) -> int:
    return next(p.handle for p in provider.agent_pools(gpu)
                if p.segment == Segment.GLOBAL and p.is_coarse_grained)


def test_allocate_view_copy_free(provider, gpu):
    host = provider.memory_pool_allocate(kernarg_pool(provider), 4096)
    dev = provider.memory_pool_allocate(device_pool(provider, gpu), 4096)
    back = provider.memory_pool_allocate(kernarg_pool(provider), 4096)
    try:
        assert host % 4096 == 0 and dev % 4096 == 0
        data = np.arange(1024, dtype=np.uint32)
        provider.host_view(host, 4096)[:] = data.view(np.uint8)
        provider.memory_copy(dev, host, 4096)
        provider.memory_copy(back, dev, 4096)
        assert np.array_equal(provider.host_view(back, 4096).view(np.uint32), data)
    finally:
        for a in (host, dev, back):
            provider.memory_pool_free(a)


def test_allocation_beyond_pool_is_refused(provider, gpu):
    pool = next(p for p in provider.agent_pools(gpu) if p.is_coarse_grained)
    with pytest.raises(HsaError) as info:
        provider.memory_pool_allocate(pool.handle, pool.size + 4096)
    assert info.value.status in (HSA_STATUS_ERROR_INVALID_ALLOCATION,
                                 HSA_STATUS_ERROR_OUT_OF_RESOURCES)


def test_async_copy_waits_for_its_dependency(provider, gpu):
    cpu = provider.cpu_agents()[0].handle
    src = provider.memory_pool_allocate(kernarg_pool(provider), 4096)
    dst = provider.memory_pool_allocate(kernarg_pool(provider), 4096)
    dep, done = provider.signal_create(1), provider.signal_create(1)
    try:
        provider.host_view(src, 4096)[:] = 7
        provider.host_view(dst, 4096)[:] = 0
        provider.memory_async_copy(dst, gpu, src, cpu, 4096, [dep], done)
        assert pending(provider, done)
        assert not provider.host_view(dst, 4096).any()
        provider.signal_store(dep, 0)
        provider.signal_wait(done, LT, 1, DONE_S)
        assert (provider.host_view(dst, 4096) == 7).all()
    finally:
        provider.signal_destroy(dep)
        provider.signal_destroy(done)
        provider.memory_pool_free(src)
        provider.memory_pool_free(dst)


# --- queues ------------------------------------------------------------------------------
def test_queue_starts_empty_and_invalid(provider, queue):
    assert queue.size == 64
    assert queue.ring.size == 64 * 64
    assert queue.load_read_index() == 0 and queue.load_write_index() == 0
    headers = queue.ring.view(np.uint16)[::32]
    assert (headers & 0xFF == 1).all(), "every slot starts INVALID"


@pytest.mark.parametrize("size", [0x30, 100, 0x41])
def test_queue_size_not_power_of_two(provider, gpu, size):
    with pytest.raises(HsaError) as info:
        provider.queue_create(gpu, size)
    assert info.value.status in (HSA_STATUS_ERROR_INVALID_ARGUMENT,
                                 HSA_STATUS_ERROR_INVALID_QUEUE_CREATION)


@pytest.mark.parametrize("size, status", [
    (0x20, HSA_STATUS_ERROR_INVALID_ARGUMENT),  # below the minimum (ROCr 5.2.3's status)
    (0x40000, HSA_STATUS_ERROR_OUT_OF_RESOURCES),  # above the maximum (ROCr 5.2.3's status)
])
def test_queue_size_out_of_range(provider, gpu, size, status):
    with pytest.raises(HsaError) as info:
        provider.queue_create(gpu, size)
    assert info.value.status == status


def test_barrier_and(provider, queue):
    a, b, done = (provider.signal_create(v) for v in (1, 1, 1))
    try:
        publish(queue, barrier_and(dep_signals=[a, 0, b], completion_signal=done))
        assert pending(provider, done)
        provider.signal_store(a, 0)
        assert pending(provider, done), "AND waits for every dependency"
        provider.signal_store(b, 0)
        provider.signal_wait(done, LT, 1, DONE_S)
        assert queue.load_read_index() == 1
        assert queue.ring.view(np.uint16)[0] & 0xFF == 1, "consumed slot is INVALID again"
    finally:
        for s in (a, b, done):
            provider.signal_destroy(s)


def test_barrier_and_with_no_dependencies_completes(provider, queue):
    done = provider.signal_create(1)
    try:
        publish(queue, barrier_and(dep_signals=[], completion_signal=done))
        provider.signal_wait(done, LT, 1, DONE_S)  # raises SignalTimeout if it never completes
        assert provider.signal_load(done) == 0  # completion decrements the signal by one
        assert queue.load_read_index() == 1
    finally:
        provider.signal_destroy(done)


def test_barrier_or(provider, queue):
    a, b, done = (provider.signal_create(v) for v in (1, 1, 1))
    try:
        # a 0 handle never satisfies an OR
        publish(queue, barrier_or(dep_signals=[0, a, b], completion_signal=done))
        assert pending(provider, done)
        provider.signal_store(b, 0)
        provider.signal_wait(done, LT, 1, DONE_S)
    finally:
        for s in (a, b, done):
            provider.signal_destroy(s)


def test_barrier_value(provider, queue):
    if not provider.capabilities()["barrier_value"].available:
        pytest.skip(provider.capabilities()["barrier_value"].reason)
    s, done = provider.signal_create(0x105), provider.signal_create(1)
    try:
        # waits until (value & 0xF0) >= 0x30
        publish(queue, barrier_value(signal=s, value=0x30, mask=0xF0, cond=GTE,
                                     completion_signal=done))
        assert pending(provider, done)
        provider.signal_store(s, 0x12F)  # & 0xF0 == 0x20: still below
        assert pending(provider, done)
        provider.signal_store(s, 0x031)
        provider.signal_wait(done, LT, 1, DONE_S)
    finally:
        provider.signal_destroy(s)
        provider.signal_destroy(done)


def test_packets_complete_in_order(provider, queue):
    gate, first, second = (provider.signal_create(1) for _ in range(3))
    try:
        publish(queue, barrier_and(dep_signals=[gate], completion_signal=first))
        publish(queue, barrier_and(dep_signals=[], completion_signal=second))
        assert pending(provider, second), "a later packet waits for the blocked one"
        provider.signal_store(gate, 0)
        provider.signal_wait(second, LT, 1, DONE_S)
        assert provider.signal_load(first) == 0
        assert queue.load_read_index() == 2
    finally:
        for s in (gate, first, second):
            provider.signal_destroy(s)


def test_two_queues_at_once(provider, gpu):
    q1, q2 = provider.queue_create(gpu, 64), provider.queue_create(gpu, 64)
    gate, d1, d2 = (provider.signal_create(1) for _ in range(3))
    try:
        publish(q1, barrier_and(dep_signals=[gate], completion_signal=d1))
        for _ in range(100):  # more packets than the ring holds: the processor must keep up
            provider.signal_store(d2, 1)
            publish(q2, barrier_and(dep_signals=[], completion_signal=d2))
            provider.signal_wait(d2, LT, 1, DONE_S)
        assert q2.load_read_index() == 100
        assert pending(provider, d1), "q1 stays blocked while q2 runs"
        provider.signal_store(gate, 0)
        provider.signal_wait(d1, LT, 1, DONE_S)
    finally:
        provider.queue_destroy(q1)
        provider.queue_destroy(q2)
        for s in (gate, d1, d2):
            provider.signal_destroy(s)


def test_many_packets_through_a_small_ring(provider, queue):
    done = provider.signal_create(300)
    try:
        for _ in range(300):
            publish(queue, barrier_and(dep_signals=[], completion_signal=done))
        provider.signal_wait(done, EQ, 0, DONE_S)
        assert queue.load_read_index() == 300 == queue.load_write_index()
    finally:
        provider.signal_destroy(done)


def _error_queue(provider, gpu):
    seen: list = []
    event = threading.Event()

    def callback(status, q):
        seen.append((status, q))
        event.set()

    return provider.queue_create(gpu, 64, callback=callback), seen, event


def test_bad_packet_type_puts_queue_in_error_state(provider, gpu):
    q, seen, event = _error_queue(provider, gpu)
    done, later = provider.signal_create(1), provider.signal_create(1)
    try:
        publish(q, raw_packet(header=7 | (1 << 8), completion_signal=done))
        publish(q, barrier_and(dep_signals=[], completion_signal=later))
        assert event.wait(DONE_S), "the error callback is called"
        status, cb_queue = seen[0]
        assert status == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
        assert cb_queue is q
        assert q.error is not None
        for s in (done, later):  # waiters time out, they do not hang
            with pytest.raises(SignalTimeout):
                provider.signal_wait(s, LT, 1, 0.05)
    finally:
        provider.queue_destroy(q)
        provider.signal_destroy(done)
        provider.signal_destroy(later)


def test_agent_dispatch_on_gpu_queue_is_an_error(provider, gpu):
    q, seen, event = _error_queue(provider, gpu)
    done = provider.signal_create(1)
    try:
        publish(q, agent_dispatch(type=0x8000, completion_signal=done))
        assert event.wait(DONE_S)
        assert seen[0][0] == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
        assert pending(provider, done)
    finally:
        provider.queue_destroy(q)
        provider.signal_destroy(done)


def test_profiling_timestamps(provider, queue, gpu):
    if not provider.capabilities()["profiling"].available:
        pytest.skip(provider.capabilities()["profiling"].reason)
    provider.profiling_set_enabled(queue, True)
    gate, done = provider.signal_create(1), provider.signal_create(1)
    try:
        publish(queue, barrier_and(dep_signals=[gate], completion_signal=done))
        time.sleep(0.01)
        provider.signal_store(gate, 0)
        provider.signal_wait(done, LT, 1, DONE_S)
        start, end = provider.dispatch_time(gpu, done)
        assert 0 < start <= end
    finally:
        provider.profiling_set_enabled(queue, False)
        provider.signal_destroy(gate)
        provider.signal_destroy(done)

# --- executables -------------------------------------------------------------------------
KERNELS_CL = r"""
__kernel void fill(__global unsigned int* out, unsigned int value, unsigned int n) {
  unsigned int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
                 + __builtin_amdgcn_workitem_id_x();
  if (i < n) out[i] = value;
}
__kernel void tile(__global float* out) {
  __local float t[256];
  unsigned int l = __builtin_amdgcn_workitem_id_x();
  t[l] = (float)l;
  __builtin_amdgcn_s_barrier();
  out[l] = t[255 - l];
}
__global int ga = 11;
__global int gb = 22;
__global int* __constant table[2] = {&ga, &gb};
__kernel void indirect(__global int* out, int i) { out[0] = *table[i]; }
"""


def compile_cl(source: str, mcpu: str, workdir) -> bytes:
    """OpenCL C -> linked code object (v5) with the ziglang clang and ld.lld."""
    src = workdir / f"k_{mcpu}.cl"
    obj = workdir / f"k_{mcpu}.o"
    out = workdir / f"k_{mcpu}.hsaco"
    src.write_text(source)
    zig = [sys.executable, "-m", "ziglang"]
    try:
        subprocess.run(
            [*zig, "clang", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa",
             f"-mcpu={mcpu}", "-nogpulib", "-cl-no-stdinc", "-O2", "-mcode-object-version=5",
             "-Wno-everything", "-c", str(src), "-o", str(obj)],
            check=True, capture_output=True, timeout=120,
        )
        subprocess.run([*zig, "ld.lld", "-shared", str(obj), "-o", str(out)],
                       check=True, capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot build a {mcpu} code object with ziglang: {exc}")
    return out.read_bytes()


class CodeObjects(dict):
    """mcpu -> code object of KERNELS_CL, compiled on first use."""

    def __init__(self, workdir):
        super().__init__()
        self.workdir = workdir

    def __missing__(self, mcpu: str) -> bytes:
        self[mcpu] = compile_cl(KERNELS_CL, mcpu, self.workdir)
        return self[mcpu]


@pytest.fixture(scope="session")
def kernel_objects(tmp_path_factory) -> dict[str, bytes]:
    return CodeObjects(tmp_path_factory.mktemp("codeobjects"))


def load_executable(provider, gpu, data: bytes, freeze: bool = True):
    reader = provider.code_object_reader_create_from_memory(data)
    exe = provider.executable_create()
    try:
        provider.executable_load_agent_code_object(exe, gpu, reader)
        if freeze:
            provider.executable_freeze(exe)
    except BaseException:
        provider.executable_destroy(exe)
        raise
    finally:
        provider.code_object_reader_destroy(reader)
    return exe


def _gfx1100(provider) -> int:
    for a in provider.gpu_agents():
        if a.isa.split(":")[0] == "gfx1100":
            return a.handle
    pytest.skip("no gfx1100 agent")


def test_load_executable_and_kernel_symbols(provider, kernel_objects):
    from hsa.abi.codeobject import read_code_object

    gpu = _gfx1100(provider)
    co = read_code_object(kernel_objects["gfx1100"])
    exe = load_executable(provider, gpu, kernel_objects["gfx1100"])
    try:
        fill = provider.executable_get_symbol_by_name(exe, "fill.kd", gpu)
        info = co.kernels["fill"]
        assert fill.kernel_object != 0 and fill.kernel_object % 64 == 0
        assert fill.kernarg_segment_size == info.kernarg_segment_size >= 16
        assert fill.kernarg_segment_alignment >= 8
        tile = provider.executable_get_symbol_by_name(exe, "tile.kd", gpu)
        assert tile.group_segment_size >= 1024, "256 floats of LDS"
        assert tile.kernel_object != fill.kernel_object
    finally:
        provider.executable_destroy(exe)


def test_unknown_symbol_is_a_specific_error(provider, kernel_objects):
    gpu = _gfx1100(provider)
    exe = load_executable(provider, gpu, kernel_objects["gfx1100"])
    try:
        with pytest.raises(HsaError) as info:
            provider.executable_get_symbol_by_name(exe, "no_such_kernel.kd", gpu)
        assert info.value.status == HSA_STATUS_ERROR_INVALID_SYMBOL_NAME
    finally:
        provider.executable_destroy(exe)


def test_code_object_for_another_isa_is_refused(provider, kernel_objects):
    gpu = _gfx1100(provider)
    with pytest.raises(HsaError) as info:
        load_executable(provider, gpu, kernel_objects["gfx942"])
    assert info.value.status in (HSA_STATUS_ERROR_INVALID_ISA,
                                 HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
                                 HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    if provider.name == "virtual":
        assert "gfx942" in str(info.value) and "gfx1100" in str(info.value)


def test_loading_into_a_frozen_executable_is_refused(provider, kernel_objects):
    gpu = _gfx1100(provider)
    exe = load_executable(provider, gpu, kernel_objects["gfx1100"])
    reader = provider.code_object_reader_create_from_memory(kernel_objects["gfx1100"])
    try:
        with pytest.raises(HsaError) as info:
            provider.executable_load_agent_code_object(exe, gpu, reader)
        assert info.value.status == HSA_STATUS_ERROR_FROZEN_EXECUTABLE
    finally:
        provider.code_object_reader_destroy(reader)
        provider.executable_destroy(exe)


def test_garbage_code_object_is_refused(provider, gpu):
    with pytest.raises(HsaError) as info:
        load_executable(provider, gpu, b"\x7fELF" + bytes(60))
    assert info.value.status == HSA_STATUS_ERROR_INVALID_CODE_OBJECT



def _needs_executor(provider, gpu) -> None:
    if provider.name != "virtual":
        return
    from hsa.abi.targets import lookup

    agent = next(a for a in provider.gpu_agents() if a.handle == gpu)
    cap = provider.capabilities()[f"executor:{lookup(agent.name).family}"]
    if not cap.available:
        pytest.skip(f"the virtual GPU cannot execute {agent.name} code yet: {cap.reason}")


def wait_or_fail(provider, queue, signal: int, what: str, timeout_s: float = 60.0) -> None:
    """Wait for `signal` < 1 in short slices, failing at once when the queue errs."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            provider.signal_wait(signal, LT, 1, 0.1)
            return
        except SignalTimeout:
            if queue.error is not None:
                pytest.fail(f"{what}: queue error: {queue.error}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not complete within {timeout_s} s")


def run_kernel(provider, gpu, kernel_objects, name: str, explicit: bytes, *, grid: int,
               block: int, out_bytes: int = 4096) -> np.ndarray:
    """Load KERNELS_CL for the agent, run `name` with an output buffer as its first argument
    followed by `explicit` (the other explicit args, packed), and return the output bytes.
    Hidden arguments come from the code object's metadata."""
    from hsa.abi.codeobject import read_code_object
    from packets import kernel_dispatch

    _needs_executor(provider, gpu)
    agent = next(a for a in provider.gpu_agents() if a.handle == gpu)
    data = kernel_objects[agent.isa]
    exe = load_executable(provider, gpu, data)
    sym = provider.executable_get_symbol_by_name(exe, f"{name}.kd", gpu)
    offsets = {a.value_kind: a.offset for a in read_code_object(data).kernels[name].args}
    out = provider.memory_pool_allocate(device_pool(provider, gpu), out_bytes)
    kernarg = provider.memory_pool_allocate(kernarg_pool(provider), 4096)
    staging = provider.memory_pool_allocate(kernarg_pool(provider), out_bytes)
    q = provider.queue_create(gpu, 64)
    done = provider.signal_create(1)
    try:
        provider.agents_allow_access([gpu], kernarg)
        provider.agents_allow_access([gpu], staging)
        provider.host_view(staging, out_bytes)[:] = 0
        provider.memory_copy(out, staging, out_bytes)
        args = provider.host_view(kernarg, 4096)
        args[:] = 0
        args[0:8].view(np.uint64)[0] = out
        args[8 : 8 + len(explicit)] = np.frombuffer(explicit, np.uint8)
        if "hidden_block_count_x" in offsets:
            args[offsets["hidden_block_count_x"]:][:4].view(np.uint32)[0] = -(-grid // block)
        if "hidden_group_size_x" in offsets:
            args[offsets["hidden_group_size_x"]:][:2].view(np.uint16)[0] = block
        publish(q, kernel_dispatch(
            workgroup_size=(block, 1, 1), grid_size=(grid, 1, 1), dims=1,
            kernel_object=sym.kernel_object, kernarg_address=kernarg,
            private_segment_size=sym.private_segment_size,
            group_segment_size=sym.group_segment_size, completion_signal=done))
        wait_or_fail(provider, q, done, name)
        provider.memory_copy(staging, out, out_bytes)
        return provider.host_view(staging, out_bytes).copy()
    finally:
        provider.queue_destroy(q)
        provider.signal_destroy(done)
        for a in (out, kernarg, staging):
            provider.memory_pool_free(a)
        provider.executable_destroy(exe)


def test_kernel_dispatch_runs_fill(provider, gpu, kernel_objects):
    """One real kernel end to end: load, kernargs from the metadata, dispatch, read back."""
    n = 300
    result = run_kernel(provider, gpu, kernel_objects, "fill",
                        np.array([0xC0FFEE, n], np.uint32).tobytes(), grid=n, block=64)
    words = result.view(np.uint32)
    assert (words[:n] == 0xC0FFEE).all() and not words[n:].any()


def test_kernel_uses_lds_and_a_workgroup_barrier(provider, gpu, kernel_objects):
    result = run_kernel(provider, gpu, kernel_objects, "tile", b"", grid=256, block=256)
    assert np.array_equal(result.view(np.float32)[:256], np.arange(255, -1, -1, dtype=np.float32))


@pytest.mark.parametrize("index,value", [(0, 11), (1, 22)])
def test_relocated_pointer_table(provider, gpu, kernel_objects, index, value):
    """`table` holds the addresses of two globals: correct only if the loader applied the
    R_AMDGPU_RELATIVE64 relocations at the address it loaded the code object."""
    result = run_kernel(provider, gpu, kernel_objects, "indirect",
                        np.array([index], np.int32).tobytes(), grid=1, block=1)
    assert int(result.view(np.int32)[0]) == value


#: The fixtures the suite's tests ask for besides `provider` (the collecting module's own).
FIXTURES = ("gpu", "queue", "kernel_objects")


def suite_members(*, runs_code: bool = True) -> dict[str, Any]:
    """The suite's tests and fixtures, for a test module's globals. `runs_code=False` leaves
    out the tests that execute machine code (they call `run_kernel`)."""
    members = {}
    for name, value in list(globals().items()):
        if name in FIXTURES:
            members[name] = value
        elif name.startswith("test_") and callable(value):
            names = getattr(getattr(value, "__code__", None), "co_names", ())
            if runs_code or "run_kernel" not in names:
                members[name] = value
    return members
