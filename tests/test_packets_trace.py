"""Trace format: round trips of every record kind, streaming, truncation and corruption
errors that name the byte offset, unknown versions, thread safety and AMDGPU_TRACE."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import textwrap
import threading
import tracemalloc

import numpy as np
import pytest

import packets
from amdgpu.errors import TraceFormatError
from packets import trace

pytestmark = pytest.mark.generic


def dispatch(i: int) -> bytes:
    return packets.kernel_dispatch(workgroup_size=64, grid_size=64 * (i + 1),
                                   kernel_object=0x1000 + i, kernarg_address=0x10000 + 16 * i)


def write_sample(path) -> list:
    """Write one record of every kind (plus a batch) and return what the reader must see."""
    block = packets.barrier_and_batch(dep_signals=np.arange(1, 7).reshape(3, 2))
    layout = [{"name": "x", "offset": 0, "size": 8, "value_kind": "global_buffer"}]
    with packets.TraceWriter(path) as w:
        w.queue_created(3, {"size": 64, "agent": "gfx1100"})
        w.kernel_symbol(0xABC0, "saxpy", layout)
        w.record_packet(3, 0, 10, 20, 30, dispatch(0))
        w.record_packet(3, 1, 11, 21, 31, dispatch(1), kernarg=b"\x07" * 24, symbol="saxpy")
        w.record_packet(3, 2, 12, 22, 32, dispatch(2), symbol="only_symbol")
        w.record_packets(3, 3, 13, 23, 33, block)
        w.completion(3, 1, 100, 200, trace.Clock.DEVICE_NS)
        w.vulkan_submission({"queue": 0, "command_buffers": 1, "waits": [1, 2]})
    return block


def test_round_trip_of_every_record_kind(tmp_path):
    path = tmp_path / "t.amdtrace"
    block = write_sample(path)
    recs = list(packets.read_trace(path))
    kinds = [type(r).__name__ for r in recs]
    assert kinds == ["QueueCreatedRecord", "KernelSymbolRecord"] + ["PacketRecord"] * 6 + [
        "CompletionRecord", "VulkanSubmissionRecord"]
    q, sym, p0, p1, p2, b0, b1, b2, done, vk = recs
    assert q.queue_id == 3 and q.info == {"size": 64, "agent": "gfx1100"} and q.time_ns > 0
    assert sym.kernel_object == 0xABC0 and sym.name == "saxpy"
    assert sym.layout[0]["value_kind"] == "global_buffer"
    assert (p0.queue_id, p0.packet_id, p0.reserve_ns, p0.publish_ns, p0.doorbell_ns) == (
        3, 0, 10, 20, 30)
    assert p0.raw == dispatch(0) and p0.kernarg is None and p0.symbol is None
    assert p1.kernarg == b"\x07" * 24 and p1.symbol == "saxpy" and p1.raw == dispatch(1)
    assert p2.kernarg is None and p2.symbol == "only_symbol"
    assert [b.packet_id for b in (b0, b1, b2)] == [3, 4, 5]
    assert [b.raw for b in (b0, b1, b2)] == [block[i].tobytes() for i in range(3)]
    assert b1.decode()["dep_signal"][:2] == [3, 4]
    assert (done.start_ns, done.end_ns, done.clock) == (100, 200, trace.Clock.DEVICE_NS)
    assert vk.payload == {"queue": 0, "command_buffers": 1, "waits": [1, 2]}
    offsets = [r.offset for r in recs]
    assert offsets[0] == trace.FILE_HEADER_SIZE and offsets == sorted(offsets)


def test_plain_packet_records_are_fixed_size(tmp_path):
    path = tmp_path / "fixed.amdtrace"
    with packets.TraceWriter(path) as w:
        for i in range(10):
            w.record_packet(0, i, i, i, i, dispatch(i))
    # one drain at close: the 10 records, then the checksum record covering them
    assert os.path.getsize(path) == (trace.FILE_HEADER_SIZE + 10 * trace.PACKET_RECORD.itemsize
                                     + trace.CHECKSUM_RECORD_SIZE)
    data = np.fromfile(path, trace.PACKET_RECORD, 10, offset=trace.FILE_HEADER_SIZE)
    assert list(data["packet_id"]) == list(range(10))


def test_unknown_record_kinds_are_skipped_only_in_files_without_checksums(tmp_path):
    """A file without checksum records (an older writer's) keeps unknown kinds as
    UnknownRecord; in a checksummed file an unknown kind is a damaged record header (a
    checksum record's would leave its bytes unverified), so it is refused."""
    unknown = struct.pack("<IHH", 5, 99, 0) + b"hello"
    plain = [struct.pack("<8sHHI", trace.MAGIC, 2, 16, 0)]
    for i in range(2):
        plain.append(struct.pack("<IHHQQQQQ64s", 104, 1, 0, 0, i, 1, 2, 3, dispatch(i)))
    old = tmp_path / "old.amdtrace"
    old.write_bytes(plain[0] + plain[1] + unknown + plain[2])
    recs = list(packets.read_trace(old))
    assert isinstance(recs[1], trace.UnknownRecord) and recs[1].payload == b"hello"
    assert recs[2].packet_id == 1

    path = tmp_path / "checksummed.amdtrace"
    with packets.TraceWriter(path) as w:
        w.record_packet(0, 0, 1, 2, 3, dispatch(0))
        w._put(unknown)
        w.record_packet(0, 1, 1, 2, 3, dispatch(1))
    with pytest.raises(TraceFormatError, match="byte offset 128: record kind 99 is unknown"):
        list(packets.read_trace(path))


class CountingStream(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.max_position = 0

    def read(self, n=-1):
        out = super().read(n)
        self.max_position = max(self.max_position, self.tell())
        return out


def test_reader_streams_without_loading_the_file(tmp_path):
    path = tmp_path / "big.amdtrace"
    count = 20000
    with packets.TraceWriter(path) as w:
        raw = dispatch(0)
        for i in range(count):
            w.record_packet(1, i, 0, 0, 0, raw)
    size = os.path.getsize(path)
    stream = CountingStream(path.read_bytes())
    records = iter(trace.TraceReader(stream))
    first = next(records)
    assert first.packet_id == 0
    assert stream.max_position < 1024, "the reader read ahead far beyond one record"
    # Iterating the whole file keeps memory far below the file size.
    tracemalloc.start()
    n = 0
    for rec in packets.read_trace(path):
        n += 1
        last = rec.packet_id
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n == count and last == count - 1
    assert peak < size // 4, (peak, size)


def test_batches_are_one_record_read_back_as_packets(tmp_path):
    path = tmp_path / "batch.amdtrace"
    block = packets.kernel_dispatch_batch(workgroup_size=64, grid_size=np.arange(1, 301) * 64,
                                          kernel_object=0x1000, kernarg_address=0x2000)
    with packets.TraceWriter(path) as w:
        w.record_packets(4, 100, 1, 2, 3, block)
        w.record_packet(4, 400, 5, 6, 7, dispatch(0))
    assert os.path.getsize(path) == (trace.FILE_HEADER_SIZE + trace.RECORD_HEADER_SIZE + 48
                                     + 300 * 64 + trace.PACKET_RECORD.itemsize
                                     + trace.CHECKSUM_RECORD_SIZE)
    recs = list(packets.read_trace(path))
    assert [r.packet_id for r in recs] == list(range(100, 400)) + [400]
    assert all(r.raw == block[i].tobytes() for i, r in enumerate(recs[:300]))
    assert {(r.queue_id, r.reserve_ns, r.publish_ns, r.doorbell_ns) for r in recs[:300]} == {
        (4, 1, 2, 3)}
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, trace.FILE_HEADER_SIZE + 8 + 40, 301)  # count disagrees
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match=f"byte offset {trace.FILE_HEADER_SIZE}"):
        list(packets.read_trace(path))


def test_truncated_file_names_the_record_offset(tmp_path):
    path = tmp_path / "t.amdtrace"
    write_sample(path)
    data = path.read_bytes()
    offsets = [r.offset for r in packets.read_trace(path)]
    cut = offsets[-1] + 11  # inside the last record's payload
    path.write_bytes(data[:cut])
    with pytest.raises(TraceFormatError, match=f"byte offset {offsets[-1]}") as err:
        list(packets.read_trace(path))
    assert "truncated" in str(err.value)
    path.write_bytes(data[: offsets[3] + 5])  # inside a record header
    with pytest.raises(TraceFormatError, match=f"record header at byte offset {offsets[3]}"):
        list(packets.read_trace(path))
    path.write_bytes(data[:7])
    with pytest.raises(TraceFormatError, match="file header"):
        list(packets.read_trace(path))


def test_corrupt_records_name_the_offset(tmp_path):
    path = tmp_path / "t.amdtrace"
    write_sample(path)
    data = bytearray(path.read_bytes())
    offsets = [r.offset for r in packets.read_trace(path)]
    bad = bytearray(data)
    struct.pack_into("<I", bad, offsets[2], 0xFFFFFFF0)  # absurd length
    path.write_bytes(bad)
    with pytest.raises(TraceFormatError, match=f"corrupt trace: record at byte offset "
                                               f"{offsets[2]}"):
        list(packets.read_trace(path))
    bad = bytearray(data)
    struct.pack_into("<I", bad, offsets[2], 8)  # a packet record too short to parse
    path.write_bytes(bad)
    with pytest.raises(TraceFormatError, match=f"byte offset {offsets[2]}"):
        list(packets.read_trace(path))
    path.write_bytes(b"NOTATRACE" + bytes(data[9:]))
    with pytest.raises(TraceFormatError, match="magic"):
        list(packets.read_trace(path))


def test_unknown_version_is_a_clear_error(tmp_path):
    path = tmp_path / "v99.amdtrace"
    write_sample(path)
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, 8, 99)
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="version 99 is not supported") as err:
        list(packets.read_trace(path))
    assert "\n" not in str(err.value)


