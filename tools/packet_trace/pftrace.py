"""`packet-trace export --perfetto OUT.pftrace`: Perfetto's own trace format (a `Trace`
protobuf: a stream of `TracePacket`s with TrackDescriptors and TrackEvents; field numbers
from perfetto/protos/perfetto/trace/trace_packet.proto and track_event/*.proto).

The same picture as the JSON export: a process track "host submit" with a track per queue
and a slice per submission (reserve -> doorbell), a process "device (host clock)" with a
track per queue and a slice per completion record, named after the packet's kernel ("device
(device clock)" for completions in the device's time base, shifted so the first one starts
with the first packet), Vulkan submissions as instants, and a flow per dependency edge from
an instant "signal 0x..." in the producer's submission slice to one in the waiter's.
Slices carry debug annotations: queue, packet id(s), correlation id (= the CSV's), count.

Events are encoded a chunk at a time with numpy (tools/packet_trace/protowire.py); only
barrier packets (dependency flows), Vulkan records and track descriptors are encoded one by
one. Timestamps are the trace's ns (CLOCK_MONOTONIC of the traced process) on Perfetto's
default trace clock.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console

from packets import decode, trace

from . import protowire as pw
from .interop import DISPATCH_VIEW, first_pass
from .model import (
    DISPATCH_CODES,
    EXT_DISPATCH_CODE,
    PACKET_VIEW,
    TYPE_NAMES,
    type_codes,
    waited_signals,
)
from .output import atomic_binary_file
from .scan import scan
from .stats import SubmissionChunks

# Perfetto field numbers (TracePacket, TrackEvent, TrackDescriptor, ...).
_TRACE_PACKET = 1
_TP_TIMESTAMP, _TP_TRACK_EVENT, _TP_SEQ_ID, _TP_TRACK_DESCRIPTOR = 8, 11, 10, 60
_TE_TYPE, _TE_TRACK_UUID, _TE_NAME, _TE_CATEGORIES = 9, 11, 23, 22
_TE_DEBUG, _TE_FLOW_IDS, _TE_TERMINATING_FLOW_IDS = 4, 47, 48
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_PARENT = 1, 2, 3, 5
_PD_PID, _PD_NAME = 1, 6
_DA_NAME, _DA_UINT, _DA_STRING = 10, 3, 6
_BEGIN, _END, _INSTANT = 1, 2, 3
_SEQUENCE = 1  # trusted_packet_sequence_id of every packet

HOST_PID, DEVICE_PID, DEVICE_CLOCK_PID, VULKAN_PID = 1, 2, 3, 4
_PROCESS_NAMES = {HOST_PID: "host submit", DEVICE_PID: "device (host clock)",
                  DEVICE_CLOCK_PID: "device (device clock)", VULKAN_PID: "vulkan submissions"}
# Packets that wait on signals: barriers, and gfx1250 extended dispatches (dep_signal).
_WAITERS = [TYPE_NAMES.index(t) for t in ("barrier_and", "barrier_or", "barrier_value")] + [
    EXT_DISPATCH_CODE]
_ENCODE_ROWS = 1 << 15  # events encoded per numpy batch (bounds the matrices' memory)


def _packet(body: bytes, ts: int | None = None) -> bytes:
    head = pw.uint_field(_TP_TIMESTAMP, ts) if ts is not None else b""
    return pw.bytes_field(_TRACE_PACKET, head + body + pw.uint_field(_TP_SEQ_ID, _SEQUENCE))


def _annotation_prefix(name: str) -> bytes:
    return pw.bytes_field(_DA_NAME, name)


class PftraceExporter:
    def __init__(self, out, first) -> None:
        self.out = out
        self.first = first
        self.tracks: dict[tuple[int, int], int] = {}  # (pid, queue) -> track uuid
        self.next_uuid = 100
        self.events = 0
        self.slices = 0
        self.device_slices = 0
        self.flows = 0
        self.edges = 0
        self.submissions = 0
        self.device_shift: int | None = None  # device clock -> trace time
        self.producers: dict[int, tuple[int, int]] = {}  # signal -> (track uuid, ts)
        self._chunks = SubmissionChunks(self._submissions)
        self._names: dict[int, bytes] = {}  # kernel object -> encoded name field
        self.origin = first.origin_ns or 0

    # --- tracks --------------------------------------------------------------------------

    def track(self, pid: int, queue: int) -> int:
        key = (pid, queue)
        uuid = self.tracks.get(key)
        if uuid is None:
            if (pid, -1) not in self.tracks:
                self.tracks[(pid, -1)] = pid
                proc = pw.uint_field(_PD_PID, pid) + pw.bytes_field(_PD_NAME, _PROCESS_NAMES[pid])
                self._write(_packet(pw.bytes_field(_TP_TRACK_DESCRIPTOR, pw.uint_field(
                    _TD_UUID, pid) + pw.bytes_field(_TD_PROCESS, proc))))
            uuid = self.tracks[key] = self.next_uuid
            self.next_uuid += 1
            desc = (pw.uint_field(_TD_UUID, uuid) + pw.bytes_field(_TD_NAME, f"queue {queue}")
                    + pw.uint_field(_TD_PARENT, pid))
            self._write(_packet(pw.bytes_field(_TP_TRACK_DESCRIPTOR, desc)))
        return uuid

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.events += 1

    # --- packets -------------------------------------------------------------------------

    def add_packets(self, packets: np.ndarray) -> None:
        self._chunks.add(packets)

    def finish(self) -> None:
        self._chunks.finish()
        leftovers = list(self.first.completions.unused())
        if leftovers:
            q, p, s, e, c = (np.array(col) for col in zip(*leftovers, strict=True))
            names = [pw.bytes_field(_TE_NAME, f"packet {i}") for i in p.tolist()]
            self._device_slices(q.astype(np.uint64), p.astype(np.uint64), s.astype(np.int64),
                                e.astype(np.int64), c.astype(np.uint32),
                                names, np.arange(len(names)), np.zeros(len(names), np.int64))

    def _submissions(self, packets: np.ndarray, starts: np.ndarray) -> None:
        if not packets.size:
            return
        rows = packets.view(PACKET_VIEW)
        n_sub = starts.shape[0]
        sizes = np.diff(np.append(starts, rows.shape[0]))
        sub_index = np.repeat(np.arange(n_sub), sizes)
        correlation = self.submissions + 1 + np.arange(n_sub)
        self.submissions += n_sub
        codes = type_codes(rows["header"], rows["amd_format"])
        d = packets.view(DISPATCH_VIEW)
        # Labels: a kernel name for a dispatch, the type name otherwise, "batch of N" for
        # a submission of several packets.
        first = rows[starts]
        first_codes = codes[starts]
        label_keys = np.zeros(n_sub, [("k", "<i8"), ("v", "<u8")])
        first_dispatch = np.isin(first_codes, DISPATCH_CODES)
        label_keys["k"] = np.where(sizes > 1, 0, np.where(first_dispatch, 1, 2))
        label_keys["v"] = np.where(sizes > 1, sizes, np.where(
            first_dispatch, d["kernel_object"][starts], first_codes))
        keys, inverse = np.unique(label_keys, return_inverse=True)
        table = []
        for k, v in zip(keys["k"].tolist(), keys["v"].tolist(), strict=True):
            text = (f"batch of {v}" if k == 0 else self.first.symbols.name(v) if k == 1
                    else TYPE_NAMES[v])
            table.append(pw.bytes_field(_TE_NAME, text))
        queues = first["queue_id"]
        tracks = self._tracks_for(HOST_PID, queues)
        self._slices(tracks, first["reserve_ns"].astype(np.int64),
                     first["doorbell_ns"].astype(np.int64), table, inverse,
                     b"submit", [("queue", queues), ("first packet id", first["packet_id"]),
                                 ("packets", sizes), ("correlation id", correlation)])
        self.slices += n_sub
        # Device slices for dispatches with a completion record.
        dsel = np.flatnonzero(np.isin(codes, DISPATCH_CODES))
        if dsel.size:
            dd = d[dsel]
            found, s, e, c = self.first.completions.lookup(dd["queue_id"], dd["packet_id"])
            if found.any():
                hit = dsel[found]
                objs = d["kernel_object"][hit]
                uniq, inv = np.unique(objs, return_inverse=True)
                names = [self._name(o) for o in uniq.tolist()]
                self._device_slices(d["queue_id"][hit], d["packet_id"][hit], s[found],
                                    e[found], c[found], names, inv,
                                    correlation[sub_index[hit]])
        # Non-dispatch packets for other rows (barriers, agent packets) also complete.
        osel = np.flatnonzero(~np.isin(codes, DISPATCH_CODES))
        if osel.size:
            found, s, e, c = self.first.completions.lookup(rows["queue_id"][osel],
                                                           rows["packet_id"][osel])
            if found.any():
                hit = osel[found]
                uniq, inv = np.unique(codes[hit], return_inverse=True)
                names = [pw.bytes_field(_TE_NAME, TYPE_NAMES[k]) for k in uniq.tolist()]
                self._device_slices(rows["queue_id"][hit], rows["packet_id"][hit], s[found],
                                    e[found], c[found], names, inv,
                                    correlation[sub_index[hit]])
        self._dependencies(packets, rows, codes, starts, sub_index)

    def _tracks_for(self, pid: int, queues: np.ndarray) -> np.ndarray:
        uq, inv = np.unique(queues, return_inverse=True)
        return np.array([self.track(pid, q) for q in uq.tolist()], np.uint64)[inv]

    def _name(self, obj: int) -> bytes:
        name = self._names.get(obj)
        if name is None:
            name = self._names[obj] = pw.bytes_field(_TE_NAME, self.first.symbols.name(obj))
        return name

    def _device_slices(self, queues, packet_ids, start, end, clock, names, name_index,
                       correlation) -> None:
        device_clock = clock == int(trace.Clock.DEVICE_NS)
        if device_clock.any():
            if self.device_shift is None:
                self.device_shift = self.origin - int(start[device_clock].min())
            start = np.where(device_clock, start + self.device_shift, start)
            end = np.where(device_clock, end + self.device_shift, end)
        tracks = np.where(device_clock, self._tracks_for(DEVICE_CLOCK_PID, queues),
                          self._tracks_for(DEVICE_PID, queues)) if device_clock.any() else \
            self._tracks_for(DEVICE_PID, queues)
        self._slices(tracks, start, np.maximum(end, start), names, name_index, b"device",
                     [("queue", queues), ("packet id", packet_ids),
                      ("correlation id", correlation)])
        self.device_slices += int(queues.shape[0])
        self.slices += int(queues.shape[0])

    def _slices(self, tracks, begin, end, names: list[bytes], name_index, category: bytes,
                annotations: list[tuple[str, np.ndarray]]) -> None:
        n = tracks.shape[0]
        prefixes = [_annotation_prefix(a) for a, _ in annotations]
        cat = pw.bytes_field(_TE_CATEGORIES, category)
        for lo in range(0, n, _ENCODE_ROWS):
            hi = min(n, lo + _ENCODE_ROWS)
            m = hi - lo
            uuid = pw.uint_fields(_TE_TRACK_UUID, tracks[lo:hi])
            debug = []
            for p, (_, v) in zip(prefixes, annotations, strict=True):
                debug += pw.len_fields(_TE_DEBUG, [pw.const(p, m), *pw.uint_fields(
                    _DA_UINT, np.asarray(v[lo:hi], np.uint64))])
            begin_body = [pw.const(pw.uint_field(_TE_TYPE, _BEGIN), m), *uuid,
                          pw.choose(names, np.asarray(name_index[lo:hi])),
                          pw.const(cat, m), *debug]
            end_body = [pw.const(pw.uint_field(_TE_TYPE, _END), m), *uuid]
            seq = pw.const(pw.uint_field(_TP_SEQ_ID, _SEQUENCE), m)
            parts = []
            for ts, body in ((begin[lo:hi], begin_body), (end[lo:hi], end_body)):
                pkt = [*pw.uint_fields(_TP_TIMESTAMP, np.asarray(ts, np.uint64)),
                       *pw.len_fields(_TP_TRACK_EVENT, body), seq]
                parts += pw.len_fields(_TRACE_PACKET, pkt)
            self.out.write(pw.concat(*parts).flat().tobytes())
            self.events += 2 * m

    # --- dependencies --------------------------------------------------------------------

    def _dependencies(self, packets, rows, codes, starts, sub_index) -> None:
        """Flows from the producer of each waited signal to the waiting packet. Producers
        between waiters are registered a segment at a time (last packet per signal)."""
        waiters = np.flatnonzero(np.isin(codes, _WAITERS))
        first_of_sub = starts[sub_index]
        sub_ts = rows["reserve_ns"][first_of_sub].astype(np.int64)
        queues = rows["queue_id"]
        signals = rows["completion_signal"]
        done = 0
        for w in np.append(waiters, rows.shape[0]).tolist():
            if w > done:
                self._register(signals[done:w], queues[done:w], sub_ts[done:w])
            if w == rows.shape[0]:
                break
            fields = decode(packets["raw"][w].tobytes())
            anchor = (self.track(HOST_PID, int(queues[w])), int(sub_ts[w]))
            for signal in waited_signals(fields):
                self.edges += 1
                producer = self.producers.get(signal)
                if producer is None or producer == anchor:
                    continue  # an outside signal, or one inside the same submission
                self.flows += 1
                self._instant(producer, f"signal 0x{signal:x}", _TE_FLOW_IDS, self.flows)
                self._instant(anchor, f"waits 0x{signal:x} ({fields['kind']})",
                              _TE_TERMINATING_FLOW_IDS, self.flows)
            self._register(signals[w:w + 1], queues[w:w + 1], sub_ts[w:w + 1])
            done = w + 1

    def _register(self, signals, queues, ts) -> None:
        nz = np.flatnonzero(signals != 0)
        if not nz.size:
            return
        rev = nz[::-1]
        uniq, idx = np.unique(signals[rev], return_index=True)  # last occurrence of each
        pick = rev[idx]
        for s, q, t in zip(uniq.tolist(), queues[pick].tolist(), ts[pick].tolist(),
                           strict=True):
            self.producers[s] = (self.track(HOST_PID, q), t)

    def _instant(self, anchor: tuple[int, int], name: str, flow_field: int, flow: int) -> None:
        body = (pw.uint_field(_TE_TYPE, _INSTANT) + pw.uint_field(_TE_TRACK_UUID, anchor[0])
                + pw.bytes_field(_TE_NAME, name) + pw.bytes_field(_TE_CATEGORIES, "dependency")
                + pw.fixed64_field(flow_field, flow))
        self._write(_packet(pw.bytes_field(_TP_TRACK_EVENT, body), anchor[1]))

    # --- other records -------------------------------------------------------------------

    def add_other(self, rec) -> None:
        if isinstance(rec, trace.QueueErrorRecord):
            body = (pw.uint_field(_TE_TYPE, _INSTANT)
                    + pw.uint_field(_TE_TRACK_UUID, self.track(HOST_PID, rec.queue_id))
                    + pw.bytes_field(_TE_NAME, f"queue error at packet {rec.packet_id}")
                    + pw.bytes_field(_TE_CATEGORIES, "fault"))
            for key, value in sorted(rec.info.items()):
                body += pw.bytes_field(_TE_DEBUG, _annotation_prefix(str(key))
                                       + pw.bytes_field(_DA_STRING, str(value)))
            self._write(_packet(pw.bytes_field(_TP_TRACK_EVENT, body), rec.time_ns))
        elif isinstance(rec, trace.VulkanSubmissionRecord):
            uuid = self.track(VULKAN_PID, 0)
            body = (pw.uint_field(_TE_TYPE, _INSTANT) + pw.uint_field(_TE_TRACK_UUID, uuid)
                    + pw.bytes_field(_TE_NAME, "vkQueueSubmit")
                    + pw.bytes_field(_TE_CATEGORIES, "vulkan"))
            for key, value in sorted(rec.payload.items()):
                if isinstance(value, int) and value >= 0:
                    body += pw.bytes_field(_TE_DEBUG, _annotation_prefix(str(key))
                                           + pw.uint_field(_DA_UINT, value))
                else:
                    body += pw.bytes_field(_TE_DEBUG, _annotation_prefix(str(key))
                                           + pw.bytes_field(_DA_STRING, str(value)))
            self._write(_packet(pw.bytes_field(_TP_TRACK_EVENT, body), rec.time_ns))


def export(path, out_path) -> PftraceExporter:
    first = first_pass(path)
    with atomic_binary_file(out_path) as out:
        exporter = PftraceExporter(out, first)
        for chunk in scan(path, with_tails=False):
            for rec in chunk.others:
                exporter.add_other(rec)
            exporter.add_packets(chunk.packets)
        exporter.finish()
    return exporter


def run_pftrace(path, out_path, console: Console) -> int:
    ex = export(path, out_path)
    queues = sum(1 for (p, q) in ex.tracks if p == HOST_PID and q >= 0)
    console.print(f"wrote {out_path}: {ex.events} trace packets, {queues} queue track(s), "
                  f"{ex.slices - ex.device_slices} host submission slice(s), "
                  f"{ex.device_slices} device slice(s), {ex.flows} flow(s) for {ex.edges} "
                  "dependency edge(s) (Perfetto protobuf)", highlight=False)
    return 0
