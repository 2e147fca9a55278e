"""Ring publishing: ROCr's protocol over plain numpy queue memory, with a consumer that acts
like a packet processor (waits for a valid header, resets the slot to INVALID, then advances
the read index)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packets
from amdgpu.errors import PacketError, QueueFullError

pytestmark = pytest.mark.generic


class FakeQueue:
    """Queue memory plus atomic indices, like hsa_queue_t + amd_queue_t."""

    def __init__(self, size: int):
        self.size = size
        self.memory = np.zeros(size * 64, np.uint8)
        packets.invalidate_slots(self.memory)
        self.words = self.memory.view("<u4")
        self.write = 0
        self.read = 0
        self.doorbells: list[int] = []
        self._lock = threading.Lock()

    def load_write_index(self) -> int:
        return self.write

    def add_write_index(self, n: int) -> int:
        with self._lock:  # a 64-bit atomic add on real queues
            old = self.write
            self.write = old + n
            return old

    def load_read_index(self) -> int:
        return self.read

    def doorbell(self, packet_id: int) -> None:
        self.doorbells.append(packet_id)

    def ring(self, **kw) -> packets.Ring:
        return packets.Ring(self.memory, self.size, self.load_write_index,
                            self.add_write_index, self.load_read_index, self.doorbell, **kw)

    def slot(self, packet_id: int) -> bytes:
        off = (packet_id % self.size) * 64
        return self.memory[off:off + 64].tobytes()

    def consume(self, count: int) -> list[bytes]:
        """Consume `count` published packets in order (the packet processor's side)."""
        out = []
        for _ in range(count):
            slot = self.read % self.size
            assert self.words[slot * 16] & 0xFFFF != packets.INVALID_HEADER
            out.append(self.slot(self.read))
            self.words[slot * 16] = packets.INVALID_HEADER
            self.read += 1
        return out


def dispatch(i: int) -> bytes:
    return packets.kernel_dispatch(workgroup_size=64, grid_size=64 * (i + 1),
                                   kernel_object=0x1000 + i, kernarg_address=0x10000 + 16 * i)


def test_publish_writes_slots_and_rings_with_last_id():
    q = FakeQueue(8)
    ring = q.ring()
    ids = [ring.publish(dispatch(i)) for i in range(3)]
    assert ids == [0, 1, 2] and q.doorbells == [0, 1, 2] and q.write == 3
    assert q.consume(3) == [dispatch(i) for i in range(3)]
    first = ring.publish_many(np.frombuffer(b"".join(dispatch(i) for i in range(3, 7)),
                                            packets.PACKET))
    assert first == 3 and q.doorbells[-1] == 6
    assert q.consume(4) == [dispatch(i) for i in range(3, 7)]


def test_publish_many_wraps_around_in_two_slices():
    q = FakeQueue(8)
    ring = q.ring()
    for i in range(5):
        ring.publish(dispatch(i))
    q.consume(5)
    block = packets.kernel_dispatch_batch(
        workgroup_size=64, grid_size=np.arange(1, 7) * 64, kernel_object=0x2000,
        kernarg_address=0x40000)
    first = ring.publish_many(block)
    assert first == 5 and q.doorbells[-1] == 10  # ids 5..10 land in slots 5,6,7,0,1,2
    assert q.slot(0) == block[3].tobytes() and q.slot(7) == block[2].tobytes()
    assert q.words[3 * 16] & 0xFFFF == packets.INVALID_HEADER  # slot 3 untouched
    got = q.consume(6)
    assert got == [block[i].tobytes() for i in range(6)]
    # structured arrays of other packet types and raw (N, 64) bytes publish alike
    barriers = packets.barrier_and_batch(dep_signals=np.arange(1, 9).reshape(4, 2))
    ring.publish_many(barriers.view(np.uint8).reshape(4, 64))
    assert q.consume(4) == [barriers[i].tobytes() for i in range(4)]


def test_publish_ready_and_publish_rows_wrap_and_set_their_fields():
    """A kept block (first header INVALID, the headers apart): publish_ready copies it and
    stores the first header; publish_rows also sets each row's kernarg_address (base +
    offset) and one row's completion_signal in the ring, the block left as it was."""
    q = FakeQueue(8)
    ring = q.ring()
    block = packets.kernel_dispatch_batch(
        workgroup_size=64, grid_size=np.arange(1, 6) * 64, kernel_object=0x2000,
        kernarg_address=0x40000)
    want = [block[i].tobytes() for i in range(5)]
    header = int(block.view(np.uint32)[0])
    kept = block.copy()
    kept.view(np.uint32)[0] = packets.INVALID_HEADER
    assert ring.publish_ready(kept, header) == 0 and q.doorbells == [4]
    assert q.consume(5) == want
    offsets = np.array([0, 64, 64, 128], np.uint64)  # rows 0..3 (row 4: its own address)
    before = kept.copy()
    assert ring.publish_rows(kept, header, 0x7000, offsets, 4, 0xAB) == 5  # slots 5,6,7,0,1
    assert np.array_equal(kept, before) and q.doorbells[-1] == 9
    for i, got in enumerate(q.consume(5)):
        w = np.frombuffer(got, np.uint64)
        expect = np.frombuffer(want[i], np.uint64).copy()
        if i < 4:
            expect[5] = 0x7000 + int(offsets[i])
        expect[7] = 0xAB if i == 4 else 0
        assert w.tolist() == expect.tolist()
    with pytest.raises(PacketError, match="first header is INVALID"):
        ring.publish_rows(block, header, 0, offsets, 0, 0)  # headers in place: refused
    with pytest.raises(PacketError, match="signal row"):
        ring.publish_rows(kept, header, 0, offsets, 5, 0)


def test_full_queue_times_out_cleanly():
    q = FakeQueue(4)
    ring = q.ring(timeout_s=0.2)
    for i in range(4):
        ring.publish(dispatch(i))
    start = time.monotonic()
    with pytest.raises(QueueFullError, match="no room"):
        ring.publish(dispatch(4))
    assert time.monotonic() - start >= 0.2
    assert q.write == 4, "a timed-out publish must not reserve slots"
    with pytest.raises(QueueFullError):
        ring.publish_many(packets.barrier_and_batch(count=2))
    assert q.write == 4
    q.consume(2)  # room for two appears: publishing continues where it stopped
    assert ring.publish_many(packets.barrier_and_batch(count=2)) == 4


def test_publish_waits_for_the_consumer_then_proceeds():
    q = FakeQueue(4)
    ring = q.ring(timeout_s=5)
    for i in range(4):
        ring.publish(dispatch(i))
    timer = threading.Timer(0.05, q.consume, args=(1,))
    timer.start()
    assert ring.publish(dispatch(4)) == 4  # blocked until the timer consumed one
    timer.join()
    assert q.slot(4) == dispatch(4)


def test_bad_inputs_are_rejected():
    q = FakeQueue(4)
    with pytest.raises(PacketError, match="power of two"):
        packets.Ring(q.memory, 3, q.load_write_index, q.add_write_index, q.load_read_index,
                     q.doorbell)
    with pytest.raises(PacketError, match="holds"):
        packets.Ring(q.memory, 8, q.load_write_index, q.add_write_index, q.load_read_index,
                     q.doorbell)
    ring = q.ring()
    with pytest.raises(PacketError, match="64 bytes"):
        ring.publish(b"\x00" * 32)
    with pytest.raises(PacketError, match="chunks"):
        ring.publish_many(packets.barrier_and_batch(count=5))
    assert q.write == 0


def test_producers_and_a_consumer_deliver_every_packet_once_untorn():
    """Producers publish singles and batches concurrently into a small ring while a consumer
    thread reads each slot only once its header is valid. Each packet carries its identity
    in kernel_object and a check value in kernarg_address and completion_signal."""
    q = FakeQueue(16)
    ring = q.ring(timeout_s=20)
    producers, per_producer = 4, 300
    total = producers * per_producer
    received: list[bytes] = []
    errors: list[BaseException] = []

    def make(pid: int, seq: int) -> tuple[int, int, int]:
        ident = (pid << 20) | seq | 1 << 40
        return ident, (ident * 16) & ((1 << 64) - 1), ident ^ 0xFFFF_FFFF_FFFF

    def produce(pid: int) -> None:
        try:
            seq = 0
            while seq < per_producer:
                n = min(1 + (seq % 5), per_producer - seq)
                if n == 1:
                    ident, karg, sig = make(pid, seq)
                    ring.publish(packets.kernel_dispatch(
                        workgroup_size=1, grid_size=1, kernel_object=ident,
                        kernarg_address=karg, completion_signal=sig))
                else:
                    rows = [make(pid, s) for s in range(seq, seq + n)]
                    ring.publish_many(packets.kernel_dispatch_batch(
                        workgroup_size=1, grid_size=1,
                        kernel_object=np.array([r[0] for r in rows], np.uint64),
                        kernarg_address=np.array([r[1] for r in rows], np.uint64),
                        completion_signal=np.array([r[2] for r in rows], np.uint64)))
                seq += n
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    def consume() -> None:
        deadline = time.monotonic() + 30
        while len(received) < total and time.monotonic() < deadline:
            slot = q.read % q.size
            if q.words[slot * 16] & 0xFFFF == packets.INVALID_HEADER:
                time.sleep(0)
                continue
            received.append(q.slot(q.read))
            q.words[slot * 16] = packets.INVALID_HEADER  # slot free, then advance
            q.read += 1

    consumer = threading.Thread(target=consume)
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    consumer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    consumer.join(60)
    assert not errors, errors
    assert len(received) == total
    seen = set()
    for raw in received:
        f = packets.decode(raw)
        ident = f["kernel_object"]
        assert f["kind"] == "kernel_dispatch"
        assert f["kernarg_address"] == (ident * 16) & ((1 << 64) - 1), "torn packet"
        assert f["completion_signal"] == ident ^ 0xFFFF_FFFF_FFFF, "torn packet"
        seen.add(ident)
    assert seen == {make(p, s)[0] for p in range(producers) for s in range(per_producer)}
    assert q.write == total and q.read == total


def test_active_sink_receives_every_published_packet():
    q = FakeQueue(8)
    sink = packets.MemorySink()
    previous = packets.set_sink(sink)
    try:
        ring = q.ring(queue_id=7)
        ring.publish(dispatch(0), kernarg=b"\x01" * 16, symbol="saxpy.kd")
        ring.publish_many(packets.barrier_or_batch(dep_signals=[5], count=3))
    finally:
        packets.set_sink(previous)
    ring.publish(dispatch(1))  # no sink: not recorded
    recs = sink.records
    assert [r.packet_id for r in recs] == [0, 1, 2, 3]
    assert all(r.queue_id == 7 for r in recs)
    assert recs[0].raw == dispatch(0) and recs[0].symbol == "saxpy.kd"
    assert recs[0].kernarg == b"\x01" * 16
    assert all(r.reserve_ns <= r.publish_ns <= r.doorbell_ns for r in recs)
    assert recs[2].decode()["kind"] == "barrier_or"


@pytest.mark.parametrize("n, with_headers", [(2, False), (2, True), (3, True), (4, True)])
def test_publish_many_writes_every_body_before_any_header(n, with_headers):
    """ROCr's protocol for a batch: each header's 32-bit store comes after every body of
    the batch is in place, in packet order (slots 6, 7, 0, 1: across the wrap)."""
    q = FakeQueue(8)
    ring = q.ring()
    for i in range(6):
        ring.publish(dispatch(i))
    q.consume(6)
    expected = np.frombuffer(b"".join(dispatch(10 + i) for i in range(n)), np.uint8)
    expected = expected.reshape(n, 64)
    slots = [(6 + i) % 8 for i in range(n)]
    stores = []
    words = ring._header_words

    class Spy:  # sees each header store before it happens
        def __setitem__(self, index, value):
            for row, slot in enumerate(slots):
                assert q.slot(slot)[4:] == expected[row, 4:].tobytes(), "body incomplete"
                done = slot * 16 in stores
                header = int(q.words[slot * 16]) & 0xFFFF
                assert header == (int(expected[row, :2].view("<u2")[0]) if done
                                  else packets.INVALID_HEADER)
            stores.append(index)
            words[index] = value

    ring._header_words = Spy()
    if with_headers:
        block = expected.copy()
        headers = block.view("<u4")[:, 0].copy()
        block.view("<u4")[:, 0] = packets.INVALID_HEADER
        assert ring.publish_many(block, headers=headers) == 6
    else:
        assert ring.publish_many(expected) == 6
    ring._header_words = words
    assert stores == [s * 16 for s in slots]
    assert q.consume(n) == [bytes(r) for r in expected]
    assert q.doorbells[-1] == 5 + n and ring.doorbells == 7


def test_publish_many_with_header_words():
    """The fast form for republished blocks: the same packets as the plain form, wrapped
    or not, small or numpy-sized; a block with valid headers is refused."""
    q = FakeQueue(32)
    ring = q.ring()
    for i in range(20):
        ring.publish(dispatch(i))
    q.consume(20)
    for n in (1, 8, 9, 20, 32):
        raw = [dispatch(100 + i) for i in range(n)]
        block = np.frombuffer(b"".join(raw), np.uint8).reshape(n, 64).copy()
        headers = block.view("<u4")[:, 0].copy()
        block.view("<u4")[:, 0] = packets.INVALID_HEADER
        ring.publish_many(block, headers=headers if n % 2 else headers.tolist())
        assert q.consume(n) == raw
    sink = packets.MemorySink()  # a trace records the packets as published
    previous = packets.set_sink(sink)
    try:
        first = ring.publish_many(block, headers=headers)
    finally:
        packets.set_sink(previous)
    assert [r.packet_id for r in sink.records] == list(range(first, first + 32))
    assert [r.raw for r in sink.records] == raw == q.consume(32)
    with pytest.raises(PacketError, match="INVALID"):
        ring.publish_many(np.frombuffer(dispatch(0), np.uint8), headers=[1])
    with pytest.raises(PacketError, match="header words"):
        ring.publish_many(block, headers=headers[:3])


def test_publish_many_block_forms_and_reuse():
    q = FakeQueue(16)
    ring = q.ring()
    raw = [dispatch(i) for i in range(6)]
    blob = b"".join(raw)
    for form in (blob, bytearray(blob), memoryview(blob),
                 np.frombuffer(blob, np.uint8).reshape(6, 64), np.frombuffer(blob, np.uint32)):
        ring.publish_many(form)
        assert q.consume(6) == raw
    # a reused array (as a command buffer replays one block) goes out as it is now
    block = packets.kernel_dispatch_batch(workgroup_size=64, grid_size=64,
                                          kernel_object=np.arange(1, 4, dtype=np.uint64),
                                          kernarg_address=16)
    for k in (5, 6):
        block["kernel_object"][1] = k
        ring.publish_many(block)
        assert [packets.decode(p)["kernel_object"] for p in q.consume(3)] == [1, k, 3]
    # a strided view is copied, each time afresh
    wide = packets.kernel_dispatch_batch(workgroup_size=64, grid_size=64,
                                         kernel_object=np.arange(1, 7, dtype=np.uint64),
                                         kernarg_address=16)
    view = wide[::2]
    for k in (7, 8):
        wide["kernel_object"][2] = k
        ring.publish_many(view)
        assert [packets.decode(p)["kernel_object"] for p in q.consume(3)] == [1, k, 5]
    with pytest.raises(PacketError, match="multiple of 64"):
        ring.publish_many(b"\x00" * 100)
    with pytest.raises(PacketError, match="numpy array or bytes"):
        ring.publish_many([dispatch(0)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=30))
def test_publish_sequences_wrap_and_arrive_in_order(sizes):
    q = FakeQueue(8)
    ring = q.ring()
    sent, got, seq = [], [], 0
    for n in sizes:
        pkts = [dispatch(seq + i) for i in range(n)]
        seq += n
        if n == 1:
            ring.publish(pkts[0])
        else:
            ring.publish_many(np.frombuffer(b"".join(pkts), packets.PACKET))
        sent += pkts
        assert q.doorbells[-1] == seq - 1
        got += q.consume(n)
        # every slot is INVALID again once consumed
        assert all(q.words[s * 16] & 0xFFFF == packets.INVALID_HEADER for s in range(8))
    assert got == sent and ring.doorbells == len(sizes)
