"""The virtual GPU's compute command processor (MEC) for PM4 streams, gfx9, gfx11 and gfx12.

Two ways in:

    cp = Pm4Processor(memory, target="gfx1100", agent=agent_handle,
                      interrupt=on_interrupt)          # register state of one queue
    cp.run_ib(address, dwords)                          # an indirect buffer (PM4_IB AQL packet)

    ring = Pm4Ring(cp, ring_base, ring_bytes, rptr_address, wptr_address)
    ring.process()              # a KFD PM4 compute queue: run from *rptr to *wptr (or up to
                                # process(new_wptr)); returns when the ring is drained

`wptr` and `rptr` are 64-bit words in memory counting dwords since the queue was created (the
ring index is that count modulo the ring size); the processor stores the new read pointer
after every packet. `memory` is the virtual system's MemoryMap (or anything with the same
`read`/`write`/`view`/`find`), `agent` the agent handle used for access checks.

What each packet does here (the virtual GPU has one coherent memory, and a dispatch is
complete when DISPATCH_DIRECT returns):

- SET_SH_REG / SET_UCONFIG_REG / SET_CONFIG_REG: the shader registers of this queue. The
  registers a dispatch reads are kept (COMPUTE_PGM_LO/HI, PGM_RSRC1/2/3, USER_DATA_0..15,
  NUM_THREAD_X/Y/Z, START_X/Y/Z, TMPRING_SIZE); registers that only tune hardware
  scheduling are accepted and have no effect (RESOURCE_LIMITS, STATIC_THREAD_MGMT_SE*,
  RESTART_*, DISPATCH_SCRATCH_BASE_*, VMID, PERFCOUNT_ENABLE, PIPELINESTAT_ENABLE,
  DISPATCH_PKT_ADDR_*,
  DISPATCH_INTERLEAVE, GRBM_GFX_INDEX). Any other register stops the queue with one line
  naming it (`UnmodeledRegister`).
- DISPATCH_DIRECT / DISPATCH_INDIRECT: starts the program at COMPUTE_PGM << 8 with the
  resources of PGM_RSRC1/2/3, user SGPRs s0.. = USER_DATA_0.. (RSRC2.USER_SGPR of them),
  then the workgroup ids and the rest RSRC2 enables; workgroup size NUM_THREAD_*; LDS
  RSRC2.LDS_SIZE x 512 bytes; scratch TMPRING_SIZE.WAVESIZE x 1 KiB (gfx9) or 256 B
  (gfx10+) per wave; wave32 when the initiator's CS_W32_EN bit is set (gfx10+). The
  workgroup counts come from the packet (thread counts with USE_THREAD_DIMENSIONS). It runs
  on the same ISA executor as an AQL dispatch (hsa.virtual.executor.Dispatch with
  `registers`), to completion.
- INDIRECT_BUFFER: runs the buffer and returns (CHAIN: continues there, no return); IBs nest
  up to 4 deep.
- RELEASE_MEM: writes 32/64-bit data, the GPU clock or the system clock (DATA_SEL 1-4) to
  memory, then raises an interrupt (INT_SEL 1, 2 or 4) through `interrupt(Interrupt)`, with
  the packet's INT_CTXID (KFD's event id).
- WRITE_DATA to memory, or to registers (dst_sel 0) like SET_*_REG; COPY_DATA of memory,
  immediates and clocks into memory or registers.
- WAIT_REG_MEM (32-bit) and WAIT_REG_MEM64 (64-bit, IREE's signal wait) on memory: poll
  until the compare holds (or the processor is stopped). On
  registers: the write-then-wait form (OPERATION 1, drivers' HDP flush) completes at once
  (there is no HDP cache here); a plain register wait stops with the register's address.
- ACQUIRE_MEM, EVENT_WRITE (CS_PARTIAL_FLUSH, cache flushes), NOP, type-2 fillers: no work.
  Cache operations have nothing to do in one coherent memory, and every dispatch is already
  complete when the next packet runs.
- PRED_EXEC: runs the next N dwords if its XCC mask selects XCC 0 (the virtual GPU has one).

A malformed packet (bad header, truncated, an IB out of mapped memory) raises `Pm4Fault`,
a QueueError naming the dword offset in its buffer; a memory fault of a packet's own
address raises MemoryFault with the same prefix. The clock counters tick at `CLOCK_HZ`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ground.errors import HsaError, MemoryFault, QueueError
from ground.status import HSA_STATUS_ERROR_INVALID_ISA, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
from hsa.virtual import executor as executor_registry
from hsa.virtual.executor import Dispatch, ShaderRegisters
from packets import pm4
from packets.pm4 import Op

CLOCK_HZ = 100_000_000  # the GPU and system clock counters: 100 MHz (10 ns ticks)
MAX_IB_DEPTH = 4
LDS_GRANULE = 512  # RSRC2.LDS_SIZE unit (128 dwords)
_M32 = 0xFFFF_FFFF

# registers a dispatch reads, and registers accepted with no effect
_DISPATCH_STATE = ("COMPUTE_PGM_LO", "COMPUTE_PGM_HI", "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2",
                   "COMPUTE_PGM_RSRC3", "COMPUTE_NUM_THREAD_X", "COMPUTE_NUM_THREAD_Y",
                   "COMPUTE_NUM_THREAD_Z", "COMPUTE_START_X", "COMPUTE_START_Y",
                   "COMPUTE_START_Z", "COMPUTE_TMPRING_SIZE",
                   *(f"COMPUTE_USER_DATA_{i}" for i in range(16)))
_NO_EFFECT = ("COMPUTE_RESOURCE_LIMITS", "COMPUTE_RESTART_X", "COMPUTE_RESTART_Y",
              "COMPUTE_RESTART_Z", "COMPUTE_DISPATCH_SCRATCH_BASE_LO",
              "COMPUTE_DISPATCH_SCRATCH_BASE_HI", "COMPUTE_VMID", "COMPUTE_PERFCOUNT_ENABLE",
              "COMPUTE_PIPELINESTAT_ENABLE",
              "COMPUTE_DISPATCH_PKT_ADDR_LO", "COMPUTE_DISPATCH_PKT_ADDR_HI",
              "COMPUTE_DISPATCH_INTERLEAVE", "GRBM_GFX_INDEX",
              *(f"COMPUTE_STATIC_THREAD_MGMT_SE{i}" for i in range(9)))


def clock_ticks() -> int:
    """The GPU clock counter (RELEASE_MEM DATA_SEL 3, SDMA timestamps)."""
    return time.monotonic_ns() // (1_000_000_000 // CLOCK_HZ)


@dataclass(frozen=True)
class Interrupt:
    """An interrupt a command processor or SDMA engine raised (RELEASE_MEM INT_SEL, SDMA
    TRAP): `context` is the packet's INT_CTXID / int_context (KFD's event id)."""

    source: str  # "release_mem" or "sdma_trap"
    context: int
    address: int = 0  # RELEASE_MEM: where its data went (0: none)
    data: int = 0


class Pm4Fault(QueueError):
    """A malformed PM4 packet: the queue stops."""

    def __init__(self, text: str):
        super().__init__(HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, text)


class UnmodeledRegister(Pm4Fault):
    """A PM4 stream programmed a register the virtual GPU does not model."""


class Pm4Stopped(Exception):
    """The processor was stopped while waiting (queue destroyed)."""


@dataclass
class _Where:
    """Where the packet being run lives, for messages."""

    base: int  # address of the buffer (0: a host stream)
    offset: int  # dword offset of the packet header
    depth: int

    def __str__(self) -> str:
        level = f"IB{self.depth}" if self.depth else ("ring" if self.base else "stream")
        at = f" at 0x{self.base:x}" if self.base else ""
        return f"PM4 {level}{at} dword {self.offset}"


class Pm4Processor:
    """The register state and packet semantics of one PM4 compute queue."""

    def __init__(self, memory: Any, *, target: str, agent: int | None = None,
                 interrupt: Callable[[Interrupt], None] | None = None,
                 label: str = "PM4 queue", queue_address: int = 0,
                 lds_size: int = 64 << 10,
                 kernel_name: Callable[[int], str] | None = None,
                 stop: Callable[[], bool] | None = None, overlap: str | None = None) -> None:
        self.memory = memory
        # "reverse" (the virtual provider's AMDGPU_VIRTUAL_OVERLAP): dispatches run in
        # reverse order between the points that wait for them (CS_PARTIAL_FLUSH,
        # RELEASE_MEM, a memory wait, the end of the buffer), as hardware may overlap
        # them: a stream that lacks a barrier reads stale data, as an AQL one does
        self.overlap = overlap
        self._pending: list[tuple[Any, Dispatch]] = []
        self.target = target
        self.family = pm4.family_of(target)
        self.agent = agent
        self.interrupt = interrupt
        self.label = label
        self.queue_address = queue_address
        self.lds_size = lds_size
        self.kernel_name = kernel_name
        self.stop = stop or (lambda: False)
        regs = pm4.SH_REGISTERS[self.family]
        self._kept = {regs[n] for n in _DISPATCH_STATE if n in regs}
        self._ignored = {regs[n] for n in _NO_EFFECT if n in regs}
        self.registers: dict[int, int] = {}
        self.dispatches = 0  # dispatches run (COMPUTE_DISPATCH_ID of the next one)
        self._executor: Any = None
        self._reg = regs

    # --- entry points ---------------------------------------------------------------------
    def run_ib(self, address: int, dwords: int, depth: int = 1) -> None:
        """Run the indirect buffer of `dwords` dwords at `address`."""
        try:
            self._run_ib(address, dwords, depth)
            if depth == 1:
                self.flush()  # the packet that named it completes after all of its work
        except BaseException:
            self._pending = []  # a stopped queue runs nothing more of it
            raise

    def _run_ib(self, address: int, dwords: int, depth: int = 1) -> None:
        if depth > MAX_IB_DEPTH:
            raise Pm4Fault(f"{self.label}: indirect buffers nested deeper than {MAX_IB_DEPTH} "
                           f"(IB at 0x{address:x}); flatten the chain or use CHAIN")
        while True:
            try:
                raw = self.memory.view(address, 4 * dwords, self.agent)
            except MemoryFault as exc:
                raise Pm4Fault(f"{self.label}: indirect buffer 0x{address:x} of {dwords} dwords "
                               f"is not mapped for the agent ({exc.text})") from None
            words = raw.view(np.uint32)
            chained = self._run(words, _Where(address, 0, depth))
            if chained is None:
                return
            address, dwords = chained

    def run_stream(self, dwords: Sequence[int] | np.ndarray, base_address: int = 0) -> None:
        """Run PM4 dwords held by the host (tests, tools)."""
        try:
            chained = self._run(np.asarray(dwords, dtype=np.uint32), _Where(base_address, 0, 0))
            if chained is not None:
                self._run_ib(*chained)
            self.flush()
        except BaseException:
            self._pending = []
            raise

    def flush(self) -> None:
        """Run the dispatches held back by overlap="reverse", last first."""
        pending, self._pending = self._pending, []
        for executor, dispatch in reversed(pending):
            executor.run(dispatch, self.memory)

    # --- the packet loop ------------------------------------------------------------------
    def _run(self, words: np.ndarray, where: _Where) -> tuple[int, int] | None:
        """Run the packets of `words`; a CHAIN IB ends it and is returned as (address,
        dwords)."""
        n = len(words)
        i = 0
        while i < n:
            where.offset = i
            size = self._size(words, i, n, where)
            outcome = self._one(words, i, size, where)
            if outcome is not None:
                if outcome[0] == "chain":
                    return outcome[1]
                size += outcome[1]  # PRED_EXEC's skipped dwords
            i += size
        return None

    def _one(self, words: np.ndarray, i: int, size: int, where: _Where) -> tuple | None:
        h = int(words[i])
        if h >> 30 != 3:
            return None  # type-2 filler
        return self._packet((h >> 8) & 0xFF, words[i + 1:i + size], where)

    def _size(self, words: np.ndarray, i: int, n: int, where: _Where) -> int:
        try:
            size = pm4.packet_size(words, i)
        except Exception as exc:  # PacketError: a type-0/1 header
            raise Pm4Fault(f"{self.label}: {where}: {exc}; the queue is stopped") from None
        if i + size > n:
            raise Pm4Fault(f"{self.label}: {where}: packet 0x{int(words[i]):08x} needs {size} "
                           f"dwords, the buffer has {n - i} left; the queue is stopped")
        return size

    def _packet(self, op: int, b: np.ndarray, where: _Where) -> tuple | None:
        if self._pending and op in (Op.EVENT_WRITE, Op.RELEASE_MEM, Op.WAIT_REG_MEM,
                                    Op.WAIT_REG_MEM64):
            self.flush()  # these wait for the dispatches before them
        if op in (Op.NOP, Op.ACQUIRE_MEM, Op.EVENT_WRITE):
            return None
        if op in pm4.REG_SPACES:
            self._need(b, 2, op, where)
            start = pm4.REG_SPACES[op][0] + (int(b[0]) & 0xFFFF)
            for k, value in enumerate(b[1:]):
                self._set(start + k, int(value), where, Op(op).name)
            return None
        if op == Op.DISPATCH_DIRECT:
            self._need(b, 4, op, where)
            self._dispatch(int(b[0]), int(b[1]), int(b[2]), int(b[3]), where)
            return None
        if op == Op.DISPATCH_INDIRECT:
            self._need(b, 3, op, where)
            address = int(b[1]) << 32 | int(b[0])
            xyz = self._read(address, 12, where, "DISPATCH_INDIRECT arguments").view(np.uint32)
            self._dispatch(int(xyz[0]), int(xyz[1]), int(xyz[2]), int(b[2]), where)
            return None
        if op == Op.INDIRECT_BUFFER:
            self._need(b, 3, op, where)
            address = (int(b[1]) & 0xFFFF) << 32 | (int(b[0]) & ~3 & _M32)
            control = int(b[2])
            dwords = control & pm4.IB_SIZE_MASK
            if not control & pm4.INDIRECT_BUFFER_VALID or dwords == 0:
                raise Pm4Fault(f"{self.label}: {where}: INDIRECT_BUFFER control 0x{control:08x} "
                               "has no VALID bit or size 0; the queue is stopped")
            if control & pm4.INDIRECT_BUFFER_CHAIN:
                return ("chain", (address, dwords))
            self._run_ib(address, dwords, where.depth + 1)
            return None
        if op == Op.RELEASE_MEM:
            self._need(b, 7, op, where)
            self._release_mem(b, where)
            return None
        if op == Op.WRITE_DATA:
            self._need(b, 4, op, where)
            self._write_data(b, where)
            return None
        if op == Op.WAIT_REG_MEM:
            self._need(b, 6, op, where)
            self._wait_reg_mem(b, where)
            return None
        if op == Op.WAIT_REG_MEM64:
            self._need(b, 8, op, where)
            self._wait_reg_mem64(b, where)
            return None
        if op == Op.COPY_DATA:
            self._need(b, 5, op, where)
            self._copy_data(b, where)
            return None
        if op == Op.PRED_EXEC:
            self._need(b, 1, op, where)
            if not (int(b[0]) >> 24) & 1:  # XCC 0 not selected: skip the predicated dwords
                return ("skip", int(b[0]) & 0x3FFF)
            return None
        name = pm4.Pm4Packet(0, 3, op, ()).name
        raise Pm4Fault(f"{self.label}: {where}: packet {name} (opcode 0x{op:02x}) is not one the "
                       "virtual command processor runs; the queue is stopped")

    def _need(self, b: np.ndarray, count: int, op: int, where: _Where) -> None:
        if len(b) < count:
            raise Pm4Fault(f"{self.label}: {where}: {Op(op).name} has {len(b)} body dwords, "
                           f"needs {count}; the queue is stopped")

    # --- registers ------------------------------------------------------------------------
    def _set(self, address: int, value: int, where: _Where, how: str) -> None:
        if address in self._kept:
            self.registers[address] = value
        elif address not in self._ignored:
            name = pm4.register_name(self.family, address)
            raise UnmodeledRegister(
                f"{self.label}: {where}: {how} writes {name} (dword address 0x{address:x}), a "
                f"register the virtual {self.family} GPU does not model; the queue is stopped")

    def reg(self, name: str) -> int:
        return self.registers.get(self._reg[name], 0)

    # --- dispatch -------------------------------------------------------------------------
    def _dispatch(self, x: int, y: int, z: int, initiator: int, where: _Where) -> None:
        if not initiator & pm4.INITIATOR_COMPUTE_SHADER_EN:
            return  # COMPUTE_SHADER_EN clear: nothing launches
        program = (self.reg("COMPUTE_PGM_HI") << 32 | self.reg("COMPUTE_PGM_LO")) << 8
        rsrc1, rsrc2 = self.reg("COMPUTE_PGM_RSRC1"), self.reg("COMPUTE_PGM_RSRC2")
        rsrc3 = self.reg("COMPUTE_PGM_RSRC3")
        wg = (self.reg("COMPUTE_NUM_THREAD_X") & 0xFFFF, self.reg("COMPUTE_NUM_THREAD_Y") & 0xFFFF,
              self.reg("COMPUTE_NUM_THREAD_Z") & 0xFFFF)
        start = tuple(self.reg(f"COMPUTE_START_{d}") for d in "XYZ")
        counts = (x, y, z)
        problems = []
        if program == 0:
            problems.append("COMPUTE_PGM_LO/HI were never set")
        if 0 in wg or wg[0] * wg[1] * wg[2] > 1024:
            problems.append(f"COMPUTE_NUM_THREAD_X/Y/Z give a {wg[0]}x{wg[1]}x{wg[2]} workgroup "
                            "(1..1024 work-items)")
        if any(start) and not initiator & pm4.INITIATOR_FORCE_START_AT_000:
            problems.append(f"COMPUTE_START_X/Y/Z = {start}: dispatches with a start offset "
                            "are not modeled (set FORCE_START_AT_000 or zero them)")
        lds = ((rsrc2 >> 15) & 0x1FF) * LDS_GRANULE
        if lds > self.lds_size:
            problems.append(f"COMPUTE_PGM_RSRC2.LDS_SIZE asks {lds} bytes of the "
                            f"{self.lds_size}-byte LDS")
        if problems:
            raise Pm4Fault(f"{self.label}: {where}: DISPATCH: " + "; ".join(problems)
                           + "; the queue is stopped")
        if initiator & pm4.INITIATOR_USE_THREAD_DIMENSIONS:
            grid = counts
        else:
            grid = (x * wg[0], y * wg[1], z * wg[2])
        wave32 = self.family != "gfx9" and bool(initiator & pm4.INITIATOR_CS_W32_EN)
        wave = 32 if wave32 else 64
        tmpring = self.reg("COMPUTE_TMPRING_SIZE")
        # WAVESIZE: bits 12-24 in 1 KiB units (gfx9), 12-26 (gfx11) / 12-29 (gfx12) in 256 B
        if self.family == "gfx9":
            wave_scratch = ((tmpring >> 12) & 0x1FFF) * 1024
        else:
            wave_scratch = ((tmpring >> 12) & (0x7FFF if self.family == "gfx11" else 0x3FFFF)) * 256
        user = tuple(self.reg(f"COMPUTE_USER_DATA_{i}") for i in range(16))
        name = self.kernel_name(program) if self.kernel_name else f"PM4 program 0x{program:x}"
        dispatch = Dispatch(
            packet_address=0, queue_address=self.queue_address, dispatch_id=self.dispatches,
            dims=3, workgroup_size=wg, grid_size=grid,
            private_segment_size=wave_scratch // wave, group_segment_size=lds,
            kernel_object=program, kernarg_address=0, agent=self.agent,  # type: ignore[arg-type]
            target=self.target, wavefront_size=wave, kernel_name=name,
            registers=ShaderRegisters(program, rsrc1, rsrc2, rsrc3, user))
        self.dispatches += 1
        if 0 in grid:
            return
        executor = self._executor
        if executor is None:
            executor = executor_registry.executor_for(self.family)
            if executor is None:
                raise QueueError(HSA_STATUS_ERROR_INVALID_ISA,
                                 f"{self.label}: no ISA executor for {self.family} to run "
                                 f"{name}")
            self._executor = executor
        if self.overlap == "reverse":
            self._pending.append((executor, dispatch))
            return
        executor.run(dispatch, self.memory)

    # --- memory packets -------------------------------------------------------------------
    def _read(self, address: int, size: int, where: _Where, what: str) -> np.ndarray:
        try:
            return self.memory.view(address, size, self.agent)
        except MemoryFault as exc:
            raise MemoryFault(exc.status, f"{self.label}: {where}: {what}: {exc.text}",
                              address=address) from None

    def _write(self, address: int, data: bytes, where: _Where, what: str) -> None:
        self._read(address, len(data), where, what)[:] = np.frombuffer(data, np.uint8)

    def _release_mem(self, b: np.ndarray, where: _Where) -> None:
        sel = int(b[1])
        data_sel, int_sel, dst_sel = sel >> 29 & 7, sel >> 24 & 7, sel >> 16 & 3
        address = int(b[3]) << 32 | int(b[2])
        data = int(b[5]) << 32 | int(b[4])
        if dst_sel > 1:
            raise Pm4Fault(f"{self.label}: {where}: RELEASE_MEM DST_SEL {dst_sel} (queue write "
                           "pointer) is not modeled; write to memory (0 or 1)")
        if data_sel in (3, 4):
            data = clock_ticks()
        if data_sel == 1:
            self._write(address, (data & _M32).to_bytes(4, "little"), where, "RELEASE_MEM")
        elif data_sel in (2, 3, 4):
            self._write(address, data.to_bytes(8, "little"), where, "RELEASE_MEM")
        elif data_sel != 0:
            raise Pm4Fault(f"{self.label}: {where}: RELEASE_MEM DATA_SEL {data_sel} is not "
                           "modeled (0-4 are)")
        if int_sel in (1, 2, 4):
            if self.interrupt is not None:
                self.interrupt(Interrupt("release_mem", int(b[6]),
                                         address if data_sel else 0, data))
        elif int_sel not in (0, 3):
            raise Pm4Fault(f"{self.label}: {where}: RELEASE_MEM INT_SEL {int_sel} (conditional "
                           "interrupt) is not modeled")

    def _write_data(self, b: np.ndarray, where: _Where) -> None:
        control = int(b[0])
        dst_sel = control >> 8 & 0xF
        address = int(b[2]) << 32 | int(b[1])
        values = b[3:]
        one = bool(control & pm4.WRITE_DATA_WR_ONE_ADDR)
        if dst_sel == pm4.SEL_REGISTER:
            for k, v in enumerate(values):
                self._set(int(b[1]) + (0 if one else k), int(v), where, "WRITE_DATA")
            return
        if dst_sel not in (pm4.SEL_MEMORY, pm4.SEL_TC_L2, pm4.SEL_MEMORY_ASYNC):
            raise Pm4Fault(f"{self.label}: {where}: WRITE_DATA DST_SEL {dst_sel} is not "
                           "modeled (0 register, 1/2/5 memory)")
        if one:
            self._write(address, values[-1:].tobytes(), where, "WRITE_DATA")
        else:
            self._write(address, values.tobytes(), where, "WRITE_DATA")

    def _copy_data(self, b: np.ndarray, where: _Where) -> None:
        control = int(b[0])
        src_sel, dst_sel = control & 0xF, control >> 8 & 0xF
        wide = bool(control & pm4.COPY_DATA_COUNT_SEL_64)
        nbytes = 8 if wide else 4
        src = int(b[2]) << 32 | int(b[1])
        dst = int(b[4]) << 32 | int(b[3])
        if src_sel in (pm4.SEL_MEMORY, pm4.SEL_TC_L2):
            value = int.from_bytes(self._read(src, nbytes, where, "COPY_DATA source").tobytes(),
                                   "little")
        elif src_sel == pm4.SEL_IMMEDIATE:
            value = src
        elif src_sel in (pm4.SEL_GPU_CLOCK, 10):
            value = clock_ticks()
        else:
            raise Pm4Fault(f"{self.label}: {where}: COPY_DATA SRC_SEL {src_sel} is not modeled "
                           "(1/2 memory, 5 immediate, 9/10 clocks are)")
        value &= (1 << (8 * nbytes)) - 1
        if dst_sel == pm4.SEL_REGISTER:
            self._set(int(b[3]), value & _M32, where, "COPY_DATA")
        elif dst_sel in (pm4.SEL_MEMORY, pm4.SEL_TC_L2, pm4.SEL_MEMORY_ASYNC):
            self._write(dst, value.to_bytes(nbytes, "little"), where, "COPY_DATA")
        else:
            raise Pm4Fault(f"{self.label}: {where}: COPY_DATA DST_SEL {dst_sel} is not modeled "
                           "(0 register, 1/2/5 memory are)")

    def _wait_reg_mem(self, b: np.ndarray, where: _Where) -> None:
        control = int(b[0])
        function, memory, operation = control & 7, control >> 4 & 1, control >> 6 & 3
        reference, mask = int(b[3]), int(b[4])
        if not memory:
            if operation == 1:  # write-then-wait on registers: the HDP flush idiom
                return
            raise UnmodeledRegister(
                f"{self.label}: {where}: WAIT_REG_MEM polls register 0x{int(b[1]):x}, which "
                f"the virtual {self.family} GPU does not model; the queue is stopped")
        address = int(b[2]) << 32 | int(b[1])
        view = self._read(address, 4, where, "WAIT_REG_MEM").view(np.uint32)
        wait_until(lambda: compare(int(view[0]) & mask, function, reference), self.stop)


    def _wait_reg_mem64(self, b: np.ndarray, where: _Where) -> None:
        control = int(b[0])
        function = control & 7
        if not control >> 4 & 1:
            raise Pm4Fault(f"{self.label}: {where}: WAIT_REG_MEM64 on registers is not modeled "
                           "(memory waits are)")
        address = int(b[2]) << 32 | (int(b[1]) & ~7 & _M32)
        reference = int(b[4]) << 32 | int(b[3])
        mask = int(b[6]) << 32 | int(b[5])
        view = self._read(address, 8, where, "WAIT_REG_MEM64").view(np.uint64)
        wait_until(lambda: compare(int(view[0]) & mask, function, reference), self.stop)


def ring_slice(ring: np.ndarray, at: int, n: int) -> np.ndarray:
    """`n` dwords of a ring from index `at`, wrapping at its end: a view unless they wrap."""
    end = at + n
    if end <= len(ring):
        return ring[at:end]
    return np.concatenate((ring[at:], ring[:end - len(ring)]))


def compare(value: int, function: int, reference: int) -> bool:
    """WAIT_REG_MEM / POLL_REGMEM functions: 0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >."""
    if function == 0:
        return True
    if function == 1:
        return value < reference
    if function == 2:
        return value <= reference
    if function == 3:
        return value == reference
    if function == 4:
        return value != reference
    if function == 5:
        return value >= reference
    if function == 6:
        return value > reference
    raise Pm4Fault(f"wait function {function} is reserved (0..6)")


def wait_until(test: Callable[[], bool], stop: Callable[[], bool]) -> None:
    """Poll `test` with a growing sleep (a command processor re-reads memory) until it holds;
    Pm4Stopped when `stop()` turns true first."""
    delay = 0.00002
    while not test():
        if stop():
            raise Pm4Stopped
        time.sleep(delay)
        delay = min(delay * 2, 0.002)


class Pm4Ring:
    """A KFD PM4 compute queue: a ring of `ring_bytes` at `ring_base`, 64-bit read and write
    pointers (dwords since creation) at `rptr_address` and `wptr_address`."""

    def __init__(self, processor: Pm4Processor, ring_base: int, ring_bytes: int,
                 rptr_address: int, wptr_address: int) -> None:
        if ring_bytes <= 0 or ring_bytes & (ring_bytes - 1) or ring_bytes % 4:
            raise ValueError(f"PM4 ring of {ring_bytes} bytes: KFD rings are a power of two")
        self.cp = processor
        self.dwords = ring_bytes // 4
        mem = processor.memory
        self.ring = mem.view(ring_base, ring_bytes, processor.agent).view(np.uint32)
        self._rptr = mem.view(rptr_address, 8, processor.agent).view(np.uint64)
        self._wptr = mem.view(wptr_address, 8, processor.agent).view(np.uint64)
        self.base = ring_base
        self.error: HsaError | None = None

    @property
    def rptr(self) -> int:
        return int(self._rptr[0])

    @property
    def stop(self) -> Callable[[], bool]:
        """The processor's stop test (hsa.virtual.ring_worker sets it)."""
        return self.cp.stop

    @stop.setter
    def stop(self, test: Callable[[], bool]) -> None:
        self.cp.stop = test

    def process(self, new_wptr: int | None = None) -> int:
        """Run every packet from the read pointer up to `new_wptr` (default: the write
        pointer in memory). Returns the dwords consumed. After a fault the ring stays
        stopped: every later call raises the same error."""
        if self.error is not None:
            raise self.error
        wptr = int(self._wptr[0]) if new_wptr is None else int(new_wptr)
        start = rptr = self.rptr
        try:
            while rptr < wptr:
                at = rptr % self.dwords
                where = _Where(self.base, at, 0)
                size = self.cp._size(self.ring[at:at + 1], 0, wptr - rptr, where)
                window = ring_slice(self.ring, at, size)  # a copy only where it wraps
                outcome = self.cp._one(window, 0, size, where)
                if outcome is not None:
                    if outcome[0] == "chain":
                        self.cp.run_ib(*outcome[1])
                    else:  # PRED_EXEC not selecting XCC 0: skip its dwords
                        size += outcome[1]
                rptr += size
                self._rptr[0] = rptr
            self.cp.flush()  # the ring is drained: what it dispatched has run
        except HsaError as exc:
            self.cp._pending = []
            self.error = exc
            raise
        return rptr - start

    run_until_idle = process
