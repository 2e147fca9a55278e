"""The virtual command processor runs PM4 as tinygrad's AMD backend writes it.

tinygrad (PyPI, a test extra) is the client: its AMDComputeQueue emits the PM4 of a kernel
launch (ACQUIRE_MEM, the COMPUTE_* registers, user data with the kernarg pointer,
DISPATCH_DIRECT, EVENT_WRITE) and of its signal (RELEASE_MEM with an interrupt), its own ELF
loader places the code object, and its AMDComputeAQLQueue builds the PM4_IB AQL packet ROCr
defines. The kernel is OpenCL C compiled by the project's clang 22 for gfx1100, gfx942, gfx950
and gfx1201; results are checked with numpy. The processor's own failure lines (an unmodeled
register, a malformed packet, a bad IB) are checked on hand-built streams.
"""

from __future__ import annotations

import ctypes
import dataclasses
import time
import types

import numpy as np
import pytest
from provider_suite import publish

from ground.errors import MemoryFault, QueueError
from hsa.provider import SignalCondition
from hsa.virtual import VirtualProvider
from hsa.virtual.pm4 import Interrupt, Pm4Fault, Pm4Processor, Pm4Ring, UnmodeledRegister
from packets import pm4

pytestmark = pytest.mark.hsa_virtual

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad (test extra) writes the PM4")
from tinygrad.runtime.autogen import amdgpu_kd  # noqa: E402
from tinygrad.runtime.autogen.am import navi_offsets, vega_offsets  # noqa: E402
from tinygrad.runtime.ops_amd import AMDComputeAQLQueue, AMDComputeQueue  # noqa: E402
from tinygrad.runtime.support.amd import AMDIP, import_soc  # noqa: E402
from tinygrad.runtime.support.elf import elf_loader  # noqa: E402

AXPY = """
__kernel void axpy(__global float *y, __global const float *x, float a) {
    uint i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
    y[i] = a * x[i] + y[i];
}
"""
# LDS (a __local tile) and scratch (a volatile private array): LDS_SIZE and TMPRING_SIZE
STAGE = """
__kernel void stage(__global float *y, __global const float *x, __global const int *idx) {
    __local float tile[64];
    volatile float priv[48];
    uint l = __builtin_amdgcn_workitem_id_x();
    uint g = __builtin_amdgcn_workgroup_id_x() * 64 + l;
    for (int k = 0; k < 48; k++) priv[k] = x[g] * (float)k;
    tile[l] = priv[idx[g] % 48];
    barrier(CLK_LOCAL_MEM_FENCE);
    y[g] = tile[l ^ 63];  /* 63 - l: clang's (0 - 4l) + offset:252 needs 32-bit LDS wrap */
}
"""
# target -> (tinygrad target tuple, gc IP version, nbio IP name and version)
TARGETS = {
    "gfx1100": ((11, 0, 0), (11, 0, 0), ("nbio", (4, 3, 0))),
    "gfx942": ((9, 4, 2), (9, 4, 3), ("nbio", (7, 9, 0))),
    "gfx950": ((9, 5, 0), (9, 5, 0), ("nbio", (7, 9, 0))),
    "gfx1201": ((12, 0, 1), (12, 0, 0), ("nbif", (6, 3, 1))),
}
N = 256


