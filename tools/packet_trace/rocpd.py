"""`packet-trace export --rocpd OUT.db`: the trace's kernel dispatches as rocprofv3's rocpd
database (SQLite, rocprofv3's default output since ROCm 7), so rocpd's own tools and SQL
written for rocprofv3 read it.

The tables follow rocprofiler-sdk's schema, source/share/rocprofiler-sdk-rocpd/
rocpd_tables.sql (schema_version 3): every table is named `rocpd_<name>_<uuid>` with a view
`rocpd_<name>` over it (rocpd_views.sql), and the `kernels` view joins them as
data_views.sql does. What this trace fills in:

  rocpd_info_node / _process / _thread   this machine, the exporting process, one thread
  rocpd_info_agent     one GPU agent per distinct `agent` name of the QUEUE_CREATED records
                       (absolute_index = the CSV's Agent_Id - 1)
  rocpd_info_queue     one row per trace queue, name "queue N"
  rocpd_info_stream    one row, "stream 0" (no HIP streams here)
  rocpd_info_code_object / _kernel_symbol   one code object; a symbol per kernel object
  rocpd_event          one per dispatch: category KERNEL_DISPATCH, correlation_id = the
                       submission (the CSV's Correlation_Id)
  rocpd_kernel_dispatch  one per dispatch packet: start/end from the completion record in
                       ns (0 and extdata {"timed": false} when the packet has none), grid,
                       workgroup, LDS and scratch from the packet
  rocpd_string         kernel names, categories
  rocpd_metadata       schema_version 3, uuid, guid
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sqlite3
import uuid as uuid_mod
from pathlib import Path

from rich.console import Console

from ground.errors import AmdgpuError

from .interop import first_pass
from .kernel_csv import DispatchRows
from .scan import scan

SCHEMA_VERSION = "3"
_TABLES = """
CREATE TABLE "rocpd_metadata{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "tag" TEXT NOT NULL, "value" TEXT NOT NULL);
CREATE TABLE "rocpd_string{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "string" TEXT NOT NULL UNIQUE ON CONFLICT ABORT);
CREATE TABLE "rocpd_info_node{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "hash" BIGINT NOT NULL UNIQUE,
  "machine_id" TEXT NOT NULL UNIQUE, "name" TEXT, "system_name" TEXT, "hostname" TEXT,
  "release" TEXT, "version" TEXT, "hardware_name" TEXT, "domain_name" TEXT);
