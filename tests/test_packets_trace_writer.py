"""TraceWriter's writer thread: records offered from several threads reach the file in each
producer's order, `flush()` makes them visible, batches are copied when offered, staging
memory stays bounded under back-pressure, `close()` stops the thread, write errors surface."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import packets
from amdgpu.errors import AmdgpuError
from packets import trace

pytestmark = pytest.mark.generic


def block_of(first: int, n: int) -> np.ndarray:
    """n dispatch packets whose kernarg_address encodes their packet id."""
    return packets.kernel_dispatch_batch(
        workgroup_size=64, grid_size=64, kernel_object=0x1000,
        kernarg_address=0x10000 + 64 * np.arange(first, first + n, dtype=np.uint64))


def kernarg_of(raw: bytes) -> int:
    return packets.decode(raw)["kernarg_address"]


def packets_by_queue(path) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for rec in packets.read_trace(path):
        if isinstance(rec, trace.PacketRecord):
            assert kernarg_of(rec.raw) == 0x10000 + 64 * rec.packet_id, "wrong bytes"
            out.setdefault(rec.queue_id, []).append(rec.packet_id)
    return out


def test_producers_mixing_batches_and_packets_keep_their_order(tmp_path):
    path = tmp_path / "mixed.amdtrace"
    # Tiny slabs and limits: seals, wakes, oversized batches and back-pressure all happen.
    writer = packets.TraceWriter(path, buffer_records=8, slab_bytes=1024, max_slabs=3)

    def work(q: int) -> None:
        pid = 0
        for i in range(300):
            n = (i * 7 + q) % 23  # 0..22 packets: empty, staged and larger-than-slab batches
            if i % 3 == 0:
                for _ in range(max(1, n // 4)):
                    writer.record_packet(q, pid, 1, 2, 3, block_of(pid, 1).tobytes())
                    pid += 1
            else:
                writer.record_packets(q, pid, 1, 2, 3, block_of(pid, n))
                pid += n
        writer.completion(q, pid, 0, 1)

    threads = [threading.Thread(target=work, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    assert writer._slabs_made <= 3, "staging memory grew past its bound"
    ids = packets_by_queue(path)
    assert sorted(ids) == [0, 1, 2, 3]
    for q, got in ids.items():
        assert got == list(range(len(got))), f"queue {q}: records lost, duplicated or reordered"


def test_flush_makes_everything_visible_while_the_writer_stays_open(tmp_path):
    path = tmp_path / "live.amdtrace"
    writer = packets.TraceWriter(path, slab_bytes=4096)
    try:
        pid = 0
        for n in (1, 60, 3, 200, 0, 5):  # 200 packets: larger than a slab
            writer.record_packets(7, pid, 1, 2, 3, block_of(pid, n))
            pid += n
        writer.record_packet(7, pid, 1, 2, 3, block_of(pid, 1).tobytes())
        writer.flush()
        assert packets_by_queue(path) == {7: list(range(pid + 1))}
    finally:
        writer.close()


def test_a_batch_is_copied_when_offered(tmp_path):
    path = tmp_path / "copy.amdtrace"
    block = block_of(0, 10)
    with packets.TraceWriter(path) as writer:
        writer.record_packets(0, 0, 1, 2, 3, block)
        block["kernarg_address"] = 0xDEAD000  # the caller reuses its block at once
        writer.record_packets(0, 10, 1, 2, 3, block_of(10, 10).view(packets.PACKET))
        words = block_of(20, 4).view(np.uint8).reshape(-1, 64).view("<u4")
        writer.record_packets(0, 20, 1, 2, 3, words[::1])  # any contiguous dtype
        writer.record_packets(0, 24, 1, 2, 3, block_of(24, 2).tobytes())  # or bytes
        strided = np.stack([block_of(26, 3), block_of(26, 3)], axis=1)[:, 0]
        writer.record_packets(0, 26, 1, 2, 3, strided)  # not contiguous: copied first
    assert packets_by_queue(path) == {0: list(range(29))}


def test_a_batch_of_a_wrong_size_is_refused(tmp_path):
    with packets.TraceWriter(tmp_path / "bad.amdtrace") as writer:
        with pytest.raises(trace.TraceFormatError, match="multiple of 64 bytes"):
            writer.record_packets(0, 0, 1, 2, 3, np.zeros(100, np.uint8))


def test_thread_starts_lazily_and_close_stops_it(tmp_path):
    writer = packets.TraceWriter(tmp_path / "t.amdtrace", buffer_records=100, slab_bytes=1024)
    writer.record_packet(0, 0, 1, 2, 3, block_of(0, 1).tobytes())
    assert writer._thread is None, "a small trace needs no writer thread"
    for i in range(1, 40):
        writer.record_packets(0, i, 1, 2, 3, block_of(i, 1))
    thread = writer._thread
    assert thread is not None and thread.daemon
    writer.close()
    assert not thread.is_alive()
    writer.close()  # twice is fine
    writer.record_packets(0, 40, 1, 2, 3, block_of(40, 30))  # after close: dropped
    writer.record_packet(0, 70, 1, 2, 3, block_of(70, 1).tobytes())
    writer._kick()
    assert writer._pieces == []
    assert packets_by_queue(writer.path) == {0: list(range(40))}


def test_a_write_error_is_raised_by_flush(tmp_path, monkeypatch):
    path = tmp_path / "full.amdtrace"
    writer = packets.TraceWriter(path)

    def no_space(fd, pieces):
        raise OSError(errno.ENOSPC, "No space left on device")

    writer.record_packets(0, 0, 1, 2, 3, block_of(0, 4))
    monkeypatch.setattr(trace.writer, "_write_all", no_space)
    with pytest.raises(AmdgpuError, match="No space left on device") as err:
        writer.flush()
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    writer.flush()  # reported once; later records are dropped, not retried
    writer.close()


def test_short_writes_are_resumed(tmp_path, monkeypatch):
    real_writev = os.writev

    def short_writev(fd, buffers):  # the kernel may write less than asked
        data = b"".join(bytes(b) for b in buffers)
        return real_writev(fd, [data[:max(1, len(data) // 3)]])

    monkeypatch.setattr(os, "writev", short_writev)
    path = tmp_path / "short.amdtrace"
    with packets.TraceWriter(path) as writer:
        writer.record_packets(1, 0, 1, 2, 3, block_of(0, 50))
        writer.record_packet(1, 50, 1, 2, 3, block_of(50, 1).tobytes())
    assert packets_by_queue(path) == {1: list(range(51))}


def test_records_queued_at_exit_are_written(tmp_path):
    path = tmp_path / "exit.amdtrace"
    program = textwrap.dedent(
        f"""
        import numpy as np, packets
        w = packets.TraceWriter({str(path)!r}, slab_bytes=4096, max_slabs=4, wake_slabs=2)
        block = packets.kernel_dispatch_batch(
            workgroup_size=64, grid_size=64, kernel_object=0x1000,
            kernarg_address=0x10000 + 64 * np.arange(30, dtype=np.uint64))
        for i in range(200):  # the writer thread runs; no flush, no close
            block["kernarg_address"] = 0x10000 + 64 * np.arange(30 * i, 30 * i + 30,
                                                                dtype=np.uint64)
            w.record_packets(3, 30 * i, 1, 2, 3, block)
        assert w._thread is not None and w._thread.is_alive()
        """
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=60)
    assert packets_by_queue(path) == {3: list(range(6000))}
