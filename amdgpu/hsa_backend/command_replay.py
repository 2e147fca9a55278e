"""Replaying a finalized command buffer on the HSA path (HsaCommandBuffer's submit): the
short way of a one-segment buffer (a kept instance, published; hotpath.c's Submit is its
compiled form), the segment-by-segment way with waits, host operations, a timer or a trace
sink, and the kept instances per lane."""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

import packets
from amdgpu.command_buffer import BindingSlot, CommandBuffer
from amdgpu.device import TimelinePoint
from amdgpu.hsa_backend.command_patching import derive, patch_grids, patch_template
from amdgpu.hsa_backend.command_segments import (
    KARG_WORD,
    RING_SLACK,
    SIGNAL_WORD,
    SMALL_ROWS,
    HostOp,
    KeptInstance,
    Segment,
)
from amdgpu.hsa_backend.python_lane import PythonLane
from amdgpu.hsa_backend.tracing import announce_all, announce_template

_TRACE = packets.trace.STATE  # `.sink`: the active trace sink or None
# Replay instances (KeptInstance): at most this many per segment (over its lanes); past that,
# or when the lane's kept kernarg blocks are full, a replay with a new table re-patches an
# idle instance of its lane, or takes the ring path (a fresh kernarg block every time).
MAX_INSTANCES = 8


def _rows_of(lane: Any, seg: Segment) -> Any:
    """What the lane's submit_rows reads for `seg`: its Rows on a compiled lane (the
    compiled Submit reads the same), else the block itself (packets.Ring's publish_rows)."""
    return seg.block_view if seg.rows is None or lane.aql.__class__ is PythonLane else seg.rows


