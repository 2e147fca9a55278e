"""The virtual GPU's SDMA engines: run the packets of a KFD SDMA queue (packets/sdma.py).

    engine = SdmaEngine(memory, ring_base, ring_bytes, rptr_address, wptr_address,
                        target="gfx942", agent=gpu_handle, interrupt=on_interrupt)
    engine.process()            # run from *rptr to *wptr (or process(new_wptr)); returns the
                                # bytes consumed once the ring is drained

`rptr` and `wptr` are 64-bit words in memory counting bytes since the queue was created (what
ROCr's BlitSdma and tinygrad's AMDCopyQueue read and write); the ring offset is that count
modulo the ring size, and the engine stores the new read pointer after every packet.

What the packets do here:

- COPY_LINEAR: count + 1 bytes from src to dst through the memory map (each range within one
  allocation the agent may access); COPY_LINEAR_SUB_WINDOW (hipMemcpy2D/3D of pitched memory):
  a box of elements between two pitched windows (packets.sdma's layout), read whole before
  it is written; CONST_FILL: count + 1 bytes of the 32-bit data (fillsize
  2) or its low byte (fillsize 0); WRITE: the packet's dwords to dst.
- FENCE: writes its 32-bit data; TIMESTAMP (GET_GLOBAL): writes the 64-bit GPU clock
  (hsa.virtual.pm4.CLOCK_HZ); ATOMIC ADD64 (ROCr's signal decrement) and CMPSWAP64 on a
  64-bit word.
- TRAP: calls `interrupt(Interrupt("sdma_trap", int_context))` (KFD's event id).
- POLL_REGMEM on memory: waits until (dword & mask) <func> value. The HDP-flush form
  (hdp_flush=1, ROCr's constant packet, the kernel's flush) and register polls with function
  "always" complete at once: the virtual GPU has no HDP cache; other register polls stop the
  queue naming the register.
- GCR_REQ (cache write-back/invalidate), NOP (header.count extra dwords; a zero dword is a
  one-dword NOP, so ROCr's zero-padded 8-dword packets run as they are): no work.
- INDIRECT: runs the indirect buffer of `size` dwords at its address (one level).

Anything else (a sub-op not listed, an unknown opcode, a truncated packet) stops the queue
with `SdmaFault` naming the byte offset; a bad address raises MemoryFault with the same
prefix. After a fault every later `process` raises the same error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ground.errors import HsaError, MemoryFault, QueueError
from ground.status import HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
from hsa.virtual.pm4 import (
    Interrupt,
    Pm4Stopped,
    clock_ticks,
    compare,
    ring_slice,
    wait_until,
)
from packets import sdma
from packets.sdma import Op

_ATOMIC_LOCK = threading.Lock()  # SDMA atomics are atomic with respect to each other


class SdmaFault(QueueError):
    def __init__(self, text: str):
        super().__init__(HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, text)


SdmaStopped = Pm4Stopped


class SdmaEngine:
    """One SDMA queue: its ring, pointers and packet semantics."""

    def __init__(self, memory: Any, ring_base: int, ring_bytes: int, rptr_address: int,
                 wptr_address: int, *, target: str, agent: int | None = None,
                 interrupt: Callable[[Interrupt], None] | None = None,
                 label: str = "SDMA queue", stop: Callable[[], bool] | None = None) -> None:
        if ring_bytes <= 0 or ring_bytes & (ring_bytes - 1) or ring_bytes % 4:
            raise ValueError(f"SDMA ring of {ring_bytes} bytes: KFD rings are a power of two")
        self.memory = memory
        self.agent = agent
        self.target = target
        self.family = "gfx9" if target.startswith("gfx9") else target[:5]
        self.interrupt = interrupt
        self.label = label
        self.stop = stop or (lambda: False)
        self.base = ring_base
        self.ring = memory.view(ring_base, ring_bytes, agent).view(np.uint32)
        self.ring_bytes = ring_bytes
        self._rptr = memory.view(rptr_address, 8, agent).view(np.uint64)
        self._wptr = memory.view(wptr_address, 8, agent).view(np.uint64)
        self.error: HsaError | None = None

    @property
    def rptr(self) -> int:
        return int(self._rptr[0])

    def process(self, new_wptr: int | None = None) -> int:
        """Run every packet from the read pointer to `new_wptr` (default: *wptr)."""
        if self.error is not None:
            raise self.error
        wptr = int(self._wptr[0]) if new_wptr is None else int(new_wptr)
        start = rptr = self.rptr
        try:
            while rptr < wptr:
                at = (rptr % self.ring_bytes) // 4
                avail = (wptr - rptr) // 4
                if self.ring[at] == 0:  # a run of one-dword NOPs (padding): skip it at once
                    run = self.ring[at:at + min(avail, len(self.ring) - at)]
                    nonzero = np.flatnonzero(run)
                    rptr += 4 * (int(nonzero[0]) if nonzero.size else run.size)
                    self._rptr[0] = rptr
                    continue
                where = f"ring at 0x{self.base:x} byte {4 * at}"
                size = self._size(ring_slice(self.ring, at, min(avail, 4)), 0, where, avail)
                window = ring_slice(self.ring, at, size)  # a copy only where it wraps
                self._run_packet(window, 0, where)
                rptr += 4 * size
                self._rptr[0] = rptr
        except HsaError as exc:
            self.error = exc
            raise
        return rptr - start

    run_until_idle = process

    # --- packets --------------------------------------------------------------------------
    def _size(self, words: np.ndarray, i: int, where: str, available: int | None = None
              ) -> int:
        """Dwords of the packet at words[i]; `available` dwords are there (default: the
        rest of `words`)."""
        n = len(words) - i if available is None else available
        try:
            size = sdma.packet_size(words, i)
        except Exception as exc:  # PacketError
            raise SdmaFault(f"{self.label}: {where}: {exc}; the queue is stopped") from None
        if size > n:
            raise SdmaFault(f"{self.label}: {where}: packet 0x{int(words[i]):08x} needs {size} "
                            f"dwords, {n} are there; the queue is stopped")
        return size

    def _run_packet(self, words: np.ndarray, i: int, where: str, depth: int = 0) -> int:
        size = self._size(words, i, where)
        h = int(words[i])
        op = h & 0xFF
        b = [int(x) for x in words[i + 1:i + size]]
        if op in (Op.NOP, Op.GCR_REQ):
            return size
        if op == Op.COPY and (h >> 8 & 0xFF) == sdma.SUBOP_COPY_LINEAR_SUB_WINDOW:
            self._copy_sub_window(words[i:i + size], where)
        elif op == Op.COPY:
            n = (b[0] & ((1 << sdma.count_bits(self.family)) - 1)) + 1
            src, dst = b[3] << 32 | b[2], b[5] << 32 | b[4]
            data = self._view(src, n, where, "COPY_LINEAR source").copy()
            self._view(dst, n, where, "COPY_LINEAR destination")[:] = data
        elif op == Op.CONST_FILL:
            n = (b[3] & ((1 << sdma.count_bits(self.family)) - 1)) + 1
            dst = b[1] << 32 | b[0]
            fillsize = h >> 30
            view = self._view(dst, n, where, "CONST_FILL")
            if fillsize == sdma.FILLSIZE_DWORD and n % 4 == 0:
                view.view(np.uint32)[:] = b[2]
            elif fillsize == 0:
                view[:] = b[2] & 0xFF
            else:
                raise SdmaFault(f"{self.label}: {where}: CONST_FILL fillsize {fillsize} with "
                                f"{n} bytes (dword fills need a multiple of 4)")
        elif op == Op.FENCE:
            self._view(b[1] << 32 | b[0], 4, where, "FENCE").view(np.uint32)[0] = b[2]
        elif op == Op.WRITE:
            dst = b[1] << 32 | b[0]
            values = np.array(b[3:], np.uint32)
            self._view(dst, 4 * values.size, where, "WRITE").view(np.uint32)[:] = values
        elif op == Op.TIMESTAMP:
            self._view(b[1] << 32 | b[0], 8, where, "TIMESTAMP").view(np.uint64)[0] = \
                clock_ticks()
        elif op == Op.TRAP:
            if self.interrupt is not None:
                self.interrupt(Interrupt("sdma_trap", b[0] & 0x0FFF_FFFF))
        elif op == Op.ATOMIC:
            self._atomic(h, b, where)
        elif op == Op.POLL_REGMEM:
            self._poll(h, b, where)
        elif op == Op.INDIRECT:
            if depth:
                raise SdmaFault(f"{self.label}: {where}: INDIRECT inside an indirect buffer")
            address, count = b[1] << 32 | b[0], b[2]
            ib = self._view(address, 4 * count, where, "INDIRECT buffer").view(np.uint32)
            j = 0
            while j < count:
                j += self._run_packet(ib, j, f"IB at 0x{address:x} byte {4 * j}", depth + 1)
        return size

    def _view(self, address: int, size: int, where: str, what: str) -> np.ndarray:
        try:
            return self.memory.view(address, size, self.agent)
        except MemoryFault as exc:
            raise MemoryFault(exc.status, f"{self.label}: {where}: {what}: {exc.text}",
                              address=address) from None

    def _copy_sub_window(self, words: np.ndarray, where: str) -> None:
        element, src, dst, (w, h, d) = sdma.read_sub_window(self.family, words)
        size = 1 << element

        def window(side: sdma.Window, what: str) -> np.ndarray:
            first = side.address + (side.x + side.y * side.pitch + side.z * side.slice) * size
            span = ((w - 1) + (h - 1) * side.pitch + (d - 1) * side.slice + 1) * size
            view = self._view(first, span, where, f"COPY_LINEAR_SUB_WINDOW {what}")
            return np.lib.stride_tricks.as_strided(
                view, (d, h, w * size), (side.slice * size, side.pitch * size, 1))

        data = window(src, "source").copy()
        window(dst, "destination")[...] = data

    def _atomic(self, h: int, b: list[int], where: str) -> None:
        operation = (h >> 25) & 0x7F
        address = b[1] << 32 | b[0]
        src, cmp = b[3] << 32 | b[2], b[5] << 32 | b[4]
        word = self._view(address, 8, where, "ATOMIC").view(np.uint64)
        with _ATOMIC_LOCK:
            old = int(word[0])
            if operation == sdma.ATOMIC_ADD64:
                word[0] = (old + src) & ((1 << 64) - 1)
            elif operation == sdma.ATOMIC_CMPSWAP64:
                if old == cmp:
                    word[0] = src
            else:
                raise SdmaFault(f"{self.label}: {where}: ATOMIC operation {operation} is not "
                                f"modeled (ADD64 {sdma.ATOMIC_ADD64}, CMPSWAP64 "
                                f"{sdma.ATOMIC_CMPSWAP64} are)")

    def _poll(self, h: int, b: list[int], where: str) -> None:
        function, memory, hdp = (h >> 28) & 7, h >> 31 & 1, h >> 26 & 1
        value, mask = b[2], b[3]
        if not memory:
            if hdp or function == 0:
                return  # the HDP flush / an always-true register poll
            raise SdmaFault(f"{self.label}: {where}: POLL_REGMEM polls register "
                            f"0x{b[0] >> 2:x}, which the virtual {self.family} GPU does not "
                            "model; the queue is stopped")
        word = self._view(b[1] << 32 | b[0], 4, where, "POLL_REGMEM").view(np.uint32)
        wait_until(lambda: compare(int(word[0]) & mask, function, value), self.stop)
