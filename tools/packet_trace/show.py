"""`packet-trace show`: the packets of a trace as a table (or hex dumps with --raw), with
kernel names and kernarg values decoded by name from KERNEL_SYMBOL layouts.

Rows are printed in pages, so a long trace streams; a format error is reported after the
rows before it have been printed. In a trace with checksum records a row is printed once the
checksum record after it has been checked (rows of a damaged stretch never are), and
`--limit N` reads on to the checksum record that covers its last row; for a trace without
them it says on stderr that the rows were not verified.
"""

from __future__ import annotations

import fnmatch

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ground.errors import PacketError
from packets import DISPATCH_KINDS, decode, pm4, trace

from .model import (
    SymbolTable,
    decode_kernargs,
    normalize_type,
    parse_time,
    scope_name,
    type_name,
)
from .verify import Records, say_unverified

PAGE_ROWS = 200


class Filters:
    def __init__(self, args) -> None:
        self.queues = set(args.queue or ())
        self.kernels = list(args.kernel or ())
        self.types = {normalize_type(t) for t in (args.type or ())}
        self.since = parse_time(args.since) if args.since else None
        self.until = parse_time(args.until) if args.until else None
        self.origin: int | None = None  # reserve_ns of the first packet

    def micros(self, ns: int) -> float:
        """us since the origin (set by the first accept or accept_vulkan: call one first)."""
        return (ns - (self.origin if self.origin is not None else ns)) / 1000

    def accept_vulkan(self, rec: trace.VulkanSubmissionRecord) -> bool:
        """Vulkan submissions are rows too, unless a packet filter is given."""
        if self.origin is None:
            self.origin = rec.time_ns
        return not (self.queues or self.kernels or self.types or self.since or self.until)

    def accept(self, rec: trace.PacketRecord, fields: dict, kernel: str | None) -> bool:
        if self.origin is None:
            self.origin = rec.reserve_ns
        if self.queues and rec.queue_id not in self.queues:
            return False
        if self.types and type_name(fields) not in self.types:
            return False
        if self.kernels and not (kernel and any(
                fnmatch.fnmatchcase(kernel, k) or k in kernel for k in self.kernels)):
            return False
        if self.since and rec.reserve_ns < self.since.resolve(self.origin):
            return False
        if self.until and rec.reserve_ns > self.until.resolve(self.origin):
            return False
        return True


def _payload_text(payload: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in payload.items())


def kernel_of(rec: trace.PacketRecord, fields: dict, symbols: SymbolTable) -> str | None:
    if fields["kind"] not in DISPATCH_KINDS:
        return None
    return rec.symbol or symbols.name(fields["kernel_object"])


def kernarg_text(rec: trace.PacketRecord, fields: dict, symbols: SymbolTable) -> str:
    """'name=value (kind)' for every argument; hidden args marked; raw hex without a layout."""
    if rec.kernarg is None:
        return f"kernarg@0x{fields['kernarg_address']:x}"
    specs = symbols.layouts.get(fields["kernel_object"])
    if not specs:
        return f"kernarg {len(rec.kernarg)} B (no layout): {rec.kernarg[:32].hex()}" + (
            "..." if len(rec.kernarg) > 32 else "")
    parts = []
    for arg in decode_kernargs(specs, rec.kernarg):
        label = "[hidden] " if arg.hidden else ""
        kind = "" if arg.hidden else f" ({arg.spec.kind})"
        parts.append(f"{label}{arg.spec.name}={arg.text}{kind}")
    return "\n".join(parts)


def details(rec: trace.PacketRecord, fields: dict, symbols: SymbolTable,
            family: str = "gfx11") -> str:
    kind = fields["kind"]
    done = fields.get("completion_signal", 0)
    tail = f"\ncompletion_signal=0x{done:x}" if done else ""
    if kind == "kernel_dispatch":
        return kernarg_text(rec, fields, symbols) + tail
    if kind == "ext_kernel_dispatch":  # gfx1250: the grid in clusters of workgroups
        axes = "xyz"[:max(1, min(3, fields["dims"]))]
        count = "x".join(str(fields[f"cluster_count_{a}"]) for a in axes)
        size = "x".join(str(fields[f"cluster_size_{a}"]) for a in axes)
        dep = fields["dep_signal"]
        return (f"clusters {count} of {size} workgroups\n" + kernarg_text(rec, fields, symbols)
                + (f"\ndep_signal=0x{dep:x}" if dep else "") + tail)
    if kind in ("barrier_and", "barrier_or"):
        deps = ", ".join(f"0x{d:x}" for d in fields["dep_signal"] if d)
        return f"deps=[{deps}]" + tail
    if kind == "barrier_value":
        mask = fields["mask"] & (2**64 - 1)
        value = f"0x{fields['signal']:x}" + ("" if mask == 2**64 - 1 else f" & 0x{mask:x}")
        cond = getattr(fields["cond"], "name", fields["cond"])
        return f"wait value({value}) {cond} {fields['value']}" + tail
    if kind == "agent_dispatch":
        args = ", ".join(f"0x{a:x}" for a in fields["arg"])
        return f"agent_type={fields['agent_type']} args=[{args}]" + tail
    if kind == "pm4_ib":
        return pm4_text(rec, fields, family) + tail
    return f"header=0x{fields['header']:04x}"


