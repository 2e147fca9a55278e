"""gfx1250's extended kernel-dispatch packet through the virtual packet processor and the
driver: ROCr's rules as queue errors, dep_signal waits, the grid and cluster size handed to
the executor, cluster ids as gfx1250 reports them (LLVM's lowering: TTMP6 fields), the
driver choosing the extended packet on gfx1250 (immediate, recorded and replayed), hidden
arguments computed from it and a packet trace that counts its dispatches.

The executor here is a probe (the gfx12 ISA executor is issue #18's later part): it records
each Dispatch and writes, for every workgroup, its cluster id and TTMP6 as the kernel would
read them, into the buffer of the kernel's first argument."""

from __future__ import annotations

import itertools
import struct
import threading
import time

import numpy as np
import pytest
from provider_suite import CodeObjects, publish

import compiler
import packets
from amdgpu.errors import KernelArgumentError
from hsa.provider import SignalCondition
from hsa.status import HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
from hsa.virtual import VirtualProvider
from hsa.virtual import executor as executor_registry
from hsa.virtual.executor import Dispatch, cluster_ids

pytestmark = pytest.mark.hsa_virtual
LT = SignalCondition.LT
DONE_S = 5.0


class ClusterProbe:
    """Records dispatches; per workgroup (x fastest) writes 4 u32: cluster id x, y, z and
    TTMP6, to the first kernarg pointer."""

    family = "gfx12"

    def __init__(self):
        self.seen: list[Dispatch] = []

    def run(self, dispatch: Dispatch, memory) -> None:
        self.seen.append(dispatch)
        out = int(memory.gather(np.array([dispatch.kernarg_address]), np.uint64,
                                dispatch.agent)[0])
        counts = [-(-g // w) for g, w in zip(dispatch.grid_size, dispatch.workgroup_size,
                                             strict=True)]
        rows = []
        for z, y, x in itertools.product(*(range(c) for c in reversed(counts))):
            cluster, _, ttmp6 = cluster_ids((x, y, z), dispatch.cluster_size)
            rows.append([*cluster, ttmp6])
        data = np.array(rows, np.uint32).reshape(-1)
        memory.scatter(out + 4 * np.arange(data.size, dtype=np.uint64), data, dispatch.agent)


@pytest.fixture
def probe(monkeypatch):
    ex = ClusterProbe()
    monkeypatch.setitem(executor_registry._EXECUTORS, "gfx12", lambda: ex)
    return ex


def test_cluster_ids_follow_llvms_gfx1250_lowering():
    # workgroup (5, 3, 1) in clusters of (2, 2, 1): cluster (2, 1, 1), place (1, 1, 0)
    cluster, inner, ttmp6 = cluster_ids((5, 3, 1), (2, 2, 1))
    assert cluster == (2, 1, 1) and inner == (1, 1, 0)
    assert ttmp6 & 15 == 1  # s_and_b32 s2, ttmp6, 15: cluster.workgroup.id.x
    assert (ttmp6 >> 4) & 15 == 1  # cluster.workgroup.id.y
    assert (ttmp6 >> 8) & 15 == 0  # s_bfe_u32 s2, ttmp6, 0x40008: cluster.workgroup.id.z
    assert ((ttmp6 >> 12) & 15, (ttmp6 >> 16) & 15, (ttmp6 >> 20) & 15) == (1, 1, 0)
    assert cluster_ids((7, 0, 0), (1, 1, 1)) == ((7, 0, 0), (0, 0, 0), 0)


# --- the packet processor ------------------------------------------------------------------

@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return CodeObjects(tmp_path_factory.mktemp("extobjects"))


@pytest.fixture
def vp():
    p = VirtualProvider(gpus=("gfx1250", "gfx1100"))
    yield p
    p.shut_down()


def _setup(p, objects, agent_index=0, mcpu="gfx1250"):
    gpu = p.gpu_agents()[agent_index].handle
    cpu = p.cpu_agents()[0].handle
    reader = p.code_object_reader_create_from_memory(objects[mcpu])
    exe = p.executable_create()
    p.executable_load_agent_code_object(exe, gpu, reader)
    p.code_object_reader_destroy(reader)
    p.executable_freeze(exe)
    sym = p.executable_get_symbol_by_name(exe, "fill.kd", gpu)
    pools = {x.is_kernarg: x.handle for x in p.agent_pools(cpu)}
    device = next(x.handle for x in p.agent_pools(gpu) if x.is_coarse_grained)
    out = p.memory_pool_allocate(device, 1 << 16)
    kernarg = p.memory_pool_allocate(pools[True], 4096)
    p.host_view(kernarg, 8).view(np.uint64)[0] = out
    return gpu, sym, out, kernarg


