"""The chunked numpy scanner behind `stats` sees exactly what packets.read_trace sees, for any
mix of record kinds and any chunk size (records cut at chunk ends), and stats agree with a
record-by-record count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packets
from packets import trace
from tools.packet_trace import scan, stats, synth

pytestmark = pytest.mark.generic

RAW = [
    packets.kernel_dispatch(workgroup_size=64, grid_size=64 * (i + 1),
                            kernel_object=synth.SAXPY_OBJECT if i % 2 else synth.FILL_OBJECT,
                            kernarg_address=0x1000 + 64 * i, completion_signal=0x50 + i)
    for i in range(4)
] + [packets.barrier_and(dep_signals=[0x50]), packets.barrier_or(dep_signals=[0x51, 0x52]),
     packets.barrier_value(signal=0x53, value=0, cond=packets.BarrierValueCondition.EQ),
     packets.agent_dispatch(type=7, args=(1, 2, 3, 4))]

ops = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.integers(0, len(RAW) - 1), st.integers(1, 5)),
    st.tuples(st.just("tail"), st.integers(0, len(RAW) - 1), st.integers(0, 3)),
    st.tuples(st.just("batch"), st.integers(0, len(RAW) - 1), st.integers(1, 9)),
    st.tuples(st.just("replay"), st.integers(0, 3), st.integers(0, 4)),
    st.tuples(st.just("done"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("other"), st.integers(0, 3), st.integers(0, 0)),
), max_size=25)


# A block template: RAW's 4 dispatches (kernargs at 0, 32, 32, 64) and its barrier-AND, the
# signal on the barrier; patch sites for binding 0 and the last binding.
TEMPLATE = trace.BlockTemplateRecord.build(
    3, np.frombuffer(b"".join(RAW[:5]), packets.PACKET), kernarg_offsets=[0, 32, 32, 64],
    kernarg_sizes=[24, 24, 24, 16], signal_row=4, kernarg=bytes(range(80)),
    site_offsets=[8, 64], site_bindings=[0, -1], site_addends=[4, 0])


def write(path, program) -> None:
    ids = {0: 0, 1: 0}
    template_written = False
    t = 1000
    # Tiny staging slabs and limits: the writer thread, slab reuse, batches larger than a
    # slab and back-pressure all take part.
    with packets.TraceWriter(path, buffer_records=3, slab_bytes=512, max_slabs=2) as w:
        for op, a, b in program:
            t += 100
            q = a % 2
            if op == "plain":
                for _ in range(b):
                    w.record_packet(q, ids[q], t, t + 5, t + 9, RAW[a])
                    ids[q] += 1
            elif op == "tail":
                kernarg = b"\x01" * (8 * b) if b % 2 else None
                symbol = "saxpy" if b >= 2 else None
                if kernarg is None and symbol is None:
                    symbol = "k"
                w.record_packet(q, ids[q], t, t + 7, t + 8, RAW[a], kernarg=kernarg,
                                symbol=symbol)
                ids[q] += 1
            elif op == "batch":
                block = np.frombuffer(b"".join(RAW[(a + i) % len(RAW)] for i in range(b)),
                                      packets.PACKET)
                w.record_packets(q, ids[q], t, t + 50, t + 60, block)
                ids[q] += b
            elif op == "replay":
                if not template_written:
                    w.block_template(TEMPLATE)
                    template_written = True
                w.block_replay(q, ids[q], t, t + 3, t + 4, TEMPLATE.template_id,
                               0x8000 + 0x100 * b, 0x60 + b, (0x1000 * (a + 1), 0x2000 + b))
                ids[q] += TEMPLATE.count
            elif op == "done":
                for i in range(b):
                    w.completion(a % 2, max(0, ids[a % 2] - 1 - i), t, t + 10 * (i + 1))
            else:
                if a == 0:
                    w.queue_created(q, {"size": 64})
                elif a == 1:
                    w.kernel_symbol(synth.SAXPY_OBJECT, "saxpy", synth.SAXPY_LAYOUT)
                elif a == 2:
                    w.vulkan_submission({"dispatches": 3})
                else:  # a completion on the device clock (kinds unknown here are damage)
                    w.completion(q, ids[q], t, t + 5, trace.Clock.DEVICE_NS)


def scanned(path, chunk_bytes):
    chunks = list(scan.scan(path, chunk_bytes=chunk_bytes))
    pk = np.concatenate([c.packets for c in chunks]) if chunks else np.empty(0)
    done = np.concatenate([c.completions for c in chunks]) if chunks else np.empty(0)
    others = [r for c in chunks for r in c.others]
    return pk, done, others, sum(c.records for c in chunks)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=ops, chunk_bytes=st.sampled_from([64, 113, 500, 4096, 1 << 20]))
def test_scan_matches_read_trace(tmp_path, program, chunk_bytes):
    path = tmp_path / "mix.aqltrace"
    write(path, program)
    records = list(packets.read_trace(path))
    pk, done, others, _ = scanned(path, chunk_bytes)
    want_packets = [r for r in records if isinstance(r, trace.PacketRecord)]
    assert pk.shape[0] == len(want_packets)
    for row, rec in zip(pk, want_packets, strict=True):
        assert (int(row["queue_id"]), int(row["packet_id"]), int(row["reserve_ns"]),
                int(row["publish_ns"]), int(row["doorbell_ns"])) == (
            rec.queue_id, rec.packet_id, rec.reserve_ns, rec.publish_ns, rec.doorbell_ns)
        assert row["raw"].tobytes() == rec.raw
    want_done = [r for r in records if isinstance(r, trace.CompletionRecord)]
    assert [(int(d["queue_id"]), int(d["packet_id"]), int(d["end_ns"] - d["start_ns"]))
            for d in done] == [(r.queue_id, r.packet_id, r.end_ns - r.start_ns)
                               for r in want_done]
    # replayed packets stay in the array (their record is the replay, not a packet record)
    replays = {r.offset for r in packets.read_trace(path, expand=False)
               if isinstance(r, trace.BlockReplayRecord)}
    want_others = [r for r in records if not isinstance(r, trace.CompletionRecord)
                   and not (isinstance(r, trace.PacketRecord)
                            and ((r.kernarg is None and r.symbol is None)
                                 or r.offset in replays))]
    assert [(type(r).__name__, r.offset) for r in others] == [
        (type(r).__name__, r.offset) for r in want_others]

    # stats agree with a record-by-record count.
    result = stats.compute(path)
    by_type: dict[str, int] = {}
    for rec in want_packets:
        kind = rec.decode()["kind"]
        by_type[kind] = by_type.get(kind, 0) + 1
    assert {k: v for k, v in result["packets"].items() if v} == by_type
    assert result["completions"] == len(want_done)
    assert result["queues"] == len({r.queue_id for r in want_packets}
                                   | {r.queue_id for r in want_done}
                                   | {r.queue_id for r in records
                                      if isinstance(r, trace.QueueCreatedRecord)})
    dispatches = sum(1 for r in want_packets if r.decode()["kind"] == "kernel_dispatch")
    assert sum(result["kernels"].values()) == dispatches


@pytest.mark.parametrize("single, replay", [(False, False), (True, False), (False, True)])
def test_long_traces_stream_in_bounded_chunks(tmp_path, single, replay):
    """Plain records (Ring.publish), batch records (Ring.publish_many) and block replays are
    read a chunk at a time, never as a whole file; stats count them all."""
    path = tmp_path / "many.aqltrace"
    count = 20_000
    synth.write_many(path, count, batch=500, single=single, replay=replay)
    chunk_bytes = 256 if replay else 1 << 16  # a replay record is 96 bytes for 500 packets
    sizes = [c.packets.shape[0] for c in scan.scan(path, chunk_bytes=chunk_bytes)]
    assert sum(sizes) == count and len(sizes) > 10
    assert max(sizes) <= ((1 << 16) // 112 + 1 if single else (3 if replay else 2) * 500)
    result = stats.compute(path)
    assert result["packets"]["kernel_dispatch"] == count - count // 500
    assert result["packets"]["barrier_and"] == count // 500
    assert result["submissions"] == (count if single else count // 500)
    assert result["kernels"] == {"saxpy": 250 * 40, "fill": 249 * 40}
