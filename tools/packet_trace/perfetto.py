"""`packet-trace export --perfetto OUT.json`: a Chrome/Perfetto JSON trace (open it in
ui.perfetto.dev or chrome://tracing).

Layout: process 1 "host submit" has one thread track per queue with one slice per submission
(reserve -> doorbell; a publish_many batch is one slice, its packets listed in args);
process 2 "device" has one track per queue with a slice per completion record (process 3
when the completion clock is the device's, which has another time base); process 4 holds
Vulkan submissions as instant events. Flow arrows join a dependency's producer submission
(the packet whose completion_signal a barrier-AND/OR dep signal or a barrier-value signal
is) to the waiting packet's submission. Times are microseconds after the first packet.
The file is written as the trace is read (one pending submission in memory).
"""

from __future__ import annotations

import json
import os
from collections import Counter, OrderedDict
from typing import cast

from rich.console import Console

from ground.errors import AmdgpuError
from packets import DISPATCH_KINDS, decode, trace

from .model import DependencyTracker, SymbolTable, jsonable, type_name
from .output import atomic_text_file

HOST_PID, DEVICE_PID, DEVICE_CLOCK_PID, VULKAN_PID = 1, 2, 3, 4
_PROCESS_NAMES = {HOST_PID: "host submit", DEVICE_PID: "device (host clock)",
                  DEVICE_CLOCK_PID: "device (device clock)", VULKAN_PID: "vulkan submissions"}
_RECENT = 1 << 16  # packets remembered for naming completion slices


class _Writer:
    def __init__(self, path_or_file) -> None:
        if isinstance(path_or_file, (str, os.PathLike)):
            path_or_file = open(path_or_file, "w")  # noqa: SIM115 - closed by close()
        self.file = path_or_file
        self.file.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
        self.count = 0

    def event(self, ev: dict) -> None:
        if self.count:
            self.file.write(",\n")
        self.file.write(json.dumps(ev, separators=(",", ":")))
        self.count += 1

    def close(self, other: dict) -> None:
        self.file.write('\n], "otherData": ' + json.dumps(other) + "}\n")
        self.file.close()


