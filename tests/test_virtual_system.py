"""The virtual AMD system beyond the provider interface: kernel dispatch through the ISA
executor interface (with a stub executor), queue error states, per-agent memory access,
the loader's mapping and relocations, target-id rules, doorbell semantics and shutdown."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_suite import CodeObjects, publish, raw_packet

from amdgpu.errors import HsaError, IllegalInstruction, MemoryFault, SignalTimeout
from hsa.provider import Segment, SignalCondition
from hsa.status import (
    HSA_STATUS_ERROR_EXCEPTION,
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
    HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
    HSA_STATUS_ERROR_INVALID_AGENT,
    HSA_STATUS_ERROR_INVALID_ALLOCATION,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    HSA_STATUS_ERROR_INVALID_ISA,
    HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
    HSA_STATUS_ERROR_INVALID_QUEUE,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
    HSA_STATUS_ERROR_NOT_INITIALIZED,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES,
)
from hsa.virtual import VirtualProvider
from hsa.virtual import executor as executor_registry
from hsa.virtual.executor import Dispatch

try:
    from packets import barrier_and, kernel_dispatch
except ImportError:  # pragma: no cover
    from packets.build import barrier_and, kernel_dispatch

pytestmark = pytest.mark.hsa_virtual
LT, EQ = SignalCondition.LT, SignalCondition.EQ
DONE_S = 5.0


def virtual_threads() -> int:
    """Threads of virtual systems (queue processors, copy engines), by their names."""
    return sum(t.name.startswith("virtual-") for t in threading.enumerate())


@pytest.fixture
def vp():
    p = VirtualProvider(gpus=("gfx1100",))
    yield p
    p.shut_down()


@pytest.fixture(scope="module")
def shared_vp():
    p = VirtualProvider()
    yield p
    p.shut_down()


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, bytes]:
    """mcpu -> code object of KERNELS_CL, compiled on first use."""
    return CodeObjects(tmp_path_factory.mktemp("vobjects"))


def _load(p, agent, data):
    reader = p.code_object_reader_create_from_memory(data)
    exe = p.executable_create()
    try:
        p.executable_load_agent_code_object(exe, agent, reader)
    finally:
        p.code_object_reader_destroy(reader)
    p.executable_freeze(exe)
    return exe


def _pools(p, agent):
    return {("kernarg" if x.is_kernarg else "device" if x.is_coarse_grained else
             "group" if x.segment == Segment.GROUP else "system"): x.handle
            for x in p.agent_pools(agent)}


class StubExecutor:
    """Records each dispatch and writes its dispatch id to the first kernarg pointer."""

    family = "gfx11"

    def __init__(self, fail: BaseException | None = None):
        self.fail = fail
        self.seen: list[Dispatch] = []

    def run(self, dispatch: Dispatch, memory) -> None:
        self.seen.append(dispatch)
        if self.fail is not None:
            raise self.fail
        out = int(memory.gather(np.array([dispatch.kernarg_address]), np.uint64,
                                dispatch.agent)[0])
        memory.scatter(np.array([out]), np.array([dispatch.dispatch_id + 100], np.uint32),
                       dispatch.agent)


@pytest.fixture
def stub(monkeypatch):
    ex = StubExecutor()
    monkeypatch.setitem(executor_registry._EXECUTORS, "gfx11", lambda: ex)
    return ex


def _dispatch_setup(p, objects, group_segment_size=None):
    gpu = p.gpu_agents()[0].handle
    cpu = p.cpu_agents()[0].handle
    exe = _load(p, gpu, objects["gfx1100"])
    sym = p.executable_get_symbol_by_name(exe, "fill.kd", gpu)
    pools = _pools(p, cpu)
    out = p.memory_pool_allocate(_pools(p, gpu)["device"], 4096)
    kernarg = p.memory_pool_allocate(pools["kernarg"], 4096)
    p.host_view(kernarg, 8).view(np.uint64)[0] = out
    pkt_kwargs = dict(
        workgroup_size=(64, 1, 1), grid_size=(256, 1, 1), dims=1, kernel_object=sym.kernel_object,
        kernarg_address=kernarg, private_segment_size=sym.private_segment_size,
        group_segment_size=(sym.group_segment_size if group_segment_size is None
                            else group_segment_size),
    )
    return gpu, sym, out, kernarg, pkt_kwargs


def test_kernel_dispatch_reaches_the_executor(vp, objects, stub):
    gpu, sym, out, kernarg, kw = _dispatch_setup(vp, objects)
    q = vp.queue_create(gpu, 64)
    done = vp.signal_create(1)
    publish(q, barrier_and(dep_signals=[]))
    pid = publish(q, kernel_dispatch(completion_signal=done, **kw))
    vp.signal_wait(done, LT, 1, DONE_S)
    (d,) = stub.seen
    assert d.kernel_name == "fill"
    assert d.kernel_object == sym.kernel_object and d.kernarg_address == kernarg
    assert d.dispatch_id == pid == 1 and d.dims == 1
    assert d.workgroup_size == (64, 1, 1) and d.grid_size == (256, 1, 1)
    assert d.packet_address == q.base_address + 64 and d.queue_address == q.handle
    assert d.agent == gpu and d.target == "gfx1100" and d.wavefront_size == 32
    assert int(vp.memory.view(out, 4).view(np.uint32)[0]) == 101
    assert q.error is None


def test_executor_memory_fault_stops_the_queue(vp, objects, monkeypatch):
    fault = MemoryFault(HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
                        "fill: memory fault at 0xdead (pc 0x40)", address=0xDEAD)
    ex = StubExecutor(fail=fault)
    monkeypatch.setitem(executor_registry._EXECUTORS, "gfx11", lambda: ex)
    gpu, _, _, _, kw = _dispatch_setup(vp, objects)
    seen, event = [], threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: (seen.append(s), event.set()))
    done, later = vp.signal_create(1), vp.signal_create(1)
    publish(q, kernel_dispatch(completion_signal=done, **kw))
    publish(q, barrier_and(dep_signals=[], completion_signal=later))
    assert event.wait(DONE_S)
    assert seen == [HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION]
    assert q.error is fault
    with pytest.raises(SignalTimeout) as info:
        vp.signal_wait(later, LT, 1, 0.05)
    assert "memory fault at 0xdead" in str(info.value), "the timeout names the queue error"
    assert q.load_read_index() == 0, "the failed packet is not consumed"
    vp.queue_destroy(q)


def test_no_executor_for_the_family_is_a_queue_error(objects, monkeypatch):
    monkeypatch.setattr(executor_registry, "executor_for", lambda family: None)
    monkeypatch.setattr(executor_registry, "has_executor", lambda family: False)
    vp = VirtualProvider(gpus=("gfx1100",))
    try:
        gpu, _, _, _, kw = _dispatch_setup(vp, objects)
        event = threading.Event()
        q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
        publish(q, kernel_dispatch(**kw))
        assert event.wait(DONE_S)
        assert q.error.status == HSA_STATUS_ERROR_INVALID_ISA
        assert "gfx11" in str(q.error) and "fill" in str(q.error)
        assert not vp.capabilities()["executor:gfx11"].available
    finally:
        vp.shut_down()


def test_group_segment_smaller_than_the_kernel_needs(vp, objects, stub):
    gpu = vp.gpu_agents()[0].handle
    exe = _load(vp, gpu, objects["gfx1100"])
    sym = vp.executable_get_symbol_by_name(exe, "tile.kd", gpu)
    assert sym.group_segment_size >= 1024
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    publish(q, kernel_dispatch(workgroup_size=(256, 1, 1), grid_size=(256, 1, 1),
                               kernel_object=sym.kernel_object, kernarg_address=0x1000,
                               group_segment_size=0))
    assert event.wait(DONE_S)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
    assert "group_segment_size" in str(q.error) and "tile" in str(q.error)
    assert not stub.seen


def test_kernel_object_outside_memory_faults(vp, stub):
    gpu = vp.gpu_agents()[0].handle
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    publish(q, kernel_dispatch(workgroup_size=(1, 1, 1), grid_size=(1, 1, 1),
                               kernel_object=0x10, kernarg_address=0x1000))
    assert event.wait(DONE_S)
    assert isinstance(q.error, MemoryFault)
    assert not stub.seen


@pytest.mark.parametrize("bad", [
    {"setup": 0}, {"setup": 1, "wg": (0, 1, 1)}, {"setup": 1, "wg": (64, 2, 1)},
    {"setup": 2, "wg": (64, 32, 1), "grid": (64, 32, 1)},
])
def test_malformed_dispatch_packets(vp, stub, bad):
    gpu = vp.gpu_agents()[0].handle
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    wg = bad.get("wg", (64, 1, 1))
    grid = bad.get("grid", (64, 1, 1))
    w0 = 2 | (1 << 8) | (bad["setup"] << 16) | (wg[0] << 32) | (wg[1] << 48)
    w1 = wg[2] | (grid[0] << 32)
    w2 = grid[1] | (grid[2] << 32)
    publish(q, raw_packet(w0, words={1: w1, 2: w2, 4: 0x1000}))
    assert event.wait(DONE_S)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
    assert not stub.seen


def test_destroyed_dependency_signal_is_a_queue_error(vp):
    gpu = vp.gpu_agents()[0].handle
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    dep = vp.signal_create(1)
    publish(q, barrier_and(dep_signals=[dep]))
    time.sleep(0.02)
    vp.signal_destroy(dep)
    assert event.wait(DONE_S)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_SIGNAL


def test_doorbell_decides_what_runs(vp):
    """A packet is consumed only once the doorbell covers it, and only once its header is
    valid (another producer may ring for a later slot first)."""
    gpu = vp.gpu_agents()[0].handle
    q = vp.queue_create(gpu, 64)
    a, b = vp.signal_create(1), vp.signal_create(1)
    pkt_a = np.frombuffer(barrier_and(dep_signals=[], completion_signal=a), np.uint8)
    pkt_b = np.frombuffer(barrier_and(dep_signals=[], completion_signal=b), np.uint8)
    q.add_write_index(2)
    q.ring[64:128] = pkt_b  # slot 1 complete, slot 0 still INVALID
    q.doorbell(1)
    with pytest.raises(SignalTimeout):
        vp.signal_wait(b, LT, 1, 0.05)
    q.ring[4:64] = pkt_a[4:]
    q.ring[0:4] = pkt_a[:4]  # no second doorbell: slot 0 was already covered
    vp.signal_wait(b, LT, 1, DONE_S)
    assert vp.signal_load(a) == 0 and q.load_read_index() == 2
    # written but not rung: stays in the ring
    q.add_write_index(1)
    q.ring[128:192] = pkt_a
    vp.signal_store(a, 1)
    with pytest.raises(SignalTimeout):
        vp.signal_wait(a, LT, 1, 0.05)
    q.doorbell(2)
    vp.signal_wait(a, LT, 1, DONE_S)


def test_many_producers_one_queue(vp):
    gpu = vp.gpu_agents()[0].handle
    q = vp.queue_create(gpu, 64)
    done = vp.signal_create(4 * 200)

    def produce():
        for _ in range(200):
            publish(q, barrier_and(dep_signals=[], completion_signal=done))

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    vp.signal_wait(done, EQ, 0, DONE_S)
    assert q.load_read_index() == q.load_write_index() == 800


def test_device_memory_access_per_agent():
    vp = VirtualProvider(gpus=("gfx1100", "gfx1100"))
    try:
        g0, g1 = (a.handle for a in vp.gpu_agents())
        cpu = vp.cpu_agents()[0].handle
        buf = vp.memory_pool_allocate(_pools(vp, g0)["device"], 4096)
        host = vp.memory_pool_allocate(_pools(vp, cpu)["system"], 4096)
        vp.memory.find(buf, 4096, g0)
        with pytest.raises(MemoryFault):
            vp.memory.find(buf, 4096, g1)
        with pytest.raises(HsaError) as info:
            vp.memory_async_copy(host, cpu, buf, g1, 4096, [], 0)
        assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT
        with pytest.raises(HsaError) as info:
            vp.host_view(buf, 16)  # coarse-grained device memory is not host-mapped
        assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT
        vp.memory.find(host, 4096, g1)  # system memory is mapped for every GPU (ROCr)
        vp.agents_allow_access([g1], buf)
        vp.memory.find(buf, 4096, g1)
        done = vp.signal_create(1)
        vp.memory_async_copy(host, cpu, buf, g1, 4096, [], done)
        vp.signal_wait(done, LT, 1, DONE_S)
        with pytest.raises(HsaError) as info:
            vp.agents_allow_access([0x42], buf)
        assert info.value.status == HSA_STATUS_ERROR_INVALID_AGENT
    finally:
        vp.shut_down()


def test_pool_accounting_and_bad_frees(vp):
    gpu = vp.gpu_agents()[0].handle
    pools = _pools(vp, gpu)
    size = next(p.size for p in vp.agent_pools(gpu) if p.handle == pools["device"])
    half = vp.memory_pool_allocate(pools["device"], size // 2)
    with pytest.raises(HsaError) as info:
        vp.memory_pool_allocate(pools["device"], size // 2 + 4096)
    assert info.value.status == HSA_STATUS_ERROR_OUT_OF_RESOURCES
    vp.memory_pool_free(half)
    with pytest.raises(HsaError) as info:
        vp.memory_pool_free(half)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ALLOCATION
    with pytest.raises(HsaError) as info:
        vp.memory_pool_allocate(pools["group"], 64)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ALLOCATION
    with pytest.raises(HsaError) as info:
        vp.memory_pool_allocate(pools["device"], 0)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_ARGUMENT


def test_loader_maps_segments_and_applies_relocations(vp, objects):
    from hsa.abi.codeobject import read_code_object

    gpu = vp.gpu_agents()[0].handle
    co = read_code_object(objects["gfx1100"])
    exe = _load(vp, gpu, objects["gfx1100"])
    fill = vp.executable_get_symbol_by_name(exe, "fill.kd", gpu)
    base = fill.kernel_object - co.kernels["fill"].descriptor_address
    assert base % 4096 == 0
    kd = co.kernels["fill"].descriptor_address
    seg = next(s for s in co.segments if s.vaddr <= kd < s.vaddr + s.filesz)
    want = co.data[seg.offset + kd - seg.vaddr : seg.offset + kd - seg.vaddr + 64]
    assert vp.memory.read(fill.kernel_object, 64, gpu) == want
    relocs = [r for r in co.relocations if r.type == 13]
    assert relocs, "the pointer table needs R_AMDGPU_RELATIVE64"
    for r in relocs:
        assert int(vp.memory.view(base + r.offset, 8).view(np.uint64)[0]) == base + r.addend
    assert vp.kernel_name(fill.kernel_object) == "fill"
    with pytest.raises(MemoryFault):  # code memory belongs to the agent it was loaded for
        vp.memory.find(fill.kernel_object, 64, 0x1234)
    vp.executable_destroy(exe)
    assert vp.kernel_name(fill.kernel_object).startswith("<kernel at")
    with pytest.raises(MemoryFault):
        vp.memory.find(fill.kernel_object, 64)
    with pytest.raises(HsaError) as info:
        vp.executable_destroy(exe)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_EXECUTABLE


def test_target_id_rules(objects):
    vp = VirtualProvider(gpus=("gfx942", "gfx942:xnack+", "gfx1100"))
    try:
        g_default, g_xnack, g_1100 = vp.gpu_agents()
        assert g_default.isa == "gfx942:sramecc+:xnack-" and g_default.wavefront_size == 64
        assert g_xnack.isa == "gfx942:xnack+"
        assert vp.agent_pools(g_default.handle)
        # xnack "any" object loads everywhere gfx942
        for agent in (g_default, g_xnack):
            vp.executable_destroy(_load(vp, agent.handle, objects["gfx942"]))
        # xnack+ object: only on the xnack+ agent
        vp.executable_destroy(_load(vp, g_xnack.handle, objects["gfx942:xnack+"]))
        with pytest.raises(HsaError) as info:
            _load(vp, g_default.handle, objects["gfx942:xnack+"])
        assert info.value.status == HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS
        assert "xnack+" in str(info.value) and "xnack-" in str(info.value)
        with pytest.raises(HsaError) as info:
            _load(vp, g_1100.handle, objects["gfx942"])
        assert info.value.status == HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS
    finally:
        vp.shut_down()


def test_relocatable_object_is_refused(vp, tmp_path):
    import subprocess
    import sys

    src = tmp_path / "k.cl"
    src.write_text("__kernel void k(__global int* o) { o[0] = 1; }")
    obj = tmp_path / "k.o"
    subprocess.run([sys.executable, "-m", "ziglang", "clang", "-x", "cl", "-cl-std=CL2.0",
                    "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-nogpulib",
                    "-cl-no-stdinc", "-c", str(src), "-o", str(obj)], check=True)
    with pytest.raises(HsaError) as info:
        _load(vp, vp.gpu_agents()[0].handle, obj.read_bytes())
    assert "ld.lld" in str(info.value)


def test_queue_handles_and_types(vp):
    gpu = vp.gpu_agents()[0].handle
    cpu = vp.cpu_agents()[0].handle
    with pytest.raises(HsaError) as info:
        vp.queue_create(cpu, 64)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_AGENT
    q = vp.queue_create(gpu, 0x20000)
    words = vp.memory.view(q.handle, 256).view(np.uint64)
    assert int(words[1]) == q.base_address and int(words[2]) == q.doorbell_signal
    assert int(words[3]) & 0xFFFFFFFF == 0x20000 and int(words[4]) == q.id
    with pytest.raises(HsaError) as info:
        vp.signal_destroy(q.doorbell_signal)
    assert "doorbell" in str(info.value)
    vp.queue_destroy(q)
    with pytest.raises(HsaError) as info:
        vp.queue_destroy(q)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_QUEUE
    with pytest.raises(HsaError) as info:  # ringing a destroyed queue's doorbell
        q.doorbell(0)
    assert info.value.status == HSA_STATUS_ERROR_INVALID_SIGNAL


def test_destroy_wakes_a_blocked_processor_and_shutdown_ends_everything():
    before = virtual_threads()
    vp = VirtualProvider()
    gpu = vp.gpu_agents()[0].handle
    dep = vp.signal_create(1)
    queues = [vp.queue_create(gpu, 64) for _ in range(3)]
    for q in queues:
        publish(q, barrier_and(dep_signals=[dep]))
    done = vp.signal_create(1)
    cpu = vp.cpu_agents()[0].handle
    host = vp.memory_pool_allocate(_pools(vp, cpu)["system"], 4096)
    vp.memory_async_copy(host, cpu, host, cpu, 4096, [dep], done)  # copy engine blocked too
    assert virtual_threads() >= before + 4
    vp.queue_destroy(queues[0])
    assert virtual_threads() == before + 3
    vp.shut_down()
    assert virtual_threads() == before
    with pytest.raises(HsaError) as info:
        vp.queue_create(gpu, 64)
    assert info.value.status == HSA_STATUS_ERROR_NOT_INITIALIZED


def test_capabilities(vp):
    caps = vp.capabilities()
    for name in ("barrier_value", "profiling", "async_copy"):
        assert caps[name].available
    assert "executor:gfx11" in caps
    assert not caps["vmem"].available and caps["vmem"].reason


def test_profiling_records_kernel_dispatch_time(vp, objects, stub):
    gpu, _, _, _, kw = _dispatch_setup(vp, objects)
    q = vp.queue_create(gpu, 64)
    done = vp.signal_create(1)
    publish(q, kernel_dispatch(completion_signal=done, **kw))
    vp.signal_wait(done, LT, 1, DONE_S)
    assert vp.dispatch_time(gpu, done) == (0, 0), "no timestamps unless profiling is on"
    vp.profiling_set_enabled(q, True)
    vp.signal_store(done, 1)
    t0 = time.monotonic_ns()
    publish(q, kernel_dispatch(completion_signal=done, **kw))
    vp.signal_wait(done, LT, 1, DONE_S)
    start, end = vp.dispatch_time(gpu, done)
    assert t0 <= start <= end <= time.monotonic_ns()


def test_error_callback_may_destroy_its_queue(vp):
    gpu = vp.gpu_agents()[0].handle
    destroyed = threading.Event()

    def callback(status, q):
        vp.queue_destroy(q)  # from the processor thread itself
        destroyed.set()

    threads = virtual_threads()
    q = vp.queue_create(gpu, 64, callback=callback)
    publish(q, raw_packet(header=0xFF))
    assert destroyed.wait(DONE_S)
    deadline = time.monotonic() + DONE_S
    while virtual_threads() > threads and time.monotonic() < deadline:
        time.sleep(0.005)
    assert virtual_threads() == threads
    assert q not in vp.queues()


def test_packets_ring_publishes_into_a_virtual_queue(vp):
    import packets

    gpu = vp.gpu_agents()[0].handle
    q = vp.queue_create(gpu, 64)
    ring = packets.Ring(q.ring, q.size, q.load_write_index, q.add_write_index,
                        q.load_read_index, q.doorbell, queue_id=q.id, timeout_s=DONE_S)
    done = vp.signal_create(1000)
    block = packets.barrier_and_batch(completion_signal=done, count=40)
    for _ in range(25):  # 1000 packets through 64 slots: wrap-around and waits for room
        ring.publish_many(block)
    vp.signal_wait(done, EQ, 0, DONE_S)
    assert q.load_read_index() == 1000


def test_broken_executor_package_is_a_queue_error(vp, objects, monkeypatch):
    def broken(family):
        raise SyntaxError("half-written module")

    monkeypatch.setattr(executor_registry, "executor_for", broken)
    gpu, _, _, _, kw = _dispatch_setup(vp, objects)
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    publish(q, kernel_dispatch(**kw))
    assert event.wait(DONE_S)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_ISA and "half-written" in str(q.error)


@given(st.lists(st.tuples(st.sampled_from(["store", "add", "sub", "exchange", "cas"]),
                          st.integers(-(1 << 63), (1 << 63) - 1)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_signal_ops_match_a_model(shared_vp, ops):
    vp = shared_vp
    s = vp.signal_create(0)
    model = 0
    try:
        for op, v in ops:
            if op == "store":
                vp.signal_store(s, v)
                model = v
            elif op == "add":
                vp.signal_add(s, v)
                model = _wrap(model + v)
            elif op == "sub":
                vp.signal_subtract(s, v)
                model = _wrap(model - v)
            elif op == "exchange":
                assert vp.signal_exchange(s, v) == model
                model = v
            else:
                expected = model if v % 2 else v
                assert vp.signal_cas(s, expected, v) == model
                if expected == model:
                    model = v
            assert vp.signal_load(s) == model
    finally:
        vp.signal_destroy(s)


def _wrap(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v



@pytest.mark.parametrize("overlap,order", [("serial", [0, 1, 2, 3]), ("reverse", [2, 1, 0, 3])])
def test_dispatches_without_barrier_bit_may_overlap(objects, stub, overlap, order):
    vp = VirtualProvider(overlap=overlap)
    try:
        gpu, _, _, _, kw = _dispatch_setup(vp, objects)
        q = vp.queue_create(gpu, 64)
        done = vp.signal_create(4)
        block = b"".join(
            kernel_dispatch(completion_signal=done, barrier=barrier, **kw)
            for barrier in (True, False, False, True)
        )
        import packets

        ring = packets.Ring(q.ring, q.size, q.load_write_index, q.add_write_index,
                            q.load_read_index, q.doorbell)
        ring.publish_many(np.frombuffer(block, np.uint8).reshape(4, 64))
        vp.signal_wait(done, EQ, 0, DONE_S)
        assert [d.dispatch_id for d in stub.seen] == order
        assert q.load_read_index() == 4 and q.error is None
    finally:
        vp.shut_down()


def test_invalid_handles_raise_specific_errors(vp):
    from hsa.provider import Executable
    from hsa.status import (
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
    )

    gpu = vp.gpu_agents()[0].handle
    ghost = Executable(handle=0xBAD)
    cases = [
        (lambda: vp.agent_pools(0xBAD), HSA_STATUS_ERROR_INVALID_AGENT),
        (lambda: vp.queue_create(0xBAD, 64), HSA_STATUS_ERROR_INVALID_AGENT),
        (lambda: vp.memory_pool_allocate(0xBAD, 64), HSA_STATUS_ERROR_INVALID_MEMORY_POOL),
        (lambda: vp.memory_pool_free(0xBAD), HSA_STATUS_ERROR_INVALID_ALLOCATION),
        (lambda: vp.code_object_reader_destroy(0xBAD),
         HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER),
        (lambda: vp.executable_load_agent_code_object(vp.executable_create(), gpu, 0xBAD),
         HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER),
        (lambda: vp.executable_freeze(ghost), HSA_STATUS_ERROR_INVALID_EXECUTABLE),
        (lambda: vp.executable_get_symbol_by_name(ghost, "k.kd", gpu),
         HSA_STATUS_ERROR_INVALID_EXECUTABLE),
        (lambda: vp.dispatch_time(gpu, 0xBAD), HSA_STATUS_ERROR_INVALID_SIGNAL),
        (lambda: vp.memory_async_copy(0, gpu, 0, gpu, 0, [0xBAD], 0),
         HSA_STATUS_ERROR_INVALID_SIGNAL),
        (lambda: vp.memory_copy(0x10, 0x20, 4), HSA_STATUS_ERROR_INVALID_ARGUMENT),
        (lambda: vp.signal_wait_any([], [], [], 0.01), HSA_STATUS_ERROR_INVALID_ARGUMENT),
    ]
    for op, status in cases:
        with pytest.raises(HsaError) as info:
            op()
        assert info.value.status == status, info.value
        assert str(info.value).count("\n") == 0, "messages are one line"


@pytest.mark.parametrize("fail,status", [
    (IllegalInstruction(HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION, "fill: unknown VOP3 op at pc 0x10"),
     HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION),
    (ZeroDivisionError("executor bug"), HSA_STATUS_ERROR_EXCEPTION),
])
def test_executor_failures_become_queue_errors(vp, objects, monkeypatch, fail, status):
    ex = StubExecutor(fail=fail)
    monkeypatch.setitem(executor_registry._EXECUTORS, "gfx11", lambda: ex)
    gpu, _, _, _, kw = _dispatch_setup(vp, objects)
    seen, event = [], threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: (seen.append(s), event.set()))
    publish(q, kernel_dispatch(**kw))
    assert event.wait(DONE_S)
    assert seen == [status] and q.error.status == status
    if isinstance(fail, HsaError):
        assert q.error is fail
    else:
        assert q.error.__cause__ is fail and "executor bug" in str(q.error)


def test_completion_records_go_to_the_trace_sink(vp):
    import packets
    from packets import trace

    sink = trace.MemorySink()
    previous = trace.set_sink(sink)
    try:
        gpu = vp.gpu_agents()[0].handle
        q = vp.queue_create(gpu, 64)
        ring = packets.Ring(q.ring, q.size, q.load_write_index, q.add_write_index,
                            q.load_read_index, q.doorbell, queue_id=q.id)
        done = vp.signal_create(3)
        ring.publish_many(packets.barrier_and_batch(completion_signal=done, count=3))
        vp.signal_wait(done, EQ, 0, DONE_S)
    finally:
        trace.set_sink(previous)
    records = [r for r in sink.records if isinstance(r, trace.CompletionRecord)]
    assert [r.packet_id for r in records] == [0, 1, 2]
    assert all(r.queue_id == q.id and r.start_ns <= r.end_ns for r in records)


@given(kind=st.sampled_from(["and", "or"]),
       deps=st.lists(st.one_of(st.none(), st.integers(-2, 2)), min_size=0, max_size=5))
@settings(max_examples=40, deadline=None)
def test_barrier_semantics_match_the_spec(shared_vp, kind, deps):
    """None is a 0 handle; an int is a live signal with that value. AND: satisfied when every
    live dependency is 0 (0 handles count as satisfied); OR: when any live one is 0 (0
    handles never satisfy)."""
    from packets import barrier_or

    vp = shared_vp
    gpu = vp.gpu_agents()[0].handle
    q = vp.queue_create(gpu, 64)
    signals = [None if d is None else vp.signal_create(d) for d in deps]
    done = vp.signal_create(1)
    try:
        handles = [s or 0 for s in signals]
        build = barrier_and if kind == "and" else barrier_or
        publish(q, build(dep_signals=handles, completion_signal=done))
        live = [d for d in deps if d is not None]
        expect = all(v == 0 for v in live) if kind == "and" else any(v == 0 for v in live)
        try:
            vp.signal_wait(done, LT, 1, 0.5 if expect else 0.03)
            completed = True
        except SignalTimeout:
            completed = False
        assert completed == expect
    finally:
        vp.queue_destroy(q)
        for s in (*[s for s in signals if s], done):
            vp.signal_destroy(s)


def test_timeout_names_packets_written_but_never_rung(vp):
    gpu = vp.gpu_agents()[0].handle
    q = vp.queue_create(gpu, 64)
    done = vp.signal_create(1)
    idx = q.add_write_index(1)
    q.ring[idx * 64 : idx * 64 + 64] = np.frombuffer(
        barrier_and(dep_signals=[], completion_signal=done), np.uint8)
    with pytest.raises(SignalTimeout) as info:  # the driver forgot the doorbell
        vp.signal_wait(done, LT, 1, 0.02)
    assert f"queue {q.id} has packets 0..0 written but the doorbell" in str(info.value)
    q.doorbell(idx)
    vp.signal_wait(done, LT, 1, DONE_S)


def test_misaligned_kernarg_is_a_queue_error(vp, objects, stub):
    gpu, sym, _, kernarg, kw = _dispatch_setup(vp, objects)
    pkt = bytearray(kernel_dispatch(**kw))  # the builder refuses it: patch the field
    pkt[40:48] = (kernarg + 8).to_bytes(8, "little")
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    publish(q, bytes(pkt))
    assert event.wait(DONE_S)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
    assert "aligned" in str(q.error) and not stub.seen


def test_timeout_after_queue_destroy_says_so(vp):
    gpu = vp.gpu_agents()[0].handle
    q = vp.queue_create(gpu, 64)
    gate, done = vp.signal_create(1), vp.signal_create(1)
    publish(q, barrier_and(dep_signals=[gate], completion_signal=done))
    vp.queue_destroy(q)
    with pytest.raises(SignalTimeout) as info:
        vp.signal_wait(done, LT, 1, 0.02)
    assert f"queue {q.id} was destroyed before packet 0 ran" in str(info.value)
