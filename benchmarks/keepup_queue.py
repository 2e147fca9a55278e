"""Queue memory for host-only benchmarks: its consumer "keeps up" (the read index follows
the write index), so a benchmark times only the producer's side of publishing."""

from __future__ import annotations

import numpy as np

import packets


class KeepUpQueue:
    def __init__(self, size: int = 4096, queue_id: int = 0) -> None:
        self.size = size
        self.queue_id = queue_id
        self.memory = np.zeros(size * 64, np.uint8)
        packets.invalidate_slots(self.memory)
        self.write = 0
        self.bell = 0

    def load_write_index(self) -> int:
        return self.write

    def add_write_index(self, n: int) -> int:
        old = self.write
        self.write = old + n
        return old

    def load_read_index(self) -> int:
        return self.write

    def doorbell(self, packet_id: int) -> None:
        self.bell = packet_id

    def ring(self) -> packets.Ring:
        return packets.Ring(self.memory, self.size, self.load_write_index, self.add_write_index,
                            self.load_read_index, self.doorbell, queue_id=self.queue_id)
