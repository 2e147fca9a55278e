"""The copy engine of the virtual AMD system (hsa_amd_memory_async_copy).

Like an SDMA engine it runs copies in submission order on one worker thread, started on
the first copy: each waits for its dependency signals to reach 0, copies through the memory
map, then decrements its completion signal. Ranges and agent access are checked when the
copy is submitted (as ROCr does), so a bad copy fails in the caller, not later.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ground.errors import HsaError, without_frames

if TYPE_CHECKING:
    from hsa.virtual.memory import MemoryMap
    from hsa.virtual.signals import SignalTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Copy:
    dst: int
    src: int
    size: int
    deps: tuple[int, ...]
    completion: int


class CopyEngine:
    def __init__(self, signals: SignalTable, memory: MemoryMap) -> None:
        """`signals`: the table its dependencies and completions live in; `memory`: the
        memory it copies within."""
        self._signals = signals
        self._memory = memory
        self._cv = self._signals_condition()
        self._pending: collections.deque[_Copy] = collections.deque()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.failures: list[BaseException] = []

    def _signals_condition(self) -> threading.Condition:
        return threading.Condition(self._signals.lock)

    def submit(self, dst: int, src: int, size: int, deps: tuple[int, ...], completion: int
               ) -> None:
        with self._signals.lock:
            self._pending.append(_Copy(dst, src, size, deps, completion))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="virtual-copy-engine", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def stop(self) -> None:
        with self._signals.lock:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10.0)

    @property
    def idle(self) -> bool:
        return not self._pending

    def _run(self) -> None:
        signals = self._signals
        while True:
            with signals.lock:
                while not self._stop and not self._pending:
                    self._cv.wait()
                if self._stop:
                    return
                job = self._pending[0]
            live = [d for d in job.deps if d]
            try:
                if live:
                    done = signals.wait_until(
                        live,
                        lambda values: True if all(v == 0 for v in values) else None,
                        None,
                        call="hsa_amd_memory_async_copy",
                        describe=lambda v: "",
                        cv=self._cv,
                        stop=lambda: self._stop,
                    )
                    if done is None:
                        return
                memory = self._memory
                if job.size:
                    memory.view(job.dst, job.size)[:] = memory.view(job.src, job.size)
            except HsaError as exc:  # a dep or buffer was destroyed under the copy
                log.error("async copy 0x%x <- 0x%x failed: %s", job.dst, job.src, exc)
                self.failures.append(without_frames(exc))
                if job.completion:
                    signals.annotate([job.completion], f"async copy failed: {exc}")
                with signals.lock:
                    self._pending.popleft()
                continue
            with signals.lock:
                self._pending.popleft()
            if job.completion:
                try:
                    signals.add(job.completion, -1)
                except HsaError as exc:
                    log.error("async copy completion signal: %s", exc)
                    self.failures.append(without_frames(exc))