def test_writer_is_thread_safe(tmp_path):
    path = tmp_path / "threads.amdtrace"
    writer = packets.TraceWriter(path, buffer_records=16)  # drain often, while others append

    def work(tid: int) -> None:
        for i in range(2000):
            if i % 100 == 0:
                writer.completion(tid, i, 1, 2)
            writer.record_packet(tid, i, i, i, i, dispatch(i % 7),
                                 symbol="k" if i % 3 == 0 else None)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    per_thread: dict[int, list[int]] = {t: [] for t in range(4)}
    for rec in packets.read_trace(path):
        if isinstance(rec, trace.PacketRecord):
            assert rec.raw == dispatch(rec.packet_id % 7)
            assert rec.symbol == ("k" if rec.packet_id % 3 == 0 else None)
            per_thread[rec.queue_id].append(rec.packet_id)
    for ids in per_thread.values():
        assert ids == list(range(2000)), "records lost, duplicated or reordered"


def test_amdgpu_trace_env_var_creates_a_sink_at_first_use(tmp_path):
    path = tmp_path / "env.amdtrace"
    program = textwrap.dedent(
        """
        import numpy as np, packets
        from packets import trace
        assert trace.STATE.sink is None  # nothing is created at import
        mem = np.zeros(4 * 64, np.uint8)
        packets.invalidate_slots(mem)
        w = [0]
        def add(n):
            w[0] += n
            return w[0] - n
        ring = packets.Ring(mem, 4, lambda: w[0], add, lambda: 0, lambda i: None, queue_id=9)
        assert isinstance(packets.active_sink(), packets.TraceWriter)
        ring.publish(packets.barrier_and(dep_signals=[1]))
        ring.publish(packets.barrier_or(dep_signals=[2]))
        """
    )
    env = dict(os.environ, AMDGPU_TRACE=str(path))
    subprocess.run([sys.executable, "-c", program], env=env, check=True, timeout=60)
    recs = list(packets.read_trace(path))  # closed by atexit
    assert [(r.queue_id, r.packet_id) for r in recs] == [(9, 0), (9, 1)]
    assert recs[1].decode()["kind"] == "barrier_or"


def test_set_sink_returns_the_previous_one():
    sink = packets.MemorySink()
    previous = packets.set_sink(sink)
    try:
        assert packets.active_sink() is sink
        sink.vulkan_submission({"n": 1})
        sink.kernel_symbol(1, "k")
        assert [type(r).__name__ for r in sink.records] == ["VulkanSubmissionRecord",
                                                             "KernelSymbolRecord"]
    finally:
        assert packets.set_sink(previous) is sink


def test_parse_record_for_block_readers():
    payload = struct.pack("<QQQQQ", 1, 2, 3, 4, 5) + dispatch(3)
    rec = trace.parse_record(trace.RecordKind.PACKET, 0, payload, 40)
    assert (rec.packet_id, rec.raw, rec.offset) == (2, dispatch(3), 40)
    with pytest.raises(TraceFormatError, match="byte offset 40"):
        trace.parse_record(trace.RecordKind.PACKET, 0, payload[:50], 40)
    batch = struct.pack("<QQQQQII", 1, 10, 3, 4, 5, 2, 0) + dispatch(0) + dispatch(1)
    assert [r.packet_id for r in trace.parse_batch(batch)] == [10, 11]
