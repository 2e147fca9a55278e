"""packets.pm4 and packets.sdma against AMD's public definitions, byte for byte.

The oracle is the Linux kernel's own headers (Debian's linux-source-6.1): soc15d.h (gfx9)
and nvd.h (gfx10+) for PM4 opcodes and field macros, gc_9_4_2/gc_11_0_0 register offsets
plus the ASIC's GC base (aldebaran/sienna_cichlid ip_offset.h) for the shader registers,
and the SDMA packet headers of SDMA 4, 5 and 6, compiled with gcc. Linux 6.1 has no gc 9.4.3
(gfx942) or 12.0.0 (gfx12) tables: those are checked against tinygrad's register tables
(generated from AMD's headers), when tinygrad is installed.
"""

from __future__ import annotations

import random

import pytest
from linux_headers import evaluate

from ground.errors import PacketError
from packets import pm4, sdma

pytestmark = pytest.mark.generic

PRELUDE = "#define __maybe_unused __attribute__((unused))"
GC = {  # family -> (register header, prefix, ip offset header)
    "gfx9": ("include/asic_reg/gc/gc_9_4_2_offset.h", "reg", "include/aldebaran_ip_offset.h"),
    "gfx11": ("include/asic_reg/gc/gc_11_0_0_offset.h", "reg",
              "include/sienna_cichlid_ip_offset.h"),
}
AMD = "drivers/gpu/drm/amd/"


@pytest.mark.parametrize("family", sorted(GC))
def test_shader_register_addresses_match_the_kernel_headers(family, tmp_path):
    header, prefix, ip = GC[family]
    exprs = {}
    for name in pm4.SH_REGISTERS[family]:
        macro = f"{prefix}{name}"
        exprs[name] = (f"GC_BASE.instance[0].segment[{macro}_BASE_IDX] + {macro}")
    got = evaluate([AMD + ip, AMD + header], exprs, tmp_path, PRELUDE)
    assert got == pm4.SH_REGISTERS[family]
    assert pm4.SH_REGISTERS[family]["COMPUTE_PGM_LO"] == 0x2E0C


@pytest.mark.parametrize("family,table", [("gfx9", "gc_9_4_3"), ("gfx12", "gc_12_0_0")])
def test_shader_register_addresses_match_tinygrads_tables(family, table):
    pytest.importorskip("tinygrad", reason="tinygrad (test extra) carries gc 9.4.3/12.0.0")
    from tinygrad.runtime.autogen.am import navi_offsets, regs, vega_offsets
    offsets = vega_offsets if family == "gfx9" else navi_offsets
    theirs = {}
    for name, (off, seg, _fields) in getattr(regs, table).items():
        short = name.removeprefix("reg").removeprefix("mm")
        theirs[short] = off + getattr(offsets, f"GC_BASE__INST0_SEG{seg}")
    ours = pm4.SH_REGISTERS[family]
    assert {n: theirs.get(n) for n in ours} == ours


