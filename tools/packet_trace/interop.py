"""What the rocprofv3-style CSV and the Perfetto protobuf export share: a numpy view of the
dispatch fields of packet records, and the completion records of a trace indexed by
(queue, packet id) so each dispatch row finds its device start/end in a vector lookup.

Both exports read the file twice: a first scan collects symbols and completion records
(completions come after the packets they complete, often in a later chunk), the second
writes rows chunk by chunk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from packets import trace

from .model import SymbolTable
from .scan import COMPLETION_RECORD, scan

_RAW = 48  # the raw packet's offset in a packet record
# hsa_kernel_dispatch_packet_t fields at their hsa.h offsets, over packets.trace.PACKET_RECORD.
DISPATCH_VIEW = np.dtype(
    {
        "names": ["queue_id", "packet_id", "reserve_ns", "publish_ns", "doorbell_ns",
                  "header", "wg_x", "wg_y", "wg_z", "grid_x", "grid_y", "grid_z",
                  "private_segment_size", "group_segment_size", "kernel_object",
                  "completion_signal", "amd_format"],
        "formats": ["<u8", "<u8", "<u8", "<u8", "<u8", "<u2", "<u2", "<u2", "<u2", "<u4",
                    "<u4", "<u4", "<u4", "<u4", "<u8", "<u8", "u1"],
        "offsets": [8, 16, 24, 32, 40, _RAW, _RAW + 4, _RAW + 6, _RAW + 8, _RAW + 12,
                    _RAW + 16, _RAW + 20, _RAW + 24, _RAW + 28, _RAW + 32, _RAW + 56,
                    _RAW + 2],
        "itemsize": trace.PACKET_RECORD.itemsize,
    }
)


@dataclass
class CompletionIndex:
    """Completion records by queue: packet ids sorted, with start/end/clock (the last record
    of a packet id wins)."""

    by_queue: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)
    used: dict[int, np.ndarray] = field(default_factory=dict)  # matched to a packet row

    @classmethod
    def build(cls, parts: list[np.ndarray]) -> CompletionIndex:
        index = cls()
        if not parts:
            return index
        done = np.concatenate(parts)
        for q in np.unique(done["queue_id"]).tolist():
            sel = done[done["queue_id"] == q]
            # Stable sort, then keep the last record of each id.
            order = np.argsort(sel["packet_id"], kind="stable")
            sel = sel[order]
            pids = sel["packet_id"]
            keep = np.ones(pids.shape[0], bool)
            keep[:-1] = pids[1:] != pids[:-1]
            sel = sel[keep]
            index.by_queue[q] = (sel["packet_id"].copy(), sel["start_ns"].astype(np.int64),
                                 sel["end_ns"].astype(np.int64), sel["clock"].copy())
            index.used[q] = np.zeros(sel.shape[0], bool)
        return index

    @property
    def count(self) -> int:
        return sum(v[0].shape[0] for v in self.by_queue.values())

    def lookup(self, queue_ids: np.ndarray, packet_ids: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(found, start_ns, end_ns, clock) for each (queue, packet id); marks the hits used."""
        n = queue_ids.shape[0]
        found = np.zeros(n, bool)
        start = np.zeros(n, np.int64)
        end = np.zeros(n, np.int64)
        clock = np.zeros(n, np.uint32)
        for q in np.unique(queue_ids).tolist():
            entry = self.by_queue.get(q)
            if entry is None:
                continue
            pids, s, e, c = entry
            sel = np.flatnonzero(queue_ids == q)
            pos = np.searchsorted(pids, packet_ids[sel])
            pos_ok = np.minimum(pos, pids.shape[0] - 1)
            hit = (pos < pids.shape[0]) & (pids[pos_ok] == packet_ids[sel])
            idx = sel[hit]
            p = pos_ok[hit]
            found[idx] = True
            start[idx], end[idx], clock[idx] = s[p], e[p], c[p]
            self.used[q][p] = True
        return found, start, end, clock

    def unused(self):
        """(queue, packet id, start, end, clock) of completions no packet row matched."""
        for q, (pids, s, e, c) in self.by_queue.items():
            for i in np.flatnonzero(~self.used[q]).tolist():
                yield q, int(pids[i]), int(s[i]), int(e[i]), int(c[i])


@dataclass
class FirstPass:
    symbols: SymbolTable
    completions: CompletionIndex
    queue_info: dict[int, dict]
    origin_ns: int | None  # the first packet's reserve time


def first_pass(path: str | os.PathLike) -> FirstPass:
    symbols = SymbolTable()
    parts: list[np.ndarray] = []
    info: dict[int, dict] = {}
    origin = None
    for chunk in scan(path, with_tails=True):
        for rec in chunk.others:
            if isinstance(rec, trace.KernelSymbolRecord):
                symbols.add(rec)
            elif isinstance(rec, trace.PacketRecord) and rec.symbol:
                symbols.learn(int.from_bytes(rec.raw[32:40], "little"), rec.symbol)
            elif isinstance(rec, trace.QueueCreatedRecord):
                info[rec.queue_id] = dict(rec.info)
            elif isinstance(rec, trace.CompletionRecord):  # one with unusual flags
                one = np.zeros(1, COMPLETION_RECORD)
                one["queue_id"], one["packet_id"] = rec.queue_id, rec.packet_id
                one["start_ns"], one["end_ns"], one["clock"] = rec.start_ns, rec.end_ns, rec.clock
                parts.append(one)
        if chunk.completions.size:
            parts.append(chunk.completions.copy())
        if origin is None and chunk.packets.size:
            origin = int(chunk.packets["reserve_ns"][0])
    return FirstPass(symbols, CompletionIndex.build(parts), info, origin)


def kernel_ids(symbols: SymbolTable) -> dict[int, int]:
    """A small id per kernel object (1, 2, ... in order of the symbol table)."""
    return {obj: i + 1 for i, obj in enumerate(symbols.names)}
