"""`packet-trace export --csv OUT.csv`: one row per kernel dispatch packet with the columns of
rocprofv3's `kernel_trace.csv` (ROCm 6.4+ layout), so scripts written for rocprofv3 read it.

Where the values come from (docs/PACKET_TRACE.md has the table):
  Agent_Id        "Agent N": N numbers the distinct `agent` names of QUEUE_CREATED records
                  (0 when the queue's record names none)
  Queue_Id        the trace's queue id
  Stream_Id       0 (no HIP streams here)
  Thread_Id       0 (the trace does not record threads)
  Dispatch_Id     1, 2, ... in trace order over all queues
  Kernel_Id       1, 2, ... per kernel object, in the order the symbols were recorded
  Correlation_Id  the submission (one publish / publish_many) the packet went out in,
                  1, 2, ...: the same number as the Perfetto export's host slice
  Start/End_Timestamp  the completion record's start/end in ns (empty when the packet has
                  none); the host CLOCK_MONOTONIC unless the record's clock is the device's
  LDS_Block_Size  group_segment_size; Scratch_Size private_segment_size
  VGPR/Accum_VGPR/SGPR_Count  0: the trace does not carry register counts
  Workgroup_Size_*, Grid_Size_*  from the packet

Rows are formatted a chunk at a time from numpy columns (no decode per packet).
"""

from __future__ import annotations

import numpy as np
from rich.console import Console

from .interop import DISPATCH_VIEW, first_pass, kernel_ids
from .model import PACKET_VIEW, TYPE_NAMES, type_codes
from .output import atomic_text_file
from .scan import scan
from .stats import SubmissionChunks

COLUMNS = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id",
           "Kernel_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp",
           "LDS_Block_Size", "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count",
           "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X",
           "Grid_Size_Y", "Grid_Size_Z")
HEADER = ",".join(f'"{c}"' for c in COLUMNS) + "\n"
_DISPATCH = TYPE_NAMES.index("kernel_dispatch")


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def agent_numbers(queue_info: dict[int, dict]) -> dict[int, int]:
    """Queue id -> agent number: 1, 2, ... per distinct `agent` name of the QUEUE_CREATED
    records, 0 for a queue whose record names none."""
    names: dict[str, int] = {}
    out = {}
    for q, info in sorted(queue_info.items()):
        agent = info.get("agent")
        out[q] = 0 if agent is None else names.setdefault(str(agent), len(names) + 1)
    return out


class DispatchRows:
    """The kernel-dispatch rows of a trace, a chunk of whole submissions at a time, as
    columns (what the CSV and the rocpd database both write): `sink(cols)` gets numpy arrays
    or lists keyed agent, queue, dispatch_id, kernel_id, name, correlation, timed, start,
    end, lds, scratch, wg_x/y/z, grid_x/y/z."""

    def __init__(self, first, sink) -> None:
        self.first = first
        self.sink = sink
        self.kernel_id = kernel_ids(first.symbols)
        self.agents = agent_numbers(first.queue_info)
        self.rows = 0
        self.with_times = 0
        self.submissions = 0  # submissions closed so far (correlation ids before this chunk)
        self._chunks = SubmissionChunks(self._rows)

    def add(self, packets: np.ndarray) -> None:
        self._chunks.add(packets)

    def finish(self) -> None:
        self._chunks.finish()

    def _rows(self, packets: np.ndarray, starts: np.ndarray) -> None:
        """Whole submissions of PACKET_RECORD rows (starts: where each begins)."""
        if not packets.size:
            return
        rows = packets.view(PACKET_VIEW)
        sub = np.zeros(rows.shape[0], np.int64)
        sub[starts] = 1
        correlation = np.cumsum(sub) + self.submissions
        self.submissions += starts.shape[0]
        codes = type_codes(rows["header"], rows["amd_format"])
        sel = codes == _DISPATCH
        if not sel.any():
            return
        d = packets.view(DISPATCH_VIEW)[sel]
        n = d.shape[0]
        found, start, end, _ = self.first.completions.lookup(d["queue_id"], d["packet_id"])
        self.with_times += int(found.sum())
        objects, inverse = np.unique(d["kernel_object"], return_inverse=True)
        names = np.array([self.first.symbols.name(o) for o in objects.tolist()],
                         dtype=object)[inverse]
        kids = np.array([self.kernel_id.get(o, 0) for o in objects.tolist()],
                        np.int64)[inverse]
        queues = d["queue_id"]
        distinct = np.unique(queues)
        agents = np.array([self.agents.get(q, 0) for q in distinct.tolist()],
                          np.int64)[np.searchsorted(distinct, queues)]
        self.sink({
            "agent": agents, "queue": queues, "name": names, "kernel_id": kids,
            "dispatch_id": np.arange(self.rows + 1, self.rows + n + 1),
            "correlation": correlation[sel], "timed": found, "start": start, "end": end,
            "lds": d["group_segment_size"], "scratch": d["private_segment_size"],
            "wg_x": d["wg_x"], "wg_y": d["wg_y"], "wg_z": d["wg_z"],
            "grid_x": d["grid_x"], "grid_y": d["grid_y"], "grid_z": d["grid_z"],
        })
        self.rows += n


class CsvExporter:
    def __init__(self, out, first) -> None:
        self.out = out
        self.dispatches = DispatchRows(first, self._write)
        out.write(HEADER)

    @property
    def rows(self) -> int:
        return self.dispatches.rows

    @property
    def with_times(self) -> int:
        return self.dispatches.with_times

    def add(self, packets: np.ndarray) -> None:
        self.dispatches.add(packets)

    def finish(self) -> None:
        self.dispatches.finish()

    def _write(self, c: dict) -> None:
        start_text = np.where(c["timed"], c["start"].astype(str), "")
        end_text = np.where(c["timed"], c["end"].astype(str), "")
        names = [_quote(n) for n in c["name"]]
        agents = [f'"Agent {a}"' for a in c["agent"].tolist()]
        columns = (agents, c["queue"].tolist(), c["dispatch_id"].tolist(),
                   c["kernel_id"].tolist(), names, c["correlation"].tolist(),
                   start_text.tolist(), end_text.tolist(), c["lds"].tolist(),
                   c["scratch"].tolist(), c["wg_x"].tolist(), c["wg_y"].tolist(),
                   c["wg_z"].tolist(), c["grid_x"].tolist(), c["grid_y"].tolist(),
                   c["grid_z"].tolist())
        line = ('"KERNEL_DISPATCH",{},{},0,0,{},{},{},{},{},{},{},{},0,0,0,{},{},{},{},{},{}\n'
                .format)
        self.out.write("".join(line(*r) for r in zip(*columns, strict=True)))


def run(args, console: Console) -> int:
    first = first_pass(args.file)
    with atomic_text_file(args.csv) as out:
        exporter = CsvExporter(out, first)
        for chunk in scan(args.file, with_tails=False):
            exporter.add(chunk.packets)
        exporter.finish()
    console.print(f"wrote {args.csv}: {exporter.rows} kernel dispatch row(s), "
                  f"{exporter.with_times} with device start/end (rocprofv3 kernel_trace "
                  "columns)", highlight=False)
    return 0