def _pm4_cases(family: str) -> dict[str, tuple[list[int], str]]:
    """name -> (our dwords, the same packet composed from the header's macros, as C)."""
    rng = random.Random(f"pm4-{family}")
    addr = rng.getrandbits(47) & ~7
    value = rng.getrandbits(64)
    lo, hi = addr & 0xFFFFFFFF, addr >> 32
    v_lo, v_hi = value & 0xFFFFFFFF, value >> 32
    c = {}

    def pkt(op: str, n: int) -> str:
        return f"PACKET3({op}, {n})"

    c["nop1"] = (pm4.nop(1), "PACKET3(PACKET3_NOP, 0x3FFF)")
    c["set_sh_pgm"] = (pm4.set_sh_reg(family, "COMPUTE_PGM_LO", lo >> 8, hi >> 8),
                       f"{pkt('PACKET3_SET_SH_REG', 2)}, regCOMPUTE_PGM_LO_OFFSET, {lo >> 8}u, "
                       f"{hi >> 8}u")
    c["set_uconfig"] = (pm4.set_reg(0xC200, 0xE0000000),
                        f"{pkt('PACKET3_SET_UCONFIG_REG', 1)}, 0xC200 - "
                        "PACKET3_SET_UCONFIG_REG_START, 0xE0000000u")
    c["set_config"] = (pm4.set_reg(0x2100, 5),
                       f"{pkt('PACKET3_SET_CONFIG_REG', 1)}, 0x2100 - "
                       "PACKET3_SET_CONFIG_REG_START, 5")
    c["dispatch_direct"] = (pm4.dispatch_direct(7, 3, 1, pm4.initiator(wave32=True)),
                            f"{pkt('PACKET3_DISPATCH_DIRECT', 3)}, 7, 3, 1, 0x8005")
    c["dispatch_indirect"] = (pm4.dispatch_indirect(addr, 1),
                              f"{pkt('PACKET3_DISPATCH_INDIRECT', 2)}, {lo}u, {hi}u, 1")
    c["ib"] = (pm4.indirect_buffer(addr, 1234),
               f"{pkt('PACKET3_INDIRECT_BUFFER', 2)}, {lo}u, {hi}u, 1234 | INDIRECT_BUFFER_VALID")
    c["write_data"] = (pm4.write_data(addr, [1, 2]),
                       f"{pkt('PACKET3_WRITE_DATA', 4)}, WRITE_DATA_DST_SEL(5) | WR_CONFIRM, "
                       f"{lo}u, {hi}u, 1, 2")
    c["wait_mem"] = (pm4.wait_reg_mem(addr, 9, 0xFF, pm4.WaitFunction.EQ),
                     f"{pkt('PACKET3_WAIT_REG_MEM', 5)}, WAIT_REG_MEM_FUNCTION(3) | "
                     f"WAIT_REG_MEM_MEM_SPACE(1), {lo}u, {hi}u, 9, 0xFF, 4")
    c["wait_reg"] = (pm4.wait_reg_mem(0x1234, 1, 1, pm4.WaitFunction.GE, memory=False,
                                      operation=1, done_register=0x1235),
                     f"{pkt('PACKET3_WAIT_REG_MEM', 5)}, WAIT_REG_MEM_FUNCTION(5) | "
                     "WAIT_REG_MEM_OPERATION(1), 0x1234, 0x1235, 1, 1, 4")
    if family != "gfx9":  # nvd.h only
        c["wait_mem64"] = (pm4.wait_reg_mem64(addr, value, (1 << 64) - 1, pm4.WaitFunction.LT),
                           f"{pkt('PACKET3_WAIT_REG_MEM64', 7)}, WAIT_REG_MEM_FUNCTION(1) | "
                           f"WAIT_REG_MEM_MEM_SPACE(1), {lo}u, {hi}u, {v_lo}u, {v_hi}u, "
                           "0xFFFFFFFFu, 0xFFFFFFFFu, 4")
    c["event"] = (pm4.event_write(pm4.EventType.CS_PARTIAL_FLUSH, 4),
                  f"{pkt('PACKET3_EVENT_WRITE', 0)}, EVENT_TYPE(7) | EVENT_INDEX(4)")
    c["copy_data"] = (pm4.copy_data(pm4.SEL_IMMEDIATE, 77, pm4.SEL_MEMORY, addr, count64=True),
                      f"{pkt('PACKET3_COPY_DATA', 4)}, 5 | (1 << 8) | (1 << 16) | WR_CONFIRM, "
                      f"77, 0, {lo}u, {hi}u")
    if family == "gfx9":
        rel_flags = "EOP_TC_WB_ACTION_EN | EOP_TC_NC_ACTION_EN"
        c["release_mem"] = (
            pm4.release_mem(family, addr, value, pm4.DataSel.DATA64, pm4.IntSel.INTERRUPT,
                            cache_flags=(1 << 15) | (1 << 19)),
            f"{pkt('PACKET3_RELEASE_MEM', 6)}, EVENT_TYPE(0x14) | EVENT_INDEX(5) | {rel_flags}, "
            f"DATA_SEL(2) | INT_SEL(1) | DST_SEL(0), {lo}u, {hi}u, {v_lo}u, {v_hi}u, 0")
        flags = ("PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TC_ACTION_ENA(1) | "
                 "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_KCACHE_ACTION_ENA(1)")
        c["acquire_mem"] = (pm4.acquire_mem(family, (1 << 23) | (1 << 27), base=addr, size=4096),
                            f"{pkt('PACKET3_ACQUIRE_MEM', 5)}, {flags}, 4096, 0, {lo}u, {hi}u, "
                            "0xA")
        # the command buffer's barrier and completion bits (packets.pm4 constants)
        c["acquire_agent"] = ([pm4.ACQUIRE_AGENT_GFX9],
                              "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_ICACHE_ACTION_ENA(1) | "
                              "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_KCACHE_ACTION_ENA(1) | "
                              "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TCL1_ACTION_ENA(1)")
        c["release_system"] = ([pm4.RELEASE_SYSTEM_GFX9],
                               "EOP_TCL1_ACTION_EN | EOP_TC_ACTION_EN | EOP_TC_WB_ACTION_EN | "
                               "EOP_TC_MD_ACTION_EN")
    else:
        c["release_mem"] = (
            pm4.release_mem(family, addr, value, pm4.DataSel.GPU_CLOCK,
                            pm4.IntSel.INTERRUPT_AFTER_WRITE_CONFIRM,
                            cache_flags=(1 << 21) | (1 << 22), ctxid=42),
            f"{pkt('PACKET3_RELEASE_MEM', 6)}, PACKET3_RELEASE_MEM_EVENT_TYPE(0x14) | "
            "PACKET3_RELEASE_MEM_EVENT_INDEX(5) | PACKET3_RELEASE_MEM_GCR_GL2_WB | "
            "PACKET3_RELEASE_MEM_GCR_SEQ, PACKET3_RELEASE_MEM_DATA_SEL(3) | "
            f"PACKET3_RELEASE_MEM_INT_SEL(2) | PACKET3_RELEASE_MEM_DST_SEL(0), {lo}u, {hi}u, "
            f"{v_lo}u, {v_hi}u, 42")
        flags = ("PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_INV(1) | "
                 "PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV(1)")
        c["acquire_mem"] = (pm4.acquire_mem(family, (1 << 14) | (1 << 8), base=addr, size=4096),
                            f"{pkt('PACKET3_ACQUIRE_MEM', 6)}, 0, 4096, 0, {lo}u, {hi}u, 0, "
                            f"{flags}")
        c["acquire_agent"] = ([pm4.ACQUIRE_AGENT_GFX10],
                              "PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV(1) | "
                              "PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV(1) | "
                              "PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV(1) | "
                              "PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_INV(1)")
        c["release_system"] = ([pm4.RELEASE_SYSTEM_GFX10],
                               "PACKET3_RELEASE_MEM_GCR_GL2_WB | PACKET3_RELEASE_MEM_GCR_SEQ")
    return c


