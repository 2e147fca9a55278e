"""Trace record objects (what readers yield and MemorySink keeps), and the block template
that stands for a packet block published again and again."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ground.errors import TraceFormatError

from .format import (
    _BLOCK_TEMPLATE,
    _KIND_PACKET,
    _M64,
    PACKET_FIXED_SIZE,
    PACKET_RECORD,
    Clock,
)


@dataclass(slots=True)
class PacketRecord:
    queue_id: int
    packet_id: int
    reserve_ns: int
    publish_ns: int
    doorbell_ns: int
    raw: bytes
    kernarg: bytes | None = None
    symbol: str | None = None
    offset: int = -1  # byte offset of the record in its file (-1 when not read from one)

    def decode(self) -> dict:
        from ..decode import decode

        return decode(self.raw)


@dataclass(slots=True)
class QueueCreatedRecord:
    queue_id: int
    time_ns: int
    info: dict = field(default_factory=dict)
    offset: int = -1


@dataclass(slots=True)
class KernelSymbolRecord:
    kernel_object: int
    name: str
    layout: object = None  # arg layout (msgpack-able: list of dicts, dict, ...)
    offset: int = -1


@dataclass(slots=True)
class CompletionRecord:
    queue_id: int
    packet_id: int
    start_ns: int
    end_ns: int
    clock: int = Clock.HOST_NS
    offset: int = -1


@dataclass(slots=True)
class VulkanSubmissionRecord:
    time_ns: int
    payload: dict = field(default_factory=dict)
    offset: int = -1


@dataclass(slots=True)
class QueueErrorRecord:
    """A queue stopped at `packet_id`; info: text, kernel, address, status (what is known)."""

    queue_id: int
    packet_id: int
    time_ns: int
    info: dict = field(default_factory=dict)
    offset: int = -1


@dataclass(slots=True)
class UnknownRecord:
    """A record of a kind this reader does not know (a newer writer): kept, not fatal."""

    kind: int
    flags: int
    payload: bytes
    offset: int = -1


@dataclass(slots=True)
class BlockReplayRecord:
    """One submission of a block template (what the driver changed in it this time).
    Readers expand it into its packet records; `read_trace(path, expand=False)` yields it."""

    queue_id: int
    first_id: int  # packet id of the block's first packet
    reserve_ns: int
    publish_ns: int
    doorbell_ns: int
    template_id: int
    kernarg_base: int  # address of this submission's copy of the kernarg template
    signal: int  # completion signal of the template's signal row
    bindings: tuple  # binding addresses (ints) the kernarg patch sites index
    offset: int = -1


@dataclass(slots=True)
class BlockTemplateRecord:
    """A packet block that is published again and again (a command buffer segment), with
    what a submission patches in it. Queue independent; written once per sink.

    - `block`: the N packets as published (headers in place), N * 64 bytes;
    - rows 0..D-1 are dispatches: their kernarg_address is the replay's `kernarg_base` +
      `kernarg_offsets[i]`, their kernarg bytes are `kernarg_sizes[i]` bytes from that
      offset of the patched kernarg template;
    - `signal_row` (-1: none) takes the replay's completion signal;
    - `kernarg`: the kernarg template (K bytes) a submission copies to `kernarg_base`; at
      byte `site_offsets[j]` it holds the u64 `bindings[site_bindings[j]] + site_addends[j]`
      (a negative binding index counts from the end of the replay's bindings: the driver
      puts the queue address last, for hidden_queue_ptr).
    """

    template_id: int
    block: bytes
    kernarg_offsets: np.ndarray  # uint64, D
    kernarg_sizes: np.ndarray  # uint32, D
    signal_row: int = -1
    kernarg: bytes = b""
    site_offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    site_bindings: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    site_addends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    offset: int = -1

    @classmethod
    def build(cls, template_id: int, block, kernarg_offsets=(), kernarg_sizes=(),
              signal_row: int = -1, kernarg: bytes = b"", site_offsets=(), site_bindings=(),
              site_addends=()) -> BlockTemplateRecord:
        """A template from any array-likes, checked (raises TraceFormatError)."""
        raw = _contiguous(block).reshape(-1).view(np.uint8).tobytes()
        rec = cls(int(template_id), raw, np.array(kernarg_offsets, np.uint64).reshape(-1),
                  np.array(kernarg_sizes, np.uint32).reshape(-1), int(signal_row),
                  bytes(kernarg), np.array(site_offsets, np.uint32).reshape(-1),
                  np.array(site_bindings, np.int32).reshape(-1),
                  np.array(site_addends, np.uint64).reshape(-1))
        try:
            rec.check()
        except ValueError as e:
            raise TraceFormatError(f"block template {template_id}: {e}") from None
        return rec

    @property
    def count(self) -> int:
        return len(self.block) >> 6

    @property
    def dispatches(self) -> int:
        return int(self.kernarg_offsets.shape[0])

    def check(self) -> None:
        """Raise ValueError when the parts do not fit together."""
        n, d, k = self.count, self.dispatches, len(self.kernarg)
        if len(self.block) & 63:
            raise ValueError(f"a packet block is a multiple of 64 bytes, got {len(self.block)}")
        if d > n or self.kernarg_sizes.shape[0] != d:
            raise ValueError(f"{d} kernarg offsets and {self.kernarg_sizes.shape[0]} sizes "
                             f"for {n} packets")
        if d and int((self.kernarg_offsets + self.kernarg_sizes).max()) > k:
            raise ValueError(f"a dispatch's kernargs run past the {k}-byte kernarg template")
        if not -1 <= self.signal_row < n:
            raise ValueError(f"signal row {self.signal_row} outside the {n} packets")
        s = self.site_offsets.shape[0]
        if self.site_bindings.shape[0] != s or self.site_addends.shape[0] != s:
            raise ValueError("patch-site arrays of different lengths")
        if s and int(self.site_offsets.max()) + 8 > k:
            raise ValueError(f"a patch site lies past the {k}-byte kernarg template")

    # --- the binary form -----------------------------------------------------------------

    def to_payload(self) -> bytes:
        """Head, block (N*64), kernarg offsets (D u64), site addends (S u64), site offsets
        (S u32), site bindings (S i32), kernarg sizes (D u32), kernarg template (K)."""
        head = _BLOCK_TEMPLATE.pack(self.template_id, self.count, self.dispatches,
                                    len(self.kernarg), self.site_offsets.shape[0],
                                    self.signal_row, 0)
        return b"".join((head, self.block, self.kernarg_offsets.astype("<u8").tobytes(),
                         self.site_addends.astype("<u8").tobytes(),
                         self.site_offsets.astype("<u4").tobytes(),
                         self.site_bindings.astype("<i4").tobytes(),
                         self.kernarg_sizes.astype("<u4").tobytes(), self.kernarg))

    @classmethod
    def from_payload(cls, payload: bytes, offset: int = -1) -> BlockTemplateRecord:
        """Raises ValueError or struct.error when the payload does not parse."""
        tid, n, d, k, s, signal_row, _ = _BLOCK_TEMPLATE.unpack_from(payload)
        want = _BLOCK_TEMPLATE.size + 64 * n + 12 * d + 16 * s + k
        if len(payload) != want:
            raise ValueError(f"block template of {n} packets, {d} dispatches, {s} sites and "
                             f"{k} kernarg bytes needs {want} bytes, has {len(payload)}")
        pos = _BLOCK_TEMPLATE.size

        def take(dtype: str, count: int) -> np.ndarray:
            nonlocal pos
            arr = np.frombuffer(payload, dtype, count, pos).astype(dtype[1:])
            pos += arr.nbytes
            return arr

        block = payload[pos:pos + 64 * n]
        pos += 64 * n
        offsets, addends = take("<u8", d), take("<u8", s)
        sites, bindings, sizes = take("<u4", s), take("<i4", s), take("<u4", d)
        rec = cls(tid, block, offsets, sizes, signal_row, payload[pos:pos + k], sites,
                  bindings, addends, offset)
        rec.check()
        return rec

    # --- expanding a replay --------------------------------------------------------------

    def patched_kernarg(self, bindings) -> bytes:
        """The kernarg template with every patch site filled from `bindings`."""
        if not self.site_offsets.shape[0]:
            return self.kernarg
        index = self.site_bindings.astype(np.int64)
        nb = len(bindings)
        if int(index.max()) >= nb or int(index.min()) < -nb:
            raise ValueError(f"template {self.template_id} patches binding "
                             f"{int(index.max()) if int(index.max()) >= nb else int(index.min())}"
                             f", the replay has {nb} binding(s)")
        table = np.array([b & _M64 for b in bindings], np.uint64)
        data = bytearray(self.kernarg)
        words = np.frombuffer(data, np.uint8)
        values = (table[index] + self.site_addends).astype("<u8")
        # sites may be at any 8-byte-multiple offset: a (S, 8) byte scatter
        pos = self.site_offsets.astype(np.int64)[:, None] + np.arange(8)
        words[pos] = values.view(np.uint8).reshape(-1, 8)
        return bytes(data)

    def patched_words(self, kernarg_base: int, signal: int) -> np.ndarray:
        """The N packets of a replay as an (N, 8) uint64 array."""
        words = np.frombuffer(self.block, "<u8").reshape(-1, 8).copy()
        d = self.dispatches
        if d:
            words[:d, 5] = self.kernarg_offsets + np.uint64(kernarg_base & _M64)
        if self.signal_row >= 0:
            words[self.signal_row, 7] = signal & _M64
        return words

    def packet_records(self, replay: BlockReplayRecord) -> list[PacketRecord]:
        """The packet records `replay` stands for, kernarg bytes on the dispatch rows."""
        raw = self.patched_words(replay.kernarg_base, replay.signal).tobytes()
        kernarg = self.patched_kernarg(replay.bindings) if self.dispatches else b""
        offs, sizes = self.kernarg_offsets.tolist(), self.kernarg_sizes.tolist()
        d = len(offs)
        q, first = replay.queue_id, replay.first_id
        t0, t1, t2, at = replay.reserve_ns, replay.publish_ns, replay.doorbell_ns, replay.offset
        return [PacketRecord(q, first + i, t0, t1, t2, raw[i << 6:(i + 1) << 6],
                             kernarg[offs[i]:offs[i] + sizes[i]] if i < d else None, None, at)
                for i in range(self.count)]

    def packet_rows(self, replay: BlockReplayRecord) -> np.ndarray:
        """The packets of `replay` as fixed PACKET_RECORD rows (no kernargs: scan's form)."""
        n = self.count
        rows = np.zeros(n, PACKET_RECORD)
        rows["length"] = PACKET_FIXED_SIZE
        rows["kind"] = _KIND_PACKET
        rows["queue_id"] = replay.queue_id
        rows["packet_id"] = np.arange(replay.first_id, replay.first_id + n, dtype=np.uint64)
        rows["reserve_ns"] = replay.reserve_ns
        rows["publish_ns"] = replay.publish_ns
        rows["doorbell_ns"] = replay.doorbell_ns
        rows["raw"] = self.patched_words(replay.kernarg_base, replay.signal).view("V64")[:, 0]
        return rows


Record = (PacketRecord | QueueCreatedRecord | KernelSymbolRecord | CompletionRecord
          | VulkanSubmissionRecord | BlockTemplateRecord | BlockReplayRecord | QueueErrorRecord
          | UnknownRecord)



def _contiguous(block) -> np.ndarray:
    if isinstance(block, (bytes, bytearray, memoryview)):
        return np.frombuffer(block, np.uint8)
    return np.ascontiguousarray(block)

