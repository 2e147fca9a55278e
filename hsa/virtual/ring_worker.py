"""A thread that drives a ring engine from doorbells, as the hardware does: the kernel
driver's PM4 compute queues (hsa.virtual.pm4.Pm4Ring) and SDMA queues
(hsa.virtual.sdma.SdmaEngine) hand their engine to one of these.

    worker = RingWorker(SdmaEngine(...), name="sdma 0", on_error=report)
    worker.ring_doorbell(wptr)    # the value the driver wrote to the queue's doorbell: the
                                  # new write pointer (bytes for SDMA, dwords for PM4)
    worker.stop()                 # queue destroyed: wakes a wait in progress, joins

The thread starts on the first doorbell and runs `engine.process(value)` for the highest
value rung so far, then sleeps until the next one. A fault stops the worker: `error` holds
it and `on_error(error)` is called once; later doorbells are ignored (the ring stays
stopped, as a faulted hardware queue does until it is destroyed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ground.errors import HsaError, QueueError, without_frames
from ground.status import HSA_STATUS_ERROR_EXCEPTION
from hsa.virtual.pm4 import Pm4Stopped

log = logging.getLogger(__name__)


class RingWorker:
    """Runs `engine.process(wptr)` on its own thread for each doorbell."""

    def __init__(self, engine: Any, name: str,
                 on_error: Callable[[HsaError], None] | None = None) -> None:
        self.engine = engine
        self.name = name
        self.on_error = on_error
        self.error: HsaError | None = None
        self._cv = threading.Condition()
        self._bell: int | None = None  # highest value rung and not yet processed
        self._done = -1  # the last value processed completely
        self._stopping = False
        self._thread: threading.Thread | None = None
        engine.stop = self._should_stop  # waits inside a packet give up when stopping

    def _should_stop(self) -> bool:
        return self._stopping

    def ring_doorbell(self, value: int) -> None:
        value = int(value)
        with self._cv:
            if self._stopping or self.error is not None:
                return
            self._bell = value if self._bell is None else max(self._bell, value)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every value rung so far is processed (or the worker faulted/stopped)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._bell is not None and self.error is None and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, join_timeout_s: float = 10.0) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(join_timeout_s)
            if t.is_alive():
                log.warning("%s: still busy after %.0f s (a long dispatch?); left to finish as "
                            "a daemon thread", self.name, join_timeout_s)

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._bell is None and not self._stopping:
                    self._cv.wait()
                if self._stopping or self._bell is None:
                    return
                target: int = self._bell
            try:
                self.engine.process(target)
            except Pm4Stopped:
                return
            except HsaError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # a bug in an engine: still fail the queue, with a line
                log.exception("%s: internal error in the engine", self.name)
                error = QueueError(HSA_STATUS_ERROR_EXCEPTION,
                                   f"{self.name}: engine crashed: {type(exc).__name__}: {exc}; "
                                   "report this as a bug in hsa.virtual")
                error.__cause__ = exc
                self._fail(error)
                return
            with self._cv:
                self._done = target
                if self._bell == target:
                    self._bell = None
                self._cv.notify_all()

    def _fail(self, exc: HsaError) -> None:
        with self._cv:
            self.error = without_frames(exc)  # its frames hold this worker: a cycle
            self._cv.notify_all()
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:
                log.exception("%s: the error callback raised", self.name)