class PerfettoExporter:
    def __init__(self, path) -> None:
        self.out = _Writer(path)
        self.symbols = SymbolTable()
        self.deps = DependencyTracker()
        self.tids: dict[tuple[int, int], int] = {}  # (pid, queue id) -> tid
        self.processes: set[int] = set()
        self.origin: int | None = None
        self.device_origin: int | None = None
        self.pending: list[tuple[trace.PacketRecord, dict]] = []
        self.recent: OrderedDict[tuple[int, int], str] = OrderedDict()
        self.flows = 0
        self.slices = 0
        self.edges = 0

    # --- helpers -------------------------------------------------------------------------

    def _us(self, ns: int) -> float:
        if self.origin is None:
            self.origin = ns
        return (ns - self.origin) / 1000

    def _tid(self, pid: int, queue_id: int) -> int:
        key = (pid, queue_id)
        tid = self.tids.get(key)
        if tid is None:
            if pid not in self.processes:
                self.processes.add(pid)
                self.out.event({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": _PROCESS_NAMES[pid]}})
                self.out.event({"ph": "M", "name": "process_sort_index", "pid": pid,
                                "tid": 0, "args": {"sort_index": pid}})
            tid = self.tids[key] = sum(1 for p, _ in self.tids if p == pid) + 1
            self.out.event({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": f"queue {queue_id}"}})
        return tid

    def _label(self, rec: trace.PacketRecord, fields: dict) -> str:
        if fields["kind"] in DISPATCH_KINDS:
            return rec.symbol or self.symbols.name(fields["kernel_object"])
        return type_name(fields)

    # --- records -------------------------------------------------------------------------

    def add(self, rec) -> None:
        if isinstance(rec, trace.PacketRecord):
            fields = decode(rec.raw)
            if fields["kind"] in DISPATCH_KINDS and rec.symbol:
                self.symbols.learn(fields["kernel_object"], rec.symbol)
            if self.pending and not _continues(self.pending[-1][0], rec):
                self._flush()
            self.pending.append((rec, fields))
        elif isinstance(rec, trace.KernelSymbolRecord):
            self.symbols.add(rec)
        elif isinstance(rec, trace.CompletionRecord):
            self._flush()
            self._completion(rec)
        elif isinstance(rec, trace.QueueErrorRecord):
            self._flush()
            tid = self._tid(HOST_PID, rec.queue_id)
            self.out.event({"ph": "i", "s": "t", "name": f"queue error at packet {rec.packet_id}",
                            "cat": "fault", "pid": HOST_PID, "tid": tid,
                            "ts": self._us(rec.time_ns), "args": jsonable(rec.info)})
        elif isinstance(rec, trace.VulkanSubmissionRecord):
            self._flush()
            tid = self._tid(VULKAN_PID, 0)
            self.out.event({"ph": "i", "s": "t", "name": "vkQueueSubmit", "pid": VULKAN_PID,
                            "tid": tid, "ts": self._us(rec.time_ns),
                            "args": jsonable(rec.payload)})

    def _flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        first = batch[0][0]
        tid = self._tid(HOST_PID, first.queue_id)
        ts = self._us(first.reserve_ns)
        dur = max((first.doorbell_ns - first.reserve_ns) / 1000, 0.001)
        labels = [self._label(r, f) for r, f in batch]
        name = labels[0] if len(batch) == 1 else f"batch of {len(batch)}"
        args = {"queue": first.queue_id,
                "packet ids": f"{first.packet_id}..{batch[-1][0].packet_id}"
                if len(batch) > 1 else first.packet_id,
                "packets": dict(Counter(labels)),
                "publish-reserve ns": first.publish_ns - first.reserve_ns,
                "doorbell-reserve ns": first.doorbell_ns - first.reserve_ns}
        self.out.event({"ph": "X", "name": name, "cat": "submit", "pid": HOST_PID, "tid": tid,
                        "ts": ts, "dur": dur, "args": args})
        self.slices += 1
        for rec, fields in batch:
            key = (rec.queue_id, rec.packet_id)
            self.recent[key] = self._label(rec, fields)
            if len(self.recent) > _RECENT:
                self.recent.popitem(last=False)
            for edge, anchor in self.deps.observe(key, fields, (tid, ts)):
                self.edges += 1
                if anchor is None or anchor == (tid, ts):
                    continue  # an external signal, or a dependency inside this submission
                self.flows += 1
                producer_tid, producer_ts = cast("tuple[int, int]", anchor)  # ours, above
                common = {"name": "dependency", "cat": edge.kind, "id": self.flows}
                self.out.event({**common, "ph": "s", "pid": HOST_PID, "tid": producer_tid,
                                "ts": producer_ts,
                                "args": {"signal": f"0x{edge.signal:x}"}})
                self.out.event({**common, "ph": "f", "bp": "e", "pid": HOST_PID, "tid": tid,
                                "ts": ts})

    def _completion(self, rec: trace.CompletionRecord) -> None:
        if int(rec.clock) == int(trace.Clock.DEVICE_NS):
            pid = DEVICE_CLOCK_PID
            if self.device_origin is None:
                self.device_origin = rec.start_ns
            ts = (rec.start_ns - self.device_origin) / 1000
        else:
            pid = DEVICE_PID
            ts = self._us(rec.start_ns)
        name = self.recent.get((rec.queue_id, rec.packet_id), f"packet {rec.packet_id}")
        self.out.event({"ph": "X", "name": name, "cat": "device", "pid": pid,
                        "tid": self._tid(pid, rec.queue_id), "ts": ts,
                        "dur": max((rec.end_ns - rec.start_ns) / 1000, 0.001),
                        "args": {"queue": rec.queue_id, "packet id": rec.packet_id}})
        self.slices += 1

    def close(self) -> None:
        self._flush()
        self.out.close({"source": "amdgpu-direct packet-trace", "origin_ns": self.origin,
                        "dependency_edges": self.edges})


def _continues(prev: trace.PacketRecord, rec: trace.PacketRecord) -> bool:
    """Whether `rec` belongs to the submission (one publish_many) that `prev` is in."""
    return (rec.queue_id == prev.queue_id and rec.reserve_ns == prev.reserve_ns
            and rec.publish_ns == prev.publish_ns and rec.packet_id == prev.packet_id + 1)


PROTOBUF_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")


def run(args, console: Console) -> int:
    """`export`: --perfetto (protobuf by suffix, else JSON) and/or --csv."""
    if not args.perfetto and not args.csv and not getattr(args, "rocpd", None):
        raise AmdgpuError("export needs an output: --perfetto OUT.pftrace (Perfetto protobuf), "
                          "--perfetto OUT.json (Chrome JSON), --csv OUT.csv (rocprofv3 "
                          "kernel_trace columns) or --rocpd OUT.db (rocprofv3's database)")
    if getattr(args, "rocpd", None):
        from .rocpd import run as run_rocpd
        run_rocpd(args, console)
    if args.csv:
        from .kernel_csv import run as run_csv
        run_csv(args, console)
    if args.perfetto and str(args.perfetto).endswith(PROTOBUF_SUFFIXES):
        from .pftrace import run_pftrace
        return run_pftrace(args.file, args.perfetto, console)
    if args.perfetto:
        return run_json(args, console)
    return 0


def run_json(args, console: Console) -> int:
    # The JSON is written whole or not at all: a bad trace leaves no partial file behind.
    records = trace.read_trace(args.file)
    with atomic_text_file(args.perfetto) as out:
        exporter = PerfettoExporter(out)
        for rec in records:
            exporter.add(rec)
        exporter.close()
    queues = sum(1 for p, _ in exporter.tids if p == HOST_PID)
    console.print(f"wrote {args.perfetto}: {exporter.out.count} events, {queues} queue "
                  f"track(s), {exporter.slices} slices, {exporter.flows} flow arrow(s) for "
                  f"{exporter.edges} dependency edge(s)", highlight=False)
    return 0