@pytest.mark.parametrize("family,header", [("gfx9", "amdgpu/soc15d.h"),
                                            ("gfx11", "amdgpu/nvd.h")])
def test_pm4_builders_match_the_kernel_macros(family, header, tmp_path):
    cases = _pm4_cases(family)
    exprs = {}
    pgm_lo = pm4.register(family, "COMPUTE_PGM_LO") - pm4.SH_REG_START
    prelude = f"#define regCOMPUTE_PGM_LO_OFFSET {pgm_lo}"
    for name, (ours, c_words) in cases.items():
        words = [w.strip() for w in _split_top(c_words)]
        assert len(words) == len(ours), name
        for i, w in enumerate(words):
            exprs[f"{name}.{i}"] = f"(uint32_t)({w})"
    got = evaluate([AMD + header], exprs, tmp_path, prelude)
    for name, (ours, _c) in cases.items():
        theirs = [got[f"{name}.{i}"] for i in range(len(ours))]
        assert ours == theirs, name
    # and the opcodes themselves
    gfx10_only = (pm4.Op.WAIT_REG_MEM64, pm4.Op.SET_SH_REG_INDEX)  # defined in nvd.h only
    known = [op for op in pm4.Op if not (family == "gfx9" and op in gfx10_only)]
    ops = evaluate([AMD + header], {op.name: f"PACKET3_{op.name}" for op in known},
                   tmp_path, prelude)
    assert ops == {op.name: int(op) for op in known}


