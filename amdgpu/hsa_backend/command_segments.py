"""What recording a command buffer on the HSA path produces (command_buffer.py records,
command_replay.py publishes): a recorded dispatch or host operation, a segment (one packet
block, its kernarg template and patch sites), and a kept instance of a segment on a lane."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amdgpu.hsa_backend.executable import HsaKernel
from amdgpu.hsa_backend.kernargs import KernargRing

KARG_WORD = 5  # kernarg_address is u64 word 5 of a packet
SIGNAL_WORD = 7  # completion_signal is u64 word 7
SMALL_SITES = 16  # binding patch sites up to which Python stores beat one numpy call
SMALL_ROWS = 8  # dispatch rows up to which Python stores beat one numpy call
M64 = (1 << 64) - 1
GRID_WORD = 3  # grid_size_x is u32 word 3 of a dispatch packet (then y, z)
RING_SLACK = KernargRing.RING_SLACK
WIDTH_CODE = {2: "H", 4: "I", 8: "Q"}
FLOAT_CODE = {2: "e", 4: "f", 8: "d"}


@dataclass
class RecordedDispatch:
    kernel: HsaKernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dims: int
    dynamic_lds: int
    template: bytes
    sites: list[tuple[int, int, int]]  # (kernarg byte offset, binding index, binding offset)
    barrier: bool
    cluster: Any = None  # gfx1250 workgroups per cluster (None: the default, 1)
    # parameters: (kernarg byte offset, width, derivation) and (grid axis, derivation); a
    # derivation is a hashable key `derive` turns into the bits to store (see dispatch)
    param_sites: list[tuple[int, int, tuple]] = field(default_factory=list)
    grid_sites: list[tuple[int, tuple]] = field(default_factory=list)


@dataclass
class HostOp:
    kind: str  # "fill" | "copy"
    dst: Any  # Buffer or BindingSlot
    src: Any = None  # Buffer or BindingSlot (copy) / value (fill)
    nbytes: int | None = None


@dataclass
class Segment:
    block: np.ndarray  # PACKET array with INVALID headers, patched per submit
    words: np.ndarray  # (n, 8) uint64 view of block
    headers: np.ndarray  # uint32 header words (header | setup << 16), published last
    dispatch_rows: np.ndarray
    kernarg_offsets: np.ndarray  # uint64, per dispatch row
    template: np.ndarray  # uint8, the kernarg block
    site_words: np.ndarray  # int64, u64 index into the kernarg block
    site_binding: np.ndarray  # int64
    site_offset: np.ndarray  # uint64
    last_row: int
    dispatches: int = 0
    symbols: list[str] = field(default_factory=list)
    kernels: list[HsaKernel] = field(default_factory=list)  # each kernel once, for traces
    patched_for: tuple = ()  # binding addresses the template is patched with now
    # Small segments patch from Python through memoryviews: a handful of scalar stores
    # cost less than numpy's per-call overhead (see SMALL_SITES / SMALL_ROWS).
    sites: list[tuple[int, int, int]] = field(default_factory=list)  # (u64 word, binding, +)
    # views made once the segment is built (memoryviews; None before):
    template_bytes: Any = None  # the template as bytes (B)
    template_words: Any = None  # the template as u64 words (Q)
    block_words: Any = None  # the packet block as u64 words (Q)
    row_offsets: list[int] = field(default_factory=list)  # kernarg_offsets as ints
    header_list: list[int] = field(default_factory=list)  # headers as ints
    # parameters: the derivations read (values appended to the binding table at submit),
    # and per element width the sites of the template (u16/u32 index, table index); the
    # packets' grid fields (u32 index into the block, table index). u64 parameter sites
    # are in site_words/site_binding with the bindings: one write patches both.
    param_keys: list[tuple] = field(default_factory=list)
    narrow_sites: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)
    grid_words: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    grid_src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # uint32, per dispatch row: its kernarg bytes (for the trace's kernarg values)
    kernarg_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    # the trace's block template of this segment, built at its first traced submit, the
    # sinks told about it (a WeakSet) and a weak reference to the last one (the fast check)
    trace_template: Any = None
    trace_sinks: Any = None
    trace_sink: Any = None
    # replay instances (see KeptInstance): (lane, table) -> one; a lane's are ordered by use by
    # their `value` (the timeline value of their latest submission)
    instances: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)  # (lane, table) -> None: the latest tables
    last_block: Any = None  # the block last published (an instance's, or `block`)
    # or (kernarg base, signal) of the last publish of `block` through publish_rows
    last_rows: tuple[int, int] | None = None
    block_view: Any = None  # `block` as bytes (B): what publish_rows reads
    # hotpath.c's Rows of `block` (its distinct rows once each: what the compiled lane's
    # submit_rows expands into the ring), or None (no compiled build, or parameter grids)
    rows: Any = None

    def full_block(self) -> np.ndarray:
        """A copy of the block last published with its headers in place (what the ring
        received)."""
        out = (self.block if self.last_block is None else self.last_block).copy()
        if self.last_rows is not None:  # the fields publish_rows set on the way
            base, signal = self.last_rows
            words = out.view(np.uint64).reshape(len(out), 8)
            np.add(self.kernarg_offsets, np.uint64(base), out=words[: self.dispatches, KARG_WORD])
            words[self.last_row, SIGNAL_WORD] = signal
        out.view(np.uint32).reshape(len(out), 16)[:, 0] = self.headers
        return out


class KeptInstance:
    """One segment replayed for one lane and one binding table, kept: its own kernarg
    block (a kernarg-pool allocation holding the template patched for the table) and, only
    where the segment's packets carry parameter grids, its own packet block (kernarg_address
    column, completion signal and grids set). Kernels never write their kernarg segment,
    so one instance serves every submission of that (lane, table), however many are in
    flight: a replay publishes the segment's block with this instance's kernarg addresses
    and the lane's signal set on the way (Ring.publish_rows), or its own block (one copy
    into the ring), one header store either way, and copies no kernarg bytes. `value` is
    the lane's latest submission that reads it: the instance is re-patched for another
    table only once the lane has completed that value."""

    __slots__ = ("address", "memory", "block", "view", "value", "nbytes", "signal")

    def __init__(self, address: int, memory: np.ndarray, block: np.ndarray | None,
                 nbytes: int, signal: int):
        self.address = address
        self.memory = memory
        self.block = block  # None: the segment's block, through publish_rows
        self.view = None if block is None else memoryview(block.view(np.uint8)).cast("B")
        self.value = 0
        self.nbytes = nbytes
        self.signal = signal
