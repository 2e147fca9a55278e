"""`packet-trace diff A B`: packet-by-packet differences between two traces (two replays of
one command buffer, two runs of one program). Packets are paired by position; timestamps are
never compared, packet ids only with --ids. For a dispatch with kernarg bytes in both
traces, arguments are compared by name through each trace's KERNEL_SYMBOL layout; for a
PM4_IB packet with its indirect buffer recorded in both, the buffers are compared packet by
packet (the lines `packet-trace show` prints, dispatches decoded).

Exit status like diff(1): 0 identical, 1 different, 2 trouble.
"""

from __future__ import annotations

import itertools

from rich.console import Console
from rich.markup import escape

from ground.errors import PacketError
from packets import DISPATCH_KINDS, decode, pm4

from .model import SymbolTable, decode_kernargs, packet_records, type_name

# Fields of a decoded packet that are not compared one by one (derived from others).
_DERIVED = {"header", "kind", "setup", "raw"}
PM4_LINES_SHOWN = 4  # differing PM4 lines listed per packet pair


def pm4_changes(ra, rb) -> list[tuple[str, str, str]]:
    """(where, old line, new line) for the PM4 buffer lines that differ."""
    if ra.kernarg == rb.kernarg:
        return []
    if ra.kernarg is None or rb.kernarg is None:
        return [("pm4 buffer", "absent" if ra.kernarg is None else "recorded",
                 "absent" if rb.kernarg is None else "recorded")]

    def lines(raw: bytes) -> list[str]:
        words = [int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw) - 3, 4)]
        try:
            return pm4.describe_stream(words)
        except PacketError as exc:
            return [f"malformed: {exc}"]

    la, lb = lines(ra.kernarg), lines(rb.kernarg)
    out = [(f"pm4 line {i}", x or "absent", y or "absent")
           for i, (x, y) in enumerate(itertools.zip_longest(la, lb)) if x != y]
    if len(out) > PM4_LINES_SHOWN:
        out = out[:PM4_LINES_SHOWN] + [("pm4", f"{len(out) - PM4_LINES_SHOWN} more lines",
                                        "differ")]
    return out


def field_changes(a: dict, b: dict, ignore: set[str]) -> list[tuple[str, object, object]]:
    changes = []
    for key in dict.fromkeys([*a, *b]):
        if key in _DERIVED or key in ignore:
            continue
        va, vb = a.get(key), b.get(key)
        if va != vb:
            changes.append((key, va, vb))
    return changes


def kernarg_changes(ra, fa, sa: SymbolTable, rb, fb, sb: SymbolTable,
                    ignore: set[str]) -> list[tuple[str, str, str]]:
    """(name, old text, new text) for each kernarg that differs."""
    if ra.kernarg is None and rb.kernarg is None:
        return []
    if (ra.kernarg is None) != (rb.kernarg is None):
        return [("kernarg bytes", "absent" if ra.kernarg is None else "recorded",
                 "absent" if rb.kernarg is None else "recorded")]
    if ra.kernarg == rb.kernarg:
        return []
    la = sa.layouts.get(fa.get("kernel_object"))
    lb = sb.layouts.get(fb.get("kernel_object"))
    if la and lb:
        va = {v.spec.name: v for v in decode_kernargs(la, ra.kernarg)}
        vb = {v.spec.name: v for v in decode_kernargs(lb, rb.kernarg)}
        out = []
        for name in dict.fromkeys([*va, *vb]):
            if f"kernarg.{name}" in ignore or name in ignore:
                continue
            x, y = va.get(name), vb.get(name)
            if x is None or y is None or x.value != y.value:
                either = x if x is not None else y
                hidden = either is not None and either.hidden
                label = f"kernarg {name}" + (" [hidden]" if hidden else "")
                out.append((label, x.text if x else "absent", y.text if y else "absent"))
        if out or len(ra.kernarg) == len(rb.kernarg):
            return out  # bytes outside every argument (padding) are not reported
    # No layout on one side: name the differing byte ranges.
    n = max(len(ra.kernarg), len(rb.kernarg))
    pa, pb = ra.kernarg.ljust(n, b"\0"), rb.kernarg.ljust(n, b"\0")
    diff = [i for i in range(n) if pa[i] != pb[i]]
    return [("kernarg bytes", f"{len(ra.kernarg)} B", f"{len(rb.kernarg)} B, differing at "
             f"offsets {diff[0]}..{diff[-1]}")]


