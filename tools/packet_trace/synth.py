"""Traces made with the real packets layer (packets.Ring over numpy queue memory, recorded by
packets.trace.TraceWriter): samples for tests, docs and benchmarks of packet-trace.

`LoopbackQueue` is queue memory whose doorbell consumes what was published at once (resets
the slots to INVALID, advances the read index), like a packet processor that keeps up.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

import packets

SAXPY_OBJECT = 0x7F0000001000
FILL_OBJECT = 0x7F0000002000
KERNARG_BASE = 0x7F0000100000
SIGNAL_BASE = 0x7F0000200000

# The driver's layout form (amdgpu.hsa_backend.kernargs.KernargLayout.describe) plus types.
SAXPY_LAYOUT = [
    {"name": "x", "kind": "buffer", "offset": 0, "size": 8},
    {"name": "y", "kind": "buffer", "offset": 8, "size": 8},
    {"name": "a", "kind": "value", "offset": 16, "size": 4, "type": "float"},
    {"name": "n", "kind": "value", "offset": 20, "size": 4, "type": "int"},
    {"name": "hidden_block_count_x", "kind": "hidden", "offset": 24, "size": 4},
    {"name": "hidden_group_size_x", "kind": "hidden", "offset": 36, "size": 2},
]
SAXPY_KERNARG_SIZE = 40
FILL_LAYOUT = [
    {"name": "dst", "kind": "buffer", "offset": 0, "size": 8},
    {"name": "value", "kind": "value", "offset": 8, "size": 4},
]


class LoopbackQueue:
    """Queue memory and indices whose doorbell consumes the published packets."""

    def __init__(self, size: int = 1024, queue_id: int = 0):
        self.size = size
        self.queue_id = queue_id
        self.memory = np.zeros(size * 64, np.uint8)
        packets.invalidate_slots(self.memory)
        self.words = self.memory.view("<u4").reshape(size, 16)
        self.write = 0
        self.read = 0

    def load_write_index(self) -> int:
        return self.write

    def add_write_index(self, n: int) -> int:
        old = self.write
        self.write = old + n
        return old

    def load_read_index(self) -> int:
        return self.read

    def doorbell(self, last_id: int) -> None:
        first, self.read = self.read, last_id + 1
        mask = self.size - 1
        if last_id - first < 4:
            for i in range(first, last_id + 1):
                self.words[i & mask, 0] = packets.INVALID_HEADER
        else:
            self.words[:, 0] = packets.INVALID_HEADER  # the whole batch was consumed

    def ring(self) -> packets.Ring:
        return packets.Ring(self.memory, self.size, self.load_write_index,
                            self.add_write_index, self.load_read_index, self.doorbell,
                            queue_id=self.queue_id)


def saxpy_kernarg(x: int, y: int, a: float, n: int, block: int = 64) -> bytes:
    data = bytearray(SAXPY_KERNARG_SIZE)
    struct.pack_into("<QQfi", data, 0, x, y, a, n)
    struct.pack_into("<I", data, 24, (n + block - 1) // block)
    struct.pack_into("<H", data, 36, block)
    return bytes(data)


@dataclass
class Sample:
    """What `write_sample` published, for tests to compare with."""

    packets_by_type: dict
    kernels: dict
    queues: int
    producer: tuple[int, int]  # the dispatch whose completion signal the barrier-AND waits on
    waiter: tuple[int, int]  # that barrier-AND
    signal: int


def write_sample(path: str | os.PathLike | None, a: float = 2.0, n: int = 1024,
                 chain: int = 6) -> Sample:
    """Two queues: saxpy (kernarg recorded) on queue 0 signalling S; a barrier-AND on queue 1
    waiting on S, then fill; a barrier-value on queue 0 waiting for queue 1; a publish_many
    chain of `chain` saxpy dispatches + a barrier-OR on queue 0; completion records.
    With path None the records go to the active sink (AMDGPU_TRACE)."""
    s_saxpy, s_q1, s_chain = SIGNAL_BASE, SIGNAL_BASE + 64, SIGNAL_BASE + 128
    if path is None:
        writer = packets.active_sink()
        if writer is None:
            raise SystemExit("synth: set AMDGPU_TRACE (or run under packet-trace record)")
    else:
        writer = packets.TraceWriter(path)
    previous = packets.set_sink(writer)
    try:
        q0, q1 = LoopbackQueue(64, 0), LoopbackQueue(64, 1)
        writer.queue_created(0, {"size": 64, "agent": "gfx1100"})
        writer.queue_created(1, {"size": 64, "agent": "gfx1100"})
        writer.kernel_symbol(SAXPY_OBJECT, "saxpy", SAXPY_LAYOUT)
        writer.kernel_symbol(FILL_OBJECT, "fill", FILL_LAYOUT)
        r0, r1 = q0.ring(), q1.ring()
        karg = saxpy_kernarg(0x7F0000300000, 0x7F0000400000, a, n)
        pid = r0.publish(packets.kernel_dispatch(
            workgroup_size=64, grid_size=n, kernel_object=SAXPY_OBJECT,
            kernarg_address=KERNARG_BASE, completion_signal=s_saxpy), kernarg=karg,
            symbol="saxpy")
        writer.completion(0, pid, 1_000, 6_000)
        wid = r1.publish(packets.barrier_and(dep_signals=[s_saxpy], completion_signal=s_q1))
        fid = r1.publish(packets.kernel_dispatch(
            workgroup_size=256, grid_size=4096, kernel_object=FILL_OBJECT,
            kernarg_address=KERNARG_BASE + 0x100), kernarg=struct.pack("<QI", 0x7F00005, 7),
            symbol="fill")
        writer.completion(1, fid, 7_000, 9_000)
        r0.publish(packets.barrier_value(signal=s_q1, value=1,
                                         cond=packets.BarrierValueCondition.LT))
        block = packets.kernel_dispatch_batch(
            workgroup_size=64, grid_size=n, kernel_object=SAXPY_OBJECT,
            kernarg_address=KERNARG_BASE + 0x200 + 64 * np.arange(chain), count=chain)
        tail = packets.barrier_or_batch(dep_signals=[[s_q1, s_saxpy]], completion_signal=s_chain,
                                        count=1)
        r0.publish_many(np.concatenate([block.view(packets.PACKET), tail.view(packets.PACKET)]))
    finally:
        packets.set_sink(previous)
        if path is not None:
            writer.close()
    return Sample(
        packets_by_type={"kernel_dispatch": 2 + chain, "barrier_and": 1, "barrier_or": 1,
                         "barrier_value": 1, "agent_dispatch": 0},
        kernels={"saxpy": 1 + chain, "fill": 1}, queues=2, producer=(0, pid),
        waiter=(1, wid), signal=s_saxpy)


def write_gfx1250_sample(path: str | os.PathLike, cluster: int = 2) -> Sample:
    """A gfx1250 queue dispatching with the extended packet: saxpy in clusters of `cluster`
    workgroups signalling S, fill waiting on S through its dep_signal, a publish_many batch
    of extended dispatches closed by a barrier-AND, and a command buffer replay of a block
    template holding extended dispatches."""
    s_saxpy, s_done = SIGNAL_BASE, SIGNAL_BASE + 64
    writer = packets.TraceWriter(path)
    previous = packets.set_sink(writer)
    try:
        q = LoopbackQueue(64, 0)
        writer.queue_created(0, {"size": 64, "agent": "gfx1250"})
        writer.kernel_symbol(SAXPY_OBJECT, "saxpy", SAXPY_LAYOUT)
        writer.kernel_symbol(FILL_OBJECT, "fill", FILL_LAYOUT)
        ring = q.ring()
        pid = ring.publish(packets.ext_kernel_dispatch(
            workgroup_size=64, cluster_count=8, cluster_size=cluster, kernel_object=SAXPY_OBJECT,
            kernarg_address=KERNARG_BASE, completion_signal=s_saxpy),
            kernarg=saxpy_kernarg(0x7F0000300000, 0x7F0000400000, 2.0, 1024), symbol="saxpy")
        writer.completion(0, pid, 1_000, 4_000)
        fid = ring.publish(packets.ext_kernel_dispatch(
            workgroup_size=(16, 16), cluster_count=(2, 2), cluster_size=(2, 2),
            kernel_object=FILL_OBJECT, kernarg_address=KERNARG_BASE + 0x100,
            dep_signal=s_saxpy), kernarg=struct.pack("<QI", 0x7F00005, 7), symbol="fill")
        block = np.concatenate([
            packets.ext_kernel_dispatch_batch(
                workgroup_size=64, cluster_count=4, kernel_object=SAXPY_OBJECT,
                kernarg_address=KERNARG_BASE + 0x200 + 64 * np.arange(3)).view(packets.PACKET),
            packets.barrier_and_batch(dep_signals=[[s_saxpy]], completion_signal=s_done,
                                      count=1).view(packets.PACKET)])
        ring.publish_many(block)
        writer.block_template(packets.trace.BlockTemplateRecord.build(
            7, block, kernarg_offsets=[0, 64, 128], kernarg_sizes=[24, 24, 24], signal_row=3,
            kernarg=bytes(192)))
        ring.publish_many(block, None, writer.block_replay,
                          (7, KERNARG_BASE + 0x1000, s_done, ()))
    finally:
        packets.set_sink(previous)
        writer.close()
    return Sample(
        packets_by_type={"ext_kernel_dispatch": 8, "kernel_dispatch": 0, "barrier_and": 2},
        kernels={"saxpy": 7, "fill": 1}, queues=1, producer=(0, pid), waiter=(0, fid),
        signal=s_saxpy)


def write_many(path: str | os.PathLike, count: int, batch: int = 1000,
               single: bool = False, replay: bool = False) -> None:
    """`count` dispatch packets through Ring.publish_many in batches of `batch` (one
    PACKET_BATCH record each; with replay=True one BLOCK_REPLAY record of one block template
    each, as the driver records a command buffer replay) or, with single=True, through
    Ring.publish (plain records); a barrier-AND closes every batch."""
    queue = LoopbackQueue(max(1024, 1 << (batch - 1).bit_length()), 0)
    writer = packets.TraceWriter(path)
    previous = packets.set_sink(writer)
    try:
        writer.kernel_symbol(SAXPY_OBJECT, "saxpy", SAXPY_LAYOUT)
        writer.kernel_symbol(FILL_OBJECT, "fill", FILL_LAYOUT)
        ring = queue.ring()
        objects = np.where(np.arange(batch - 1) % 2 == 0, SAXPY_OBJECT, FILL_OBJECT)
        block = np.concatenate([
            packets.kernel_dispatch_batch(workgroup_size=64, grid_size=1024,
                                          kernel_object=objects,
                                          kernarg_address=KERNARG_BASE,
                                          count=batch - 1).view(packets.PACKET),
            packets.barrier_and_batch(dep_signals=[[SIGNAL_BASE]], count=1).view(
                packets.PACKET)])
        raws = [bytes(block[i]) for i in range(batch)] if single else []
        if replay:  # every dispatch shares one 32-byte kernarg block: x and y bindings
            writer.block_template(packets.trace.BlockTemplateRecord.build(
                1, block, kernarg_offsets=np.zeros(batch - 1), kernarg_sizes=np.full(
                    batch - 1, 24), signal_row=batch - 1, kernarg=bytes(32),
                site_offsets=[0, 8], site_bindings=[0, 1], site_addends=[0, 0]))
        done = 0
        while done < count:
            n = min(batch, count - done)
            if single:
                for i in range(n):
                    ring.publish(raws[i])
            elif replay and n == batch:
                ring.publish_many(block, None, writer.block_replay,
                                  (1, KERNARG_BASE + 64 * (done // batch), SIGNAL_BASE,
                                   (0x7F0000300000, 0x7F0000400000)))
            else:
                ring.publish_many(block[:n])
            done += n
    finally:
        packets.set_sink(previous)
        writer.close()


if __name__ == "__main__":
    # `packet-trace record -o sample.aqltrace -- python -m tools.packet_trace.synth`
    write_sample(None)