class CommandReplay(CommandBuffer):
    """The replay half of HsaCommandBuffer; its recording half (command_buffer.py) sets
    these fields, finalize the last two."""

    device: Any  # the HsaDevice
    _bindings_needed: int  # binding slots the recorded commands use
    _replay_lock: threading.Lock  # one replay at a time patches the shared template
    _segments: list[Any] | None  # Segments and HostOps, in order (None: not finalized)
    # the one segment of a dispatch-only buffer (the short way), or its PM4 program
    _only: Any
    pm4_program: Any  # pm4_replay.Pm4Program where replays take PM4 (None: AQL)

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
        program = self.pm4_program
        if program is not None:
            if not lane.aql.timed:  # one PM4_IB packet
                keys = program.seg.param_keys
                table = addrs + tuple(derive(k, values) for k in keys) if keys else addrs
                with self._replay_lock:
                    point = program.submit(lane, table, wait, _TRACE.sink)
                if point is not None:
                    return point  # else every PM4 instance of the lane is in flight
            seg = None  # the AQL packets, segment by segment (`_only` is the program)
        if (seg is not None and not values and not wait
                and not lane.aql.watched):  # the short way: one kept instance, published
            with self._replay_lock, lane.aql as value:
                self._publish_segment(lane, seg, addrs, value, None)
            return TimelinePoint(lane.index, value, lane)
        # every parameter's bits for every segment, before anything is published
        if values:
            tables = [
                addrs + tuple(derive(k, values) for k in seg.param_keys)
                if seg.__class__ is Segment and seg.param_keys else addrs
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
            if seg.__class__ is HostOp:
                lane.wait(lane.submitted, self.device.default_timeout)
                self._run_host_op(seg, bindings)
                continue
            # built before the lane's lock: they may publish on another lane under its lock
            pre, proxies = lane.prepare_waits(wait) if first and wait else (None, None)
            with lane.aql as taken:  # value, kernarg block, patch, publish, counter: one step
                self._publish_segment(lane, seg, addrs, taken, pre)
                if proxies:
                    lane.hold_proxies(taken, proxies)
            value = taken
            first = False
        return TimelinePoint(lane.index, value, lane)

    def _publish_segment(self, lane: Any, seg: Segment, addrs: tuple, value: int,
                         pre: np.ndarray | None) -> None:
        """One segment's packets for `value`: a kept instance's (the instance path) or a
        fresh kernarg block's (the ring path)."""
        # no waits in front, the lane's mode plain (no timer, no trace sink): what
        # submit_rows can do alone
        plain = pre is None and not lane.aql.watched
        if plain and seg.dispatches and self._publish_instance(lane, seg, addrs, value):
            return
        seg.last_block = seg.last_rows = None
        size = seg.template.size
        off = lane.aql.allocate(size, value) if size else 0
        self._patch_for(seg, addrs)
        if size:  # the patched template into this submission's own kernarg block
            lane.kernarg_view[off : off + size] = seg.template_bytes
        rows = seg.dispatches
        base = lane.kernarg_address + off
        if plain and rows > SMALL_ROWS and len(seg.block) <= lane.queue.size:
            # the addresses and the signal set on the way into the ring (no patch of the
            # block first)
            seg.last_rows = (base, lane.signal)
            lane.submit_rows(_rows_of(lane, seg), seg.header_list[0], base,
                             seg.kernarg_offsets, seg.last_row, lane.signal)
            return
        bw = seg.block_words
        if rows <= SMALL_ROWS:  # dispatch rows are the first ones
            for row, k_off in enumerate(seg.row_offsets):
                bw[row * 8 + KARG_WORD] = base + k_off
        else:
            np.add(seg.kernarg_offsets, np.uint64(base), out=seg.words[:rows, KARG_WORD])
        bw[seg.last_row * 8 + SIGNAL_WORD] = lane.signal
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
        elif pre is None and len(block) <= lane.queue.size:
            lane.submit_block(block, seg.header_list[0])  # one copy, one header
        else:
            lane.publish_block(block, headers)

    def _publish_instance(self, lane: Any, seg: Segment, addrs: tuple, value: int) -> bool:
        """The instance path: publish the kept instance of `seg` for (lane, addrs), made
        now if the table came before (no kernarg copy, no patch); False when there is none
        (the caller takes the ring path). Under the replay lock and the lane's lock."""
        instances = seg.instances
        key = (lane, addrs)
        inst = instances.get(key)
        if inst is None:
            inst = self._instance(lane, seg, addrs) if self._seen(seg, lane, addrs) else None
            if inst is None:
                return False
        inst.value = value  # also its place in the lane's use order (values only grow)
        if inst.block is None:
            seg.last_block, seg.last_rows = None, (inst.address, inst.signal)
            lane.submit_rows(_rows_of(lane, seg), seg.header_list[0], inst.address,
                             seg.kernarg_offsets, seg.last_row, inst.signal)
        else:
            seg.last_block, seg.last_rows = inst.block, None
            lane.submit_block(inst.view, seg.header_list[0])
        return True

    @staticmethod
    def _patch_for(seg: Segment, addrs: tuple) -> None:
        """The segment's template and parameter grids patched for the table `addrs`
        (nothing to do when they already are)."""
        if seg.param_keys and addrs != seg.patched_for:  # the parameters' packet fields
            patch_grids(seg, addrs)
        if seg.template.size:
            if (seg.sites or seg.narrow_sites) and addrs != seg.patched_for:  # the patch
                patch_template(seg, addrs)
                seg.patched_for = addrs

    @staticmethod
    def _seen(seg: Segment, lane: Any, addrs: tuple) -> bool:
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

    def _instance(self, lane: Any, seg: Segment, addrs: tuple) -> KeptInstance | None:
        """A kept instance of `seg` for (lane, addrs): a new one, or the least recently
        used idle one of this lane re-patched; None when neither may be had (the caller
        takes the ring path). Called under the replay lock and the lane's lock."""
        instances = seg.instances
        inst = None
        if len(instances) >= MAX_INSTANCES:
            done = lane.completed()
            idle = [(old.value, key) for key, old in instances.items()
                    if key[0] is lane and old.value <= done]
            if not idle:
                return None
            # the least recently used: the lowest value (each use takes a new one)
            inst = instances.pop(min(idle, key=lambda x: x[0])[1])
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
                   out=block_words[: seg.dispatches, KARG_WORD])
            block_words[seg.last_row, SIGNAL_WORD] = lane.signal
        instances[(lane, addrs)] = inst
        return inst

    def _new_instance(self, lane: Any, seg: Segment) -> KeptInstance | None:
        """Kernarg memory (the template's bytes and the ring's slack: a kernel's widened
        load past its last argument stays inside) from the lane's kept blocks, and a packet
        block, for an instance; None when the lane has no room left."""
        size = seg.template.size + RING_SLACK
        if len(seg.block) > lane.queue.size:
            return None
        off = lane.kept.take(size)
        if off is None:
            return None
        memory = lane.kernarg_memory[off : off + size]
        memory.fill(0)
        finalizer = self.__dict__.get("_instances_finalizer")
        if finalizer is None:
            held: list = []
            done = weakref.finalize(self, drop_instances, held)
            done.atexit = False
            self._instances_finalizer = (held, done)
        else:
            held = finalizer[0]
        # a packet block of its own only where the grids are parameters (see KeptInstance)
        own = seg.block.copy() if seg.grid_words.size else None
        inst = KeptInstance(lane.kernarg_address + off, memory, own, size, lane.signal)
        held.append((lane, off, inst))
        return inst

    @staticmethod
    def _publish_traced(
        lane: Any,
        seg: Segment,
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
            lane.publish(packet, kernarg=kernarg, symbol=kernel.name)
            return
        replay = getattr(sink, "block_replay", None)
        if (replay is None or block is not seg.block or len(block) > lane.queue.size
                or seg.param_keys):  # parameters: the template's values would be stale
            announce_all(sink, seg.kernels)  # wait packets in front, a huge block, an old sink
            lane.publish_block(block, headers)
            return
        ref = seg.trace_sink  # the sink last told about the template (and so the kernels)
        if ref is not None and ref() is sink:
            template_id = seg.trace_template.template_id
        else:
            template_id = announce_template(sink, seg)
        lane.publish_block(block, headers, replay, (template_id, base, lane.signal, addrs))

    def _run_host_op(self, op: HostOp, bindings: Sequence[Any]) -> None:
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


def drop_instances(held: list) -> None:
    """A command buffer's finalizer: its instances' kernarg blocks go back to their lanes,
    reused once each lane has completed the last submission that read them."""
    for lane, off, inst in held:
        lane.kept.give(off, inst.nbytes, inst.value)