CREATE TABLE "rocpd_info_process{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "ppid" INTEGER,
  "pid" INTEGER NOT NULL, "name" TEXT, "init" BIGINT, "fini" BIGINT, "start" BIGINT,
  "end" BIGINT, "command" TEXT, "environment" JSONB DEFAULT '{{}}' NOT NULL,
  "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_info_thread{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "ppid" INTEGER,
  "pid" INTEGER NOT NULL, "tid" INTEGER NOT NULL, "name" TEXT, "start" BIGINT, "end" BIGINT,
  "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_info_agent{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL,
  "type" TEXT CHECK ("type" IN ('CPU', 'GPU')), "absolute_index" INTEGER,
  "logical_index" INTEGER, "type_index" INTEGER, "uuid" INTEGER, "name" TEXT,
  "generic_name" TEXT, "model_name" TEXT, "vendor_name" TEXT, "product_name" TEXT,
  "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_info_queue{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL,
  "name" TEXT, "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_info_stream{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL,
  "name" TEXT, "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_info_code_object{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL,
  "agent_id" INTEGER, "uri" TEXT, "load_base" BIGINT, "load_size" BIGINT,
  "load_delta" BIGINT, "storage_type" TEXT CHECK ("storage_type" IN ('FILE', 'MEMORY')),
  "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (agent_id) REFERENCES "rocpd_info_agent{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_info_kernel_symbol{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL,
  "code_object_id" INTEGER NOT NULL, "kernel_name" TEXT, "display_name" TEXT,
  "kernel_object" INTEGER, "kernarg_segment_size" INTEGER,
  "kernarg_segment_alignment" INTEGER, "group_segment_size" INTEGER,
  "private_segment_size" INTEGER, "sgpr_count" INTEGER, "arch_vgpr_count" INTEGER,
  "accum_vgpr_count" INTEGER, "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (code_object_id) REFERENCES "rocpd_info_code_object{u}" (id)
    ON UPDATE CASCADE);
CREATE TABLE "rocpd_event{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "category_id" INTEGER, "stack_id" INTEGER,
  "parent_stack_id" INTEGER, "correlation_id" INTEGER,
  "call_stack" JSONB DEFAULT '{{}}' NOT NULL, "line_info" JSONB DEFAULT '{{}}' NOT NULL,
  "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (category_id) REFERENCES "rocpd_string{u}" (id) ON UPDATE CASCADE);
CREATE TABLE "rocpd_kernel_dispatch{u}" ("id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  "guid" TEXT DEFAULT '{g}' NOT NULL, "nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL,
  "tid" INTEGER, "agent_id" INTEGER NOT NULL, "kernel_id" INTEGER NOT NULL,
  "dispatch_id" INTEGER NOT NULL, "queue_id" INTEGER NOT NULL, "stream_id" INTEGER NOT NULL,
  "start" BIGINT NOT NULL, "end" BIGINT NOT NULL, "private_segment_size" INTEGER,
  "group_segment_size" INTEGER, "workgroup_size_x" INTEGER NOT NULL,
  "workgroup_size_y" INTEGER NOT NULL, "workgroup_size_z" INTEGER NOT NULL,
  "grid_size_x" INTEGER NOT NULL, "grid_size_y" INTEGER NOT NULL,
  "grid_size_z" INTEGER NOT NULL, "region_name_id" INTEGER, "event_id" INTEGER,
  "extdata" JSONB DEFAULT '{{}}' NOT NULL,
  FOREIGN KEY (nid) REFERENCES "rocpd_info_node{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (pid) REFERENCES "rocpd_info_process{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (tid) REFERENCES "rocpd_info_thread{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (agent_id) REFERENCES "rocpd_info_agent{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (kernel_id) REFERENCES "rocpd_info_kernel_symbol{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (queue_id) REFERENCES "rocpd_info_queue{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (stream_id) REFERENCES "rocpd_info_stream{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (region_name_id) REFERENCES "rocpd_string{u}" (id) ON UPDATE CASCADE,
  FOREIGN KEY (event_id) REFERENCES "rocpd_event{u}" (id) ON UPDATE CASCADE);
"""
VIEW_TABLES = ("metadata", "string", "info_node", "info_process", "info_thread", "info_agent",
               "info_queue", "info_stream", "info_code_object", "info_kernel_symbol",
               "event", "kernel_dispatch")
# data_views.sql's `kernels` view (its columns, its joins).
_KERNELS_VIEW = """
CREATE VIEW "kernels" AS SELECT K.id, K.guid, T.tid,
  (SELECT string FROM "rocpd_string" RS WHERE RS.id = E.category_id AND RS.guid = E.guid)
    AS category,
  R.string AS region, S.display_name AS name, K.nid, P.pid,
  A.absolute_index AS agent_abs_index, A.logical_index AS agent_log_index,
  A.type_index AS agent_type_index, A.type AS agent_type, S.code_object_id AS code_object_id,
  K.kernel_id, K.dispatch_id, K.stream_id, K.queue_id, Q.name AS queue, ST.name AS stream,
  K.start, K.end, (K.end - K.start) AS duration, K.grid_size_x AS grid_x,
  K.grid_size_y AS grid_y, K.grid_size_z AS grid_z, K.workgroup_size_x AS workgroup_x,
  K.workgroup_size_y AS workgroup_y, K.workgroup_size_z AS workgroup_z,
  K.group_segment_size AS lds_size, K.private_segment_size AS scratch_size,
  S.group_segment_size AS static_lds_size, S.private_segment_size AS static_scratch_size,
  E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id
FROM "rocpd_kernel_dispatch" K
  INNER JOIN "rocpd_info_agent" A ON A.id = K.agent_id AND A.guid = K.guid
  INNER JOIN "rocpd_event" E ON E.id = K.event_id AND E.guid = K.guid
  INNER JOIN "rocpd_string" R ON R.id = K.region_name_id AND R.guid = K.guid
  INNER JOIN "rocpd_info_kernel_symbol" S ON S.id = K.kernel_id AND S.guid = K.guid
  LEFT JOIN "rocpd_info_stream" ST ON ST.id = K.stream_id AND ST.guid = K.guid
  LEFT JOIN "rocpd_info_queue" Q ON Q.id = K.queue_id AND Q.guid = K.guid
  INNER JOIN "rocpd_info_process" P ON P.id = Q.pid AND P.guid = Q.guid
  INNER JOIN "rocpd_info_thread" T ON T.id = K.tid AND T.guid = K.guid;
"""


class RocpdWriter:
    """Creates the schema in a new database and inserts the trace's rows."""

    def __init__(self, db: sqlite3.Connection, first, source: str) -> None:
        self.db = db
        self.first = first
        self.uuid = uuid_mod.uuid4().hex
        self.guid = str(uuid_mod.uuid4())
        self.u = f"_{self.uuid}"
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(_TABLES.format(u=self.u, g=self.guid))
        for name in VIEW_TABLES:
            db.execute(f'CREATE VIEW "rocpd_{name}" AS SELECT * FROM "rocpd_{name}{self.u}"')
        db.executescript(_KERNELS_VIEW)
        self._insert("metadata", tag="schema_version", value=SCHEMA_VERSION)
        self._insert("metadata", tag="uuid", value=self.u)
        self._insert("metadata", tag="guid", value=self.guid)
        self._insert("metadata", tag="source", value=f"packet-trace export of {source}")
        self.strings: dict[str, int] = {}
        host = socket.gethostname()
        uname = platform.uname()
        self.nid = self._insert("info_node", hash=hash(host) & 0x7FFF_FFFF_FFFF_FFFF,
                                machine_id=host, hostname=host, system_name=uname.system,
                                release=uname.release, version=uname.version,
                                hardware_name=uname.machine)
        self.pid = self._insert("info_process", nid=self.nid, pid=os.getpid(),
                                ppid=os.getppid(), command="packet-trace export")
        self.tid = self._insert("info_thread", nid=self.nid, pid=self.pid, ppid=os.getppid(),
                                tid=0, name="trace")  # the trace records no threads
        self.category = self.string("KERNEL_DISPATCH")
        self.stream = self._insert("info_stream", nid=self.nid, pid=self.pid, name="stream 0")
        self.code_object = self._insert("info_code_object", nid=self.nid, pid=self.pid,
                                        uri=f"file://{source}", storage_type="FILE")
        self.agents: dict[int, int] = {}
        self.queues: dict[int, int] = {}
        self.kernels: dict[int, int] = {}

    def _insert(self, table: str, **values) -> int:
        cols = ", ".join(f'"{k}"' for k in values)
        marks = ", ".join("?" * len(values))
        cur = self.db.execute(f'INSERT INTO "rocpd_{table}{self.u}" ({cols}) VALUES ({marks})',
                              list(values.values()))
        return int(cur.lastrowid or 0)

    def string(self, text: str) -> int:
        sid = self.strings.get(text)
        if sid is None:
            sid = self.strings[text] = self._insert("string", string=text)
        return sid

    def agent(self, number: int, queue: int) -> int:
        if number not in self.agents:
            info = self.first.queue_info.get(queue, {})
            name = str(info.get("agent", "unknown agent"))
            self.agents[number] = self._insert(
                "info_agent", nid=self.nid, pid=self.pid, type="GPU",
                absolute_index=max(number - 1, 0), logical_index=max(number - 1, 0),
                type_index=max(number - 1, 0), name=name, generic_name=name, model_name=name,
                vendor_name="AMD", product_name=name)
        return self.agents[number]

    def queue(self, q: int) -> int:
        if q not in self.queues:
            info = {k: v for k, v in self.first.queue_info.get(q, {}).items()
                    if isinstance(v, (int, float, str))}
            self.queues[q] = self._insert("info_queue", nid=self.nid, pid=self.pid,
                                          name=f"queue {q}",
                                          extdata=json.dumps({"trace_queue_id": q, **info}))
        return self.queues[q]

    def kernel(self, kernel_id: int, name: str, lds: int, scratch: int) -> int:
        if kernel_id not in self.kernels:
            self.kernels[kernel_id] = self._insert(
                "info_kernel_symbol", nid=self.nid, pid=self.pid,
                code_object_id=self.code_object, kernel_name=name, display_name=name,
                group_segment_size=lds, private_segment_size=scratch)
        return self.kernels[kernel_id]

    def add(self, c: dict) -> None:
        for i in range(len(c["name"])):
            q = int(c["queue"][i])
            name = str(c["name"][i])
            timed = bool(c["timed"][i])
            lds, scratch = int(c["lds"][i]), int(c["scratch"][i])
            event = self._insert("event", category_id=self.category,
                                 correlation_id=int(c["correlation"][i]))
            self._insert(
                "kernel_dispatch", nid=self.nid, pid=self.pid, tid=self.tid,
                agent_id=self.agent(int(c["agent"][i]), q),
                kernel_id=self.kernel(int(c["kernel_id"][i]), name, lds, scratch),
                dispatch_id=int(c["dispatch_id"][i]), queue_id=self.queue(q),
                stream_id=self.stream,
                start=int(c["start"][i]) if timed else 0,
                end=int(c["end"][i]) if timed else 0,
                private_segment_size=scratch, group_segment_size=lds,
                workgroup_size_x=int(c["wg_x"][i]), workgroup_size_y=int(c["wg_y"][i]),
                workgroup_size_z=int(c["wg_z"][i]), grid_size_x=int(c["grid_x"][i]),
                grid_size_y=int(c["grid_y"][i]), grid_size_z=int(c["grid_z"][i]),
                region_name_id=self.string(name), event_id=event,
                extdata="{}" if timed else '{"timed": false}')


def run(args, console: Console) -> int:
    out = Path(args.rocpd)
    if out.exists():
        raise AmdgpuError(f"--rocpd {out}: the file exists (rocpd databases are written new); "
                          "remove it or choose another name")
    if not out.parent.is_dir():
        raise AmdgpuError(f"--rocpd {out}: its folder does not exist; create it or choose "
                          "another path")
    first = first_pass(args.file)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    db = sqlite3.connect(partial)
    try:
        writer = RocpdWriter(db, first, str(args.file))
        rows = DispatchRows(first, writer.add)
        for chunk in scan(args.file, with_tails=False):
            rows.add(chunk.packets)
        rows.finish()
        db.commit()
    except BaseException:
        db.close()
        partial.unlink(missing_ok=True)  # a bad trace leaves no half-written database
        raise
    db.close()
    partial.replace(out)
    console.print(f"wrote {out}: rocpd (rocprofv3 SQLite schema {SCHEMA_VERSION}), "
                  f"{rows.rows} kernel dispatch row(s), {rows.with_times} with device "
                  f"start/end, {len(writer.agents)} agent(s), {len(writer.queues)} queue(s)",
                  highlight=False)
    return 0
