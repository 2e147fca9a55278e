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


def _box(data: np.ndarray, w: sdma.Window, element: int, rect: tuple) -> np.ndarray:
    """The rect's bytes of window w in `data` (w.address an offset into it), element by
    element from the packet's address rule, as nested loops."""
    size = 1 << element
    out = []
    for k in range(rect[2]):
        for j in range(rect[1]):
            for i in range(rect[0]):
                at = w.address + ((w.x + i) + (w.y + j) * w.pitch + (w.z + k) * w.slice) * size
                out.append(data[at:at + size])
    return np.concatenate(out)


@pytest.mark.parametrize("target,family", [("gfx942", "gfx9"), ("gfx1100", "gfx11"),
                                           ("gfx1201", "gfx12")])
def test_sub_window_copies_move_exactly_the_box(vp, target, family):
    """hipMemcpy2D/3D's packet: boxes of 1-16 byte elements with offsets and pitches on
    both sides, host -> device -> host; every other byte of the destinations unchanged."""
    q = Queue(vp, target)
    rng = np.random.default_rng(7)
    size = 1 << 16
    src, dev, back = q.alloc(size), q.alloc(size, device=True), q.alloc(size)
    q.mem.view(src, size)[:] = rng.integers(0, 256, size, dtype=np.uint8)
    for mem in (dev, back):
        q.mem.view(mem, size)[:] = 0xEE
    for element, rect, a, b in [
            (0, (13, 7, 1), dict(x=3, y=2, pitch=40), dict(x=1, y=5, pitch=17)),
            (2, (5, 4, 3), dict(x=1, y=1, z=1, pitch=9, slice=50), dict(pitch=5, slice=20)),
            (4, (3, 2, 2), dict(x=2, y=1, z=1, pitch=6, slice=16), dict(x=1, pitch=4, slice=9)),
            (3, (1, 1, 1), dict(x=5), dict(y=3, pitch=2))]:
        before_dev = q.mem.view(dev, size).copy()
        before_back = q.mem.view(back, size).copy()
        s_w, d_w = sdma.Window(src, **a), sdma.Window(dev, **b)
        s2, d2 = sdma.Window(dev, **b), sdma.Window(back, **a)
        q.submit([*sdma.copy_sub_window(family, element, s_w, d_w, rect),
                  *sdma.copy_sub_window(family, element, s2, d2, rect)])
        q.engine.process()
        host = q.mem.view(src, size)
        want = _box(host, sdma.Window(0, **a), element, rect)
        dev_bytes, back_bytes = q.mem.view(dev, size).copy(), q.mem.view(back, size).copy()
        assert bytes(_box(dev_bytes, sdma.Window(0, **b), element, rect)) == bytes(want)
        assert bytes(_box(back_bytes, sdma.Window(0, **a), element, rect)) == bytes(want)
        # outside the box nothing moved: put the old bytes back into the box and compare
        for now, old, w in ((dev_bytes, before_dev, b), (back_bytes, before_back, a)):
            mark = np.zeros(size, bool)
            box = _box(np.arange(size), sdma.Window(0, **w), element, rect)
            mark[box] = True
            assert (now[~mark] == old[~mark]).all()


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
    q4 = Queue(vp, "gfx942", label="sdma 4")  # a tiled sub-window copy (sub-op 5)
    q4.submit([sdma.header(sdma.Op.COPY, 5), *[0] * 12])
    with pytest.raises(SdmaFault) as err:
        q4.engine.process()
    assert str(err.value) == (f"sdma 4: ring at 0x{q4.ring:x} byte 0: SDMA dword 0: COPY "
                              "sub-op 5 (tiled sub-window copy) is not modeled (linear "
                              "copies, sub-op 0, and linear sub-windows, sub-op 4, are); the "
                              "queue is stopped (HSA status 0x1009)")
    q5 = Queue(vp, "gfx942", label="sdma 5")  # a box running past its allocation
    small = q5.alloc(256)
    q5.submit(sdma.copy_sub_window("gfx9", 2, sdma.Window(small, pitch=4096), sdma.Window(small),
                                   (4, 5, 1)))
    with pytest.raises(MemoryFault, match="sdma 5: ring at .* byte 0: COPY_LINEAR_SUB_WINDOW "
                                          "source: memory fault"):
        q5.engine.process()


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
