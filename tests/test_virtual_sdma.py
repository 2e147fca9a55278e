"""The virtual SDMA engine runs the packets of a KFD SDMA queue.

Two writers nobody here wrote: tinygrad's AMDCopyQueue (copy, write, timestamp, signal with
fence and trap, wait with poll regmem) over its own SDMA 4/5/6 packet tables, and ROCr's
BlitSdma layouts (core/inc/sdma_registers.h: every packet zero-padded to 8 dwords, the HDP
flush constant, ADD64 atomics for signal decrements), built with packets.sdma whose dwords
tests/test_packets_pm4.py checks against the kernel's SDMA headers. Results are read back
from the virtual memory map.
"""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest

from ground.errors import MemoryFault
from hsa.virtual import VirtualProvider
from hsa.virtual.pm4 import Interrupt
from hsa.virtual.sdma import SdmaEngine, SdmaFault
from packets import sdma

pytestmark = pytest.mark.hsa_virtual
RING = 4096


@pytest.fixture
def vp():
    p = VirtualProvider(gpus=("gfx942", "gfx1100", "gfx1201"))
    yield p
    p.shut_down()


class Queue:
    """An SDMA ring with its 64-bit byte pointers in system memory."""

    def __init__(self, p, target: str, **kw):
        gpu = next(a.handle for a in p.gpu_agents() if a.name == target)
        cpu = p.cpu_agents()[0].handle
        self.host = next(x.handle for x in p.agent_pools(cpu) if x.is_kernarg)
        self.device = next(x.handle for x in p.agent_pools(gpu) if x.is_coarse_grained)
        self.p, self.mem = p, p.memory
        self.ring = p.memory_pool_allocate(self.host, RING)
        self.ptrs = p.memory_pool_allocate(self.host, 64)
        self.put = 0
        self.seen: list[Interrupt] = []
        self.engine = SdmaEngine(p.memory, self.ring, RING, self.ptrs, self.ptrs + 8,
                                 target=target, agent=gpu, interrupt=self.seen.append, **kw)

    def alloc(self, size: int, device: bool = False) -> int:
        return self.p.memory_pool_allocate(self.device if device else self.host, size)

    def submit(self, dwords: list[int]) -> None:
        """Copy into the ring at put (wrapping) and publish wptr, as a driver does."""
        words = self.mem.view(self.ring, RING).view(np.uint32)
        for k, w in enumerate(dwords):
            words[(self.put // 4 + k) % (RING // 4)] = w
        self.put += 4 * len(dwords)
        self.mem.view(self.ptrs + 8, 8).view(np.uint64)[0] = self.put


def tinygrad_copy_queue(target: str):
    pytest.importorskip("tinygrad", reason="tinygrad (test extra) writes the SDMA packets")
    from tinygrad.runtime.ops_amd import AMDCopyQueue
    from tinygrad.runtime.support.amd import import_module
    # (SDMA IP version, tinygrad target); tinygrad takes SDMA 6's tables for SDMA 7 (gfx12)
    version, tg_target = {"gfx942": ((4, 4, 2), (9, 4, 2)), "gfx1100": ((6, 0, 0), (11, 0, 0)),
                          "gfx1201": ((7, 0, 0), (12, 0, 1))}[target]
    dev = types.SimpleNamespace(sdma=import_module("sdma", min(version, (6, 0, 0))),
                                target=tg_target)
    return AMDCopyQueue(dev)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100", "gfx1201"])
def test_tinygrads_copy_queue_runs(vp, target):
    q = Queue(vp, target)
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 3 * 4096 + 5, dtype=np.uint8)
    src, dst = q.alloc(data.size), q.alloc(data.size, device=True)
    q.mem.write(src, data.tobytes())
    sig = q.alloc(64)
    q.mem.view(sig + 32, 4).view(np.uint32)[0] = 9  # what the wait polls
    tq = tinygrad_copy_queue(target)
    tq.wait(types.SimpleNamespace(value_addr=sig + 32), 9)
    tq.copy(types.SimpleNamespace(va_addr=dst), types.SimpleNamespace(va_addr=src), data.size)
    tq.write(types.SimpleNamespace(va_addr=sig + 40), 0xAABBCCDD11223344, b64=True)
    tq.timestamp(types.SimpleNamespace(timestamp_addr=sig + 48))
    tq.signal(types.SimpleNamespace(value_addr=sig, owner=None, is_timeline=False), 5)
    q.submit(list(tq._q))
    before = time.monotonic_ns()
    assert q.engine.process() == 4 * len(tq._q) == q.engine.rptr
    assert bytes(q.mem.view(dst, data.size)) == data.tobytes()
    assert int(q.mem.view(sig, 4).view(np.uint32)[0]) == 5
    assert int(q.mem.view(sig + 40, 8).view(np.uint64)[0]) == 0xAABBCCDD11223344
    stamp = int(q.mem.view(sig + 48, 8).view(np.uint64)[0])
    assert 0 < stamp <= time.monotonic_ns() // 10 and stamp > before // 10 - 10**9


def test_rocr_layouts_copy_fill_fence_atomic_trap_and_hdp_flush(vp):
    """ROCr pads every packet to 8 dwords with zeros (one-dword NOPs): the same stream runs."""
    q = Queue(vp, "gfx1100")

    def padded(words: list[int]) -> list[int]:
        return words + [0] * (-len(words) % 8)

    src, dst = q.alloc(8192, device=True), q.alloc(8192)
    q.mem.view(src, 8192)[:] = np.arange(8192, dtype=np.uint8)
    sig = q.alloc(64)
    q.mem.view(sig, 8).view(np.int64)[0] = 1  # an HSA signal value ROCr decrements
    stream = [*padded(sdma.hdp_flush()),
              *padded(sdma.copy_linear("gfx11", dst, src, 4096)),
              *padded(sdma.constant_fill("gfx11", dst + 4096, 0x5A5A5A5A, 1024)),
              *padded(sdma.fence("gfx11", sig + 16, 0xFEED)),
              *padded(sdma.atomic(sig, (1 << 64) - 1)),  # ADD64 of -1
              *padded(sdma.gcr()),
              *padded(sdma.trap(42))]
    q.submit(stream)
    q.engine.process()
    out = q.mem.view(dst, 8192)
    assert bytes(out[:4096]) == bytes(np.arange(4096, dtype=np.uint8))
    assert (out[4096:5120] == 0x5A).all() and (out[5120:] == 0).all()
    assert int(q.mem.view(sig + 16, 4).view(np.uint32)[0]) == 0xFEED
    assert int(q.mem.view(sig, 8).view(np.int64)[0]) == 0
    assert q.seen == [Interrupt("sdma_trap", 42)]


def test_packets_wrapping_the_ring_end_and_an_indirect_buffer(vp):
    q = Queue(vp, "gfx942")
    out = q.alloc(64)
    q.submit(sdma.nop(RING // 4 - 2))  # leave 2 dwords before the end
    q.engine.process()
    ib = q.alloc(64)
    ib_words = sdma.fence("gfx9", out + 4, 0x1B)
    q.mem.view(ib, 16).view(np.uint32)[:] = ib_words
    q.submit([*sdma.fence("gfx9", out, 0x77), *sdma.indirect(ib, len(ib_words))])  # wraps
    q.engine.process()
    assert q.mem.view(out, 8).view(np.uint32).tolist() == [0x77, 0x1B]
    assert q.engine.rptr == q.put


def test_poll_regmem_waits_for_memory(vp):
    q = Queue(vp, "gfx1100")
    flag, out = q.alloc(64), q.alloc(64)
    q.submit([*sdma.poll_regmem(flag, 3, function=5), *sdma.fence("gfx11", out, 1)])
    t = threading.Thread(target=q.engine.process)
    t.start()
    time.sleep(0.05)
    assert t.is_alive() and int(q.mem.view(out, 4).view(np.uint32)[0]) == 0
    q.mem.view(flag, 4).view(np.uint32)[0] = 4  # >= 3
    t.join(10)
    assert not t.is_alive() and int(q.mem.view(out, 4).view(np.uint32)[0]) == 1


def test_bad_packets_and_addresses_fault_with_their_offset(vp):
    q = Queue(vp, "gfx1100", label="sdma 2")
    q.submit([*sdma.nop(2), 0x0000_0003])  # opcode 3: none of ours
    with pytest.raises(SdmaFault, match=r"sdma 2: ring at 0x[0-9a-f]+ byte 8: SDMA dword 0: "
                                        "opcode 3"):
        q.engine.process()
    assert q.engine.rptr == 8
    with pytest.raises(SdmaFault):  # the queue stays stopped
        q.engine.process()
    q2 = Queue(vp, "gfx1100", label="sdma 3")
    q2.submit(sdma.copy_linear("gfx11", 0x40, q2.ring, 64))
    with pytest.raises(MemoryFault, match="sdma 3: ring at .* byte 0: COPY_LINEAR destination: "
                                          "memory fault at 0x40"):
        q2.engine.process()
    q3 = Queue(vp, "gfx1100")
    q3.submit(sdma.poll_regmem(0x1234 << 2, 1, memory=False))
    with pytest.raises(SdmaFault, match="polls register 0x1234"):
        q3.engine.process()


def test_ring_workers_run_on_doorbells_stop_and_report_faults(vp):
    from hsa.virtual.pm4 import Pm4Processor, Pm4Ring
    from hsa.virtual.ring_worker import RingWorker
    from packets import pm4
    q = Queue(vp, "gfx942")
    worker = RingWorker(q.engine, "sdma 0")
    src, dst = q.alloc(256), q.alloc(256, device=True)
    q.mem.view(src, 256)[:] = np.arange(256, dtype=np.uint8)
    q.submit([*sdma.copy_linear("gfx9", dst, src, 256), *sdma.trap(3)])
    worker.ring_doorbell(q.put)  # SDMA doorbells carry the write pointer in bytes
    assert worker.wait_idle(10) and worker.error is None
    assert bytes(q.mem.view(dst, 256)) == bytes(range(256)) and q.seen[-1].context == 3
    errors = []
    bad = RingWorker(Queue(vp, "gfx942").engine, "sdma 1", on_error=errors.append)
    bad.engine.memory.view(bad.engine.base, 4).view(np.uint32)[0] = 3  # opcode 3
    bad.ring_doorbell(4)
    assert bad.wait_idle(10) and isinstance(bad.error, SdmaFault) and errors == [bad.error]
    bad.ring_doorbell(8)  # ignored after a fault
    # a PM4 ring blocked in WAIT_REG_MEM: stop() wakes it and the thread ends without error
    host = q.alloc(4096)
    flag, ring, ptrs = host, host + 1024, host + 64
    words = pm4.wait_reg_mem(flag, 1, function=pm4.WaitFunction.EQ)
    q.mem.view(ring, 4 * len(words)).view(np.uint32)[:] = words
    pm4_worker = RingWorker(Pm4Ring(Pm4Processor(q.mem, target="gfx942"), ring, 1024, ptrs,
                                    ptrs + 8), "pm4 0")
    pm4_worker.ring_doorbell(len(words))
    assert not pm4_worker.wait_idle(0.1) and pm4_worker.running  # waiting for the flag
    pm4_worker.stop()
    assert not pm4_worker.running and pm4_worker.error is None
    worker.stop()
    bad.stop()
