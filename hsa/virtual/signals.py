"""Signals of the virtual AMD system: 64-byte amd_signal_t objects in the memory map.

A signal handle is the address of its amd_signal_t (kind i64@0, value i64@8, start_ts@32,
end_ts@40, queue_ptr@48), as in ROCr, so a handle written into a packet is the number the
packet processor looks up. Signals live in 4 KiB slabs of 64 slots; freed slots go to the
back of a FIFO so that a destroyed handle stays invalid for a while (a use-after-destroy
shows up as INVALID_SIGNAL instead of silently touching a new signal).

Every operation takes one table lock, so read-modify-write ops are atomic. Waiters sleep on
a per-thread `threading.Condition` bound to that lock and registered on each signal they
watch; a change notifies only the waiters of that signal.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ground.errors import HsaError, SignalTimeout
from ground.status import (
    HSA_STATUS_ERROR,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_INVALID_SIGNAL,
)
from hsa.provider import SignalCondition
from hsa.virtual.memory import MemoryMap

SIGNAL_BYTES = 64
SLAB_BYTES = 4096
KIND_USER = 1
KIND_DOORBELL = -1
# int64 word indices inside one amd_signal_t
W_KIND, W_VALUE, W_START_TS, W_END_TS, W_QUEUE_PTR = 0, 1, 4, 5, 6
# The bytes of a watcher's flag word (SignalTable.watch) that the table keeps: non-zero
# while the signal has waiters, and while it has a note.
FLAG_WAITERS, FLAG_NOTE = 0, 1

_COND_TEXT = {0: "==", 1: "!=", 2: "<", 3: ">="}
_ZERO_SIGNAL = memoryview(bytes(SIGNAL_BYTES)).cast("q")


def condition_holds(value: int, condition: int, compare: int) -> bool:
    if condition == 0:
        return value == compare
    if condition == 1:
        return value != compare
    if condition == 2:
        return value < compare
    if condition == 3:
        return value >= compare
    raise HsaError(HSA_STATUS_ERROR_INVALID_ARGUMENT, f"unknown signal condition {condition}")


@dataclass(eq=False)
class _Signal:
    handle: int
    words: memoryview  # the slab as int64 words
    base: int  # word index of this signal in `words`
    waiters: list[threading.Condition] = field(default_factory=list)
    on_store: Callable[[int], None] | None = None  # doorbell hook, called under the lock
    note: str = ""  # why a waiter may never be satisfied (set when a queue fails)
    flags: bytearray | None = None  # a watcher's flag word (SignalTable.watch)

    @property
    def value(self) -> int:
        return int(self.words[self.base + W_VALUE])


class SignalTable:
    """All signals of one virtual system."""

    def __init__(self, memory: MemoryMap, owner: int, pool: int) -> None:
        self._memory = memory
        self._owner = owner
        self._pool = pool
        self.lock = threading.Lock()
        self._signals: dict[int, _Signal] = {}
        self._free: collections.deque[tuple[memoryview, int, int]] = collections.deque()
        self._slabs: list[int] = []
        self._local = threading.local()

    # --- lifetime ------------------------------------------------------------------------
    def create(self, initial_value: int, kind: int = KIND_USER) -> int:
        with self.lock:
            if not self._free:
                self._new_slab()
            words, base, handle = self._free.popleft()
            words[base : base + SIGNAL_BYTES // 8] = _ZERO_SIGNAL
            words[base + W_KIND] = kind
            words[base + W_VALUE] = _i64(initial_value)
            self._signals[handle] = _Signal(handle, words, base)
            return handle

    def destroy(self, handle: int) -> None:
        with self.lock:
            sig = self._signals.pop(handle, None)
            if sig is None:
                raise _invalid(handle, "hsa_signal_destroy")
            sig.words[sig.base + W_KIND] = 0
            for cv in sig.waiters:  # a waiter on a destroyed signal finds it gone
                cv.notify()
            self._free.append((sig.words, sig.base, handle))

    def _new_slab(self) -> None:
        alloc = self._memory.allocate(
            SLAB_BYTES, owner=self._owner, pool=self._pool, accessible_by_all=True
        )
        self._slabs.append(alloc.base)
        # memoryview, not numpy: scalar reads and writes of Python ints are ~5x cheaper
        words = memoryview(alloc.data).cast("q")
        per = SIGNAL_BYTES // 8
        for i in range(SLAB_BYTES // SIGNAL_BYTES):
            self._free.append((words, i * per, alloc.base + i * SIGNAL_BYTES))

    def release_all(self) -> None:
        with self.lock:
            self.wake_all_locked()
            self._signals.clear()
            self._free.clear()
            for base in self._slabs:
                self._memory.free(base)
            self._slabs.clear()

    def __len__(self) -> int:
        return len(self._signals)

    def exists(self, handle: int) -> bool:
        return handle in self._signals

    def signal(self, handle: int) -> _Signal:
        """The live signal record behind `handle` (its `words`, `base`, `waiters`): for a
        caller that writes the value word itself on a hot path (a queue's doorbell), which
        must then fall back to `store` while the signal has waiters or a note (`watch`
        keeps a flag word that says so)."""
        return self._get(handle, "amd_signal_t")

    def watch(self, handle: int, flags: bytearray) -> None:
        """Keep byte FLAG_WAITERS of `flags` non-zero while the signal has waiters and byte
        FLAG_NOTE while it has a note, from now on (set under the table lock at every
        change): a hot path that stores the value word itself reads both in one load."""
        with self.lock:
            sig = self._get(handle, "amd_signal_t")
            sig.flags = flags
            _mark(sig)

    # --- plain operations -----------------------------------------------------------------
    def _get(self, handle: int, call: str) -> _Signal:
        sig = self._signals.get(handle)
        if sig is None:
            raise _invalid(handle, call)
        return sig

    def load(self, handle: int) -> int:
        sig = self._signals.get(handle)
        if sig is None:
            raise _invalid(handle, "hsa_signal_load")
        return int(sig.words[sig.base + W_VALUE])

    def store(self, handle: int, value: int) -> None:
        with self.lock:
            sig = self._get(handle, "hsa_signal_store")
            sig.words[sig.base + W_VALUE] = _i64(value)
            if sig.note:
                sig.note = ""  # a store re-arms the signal: an old queue failure no longer applies
                _mark(sig)
            self._changed(sig)

    def add(self, handle: int, value: int) -> int:
        """Atomically add; returns the new value."""
        with self.lock:
            sig = self._get(handle, "hsa_signal_add")
            new = _i64(int(sig.words[sig.base + W_VALUE]) + value)
            sig.words[sig.base + W_VALUE] = new
            self._changed(sig)
            return new

    def exchange(self, handle: int, value: int) -> int:
        with self.lock:
            sig = self._get(handle, "hsa_signal_exchange")
            old = int(sig.words[sig.base + W_VALUE])
            sig.words[sig.base + W_VALUE] = _i64(value)
            self._changed(sig)
            return old

    def cas(self, handle: int, expected: int, value: int) -> int:
        with self.lock:
            sig = self._get(handle, "hsa_signal_cas")
            old = int(sig.words[sig.base + W_VALUE])
            if old == expected:
                sig.words[sig.base + W_VALUE] = _i64(value)
                self._changed(sig)
            return old

    def set_doorbell_hook(self, handle: int, hook: Callable[[int], None] | None) -> None:
        with self.lock:
            self._get(handle, "doorbell").on_store = hook

    def set_word(self, handle: int, word: int, value: int) -> None:
        """Write one raw int64 word of the amd_signal_t (timestamps, queue_ptr)."""
        with self.lock:
            sig = self._get(handle, "amd_signal_t")
            sig.words[sig.base + word] = _i64(value)

    def get_word(self, handle: int, word: int) -> int:
        sig = self._get(handle, "amd_signal_t")
        return int(sig.words[sig.base + word])

    def annotate(self, handles: Sequence[int], note: str) -> None:
        """Attach a reason that waits on these signals may never finish (a failed queue);
        a SignalTimeout on them quotes it."""
        with self.lock:
            for h in handles:
                sig = self._signals.get(h)
                if sig is not None:
                    sig.note = note
                    _mark(sig)

    def _changed(self, sig: _Signal) -> None:
        if sig.on_store is not None:
            sig.on_store(int(sig.words[sig.base + W_VALUE]))
        for cv in sig.waiters:
            cv.notify()

    def wake_all_locked(self) -> None:
        for sig in self._signals.values():
            for cv in sig.waiters:
                cv.notify()

    def wake_all(self) -> None:
        with self.lock:
            self.wake_all_locked()

    # --- waiting -------------------------------------------------------------------------
    def waiter(self) -> threading.Condition:
        """This thread's condition variable (bound to the table lock)."""
        cv = getattr(self._local, "cv", None)
        if cv is None:
            cv = self._local.cv = threading.Condition(self.lock)
        return cv

    def wait_until(
        self,
        handles: Sequence[int],
        test: Callable[[list[int]], object],
        timeout_s: float | None,
        *,
        call: str,
        describe: Callable[[list[int]], str],
        cv: threading.Condition | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> object:
        """Sleep until `test(values)` returns something other than None, and return it.

        Wakes when any of the signals changes, when the condition `cv` is notified (queue
        shutdown), or at the deadline (SignalTimeout). Returns None when `stop()` is true.
        A signal destroyed during the wait raises INVALID_SIGNAL.
        """
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        cv = cv or self.waiter()
        with self.lock:
            sigs = [self._get(h, call) for h in handles]
            for s in sigs:
                s.waiters.append(cv)
                _mark(s)
            try:
                while True:
                    for s in sigs:
                        if self._signals.get(s.handle) is not s:
                            raise _invalid(s.handle, call, "destroyed while being waited on")
                    values = [int(s.words[s.base + W_VALUE]) for s in sigs]
                    result = test(values)
                    if result is not None:
                        return result
                    if stop is not None and stop():
                        return None
                    if deadline is None:
                        cv.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        notes = "; ".join(sorted({s.note for s in sigs if s.note}))
                        raise SignalTimeout(
                            HSA_STATUS_ERROR,
                            f"{describe(values)} did not hold within {timeout_s:g} s"
                            + (f" ({notes})" if notes else "")
                            + "; check that the packet that signals it was published and "
                            "its queue is healthy, or wait longer",
                            call,
                        )
                    cv.wait(remaining)
            finally:
                for s in sigs:
                    try:
                        s.waiters.remove(cv)
                    except ValueError:
                        pass
                    _mark(s)

    def wait(
        self, handle: int, condition: int, compare: int, timeout_s: float | None
    ) -> int:
        """The host's hsa_signal_wait: a lean single-signal version of `wait_until` (it is
        on the path of every host-side completion wait)."""
        condition = _condition(condition)
        call = "hsa_signal_wait_scacquire"
        sig = self._signals.get(handle)
        if sig is None:
            raise _invalid(handle, call)
        words, index = sig.words, sig.base + W_VALUE
        value = int(words[index])
        if condition_holds(value, condition, compare):  # satisfied: no registration
            return value
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        cv = self.waiter()
        with self.lock:
            sig.waiters.append(cv)
            _mark(sig)
            try:
                while True:
                    if self._signals.get(handle) is not sig:
                        raise _invalid(handle, call, "destroyed while being waited on")
                    value = int(words[index])
                    if condition_holds(value, condition, compare):
                        return value
                    if deadline is None:
                        cv.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise SignalTimeout(
                            HSA_STATUS_ERROR,
                            f"signal 0x{handle:x} {_COND_TEXT[condition]} {compare} (value "
                            f"{value}) did not hold within {timeout_s:g} s"
                            + (f" ({sig.note})" if sig.note else "")
                            + "; check that the packet that signals it was published and "
                            "its queue is healthy, or wait longer",
                            call,
                        )
                    cv.wait(remaining)
            finally:
                try:
                    sig.waiters.remove(cv)
                except ValueError:
                    pass
                _mark(sig)

    def wait_any(
        self,
        handles: Sequence[int],
        conditions: Sequence[int],
        compares: Sequence[int],
        timeout_s: float | None,
    ) -> int:
        if not (len(handles) == len(conditions) == len(compares)) or not handles:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                "signals, conditions and compare values must be non-empty lists of one length",
                "hsa_amd_signal_wait_any",
            )
        conds = [_condition(c) for c in conditions]

        def test(values: list[int]) -> int | None:
            for i, v in enumerate(values):
                if condition_holds(v, conds[i], compares[i]):
                    return i
            return None

        def describe(values: list[int]) -> str:
            parts = [
                f"0x{h:x} {_COND_TEXT[c]} {k} (value {v})"
                for h, c, k, v in zip(handles, conds, compares, values, strict=True)
            ]
            return "none of signals " + ", ".join(parts)

        return self.wait_until(  # type: ignore[return-value]
            handles, test, timeout_s, call="hsa_amd_signal_wait_any", describe=describe
        )


def _mark(sig: _Signal) -> None:
    """A watched signal's waiters and note into its watcher's flag word (table lock held):
    one single-byte store each, so writers of the word's other bytes never race on it."""
    flags = sig.flags
    if flags is not None:
        flags[FLAG_WAITERS] = 1 if sig.waiters else 0
        flags[FLAG_NOTE] = 1 if sig.note else 0


def _condition(c: int) -> int:
    if c in (0, 1, 2, 3):
        return int(c)
    try:
        return int(SignalCondition(c))
    except ValueError:
        raise HsaError(
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            f"unknown signal condition {c!r}; use SignalCondition.EQ/NE/LT/GTE",
        ) from None


def _i64(v: int) -> int:
    v = int(v) & 0xFFFF_FFFF_FFFF_FFFF  # (int(): numpy integers mask without overflow)
    return v - (1 << 64) if v >= 1 << 63 else v


def _invalid(handle: int, call: str, why: str = "not a live signal") -> HsaError:
    return HsaError(
        HSA_STATUS_ERROR_INVALID_SIGNAL,
        f"signal handle 0x{handle:x} is {why}; create it with signal_create and do not use "
        "it after signal_destroy",
        call,
    )