def fma(a: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """a * x + y rounded once, as the kernel's v_fma/v_fmac does (exact in float64)."""
    return (np.float64(a) * x.astype(np.float64) + y).astype(np.float32)


@pytest.fixture(scope="module")
def code_objects(tmp_path_factory):
    from compiler.clang import compile_opencl
    out = {}
    for name, text in (("axpy", AXPY), ("stage", STAGE)):
        src = tmp_path_factory.mktemp("pm4") / f"{name}.cl"
        src.write_text(text)
        out.update({(name, t): compile_opencl(str(src), t) for t in TARGETS})
    return out


@pytest.fixture
def vp():
    p = VirtualProvider(gpus=tuple(TARGETS))
    yield p
    p.shut_down()


class System:
    """A virtual GPU of `target`, tinygrad's view of it (the fake `dev` its queues read) and
    the axpy kernel loaded as tinygrad's AMDProgram loads it."""

    def __init__(self, p: VirtualProvider, target: str, code: bytes):
        self.p = p
        agent = next(a for a in p.gpu_agents() if a.name.startswith(target) or
                     target in str(getattr(a, "isa", "")))
        self.gpu = agent.handle
        cpu = p.cpu_agents()[0].handle
        pools = {x.is_kernarg: x.handle for x in p.agent_pools(cpu)}
        self.host_pool = pools[True]
        self.device_pool = next(x.handle for x in p.agent_pools(self.gpu)
                                if x.is_coarse_grained)
        tg_target, gc_version, (nbio, nbio_version) = TARGETS[target]
        offs = vega_offsets if tg_target[0] == 9 else navi_offsets
        self.dev = types.SimpleNamespace(
            target=tg_target, xccs=1, sqtt_enabled=False, pmc_enabled=False,
            soc=import_soc(tg_target),
            pm4=__import__("tinygrad.runtime.autogen.am.pm4_" +
                           ("soc15" if tg_target[0] == 9 else "nv"), fromlist=["x"]),
            gc=AMDIP("gc", gc_version, bases={i: tuple(
                getattr(offs, f"GC_BASE__INST{i}_SEG{s}", 0) for s in range(6)) for i in range(6)}),
            nbio=AMDIP(nbio, nbio_version, bases={i: tuple(
                getattr(offs, f"NBIO_BASE__INST{i}_SEG{s}", 0) for s in range(9))
                for i in range(6)}),
            tmpring_size=0, scratch=types.SimpleNamespace(va_addr=0, size=0))
        # tinygrad's AMDProgram: its ELF loader, the descriptor from .rodata, rsrc2 with LDS
        image, sections, relocs = elf_loader(code)
        assert not relocs
        rodata = next(sh.header.sh_addr for sh in sections if sh.name == ".rodata")
        self.code = self.alloc(len(image) + 4096, device=True)
        self.write(self.code, bytes(image))
        desc = amdgpu_kd.llvm_amdhsa_kernel_descriptor_t.from_buffer_copy(
            bytes(image[rodata:rodata + ctypes.sizeof(amdgpu_kd.llvm_amdhsa_kernel_descriptor_t)]))
        lds = ((desc.group_segment_fixed_size + 511) // 512) & 0x1FF
        self.prg = types.SimpleNamespace(
            dev=self.dev, rsrc1=desc.compute_pgm_rsrc1 | ((1 << 20) if tg_target[0] == 11 else 0),
            rsrc2=desc.compute_pgm_rsrc2 | (lds << 15), rsrc3=desc.compute_pgm_rsrc3,
            prog_addr=self.code + rodata + desc.kernel_code_entry_byte_offset,
            wave32=bool(desc.kernel_code_properties & 0x400),
            enable_dispatch_ptr=desc.kernel_code_properties & 2,
            enable_private_segment_sgpr=desc.kernel_code_properties & 1,
            aql_prog_addr=self.code + rodata, group_segment_size=desc.group_segment_fixed_size,
            private_segment_size=desc.private_segment_fixed_size)

    def scratch(self) -> None:
        """Scratch as tinygrad's _ensure_has_local_memory sizes it: COMPUTE_TMPRING_SIZE
        encoded with its own register bitfields (lanes_per_wave 64, 1 KiB / 256 B units)."""
        from tinygrad.helpers import ceildiv, round_up
        from tinygrad.runtime.autogen import hsa
        gfx9 = self.dev.target[0] == 9
        align = 1024 if gfx9 else 256
        per_thread = round_up(self.prg.private_segment_size, align // 64)
        wave_scratch = ceildiv(64 * per_thread, align)
        t = getattr(hsa, "union_COMPUTE_TMPRING_SIZE" + (
            "" if gfx9 else f"_GFX{self.dev.target[0]}") + "_bitfields")
        self.dev.tmpring_size = int.from_bytes(t(WAVES=32, WAVESIZE=wave_scratch), "little")

    def alloc(self, size: int, device: bool = False) -> int:
        return self.p.memory_pool_allocate(self.device_pool if device else self.host_pool, size)

    def write(self, address: int, data: bytes) -> None:
        self.p.memory.write(address, data)

    def view(self, address: int, size: int) -> np.ndarray:
        return self.p.memory.view(address, size)

    def axpy_buffers(self, rng):
        x = rng.standard_normal(N).astype(np.float32)
        y = rng.standard_normal(N).astype(np.float32)
        bx, by = self.alloc(4 * N, device=True), self.alloc(4 * N, device=True)
        self.write(bx, x.tobytes())
        self.write(by, y.tobytes())
        args = self.alloc(64)
        self.view(args, 24)[:] = np.frombuffer(
            np.array([by, bx], np.uint64).tobytes() + np.float32(2.5).tobytes() + bytes(4),
            np.uint8)
        return x, y, by, args

    def launch(self, queue_cls, args: int, signal_addr: int, value: int):
        """tinygrad's exec of axpy over N work-items, then its signal."""
        q = queue_cls(self.dev)
        state = types.SimpleNamespace(bind_data=[], buf=types.SimpleNamespace(va_addr=args))
        q.exec(self.prg, state, (N // 64, 1, 1), (64, 1, 1))
        signal = types.SimpleNamespace(value_addr=signal_addr, timestamp_addr=signal_addr + 8,
                                       owner=None, is_timeline=False)
        q.signal(signal, value)
        return q


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_tinygrads_pm4_launch_runs_on_a_pm4_ring(vp, code_objects, target):
    s = System(vp, target, code_objects['axpy', target])
    x, y, by, args = s.axpy_buffers(np.random.default_rng(7))
    sig = s.alloc(64)
    q = s.launch(AMDComputeQueue, args, sig, 0x1234)
    dwords = list(q._q)
    names = [p.name for p in pm4.decode(dwords)]
    assert "DISPATCH_DIRECT" in names and names[-1] == "RELEASE_MEM"
    # a KFD PM4 queue: ring, rptr and wptr in memory; tinygrad's _submit copies the dwords
    ring_bytes = 4096
    ring, ptrs = s.alloc(ring_bytes), s.alloc(16)
    s.view(ring, 4 * len(dwords)).view(np.uint32)[:] = dwords
    s.view(ptrs + 8, 8).view(np.uint64)[0] = len(dwords)
    seen: list[Interrupt] = []
    cp = Pm4Processor(vp.memory, target=target, agent=s.gpu, interrupt=seen.append)
    pm4_ring = Pm4Ring(cp, ring, ring_bytes, ptrs, ptrs + 8)
    assert pm4_ring.process() == len(dwords)
    assert pm4_ring.rptr == len(dwords)
    np.testing.assert_array_equal(s.view(by, 4 * N).view(np.float32), fma(2.5, x, y))
    assert int(s.view(sig, 4).view(np.uint32)[0]) == 0x1234
    assert seen == [] and cp.dispatches == 1


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_lds_and_scratch_follow_rsrc2_and_tmpring(vp, code_objects, target):
    s = System(vp, target, code_objects["stage", target])
    assert s.prg.private_segment_size >= 48 * 4 and s.prg.rsrc2 >> 15 & 0x1FF == 1
    s.scratch()
    rng = np.random.default_rng(11)
    x = rng.standard_normal(N).astype(np.float32)
    idx = rng.integers(0, 1000, N).astype(np.int32)
    bx, by, bi = (s.alloc(4 * N, device=True) for _ in range(3))
    s.write(bx, x.tobytes())
    s.write(bi, idx.tobytes())
    args = s.alloc(64)
    s.view(args, 24).view(np.uint64)[:] = [by, bx, bi]
    q = s.launch(AMDComputeQueue, args, s.alloc(64), 1)
    Pm4Processor(vp.memory, target=target, agent=s.gpu).run_stream(list(q._q))
    staged = x * (idx % 48).astype(np.float32)  # what each work-item put in the tile
    want = staged.reshape(-1, 64)[:, ::-1].reshape(-1)  # read back mirrored in its group
    np.testing.assert_array_equal(s.view(by, 4 * N).view(np.float32), want)
    # without scratch (TMPRING_SIZE 0) the kernel's private array has nowhere to go
    s.dev.tmpring_size = 0
    q = s.launch(AMDComputeQueue, args, s.alloc(64), 1)
    with pytest.raises(MemoryFault, match="outside the 0-byte private segment"):
        Pm4Processor(vp.memory, target=target, agent=s.gpu).run_stream(list(q._q))


@pytest.mark.parametrize("target", ["gfx1100", "gfx942"])
def test_tinygrads_aql_queue_runs_pm4_through_the_pm4_ib_packet(vp, code_objects, target):
    """AMDComputeAQLQueue (tinygrad's path on multi-XCC GPUs) puts PM4 in an IB and jumps to
    it with ROCr's PM4_IB vendor packet; the dispatch itself stays an AQL packet."""
    s = System(vp, target, code_objects['axpy', target])
    x, y, by, args = s.axpy_buffers(np.random.default_rng(3))
    sig = s.alloc(64)
    q = s.launch(AMDComputeAQLQueue, args, sig, 77)
    ib = s.alloc(4 * len(q._q) + 64)
    aql = q._prep_aql(q._q, types.SimpleNamespace(
        va_addr=ib, cpu_view=lambda: types.SimpleNamespace(
            view=lambda fmt: s.view(ib, 4 * len(q._q)).view(np.uint32))))
    # tinygrad's vendor packet is byte for byte ours
    pm4_packets = [c for c in aql if isinstance(c, bytes)]
    assert pm4_packets
    for raw in pm4_packets:
        address, dwords = pm4.parse_pm4_ib_aql_packet(raw)
        assert raw[:60] == pm4.pm4_ib_aql_packet(address, dwords)[:60]
    queue = vp.queue_create(s.gpu, 64)
    done = vp.signal_create(1)
    for i, c in enumerate(aql):
        raw = bytearray(bytes(c))
        if i == len(aql) - 1:
            raw[56:64] = int(done).to_bytes(8, "little")
        publish(queue, bytes(raw))
    vp.signal_wait(done, SignalCondition.LT, 1, 30.0)
    assert queue.error is None
    np.testing.assert_array_equal(s.view(by, 4 * N).view(np.float32), fma(2.5, x, y))
    assert int(s.view(sig, 4).view(np.uint32)[0]) == 77


def test_an_unmodeled_register_stops_with_its_name(vp):
    cp = Pm4Processor(vp.memory, target="gfx1100", label="queue 3")
    stream = [*pm4.nop(3), *pm4.set_sh_reg("gfx11", "COMPUTE_THREAD_TRACE_ENABLE", 1)]
    with pytest.raises(UnmodeledRegister) as err:
        cp.run_stream(stream)
    assert str(err.value).splitlines()[0].startswith(
        "queue 3: PM4 stream dword 3: SET_SH_REG writes COMPUTE_THREAD_TRACE_ENABLE (dword "
        "address 0x2e1e), a register the virtual gfx11 GPU does not model")
    with pytest.raises(UnmodeledRegister, match="register 0x2c80"):
        cp.run_stream(pm4.set_reg(0x2C80, 1))


def test_malformed_packets_fault_with_their_offset(vp):
    cp = Pm4Processor(vp.memory, target="gfx942")
    with pytest.raises(Pm4Fault, match="dword 2: packet 0xc0043700 needs 6 dwords"):
        cp.run_stream([*pm4.nop(2), pm4.header(pm4.Op.WRITE_DATA, 4), 5])
    with pytest.raises(Pm4Fault, match="dword 1: type-0 header"):
        cp.run_stream([*pm4.nop(1), 0x00001234])
    with pytest.raises(Pm4Fault, match="dword 0: packet DMA_DATA"):
        cp.run_stream(pm4.packet(pm4.Op.DMA_DATA, 0, 0, 0, 0, 0, 0))
    with pytest.raises(Pm4Fault, match="indirect buffer 0x1000 of 8 dwords is not mapped"):
        cp.run_stream(pm4.indirect_buffer(0x1000, 8))
    with pytest.raises(Pm4Fault, match="COMPUTE_PGM_LO/HI were never set"):
        cp.run_stream(pm4.dispatch_direct(1, 1, 1, pm4.initiator()))
    with pytest.raises(MemoryFault, match="dword 0: WRITE_DATA: memory fault at 0x10"):
        cp.run_stream(pm4.write_data(0x10, [1]))


def test_ring_faults_stay_and_name_the_ring_offset(vp):
    mem = vp.memory
    ring = vp.memory_pool_allocate(next(x.handle for x in vp.agent_pools(vp.cpu_agents()[0].handle)
                                        if x.is_kernarg), 4096)
    words = mem.view(ring, 256).view(np.uint32)
    stream = [*pm4.nop(4), pm4.header(pm4.Op.SET_SH_REG, 1), 0x5000, 1]
    words[:len(stream)] = stream
    words[60:62] = np.array([0, 0], np.uint32)  # rptr, wptr words at ring + 240
    rp = Pm4Ring(Pm4Processor(mem, target="gfx1201", label="queue 9"), ring, 256, ring + 240,
                 ring + 248)
    with pytest.raises(UnmodeledRegister, match=r"queue 9: PM4 ring at 0x[0-9a-f]+ dword 4"):
        rp.process(len(stream))
    assert rp.rptr == 4  # the NOPs before the bad packet were consumed
    with pytest.raises(QueueError):
        rp.process(len(stream))


def test_nested_and_chained_ibs_release_mem_and_waits(vp):
    mem = vp.memory
    host = next(x.handle for x in vp.agent_pools(vp.cpu_agents()[0].handle) if x.is_kernarg)
    buf = vp.memory_pool_allocate(host, 4096)
    out = buf + 3072
    ib2 = [*pm4.write_data(out, [0xB2])]
    ib_chain = [*pm4.write_data(out + 4, [0xC4])]
    ib1 = [*pm4.indirect_buffer(buf + 1024, len(ib2)), *pm4.write_data(out + 8, [0xB1]),
           *pm4.indirect_buffer(buf + 2048, len(ib_chain), chain=True),
           *pm4.write_data(out + 12, [0xBAD])]  # after a chain: never runs
    mem.view(buf, 4 * len(ib1)).view(np.uint32)[:] = ib1
    mem.view(buf + 1024, 4 * len(ib2)).view(np.uint32)[:] = ib2
    mem.view(buf + 2048, 4 * len(ib_chain)).view(np.uint32)[:] = ib_chain
    mem.view(out + 16, 4).view(np.uint32)[0] = 5
    seen: list[Interrupt] = []
    cp = Pm4Processor(mem, target="gfx1100", interrupt=seen.append)
    cp.run_stream([
        *pm4.indirect_buffer(buf, len(ib1)),
        *pm4.wait_reg_mem(out + 16, 5, function=pm4.WaitFunction.EQ),
        *pm4.wait_reg_mem(0x5480, 1, memory=False, operation=1, done_register=0x5481),
        *pm4.acquire_mem("gfx11"), *pm4.event_write(pm4.EventType.CS_PARTIAL_FLUSH, 4),
        *pm4.release_mem("gfx11", out + 24, 0x1122334455667788, pm4.DataSel.DATA64,
                         pm4.IntSel.INTERRUPT_AFTER_WRITE_CONFIRM, ctxid=17),
        *pm4.release_mem("gfx11", out + 32, 0, pm4.DataSel.GPU_CLOCK),
        *pm4.copy_data(pm4.SEL_IMMEDIATE, 0x99, pm4.SEL_MEMORY, out + 40),
    ])
    got = mem.view(out, 48).view(np.uint32)
    assert got[:4].tolist() == [0xB2, 0xC4, 0xB1, 0]
    assert int(mem.view(out + 24, 8).view(np.uint64)[0]) == 0x1122334455667788
    assert int(mem.view(out + 32, 8).view(np.uint64)[0]) > 0
    assert got[10] == 0x99
    assert seen == [Interrupt("release_mem", 17, out + 24, 0x1122334455667788)]
    with pytest.raises(Pm4Fault, match="nested deeper than 4"):
        loop = [*pm4.indirect_buffer(buf + 512, 4)]
        mem.view(buf + 512, 16).view(np.uint32)[:] = loop
        cp.run_stream(loop)


def _iree_header(opcode: int, dword_count: int) -> int:
    """IREE's iree_hal_amdgpu_pm4_make_header: the packet's total dword count - 2."""
    return (3 << 30) | (opcode << 8) | ((dword_count - 2) << 16)


def test_iree_pm4_emitter_forms_run(vp):
    """The dwords IREE's AMDGPU driver (util/pm4_emitter.h) writes into PM4 IB slots, word
    for word: WRITE_DATA32/64 to TC_L2 with write confirm, COPY_DATA64 TC_L2 -> TC_L2, the
    COPY_DATA GPU-clock timestamp (DST_SEL 5 with stream cache policies), WAIT_REG_MEM64 on an
    epoch signal (LT, poll 4 | OPTIMIZE_ACE_OFFLOAD_MODE) and EVENT_WRITE CS_PARTIAL_FLUSH."""
    host = next(x.handle for x in vp.agent_pools(vp.cpu_agents()[0].handle) if x.is_kernarg)
    buf = vp.memory_pool_allocate(host, 4096)
    mem = vp.memory
    lo, hi = buf & 0xFFFFFFFF, buf >> 32
    mem.view(buf + 64, 8).view(np.uint64)[0] = 0x0123456789ABCDEF  # copy source
    mem.view(buf + 128, 8).view(np.int64)[0] = 3  # epoch signal value
    words = [
        _iree_header(0x37, 5), (2 << 8) | (1 << 20), lo, hi, 0xCAFE,           # write_data32
        _iree_header(0x37, 6), (2 << 8) | (1 << 20), lo + 8, hi, 0x11, 0x22,   # write_data64
        _iree_header(0x40, 6), 2 | (2 << 8) | (1 << 16) | (1 << 20),           # copy_data64
        lo + 64, hi, lo + 16, hi,
        _iree_header(0x40, 6), 9 | (1 << 16) | (1 << 20) | (1 << 13) | (5 << 8) | (1 << 25),
        0, 0, lo + 24, hi,                                                     # timestamp
        _iree_header(0x93, 9), 1 | (1 << 4), lo + 128, hi, 4, 0,               # wait < 4
        0xFFFFFFFF, 0xFFFFFFFF, 4 | 0x80000000,
        _iree_header(0x46, 2), 7 | (4 << 8),                                   # CS flush
    ]
    # our builders write the same words for the packets both have
    assert words[:5] == pm4.write_data(buf, [0xCAFE], dst_sel=pm4.SEL_TC_L2)
    assert words[-2:] == pm4.event_write(pm4.EventType.CS_PARTIAL_FLUSH, 4)
    at = words.index(_iree_header(0x93, 9))
    assert words[at:at + 9] == [*pm4.wait_reg_mem64(buf + 128, 4)[:8], 4 | 0x80000000]
    mem.view(buf + 1024, 4 * len(words)).view(np.uint32)[:] = words
    queue = vp.queue_create(vp.gpu_agents()[0].handle, 64)
    done = vp.signal_create(1)
    publish(queue, pm4.pm4_ib_aql_packet(buf + 1024, len(words), completion_signal=done))
    vp.signal_wait(done, SignalCondition.LT, 1, 10.0)
    assert queue.error is None
    got = mem.view(buf, 32).view(np.uint32)
    assert got[0] == 0xCAFE and got[2:4].tolist() == [0x11, 0x22]
    assert int(mem.view(buf + 16, 8).view(np.uint64)[0]) == 0x0123456789ABCDEF
    assert int(mem.view(buf + 24, 8).view(np.uint64)[0]) > 0


def test_a_bad_pm4_ib_faults_the_aql_queue_with_the_offset(vp):
    host = next(x.handle for x in vp.agent_pools(vp.cpu_agents()[0].handle) if x.is_kernarg)
    buf = vp.memory_pool_allocate(host, 4096)
    words = [*pm4.nop(2), *pm4.set_sh_reg("gfx11", "COMPUTE_THREAD_TRACE_ENABLE", 1)]
    vp.memory.view(buf, 4 * len(words)).view(np.uint32)[:] = words
    gfx1100 = next(a.handle for a in vp.gpu_agents() if a.name == "gfx1100")
    queue = vp.queue_create(gfx1100, 64)
    publish(queue, pm4.pm4_ib_aql_packet(buf, len(words)))
    deadline = time.monotonic() + 10
    while queue.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(queue.error, UnmodeledRegister)
    assert str(queue.error).startswith(
        f"queue {queue.id} packet 0: PM4 IB1 at 0x{buf:x} dword 2: SET_SH_REG writes "
        "COMPUTE_THREAD_TRACE_ENABLE")


def test_release_mem_interrupts_in_a_pm4_ib_reach_the_device_side(vp):
    """The emulated kernel turns them into KFD events: DeviceSide.interrupt receives them."""
    seen: list[Interrupt] = []
    vp._side = dataclasses.replace(vp._side, interrupt=seen.append)
    host = next(x.handle for x in vp.agent_pools(vp.cpu_agents()[0].handle) if x.is_kernarg)
    buf = vp.memory_pool_allocate(host, 4096)
    words = pm4.release_mem("gfx11", buf + 512, 5, pm4.DataSel.DATA32,
                            pm4.IntSel.INTERRUPT_AFTER_WRITE_CONFIRM, ctxid=12)
    vp.memory.view(buf, 4 * len(words)).view(np.uint32)[:] = words
    gfx1100 = next(a.handle for a in vp.gpu_agents() if a.name == "gfx1100")
    queue = vp.queue_create(gfx1100, 64)
    done = vp.signal_create(1)
    publish(queue, pm4.pm4_ib_aql_packet(buf, len(words), completion_signal=done))
    vp.signal_wait(done, SignalCondition.LT, 1, 10.0)
    assert seen == [Interrupt("release_mem", 12, buf + 512, 5)]


def test_set_sh_reg_index_writes_the_same_registers(vp):
    """SET_SH_REG_INDEX (nvd.h 0x9B) is SET_SH_REG with an index in dword 1 bits 28-31."""
    cp = Pm4Processor(vp.memory, target="gfx1201")
    user0 = pm4.register("gfx12", "COMPUTE_USER_DATA_0") - pm4.SH_REG_START
    cp.run_stream(pm4.packet(pm4.Op.SET_SH_REG_INDEX, user0 | 3 << 28, 0xAB, 0xCD))
    assert (cp.reg("COMPUTE_USER_DATA_0"), cp.reg("COMPUTE_USER_DATA_1")) == (0xAB, 0xCD)


def test_tinygrads_copy_then_compute_across_sdma_and_pm4_rings(vp, code_objects):
    """tinygrad's pattern: the SDMA queue copies x in and signals; the PM4 queue waits for that
    signal (WAIT_REG_MEM), runs axpy and signals. Each ring runs on its own doorbell worker;
    the compute queue is rung first and waits for the copy."""
    from tinygrad.runtime.ops_amd import AMDCopyQueue
    from tinygrad.runtime.support.amd import import_module

    from hsa.virtual.ring_worker import RingWorker
    from hsa.virtual.sdma import SdmaEngine
    s = System(vp, "gfx1100", code_objects["axpy", "gfx1100"])
    x, y, by, args = s.axpy_buffers(np.random.default_rng(5))
    staging = s.alloc(4 * N)
    s.write(staging, x.tobytes())
    bx = int(s.view(args, 16).view(np.uint64)[1])
    s.view(bx, 4 * N)[:] = 0  # x arrives by SDMA
    sig = s.alloc(64)
    signal = types.SimpleNamespace(value_addr=sig, timestamp_addr=sig + 8, owner=None,
                                   is_timeline=False)
    done = types.SimpleNamespace(value_addr=sig + 32, timestamp_addr=sig + 40, owner=None,
                                 is_timeline=False)
    cq = AMDCopyQueue(types.SimpleNamespace(sdma=import_module("sdma", (6, 0, 0)),
                                            target=(11, 0, 0)))
    cq.copy(types.SimpleNamespace(va_addr=bx), types.SimpleNamespace(va_addr=staging), 4 * N)
    cq.signal(signal, 1)
    q = AMDComputeQueue(s.dev)
    q.wait(signal, 1)
    q.exec(s.prg, types.SimpleNamespace(bind_data=[], buf=types.SimpleNamespace(va_addr=args)),
           (N // 64, 1, 1), (64, 1, 1))
    q.signal(done, 2)
    rings = []
    for words in (list(q._q), list(cq._q)):
        ring, ptrs = s.alloc(8192), s.alloc(16)
        s.view(ring, 4 * len(words)).view(np.uint32)[:] = words
        rings.append((ring, ptrs, len(words)))
    (pr, pp, pn), (sr, sp, sn) = rings
    compute = RingWorker(Pm4Ring(Pm4Processor(vp.memory, target="gfx1100", agent=s.gpu), pr,
                                 8192, pp, pp + 8), "pm4 0")
    copy = RingWorker(SdmaEngine(vp.memory, sr, 8192, sp, sp + 8, target="gfx1100",
                                 agent=s.gpu), "sdma 0")
    compute.ring_doorbell(pn)  # dwords
    assert not compute.wait_idle(0.05)  # waiting for the copy's signal
    copy.ring_doorbell(4 * sn)  # bytes
    assert copy.wait_idle(30) and compute.wait_idle(30)
    assert compute.error is None and copy.error is None
    assert int(s.view(sig + 32, 4).view(np.uint32)[0]) == 2
    np.testing.assert_array_equal(s.view(by, 4 * N).view(np.float32), fma(2.5, x, y))
    compute.stop()
    copy.stop()
