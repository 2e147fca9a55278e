"""`packet-trace stats`: packet counts, host submit cost and device time, per kernel and per
queue, computed over chunks of records with numpy (a million packets never sit in memory).

A submission is a run of packet records with one reserve time on one queue and consecutive
ids (one `publish` or one `publish_many`). Host cost per submission: publish - reserve (the
packets written) and doorbell - reserve (the doorbell rung); a packet's share is the
submission's cost over its packet count. Device time is end - start of completion records.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ground.errors import TraceFormatError
from packets import trace

from .model import DISPATCH_CODES, PACKET_VIEW, TYPE_NAMES, SymbolTable, jsonable, type_codes
from .scan import scan

_WINDOW = 1 << 16  # recent dispatches per queue that completions are matched against
_NO_ID = np.uint64(2**64 - 1)
_N_TYPES = len(TYPE_NAMES)
_DISPATCH = np.array(DISPATCH_CODES)  # classic and gfx1250 extended dispatches


@dataclass
class Summary:
    """count, sum, min and max of a stream of integer durations (ns)."""

    count: int = 0
    total: int = 0
    low: int | None = None
    high: int | None = None

    def add(self, values: np.ndarray) -> None:
        if values.size:
            self.count += int(values.size)
            self.total += int(values.sum())
            lo, hi = int(values.min()), int(values.max())
            self.low = lo if self.low is None else min(self.low, lo)
            self.high = hi if self.high is None else max(self.high, hi)

    def add_one(self, count: int, total: int, lo: int, hi: int) -> None:
        self.count += count
        self.total += total
        self.low = lo if self.low is None else min(self.low, lo)
        self.high = hi if self.high is None else max(self.high, hi)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def to_json(self) -> dict:
        return {"count": self.count, "total_ns": self.total, "mean_ns": self.mean,
                "min_ns": self.low, "max_ns": self.high}


@dataclass
class QueueStats:
    types: np.ndarray = field(default_factory=lambda: np.zeros(_N_TYPES, np.int64))
    submissions: int = 0
    publish: Summary = field(default_factory=Summary)  # per submission
    doorbell: Summary = field(default_factory=Summary)
    device: Summary = field(default_factory=Summary)
    first_ns: int | None = None
    last_ns: int | None = None
    info: dict = field(default_factory=dict)  # from the QUEUE_CREATED record


@dataclass
class KernelStats:
    dispatches: int = 0
    host_share_ns: float = 0.0  # sum of each dispatch's share of its submission's cost
    device: Summary = field(default_factory=Summary)


class StatsBuilder:
    """Feed `Chunk`s in order, then `result()`."""

    def __init__(self) -> None:
        self.symbols = SymbolTable()
        self.queues: dict[int, QueueStats] = {}
        self.kernels: dict[int, KernelStats] = {}
        self.records = 0
        self.completions = 0
        self.unmatched_completions = 0
        self.other: dict[str, int] = {}
        self.queue_errors: list[dict] = []  # QUEUE_ERROR records: where a queue stopped
        self.error: str | None = None
        self._chunks = SubmissionChunks(self._add_packets)
        self._windows: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # --- feeding -------------------------------------------------------------------------

    def add(self, chunk) -> None:
        self.records += chunk.records
        for rec in chunk.others:
            self._other(rec)
        rows = chunk.packets.view(PACKET_VIEW) if chunk.packets.size else None
        if rows is not None:
            self._remember_dispatches(rows)
            self._chunks.add(rows)
        if chunk.completions.size:
            self._add_completions(chunk.completions)

    def _other(self, rec) -> None:
        if isinstance(rec, trace.KernelSymbolRecord):
            self.symbols.add(rec)
            key = "kernel_symbol"
        elif isinstance(rec, trace.PacketRecord):  # a packet with a tail (counted as packet)
            if rec.symbol:
                self.symbols.learn(int.from_bytes(rec.raw[32:40], "little"), rec.symbol)
            return
        elif isinstance(rec, trace.QueueCreatedRecord):
            self.queues.setdefault(rec.queue_id, QueueStats()).info = dict(rec.info)
            key = "queue_created"
        elif isinstance(rec, trace.VulkanSubmissionRecord):
            key = "vulkan_submission"
        elif isinstance(rec, trace.BlockTemplateRecord):
            key = "block_template"
        elif isinstance(rec, trace.QueueErrorRecord):
            key = "queue_error"
            self.queue_errors.append({"queue": rec.queue_id, "packet_id": rec.packet_id,
                                      **jsonable(rec.info)})
        elif isinstance(rec, trace.CompletionRecord):  # one with unusual flags
            self._add_completion_values(np.array([rec.queue_id], np.uint64),
                                        np.array([rec.packet_id], np.uint64),
                                        np.array([rec.end_ns - rec.start_ns], np.int64))
            return
        else:
            key = "unknown"
        self.other[key] = self.other.get(key, 0) + 1

    def _add_packets(self, rows: np.ndarray, starts: np.ndarray) -> None:
        """Whole submissions: rows[starts[i]:starts[i+1]] is submission i."""
        if not rows.size:
            return
        codes = type_codes(rows["header"], rows["amd_format"])
        sizes = np.diff(np.append(starts, rows.shape[0]))
        first = rows[starts]
        publish_cost = first["publish_ns"].astype(np.int64) - first["reserve_ns"].astype(np.int64)
        doorbell_cost = (first["doorbell_ns"].astype(np.int64)
                         - first["reserve_ns"].astype(np.int64))
        share = np.repeat(doorbell_cost / sizes, sizes)  # each packet's part of its submission
        queue_ids = rows["queue_id"]
        sub_queues = first["queue_id"]
        for q in np.unique(queue_ids):
            qs = self.queues.setdefault(int(q), QueueStats())
            mask = queue_ids == q
            qs.types += np.bincount(codes[mask], minlength=_N_TYPES)
            smask = sub_queues == q
            qs.submissions += int(smask.sum())
            qs.publish.add(publish_cost[smask])
            qs.doorbell.add(doorbell_cost[smask])
            t0 = int(rows["reserve_ns"][mask].min())
            t1 = int(rows["doorbell_ns"][mask].max())
            qs.first_ns = t0 if qs.first_ns is None else min(qs.first_ns, t0)
            qs.last_ns = t1 if qs.last_ns is None else max(qs.last_ns, t1)
        dmask = np.isin(codes, _DISPATCH)
        if dmask.any():
            objects, inverse, counts = np.unique(rows["kernel_object"][dmask],
                                                 return_inverse=True, return_counts=True)
            shares = np.bincount(inverse, weights=share[dmask], minlength=objects.size)
            for obj, n, s in zip(objects.tolist(), counts.tolist(), shares.tolist(),
                                 strict=True):
                ks = self.kernels.setdefault(obj, KernelStats())
                ks.dispatches += n
                ks.host_share_ns += s

    def _remember_dispatches(self, rows: np.ndarray) -> None:
        """Recent dispatches per queue (packet id -> kernel_object) for completion records."""
        codes = type_codes(rows["header"], rows["amd_format"])
        queue_ids = rows["queue_id"]
        for q in np.unique(queue_ids):
            ids_win, obj_win = self._windows.setdefault(
                int(q), (np.full(_WINDOW, _NO_ID), np.zeros(_WINDOW, np.uint64)))
            sel = queue_ids == q
            pids = rows["packet_id"][sel]
            slots = (pids & np.uint64(_WINDOW - 1)).astype(np.int64)
            ids_win[slots] = pids
            obj_win[slots] = np.where(np.isin(codes[sel], _DISPATCH), rows["kernel_object"][sel], 0)

    def _add_completions(self, done: np.ndarray) -> None:
        durations = done["end_ns"].astype(np.int64) - done["start_ns"].astype(np.int64)
        self._add_completion_values(done["queue_id"], done["packet_id"], durations)

    def _add_completion_values(self, queue_ids, packet_ids, durations) -> None:
        self.completions += int(durations.size)
        for q in np.unique(queue_ids):
            sel = queue_ids == q
            d = durations[sel]
            self.queues.setdefault(int(q), QueueStats()).device.add(d)
            window = self._windows.get(int(q))
            if window is None:
                self.unmatched_completions += int(d.size)
                continue
            ids_win, obj_win = window
            pids = packet_ids[sel]
            slots = (pids & np.uint64(_WINDOW - 1)).astype(np.int64)
            hit = ids_win[slots] == pids
            self.unmatched_completions += int((~hit).sum())
            objs = obj_win[slots][hit]
            dh = d[hit]
            for obj in np.unique(objs[objs != 0]).tolist():
                vals = dh[objs == obj]
                self.kernels.setdefault(obj, KernelStats()).device.add(vals)

    # --- result --------------------------------------------------------------------------

    def finish(self) -> None:
        self._chunks.finish()

    def result(self) -> dict:
        totals = np.zeros(_N_TYPES, np.int64)
        for qs in self.queues.values():
            totals += qs.types
        packets = {name: int(n) for name, n in zip(TYPE_NAMES, totals.tolist(), strict=True)
                   if n or name in _ALWAYS}
        kernels: dict[str, int] = {}
        per_kernel = []
        for obj, ks in sorted(self.kernels.items(), key=lambda kv: -kv[1].dispatches):
            name = self.symbols.name(obj)
            kernels[name] = kernels.get(name, 0) + ks.dispatches
            per_kernel.append({
                "kernel": name, "kernel_object": f"0x{obj:x}", "dispatches": ks.dispatches,
                "host_ns_per_dispatch": (ks.host_share_ns / ks.dispatches
                                         if ks.dispatches else None),
                "device": ks.device.to_json(),
            })
        per_queue = []
        for q, qs in sorted(self.queues.items()):
            per_queue.append({
                "queue": q,
                "packets": {n: int(c) for n, c in zip(TYPE_NAMES, qs.types.tolist(),
                                                      strict=True) if c},
                "submissions": qs.submissions,
                "submit_publish": qs.publish.to_json(),
                "submit_doorbell": qs.doorbell.to_json(),
                "device": qs.device.to_json(),
                "span_ns": (qs.last_ns - qs.first_ns)
                if qs.first_ns is not None and qs.last_ns is not None else 0,
                "info": jsonable(qs.info),
            })
        out = {
            "records": self.records,
            "packets_total": int(totals.sum()),
            "packets": packets,
            "kernels": kernels,
            "queues": len(self.queues),
            "submissions": sum(q.submissions for q in self.queues.values()),
            "completions": self.completions,
            "unmatched_completions": self.unmatched_completions,
            "other_records": dict(self.other),
            "per_queue": per_queue,
            "per_kernel": per_kernel,
            "queue_errors": self.queue_errors,
        }
        if self.error:
            out["error"] = self.error
        return out


_ALWAYS = ("kernel_dispatch", "barrier_and", "barrier_or", "barrier_value", "agent_dispatch")


def _submission_starts(rows: np.ndarray) -> np.ndarray:
    """Indices where a new submission begins (index 0 always does)."""
    q = rows["queue_id"]
    r = rows["reserve_ns"]
    p = rows["packet_id"]
    new = np.empty(rows.shape[0], bool)
    new[0] = True
    new[1:] = (q[1:] != q[:-1]) | (r[1:] != r[:-1]) | (p[1:] != p[:-1] + np.uint64(1))
    return np.flatnonzero(new)


class SubmissionChunks:
    """Cuts a stream of packet rows into whole submissions for `emit(rows, starts)`: the
    last submission of a chunk may go on in the next one, so it is held back until the next
    `add` or `finish`."""

    def __init__(self, emit) -> None:
        self._emit = emit
        self._pending: np.ndarray | None = None

    def add(self, rows: np.ndarray) -> None:
        if not rows.size:
            return
        if self._pending is not None:
            rows = np.concatenate([self._pending, rows])
        starts = _submission_starts(rows)
        last = int(starts[-1])
        self._emit(rows[:last], starts[:-1])
        self._pending = rows[last:].copy()

    def finish(self) -> None:
        if self._pending is not None and self._pending.size:
            rows, self._pending = self._pending, None
            self._emit(rows, _submission_starts(rows))


def compute(path: str | os.PathLike) -> dict:
    """Stats of a whole file; a format error is kept in result["error"] (what came before is
    counted) and re-raised by the caller that wants an exit status."""
    builder = StatsBuilder()
    try:
        for chunk in scan(path, with_tails=True):
            builder.add(chunk)
    except TraceFormatError as e:
        builder.error = str(e)
    builder.finish()
    return builder.result()


# --- command -----------------------------------------------------------------------------


def run(args, console: Console) -> int:
    result = compute(args.file)
    if result.get("error") and not result["records"]:
        raise TraceFormatError(result["error"])  # nothing was read: no empty tables
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        render(result, console, args.file)
    if result.get("error"):
        raise TraceFormatError(result["error"])
    return 0


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:.3f}"


def render(result: dict, console: Console, path) -> None:
    types = ", ".join(f"{k} {v}" for k, v in result["packets"].items() if v)
    console.print(f"[bold]{escape(str(path))}[/]: {result['records']} records, "
                  f"{result['packets_total']} packets ({types or 'none'}), "
                  f"{result['submissions']} submissions, {result['queues']} queue(s), "
                  f"{result['completions']} completion records")
    qt = Table(title="per queue", title_justify="left")
    for col in ("queue", "packets by type", "submissions", "publish-reserve us (mean/max)",
                "doorbell-reserve us (mean/max)", "device us (n, mean, total)"):
        qt.add_column(col, overflow="fold")
    for q in result["per_queue"]:
        p, d, dev = q["submit_publish"], q["submit_doorbell"], q["device"]
        qt.add_row(str(q["queue"]), ", ".join(f"{k} {v}" for k, v in q["packets"].items()),
                   str(q["submissions"]), f"{_us(p['mean_ns'])} / {_us(p['max_ns'])}",
                   f"{_us(d['mean_ns'])} / {_us(d['max_ns'])}",
                   f"{dev['count']}, {_us(dev['mean_ns'])}, {_us(dev['total_ns'])}"
                   if dev["count"] else "-")
    console.print(qt)
    if result["per_kernel"]:
        kt = Table(title="per kernel", title_justify="left")
        for col in ("kernel", "dispatches", "host us per dispatch",
                    "device us (n, mean, min, max)"):
            kt.add_column(col, overflow="fold")
        for k in result["per_kernel"]:
            dev = k["device"]
            kt.add_row(k["kernel"], str(k["dispatches"]), _us(k["host_ns_per_dispatch"]),
                       f"{dev['count']}, {_us(dev['mean_ns'])}, {_us(dev['min_ns'])}, "
                       f"{_us(dev['max_ns'])}" if dev["count"] else "-")
        console.print(kt)
    if result["unmatched_completions"]:
        console.print(f"{result['unmatched_completions']} completion record(s) matched no "
                      "recent dispatch (device time counted per queue only)")
