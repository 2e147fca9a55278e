"""Block templates and replays (trace format version 2): a command buffer's packet block is
recorded once, each submission as what changed in it. Readers (read_trace, MemorySink, the
chunked scanner) rebuild the packets byte for byte and the kernarg values of every replayed
dispatch; `packet-trace diff` between two replays names the binding arguments that changed;
version-1 files still read."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from toolchains import require_clang

import amdgpu
import packets
from amdgpu.errors import TraceFormatError
from packets import trace
from tools.packet_trace import scan

SIGNAL_ROW = 4
M64 = (1 << 64) - 1


def synthetic_template(template_id: int = 7) -> trace.BlockTemplateRecord:
    """4 dispatches (rows 1 and 2 share a kernarg block) and a barrier-AND carrying the
    signal; patch sites for binding 0, binding 1 (+16 bytes) and the last binding (-1)."""
    disp = packets.kernel_dispatch_batch(
        workgroup_size=64, grid_size=64 * np.arange(1, 5), kernel_object=0xC0DE,
        kernarg_address=16, barrier=True).view(packets.PACKET)
    block = np.concatenate([disp, packets.barrier_and_batch(dep_signals=(), count=1)
                            .view(packets.PACKET)])
    kernarg = bytes(range(80))
    return trace.BlockTemplateRecord.build(
        template_id, block, kernarg_offsets=[0, 32, 32, 64], kernarg_sizes=[24, 24, 24, 16],
        signal_row=SIGNAL_ROW, kernarg=kernarg, site_offsets=[0, 40, 64],
        site_bindings=[0, 1, -1], site_addends=[0, 16, 0])


def expected(template, base, signal, bindings) -> tuple[list[bytes], list[bytes | None]]:
    """What a replay stands for, computed the slow way."""
    words = np.frombuffer(template.block, "<u8").reshape(-1, 8).copy()
    for row, off in enumerate(template.kernarg_offsets.tolist()):
        words[row, 5] = base + off
    words[SIGNAL_ROW, 7] = signal
    karg = bytearray(template.kernarg)
    for off, b, plus in zip(template.site_offsets.tolist(), template.site_bindings.tolist(),
                            template.site_addends.tolist(), strict=True):
        struct.pack_into("<Q", karg, off, (bindings[b] + plus) & M64)
    kargs = [bytes(karg[o:o + s]) for o, s in zip(template.kernarg_offsets.tolist(),
                                                  template.kernarg_sizes.tolist(), strict=True)]
    return [words[i].tobytes() for i in range(len(words))], kargs + [None]


REPLAYS = [(0x9000, 0x51, (0x1000, 0x2000, 0xAAAA)), (0x9100, 0x52, (0x3000, 0x2000, 0xAAAA)),
           (0x9200, 0x51, (0x1000, 0x4000, 0xBBBB, 0xCCCC))]


def write_replays(path, template) -> None:
    with packets.TraceWriter(path, slab_bytes=512) as w:
        w.kernel_symbol(0xC0DE, "k")
        w.block_template(template)
        first = 0
        for i, (base, signal, bindings) in enumerate(REPLAYS):
            w.block_replay(2, first, 100 * i, 100 * i + 5, 100 * i + 9, template.template_id,
                           base, signal, bindings)
            first += template.count
            w.record_packet(2, first, 1000, 1001, 1002, packets.barrier_and(dep_signals=[]))
            first += 1


@pytest.mark.generic
def test_template_payload_round_trips():
    t = synthetic_template()
    back = trace.BlockTemplateRecord.from_payload(t.to_payload())
    assert back.template_id == 7 and back.block == t.block and back.kernarg == t.kernarg
    assert back.signal_row == SIGNAL_ROW and back.count == 5 and back.dispatches == 4
    for name in ("kernarg_offsets", "kernarg_sizes", "site_offsets", "site_bindings",
                 "site_addends"):
        assert np.array_equal(getattr(back, name), getattr(t, name)), name


@pytest.mark.generic
def test_replays_read_back_as_the_packets_they_stand_for(tmp_path):
    path = tmp_path / "replay.aqltrace"
    template = synthetic_template()
    write_replays(path, template)
    recs = list(packets.read_trace(path))
    assert [type(r).__name__ for r in recs[:2]] == ["KernelSymbolRecord", "BlockTemplateRecord"]
    pk = [r for r in recs if isinstance(r, trace.PacketRecord)]
    assert len(pk) == 3 * (template.count + 1)
    first = 0
    for i, (base, signal, bindings) in enumerate(REPLAYS):
        raws, kargs = expected(template, base, signal, bindings)
        got = pk[first:first + template.count]
        assert [r.raw for r in got] == raws
        assert [r.kernarg for r in got] == kargs
        assert [r.packet_id for r in got] == list(range(first, first + template.count))
        assert {(r.queue_id, r.reserve_ns, r.publish_ns, r.doorbell_ns) for r in got} == {
            (2, 100 * i, 100 * i + 5, 100 * i + 9)}
        first += template.count + 1
    # the unexpanded form
    replays = [r for r in packets.read_trace(path, expand=False)
               if isinstance(r, trace.BlockReplayRecord)]
    assert [(r.kernarg_base, r.signal, r.bindings) for r in replays] == REPLAYS
    # the chunked scanner, records cut at every size
    for chunk_bytes in (64, 100, 333, 4096):
        rows = np.concatenate([c.packets for c in scan.scan(path, chunk_bytes=chunk_bytes)])
        assert [row["raw"].tobytes() for row in rows] == [r.raw for r in pk]
        assert [int(row["packet_id"]) for row in rows] == [r.packet_id for r in pk]
        assert [int(row["reserve_ns"]) for row in rows] == [r.reserve_ns for r in pk]


@pytest.mark.generic
def test_memory_sink_expands_like_the_reader(tmp_path):
    path = tmp_path / "replay.aqltrace"
    template = synthetic_template()
    write_replays(path, template)
    sink = packets.MemorySink()
    sink.block_template(template)
    sink.block_replay(2, 0, 0, 5, 9, template.template_id, *REPLAYS[0])
    from_file = [r for r in packets.read_trace(path) if isinstance(r, trace.PacketRecord)]
    mem = [r for r in sink.records if isinstance(r, trace.PacketRecord)]
    assert [(r.raw, r.kernarg) for r in mem] == [(r.raw, r.kernarg)
                                                for r in from_file[:template.count]]
    with pytest.raises(TraceFormatError, match="template 99"):
        sink.block_replay(2, 0, 0, 5, 9, 99, *REPLAYS[0])


@pytest.mark.generic
def test_replay_without_its_template_is_a_format_error(tmp_path):
    path = tmp_path / "orphan.aqltrace"
    with packets.TraceWriter(path) as w:
        w.block_replay(0, 0, 1, 2, 3, 5, 0x9000, 0, (1, 2))
    with pytest.raises(TraceFormatError, match=r"byte offset 16 \(kind 8\).*template 5"):
        list(packets.read_trace(path))
    with pytest.raises(TraceFormatError, match=r"byte offset 16 \(kind 8\).*template 5"):
        list(scan.scan(path))
    # a binding index the replay does not have
    path = tmp_path / "short.aqltrace"
    with packets.TraceWriter(path) as w:
        w.block_template(synthetic_template())
        w.block_replay(0, 0, 1, 2, 3, 7, 0x9000, 0, (1,))
    with pytest.raises(TraceFormatError, match="patches binding 1, the replay has 1"):
        list(packets.read_trace(path))


@pytest.mark.generic
def test_a_replay_that_does_not_pack_is_reported_by_flush(tmp_path):
    from amdgpu.errors import AmdgpuError

    path = tmp_path / "bad.aqltrace"
    w = packets.TraceWriter(path)
    w.block_template(synthetic_template())
    w.block_replay(0, 0, 1, 2, 3, 7, 0x9000, 0, ("not an address", 2, 3))
    w.block_replay(0, 5, 1, 2, 3, 7, 0x9000, 0, (1, 2, 3))
    with pytest.raises(AmdgpuError, match="block_replay record was dropped"):
        w.flush()
    w.close()
    pk = [r for r in packets.read_trace(path) if isinstance(r, trace.PacketRecord)]
    assert [r.packet_id for r in pk] == list(range(5, 10)), "only the bad record is lost"


@pytest.mark.generic
def test_bad_templates_are_refused():
    with pytest.raises(TraceFormatError, match="past the 8-byte kernarg template"):
        trace.BlockTemplateRecord.build(1, np.zeros(64, np.uint8), [0], [16], 0, bytes(8))
    with pytest.raises(TraceFormatError, match="signal row 3"):
        trace.BlockTemplateRecord.build(1, np.zeros(128, np.uint8), signal_row=3)
    payload = synthetic_template().to_payload()
    with pytest.raises(ValueError, match="needs"):
        trace.BlockTemplateRecord.from_payload(payload[:-1])


def v1_file(path) -> list[bytes]:
    """A version-1 file written byte by byte (as a v1 writer did): a plain packet record and
    a packet batch."""
    raws = [packets.kernel_dispatch(workgroup_size=64, grid_size=64 * (i + 1),
                                    kernel_object=0x1000, kernarg_address=0x100 * (i + 1))
            for i in range(3)]
    plain = struct.pack("<QQQQQ64s", 1, 0, 10, 20, 30, raws[0])
    batch = struct.pack("<QQQQQII", 1, 1, 40, 50, 60, 2, 0) + raws[1] + raws[2]
    with open(path, "wb") as f:
        f.write(struct.pack("<8sHHI", b"AMDGPUTR", 1, 16, 0))
        f.write(struct.pack("<IHH", len(plain), 1, 0) + plain)
        f.write(struct.pack("<IHH", len(batch), 6, 0) + batch)
    return raws


@pytest.mark.generic
def test_version_1_files_still_read(tmp_path):
    path = tmp_path / "v1.aqltrace"
    raws = v1_file(path)
    with open(path, "rb") as f:
        reader = trace.TraceReader(f)
        recs = list(reader)
    assert reader.version == 1
    assert [r.raw for r in recs] == raws and [r.packet_id for r in recs] == [0, 1, 2]
    rows = np.concatenate([c.packets for c in scan.scan(path)])
    assert [row["raw"].tobytes() for row in rows] == raws
    # and this writer writes version 2
    with packets.TraceWriter(tmp_path / "v2.aqltrace"):
        pass
    assert struct.unpack_from("<H", (tmp_path / "v2.aqltrace").read_bytes(), 8)[0] == 2


# --- the driver ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saxpy_code():
    import compiler

    require_clang()  # skips only when clang is absent; a failed compile fails
    return compiler.compile("saxpy_hidden", targets=["gfx1100"])


@pytest.fixture
def gated():
    """A virtual device whose lane 0 waits on a gate: published packets stay in the ring."""
    d = amdgpu.open("amdgpu:virtual", lanes=1)
    gate = d.provider.signal_create(1)
    d.lanes_[0].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
    yield d
    d.provider.signal_store(gate, 0)
    d.close(timeout=0)  # a release error fails the test


def record_cb(dev, code, n=6):
    k = dev.load(code).kernel("saxpy_hidden")
    cb = dev.command_buffer()
    for i in range(n):  # alternating bindings; float constants make rows 0/2/4 share kernargs
        cb.dispatch(k, 256, 64, (cb.binding(i % 2), cb.binding(1 - i % 2),
                                 np.float32(i % 2), 256))
    return k, cb.finalize()


def ring_slots(lane, first, n) -> list[bytes]:
    ring = lane.queue.ring.reshape(-1, 64)
    return [ring[(first + i) % lane.queue.size].tobytes() for i in range(n)]


def kernarg_at(lane, raw, size) -> bytes:
    off = packets.decode(raw)["kernarg_address"] - lane.kernarg_address
    return lane.kernarg_memory[off:off + size].tobytes()


@pytest.mark.hsa_virtual
def test_driver_replays_read_back_byte_identical(gated, saxpy_code, tmp_path):
    dev = gated
    k, cb = record_cb(dev, saxpy_code)
    lane = dev.lanes_[0]
    bufs = [dev.buffer(1024) for _ in range(4)]
    path = tmp_path / "cb.aqltrace"
    writer = packets.TraceWriter(path)
    mem = packets.MemorySink()
    published = []
    old = packets.set_sink(writer)
    try:
        for a, b in ((0, 1), (1, 0), (2, 3)):
            first = lane.queue.load_write_index()
            dev.submit(cb, [bufs[a], bufs[b]])
            n = lane.queue.load_write_index() - first
            published.append(ring_slots(lane, first, n))
        packets.set_sink(mem)
        first = lane.queue.load_write_index()
        dev.submit(cb, [bufs[3], bufs[0]])
        published.append(ring_slots(lane, first, lane.queue.load_write_index() - first))
    finally:
        packets.set_sink(old)
        writer.close()
    flat = [raw for block in published[:3] for raw in block]
    assert len(flat) == 3 * 7  # 6 dispatches, a trailing barrier-AND with the signal

    compact = list(packets.read_trace(path, expand=False))
    assert sum(isinstance(r, trace.BlockTemplateRecord) for r in compact) == 1
    assert sum(isinstance(r, trace.BlockReplayRecord) for r in compact) == 3
    assert not any(isinstance(r, trace.PacketRecord) for r in compact), "no packet copies"

    recs = [r for r in packets.read_trace(path) if isinstance(r, trace.PacketRecord)]
    assert [r.raw for r in recs] == flat
    rows = np.concatenate([c.packets for c in scan.scan(path, chunk_bytes=256)])
    assert [row["raw"].tobytes() for row in rows] == flat
    assert [int(row["packet_id"]) for row in rows] == [r.packet_id for r in recs]
    # kernarg values: exactly the bytes in each submission's kernarg block
    size = k.layout.size
    for r in recs:
        if packets.decode(r.raw)["kind"] == "kernel_dispatch":
            assert r.kernarg is not None and len(r.kernarg) == size
            assert r.kernarg == kernarg_at(lane, r.raw, size)
        else:
            assert r.kernarg is None
    # MemorySink: the same expansion in process
    mem_pk = [r for r in mem.records if isinstance(r, trace.PacketRecord)]
    assert [r.raw for r in mem_pk] == published[3]
    assert all(r.kernarg == kernarg_at(lane, r.raw, size) for r in mem_pk[:6])


@pytest.mark.hsa_virtual
def test_diff_of_two_replays_names_the_changed_bindings(gated, saxpy_code, tmp_path, capsys):
    from tools.packet_trace.cli import main as trace_main

    dev = gated
    k, cb = record_cb(dev, saxpy_code, n=2)
    x, y, z = (dev.buffer(1024) for _ in range(3))
    paths = [tmp_path / "a.aqltrace", tmp_path / "b.aqltrace"]
    for path, bindings in zip(paths, ([y, x], [y, z]), strict=True):
        writer = packets.TraceWriter(path)
        old = packets.set_sink(writer)
        try:
            dev.submit(cb, bindings)
        finally:
            packets.set_sink(old)
            writer.close()
    capsys.readouterr()
    assert trace_main(["diff", str(paths[0]), str(paths[1]), "--ignore",
                       "kernarg_address"]) == 1
    out = capsys.readouterr().out
    changed = sorted(line.split(":")[0].strip() for line in out.splitlines()
                     if line.strip().startswith("kernarg"))
    # binding 1 is arg 1 of dispatch 0 and arg 0 of dispatch 1 (alternating bindings)
    names = {d["offset"]: d["name"] for d in k.layout.describe()}
    assert changed == sorted([f"kernarg {names[8]}", f"kernarg {names[0]}"]), out
    assert f"0x{x.address:x} -> 0x{z.address:x}" in out
    assert "2 differ" in out