def test_ext_dispatch_runs_the_grid_in_clusters(vp, objects, probe):
    gpu, sym, out, kernarg = _setup(vp, objects)
    q = vp.queue_create(gpu, 64)
    done = vp.signal_create(1)
    publish(q, packets.ext_kernel_dispatch(
        workgroup_size=(32, 2), cluster_count=(3, 2), cluster_size=(2, 2),
        kernel_object=sym.kernel_object, kernarg_address=kernarg,
        private_segment_size=sym.private_segment_size,
        group_segment_size=sym.group_segment_size, completion_signal=done))
    vp.signal_wait(done, LT, 1, DONE_S)
    (d,) = probe.seen
    assert d.grid_size == (3 * 2 * 32, 2 * 2 * 2, 1) and d.workgroup_size == (32, 2, 1)
    assert d.cluster_size == (2, 2, 1) and d.dims == 2 and d.target == "gfx1250"
    rows = vp.memory.view(out, 6 * 4 * 16).view(np.uint32).reshape(4, 6, 4)  # [y][x]
    assert rows[3, 5, 0] == 2 and rows[3, 5, 1] == 1  # workgroup (5, 3) is in cluster (2, 1)
    assert rows[3, 5, 3] & 0xFF == 0x11 and rows[0, 0, 3] & 0xFF == 0
    assert (rows[0, 0, 3] >> 12) & 0xFF == 0x11  # max ids (1, 1)


def test_dep_signal_holds_the_dispatch_until_it_reaches_zero(vp, objects, probe):
    gpu, sym, out, kernarg = _setup(vp, objects)
    q = vp.queue_create(gpu, 64)
    dep, done = vp.signal_create(1), vp.signal_create(1)
    publish(q, packets.ext_kernel_dispatch(
        workgroup_size=64, cluster_count=2, kernel_object=sym.kernel_object,
        kernarg_address=kernarg, private_segment_size=sym.private_segment_size,
        group_segment_size=sym.group_segment_size, dep_signal=dep, completion_signal=done))
    time.sleep(0.1)
    assert probe.seen == [] and vp.signal_load(done) == 1
    vp.signal_store(dep, 0)
    vp.signal_wait(done, LT, 1, DONE_S)
    assert len(probe.seen) == 1 and q.error is None


@pytest.mark.parametrize("patch, why", [
    ({3: 0}, "setup=0 is out of range"),
    ({3: 4}, "setup=4 is out of range"),
    ({10: 1}, "reserved0=0x1 is not 0"),
    ({4: 0, 5: 0}, "workgroup_size=(0, 1, 1) has an entry < 1"),
    ({20: 0}, "cluster_size=(0, 1, 1) has an entry < 1"),
    ({12: 0}, "cluster_count=(0, 1, 1) has an entry < 1"),
])
def test_rocr_rules_are_queue_errors(vp, objects, probe, patch, why):
    gpu, sym, out, kernarg = _setup(vp, objects)
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    raw = bytearray(packets.ext_kernel_dispatch(
        workgroup_size=64, cluster_count=2, kernel_object=sym.kernel_object,
        kernarg_address=kernarg, group_segment_size=sym.group_segment_size))
    for offset, value in patch.items():
        raw[offset] = value
    publish(q, bytes(raw))
    assert event.wait(DONE_S)
    assert q.error.status == HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
    assert why in str(q.error) and probe.seen == []


def test_ext_packet_on_a_gfx1100_queue_is_refused(vp, objects):
    gpu, sym, out, kernarg = _setup(vp, objects, agent_index=1, mcpu="gfx1100")
    event = threading.Event()
    q = vp.queue_create(gpu, 64, callback=lambda s, qq: event.set())
    publish(q, packets.ext_kernel_dispatch(workgroup_size=64, cluster_count=2,
                                           kernel_object=sym.kernel_object,
                                           kernarg_address=kernarg))
    assert event.wait(DONE_S)
    assert "only gfx1250 runs it" in str(q.error)


# --- the driver ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fill_bundle():
    return compiler.compile("fill", targets=["gfx1250", "gfx1100"])


