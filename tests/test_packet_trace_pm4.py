"""packet-trace over PM4: a PM4_IB AQL packet recorded with its indirect buffer attached is
shown packet by packet, with each dispatch decoded from the registers programmed before it
(program, grid, workgroup, wave size, LDS, user SGPRs), registers named for the queue's
agent; stats count the packet kind; a buffer whose contents were not recorded says so."""

from __future__ import annotations

import json

import pytest

import packets
from packets import pm4
from tools.packet_trace.cli import main
from tools.packet_trace.synth import LoopbackQueue

pytestmark = pytest.mark.generic
IB = 0x7F00_0010_0000
KERNARG = 0x7F00_0020_0000
PROGRAM = 0x7F00_0030_0100


def _stream(family: str) -> list[int]:
    return [
        *pm4.acquire_mem(family),
        *pm4.set_sh_reg(family, "COMPUTE_PGM_LO", PROGRAM >> 8 & 0xFFFFFFFF, PROGRAM >> 40),
        *pm4.set_sh_reg(family, "COMPUTE_PGM_RSRC1", 0x60AF0000, 2 << 1 | 1 << 7 | 3 << 15),
        *pm4.set_sh_reg(family, "COMPUTE_USER_DATA_0", KERNARG & 0xFFFFFFFF, KERNARG >> 32),
        *pm4.set_sh_reg(family, "COMPUTE_START_X", 0, 0, 0, 256, 1, 1),
        *pm4.dispatch_direct(40, 2, 1, pm4.initiator(wave32=family != "gfx9")),
        *pm4.event_write(pm4.EventType.CS_PARTIAL_FLUSH, 4),
        *pm4.release_mem(family, 0x7F00_0040_0000, 1, pm4.DataSel.DATA32,
                         pm4.IntSel.INTERRUPT_AFTER_WRITE_CONFIRM, ctxid=3),
    ]


@pytest.mark.parametrize("agent,family", [("gfx942", "gfx9"), ("gfx1201", "gfx12")])
def test_show_decodes_the_pm4_buffer_and_its_dispatch(tmp_path, capsys, monkeypatch, agent,
                                                       family):
    monkeypatch.setenv("COLUMNS", "400")  # the details column unfolded
    path = tmp_path / "pm4.aqltrace"
    stream = _stream(family)
    writer = packets.TraceWriter(path)
    previous = packets.set_sink(writer)
    try:
        writer.queue_created(0, {"size": 64, "agent": agent})
        ring = LoopbackQueue(64, 0).ring()
        ring.publish(pm4.pm4_ib_aql_packet(IB, len(stream), completion_signal=0x51),
                     kernarg=pm4.as_bytes(stream))
        ring.publish(pm4.pm4_ib_aql_packet(IB, len(stream)))  # contents not recorded
    finally:
        packets.set_sink(previous)
        writer.close()
    assert main(["show", str(path), "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert out.count("pm4_ib") == 2
    assert f"IB 0x{IB:x}, {len(stream)} dwords:" in out
    assert "SET_SH_REG COMPUTE_PGM_LO=0x" in out and "COMPUTE_USER_DATA_1=0x7f00" in out
    assert "DISPATCH_DIRECT 40x2x1" in out
    wave = "wave64" if family == "gfx9" else "wave32"
    assert (f"-> dispatch program 0x{PROGRAM:x}: 40x2x1 workgroups of 256x1x1, {wave}, "
            f"lds 1536 B, user SGPRs [0x{KERNARG & 0xFFFFFFFF:x}, 0x{KERNARG >> 32:x}]") in out
    assert "RELEASE_MEM" in out and "ctxid=3" in out and "completion_signal=0x51" in out
    assert "(contents not recorded)" in out
    assert main(["stats", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["packets"]["pm4_ib"] == 2


def _write(path, stream: list[int]) -> None:
    writer = packets.TraceWriter(path)
    previous = packets.set_sink(writer)
    try:
        writer.queue_created(0, {"size": 64, "agent": "gfx1100"})
        LoopbackQueue(64, 0).ring().publish(pm4.pm4_ib_aql_packet(IB, len(stream)),
                                            kernarg=pm4.as_bytes(stream))
    finally:
        packets.set_sink(previous)
        writer.close()


def test_diff_compares_pm4_buffers_packet_by_packet(tmp_path, capsys):
    a, b, c = tmp_path / "a.aqltrace", tmp_path / "b.aqltrace", tmp_path / "c.aqltrace"
    stream = _stream("gfx11")
    changed = list(stream)
    at = stream.index(pm4.header(pm4.Op.DISPATCH_DIRECT, 3))
    changed[at + 1] = 41  # 41 workgroups instead of 40
    _write(a, stream)
    _write(b, changed)
    _write(c, stream)
    assert main(["diff", str(a), str(c)]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "DISPATCH_DIRECT 40x2x1 initiator=0x8005 -> " in out and "DISPATCH_DIRECT 41x2x1" in out
    assert "40x2x1 workgroups" in out and "41x2x1 workgroups" in out


def test_the_aql_decoder_names_the_pm4_ib_packet():
    raw = pm4.pm4_ib_aql_packet(IB, 96, completion_signal=0x77)
    fields = packets.decode(raw)
    assert fields["kind"] == "pm4_ib" and fields["ib_address"] == IB
    assert fields["ib_dwords"] == 96 and fields["completion_signal"] == 0x77
    assert packets.encode(fields) == raw
    assert packets.format_packet(raw) == (
        f"AMD_PM4_IB barrier acq=SYSTEM rel=SYSTEM ib=0x{IB:x} dwords=96 "
        "completion_signal=0x77")
