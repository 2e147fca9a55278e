"""Sinks: the TraceSink protocol rings and the driver call, MemorySink (records kept in a
list), and the active sink (`set_sink`, `active_sink`, AMDGPU_TRACE)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Protocol

import numpy as np

from ground.errors import AmdgpuError, TraceFormatError

from .format import Clock, now_ns
from .records import (
    BlockReplayRecord,
    BlockTemplateRecord,
    CompletionRecord,
    KernelSymbolRecord,
    PacketRecord,
    QueueCreatedRecord,
    QueueErrorRecord,
    VulkanSubmissionRecord,
)
from .writer import TraceWriter


class TraceSink(Protocol):
    """What a ring and the driver call. Timestamps are host `time.monotonic_ns()`."""

    def record_packet(self, queue_id: int, packet_id: int, reserve_ns: int, publish_ns: int,
                      doorbell_ns: int, raw: bytes, kernarg: bytes | None = None,
                      symbol: str | None = None) -> None: ...

    def record_packets(self, queue_id: int, first_id: int, reserve_ns: int, publish_ns: int,
                       doorbell_ns: int, block: np.ndarray) -> None: ...

    # Optional (a sink without them gets replays as record_packets): a packet block that
    # is published again and again, once, then per publish only what changed.
    def block_template(self, template: BlockTemplateRecord) -> None: ...

    def block_replay(self, queue_id: int, first_id: int, reserve_ns: int, publish_ns: int,
                     doorbell_ns: int, template_id: int, kernarg_base: int, signal: int,
                     bindings: tuple) -> None: ...

    def queue_created(self, queue_id: int, info: dict) -> None: ...

    def kernel_symbol(self, kernel_object: int, name: str, layout: object = None) -> None: ...

    def completion(self, queue_id: int, packet_id: int, start_ns: int, end_ns: int,
                   clock: int = Clock.HOST_NS) -> None: ...

    def vulkan_submission(self, payload: dict) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class MemorySink:
    """A sink that keeps record objects in a list (tests, tools, in-process inspection)."""

    def __init__(self) -> None:
        self.records: list = []
        self.templates: dict[int, BlockTemplateRecord] = {}
        self._lock = threading.Lock()

    def record_packet(self, queue_id, packet_id, reserve_ns, publish_ns, doorbell_ns, raw,
                      kernarg=None, symbol=None) -> None:
        rec = PacketRecord(queue_id, packet_id, reserve_ns, publish_ns, doorbell_ns,
                           bytes(raw), None if kernarg is None else bytes(kernarg), symbol)
        with self._lock:
            self.records.append(rec)

    def record_packets(self, queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                       block) -> None:
        raw = np.ascontiguousarray(block).view(np.uint8).reshape(-1, 64)
        recs = [PacketRecord(queue_id, first_id + i, reserve_ns, publish_ns, doorbell_ns,
                             raw[i].tobytes()) for i in range(raw.shape[0])]
        with self._lock:
            self.records.extend(recs)

    def block_template(self, template: BlockTemplateRecord) -> None:
        """Kept (as read_trace yields it), and used to expand later replays."""
        with self._lock:
            self.templates[template.template_id] = template
            self.records.append(template)

    def block_replay(self, queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                     template_id, kernarg_base, signal, bindings) -> None:
        """Expanded at once into the packet records it stands for (as read_trace does)."""
        template = self.templates.get(template_id)
        if template is None:
            raise TraceFormatError(f"block replay of template {template_id}, which this sink "
                                   "was not given: call block_template first")
        replay = BlockReplayRecord(queue_id, first_id, reserve_ns, publish_ns, doorbell_ns,
                                   template_id, kernarg_base, signal, tuple(bindings))
        recs = template.packet_records(replay)
        with self._lock:
            self.records.extend(recs)

    def queue_created(self, queue_id: int, info: dict | None = None) -> None:
        self._add(QueueCreatedRecord(queue_id, now_ns(), dict(info or {})))

    def kernel_symbol(self, kernel_object: int, name: str, layout: object = None) -> None:
        self._add(KernelSymbolRecord(kernel_object, name, layout))

    def completion(self, queue_id, packet_id, start_ns, end_ns, clock=Clock.HOST_NS) -> None:
        self._add(CompletionRecord(queue_id, packet_id, start_ns, end_ns, clock))

    def vulkan_submission(self, payload: dict) -> None:
        self._add(VulkanSubmissionRecord(now_ns(), dict(payload)))

    def queue_error(self, queue_id: int, packet_id: int, info: dict) -> None:
        self._add(QueueErrorRecord(queue_id, packet_id, now_ns(), dict(info)))

    def _add(self, rec) -> None:
        with self._lock:
            self.records.append(rec)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# --- the active sink ---------------------------------------------------------------------


class _TraceState:
    """Module state read by rings on every publish: `STATE.sink` is the one check."""

    __slots__ = ("sink", "env_checked")

    def __init__(self) -> None:
        self.sink: TraceSink | None = None
        self.env_checked = False


STATE = _TraceState()
_env_lock = threading.Lock()
_watchers: list[Callable[[bool], None]] = []


def watch_sink(callback: Callable[[bool], None]) -> None:
    """Have `callback(active)` called now and whenever a sink is installed or removed (a
    publisher that picks its traced form when tracing starts, not on each publish: the
    HSA backend's compiled lanes)."""
    _watchers.append(callback)
    callback(STATE.sink is not None)


def _changed() -> None:
    active = STATE.sink is not None
    for callback in _watchers:
        callback(active)


def set_sink(sink: TraceSink | None) -> TraceSink | None:
    """Install `sink` (None turns tracing off); returns the previous sink, not closed."""
    previous = STATE.sink
    STATE.env_checked = True  # an explicit choice wins over AMDGPU_TRACE
    STATE.sink = sink
    _changed()
    return previous


def active_sink() -> TraceSink | None:
    """The sink packets go to, creating the AMDGPU_TRACE writer on first use."""
    if not STATE.env_checked:
        _sink_from_env()
    return STATE.sink


def _sink_from_env() -> None:
    with _env_lock:
        if STATE.env_checked:
            return
        path = os.environ.get("AMDGPU_TRACE")
        if path:
            try:
                STATE.sink = TraceWriter(path)
                _changed()
            except OSError as e:
                STATE.env_checked = True
                raise AmdgpuError(
                    f"AMDGPU_TRACE={path}: cannot create the trace file ({e.strerror}); "
                    "fix the path or unset AMDGPU_TRACE"
                ) from None
        STATE.env_checked = True

