"""PM4 packets of the compute command processor (MEC): type-3 headers, the packets a compute
queue runs, the shader registers they program, and a decoder.

Facts from AMD's public definitions, checked byte-exact by tests/test_packets_pm4.py against
the Linux kernel's drivers/gpu/drm/amd/amdgpu/soc15d.h (gfx9) and nvd.h (gfx10+) and the
register offsets of asic_reg/gc/gc_9_4_2_offset.h and gc_11_0_0_offset.h (compiled with gcc),
and against tinygrad's register tables for gc_9_4_3 and gc_12_0_0 (Linux 6.1 has neither):

- a type-3 header is `3 << 30 | count << 16 | opcode << 8 | shader_type << 1`, and the
  packet has `count + 1` body dwords; `PACKET3(NOP, 0x3FFF)` is a one-dword NOP (the
  kernel's ring filler) and a type-2 header (0x80000000) a one-dword filler as well;
- SET_SH_REG / SET_UCONFIG_REG / SET_CONFIG_REG take a register offset from their space's
  start (0x2C00, 0xC000, 0x2000 dwords) and then one value per consecutive register;
- RELEASE_MEM and ACQUIRE_MEM differ between gfx9 (soc15d.h: CP_COHER_CNTL, EOP_* cache
  bits) and gfx10+ (nvd.h: GCR_CNTL bits); the other packets are the same on both.

Builders return lists of dwords (`stream = [*set_sh_reg(...), *dispatch_direct(...)]`);
`as_bytes(stream)` gives little-endian bytes. `decode(dwords)` walks a stream into `Pm4Packet`
records and raises PacketError naming the dword offset of a malformed packet.

`pm4_ib_aql_packet` builds ROCr's AQL vendor-specific packet of format AMD_AQL_FORMAT_PM4_IB
(1): `{u16 header, u16 ven_hdr = 1, u32 ib_jump_cmd[4], u32 dw_cnt_remain = 10,
u32 reserved[8], hsa_signal_t completion_signal}` (ROCr amd_aql_queue.cpp and tinygrad's
AMDComputeAQLQueue write this layout): the command processor runs the indirect buffer that
`ib_jump_cmd` (an INDIRECT_BUFFER packet) names, then the packet completes like any other.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ground.errors import PacketError

FAMILIES = ("gfx9", "gfx11", "gfx12")

PACKET_TYPE2_FILLER = 0x8000_0000
NOP_ONE_DWORD_COUNT = 0x3FFF  # PACKET3(NOP, 0x3FFF): a one-dword NOP
SHADER_TYPE_COMPUTE = 1 << 1  # PACKET3_COMPUTE: bit 1 of the header


class Op(IntEnum):
    """PACKET3 opcodes (soc15d.h / nvd.h; equal on both for these)."""

    NOP = 0x10
    SET_BASE = 0x11
    DISPATCH_DIRECT = 0x15
    DISPATCH_INDIRECT = 0x16
    PRED_EXEC = 0x23
    WRITE_DATA = 0x37
    WAIT_REG_MEM = 0x3C
    INDIRECT_BUFFER = 0x3F
    COPY_DATA = 0x40
    EVENT_WRITE = 0x46
    RELEASE_MEM = 0x49
    DMA_DATA = 0x50
    ACQUIRE_MEM = 0x58
    SET_CONFIG_REG = 0x68
    SET_SH_REG = 0x76
    SET_UCONFIG_REG = 0x79
    WAIT_REG_MEM64 = 0x93  # nvd.h (gfx10+); IREE's AMDGPU driver waits on 64-bit signals with it
    SET_SH_REG_INDEX = 0x9B  # nvd.h (gfx10+): SET_SH_REG with an index field in dw1[31:28]


# register spaces: (opcode, first absolute dword address, end)
SH_REG_START, SH_REG_END = 0x2C00, 0x3000
UCONFIG_REG_START, UCONFIG_REG_END = 0xC000, 0x10000
CONFIG_REG_START, CONFIG_REG_END = 0x2000, 0x2C00
REG_SPACES: dict[int, tuple[int, int]] = {
    Op.SET_SH_REG: (SH_REG_START, SH_REG_END),
    Op.SET_SH_REG_INDEX: (SH_REG_START, SH_REG_END),
    Op.SET_UCONFIG_REG: (UCONFIG_REG_START, UCONFIG_REG_END),
    Op.SET_CONFIG_REG: (CONFIG_REG_START, CONFIG_REG_END),
}

INDIRECT_BUFFER_VALID = 1 << 23
INDIRECT_BUFFER_CHAIN = 1 << 20  # the IB replaces the current one instead of returning
IB_SIZE_MASK = 0xFFFFF

# COMPUTE_DISPATCH_INITIATOR bits (gc_*_sh_mask.h)
INITIATOR_COMPUTE_SHADER_EN = 1 << 0
INITIATOR_PARTIAL_TG_EN = 1 << 1
INITIATOR_FORCE_START_AT_000 = 1 << 2
INITIATOR_USE_THREAD_DIMENSIONS = 1 << 5
INITIATOR_CS_W32_EN = 1 << 15  # gfx10+: wave32


class WaitFunction(IntEnum):
    """WAIT_REG_MEM_FUNCTION / SDMA POLL_REGMEM func: compare (value & mask) with ref."""

    ALWAYS = 0
    LT = 1
    LE = 2
    EQ = 3
    NE = 4
    GE = 5
    GT = 6


class DataSel(IntEnum):
    """RELEASE_MEM DATA_SEL."""

    NONE = 0
    DATA32 = 1
    DATA64 = 2
    GPU_CLOCK = 3  # 64-bit GPU clock counter
    SYSTEM_CLOCK = 4  # 64-bit system (always-on) clock counter


class IntSel(IntEnum):
    """RELEASE_MEM INT_SEL."""

    NONE = 0
    INTERRUPT = 1
    INTERRUPT_AFTER_WRITE_CONFIRM = 2
    DATA_AFTER_WRITE_CONFIRM = 3


class EventType(IntEnum):
    """VGT_EVENT_TYPE values compute queues use (soc15_enum.h / tinygrad's soc tables)."""

    CS_PARTIAL_FLUSH = 0x07
    CACHE_FLUSH_AND_INV_TS_EVENT = 0x14
    BOTTOM_OF_PIPE_TS = 0x28
    CS_DONE = 0x2F


EVENT_INDEX_END_OF_PIPE = 5  # event_index__mec_release_mem__end_of_pipe
EVENT_INDEX_PARTIAL_FLUSH = 4

# Cache operations a command buffer's barriers use (soc15d.h for gfx9, nvd.h for gfx10+).
# ACQUIRE_MEM between dependent dispatches, agent scope: invalidate the shader instruction
# and scalar caches and the vector L1 (gfx9 CP_COHER_CNTL SH_ICACHE | SH_KCACHE | TCL1;
# gfx10+ GCR_CNTL GLI_INV(1) | GLK_INV | GLV_INV | GL1_INV; L2 is shared by the agent).
ACQUIRE_AGENT_GFX9 = (1 << 29) | (1 << 27) | (1 << 22)
ACQUIRE_AGENT_GFX10 = (1 << 0) | (1 << 7) | (1 << 8) | (1 << 9)
# RELEASE_MEM at the end of a buffer, system scope: write back L2 (gfx9 EOP_TCL1_ACTION_EN |
# EOP_TC_ACTION_EN | EOP_TC_WB_ACTION_EN | EOP_TC_MD_ACTION_EN; gfx10+ GCR_GL2_WB | GCR_SEQ).
RELEASE_SYSTEM_GFX9 = (1 << 16) | (1 << 17) | (1 << 15) | (1 << 21)
RELEASE_SYSTEM_GFX10 = (1 << 21) | (1 << 22)


def acquire_agent_flags(family: str) -> int:
    """The ACQUIRE_MEM cache bits of an agent-scope barrier for `family`."""
    return ACQUIRE_AGENT_GFX9 if family == "gfx9" else ACQUIRE_AGENT_GFX10


def release_system_flags(family: str) -> int:
    """The RELEASE_MEM cache bits of a system-scope release for `family`."""
    return RELEASE_SYSTEM_GFX9 if family == "gfx9" else RELEASE_SYSTEM_GFX10

# WRITE_DATA / COPY_DATA selectors (soc15d.h comments)
SEL_REGISTER = 0
SEL_MEMORY = 1  # memory, synchronous via GRBM
SEL_TC_L2 = 2
SEL_IMMEDIATE = 5  # COPY_DATA source: the immediate in the packet
SEL_MEMORY_ASYNC = 5  # WRITE_DATA destination: memory, direct
SEL_GPU_CLOCK = 9  # COPY_DATA source: the GPU clock counter
WRITE_DATA_WR_ONE_ADDR = 1 << 16
WR_CONFIRM = 1 << 20
COPY_DATA_COUNT_SEL_64 = 1 << 16


# --- shader registers: absolute dword addresses ---------------------------------------------
_COMMON = {
    "COMPUTE_DISPATCH_INITIATOR": 0x2E00,
    "COMPUTE_DIM_X": 0x2E01, "COMPUTE_DIM_Y": 0x2E02, "COMPUTE_DIM_Z": 0x2E03,
    "COMPUTE_START_X": 0x2E04, "COMPUTE_START_Y": 0x2E05, "COMPUTE_START_Z": 0x2E06,
    "COMPUTE_NUM_THREAD_X": 0x2E07, "COMPUTE_NUM_THREAD_Y": 0x2E08,
    "COMPUTE_NUM_THREAD_Z": 0x2E09,
    "COMPUTE_PIPELINESTAT_ENABLE": 0x2E0A, "COMPUTE_PERFCOUNT_ENABLE": 0x2E0B,
    "COMPUTE_PGM_LO": 0x2E0C, "COMPUTE_PGM_HI": 0x2E0D,
    "COMPUTE_DISPATCH_PKT_ADDR_LO": 0x2E0E, "COMPUTE_DISPATCH_PKT_ADDR_HI": 0x2E0F,
    "COMPUTE_DISPATCH_SCRATCH_BASE_LO": 0x2E10, "COMPUTE_DISPATCH_SCRATCH_BASE_HI": 0x2E11,
    "COMPUTE_PGM_RSRC1": 0x2E12, "COMPUTE_PGM_RSRC2": 0x2E13, "COMPUTE_VMID": 0x2E14,
    "COMPUTE_RESOURCE_LIMITS": 0x2E15,
    "COMPUTE_STATIC_THREAD_MGMT_SE0": 0x2E16, "COMPUTE_STATIC_THREAD_MGMT_SE1": 0x2E17,
    "COMPUTE_TMPRING_SIZE": 0x2E18,
    "COMPUTE_STATIC_THREAD_MGMT_SE2": 0x2E19, "COMPUTE_STATIC_THREAD_MGMT_SE3": 0x2E1A,
    "COMPUTE_RESTART_X": 0x2E1B, "COMPUTE_RESTART_Y": 0x2E1C, "COMPUTE_RESTART_Z": 0x2E1D,
    "COMPUTE_THREAD_TRACE_ENABLE": 0x2E1E, "COMPUTE_MISC_RESERVED": 0x2E1F,
    "COMPUTE_DISPATCH_ID": 0x2E20, "COMPUTE_THREADGROUP_ID": 0x2E21,
    **{f"COMPUTE_USER_DATA_{i}": 0x2E40 + i for i in range(16)},
    "COMPUTE_DISPATCH_END": 0x2E7E, "COMPUTE_NOWHERE": 0x2E7F,
    "GRBM_GFX_INDEX": 0xC200,
}
SH_REGISTERS: dict[str, dict[str, int]] = {
    # gfx90a / gfx942 / gfx950 (gc 9.4.x)
    "gfx9": {**_COMMON,
             "COMPUTE_RELAUNCH": 0x2E22,
             "COMPUTE_WAVE_RESTORE_ADDR_LO": 0x2E23, "COMPUTE_WAVE_RESTORE_ADDR_HI": 0x2E24,
             "COMPUTE_SHADER_CHKSUM": 0x2E2C, "COMPUTE_PGM_RSRC3": 0x2E2D},
    "gfx11": {**_COMMON,
              "COMPUTE_REQ_CTRL": 0x2E22,
              **{f"COMPUTE_USER_ACCUM_{i}": 0x2E24 + i for i in range(4)},
              "COMPUTE_PGM_RSRC3": 0x2E28, "COMPUTE_DDID_INDEX": 0x2E29,
              "COMPUTE_SHADER_CHKSUM": 0x2E2A,
              **{f"COMPUTE_STATIC_THREAD_MGMT_SE{i}": 0x2E27 + i for i in range(4, 8)},
              "COMPUTE_DISPATCH_INTERLEAVE": 0x2E2F, "COMPUTE_RELAUNCH": 0x2E30,
              "COMPUTE_WAVE_RESTORE_ADDR_LO": 0x2E31, "COMPUTE_WAVE_RESTORE_ADDR_HI": 0x2E32,
              "COMPUTE_RELAUNCH2": 0x2E33, "COMPUTE_DISPATCH_TUNNEL": 0x2E7D},
}
SH_REGISTERS["gfx12"] = {**SH_REGISTERS["gfx11"], "COMPUTE_STATIC_THREAD_MGMT_SE8": 0x2E23,
                         "COMPUTE_PRESCALED_DIM_X": 0x2E35, "COMPUTE_PRESCALED_DIM_Y": 0x2E36,
                         "COMPUTE_PRESCALED_DIM_Z": 0x2E37}
REGISTER_NAMES: dict[str, dict[int, str]] = {
    fam: {addr: name for name, addr in regs.items()} for fam, regs in SH_REGISTERS.items()
}


def family_of(target: str) -> str:
    """'gfx942' -> 'gfx9', 'gfx1100' -> 'gfx11', 'gfx1201' -> 'gfx12' (ValueError else)."""
    t = target.split(":")[0]
    for fam in ("gfx12", "gfx11", "gfx9"):
        if t.startswith(fam) and (fam != "gfx9" or len(t) == 6):
            return fam
    raise ValueError(f"no PM4 register table for target {target!r}; the virtual command "
                     f"processor knows {', '.join(FAMILIES)}")


def register(family: str, name: str) -> int:
    """Absolute dword address of a named register of `family` (KeyError names it)."""
    try:
        return SH_REGISTERS[family][name]
    except KeyError:
        raise KeyError(f"{family} has no register {name} in packets.pm4's table") from None


def register_name(family: str, address: int) -> str:
    """A register's name, or its address in hex when the table does not have it."""
    name = REGISTER_NAMES.get(family, {}).get(address)
    return name if name else f"register 0x{address:x}"


# --- builders --------------------------------------------------------------------------------
def header(op: int, count: int, compute: bool = False) -> int:
    """PACKET3(op, count) (| PACKET3_COMPUTE's shader-type bit): `count + 1` body dwords."""
    if not 0 <= count <= 0x3FFF:
        raise PacketError(f"PM4 packet count {count} out of 0..0x3FFF (body dwords - 1)")
    return (3 << 30) | ((int(op) & 0xFF) << 8) | ((count & 0x3FFF) << 16) | (
        SHADER_TYPE_COMPUTE if compute else 0)


def _u32(name: str, value: int) -> int:
    value = int(value)
    if not 0 <= value <= 0xFFFF_FFFF:
        raise PacketError(f"PM4 field {name}={value} does not fit 32 bits")
    return value


def _lo_hi(address: int) -> tuple[int, int]:
    address = int(address)
    if not 0 <= address < 1 << 64:
        raise PacketError(f"PM4 address 0x{address:x} does not fit 64 bits")
    return address & 0xFFFF_FFFF, address >> 32


def packet(op: int, *body: int, compute: bool = False) -> list[int]:
    """A type-3 packet with the given body dwords."""
    if not body:
        raise PacketError(f"PM4 packet {Op(op).name} needs at least one body dword")
    return [header(op, len(body) - 1, compute), *(_u32("body", b) for b in body)]


def nop(dwords: int = 1) -> list[int]:
    """Filler of exactly `dwords` dwords (1: the one-dword NOP header)."""
    if dwords < 1:
        raise PacketError(f"a PM4 NOP fills at least 1 dword, not {dwords}")
    if dwords == 1:
        return [header(Op.NOP, NOP_ONE_DWORD_COUNT)]
    return [header(Op.NOP, dwords - 2), *([0] * (dwords - 1))]


def set_reg(address: int, *values: int) -> list[int]:
    """SET_SH_REG, SET_UCONFIG_REG or SET_CONFIG_REG, chosen by the register's space."""
    for op, (start, end) in REG_SPACES.items():
        if start <= address < end:
            if address + len(values) > end:
                raise PacketError(f"{len(values)} values from register 0x{address:x} run past "
                                  f"the end of its space (0x{end:x})")
            return packet(op, address - start, *values)
    raise PacketError(f"register 0x{address:x} is in no SET_*_REG space (SH 0x2c00-0x3000, "
                      "UCONFIG 0xc000-, CONFIG 0x2000-0x2c00)")


def set_sh_reg(family: str, name: str, *values: int) -> list[int]:
    """SET_SH_REG of `values` into the named register and the ones after it."""
    return set_reg(register(family, name), *values)


def dispatch_direct(x: int, y: int, z: int, initiator: int) -> list[int]:
    """DISPATCH_DIRECT: workgroup counts (thread counts with USE_THREAD_DIMENSIONS) and
    the COMPUTE_DISPATCH_INITIATOR value."""
    return packet(Op.DISPATCH_DIRECT, x, y, z, initiator)


def dispatch_indirect(address: int, initiator: int) -> list[int]:
    """DISPATCH_INDIRECT on a compute queue: the 64-bit address of {x, y, z} dwords."""
    lo, hi = _lo_hi(address)
    if lo & 3:
        raise PacketError(f"DISPATCH_INDIRECT address 0x{address:x} is not 4-byte aligned")
    return packet(Op.DISPATCH_INDIRECT, lo, hi, initiator)


def initiator(wave32: bool = False, force_start_at_000: bool = True,
              use_thread_dimensions: bool = False) -> int:
    """COMPUTE_DISPATCH_INITIATOR as compute drivers set it."""
    return (INITIATOR_COMPUTE_SHADER_EN
            | (INITIATOR_FORCE_START_AT_000 if force_start_at_000 else 0)
            | (INITIATOR_USE_THREAD_DIMENSIONS if use_thread_dimensions else 0)
            | (INITIATOR_CS_W32_EN if wave32 else 0))


def indirect_buffer(address: int, dwords: int, chain: bool = False, vmid: int = 0) -> list[int]:
    """INDIRECT_BUFFER: run `dwords` dwords at `address` (4-byte aligned), then return
    (chain=True: continue there and never return)."""
    lo, hi = _lo_hi(address)
    if lo & 3:
        raise PacketError(f"INDIRECT_BUFFER address 0x{address:x} is not 4-byte aligned")
    if not 0 < dwords <= IB_SIZE_MASK:
        raise PacketError(f"INDIRECT_BUFFER size {dwords} dwords out of 1..{IB_SIZE_MASK}")
    control = dwords | INDIRECT_BUFFER_VALID | (INDIRECT_BUFFER_CHAIN if chain else 0) | (
        (vmid & 0xF) << 24)
    return packet(Op.INDIRECT_BUFFER, lo, hi & 0xFFFF, control)


def release_mem(family: str, address: int = 0, data: int = 0,
                data_sel: int = DataSel.DATA32, int_sel: int = IntSel.NONE,
                event: int = EventType.CACHE_FLUSH_AND_INV_TS_EVENT,
                event_index: int = EVENT_INDEX_END_OF_PIPE, cache_flags: int = 0,
                ctxid: int = 0) -> list[int]:
    """RELEASE_MEM (end-of-pipe): after prior work, write `data` (or a clock) to `address`
    and optionally raise an interrupt carrying `ctxid`. `cache_flags` are the family's own
    bits (gfx9 EOP_*, gfx10+ PACKET3_RELEASE_MEM_GCR_*)."""
    lo, hi = _lo_hi(address)
    dw1 = (event & 0x3F) | ((event_index & 0xF) << 8) | cache_flags
    dw2 = ((int(data_sel) & 7) << 29) | ((int(int_sel) & 7) << 24)  # DST_SEL 0: memory
    d_lo, d_hi = int(data) & 0xFFFF_FFFF, (int(data) >> 32) & 0xFFFF_FFFF
    del family  # same layout on gfx9 and gfx10+; only cache_flags' meaning differs
    return packet(Op.RELEASE_MEM, dw1, dw2, lo, hi, d_lo, d_hi, ctxid)


def acquire_mem(family: str, cache_flags: int = 0, base: int = 0,
                size: int = (1 << 64) - 1) -> list[int]:
    """ACQUIRE_MEM over [base, base+size): gfx9 body {CP_COHER_CNTL, size lo/hi, base
    lo/hi, poll interval 0xA}; gfx10+ {0, size lo/hi, base lo/hi, 0, GCR_CNTL}."""
    s_lo, s_hi = _lo_hi(size)
    b_lo, b_hi = _lo_hi(base)
    if family == "gfx9":
        return packet(Op.ACQUIRE_MEM, cache_flags, s_lo, s_hi, b_lo, b_hi, 0xA)
    return packet(Op.ACQUIRE_MEM, 0, s_lo, s_hi, b_lo, b_hi, 0, cache_flags)


def write_data(address: int, values: Sequence[int], dst_sel: int = SEL_MEMORY_ASYNC,
               confirm: bool = True, one_address: bool = False) -> list[int]:
    """WRITE_DATA of 32-bit `values` to memory (dst_sel 1, 2 or 5) or, with dst_sel 0, to
    the registers from dword address `address`."""
    lo, hi = _lo_hi(address)
    control = ((dst_sel & 0xF) << 8) | (WR_CONFIRM if confirm else 0) | (
        WRITE_DATA_WR_ONE_ADDR if one_address else 0)
    return packet(Op.WRITE_DATA, control, lo, hi, *values)


def wait_reg_mem(address: int, reference: int, mask: int = 0xFFFF_FFFF,
                 function: int = WaitFunction.GE, memory: bool = True,
                 operation: int = 0, poll_interval: int = 4, done_register: int = 0
                 ) -> list[int]:
    """WAIT_REG_MEM: wait until (dword at `address` & mask) <function> reference. With
    memory=False `address` is a register and operation 1 writes `done_register` first
    (the HDP-flush idiom: write FLUSH_REQ, wait on FLUSH_DONE)."""
    control = (int(function) & 7) | (int(bool(memory)) << 4) | ((operation & 3) << 6)
    if memory:
        lo, hi = _lo_hi(address)
        if lo & 3:
            raise PacketError(f"WAIT_REG_MEM address 0x{address:x} is not 4-byte aligned")
    else:
        lo, hi = address, done_register
    return packet(Op.WAIT_REG_MEM, control, lo, hi, reference, mask, poll_interval)


def wait_reg_mem64(address: int, reference: int, mask: int = (1 << 64) - 1,
                   function: int = WaitFunction.LT, poll_interval: int = 4) -> list[int]:
    """WAIT_REG_MEM64 on memory: wait until (qword at `address` & mask) <function>
    reference (IREE's epoch-signal wait: LT, interval 4 | OPTIMIZE_ACE_OFFLOAD_MODE)."""
    lo, hi = _lo_hi(address)
    if lo & 7:
        raise PacketError(f"WAIT_REG_MEM64 address 0x{address:x} is not 8-byte aligned")
    r, m = int(reference) & ((1 << 64) - 1), int(mask) & ((1 << 64) - 1)
    return packet(Op.WAIT_REG_MEM64, (int(function) & 7) | (1 << 4), lo, hi, r & 0xFFFF_FFFF,
                  r >> 32, m & 0xFFFF_FFFF, m >> 32, poll_interval)


def event_write(event: int, event_index: int = 0) -> list[int]:
    """EVENT_WRITE of an event without data (CS_PARTIAL_FLUSH: wait for prior dispatches)."""
    return packet(Op.EVENT_WRITE, (event & 0x3F) | ((event_index & 0xF) << 8))


def copy_data(src_sel: int, src: int, dst_sel: int, dst: int, count64: bool = False,
              confirm: bool = True) -> list[int]:
    """COPY_DATA of one 32- or 64-bit value: src is an address, register or immediate."""
    s_lo, s_hi = _lo_hi(src)
    d_lo, d_hi = _lo_hi(dst)
    control = (src_sel & 0xF) | ((dst_sel & 0xF) << 8) | (
        COPY_DATA_COUNT_SEL_64 if count64 else 0) | (WR_CONFIRM if confirm else 0)
    return packet(Op.COPY_DATA, control, s_lo, s_hi, d_lo, d_hi)


def as_bytes(dwords: Iterable[int]) -> bytes:
    words = list(dwords)
    return struct.pack(f"<{len(words)}I", *words)


# --- the AQL vendor packet that runs a PM4 indirect buffer ----------------------------------
AMD_AQL_FORMAT_PM4_IB = 1
PM4_IB_DW_CNT_REMAIN = 0xA


def pm4_ib_aql_packet(ib_address: int, dwords: int, completion_signal: int = 0,
                      barrier: bool = True, acquire_scope: int = 2,
                      release_scope: int = 2) -> bytes:
    """ROCr's AMD_AQL_FORMAT_PM4_IB vendor-specific AQL packet (64 bytes)."""
    hdr = 0 | (int(barrier) << 8) | ((acquire_scope & 3) << 9) | ((release_scope & 3) << 11)
    jump = indirect_buffer(ib_address, dwords)
    words = [hdr | (AMD_AQL_FORMAT_PM4_IB << 16), *jump, PM4_IB_DW_CNT_REMAIN, *([0] * 8)]
    return struct.pack("<14IQ", *words, int(completion_signal))


def parse_pm4_ib_aql_packet(raw: bytes) -> tuple[int, int]:
    """(IB address, size in dwords) of a PM4_IB AQL packet; PacketError when its jump
    command is not an INDIRECT_BUFFER packet or its fields are wrong."""
    w = struct.unpack_from("<16I", raw)
    if (w[0] >> 16) & 0xFF != AMD_AQL_FORMAT_PM4_IB:
        raise PacketError(f"vendor packet AmdFormat {(w[0] >> 16) & 0xFF} is not PM4_IB (1)")
    if w[1] != header(Op.INDIRECT_BUFFER, 2):
        raise PacketError(f"PM4_IB packet's ib_jump_cmd header 0x{w[1]:08x} is not "
                          f"PACKET3(INDIRECT_BUFFER, 2) = 0x{header(Op.INDIRECT_BUFFER, 2):08x}")
    if not w[4] & INDIRECT_BUFFER_VALID or not w[4] & IB_SIZE_MASK:
        raise PacketError(f"PM4_IB packet's IB control 0x{w[4]:08x} has no VALID bit or size 0")
    return (w[3] & 0xFFFF) << 32 | (w[2] & ~3), w[4] & IB_SIZE_MASK


# --- decoding --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pm4Packet:
    offset: int  # dword offset of the header in its stream
    type: int  # 2 or 3
    op: int  # opcode (type 3), -1 for a type-2 filler
    body: tuple[int, ...]

    @property
    def size(self) -> int:
        """Dwords the packet occupies, header included."""
        return 1 + len(self.body)

    @property
    def name(self) -> str:
        if self.type == 2:
            return "TYPE2_FILLER"
        try:
            return Op(self.op).name
        except ValueError:
            return f"OP_0x{self.op:02x}"


def packet_size(dwords: Sequence[int] | np.ndarray, offset: int) -> int:
    """Dwords of the packet at `offset` (PacketError for a type-0/1 header)."""
    h = int(dwords[offset])
    kind = h >> 30
    if kind == 2:
        return 1
    if kind != 3:
        raise PacketError(f"PM4 dword {offset}: type-{kind} header 0x{h:08x} (compute queues "
                          "take type-3 packets and type-2 fillers)")
    count = (h >> 16) & 0x3FFF
    if (h >> 8) & 0xFF == Op.NOP and count == NOP_ONE_DWORD_COUNT:
        return 1
    return count + 2


def decode(dwords: Sequence[int] | np.ndarray, base_offset: int = 0) -> list[Pm4Packet]:
    """Every packet of a stream, in order. A packet running past the end raises PacketError
    with its dword offset."""
    out = []
    i, n = 0, len(dwords)
    while i < n:
        size = packet_size(dwords, i)
        if i + size > n:
            raise PacketError(f"PM4 dword {base_offset + i}: packet 0x{int(dwords[i]):08x} "
                              f"needs {size} dwords, the stream has {n - i} left")
        h = int(dwords[i])
        if h >> 30 == 2:
            out.append(Pm4Packet(base_offset + i, 2, -1, ()))
        else:
            op = (h >> 8) & 0xFF
            body = tuple(int(x) for x in dwords[i + 1: i + size])
            out.append(Pm4Packet(base_offset + i, 3, op, body))
        i += size
    return out


def describe(pkt: Pm4Packet, family: str | None = None) -> str:
    """One line for a packet: its name and the fields that matter (registers by name)."""
    b = pkt.body
    name = pkt.name
    if pkt.type == 2 or not b:
        return name
    op = pkt.op
    if op in REG_SPACES:
        start = REG_SPACES[op][0] + (b[0] & 0xFFFF)
        regs = [f"{register_name(family or 'gfx11', start + i)}=0x{v:x}"
                for i, v in enumerate(b[1:])]
        return f"{name} " + " ".join(regs)
    if op == Op.DISPATCH_DIRECT and len(b) >= 4:
        return f"{name} {b[0]}x{b[1]}x{b[2]} initiator=0x{b[3]:x}"
    if op == Op.DISPATCH_INDIRECT and len(b) >= 3:
        return f"{name} args=0x{b[1] << 32 | b[0]:x} initiator=0x{b[2]:x}"
    if op == Op.INDIRECT_BUFFER and len(b) >= 3:
        chain = " chain" if b[2] & INDIRECT_BUFFER_CHAIN else ""
        return (f"{name} 0x{(b[1] & 0xFFFF) << 32 | (b[0] & ~3):x} "
                f"{b[2] & IB_SIZE_MASK} dwords{chain}")
    if op == Op.RELEASE_MEM and len(b) >= 7:
        sel = DataSel(b[1] >> 29 & 7).name if b[1] >> 29 & 7 < 5 else str(b[1] >> 29 & 7)
        return (f"{name} event=0x{b[0] & 0x3F:x} data_sel={sel} int_sel={b[1] >> 24 & 7} "
                f"addr=0x{b[3] << 32 | b[2]:x} data=0x{b[5] << 32 | b[4]:x} ctxid={b[6]}")
    if op == Op.WAIT_REG_MEM and len(b) >= 6:
        where = (f"mem 0x{b[2] << 32 | b[1]:x}" if b[0] >> 4 & 1 else f"reg 0x{b[1]:x}")
        return (f"{name} {where} {WaitFunction(b[0] & 7).name} 0x{b[3]:x} "
                f"mask=0x{b[4]:x}")
    if op == Op.WAIT_REG_MEM64 and len(b) >= 8:
        return (f"{name} mem 0x{b[2] << 32 | b[1]:x} {WaitFunction(b[0] & 7).name} "
                f"0x{b[4] << 32 | b[3]:x} mask=0x{b[6] << 32 | b[5]:x}")
    if op == Op.WRITE_DATA and len(b) >= 3:
        return f"{name} dst_sel={b[0] >> 8 & 0xF} addr=0x{b[2] << 32 | b[1]:x} " + \
            " ".join(f"0x{v:x}" for v in b[3:])
    return f"{name} " + " ".join(f"0x{v:x}" for v in b)


def describe_stream(dwords: Sequence[int], family: str = "gfx11") -> list[str]:
    """One line per packet of a PM4 buffer (`offset: packet`), and after each dispatch what
    the command processor launches from the registers set so far: program address, grid in
    workgroups of NUM_THREAD_X/Y/Z, wave size, LDS and the user SGPRs (COMPUTE_USER_DATA_*,
    the kernarg pointer among them). Raises PacketError for a malformed stream."""
    regs: dict[int, int] = {}
    table = SH_REGISTERS.get(family, SH_REGISTERS["gfx11"])
    lines = []
    for p in decode(dwords):
        lines.append(f"{p.offset:5d}: {describe(p, family)}")
        if p.op in REG_SPACES and p.type == 3 and p.body:
            start = REG_SPACES[p.op][0] + (p.body[0] & 0xFFFF)
            regs.update({start + i: v for i, v in enumerate(p.body[1:])})
        if p.op in (Op.DISPATCH_DIRECT, Op.DISPATCH_INDIRECT) and p.type == 3:
            def r(name: str) -> int:
                return regs.get(table[name], 0)
            program = (r("COMPUTE_PGM_HI") << 32 | r("COMPUTE_PGM_LO")) << 8
            wg = "x".join(str(r(f"COMPUTE_NUM_THREAD_{d}") & 0xFFFF) for d in "XYZ")
            init = p.body[3] if p.op == Op.DISPATCH_DIRECT and len(p.body) > 3 else (
                p.body[2] if len(p.body) > 2 else 0)
            grid = ("x".join(str(v) for v in p.body[:3]) if p.op == Op.DISPATCH_DIRECT
                    else "indirect")
            unit = "threads" if init & INITIATOR_USE_THREAD_DIMENSIONS else "workgroups"
            wave = 32 if family != "gfx9" and init & INITIATOR_CS_W32_EN else 64
            rsrc2 = r("COMPUTE_PGM_RSRC2")
            n_user = (rsrc2 >> 1) & 0x1F
            user = ", ".join(f"0x{r(f'COMPUTE_USER_DATA_{i}'):x}" for i in range(n_user))
            lds = ((rsrc2 >> 15) & 0x1FF) * 512
            lines.append(f"       -> dispatch program 0x{program:x}: {grid} {unit} of {wg}, "
                         f"wave{wave}, lds {lds} B, user SGPRs [{user}]")
    return lines
