"""Command buffers on the HSA path: record once, replay with one patch and one doorbell.

Recording turns each dispatch into a kernarg template (explicit args packed, binding slots
left 0) plus patch sites (byte offset in the kernarg block, binding index, byte offset into
the binding). Dispatches whose kernarg blocks are identical share one (kernels only read
their kernarg segment). `finalize` builds, per segment, one packet block with `packets`' batch
builder, the concatenated kernarg template, and the patch-site table as numpy arrays.

`submit(bindings)` per segment: patch every binding site of the template with ONE
vectorized write (skipped when the binding addresses are those of the previous submit),
copy the template into a fresh kernarg block from the lane's ring (a command buffer may be
in flight several times, on several lanes: each submission reads its own copy), patch the
packets' kernarg_address column with one more vectorized write, set the completion
signal of the last packet to the lane's timeline signal, and publish the block with
`Ring.publish_many` (wrap-aware, one doorbell). Small segments (up to SMALL_SITES patch
sites, SMALL_ROWS dispatches) do the two patches as a few memoryview stores instead: below
that size numpy's per-call cost is most of a replay's host time.

Parameters (`cb.param`, `cb.scalar`): recording packs a zero where each placeholder goes
and keeps its site with a derivation (the value in the argument's type; a grid axis; the
hidden block count or remainder that axis gives for the dispatch's block). At submit the
derivations' values are appended to the binding table, so the u64 sites patch in the same
vectorized write as the bindings, each narrower width (u32, u16) in one more, and the
packets' grid_size fields in one write on the block. Segments with parameters are traced
packet by packet (the block template's values would be stale).

While a trace sink is active, each submit tells it the segment's kernels (KERNEL_SYMBOL,
once per kernel per sink); a one-dispatch block goes out as a packet record with its
kernarg bytes, a larger block as the segment's BLOCK_TEMPLATE (once per sink) and one
BLOCK_REPLAY record per submit: kernarg base, signal and binding addresses, from which
readers rebuild the packets and their kernarg values (see amdgpu.hsa_backend.tracing).

Barrier bits: the first packet always has it (a lane runs its submissions in order); a
dispatch recorded after `barrier()` has it; nothing else does, so independent dispatches
may overlap. The last packet carries the lane signal; if it has no barrier bit, a trailing
barrier-AND packet (barrier bit, no deps) carries the signal instead.

fill and copy: where the agent runs kernels (ROCr, or a virtual agent with an ISA
executor), they are dispatches of the compiler library's OpenCL `fill` and `copy` kernels
(32-bit words; `device.blit_kernels()`), so they stay inside the one packet block. Where it
cannot (no executor, no clang, unaligned or odd sizes, a fill pattern a float argument
cannot carry exactly) they are host operations (the provider's memory_copy), which split
the command buffer into segments: at submit, the segments before a host operation are
published and waited for, then the host copies, then the rest is published.
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import packets
from amdgpu.buffer import Buffer
from amdgpu.command_buffer import BindingSlot, CommandBuffer, Param, split_grid
from amdgpu.device import TimelinePoint
from amdgpu.geometry import MAX_SIZE
from amdgpu.hsa_backend.executable import HsaKernel
from amdgpu.hsa_backend.kernargs import KernargRing
from amdgpu.hsa_backend.tracing import announce_all, announce_template
from ground.errors import KernelArgumentError
from hsa.abi.hidden_args import GEOMETRY_KINDS

_KARG_WORD = 5  # kernarg_address is u64 word 5 of a packet
_SIGNAL_WORD = 7  # completion_signal is u64 word 7
_TRACE = packets.trace.STATE  # `.sink`: the active trace sink or None
SMALL_SITES = 16  # binding patch sites up to which Python stores beat one numpy call
SMALL_ROWS = 8  # dispatch rows up to which Python stores beat one numpy call
_M64 = (1 << 64) - 1
_GRID_WORD = 3  # grid_size_x is u32 word 3 of a dispatch packet (then y, z)
# Replay instances (_Instance): at most this many per segment (over its lanes); past that,
# or when the lane's kept kernarg blocks are full, a replay with a new table re-patches an
# idle instance of its lane, or takes the ring path (a fresh kernarg block every time).
MAX_INSTANCES = 8
RING_SLACK = KernargRing.RING_SLACK
_WIDTH_CODE = {2: "H", 4: "I", 8: "Q"}
_FLOAT_CODE = {2: "e", 4: "f", 8: "d"}


@dataclass
class _Dispatch:
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
    # derivation is a hashable key `_derive` turns into the bits to store (see dispatch)
    param_sites: list[tuple[int, int, tuple]] = field(default_factory=list)
    grid_sites: list[tuple[int, tuple]] = field(default_factory=list)


@dataclass
class _HostOp:
    kind: str  # "fill" | "copy"
    dst: Any  # Buffer or BindingSlot
    src: Any = None  # Buffer or BindingSlot (copy) / value (fill)
    nbytes: int | None = None


@dataclass
class _Segment:
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
    # replay instances (see _Instance), least recently used first: (lane, table) -> one
    instances: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)  # (lane, table) -> None: the latest tables
    last_block: Any = None  # the block last published (an instance's, or `block`)
    # or (kernarg base, signal) of the last publish of `block` through publish_rows
    last_rows: tuple[int, int] | None = None
    block_view: Any = None  # `block` as bytes (B): what publish_rows reads

    def full_block(self) -> np.ndarray:
        """A copy of the block last published with its headers in place (what the ring
        received)."""
        out = (self.block if self.last_block is None else self.last_block).copy()
        if self.last_rows is not None:  # the fields publish_rows set on the way
            base, signal = self.last_rows
            words = out.view(np.uint64).reshape(len(out), 8)
            np.add(self.kernarg_offsets, np.uint64(base), out=words[: self.dispatches, _KARG_WORD])
            words[self.last_row, _SIGNAL_WORD] = signal
        out.view(np.uint32).reshape(len(out), 16)[:, 0] = self.headers
        return out


class _Instance:
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


class HsaCommandBuffer(CommandBuffer):
    def __init__(self, device: Any):
        self.device = device
        self._ops: list[Any] = []
        self._pending_barrier = False
        self._bindings_needed = 0
        self._segments: list[Any] | None = None
        # the one segment of a buffer that holds dispatches only (no host op): its replays
        # without waits or parameters take _submit's short way (set by finalize)
        self._only: _Segment | None = None
        self.dispatches = 0
        # One replay at a time patches the shared kernarg template and packet block and
        # copies them out (into its own kernarg block, into the ring): replays from several
        # threads then each get their own bindings. Taken before a lane's lock, never after.
        self._replay_lock = threading.Lock()

    # --- recording -----------------------------------------------------------------------
    def _check_recording(self) -> None:
        self.check_recording()

    @property
    def finalized_(self) -> bool:
        return self._segments is not None

    def dispatch(
        self,
        kernel: HsaKernel,
        grid: Any,
        block: Any = None,
        args: Sequence[Any] = (),
        *,
        dynamic_lds: int = 0,
        cluster: Any = None,
    ) -> None:
        self._check_recording()
        if not isinstance(kernel, HsaKernel) or kernel.executable.device is not self.device:
            raise KernelArgumentError(
                f"dispatch wants a Kernel loaded on this device ({self.device.spec}), "
                f"got {kernel!r}"
            )
        grid, grid_params = split_grid(grid)
        g, b, dims = kernel.geometry(grid, block)
        if cluster is not None or self.device.target == "gfx1250":
            if grid_params:
                raise KernelArgumentError(
                    f"kernel {kernel.name!r}: grid parameters are not supported on gfx1250's "
                    f"extended dispatch packets yet: record the grid as numbers"
                )
            kernel.packet_template(g, b, dims, dynamic_lds, 0, cluster)  # checks the shape now
        layout = kernel.layout
        sites: list[tuple[int, int, int]] = []
        args, param_sites = self._param_args(kernel, args)
        grid_sites: list[tuple[int, tuple]] = []
        for axis, p in grid_params:
            self.check_grid_param(kernel.name, axis, p)
            grid_sites.append((axis, (p.name, "grid", 0, "I", kernel.name, f"grid[{axis}]")))
            # the hidden arguments computed from this axis follow it (hsa.abi.hidden_args)
            for kind, off, size in layout.hidden:
                source, k_axis = GEOMETRY_KINDS.get(kind, ("", -1))
                if k_axis != axis or source not in ("block_count", "remainder"):
                    continue
                op = "div" if source == "block_count" else "mod"
                param_sites.append((off, size, (p.name, op, b[axis], _WIDTH_CODE[size],
                                                kernel.name, kind)))

        def slot(arg_index: int, value: Any) -> int | None:
            if isinstance(value, BindingSlot):
                sites.append((layout.explicit[arg_index].offset, value.index, value.offset))
                self._bindings_needed = max(self._bindings_needed, value.index + 1)
                self.check_target(value, value.nbytes, "a dispatch argument")
                return 0
            return None

        vals = layout.values(args, g, b, dims, dynamic_lds, 0, resolve_buffer=slot,
                             device=self.device)
        for value in args:
            if isinstance(value, Buffer):
                self.keep_recorded(value)
        template = layout.struct.pack(*vals)
        for off, _, _ in sites:
            if off % 8:
                raise KernelArgumentError(
                    f"kernel {kernel.name!r}: a pointer argument at kernarg offset {off} is not "
                    f"8-byte aligned: rebuild the kernel"
                )
        # hidden_queue_ptr: patched per lane like a binding (index -1 -> the queue address)
        for off in layout.queue_ptr_offsets:
            sites.append((off, -1, 0))
        for off, width, _ in param_sites:
            if off % width:
                raise KernelArgumentError(
                    f"kernel {kernel.name!r}: a parameter at kernarg offset {off} is not "
                    f"{width}-byte aligned: pass the value at record time"
                )
        self.use_params([self._declared_params()[d[0]] for _, _, d in param_sites]
                        + [p for _, p in grid_params])
        self._ops.append(
            _Dispatch(kernel, g, b, dims, dynamic_lds, template, sites, self._pending_barrier,
                      cluster, param_sites, grid_sites)
        )
        self._pending_barrier = False
        self.dispatches += 1

    def _param_args(self, kernel: HsaKernel, args: Sequence[Any]) -> tuple[Any, list]:
        """`args` with a zero in place of each placeholder, and the placeholders' kernarg
        sites: (offset, width, derivation). A placeholder stands for a by-value argument of
        its kind: cb.param for an integer of any width, cb.scalar for a slot of its dtype's
        size (a float scalar also for an untyped integer slot: IREE's i32 constants)."""
        if not any(isinstance(a, Param) for a in args):
            return args, []
        explicit = kernel.layout.explicit
        out, sites = list(args), []
        for i, v in enumerate(args):
            if not isinstance(v, Param) or i >= len(explicit):
                continue  # a wrong count: layout.values names it
            a = explicit[i]
            dt = v.dtype
            what = f"kernel {kernel.name!r} argument {i} {a.name!r} ({a.type_name or a.code})"
            if a.kind != "value":
                raise KernelArgumentError(
                    f"{what} is not a by-value number: a placeholder cannot stand for it"
                )
            if dt is None or dt.kind in "iu":
                if a.is_float:
                    raise KernelArgumentError(
                        f"{what} is a float: use cb.scalar({v.name!r}, np.float{8 * a.size})"
                    )
                if dt is not None and dt.itemsize != a.size:
                    raise KernelArgumentError(
                        f"{what} has {a.size} bytes, parameter {v.name!r} is {dt.name}"
                    )
                code = a.code
            else:
                if dt.itemsize != a.size or (not a.is_float and a.strict_type):
                    raise KernelArgumentError(
                        f"{what} does not take parameter {v.name!r} of {dt.name}: use a "
                        f"scalar of the argument's type"
                    )
                code = _FLOAT_CODE[dt.itemsize]
            self.check_param(v)
            out[i] = 0.0 if a.is_float else 0
            sites.append((a.offset, a.size, (v.name, "arg", 0, code, kernel.name, a.name)))
        return out, sites

    def barrier(self) -> None:
        """Everything recorded after this waits for everything recorded before it."""
        self._check_recording()
        self._pending_barrier = True

    def fill(self, buffer: Any, value: Any, nbytes: int | None = None) -> None:
        """Fill with a 1-, 2- or 4-byte pattern: the library `fill` kernel where the agent
        runs kernels and the size is known, else a host operation (see the module doc)."""
        pattern, nbytes = self.check_fill(buffer, value, nbytes)
        self._note_binding(buffer)
        word = _fill_word(pattern, nbytes, buffer)
        blits = self.device.blit_kernels() if word is not None else None
        if blits is not None:
            assert nbytes is not None  # a fill word exists only for a known length
            self._pending_barrier = True  # after what came before, before what comes after
            n = nbytes // 4
            self.dispatch(blits["fill"], n, 256, (buffer, word, np.uint32(n)))
        else:
            self._ops.append(_HostOp("fill", buffer, bytes(pattern), nbytes))
        self._pending_barrier = True  # later dispatches see the fill

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        """Copy `nbytes`: the library `copy` kernel (32-bit words) where the agent runs
        kernels and everything is 4-byte aligned, else a host operation."""
        nbytes = self.check_copy(dst, src, nbytes)
        self._note_binding(dst)
        self._note_binding(src)
        aligned = nbytes % 4 == 0 and all(_offset(x) % 4 == 0 for x in (dst, src))
        blits = self.device.blit_kernels() if aligned and nbytes else None
        if blits is not None:
            self._pending_barrier = True
            n = nbytes // 4
            self.dispatch(blits["copy"], n, 256, (dst, src, np.uint32(n)))
        else:
            self._ops.append(_HostOp("copy", dst, src, nbytes))
        self._pending_barrier = True

    def _note_binding(self, value: Any) -> None:
        if isinstance(value, BindingSlot):
            self._bindings_needed = max(self._bindings_needed, value.index + 1)

    # --- finalize ------------------------------------------------------------------------
    def finalize(self) -> HsaCommandBuffer:
        if self._segments is not None:
            return self
        segments: list[Any] = []
        run: list[_Dispatch] = []
        for op in self._ops:
            if isinstance(op, _Dispatch):
                run.append(op)
            else:
                if run:
                    segments.append(self._build(run))
                    run = []
                segments.append(op)
        if run or not segments:
            segments.append(self._build(run))
        self._segments = segments
        if len(segments) == 1 and isinstance(segments[0], _Segment) and segments[0].dispatches:
            self._only = segments[0]
        return self

    def _build(self, run: list[_Dispatch]) -> _Segment:
        n = len(run)
        kernarg_offsets = np.zeros(n, np.uint64)
        pieces: list[bytes] = []
        pos = 0
        site_words, site_binding, site_offset = [], [], []
        # the binding table at submit: the bindings, the queue address, then the values of
        # the parameter derivations (param_index: derivation -> its place after the queue)
        queue_index = self._bindings_needed
        table_base = queue_index + 1
        param_index: dict[tuple, int] = {}
        narrow: dict[int, list[tuple[int, int]]] = {}
        grid_words: list[int] = []
        grid_src: list[int] = []
        for i, d in enumerate(run):
            for axis, derivation in d.grid_sites:
                grid_words.append(i * 16 + _GRID_WORD + axis)
                grid_src.append(table_base + param_index.setdefault(derivation,
                                                                    len(param_index)))
        # Kernels cannot write their kernarg segment, so dispatches whose blocks would be
        # byte-identical after patching (same template, same binding sites) share one block.
        shared: dict[tuple, int] = {}
        for i, d in enumerate(run):
            key = (d.template, tuple(d.sites), d.kernel.layout.alignment,
                   tuple(d.param_sites))
            if key in shared:
                kernarg_offsets[i] = shared[key]
                continue
            align = d.kernel.layout.alignment
            pad = (-pos) % align
            if pad:
                pieces.append(bytes(pad))
                pos += pad
            kernarg_offsets[i] = shared[key] = pos
            for off, binding, boff in d.sites:
                site_words.append((pos + off) // 8)
                site_binding.append(queue_index if binding < 0 else binding)
                site_offset.append(boff)
            for off, width, derivation in d.param_sites:
                src = table_base + param_index.setdefault(derivation, len(param_index))
                if width == 8:  # with the bindings, in the same write
                    site_words.append((pos + off) // 8)
                    site_binding.append(src)
                    site_offset.append(0)
                else:
                    narrow.setdefault(width, []).append(((pos + off) // width, src))
            pieces.append(d.template)
            pos += len(d.template)
        pos += (-pos) % 16
        template = np.frombuffer(b"".join(pieces).ljust(pos, b"\0"), np.uint8).copy()
        if n and self.device.target == "gfx1250":
            barrier = np.array([d.barrier for d in run], bool)
            barrier[0] = True  # lane order: wait for the previous submission
            # gfx1250: each dispatch's own packet (the extended one, or classic where a grid
            # has partial workgroups), the barrier bit set per dispatch
            disp = np.frombuffer(b"".join(
                d.kernel.packet_template(d.grid, d.block, d.dims, d.dynamic_lds, 0, d.cluster)
                for d in run), packets.PACKET).copy()
            head = disp.view(np.uint16).reshape(n, 32)
            head[:, 0] = (head[:, 0] & ~np.uint16(0x100)) | (barrier.astype(np.uint16) << 8)
        elif n:
            barrier = np.array([d.barrier for d in run], bool)
            barrier[0] = True  # lane order: wait for the previous submission
            disp = packets.kernel_dispatch_batch(
                workgroup_size=np.array([d.block for d in run], np.int64),
                grid_size=np.array([d.grid for d in run], np.int64),
                dims=np.array([d.dims for d in run], np.int64),
                private_segment_size=np.array(
                    [d.kernel.private_segment_size for d in run], np.int64
                ),
                group_segment_size=np.array(
                    [d.kernel.group_segment_size + d.dynamic_lds for d in run], np.int64
                ),
                kernel_object=np.array([d.kernel.kernel_object for d in run], np.uint64),
                kernarg_address=16,
                barrier=barrier,
            ).view(packets.PACKET)
        else:
            disp = np.zeros(0, packets.PACKET)
            barrier = np.zeros(0, bool)
        if n and barrier[-1]:
            block = disp.copy()
        else:  # a trailing barrier-AND completes after everything and carries the signal
            tail = packets.barrier_and_batch(dep_signals=(), barrier=True, count=1).view(
                packets.PACKET
            )
            block = np.concatenate([disp, tail])
        # Kept as published but for the first header, INVALID here (the header words
        # apart too): Ring.publish_ready copies the block in one piece, then stores that
        # one header, which an in-order processor must pass to reach any other packet.
        headers = block.view(np.uint32).reshape(len(block), 16)[:, 0].copy()
        block.view(np.uint32).reshape(len(block), 16)[0, 0] = packets.INVALID_HEADER
        template_bytes = memoryview(template)
        return _Segment(
            block=block,
            block_view=memoryview(block.view(np.uint8)).cast("B"),
            headers=headers,
            header_list=headers.tolist(),
            words=block.view(np.uint64).reshape(len(block), 8),
            sites=list(zip(site_words, site_binding, site_offset, strict=True)),
            template_bytes=template_bytes,
            template_words=template_bytes.cast("Q") if template.size else None,
            block_words=memoryview(block.view(np.uint8)).cast("Q"),
            row_offsets=[int(o) for o in kernarg_offsets],
            dispatch_rows=np.arange(n),
            kernarg_offsets=kernarg_offsets,
            template=template,
            site_words=np.array(site_words, np.int64),
            site_binding=np.array(site_binding, np.int64),
            site_offset=np.array(site_offset, np.uint64),
            last_row=len(block) - 1,
            dispatches=n,
            symbols=[d.kernel.name for d in run],
            kernels=list({id(d.kernel): d.kernel for d in run}.values()),
            kernarg_sizes=np.array([len(d.template) for d in run], np.uint32),
            param_keys=list(param_index),
            narrow_sites=[(w, np.array([x[0] for x in v], np.int64),
                           np.array([x[1] for x in v], np.int64))
                          for w, v in sorted(narrow.items())],
            grid_words=np.array(grid_words, np.int64),
            grid_src=np.array(grid_src, np.int64),
        )

    @property
    def packets(self) -> list[np.ndarray]:
        """The packet blocks (one per segment) as they were last submitted."""
        return [s.full_block() for s in (self._segments or []) if isinstance(s, _Segment)]

    @property
    def segments(self) -> int:
        return len(self._segments or [])

    # --- replay --------------------------------------------------------------------------
    def _binding_addresses(self, bindings: Sequence[Any], queue_address: int) -> tuple:
        """The binding addresses as ints, then the queue address (binding index -1)."""
        self.check_bindings(bindings, self._bindings_needed)
        return (*[b.address for b in bindings], queue_address)

    def _submit(
        self, lane: Any, bindings: Sequence[Any], wait: Sequence[TimelinePoint],
        params: Any = None,
    ) -> TimelinePoint:
        segments = self._segments
        if segments is None:
            self.check_finalized()  # raises: not finalized
            raise AssertionError("unreachable")
        addrs = self._binding_addresses(bindings, lane.queue.handle)
        values = self.check_params(params)
        seg = self._only
        if (seg is not None and not values and not wait and self.device.timer is None
                and _TRACE.sink is None):  # the short way: one kept instance, published
            with self._replay_lock, lane.lock:
                value = lane.submitted + 1
                self._publish_segment(lane, seg, addrs, value, None)
                lane.submitted = value
                return TimelinePoint(lane.index, value, lane)
        # every parameter's bits for every segment, before anything is published
        if values:
            tables = [
                addrs + tuple(_derive(k, values) for k in seg.param_keys)
                if seg.__class__ is _Segment and seg.param_keys else addrs
                for seg in segments
            ]
        else:  # no parameters: every segment's table is the bindings'
            tables = [addrs] * len(segments)
        with self._replay_lock:
            return self._replay(lane, bindings, tables, wait)

    def _replay(self, lane: Any, bindings: Sequence[Any], tables: list,
                wait: Sequence[TimelinePoint]) -> TimelinePoint:
        first = True
        value = lane.submitted
        for seg, addrs in zip(self._segments or (), tables, strict=True):
            if seg.__class__ is _HostOp:
                lane.wait(lane.submitted, self.device.default_timeout)
                self._run_host_op(seg, bindings)
                continue
            # built before the lane's lock: they may publish on another lane under its lock
            pre, proxies = lane.prepare_waits(wait) if first and wait else (None, None)
            with lane.lock:  # value, kernarg block, patch, publish, counter: one step
                value = lane.submitted + 1
                self._publish_segment(lane, seg, addrs, value, pre)
                if proxies:
                    lane.hold_proxies(value, proxies)
                lane.submitted = value
            first = False
        return TimelinePoint(lane.index, value, lane)

    def _publish_segment(self, lane: Any, seg: _Segment, addrs: tuple, value: int,
                         pre: np.ndarray | None) -> None:
        """One segment's packets for `value`: a kept instance's (the instance path) or a
        fresh kernarg block's (the ring path)."""
        # no waits in front, no timer, no trace sink: what publish_rows can do alone
        plain = pre is None and self.device.timer is None and _TRACE.sink is None
        if plain and seg.dispatches and self._publish_instance(lane, seg, addrs, value):
            return
        seg.last_block = seg.last_rows = None
        size = seg.template.size
        off = lane.kernargs.allocate(size, value) if size else 0
        self._patch_for(seg, addrs)
        if size:  # the patched template into this submission's own kernarg block
            lane.kernarg_view[off : off + size] = seg.template_bytes
        rows = seg.dispatches
        base = lane.kernarg_address + off
        if plain and rows > SMALL_ROWS and len(seg.block) <= lane.ring.size:
            # the addresses and the signal set on the way into the ring (no patch of the
            # block first)
            seg.last_rows = (base, lane.signal)
            lane.ring.publish_rows(seg.block_view, seg.header_list[0], base,
                                   seg.kernarg_offsets, seg.last_row, lane.signal)
            return
        bw = seg.block_words
        if rows <= SMALL_ROWS:  # dispatch rows are the first ones
            for row, k_off in enumerate(seg.row_offsets):
                bw[row * 8 + _KARG_WORD] = base + k_off
        else:
            np.add(seg.kernarg_offsets, np.uint64(base), out=seg.words[:rows, _KARG_WORD])
        bw[seg.last_row * 8 + _SIGNAL_WORD] = lane.signal
        block = seg.block
        headers: Any = seg.header_list
        if rows > SMALL_ROWS:
            headers = seg.headers
        if pre is not None:  # the waits go first, in the same block
            pre_words = pre.view(np.uint32).reshape(len(pre), 16)
            headers = np.concatenate([pre_words[:, 0], seg.headers])
            block = np.concatenate([pre, block])
            block.view(np.uint32).reshape(len(block), 16)[: len(pre), 0] = (
                packets.INVALID_HEADER
            )
        timer = self.device.timer
        if timer is not None and rows:  # per-dispatch device time (hsa_backend.timing)
            timer.publish_replay(lane, block, headers, len(block) - len(seg.block), rows,
                                 seg.symbols, seg.kernels)
        elif _TRACE.sink is not None:
            self._publish_traced(lane, seg, block, headers, off, base, addrs)
        elif pre is None and len(block) <= lane.ring.size:
            lane.ring.publish_ready(block, seg.header_list[0])  # one copy, one header
        else:
            lane.publish_block(block, headers)

    def _publish_instance(self, lane: Any, seg: _Segment, addrs: tuple, value: int) -> bool:
        """The instance path: publish the kept instance of `seg` for (lane, addrs), made
        now if the table came before (no kernarg copy, no patch); False when there is none
        (the caller takes the ring path). Under the replay lock and the lane's lock."""
        instances = seg.instances
        key = (lane, addrs)
        inst = instances.pop(key, None)
        if inst is None:
            inst = self._instance(lane, seg, addrs) if self._seen(seg, lane, addrs) else None
            if inst is None:
                return False
        else:  # the most recently used goes last
            instances[key] = inst
        inst.value = value
        if inst.block is None:
            seg.last_block, seg.last_rows = None, (inst.address, inst.signal)
            lane.ring.publish_rows(seg.block_view, seg.header_list[0], inst.address,
                                   seg.kernarg_offsets, seg.last_row, inst.signal)
        else:
            seg.last_block, seg.last_rows = inst.block, None
            lane.ring.publish_ready(inst.view, seg.header_list[0])
        return True

    @staticmethod
    def _patch_for(seg: _Segment, addrs: tuple) -> None:
        """The segment's template and parameter grids patched for the table `addrs`
        (nothing to do when they already are)."""
        if seg.param_keys and addrs != seg.patched_for:  # the parameters' packet fields
            _patch_grids(seg, addrs)
        if seg.template.size:
            if (seg.sites or seg.narrow_sites) and addrs != seg.patched_for:  # the patch
                _patch_template(seg, addrs)
                seg.patched_for = addrs

    @staticmethod
    def _seen(seg: _Segment, lane: Any, addrs: tuple) -> bool:
        """Whether (lane, addrs) came recently (it is noted now): a table is kept as an
        instance from its second submission, so tables bound once (fresh buffers every
        time) cost no instance, only the ring path."""
        seen = seg.seen
        key = (lane, addrs)
        if key in seen:
            return True
        if len(seen) >= 2 * MAX_INSTANCES:
            del seen[next(iter(seen))]  # the oldest
        seen[key] = None
        return False

    def _instance(self, lane: Any, seg: _Segment, addrs: tuple) -> _Instance | None:
        """A kept instance of `seg` for (lane, addrs): a new one, or the least recently
        used idle one of this lane re-patched; None when neither may be had (the caller
        takes the ring path). Called under the replay lock and the lane's lock."""
        instances = seg.instances
        inst = None
        if len(instances) >= MAX_INSTANCES:
            done = lane.completed()
            for key, old in instances.items():
                if key[0] is lane and old.value <= done:
                    inst = old
                    del instances[key]
                    break
            if inst is None:
                return None
        else:
            inst = self._new_instance(lane, seg)
            if inst is None:
                return None
        self._patch_for(seg, addrs)
        size = seg.template.size
        if size:
            inst.memory[:size] = seg.template
        block = inst.block
        if block is not None:  # its own packets: the parameter grids differ per table
            np.copyto(block, seg.block)  # the parameter grids with it
            block_words = block.view(np.uint64).reshape(len(block), 8)
            np.add(seg.kernarg_offsets, np.uint64(inst.address),
                   out=block_words[: seg.dispatches, _KARG_WORD])
            block_words[seg.last_row, _SIGNAL_WORD] = lane.signal
        instances[(lane, addrs)] = inst
        return inst

    def _new_instance(self, lane: Any, seg: _Segment) -> _Instance | None:
        """Kernarg memory (the template's bytes and the ring's slack: a kernel's widened
        load past its last argument stays inside) from the lane's kept blocks, and a packet
        block, for an instance; None when the lane has no room left."""
        size = seg.template.size + RING_SLACK
        if len(seg.block) > lane.ring.size:
            return None
        off = lane.kept.take(size)
        if off is None:
            return None
        memory = lane.kernarg_memory[off : off + size]
        memory.fill(0)
        finalizer = self.__dict__.get("_instances_finalizer")
        if finalizer is None:
            held: list = []
            done = weakref.finalize(self, _drop_instances, held)
            done.atexit = False
            self._instances_finalizer = (held, done)
        else:
            held = finalizer[0]
        # a packet block of its own only where the grids are parameters (see _Instance)
        own = seg.block.copy() if seg.grid_words.size else None
        inst = _Instance(lane.kernarg_address + off, memory, own, size, lane.signal)
        held.append((lane, off, inst))
        return inst

    @staticmethod
    def _publish_traced(
        lane: Any,
        seg: _Segment,
        block: np.ndarray,
        headers: Any,
        kernarg_off: int,
        base: int,
        addrs: tuple,
    ) -> None:
        """A replay while a trace sink is active: the sink learns each kernel's symbol (so
        packet-trace names the packets of the block by kernel_object). A block of one
        dispatch goes out as one packet record with its kernarg bytes and name. A larger
        one, as published (no wait packets in front, one ring's worth), goes out as the
        segment's block template (once per sink) and one small block replay record: its
        kernarg base, completion signal and binding addresses, no copy of the packets."""
        sink = _TRACE.sink
        if sink is None:  # switched off meanwhile
            lane.publish_block(block, headers)
            return
        if len(block) == 1 and seg.dispatches == 1:
            announce_all(sink, seg.kernels)
            kernel = seg.kernels[0]
            start = kernarg_off + int(seg.kernarg_offsets[0])
            kernarg = lane.kernarg_memory[start : start + kernel.layout.size].tobytes()
            packet = struct.pack("<I", int(headers[0])) + block.tobytes()[4:]
            lane.ring.publish(packet, kernarg=kernarg, symbol=kernel.name)
            return
        replay = getattr(sink, "block_replay", None)
        if (replay is None or block is not seg.block or len(block) > lane.ring.size
                or seg.param_keys):  # parameters: the template's values would be stale
            announce_all(sink, seg.kernels)  # wait packets in front, a huge block, an old sink
            lane.publish_block(block, headers)
            return
        ref = seg.trace_sink  # the sink last told about the template (and so the kernels)
        if ref is not None and ref() is sink:
            template_id = seg.trace_template.template_id
        else:
            template_id = announce_template(sink, seg)
        lane.ring.publish_many(block, headers, replay, (template_id, base, lane.signal, addrs))

    def _run_host_op(self, op: _HostOp, bindings: Sequence[Any]) -> None:
        dev = self.device

        def resolve(x: Any) -> Any:
            if isinstance(x, BindingSlot):
                buf = bindings[x.index]
                return buf.view(x.offset, x.nbytes) if x.offset or x.nbytes is not None else buf
            return x

        dst = resolve(op.dst)
        if op.kind == "fill":
            nbytes = dst.nbytes if op.nbytes is None else op.nbytes
            dst._check_range(0, nbytes)
            dev._fill_now(dst.address, nbytes, op.src)
        else:
            src = resolve(op.src)
            dst._check_range(0, op.nbytes)
            src._check_range(0, op.nbytes)
            dev.provider.memory_copy(dst.address, src.address, op.nbytes)


def _drop_instances(held: list) -> None:
    """A command buffer's finalizer: its instances' kernarg blocks go back to their lanes,
    reused once each lane has completed the last submission that read them."""
    for lane, off, inst in held:
        lane.kept.give(off, inst.nbytes, inst.value)


def _patch_template(seg: _Segment, addrs: tuple) -> None:
    """Write binding address + offset into every patch site of the segment's template, and
    the parameters' bits (`addrs` goes on with the values of seg.param_keys): the u64 sites
    in one write, each narrower width in one more."""
    if len(seg.sites) <= SMALL_SITES and not seg.narrow_sites:
        tw = seg.template_words
        for word, binding, plus in seg.sites:
            tw[word] = (addrs[binding] + plus) & _M64
        return
    table = np.array(addrs, np.uint64)  # one vectorized write for many sites
    if seg.site_words.size:
        seg.template.view(np.uint64)[seg.site_words] = table[seg.site_binding] + seg.site_offset
    for width, index, src in seg.narrow_sites:
        seg.template.view(_NARROW[width])[index] = table[src]


def _patch_grids(seg: _Segment, table: tuple) -> None:
    """The grid_size fields of the packets whose grid axes are parameters."""
    if seg.grid_words.size:
        seg.block.view(np.uint32)[seg.grid_words] = np.array(table, np.uint64)[seg.grid_src]


_NARROW = {2: np.uint16, 4: np.uint32}


def _derive(key: tuple, values: dict) -> int:
    """The bits a parameter site stores: key = (name, op, operand, struct code, kernel,
    what). op "arg": the value in the slot's code; "grid": a grid axis (checked 1..2**32-1);
    "div"/"mod": the hidden block count / remainder of that axis for a block of `operand`."""
    name, op, operand, code, kernel, what = key
    v = values[name]
    if op == "grid":
        if not 1 <= v <= MAX_SIZE:
            raise KernelArgumentError(
                f"parameter {name!r} = {v} makes kernel {kernel!r}'s {what} invalid: a grid "
                f"axis counts 1..{MAX_SIZE} work-items"
            )
        return v
    if op == "div":
        v = max(v, 1) // operand
    elif op == "mod":
        v = max(v, 1) % operand
    if code in "efd":
        return int.from_bytes(struct.pack("<" + code, v), "little")
    try:
        raw = struct.pack("<" + code, v)
    except struct.error:
        size = struct.calcsize("<" + code)
        try:  # an integer scalar wraps to its slot like an immediate argument's
            raw = struct.pack("<" + code.lower() if v < 0 else "<" + code.upper(), v)
        except struct.error:
            raise KernelArgumentError(
                f"parameter {name!r} = {v} does not fit kernel {kernel!r} argument {what!r} "
                f"({size} bytes): pass a value in range"
            ) from None
    return int.from_bytes(raw, "little")


def _offset(x: Any) -> int:
    return x.offset if isinstance(x, BindingSlot) else int(getattr(x, "address", 0))


def _fill_word(pattern: np.ndarray, nbytes: int | None, target: Any) -> np.float32 | None:
    """The fill pattern (`amdgpu.fill`) widened to one 32-bit word (as the float32 the
    library `fill` kernel takes), or None when the kernel cannot do this fill exactly."""
    if nbytes is None or nbytes <= 0 or nbytes % 4 or _offset(target) % 4:
        return None
    word = np.tile(pattern, 4 // pattern.size).view(np.float32)[0]
    # a signalling NaN could be quieted on its way through a float argument: host fill
    if struct.pack("<f", float(word)) != word.tobytes():
        return None
    return word
