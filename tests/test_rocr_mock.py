"""RocrProvider end to end over a stand-in libhsa-runtime64 (tests/c/rocr_mock_runtime.c).

The mock is compiled against the real ROCr headers, so each C definition has the real
prototype; these tests then check that every value crosses the ctypes boundary intact
(handles, sizes, bools, strings, callbacks, out-pointers), that waits loop over early
returns, that callbacks stay alive, that errors map to the right exceptions, and that
`shut_down` releases everything. No GPU needed; skipped only where gcc or the headers are
absent.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time

import numpy as np
import pytest
from rocr_mock import build_mock_library

from amdgpu.errors import HsaError, HsaUnavailable, MemoryFault, QueueError, SignalTimeout
from hsa.provider import DeviceType, GlobalFlag, QueueType, Segment, SignalCondition
from hsa.rocr import RocrProvider, init_count
from hsa.status import (
    HSA_STATUS_ERROR_INVALID_AGENT,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
    HSA_STATUS_ERROR_INVALID_ISA,
    HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
    HSA_STATUS_ERROR_INVALID_QUEUE,
    HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
    HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES,
)
from packets import Ring, agent_dispatch, barrier_and, barrier_or, barrier_value, kernel_dispatch

pytestmark = pytest.mark.generic

LT, EQ, NE, GTE = SignalCondition.LT, SignalCondition.EQ, SignalCondition.NE, SignalCondition.GTE
FAULT_KERNEL_OBJECT = 0xFA017000
LIVE = ("init", "signals", "queues", "allocations", "readers", "executables")


@pytest.fixture(scope="module")
def mock_paths(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mockhsa")
    return build_mock_library(tmp, minimal=False), build_mock_library(tmp, minimal=True)


@pytest.fixture(scope="module")
def mock_lib(mock_paths):
    lib = ctypes.CDLL(str(mock_paths[0]))
    lib.mock_live.restype = ctypes.c_long
    lib.mock_live.argtypes = [ctypes.c_int]
    lib.mock_access_count.argtypes = [ctypes.c_void_p]
    lib.mock_dispatch_count.restype = ctypes.c_long
    lib.mock_dispatch_count.argtypes = [ctypes.c_void_p]
    return lib


def live(lib) -> dict[str, int]:
    return {name: lib.mock_live(i) for i, name in enumerate(LIVE)}


@pytest.fixture
def provider(mock_lib):
    p = RocrProvider(mock_lib)
    yield p
    p.shut_down()
    assert set(live(mock_lib).values()) == {0}, f"leaked: {live(mock_lib)}"


@pytest.fixture
def gpu(provider) -> int:
    return provider.gpu_agents()[0].handle


@pytest.fixture
def cpu(provider) -> int:
    return provider.cpu_agents()[0].handle


def ring_of(queue) -> Ring:
    return Ring(
        queue.ring,
        queue.size,
        queue.load_write_index,
        queue.add_write_index,
        queue.load_read_index,
        queue.doorbell,
    )


# --- runtime, agents, pools ---------------------------------------------------------------
def test_init_is_counted_and_given_back(mock_lib):
    before = init_count()
    a = RocrProvider(mock_lib)
    b = RocrProvider(mock_lib)
    assert mock_lib.mock_live(0) == 2 and init_count() == before + 2
    a.shut_down()
    a.shut_down()  # idempotent
    assert mock_lib.mock_live(0) == 1
    b.shut_down()
    assert mock_lib.mock_live(0) == 0 and init_count() == before


def test_version_reads_system_info(provider):
    assert provider.version().startswith("1.1 (")
    assert "build mock-rocr" in provider.version()


def test_agents_round_trip(provider):
    cpu, gpu = provider.agents()
    assert cpu.device_type == DeviceType.CPU and gpu.device_type == DeviceType.GPU
    assert cpu.handle == 0xC0000001 and gpu.handle == 0x60000001
    assert cpu.name == "Mock CPU 16-Core Processor" and cpu.isa == "" and cpu.vendor == "CPU"
    assert gpu.name == "gfx1100" and gpu.isa == "gfx1100" and gpu.vendor == "AMD"
    assert (gpu.wavefront_size, gpu.compute_units, gpu.node) == (32, 48, 1)
    assert (gpu.queue_min_size, gpu.queue_max_size) == (64, 131072)
    assert provider.gpu_agents() == [gpu]


def test_full_target_id_and_unknown_device_types(mock_lib, monkeypatch):
    monkeypatch.setenv("MOCK_HSA_GPU", "gfx942:sramecc+:xnack-")
    monkeypatch.setenv("MOCK_HSA_AIE", "1")
    p = RocrProvider(mock_lib)
    try:
        (gpu,) = p.gpu_agents()
        assert gpu.isa == "gfx942:sramecc+:xnack-" and gpu.name == "gfx942"
        assert len(p.agents()) == 2, "the device-type-3 agent is left out, not an error"
    finally:
        p.shut_down()


def test_pools_round_trip(provider, cpu, gpu):
    (kernarg,) = provider.agent_pools(cpu)
    assert kernarg.handle == 0x900000C1 and kernarg.agent == cpu
    assert kernarg.segment == Segment.GLOBAL
    assert kernarg.global_flags == GlobalFlag.KERNARG_INIT | GlobalFlag.FINE_GRAINED
    assert kernarg.is_kernarg and kernarg.is_fine_grained and kernarg.accessible_by_all
    assert (kernarg.size, kernarg.granule, kernarg.alignment) == (1 << 34, 4096, 65536)
    (device,) = provider.agent_pools(gpu)
    assert device.is_coarse_grained and not device.accessible_by_all
    assert device.runtime_alloc_allowed and device.size == 24 << 30


def test_agent_errors_are_hsa_errors(provider):
    with pytest.raises(HsaError) as info:
        provider.agent_pools(0x1234)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_AGENT
    assert info.value.call == "hsa_amd_agent_iterate_memory_pools"
    assert "HSA_STATUS_ERROR_INVALID_AGENT" in str(info.value)


# --- memory --------------------------------------------------------------------------------
def test_allocate_view_copy_free(provider, mock_lib, cpu, gpu):
    pool = provider.agent_pools(cpu)[0].handle
    a = provider.memory_pool_allocate(pool, 5000)
    b = provider.memory_pool_allocate(pool, 5000)
    assert a % 65536 == 0 and mock_lib.mock_live(3) == 2
    view = provider.host_view(a, 5000)
    assert view.dtype == np.uint8 and view.shape == (5000,) and view.flags.writeable
    view[:] = np.arange(5000) % 251
    provider.memory_copy(b, a, 5000)
    assert np.array_equal(provider.host_view(b, 5000), view)
    provider.agents_allow_access([gpu, cpu], a)
    assert mock_lib.mock_access_count(a) == 2
    provider.memory_pool_free(a)
    provider.memory_pool_free(b)
    assert mock_lib.mock_live(3) == 0
    with pytest.raises(HsaError) as info:
        provider.memory_pool_free(a)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT


def test_zero_byte_allocation_is_refused_before_rocr(provider, cpu):
    with pytest.raises(HsaError) as info:
        provider.memory_pool_allocate(provider.agent_pools(cpu)[0].handle, 0)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT


def test_async_copy_waits_for_dependencies(provider, cpu, gpu):
    pool = provider.agent_pools(cpu)[0].handle
    src, dst = provider.memory_pool_allocate(pool, 64), provider.memory_pool_allocate(pool, 64)
    provider.host_view(src, 64)[:] = 9
    dep, done = provider.signal_create(1), provider.signal_create(1)
    provider.memory_async_copy(dst, gpu, src, cpu, 64, [dep], done)
    with pytest.raises(SignalTimeout):
        provider.signal_wait(done, LT, 1, 0.03)
    assert not provider.host_view(dst, 64).any(), "nothing copied before the dependency"
    provider.signal_store(dep, 0)
    assert provider.signal_wait(done, LT, 1, 5.0) == 0
    assert provider.host_view(dst, 64).tolist() == [9] * 64
    provider.signal_store(done, 1)
    provider.memory_async_copy(src, cpu, dst, gpu, 8, [], done)  # no dependencies
    assert provider.signal_wait(done, LT, 1, 5.0) == 0


# --- signals -------------------------------------------------------------------------------
def test_signal_values_are_64_bit_and_signed(provider):
    s = provider.signal_create(-(2**62))
    assert provider.signal_load(s) == -(2**62)
    provider.signal_store(s, 2**63 - 1)
    assert provider.signal_load(s) == 2**63 - 1
    provider.signal_store(s, 5)
    provider.signal_add(s, 2**40)
    provider.signal_subtract(s, 2**40 + 7)
    assert provider.signal_exchange(s, 11) == -2
    assert provider.signal_load(s) == 11
    provider.signal_destroy(s)


def test_signal_wait_loops_over_early_returns(provider):
    # The mock returns from each wait after at most 2 ms, condition met or not.
    s = provider.signal_create(1)
    threading.Timer(0.05, provider.signal_store, (s, 0)).start()
    t0 = time.monotonic()
    assert provider.signal_wait(s, EQ, 0, 5.0) == 0
    assert time.monotonic() - t0 >= 0.04
    provider.signal_destroy(s)


@pytest.mark.parametrize("cond,compare", [(EQ, 0), (NE, 1), (LT, 1), (GTE, 2)])
def test_signal_wait_times_out(provider, cond, compare):
    s = provider.signal_create(1)
    with pytest.raises(SignalTimeout) as info:
        provider.signal_wait(s, cond, compare, 0.02)
    assert f"0x{s:x}" in str(info.value) and "\n" not in str(info.value)
    provider.signal_destroy(s)


def test_signal_wait_any(provider):
    a, b, c = (provider.signal_create(v) for v in (1, 1, 7))
    with pytest.raises(SignalTimeout):
        provider.signal_wait_any([a, b], [EQ, EQ], [0, 0], 0.02)
    assert provider.signal_wait_any([a, b, c], [EQ, EQ, GTE], [0, 0, 7], 1.0) == 2
    threading.Timer(0.02, provider.signal_store, (b, 0)).start()
    assert provider.signal_wait_any([a, b], [EQ, EQ], [0, 0], 5.0) == 1
    with pytest.raises(HsaError) as info:
        provider.signal_wait_any([a, b], [EQ], [0, 0], 1.0)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT
    for s in (a, b, c):
        provider.signal_destroy(s)


# --- queues --------------------------------------------------------------------------------
def test_queue_fields_and_ring(provider, mock_lib, gpu):
    q = provider.queue_create(gpu, 128, QueueType.SINGLE)
    assert q.size == 128 and q.queue_type == QueueType.SINGLE
    assert q.ring.shape == (128 * 64,) and q.ring.dtype == np.uint8
    assert q.base_address == q.ring.ctypes.data
    assert (q.ring.reshape(128, 64)[:, 0] == 1).all(), "slots start INVALID"
    assert q.load_write_index() == 0 and q.load_read_index() == 0
    assert q.add_write_index(3) == 0 and q.load_write_index() == 3
    q.store_write_index(0)
    assert q.amd_queue.write_dispatch_id == 0
    assert q.error is None
    provider.queue_destroy(q)
    assert mock_lib.mock_live(2) == 0


def test_queue_errors(provider, cpu, gpu):
    with pytest.raises(HsaError) as info:
        provider.queue_create(gpu, 100)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT
    with pytest.raises(HsaError) as info:
        provider.queue_create(cpu, 64)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_QUEUE_CREATION


def test_barriers_and_barrier_value_through_a_ring(provider, gpu):
    q = provider.queue_create(gpu, 64)
    ring = ring_of(q)
    gate, d1, d2, d3, d4 = (provider.signal_create(1) for _ in range(5))
    ring.publish(barrier_and(dep_signals=[gate], completion_signal=d1))
    ring.publish(barrier_or(dep_signals=[d1, 0], completion_signal=d2))
    ring.publish(barrier_value(signal=gate, value=0x40, mask=0xF0, cond=EQ, completion_signal=d3))
    ring.publish(
        kernel_dispatch(
            workgroup_size=(64, 1, 1),
            grid_size=(64, 1, 1),
            kernel_object=0x1000,
            kernarg_address=0x10000,
            completion_signal=d4,
        )
    )
    with pytest.raises(SignalTimeout):
        provider.signal_wait(d1, LT, 1, 0.03)
    provider.signal_store(gate, 0)
    assert provider.signal_wait(d2, LT, 1, 5.0) == 0
    with pytest.raises(SignalTimeout):
        provider.signal_wait(d3, LT, 1, 0.03)
    provider.signal_store(gate, 0x4F)
    assert provider.signal_wait_any([d4], [LT], [1], 5.0) == 0
    assert q.load_read_index() == 4
    provider.queue_destroy(q)
    for s in (gate, d1, d2, d3, d4):
        provider.signal_destroy(s)


def test_many_packets_wrap_a_small_ring(provider, mock_lib, gpu):
    q = provider.queue_create(gpu, 64)
    ring = ring_of(q)
    done = provider.signal_create(300)
    for _ in range(300):
        ring.publish(
            kernel_dispatch(
                workgroup_size=(1, 1, 1),
                grid_size=(1, 1, 1),
                kernel_object=0x1000,
                kernarg_address=0x10000,
                completion_signal=done,
            )
        )
    assert provider.signal_wait(done, EQ, 0, 10.0) == 0
    assert mock_lib.mock_dispatch_count(q.handle) == 300
    assert q.load_read_index() == q.load_write_index() == 300
    provider.queue_destroy(q)


def test_profiling_times_are_nanoseconds(provider, gpu):
    q = provider.queue_create(gpu, 64)
    provider.profiling_set_enabled(q, True)
    assert q.amd_queue.queue_properties & (1 << 3)
    gate, done = provider.signal_create(1), provider.signal_create(1)
    # The mock stamps CLOCK_MONOTONIC at 1 GHz: the ticks are time.monotonic_ns() values.
    before = time.monotonic_ns()
    ring_of(q).publish(barrier_and(dep_signals=[gate], completion_signal=done))
    time.sleep(0.02)
    opened = time.monotonic_ns()
    provider.signal_store(gate, 0)
    provider.signal_wait(done, LT, 1, 5.0)
    start, end = provider.dispatch_time(gpu, done)
    assert before <= start <= end, "the barrier started after it was published"
    assert end >= opened, "and ended after its gate opened"
    provider.profiling_set_enabled(q, False)
    assert not q.amd_queue.queue_properties & (1 << 3)
    provider.queue_destroy(q)
    for s in (gate, done):
        provider.signal_destroy(s)


def test_memory_fault_reaches_the_callback_with_the_address(provider, gpu):
    seen = []
    event = threading.Event()

    def on_error(status, queue):
        seen.append((status, queue, queue.error))
        event.set()

    q = provider.queue_create(gpu, 64, callback=on_error)
    done = provider.signal_create(1)
    ring_of(q).publish(
        kernel_dispatch(
            workgroup_size=(1, 1, 1),
            grid_size=(1, 1, 1),
            kernel_object=FAULT_KERNEL_OBJECT,
            kernarg_address=0xDEAD000,
            completion_signal=done,
        )
    )
    assert event.wait(5.0)
    status, queue, error = seen[0]
    assert status == HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION and queue is q
    assert isinstance(error, MemoryFault) and error is q.error
    assert error.address == 0xDEAD000
    assert provider.last_memory_fault["address"] == 0xDEAD000
    assert f"queue {q.id}" in str(error)
    provider.queue_destroy(q)
    provider.signal_destroy(done)


def test_wait_cut_short_by_a_memory_fault_says_so(provider, gpu):
    q = provider.queue_create(gpu, 64)  # no callback: the fault is seen through the wait
    done = provider.signal_create(1)
    ring_of(q).publish(
        kernel_dispatch(
            workgroup_size=(1, 1, 1),
            grid_size=(1, 1, 1),
            kernel_object=FAULT_KERNEL_OBJECT,
            kernarg_address=0xBAD0000,
            completion_signal=done,
        )
    )
    with pytest.raises(MemoryFault) as info:
        provider.signal_wait(done, LT, 1, 0.2)
    assert info.value.address == 0xBAD0000 and "0xbad0000" in str(info.value)
    assert isinstance(q.error, MemoryFault)
    with pytest.raises(SignalTimeout):  # reported once, then plain timeouts again
        provider.signal_wait(done, LT, 1, 0.01)
    provider.queue_destroy(q)
    provider.signal_destroy(done)


def test_bad_packet_is_a_queue_error(provider, gpu):
    event = threading.Event()
    q = provider.queue_create(gpu, 64, callback=lambda status, queue: event.set())
    done = provider.signal_create(1)
    ring_of(q).publish(agent_dispatch(type=0x8000, completion_signal=done))
    assert event.wait(5.0)
    assert isinstance(q.error, QueueError)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
    with pytest.raises(SignalTimeout):
        provider.signal_wait(done, LT, 1, 0.02)
    provider.queue_destroy(q)
    provider.signal_destroy(done)


def test_callback_that_raises_does_not_escape_into_c(provider, gpu):
    event = threading.Event()

    def bad_callback(status, queue):
        event.set()
        raise RuntimeError("user callback failed")

    q = provider.queue_create(gpu, 64, callback=bad_callback)
    ring_of(q).publish(agent_dispatch(type=0x8000))
    assert event.wait(5.0)
    for _ in range(100):
        if q.error is not None:
            break
        time.sleep(0.01)
    assert isinstance(q.error, QueueError)
    provider.queue_destroy(q)


def test_destroyed_queue_fails_loudly(provider, gpu):
    q = provider.queue_create(gpu, 64)
    provider.queue_destroy(q)
    with pytest.raises(QueueError):
        q.load_write_index()
    with pytest.raises(QueueError):
        q.doorbell(0)
    assert q.ring.size == 0
    with pytest.raises(HsaError) as info:
        provider.queue_destroy(q)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_QUEUE


def test_queue_callbacks_survive_garbage_collection(provider, gpu):
    event = threading.Event()
    q = provider.queue_create(gpu, 64, callback=lambda s, queue: event.set())
    gc.collect()
    ring_of(q).publish(agent_dispatch(type=0x8000))
    assert event.wait(5.0)
    provider.queue_destroy(q)


# --- executables ---------------------------------------------------------------------------
def _code_object(*names: str, mach: int = 0x41) -> bytes:
    """An ELF64 header for EM_AMDGPU and EF_AMDGPU_MACH `mach`, then the names."""
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[18:20] = (224).to_bytes(2, "little")
    header[48:52] = mach.to_bytes(4, "little")
    return bytes(header) + b"".join(b"\0" * 13 + n.encode() + b"\0" for n in names)


def test_executable_and_symbols(provider, mock_lib, gpu):
    reader = provider.code_object_reader_create_from_memory(_code_object("saxpy", "saxpy.kd"))
    gc.collect()  # the bytes ROCr reads from must outlive the Python argument
    exe = provider.executable_create()
    provider.executable_load_agent_code_object(exe, gpu, reader)
    provider.executable_freeze(exe)
    assert exe.frozen and exe.agent == gpu
    sym = provider.executable_get_symbol_by_name(exe, "saxpy.kd", gpu)
    assert ctypes.string_at(sym.kernel_object) == b"saxpy.kd", "found in the kept bytes"
    assert sym.kernel_object % 64 == 0
    assert (sym.kernarg_segment_size, sym.kernarg_segment_alignment) == (272, 16)
    assert (sym.group_segment_size, sym.private_segment_size) == (1024, 48)
    assert exe.kernels["saxpy.kd"] == sym
    with pytest.raises(HsaError) as info:
        provider.executable_get_symbol_by_name(exe, "missing.kd", gpu)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_SYMBOL_NAME
    provider.executable_destroy(exe)
    provider.code_object_reader_destroy(reader)
    assert mock_lib.mock_live(4) == mock_lib.mock_live(5) == 0


def test_garbage_code_object_is_refused(provider, gpu):
    with pytest.raises(HsaError) as info:
        provider.code_object_reader_create_from_memory(b"not an elf file")
    assert info.value.status == HSA_STATUS_ERROR_INVALID_CODE_OBJECT
    exe = provider.executable_create()
    for data, status in (
        (b"\x7fELF" + bytes(60), HSA_STATUS_ERROR_INVALID_CODE_OBJECT),
        (_code_object("k.kd", mach=0x4C), HSA_STATUS_ERROR_INVALID_ISA),
    ):
        reader = provider.code_object_reader_create_from_memory(data)
        with pytest.raises(HsaError) as info:
            provider.executable_load_agent_code_object(exe, gpu, reader)
        assert info.value.status == status
        provider.code_object_reader_destroy(reader)
    provider.executable_destroy(exe)


def test_shut_down_releases_what_the_caller_forgot(mock_lib):
    p = RocrProvider(mock_lib)
    gpu = p.gpu_agents()[0].handle
    p.queue_create(gpu, 64)
    p.signal_create(0)
    p.memory_pool_allocate(p.agent_pools(p.cpu_agents()[0].handle)[0].handle, 10)
    p.executable_create()
    p.code_object_reader_create_from_memory(_code_object("k.kd"))
    assert all(v > 0 for v in live(mock_lib).values())
    p.shut_down()
    assert set(live(mock_lib).values()) == {0}


# --- failures at start-up, and a minimal library ---------------------------------------------
def test_init_failure_is_diagnosed(mock_lib, monkeypatch):
    monkeypatch.setenv("MOCK_HSA_INIT_STATUS", str(HSA_STATUS_ERROR_OUT_OF_RESOURCES))
    with pytest.raises(HsaUnavailable) as info:
        RocrProvider(mock_lib)
    assert info.value.status == HSA_STATUS_ERROR_OUT_OF_RESOURCES
    assert "amdgpu:virtual" in str(info.value) and "\n" not in str(info.value)
    assert mock_lib.mock_live(0) == 0


def test_no_gpu_agent_is_unavailable_and_shuts_down(mock_lib, monkeypatch):
    monkeypatch.setenv("MOCK_HSA_NO_GPU", "1")
    with pytest.raises(HsaUnavailable) as info:
        RocrProvider(mock_lib)
    assert "no GPU agent" in str(info.value) and "amdgpu:virtual" in str(info.value)
    assert mock_lib.mock_live(0) == 0, "hsa_shut_down after the failed start"
    cpu_only = RocrProvider(mock_lib, require_gpu=False)
    assert [a.device_type for a in cpu_only.agents()] == [DeviceType.CPU]
    cpu_only.shut_down()


def test_minimal_library_reports_and_falls_back(mock_paths):
    lib = ctypes.CDLL(str(mock_paths[1]))
    p = RocrProvider(lib)
    try:
        caps = p.capabilities()
        for name in ("async_copy", "profiling", "signal_wait_any", "memory_fill"):
            assert not caps[name].available, name
            assert "not in" in caps[name].reason
        assert not caps["memory_fault_handler"].available
        a, b = p.signal_create(1), p.signal_create(1)
        threading.Timer(0.02, p.signal_store, (b, 0)).start()
        assert p.signal_wait_any([a, b], [EQ, EQ], [0, 0], 5.0) == 1, "polling fallback"
        with pytest.raises(SignalTimeout):
            p.signal_wait_any([a], [EQ], [0], 0.02)
        gpu = p.gpu_agents()[0].handle
        with pytest.raises(HsaError, match="hsa_amd_memory_async_copy"):
            p.memory_async_copy(0, gpu, 0, gpu, 0, [], a)
        q = p.queue_create(gpu, 64)
        with pytest.raises(HsaError, match="hsa_amd_profiling_set_profiler_enabled"):
            p.profiling_set_enabled(q, True)
    finally:
        p.shut_down()