_HEX_WORDS = ("signal", "address", "object", "mask", "arg")


def _show(key: str, value) -> str:
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int) and any(w in key for w in _HEX_WORDS):
        return f"0x{value & (2**64 - 1):x}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(key, v) for v in value) + "]"
    if hasattr(value, "name"):
        return value.name
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _is_dispatch(raw: bytes) -> bool:
    """A classic dispatch (type 2) or gfx1250's extended one (vendor type, AmdFormat 3)."""
    return raw[0] == 2 or (raw[0] == 0 and raw[2] == 3)


def _object(raw: bytes) -> int:
    return int.from_bytes(raw[32:40], "little")


def run(args, console: Console) -> int:
    ignore = {f.strip() for item in (args.ignore or ()) for f in item.split(",") if f.strip()}
    a_iter = packet_records(args.a)
    b_iter = packet_records(args.b)
    differing = 0
    compared = 0
    only_a = only_b = 0
    printed = 0
    console.print(f"--- {escape(str(args.a))}\n+++ {escape(str(args.b))}", highlight=False)
    for pair in itertools.zip_longest(a_iter, b_iter):
        first, second = pair
        if first is None:
            only_b += 1
            continue
        if second is None:
            only_a += 1
            continue
        (ra, sa), (rb, sb) = first, second
        compared += 1
        if (ra.raw == rb.raw and ra.kernarg == rb.kernarg and ra.queue_id == rb.queue_id
                and (ra.symbol == rb.symbol or not _is_dispatch(ra.raw))
                and (not args.ids or ra.packet_id == rb.packet_id)):
            if not _is_dispatch(ra.raw) or (sa.names.get(_object(ra.raw))
                                          == sb.names.get(_object(rb.raw))):
                continue  # the same bytes (and kernel name): nothing to decode
        fa, fb = decode(ra.raw), decode(rb.raw)
        changes = []
        if ra.queue_id != rb.queue_id and "queue_id" not in ignore:
            changes.append(("queue_id", ra.queue_id, rb.queue_id))
        if args.ids and ra.packet_id != rb.packet_id:
            changes.append(("packet_id", ra.packet_id, rb.packet_id))
        if type_name(fa) != type_name(fb):
            changes.append(("type", type_name(fa), type_name(fb)))
        else:
            changes += field_changes(fa, fb, ignore)
            if fa["kind"] in DISPATCH_KINDS:
                name_a = ra.symbol or sa.name(fa["kernel_object"])
                name_b = rb.symbol or sb.name(fb["kernel_object"])
                if name_a != name_b and "kernel" not in ignore:
                    changes.append(("kernel", name_a, name_b))
                changes += kernarg_changes(ra, fa, sa, rb, fb, sb, ignore)
            elif fa["kind"] == "pm4_ib" and "pm4" not in ignore:
                changes += pm4_changes(ra, rb)
        if not changes:
            continue
        differing += 1
        if printed < args.max:
            printed += 1
            kernel = (" " + (ra.symbol or sa.name(fa["kernel_object"]))
                      if fa["kind"] in DISPATCH_KINDS else "")
            console.print(escape(
                f"packet {compared - 1}: queue {ra.queue_id} id {ra.packet_id} | "
                f"queue {rb.queue_id} id {rb.packet_id}: {type_name(fa)}{kernel}"),
                highlight=False)
            for name, x, y in changes:
                console.print(escape(f"  {name}: {_show(name, x)} -> {_show(name, y)}"),
                              highlight=False)
    if differing > printed:
        console.print(f"... {differing - printed} more differing packet(s) (--max {args.max})")
    if only_a:
        console.print(f"{only_a} packet(s) only in {escape(str(args.a))}")
    if only_b:
        console.print(f"{only_b} packet(s) only in {escape(str(args.b))}")
    same = not differing and not only_a and not only_b
    console.print(f"{compared} packet pair(s) compared: "
                  + ("identical" if same else f"{differing} differ"), highlight=False)
    return 0 if same else 1