@pytest.fixture
def dev(probe, fill_bundle):
    import amdgpu

    d = amdgpu.open("amdgpu:virtual:gfx1250")
    yield d
    d.close()


def _kernargs(probe_dispatch: Dispatch, dev, size: int) -> bytes:
    return bytes(dev.provider.memory.view(probe_dispatch.kernarg_address, size))


def test_driver_dispatches_with_the_ext_packet_on_gfx1250(dev, probe, fill_bundle):
    k = dev.load(fill_bundle).kernel("fill")
    out = dev.buffer(np.zeros(4096, np.uint32))
    trace = packets.MemorySink()
    previous = packets.set_sink(trace)
    try:
        dev.dispatch(k, 1024, 64, (out, np.float32(1), np.uint32(1024)))
        dev.dispatch(k, (256, 8), (32, 2), (out, np.float32(1), np.uint32(1)),
                     cluster=(4, 2))
        dev.dispatch(k, 1000, 64, (out, np.float32(1), np.uint32(1000)))  # partial groups
        dev.synchronize()
    finally:
        packets.set_sink(previous)
    kinds = [packets.decode(r.raw)["kind"] for r in trace.records
             if isinstance(r, packets.trace.PacketRecord)]
    assert kinds == ["ext_kernel_dispatch", "ext_kernel_dispatch", "kernel_dispatch"]
    a, b, c = probe.seen
    assert a.grid_size == (1024, 1, 1) and a.cluster_size == (1, 1, 1)
    assert b.grid_size == (256, 8, 1) and b.cluster_size == (4, 2, 1) and b.dims == 2
    assert c.grid_size == (1000, 1, 1)
    # hidden arguments from the packet: block counts and group sizes (fill's layout)
    hidden = _kernargs(b, dev, 40)
    assert struct.unpack_from("<III", hidden, 16) == (8, 4, 1)
    assert struct.unpack_from("<HHH", hidden, 28) == (32, 2, 1)
    assert struct.unpack_from("<HHH", _kernargs(c, dev, 40), 34) == (1000 % 64, 0, 0)


def test_cluster_shape_errors_are_one_line(dev, fill_bundle):
    k = dev.load(fill_bundle).kernel("fill")
    out = dev.buffer(np.zeros(64, np.uint32))
    with pytest.raises(KernelArgumentError, match="not whole clusters"):
        dev.dispatch(k, 1000, 64, (out, np.float32(1), np.uint32(1)), cluster=2)
    with pytest.raises(KernelArgumentError, match="cluster_size_x=256 does not fit"):
        dev.dispatch(k, 64 * 256, 64, (out, np.float32(1), np.uint32(1)), cluster=256)


def test_cluster_on_a_gfx1100_device_is_refused(fill_bundle):
    import amdgpu

    with amdgpu.open("amdgpu:virtual:gfx1100") as d:
        k = d.load(fill_bundle).kernel("fill")
        out = d.buffer(np.zeros(64, np.uint32))
        with pytest.raises(KernelArgumentError, match="needs a gfx1250 device"):
            d.dispatch(k, 64, 64, (out, np.float32(1), np.uint32(1)), cluster=2)


def test_command_buffers_record_and_replay_ext_dispatches(dev, probe, fill_bundle):
    k = dev.load(fill_bundle).kernel("fill")
    out = dev.buffer(np.zeros(4096, np.uint32))
    cb = dev.command_buffer()
    cb.dispatch(k, 512, 64, (out, np.float32(2), np.uint32(512)))
    cb.dispatch(k, 512, 64, (out, np.float32(2), np.uint32(512)), cluster=4)
    cb.barrier()
    cb.dispatch(k, 500, 64, (out, np.float32(2), np.uint32(500)))
    cb.finalize()
    for _ in range(2):
        dev.submit(cb)
    dev.synchronize()
    kinds = [packets.decode(p)["kind"] for block in cb.packets for p in block]
    assert kinds[:3] == ["ext_kernel_dispatch", "ext_kernel_dispatch", "kernel_dispatch"]
    barriers = [packets.decode(p)["barrier"] for block in cb.packets for p in block][:3]
    assert barriers == [True, False, True]
    assert [d.cluster_size for d in probe.seen] == [(1, 1, 1), (4, 1, 1), (1, 1, 1)] * 2
    assert [d.grid_size[0] for d in probe.seen] == [512, 512, 500] * 2
