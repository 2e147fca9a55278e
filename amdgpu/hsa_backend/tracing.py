"""What the HSA driver adds to a packet trace (issue 8).

Packet records alone carry raw packets. The driver adds, while a sink is active
(`packets.trace.active_sink()`, looked at once per submit):
- a KERNEL_SYMBOL record per kernel (kernel_object -> name and kernarg layout, the layout
  with each argument's name, kind, offset, size and type_name), once per kernel per sink:
  at load, and again before the first traced submit that uses a kernel the sink has not
  been told about (a sink installed after the load), so packet-trace names replayed
  packets from their kernel_object and decodes kernarg bytes by name and type;
- on immediate dispatches, the kernarg block bytes and the kernel name in the packet
  record itself (`Ring.publish(pkt, kernarg=..., symbol=...)`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any


def announce(sink: Any, kernel: Any, force: bool = False) -> None:
    """Emit `kernel`'s KERNEL_SYMBOL record to `sink` unless it was the last sink told
    (`force`: emit anyway, e.g. at load, where a new executable may reuse an address)."""
    ref = kernel.trace_announced
    if not force and ref is not None and ref() is sink:
        return
    sink.kernel_symbol(kernel.kernel_object, kernel.name, kernel.layout.describe())
    try:
        kernel.trace_announced = weakref.ref(sink)
    except TypeError:  # a sink without weak references: remember nothing, announce again
        kernel.trace_announced = None


def announce_all(sink: Any, kernels: Iterable[Any], force: bool = False) -> None:
    for k in kernels:
        announce(sink, k, force)
