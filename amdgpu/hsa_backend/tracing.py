"""What the HSA driver adds to a packet trace (issue 8).

Packet records alone carry raw packets. The driver adds, while a sink is active
(`packets.trace.active_sink()`, looked at once per submit):
- a KERNEL_SYMBOL record per kernel (kernel_object -> name and kernarg layout, the layout
  with each argument's name, kind, offset, size and type_name), once per kernel per sink:
  at load, and again before the first traced submit that uses a kernel the sink has not
  been told about (a sink installed after the load), so packet-trace names replayed
  packets from their kernel_object and decodes kernarg bytes by name and type;
- on immediate dispatches, the kernarg block bytes and the kernel name in the packet
  record itself (`QueueLane.publish(pkt, kernarg=..., symbol=...)`: the lane's
  `submit_timed`, then `sink.record_packet`);
- on command buffer replays, a BLOCK_TEMPLATE record per segment (once per sink:
  `announce_template`) and one BLOCK_REPLAY record per submit (written from
  `QueueLane.publish_block(..., record=...)`, through packets.ring.record_published): the
  replay costs a small fixed record, not a copy of the packet block, and readers rebuild
  each packet and its kernarg values.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import packets


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


_template_ids = itertools.count(1)  # unique in the process: one id space per trace file
_template_lock = threading.Lock()  # first traced submits racing on one segment: one template


def announce_template(sink: Any, seg: Any) -> int:
    """Tell `sink` about command buffer segment `seg`: its kernels (KERNEL_SYMBOL, see
    `announce`) and its BLOCK_TEMPLATE record, unless this sink was told before; returns
    the template id. The template is built once per segment: the block with its headers,
    each dispatch row's kernarg offset and size, the signal row, the kernarg template and
    its binding patch sites (what `_submit` patches). The caller's fast check reads
    `seg.trace_sink`, which is set only once the template is in the sink."""
    with _template_lock:
        return _announce_template_locked(sink, seg)


def _announce_template_locked(sink: Any, seg: Any) -> int:
    told = seg.trace_sinks
    if told is None:
        told = seg.trace_sinks = weakref.WeakSet()
    template = seg.trace_template
    if template is None:
        template = seg.trace_template = packets.trace.BlockTemplateRecord.build(
            next(_template_ids),
            seg.full_block(),
            kernarg_offsets=seg.kernarg_offsets,
            kernarg_sizes=seg.kernarg_sizes,
            signal_row=seg.last_row,
            kernarg=seg.template.tobytes(),
            site_offsets=seg.site_words * 8,
            site_bindings=seg.site_binding,
            site_addends=seg.site_offset,
        )
    try:
        known = sink in told
    except TypeError:  # a sink without weak references: tell it every time
        known = False
    if not known:
        announce_all(sink, seg.kernels)
        sink.block_template(template)
        try:
            told.add(sink)
        except TypeError:
            pass
    try:
        seg.trace_sink = weakref.ref(sink)  # the fast check of the next submit
    except TypeError:
        seg.trace_sink = None
    return template.template_id