def _split_top(text: str) -> list[str]:
    """Split a C expression list at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out.append(cur)
    return out


SDMA_HEADERS = {"gfx9": "amdgpu/vega10_sdma_pkt_open.h", "gfx10": "amdgpu/navi10_sdma_pkt_open.h",
                "gfx11": "amdgpu/sdma_v6_0_0_pkt_open.h"}


@pytest.mark.parametrize("family", sorted(SDMA_HEADERS))
def test_sdma_builders_match_the_kernel_macros(family, tmp_path):
    rng = random.Random(f"sdma-{family}")
    dst, src = rng.getrandbits(47) & ~7, rng.getrandbits(47) & ~7
    d_lo, d_hi, s_lo, s_hi = dst & 0xFFFFFFFF, dst >> 32, src & 0xFFFFFFFF, src >> 32
    P = "SDMA_PKT_"  # noqa: N806
    cases = {
        "copy": (sdma.copy_linear(family, dst, src, 4096),
                 f"{P}COPY_LINEAR_HEADER_OP(SDMA_OP_COPY) | {P}COPY_LINEAR_HEADER_SUB_OP("
                 f"SDMA_SUBOP_COPY_LINEAR), {P}COPY_LINEAR_COUNT_COUNT(4095), 0, {s_lo}u, "
                 f"{s_hi}u, {d_lo}u, {d_hi}u"),
        "fill": (sdma.constant_fill(family, dst, 0xDEADBEEF, 256),
                 f"{P}CONSTANT_FILL_HEADER_OP(SDMA_OP_CONST_FILL) | "
                 f"{P}CONSTANT_FILL_HEADER_FILLSIZE(2), {d_lo}u, {d_hi}u, 0xDEADBEEFu, "
                 f"{P}CONSTANT_FILL_COUNT_COUNT(255)"),
        "fence": (sdma.fence(family, dst, 7),
                  f"{P}FENCE_HEADER_OP(SDMA_OP_FENCE)"
                  + ("" if family == "gfx9" else f" | {P}FENCE_HEADER_MTYPE(3)")
                  + f", {d_lo}u, {d_hi}u, 7"),
        "trap": (sdma.trap(0x1234), f"{P}TRAP_HEADER_OP(SDMA_OP_TRAP), "
                                    f"{P}TRAP_INT_CONTEXT_INT_CONTEXT(0x1234)"),
        "poll": (sdma.poll_regmem(dst, 5, 0xFF, function=5),
                 f"{P}POLL_REGMEM_HEADER_OP(SDMA_OP_POLL_REGMEM) | "
                 f"{P}POLL_REGMEM_HEADER_FUNC(5) | {P}POLL_REGMEM_HEADER_MEM_POLL(1), "
                 f"{d_lo}u, {d_hi}u, 5, 0xFF, {P}POLL_REGMEM_DW5_INTERVAL(10) | "
                 f"{P}POLL_REGMEM_DW5_RETRY_COUNT(0xFFF)"),
        "atomic": (sdma.atomic(dst, 3),
                   f"{P}ATOMIC_HEADER_OP(SDMA_OP_ATOMIC) | {P}ATOMIC_HEADER_ATOMIC_OP(47), "
                   f"{d_lo}u, {d_hi}u, 3, 0, 0, 0, 0"),
        "timestamp": (sdma.timestamp(dst),
                      f"{P}TIMESTAMP_GET_GLOBAL_HEADER_OP(SDMA_OP_TIMESTAMP) | "
                      f"{P}TIMESTAMP_GET_GLOBAL_HEADER_SUB_OP(SDMA_SUBOP_TIMESTAMP_GET_GLOBAL), "
                      f"{d_lo}u, {d_hi}u"),
        "write": (sdma.write(dst, [9, 8, 7]),
                  f"{P}WRITE_UNTILED_HEADER_OP(SDMA_OP_WRITE), {d_lo}u, {d_hi}u, "
                  f"{P}WRITE_UNTILED_DW_3_COUNT(2), 9, 8, 7"),
        "nop": (sdma.nop(3), f"{P}NOP_HEADER_OP(SDMA_OP_NOP) | {P}NOP_HEADER_COUNT(2), 0, 0"),
        "indirect": (sdma.indirect(dst, 64, vmid=0),
                     f"{P}INDIRECT_HEADER_OP(SDMA_OP_INDIRECT) | {P}INDIRECT_HEADER_VMID(0), "
                     f"{d_lo}u, {d_hi}u, 64, 0, 0"),
    }
    if family != "gfx9":
        cases["gcr"] = (sdma.gcr(), f"{P}GCR_REQ_HEADER_OP(SDMA_OP_GCR_REQ), 0, 0, 0, 0")
    # a sub-window copy with every field near its widest (z: 11 bits on SDMA 4, 13 after)
    z = 2000 if family == "gfx9" else 8000
    src_w = sdma.Window(src, 16383, 3, z, pitch=1 << 19, slice=1 << 28)
    dst_w = sdma.Window(dst, 1, 16383, 5, pitch=77, slice=9999)
    W = f"{P}COPY_LINEAR_SUBWIN_"  # noqa: N806
    cases["subwin"] = (
        sdma.copy_sub_window(family, 3, src_w, dst_w, (1 << 14, 2, z + 1)),
        f"{W}HEADER_OP(SDMA_OP_COPY) | {W}HEADER_SUB_OP(SDMA_SUBOP_COPY_LINEAR_SUB_WIND) | "
        f"{W}HEADER_ELEMENTSIZE(3), {s_lo}u, {s_hi}u, {W}DW_3_SRC_X(16383) | {W}DW_3_SRC_Y(3), "
        f"{W}DW_4_SRC_Z({z}) | {W}DW_4_SRC_PITCH({(1 << 19) - 1}), "
        f"{W}DW_5_SRC_SLICE_PITCH({(1 << 28) - 1}), {d_lo}u, {d_hi}u, "
        f"{W}DW_8_DST_X(1) | {W}DW_8_DST_Y(16383), {W}DW_9_DST_Z(5) | {W}DW_9_DST_PITCH(76), "
        f"{W}DW_10_DST_SLICE_PITCH(9998), {W}DW_11_RECT_X(16383) | {W}DW_11_RECT_Y(1), "
        f"{W}DW_12_RECT_Z({z})")
    assert sdma.read_sub_window(family, cases["subwin"][0]) == (3, src_w, dst_w,
                                                                (1 << 14, 2, z + 1))
    exprs = {}
    for name, (ours, c_words) in cases.items():
        words = _split_top(c_words)
        assert len(words) == len(ours), name
        exprs.update({f"{name}.{i}": f"(uint32_t)({w})" for i, w in enumerate(words)})
    exprs["max_count"] = f"{P}COPY_LINEAR_COUNT_count_mask"
    got = evaluate([AMD + SDMA_HEADERS[family]], exprs, tmp_path)
    for name, (ours, _c) in cases.items():
        assert ours == [got[f"{name}.{i}"] for i in range(len(ours))], name
    assert got["max_count"] + 1 == sdma.max_copy_bytes(family)
    # our decoder walks the same stream back into the same packets
    stream = [w for ours, _c in cases.values() for w in ours]
    names = [p.name for p in sdma.decode(stream)]
    assert names == [sdma.Op(ours[0] & 0xFF).name for ours, _c in cases.values()]


def test_pm4_decoder_walks_a_stream_and_names_the_bad_offset():
    fam = "gfx11"
    stream = [*pm4.nop(1), *pm4.set_sh_reg(fam, "COMPUTE_USER_DATA_0", 1, 2),
              *pm4.dispatch_direct(4, 1, 1, pm4.initiator()), *pm4.nop(5), 0x80000000,
              *pm4.event_write(pm4.EventType.CS_PARTIAL_FLUSH, 4)]
    pkts = pm4.decode(stream)
    assert [p.name for p in pkts] == ["NOP", "SET_SH_REG", "DISPATCH_DIRECT", "NOP",
                                      "TYPE2_FILLER", "EVENT_WRITE"]
    assert [p.offset for p in pkts] == [0, 1, 5, 10, 15, 16]
    assert "COMPUTE_USER_DATA_0=0x1 COMPUTE_USER_DATA_1=0x2" in pm4.describe(pkts[1], fam)
    with pytest.raises(PacketError, match="dword 5: packet 0xc0031500 needs 5 dwords"):
        pm4.decode(stream[:8])
    with pytest.raises(PacketError, match="dword 0: type-0 header"):
        pm4.decode([0x1234])


def test_pm4_ib_aql_packet_layout_matches_rocrs():
    """ROCr's amd_aql_pm4_ib: header | AmdFormat 1 << 16, an INDIRECT_BUFFER jump at bytes
    4..19, dw_cnt_remain 0xA at 20, completion signal at 56 (tinygrad writes the same)."""
    raw = pm4.pm4_ib_aql_packet(0x7F00_1234_5600, 96, completion_signal=0xABCDEF)
    assert len(raw) == 64
    w = [int.from_bytes(raw[i:i + 4], "little") for i in range(0, 64, 4)]
    assert w[0] == (1 << 16) | (1 << 8) | (2 << 9) | (2 << 11)  # barrier, system scopes
    assert w[1] == (3 << 30) | (0x3F << 8) | (2 << 16)
    assert (w[2], w[3], w[4], w[5]) == (0x1234_5600, 0x7F00, 96 | (1 << 23), 0xA)
    assert int.from_bytes(raw[56:], "little") == 0xABCDEF
    assert pm4.parse_pm4_ib_aql_packet(raw) == (0x7F00_1234_5600, 96)
    with pytest.raises(PacketError, match="no VALID bit"):
        pm4.parse_pm4_ib_aql_packet(raw[:16] + bytes(4) + raw[20:])