def pm4_text(rec: trace.PacketRecord, fields: dict, family: str) -> str:
    """A PM4_IB packet: its indirect buffer's packets and dispatches when the record carries
    the buffer (a PM4 publisher attaches it as the record's payload, where a dispatch has its
    kernarg bytes), else where it lives."""
    where = f"IB 0x{fields['ib_address']:x}, {fields['ib_dwords']} dwords"
    if rec.kernarg is None:
        return where + " (contents not recorded)"
    words = [int.from_bytes(rec.kernarg[i:i + 4], "little")
             for i in range(0, len(rec.kernarg) - 3, 4)]
    try:
        lines = pm4.describe_stream(words, family)
    except PacketError as exc:
        lines = [f"malformed: {exc}"]
    return "\n".join([where + ":", *lines])


def shape(fields: dict) -> str:
    if fields["kind"] not in DISPATCH_KINDS:
        return ""
    axes = "xyz"[:max(1, min(3, fields["dims"]))]
    grid = "x".join(str(fields[f"grid_size_{a}"]) for a in axes)
    wg = "x".join(str(fields[f"workgroup_size_{a}"]) for a in axes)
    return f"{grid} / {wg}"


# (header, width, right-justified); the last column takes the rest of the line.
COLUMNS = [("t+us", 10, True), ("queue", 5, True), ("id", 7, True), ("type", 19, False),
           ("bar", 3, False), ("acq/rel", 11, False), ("kernel", 22, False),
           ("grid / wg", 14, False), ("details (kernargs by name, signals)", 30, False)]


