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
from collections.abc import Sequence
from typing import Any

import numpy as np

import packets
from amdgpu.buffer import Buffer
from amdgpu.command_buffer import BindingSlot, Param, split_grid
from amdgpu.hsa_backend import hotpath
from amdgpu.hsa_backend.command_replay import CommandReplay
from amdgpu.hsa_backend.command_segments import (
    FLOAT_CODE,
    GRID_WORD,
    WIDTH_CODE,
    HostOp,
    RecordedDispatch,
    Segment,
)
from amdgpu.hsa_backend.executable import HsaKernel
from amdgpu.hsa_backend.pm4_replay import Pm4Unsupported, build_program, resolve_mode
from ground.errors import KernelArgumentError
from hsa.abi.hidden_args import GEOMETRY_KINDS


class HsaCommandBuffer(CommandReplay):
    def __init__(self, device: Any, mode: str | None = None):
        self.device = device
        # "pm4" or "aql": how replays go (pm4_replay.py says which targets default to PM4)
        self.path, self.path_reason = resolve_mode(mode, device.target)
        self.pm4_program: Any = None  # the resident PM4 buffer (finalize, path "pm4")
        self._ops: list[Any] = []
        self._pending_barrier = False
        self._bindings_needed = 0
        self._segments: list[Any] | None = None
        # the one segment of a buffer that holds dispatches only (no host op): its replays
        # without waits or parameters take _submit's short way (set by finalize)
        self._only: Segment | None = None
        self.dispatches = 0
        # One replay at a time patches the shared kernarg template and packet block and
        # copies them out (into its own kernarg block, into the ring): replays from several
        # threads then each get their own bindings. Taken before a lane's lock, never after.
        # The compiled build's LaneLock where it is loaded (its Submit takes it without a
        # Python call), else a threading.Lock.
        self._replay_lock = (threading.Lock() if hotpath.MODULE is None
                             else hotpath.MODULE.LaneLock())

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
                param_sites.append((off, size, (p.name, op, b[axis], WIDTH_CODE[size],
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
            RecordedDispatch(kernel, g, b, dims, dynamic_lds, template, sites,
                             self._pending_barrier, cluster, param_sites, grid_sites)
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
                code = FLOAT_CODE[dt.itemsize]
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
        word = fill_word(pattern, nbytes, buffer)
        blits = self.device.blit_kernels() if word is not None else None
        if blits is not None:
            assert nbytes is not None  # a fill word exists only for a known length
            self._pending_barrier = True  # after what came before, before what comes after
            n = nbytes // 4
            self.dispatch(blits["fill"], n, 256, (buffer, word, np.uint32(n)))
        else:
            self._ops.append(HostOp("fill", buffer, bytes(pattern), nbytes))
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
            self._ops.append(HostOp("copy", dst, src, nbytes))
        self._pending_barrier = True

    def _note_binding(self, value: Any) -> None:
        if isinstance(value, BindingSlot):
            self._bindings_needed = max(self._bindings_needed, value.index + 1)

    # --- finalize ------------------------------------------------------------------------
    def finalize(self) -> HsaCommandBuffer:
        if self._segments is not None:
            return self
        segments: list[Any] = []
        run: list[RecordedDispatch] = []
        for op in self._ops:
            if isinstance(op, RecordedDispatch):
                run.append(op)
            else:
                if run:
                    segments.append(self._build(run))
                    run = []
                segments.append(op)
        if run or not segments:
            segments.append(self._build(run))
        self._segments = segments
        if len(segments) == 1 and isinstance(segments[0], Segment) and segments[0].dispatches:
            self._only = segments[0]
        if self.path == "pm4":
            self._finalize_pm4(segments)
        return self

    def _finalize_pm4(self, segments: list[Any]) -> None:
        """The resident PM4 buffer of a dispatch-only command buffer (pm4_replay.py); one
        PM4 cannot express stays on AQL, or is refused where PM4 was asked for."""
        seg = segments[0] if isinstance(segments[0], Segment) else None
        run = [op for op in self._ops if isinstance(op, RecordedDispatch)]
        try:
            if seg is None:
                raise Pm4Unsupported("it starts with a host fill/copy operation")
            self.pm4_program = build_program(self.device, seg, run, len(segments) > 1)
            # the program stands as the one segment of hotpath.c's compiled short way: a
            # table bound before publishes its instance's one PM4_IB packet there
            self._only = self.pm4_program
        except Pm4Unsupported as why:
            if not self.path_reason.startswith("auto"):  # PM4 was asked for
                self._segments = None  # still recording: fix it and finalize again
                self._only = None
                raise KernelArgumentError(
                    f"this command buffer cannot replay through PM4 ({self.path_reason}): "
                    f"{why}; record it with mode='aql' or 'auto'") from None
            self.path, self.path_reason = "aql", f"PM4 cannot replay it: {why}"

    def _build(self, run: list[RecordedDispatch]) -> Segment:
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
                grid_words.append(i * 16 + GRID_WORD + axis)
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
        block_view = memoryview(block.view(np.uint8)).cast("B")
        # the compiled lane's form of the block: its distinct rows once each (a replay
        # expands them into the ring); not where parameter grids patch the block per table
        rows = (hotpath.MODULE.Rows(block_view, n)
                if hotpath.MODULE is not None and not grid_words else None)
        return Segment(
            block=block,
            block_view=block_view,
            rows=rows,
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
        return [s.full_block() for s in (self._segments or []) if isinstance(s, Segment)]

    @property
    def segments(self) -> int:
        return len(self._segments or [])


def _offset(x: Any) -> int:
    return x.offset if isinstance(x, BindingSlot) else int(getattr(x, "address", 0))


def fill_word(pattern: np.ndarray, nbytes: int | None, target: Any) -> np.float32 | None:
    """The fill pattern (`amdgpu.fill`) widened to one 32-bit word (as the float32 the
    library `fill` kernel takes), or None when the kernel cannot do this fill exactly."""
    if nbytes is None or nbytes <= 0 or nbytes % 4 or _offset(target) % 4:
        return None
    word = np.tile(pattern, 4 // pattern.size).view(np.float32)[0]
    # a signalling NaN could be quieted on its way through a float argument: host fill
    if struct.pack("<f", float(word)) != word.tobytes():
        return None
    return word
