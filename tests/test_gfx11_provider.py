"""The gfx11 executor driven the real way: VirtualProvider, its loader, a kernarg pool, an
AQL kernel-dispatch packet in a queue ring, a completion signal."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from amdgpu.errors import MemoryFault
from hsa.abi.codeobject import read_code_object
from hsa.provider import Segment, SignalCondition
from hsa.status import HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION
from hsa.virtual import VirtualProvider
from hsa.virtual.gfx11.testing import TEST_KERNELS_CL, build_code_object, build_kernargs
from packets.build import kernel_dispatch

pytestmark = [pytest.mark.isa_gfx11, pytest.mark.hsa_virtual]
DONE_S = 10.0


@pytest.fixture(scope="module")
def system():
    p = VirtualProvider(gpus=("gfx1100",))
    data = build_code_object(TEST_KERNELS_CL, "cl")
    gpu = p.gpu_agents()[0].handle
    cpu = p.cpu_agents()[0].handle
    reader = p.code_object_reader_create_from_memory(data)
    exe = p.executable_create()
    p.executable_load_agent_code_object(exe, gpu, reader)
    p.code_object_reader_destroy(reader)
    p.executable_freeze(exe)
    pools = {}
    for x in p.agent_pools(cpu):  # fine-grained system memory the host can map
        if x.is_kernarg:
            pools["kernarg"] = x.handle
        elif x.segment == Segment.GLOBAL and not x.is_coarse_grained:
            pools["system"] = x.handle
    q = p.queue_create(gpu, 64)
    yield p, gpu, exe, pools, read_code_object(data), q
    p.shut_down()


def _publish(queue, packet: bytes) -> int:
    idx = queue.add_write_index(1)
    while idx - queue.load_read_index() >= queue.size:
        time.sleep(0.0005)
    off = (idx & (queue.size - 1)) * 64
    raw = np.frombuffer(packet, dtype=np.uint8)
    queue.ring[off + 4: off + 64] = raw[4:]
    queue.ring[off: off + 4].view(np.uint32)[0] = raw[:4].view(np.uint32)[0]  # header last
    queue.doorbell(idx)
    return idx


def _dispatch(system, name, grid, block, args, queue=None):
    p, gpu, exe, pools, co, q = system
    queue = queue or q
    kernel = co.kernels[name]
    sym = p.executable_get_symbol_by_name(exe, f"{name}.kd", gpu)
    data = build_kernargs(kernel, args, (grid, 1, 1), (block, 1, 1), 1)
    kernarg = p.memory_pool_allocate(pools["kernarg"], len(data))
    p.agents_allow_access([gpu], kernarg)
    p.host_view(kernarg, len(data))[:] = np.frombuffer(data, np.uint8)
    done = p.signal_create(1)
    _publish(queue, kernel_dispatch(
        workgroup_size=(block, 1, 1), grid_size=(grid, 1, 1), kernel_object=sym.kernel_object,
        kernarg_address=kernarg, completion_signal=done, dims=1,
        private_segment_size=sym.private_segment_size,
        group_segment_size=sym.group_segment_size))
    return done


def _device_array(system, array: np.ndarray) -> int:
    p, gpu, _, pools, _, _ = system
    address = p.memory_pool_allocate(pools["system"], array.nbytes)
    p.agents_allow_access([gpu], address)
    p.host_view(address, array.nbytes)[:] = array.view(np.uint8).reshape(-1)
    return address


def test_the_gfx11_executor_ships_and_registers():
    """Other tests skip with "gfx11 executor not present" where executor_for("gfx11") is
    None; executor_for also answers None when hsa.virtual.gfx11 fails to import. The
    executor ships with the package, so a broken one must fail here, not skip there."""
    import importlib

    from hsa.virtual.executor import executor_for, has_executor

    importlib.import_module("hsa.virtual.gfx11")  # raises the real import error, if any
    assert has_executor("gfx11") and executor_for("gfx11") is not None
    caps = VirtualProvider(gpus=("gfx1100",))
    try:
        assert caps.capabilities()["executor:gfx11"].available
    finally:
        caps.shut_down()


def test_saxpy_through_an_aql_packet(system):
    p = system[0]
    n = 3000
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    xa, ya = _device_array(system, x), _device_array(system, y)
    done = _dispatch(system, "saxpy", n, 256, [ya, xa, 1.5, n])
    assert p.signal_wait(done, SignalCondition.LT, 1, DONE_S) < 1
    got = p.host_view(ya, 4 * n).view(np.float32)
    ref = (np.float64(1.5) * x + y).astype(np.float32)
    np.testing.assert_array_equal(got, ref)


def test_lds_reduce_through_an_aql_packet(system):
    p = system[0]
    n, block = 2000, 256
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    groups = -(-n // block)
    out = _device_array(system, np.zeros(groups, np.float32))
    done = _dispatch(system, "lds_reduce", groups * block, block,
                     [out, _device_array(system, x), n])
    assert p.signal_wait(done, SignalCondition.LT, 1, DONE_S) < 1
    padded = np.zeros(groups * block, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(p.host_view(out, 4 * groups).view(np.float32),
                               padded.reshape(groups, block).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_memory_fault_puts_the_queue_in_error(system):
    p, gpu = system[0], system[1]
    seen, event = [], threading.Event()
    q = p.queue_create(gpu, 64, callback=lambda status, queue: (seen.append(status),
                                                                  event.set()))
    out = _device_array(system, np.zeros(64, np.uint32))
    _dispatch(system, "oob_write", 64, 64, [out, 1 << 20], queue=q)
    assert event.wait(DONE_S)
    assert seen == [HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION]
    assert isinstance(q.error, MemoryFault)
    assert "kernel oob_write" in str(q.error) and q.error.address == out + 4 * (1 << 20)
    p.queue_destroy(q)

