"""The Lane's pure-Python form: where hotpath.c is not built (no gcc or no Python headers,
or AMDGPU_PYTHON_HOT_PATH=1), a QueueLane's submission is this object, with the compiled
Lane's methods over the packets library's own implementation of ROCr's protocol
(packets.Ring), a KernargRing, a threading.Lock and the timeline counter. Never used beside
the compiled Lane on one lane: QueueLane picks one of the two once. tests/test_hot_path.py
runs the same sequences through both and compares them."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

import packets
from amdgpu.hsa_backend.kernargs import KernargRing

_now = time.monotonic_ns
_LANES: weakref.WeakSet[PythonLane] = weakref.WeakSet()  # whose `watched` a sink change sets
_TRACED = [False]


def _sink_changed(active: bool) -> None:
    """packets.trace.watch_sink's callback: every lane's mode, set once per change."""
    _TRACED[0] = active
    for lane in list(_LANES):
        lane.watched = lane.timed or active


packets.trace.watch_sink(_sink_changed)


class PythonLane:
    """One lane's submission: `with lane as value:` takes the lock and gives the next
    timeline value, and moves the counter to it on a normal exit; `submit_block`,
    `submit_timed`, `submit_rows` and `publisher` publish; `allocate` takes kernarg blocks
    (call them under the lock). See hotpath.c's Lane for the contract."""

    native = 0  # the provider's callables (the compiled Lane may call the queue's natively)
    timed = False  # a DispatchTimer is on (set_timed)
    # a trace sink or a DispatchTimer is on (the timed and traced publishers): set when
    # either starts or stops (set_timed, _sink_changed), read by each dispatch
    watched = False

    def __init__(self, queue: Any, kernarg_address: int, kernarg_memory: np.ndarray,
                 completed: Callable[[], int], wait: Callable[[int, float], None]):
        q = queue
        self.ring = packets.Ring(q.ring, q.size, q.load_write_index, q.add_write_index,
                                 q.load_read_index, q.doorbell, queue_id=q.id)
        self.kernargs = KernargRing(kernarg_address, kernarg_memory, completed, wait)
        self.capacity = self.kernargs.capacity
        self.lock = threading.Lock()
        self._submitted = 0
        self._view = memoryview(kernarg_memory)
        self._base = int(kernarg_address)
        self.allocate = self.kernargs.allocate
        self.reclaim = self.kernargs.reclaim
        self.submit_rows = self.ring.publish_rows
        self.watched = _TRACED[0]
        _LANES.add(self)

    # --- one submission's frame ----------------------------------------------------------
    def __enter__(self) -> int:
        self.lock.acquire()
        return self._submitted + 1

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is None:
            self._submitted += 1
        self.lock.release()

    def set_timed(self, flag: bool) -> None:
        """A DispatchTimer started (True) or stopped on the lane's device."""
        self.timed = bool(flag)
        self.watched = self.timed or _TRACED[0]

    @property
    def mode(self) -> str:
        return "traced" if _TRACED[0] else "timed" if self.timed else "plain"

    @property
    def submitted(self) -> int:
        """The timeline value of the latest submission."""
        return self._submitted

    @property
    def doorbells(self) -> int:
        return self.ring.doorbells

    @property
    def hint(self) -> int:
        return self.ring.hint

    @property
    def kernarg_head(self) -> int:
        return self.kernargs.head

    @property
    def in_use(self) -> int:
        return self.kernargs.in_use

    def kernarg_blocks(self) -> list[tuple[int, int]]:
        return self.kernargs.blocks()

    # --- publishing ----------------------------------------------------------------------
    def submit_block(self, block: Any, first_header: int | None = None,
                     headers: Any = None) -> int:
        """Ready packets (Ring.publish_many), a kept block with its first header apart
        (publish_ready) or with every header apart (publish_many(block, headers))."""
        if first_header is not None and headers is None:
            return self.ring.publish_ready(block, first_header)
        return self.ring.publish_many(block, headers)

    def submit_timed(self, block: Any, first_header: int | None = None,
                     headers: Any = None) -> tuple[int, int, int, int]:
        """submit_block with its reserve, publish and doorbell times, unrecorded."""
        if first_header is not None and headers is None:
            t0 = _now()
            idx = self.ring.publish_ready(block, first_header)
            t1 = _now()
            return idx, t0, t1, t1
        return self.ring.publish_timed(block, headers)

    def publisher(self, size: int, words: memoryview, header: int) -> Callable[[bytes], int]:
        """One launch's immediate dispatch: publish(data) -> timeline value (the lock, the
        value, a kernarg block with `data`, the template `words` patched with its address
        and published with `header`, the counter)."""
        body = words.cast("B")[4:]
        lock, allocate, view, base = self.lock, self.kernargs.allocate, self._view, self._base
        publish_parts = self.ring.publish_parts

        def publish(data: bytes) -> int:
            with lock:
                value = self._submitted + 1
                off = allocate(size, value)
                view[off : off + size] = data  # the whole block in one store
                words[5] = base + off  # kernarg_address, in the launch's packet template
                publish_parts(body, header)
                self._submitted = value
            return value

        return publish