class RichRows:
    """Rows as rich tables (a terminal), printed a page at a time."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.first = True
        self.table = self._new()
        self.count = 0

    def _new(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD if self.first else None, show_header=self.first,
                      show_edge=False, pad_edge=False)
        for i, (name, width, right) in enumerate(COLUMNS):
            last = i == len(COLUMNS) - 1
            table.add_column(name, justify="right" if right else "left",
                             width=None if last else width, min_width=width if last else None,
                             overflow="fold", no_wrap=not last and name != "kernel")
        return table

    def add(self, cells: list[str]) -> None:
        self.table.add_row(*(escape(c) for c in cells))
        self.count += 1
        if self.count >= PAGE_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.count:
            self.console.print(self.table)
            self.first = False
            self.table, self.count = self._new(), 0

    def text(self, line: str) -> None:
        self.console.print(escape(line))


class PlainRows:
    """The same columns as fixed-width text (pipes, files): fast enough for long traces."""

    def __init__(self, console: Console) -> None:
        self.out = console.file
        total = console.width or 160
        fixed = sum(w for _, w, _ in COLUMNS[:-1]) + 3 * (len(COLUMNS) - 1)
        self.widths = [w for _, w, _ in COLUMNS[:-1]] + [max(COLUMNS[-1][1], total - fixed)]
        self.header_done = False

    def _line(self, cells: list[str]) -> str:
        parts = []
        for (_, _, right), width, cell in zip(COLUMNS, self.widths, cells, strict=True):
            parts.append(cell.rjust(width) if right else cell.ljust(width))
        return "   ".join(parts).rstrip() + "\n"

    def add(self, cells: list[str]) -> None:
        if not self.header_done:
            self.header_done = True
            self.out.write(self._line([name for name, _, _ in COLUMNS]))
            self.out.write("\u2500" * (sum(self.widths) + 3 * (len(self.widths) - 1)) + "\n")
        columns = [_fold(cell, width) for cell, width in zip(cells, self.widths, strict=True)]
        height = max(len(c) for c in columns)
        for i in range(height):
            self.out.write(self._line([c[i] if i < len(c) else "" for c in columns]))

    def flush(self) -> None:
        self.out.flush()

    def text(self, line: str) -> None:
        self.out.write(line + "\n")


def _fold(cell: str, width: int) -> list[str]:
    lines = []
    for line in cell.split("\n"):
        while len(line) > width:
            lines.append(line[:width])
            line = line[width:]
        lines.append(line)
    return lines


def hexdump(data: bytes, indent: str = "  ") -> list[str]:
    lines = []
    for i in range(0, len(data), 16):
        row = data[i:i + 16]
        words = " ".join(row[j:j + 4].hex() for j in range(0, len(row), 4))
        lines.append(f"{indent}{i:04x}: {words}")
    return lines


def run(args, console: Console) -> int:
    filters = Filters(args)
    symbols = SymbolTable()
    fmt = args.format
    if fmt == "auto":
        fmt = "rich" if console.is_terminal else "plain"
    rows = RichRows(console) if fmt == "rich" else PlainRows(console)
    shown = 0
    held: list = []  # (offset, print) rows not yet vouched for by a checksum record

    def emit(offset: int, out, cells) -> None:
        held.append((offset, out, cells))
        if not records.reader.checksummed:  # nothing will vouch: print as read
            release(len(held))

    def release(count: int) -> None:
        for _, out, cells in held[:count]:
            out(cells)
        del held[:count]

    last = -1
    families: dict[int, str] = {}  # queue id -> PM4 register family, from queue records
    records = Records(args.file)
    try:
        for rec in records:
            if held:  # the rows a checksum record has vouched for since (a prefix)
                release(sum(1 for h in held if records.verified(h[0])))
            if isinstance(rec, trace.KernelSymbolRecord):
                symbols.add(rec)
                continue
            if isinstance(rec, trace.QueueCreatedRecord):  # its agent names the PM4 registers
                try:
                    families[rec.queue_id] = pm4.family_of(str(rec.info.get("agent", "")))
                except ValueError:
                    pass
                continue
            if isinstance(rec, trace.VulkanSubmissionRecord) and filters.accept_vulkan(rec):
                t_us = filters.micros(rec.time_ns)
                text = _payload_text(rec.payload)
                if args.raw:
                    emit(rec.offset, rows.text, f"+{t_us:.3f}us vulkan_submission {text}")
                else:
                    emit(rec.offset, rows.add, [f"{t_us:.3f}", str(rec.payload.get("queue", "-")),
                                                "-", "vulkan_submission", "", "", "", "", text])
                shown += 1
                last = rec.offset
                if args.limit is not None and shown >= args.limit:
                    break
                continue
            if not isinstance(rec, trace.PacketRecord):
                continue
            fields = decode(rec.raw)
            kernel = kernel_of(rec, fields, symbols)
            if fields["kind"] in DISPATCH_KINDS and rec.symbol:
                symbols.learn(fields["kernel_object"], rec.symbol)
            if not filters.accept(rec, fields, kernel):
                continue
            t_us = filters.micros(rec.reserve_ns)
            if args.raw:
                lines = [f"+{t_us:.3f}us queue {rec.queue_id} id {rec.packet_id} "
                         f"{type_name(fields)}" + (f" {kernel}" if kernel else "")
                         + f" (record at byte offset {rec.offset})", "  packet:"]
                lines += hexdump(rec.raw, "    ")
                if rec.kernarg is not None:
                    lines.append(f"  kernarg ({len(rec.kernarg)} bytes):")
                    lines += hexdump(rec.kernarg, "    ")
                emit(rec.offset, rows.text, "\n".join(lines))
            else:
                emit(rec.offset, rows.add, [
                    f"{t_us:.3f}", str(rec.queue_id), str(rec.packet_id), type_name(fields),
                    "B" if fields["barrier"] else "-",
                    f"{scope_name(fields['acquire_fence_scope'])}/"
                    f"{scope_name(fields['release_fence_scope'])}",
                    kernel or "", shape(fields),
                    details(rec, fields, symbols, families.get(rec.queue_id, "gfx11"))])
            shown += 1
            last = rec.offset
            if args.limit is not None and shown >= args.limit:
                break
        verified = records.finish(last) if last >= 0 else True
        release(len(held))
        if not verified:
            say_unverified(args.file, f"the {shown} row(s) shown were")
    finally:
        records.close()
        rows.flush()  # the verified rows before a format error too
    if shown == 0:
        rows.text("no packets match")
    return 0
