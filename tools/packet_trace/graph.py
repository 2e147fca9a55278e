"""`packet-trace graph`: the dependency graph of a trace as Graphviz DOT (SVG when `dot` is
installed).

Nodes are packets, clustered by queue. Edges: a solid arrow from the packet whose
completion_signal a barrier-AND/OR dep signal or barrier-value signal is, to the packet that
waits on it (labelled with the signal); a dashed "barrier" arrow from the previous packet of
the queue to a packet with the barrier bit (it waits for everything before it); an invisible
arrow otherwise (keeps the queue's order). Waited signals that no packet of the trace
completes become ellipse nodes. Written as the trace is read.
"""

from __future__ import annotations

import shutil
import subprocess

from rich.console import Console

from ground.errors import AmdgpuError
from packets import DISPATCH_KINDS, decode, trace

from .model import DependencyTracker, SymbolTable, type_name
from .output import atomic_text_file
from .verify import Records, say_unverified


def _node(key: tuple[int, int]) -> str:
    return f'"q{key[0]}_{key[1]}"'


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class DotWriter:
    def __init__(self, out) -> None:
        self.out = out
        self.symbols = SymbolTable()
        self.deps = DependencyTracker()
        self.previous: dict[int, tuple[int, int]] = {}  # queue -> last packet key
        self.external: set[int] = set()
        self.nodes = 0
        self.edges = 0
        self.dependency_edges = 0
        out.write("digraph packet_trace {\n  rankdir=TB;\n"
                  '  node [shape=box, fontname="monospace", fontsize=10];\n'
                  '  edge [fontname="monospace", fontsize=9];\n')

    def add(self, rec: trace.PacketRecord) -> None:
        fields = decode(rec.raw)
        key = (rec.queue_id, rec.packet_id)
        kind = type_name(fields)
        label = f"q{rec.queue_id} #{rec.packet_id}\\n{kind}"
        if fields["kind"] in DISPATCH_KINDS:
            if rec.symbol:
                self.symbols.learn(fields["kernel_object"], rec.symbol)
            name = rec.symbol or self.symbols.name(fields["kernel_object"])
            label += "\\n" + _quote(name)
        done = fields.get("completion_signal", 0)
        if done:
            label += f"\\nsignals 0x{done:x}"
        self.out.write(f'  subgraph "cluster_q{rec.queue_id}" {{ label="queue {rec.queue_id}"; '
                       f'{_node(key)} [label="{label}"]; }}\n')
        self.nodes += 1
        prev = self.previous.get(rec.queue_id)
        if prev is not None:
            if fields["barrier"]:
                self.out.write(f'  {_node(prev)} -> {_node(key)} [style=dashed, '
                               'color=gray40, label="barrier"];\n')
                self.edges += 1
            else:
                self.out.write(f"  {_node(prev)} -> {_node(key)} [style=invis];\n")
        self.previous[rec.queue_id] = key
        for edge, _ in self.deps.observe(key, fields):
            if edge.source is None:
                src = f'"signal_0x{edge.signal:x}"'
                if edge.signal not in self.external:
                    self.external.add(edge.signal)
                    self.out.write(f'  {src} [shape=ellipse, label="signal 0x{edge.signal:x}'
                                   '\\n(no producer in trace)"];\n')
            else:
                src = _node(edge.source)
            self.out.write(f'  {src} -> {_node(key)} [color=blue, '
                           f'label="{edge.kind} 0x{edge.signal:x}"];\n')
            self.edges += 1
            self.dependency_edges += 1

    def close(self) -> None:
        self.out.write("}\n")


def run(args, console: Console) -> int:
    dot_path = args.output or (str(args.file) + ".dot")
    count = 0
    with atomic_text_file(dot_path) as out:  # whole or not at all: no partial DOT file
        writer = DotWriter(out)
        last = -1
        with Records(args.file) as records:
            for rec in records:
                if isinstance(rec, trace.KernelSymbolRecord):
                    writer.symbols.add(rec)
                elif isinstance(rec, trace.PacketRecord):
                    writer.add(rec)
                    count += 1
                    last = rec.offset
                    if args.limit is not None and count >= args.limit:
                        break
            # --limit stopped early: the checksum record after the last node vouches for it
            verified = records.finish(last) if last >= 0 else True
        writer.close()
    if not verified:
        say_unverified(args.file, f"the {writer.nodes} packet node(s) written were")
    console.print(f"wrote {dot_path}: {writer.nodes} packet node(s), {writer.edges} edge(s), "
                  f"{writer.dependency_edges} dependency edge(s)", highlight=False)
    if args.svg:
        dot = shutil.which("dot")
        if dot is None:
            console.print("no SVG: Graphviz 'dot' is not installed (apt install graphviz)",
                          highlight=False)
        else:
            done = subprocess.run([dot, "-Tsvg", dot_path, "-o", args.svg],
                                  capture_output=True, text=True, errors="replace")
            if done.returncode != 0:
                why = (done.stderr.strip().splitlines() or ["no message"])[0]
                raise AmdgpuError(f"Graphviz dot failed on {dot_path}: {why}; "
                                  "check the --svg path, or open the DOT file instead")
            console.print(f"wrote {args.svg}", highlight=False)
    return 0
