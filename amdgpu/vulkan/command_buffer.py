"""Command buffers: record once, replay with new bindings without re-recording.

Recording (`dispatch`, `fill`, `copy`, `barrier`) only stores operations; Vulkan commands
are written into a VkCommandBuffer when an *instance* is first needed. The parts, one
module each:
- `command_plan`: the operations and, at finalize, the plan every replay follows (baked
  slots, binding-table patches, least slot sizes, barrier sides);
- `command_recording`: one instance recorded from the plan (`record`);
- `command_bindings`: the binding strategies, one per kernel path: `bda` binding tables
  (u64 device addresses in mapped memory, rewritten with numpy at replay; identical
  binding tuples share one table), update-after-bind descriptor sets (patched at replay,
  one vkUpdateDescriptorSets call), and descriptors baked at record time (push
  descriptors, which live in the command buffer; plain descriptor sets, whose update would
  invalidate it), for which an instance is keyed by the buffers bound to the slots they
  use: replay with the same buffers reuses it, new buffers record a new instance (kept in
  a small LRU, so ping-ponging is free after two). Fills and copies on a binding slot are
  keyed the same way.
Parameters (`cb.param`, `cb.scalar`, filled by `submit(..., params=...)`): a grid axis
that is a parameter makes its dispatch a vkCmdDispatchIndirect whose group counts live in
the instance's host-visible indirect buffer, rewritten at submit (no re-record). A scalar
parameter is a push-constant word, which Vulkan copies into the command buffer when it is
recorded: an instance is therefore keyed by its scalar values as well, so a new value
records one more instance (the LRU keeps MAX_KEYS; values seen before replay for free).
This module holds the CommandBuffer itself: recording calls, finalize, and the instances
(several submissions may be in flight: each takes an idle instance of its key, or records
one more, up to MAX_IN_FLIGHT, recycled when its timeline value completes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, is_, le
from typing import TYPE_CHECKING, Any

import numpy as np

from amdgpu.buffer import Buffer, Lifetime, owner_token
from amdgpu.command_buffer import BindingSlot, Param, split_grid
from amdgpu.command_buffer import CommandBuffer as CommandBufferAPI
from amdgpu.device import TimelinePoint
from amdgpu.fill import fill_word
from ground.errors import DeviceError, KernelArgumentError

from .command_bindings import patch_table, write_late_sets
from .command_plan import (
    Barrier,
    BufferRef,
    Copy,
    Dispatch,
    Fill,
    Plan,
    aliased_bindings,
    barrier_sides,
    dependencies,
    locate_bound,
    memory_buffers,
    param_words,
    plan,
    recorded_form,
)
from .command_plan import to_u32 as to_u32
from .command_recording import Instance, free_instance, record
from .executable import Kernel
from .fast_submit import MODULE as _COMPILED
from .sync import dependency_struct

if TYPE_CHECKING:  # pragma: no cover
    from .context import VulkanContext

MAX_IN_FLIGHT = 4  # instances per key
# A submit's checks over its bindings, one C-level pass each (map over attrgetter):
_OWNER = attrgetter("_life.owner")  # the device's token while alive (buffer.Lifetime)
_NBYTES = attrgetter("nbytes")
_UID = attrgetter("handle.uid")  # the allocation
_ADDRESS = attrgetter("address")
_SEQUENCES = (list, tuple)  # what bindings may be
MAX_KEYS = 8  # distinct binding keys kept recorded per command buffer
# A replay of the last submit's buffers: fast_submit.c's Submit (VulkanDevice.submit) takes
# it where built; else CommandBuffer._same_buffers, in Python. Never both.
SHORT_WAY_IN_PYTHON = _COMPILED is None
# The operation types under their former names (tests build recordings from them).
_Dispatch, _Fill, _Copy, _Barrier = Dispatch, Fill, Copy, Barrier


class CommandBuffer(CommandBufferAPI):
    """A recorded sequence of dispatches, fills, copies and barriers over binding slots."""

    def __init__(self, device: VulkanContext):
        self.device = device
        self.ops: list = []
        self.finalized = False
        self.slot_count = 0
        self.record_count = 0
        self.last_handle = 0  # VkCommandBuffer handle of the last submission
        self._instances: OrderedDict[tuple, list[Instance]] = OrderedDict()
        # One submission at a time picks an idle instance, rewrites its address table or
        # descriptors and marks it in flight: a second thread then never takes the same
        # instance and rewrites the table under the first one's submission.
        self._submit_lock = threading.Lock()
        self._plan = Plan()  # worked out at finalize (command_plan.plan)
        self._barrier_cache: dict[str, list] = {}  # barrier mode -> VkDependencyInfo each
        self._barrier_keep: list = []
        # (Lifetime.ends, bindings, instance key, aliased, how many bindings, their
        # addresses or None) of the last submit's checks
        self._last_checked: tuple | None = None
        # (key, instance, lane, its Lane) of the last submission: its table/descriptors
        # hold its bindings
        self._last_instance: tuple | None = None
        # what a submit without params checks its bindings against, worked out at
        # finalize: (slots, least bytes per slot, the device's owner token, fixed buffers'
        # uids or None when two of them share an allocation); None: the checks one by one
        self._checks: tuple | None = None

    # --- recording ------------------------------------------------------------------------
    def _ref(self, arg) -> BufferRef:
        if isinstance(arg, BindingSlot):
            self.slot_count = max(self.slot_count, arg.index + 1)
            return BufferRef(arg.index, None, arg.offset, arg.nbytes)
        if isinstance(arg, Buffer):
            if arg.device is not self.device:
                raise DeviceError(
                    f"{arg!r} belongs to another device: use a buffer of {self.device.spec}"
                )
            arg._check_alive()
            return BufferRef(-1, arg, 0, arg.nbytes)
        raise KernelArgumentError(f"{arg!r} is not a buffer or a binding slot")

    def _check_open(self) -> None:
        self.check_recording()

    @property
    def finalized_(self) -> bool:
        return self.finalized

    def dispatch(self, kernel: Kernel, grid, block=None, args: Sequence = ()) -> None:
        """Record a dispatch; grid in work-items, args = buffers/slots then 32-bit constants
        (a constant or a grid axis may be a parameter: cb.scalar / cb.param)."""
        grid, grid_params = split_grid(grid)
        self._dispatch_groups(kernel, kernel.groups(grid, block), args, grid_params)

    def _dispatch_groups(self, kernel: Kernel, groups, args: Sequence,
                         grid_params: Sequence = ()) -> None:
        self._check_open()
        if kernel.executable.device is not self.device:
            raise KernelArgumentError(f"kernel {kernel.name} belongs to another device")
        refs: list[Any] = []
        constants: list[Any] = []
        param_constants = []
        for axis, p in grid_params:
            self.check_grid_param(kernel.name, axis, p)
        for arg in args:
            if isinstance(arg, (BindingSlot, Buffer)):
                refs.append(self._ref(arg))
            elif isinstance(arg, Param):
                if arg.dtype is not None and arg.dtype.itemsize > 4:
                    raise KernelArgumentError(
                        f"kernel {kernel.name}: Vulkan constants are 32-bit words, parameter "
                        f"{arg.name!r} is {arg.kind}: use a 32-bit scalar"
                    )
                self.check_param(arg)
                param_constants.append((len(constants), arg))
                constants.append(0)
            else:
                constants.append(to_u32(arg))
        if len(refs) != kernel.binding_count or len(constants) != kernel.constant_count:
            raise KernelArgumentError(
                f"kernel {kernel.name} takes {kernel.binding_count} buffers then "
                f"{kernel.constant_count} constants; got {len(refs)} buffers and "
                f"{len(constants)} constants"
            )
        self.use_params([p for _, p in (*grid_params, *param_constants)])
        self.ops.append(Dispatch(kernel, tuple(groups), refs, np.array(constants, np.uint32),
                                 param_constants=param_constants,
                                 grid_params=list(grid_params)))

    def fill(self, buffer, value, nbytes: int | None = None) -> None:
        """Fill the buffer (or slot) with `value`'s 1-, 2- or 4-byte pattern (`amdgpu.fill`).
        vkCmdFillBuffer writes whole 32-bit words: the start and length must be multiples
        of 4 bytes (a DeviceError says so; `dev.fill` fills other ranges on the host)."""
        pattern, nbytes = self.check_fill(buffer, value, nbytes)
        ref = self._ref(buffer)
        if nbytes is not None:
            ref = BufferRef(ref.slot, ref.buffer, ref.offset, nbytes)
        start = ref.offset + (ref.buffer.offset if ref.buffer is not None else 0)
        if start % 4 or (nbytes is not None and nbytes % 4):
            raise DeviceError(
                f"a Vulkan command-buffer fill covers whole 32-bit words: start {start} and "
                f"length {nbytes} must be multiples of 4 (use dev.fill for other ranges)"
            )
        self.ops.append(Fill(ref, fill_word(pattern)))

    def copy(self, dst, src, nbytes: int) -> None:
        nbytes = self.check_copy(dst, src, nbytes)
        self.ops.append(Copy(self._ref(dst), self._ref(src), nbytes))

    def barrier(self) -> None:
        """Order everything before against everything after (compute and transfer)."""
        self._check_open()
        self.ops.append(Barrier())

    def finalize(self) -> CommandBuffer:
        """Close recording and plan the binding tables; with no slot baked into recorded
        commands, the one instance is recorded now. Finalizing again returns the same
        command buffer."""
        if self.finalized:
            return self
        self.finalized = True
        self._plan = plan(self.ops, self.slot_count)
        need = dict(enumerate(self._plan.min_sizes))
        for slot, size in (self.__dict__.get("_slot_bytes") or {}).items():
            need[slot] = max(need.get(slot, 0), size)
        fixed = {b.handle.uid for b in self._plan.fixed_buffers}
        # (a recording that reads parameters needs them at every submit: checked there)
        self._checks = None if self.__dict__.get("_used_params") else (
            self.slot_count, tuple(need.get(i, 0) for i in range(self.slot_count)),
            owner_token(self.device),
            frozenset(fixed) if len(fixed) == len(self._plan.fixed_buffers) else None)
        if not self._plan.baked_slots and not self._plan.scalar_params:
            # Nothing depends on the bound buffers or scalars at record time: record now.
            self._instances[()] = [self._record(None)]
        return self

    # --- instances ------------------------------------------------------------------------
    def _record(self, bound: Sequence[Buffer] | None, words: tuple = (),
                aliased: bool = False) -> Instance:
        inst = record(self.device, self.ops, self._plan, self._barrier_infos(bound, aliased),
                      bound, words)
        self.record_count += 1
        return inst

    def _barrier_infos(self, bound: Sequence[Buffer] | None = None,
                       aliased: bool = False) -> list:
        """The VkDependencyInfo of each barrier, in order (None: the barrier is not
        recorded), under the device's barrier mode. Mode "narrow" follows the plan's
        dependencies: with the bound buffers of the slots baked into this recording, or
        with every reference possibly any memory when the bound buffers overlap."""
        mode = self.device.tuning.barrier
        if mode == "narrow":
            return self._narrow_infos(bound, aliased)
        infos = self._barrier_cache.get(mode)
        if infos is None:
            memo: dict[tuple[int, int], object] = {}
            infos = []
            for side in self._barrier_sides():
                info = memo.get(side)
                if info is None:
                    info = memo[side] = self.device.dependency_info(*side)
                infos.append(info)
            self._barrier_cache[mode] = infos
        return infos

    def _narrow_infos(self, bound: Sequence[Buffer] | None, aliased: bool) -> list:
        plan = self._plan
        cache_key = "narrow, aliased" if aliased else "narrow"
        baked = bound is not None and bool(plan.baked_slots) and not aliased
        if not baked and cache_key in self._barrier_cache:
            return self._barrier_cache[cache_key]
        if aliased:
            deps, buffers = plan.dependencies_aliased, {}
        elif baked:
            deps = dependencies(self.ops, locate_bound(bound, plan.baked_slots))  # type: ignore[arg-type]
            buffers = memory_buffers(self.ops, bound)
        else:
            deps, buffers = plan.dependencies, memory_buffers(self.ops, None)
        memo: dict = {}
        infos: list = []
        keep = []
        for dep in deps:
            form = recorded_form(dep, buffers)
            if form is None:
                infos.append(None)
                continue
            info = memo.get(form)
            if info is None:
                info, parts = dependency_struct(form, buffers)
                memo[form] = info
                keep.append(parts)
            infos.append(info)
        self._barrier_keep = keep  # the structs the infos point at, until the next
        if not baked:
            self._barrier_cache[cache_key] = infos
            self._barrier_cache[cache_key + " keep"] = keep
        return infos

    def recorded_barriers(self, bindings: Sequence[Buffer] | None = None) -> list:
        """What each `barrier()` records under the device's mode "narrow"
        (command_plan.recorded_form: None where it is left out), for these bindings."""
        plan = self._plan
        aliased = bindings is not None and plan.alias_sensitive and aliased_bindings(
            bindings, plan.fixed_buffers)
        if aliased:
            return [recorded_form(d, {}) for d in plan.dependencies_aliased]
        if bindings is not None and plan.baked_slots:
            deps = dependencies(self.ops, locate_bound(bindings, plan.baked_slots))
            return [recorded_form(d, memory_buffers(self.ops, bindings)) for d in deps]
        return [recorded_form(d, memory_buffers(self.ops, None)) for d in plan.dependencies]

    def _barrier_sides(self) -> list[tuple[int, int]]:
        return barrier_sides(self.ops)

    def _free_instance(self, inst: Instance) -> None:
        free_instance(self.device, inst)

    def _acquire(self, key: tuple, bound: Sequence[Buffer], words: tuple = (),
                 aliased: bool = False) -> Instance:
        pool = self._instances.get(key)
        if pool is None:
            while len(self._instances) >= MAX_KEYS:  # evict the least recently used key
                _, old = self._instances.popitem(last=False)
                for inst in old:
                    if inst.point is not None:
                        inst.point.wait(self.device.timeout)
                    self._free_instance(inst)
            pool = self._instances[key] = []
        else:
            self._instances.move_to_end(key)
        for inst in pool:  # idle by what the lanes last saw: no driver call
            p = inst.point
            if p is None or p.value <= p.timeline.reached:
                return inst
        polled = None
        for inst in pool:  # else ask the driver, once per lane (usually one)
            timeline = inst.point.timeline  # type: ignore[union-attr]
            if timeline is not polled:
                timeline.poll()
                polled = timeline
            if inst.point.value <= timeline.reached:  # type: ignore[union-attr]
                return inst
        if len(pool) < MAX_IN_FLIGHT:
            with self.device._pool_lock:  # recording uses the device's command pool
                inst = self._record(bound, words, aliased)
            pool.append(inst)
            return inst
        inst = pool.pop(0)  # the oldest: wait for it and reuse it
        pool.append(inst)
        if inst.point is not None:
            inst.point.wait(self.device.timeout)
        return inst

    def submit(self, bindings: Sequence[Buffer], lane: int, wait,
               params=None) -> TimelinePoint:
        if SHORT_WAY_IN_PYTHON:
            point = self._same_buffers(bindings, lane, wait, params)
            if point is not None:
                return point
        return self._submit_checked(bindings, lane, wait, params)

    def _same_buffers(self, bindings: Sequence[Buffer], lane: int, wait,
                      params) -> TimelinePoint | None:
        """The replay of the last checked submit's buffers, as Python: used only where
        fast_submit.c is not built (its Submit does these steps, then calls
        VulkanDevice.submit's Python method for anything else). None: not that case."""
        last = self._last_checked
        if last is not None and last[0] == Lifetime.ends and params is None and \
                isinstance(bindings, _SEQUENCES) and len(bindings) == last[4] and \
                all(map(is_, bindings, last[1])):
            # The same buffer objects as the last submit, and no buffer's lifetime ended
            # since: every check below would pass again, with the same key.
            with self._submit_lock:
                recent = self._last_instance
                if recent is not None and recent[0] is last[2] and recent[2] is lane:
                    inst = recent[1]
                    p = inst.point
                    if p.value <= p.timeline.reached:  # (in flight: _acquire polls)
                        # The last submission's instance, idle, on the same lane: its
                        # address table (or late descriptors) already holds these same
                        # buffers, and its key is the most recently used one: nothing to
                        # pick, patch or reorder.
                        point = recent[3].submit(inst.command_buffer, wait,
                                                 self._plan.details)
                        inst.point = point
                        inst.keepalive = bindings
                        return point
                    twin = self._idle_twin(recent[0], inst, last[5])
                    if twin is not None:  # the last one still runs: another that is ready
                        point = recent[3].submit(twin.command_buffer, wait,
                                                 self._plan.details)
                        twin.point = point
                        twin.keepalive = bindings
                        self.last_handle = twin.handle
                        self._last_instance = (recent[0], twin, lane, recent[3])
                        return point
                return self._submit_instance(
                    last[2], bindings, lane, wait, (), None, last[3], last[5],
                    recent[3] if recent is not None and recent[2] is lane else None)
        return None

    def _submit_checked(self, bindings: Sequence[Buffer], lane: int, wait,
                        params=None) -> TimelinePoint:
        """A submit through every check (the usual way for new buffers)."""
        if not self.finalized:
            self.check_finalized()
        ends = Lifetime.ends
        plan = self._plan
        self.check_recorded()
        passing = self._passing(bindings) if params is None and self._checks else None
        addresses: tuple | None = None
        if passing is not None:  # every check passed in one pass (the usual case)
            words: tuple = ()
            groups = None
            if isinstance(passing, tuple):  # no two buffers share an allocation
                addresses = passing
        else:  # the checks one by one, for the error they raise (or with params)
            self.check_bindings(bindings, self.slot_count)
            values = self.check_params(params)
            words, groups = (
                param_words(plan, values, self.device.physical.max_group_count) if values
                else ((), None))
            for b, need in zip(bindings, plan.min_sizes, strict=True):
                if b.nbytes < need:
                    raise KernelArgumentError(
                        f"binding {b!r} is smaller than the {need} bytes the command buffer "
                        "recorded for its slot; bind a larger buffer"
                    )
        # bindings in distinct allocations (addresses known) cannot overlap
        aliased = addresses is None and plan.alias_sensitive and \
            self.device.tuning.barrier == "narrow" and \
            aliased_bindings(bindings, plan.fixed_buffers)
        key: tuple
        if plan.baked_slots:
            key = tuple(
                (bindings[s].handle.uid, bindings[s].offset, bindings[s].nbytes)
                for s in plan.baked_slots
            )
        else:
            key = ()
        if words:
            key = (key, words)
        if aliased:
            # The narrowed barriers took the slots for distinct memory: these overlap.
            key = (key, "aliased")
        self._last_checked = None if params is not None else (
            ends, tuple(bindings), key, aliased, len(bindings), addresses)
        with self._submit_lock:
            return self._submit_instance(key, bindings, lane, wait, words, groups, aliased,
                                         addresses)

    def _passing(self, bindings) -> tuple | bool | None:
        """The checks of a submit without params (check_bindings: a list or tuple of
        buffers of this device, alive; each at least the bytes recorded for its slot), one
        C-level pass each. Their addresses when every check passes and no two bound (or
        fixed) buffers share an allocation; True when they pass but some do (the bound
        ranges may overlap); None when a check fails: the caller then runs them one by one
        for the error they raise."""
        slots, need, token, fixed = self._checks  # type: ignore[misc]
        if not isinstance(bindings, _SEQUENCES) or len(bindings) != slots:
            return None
        try:  # only a Buffer of this device, alive, carries its token (buffer.Lifetime)
            if not all(map(is_, map(_OWNER, bindings), repeat(token))):
                return None
        except AttributeError:  # not a buffer
            return None
        if not all(map(le, need, map(_NBYTES, bindings))):
            return None
        uids = set(map(_UID, bindings))
        if len(uids) != slots or fixed is None or not uids.isdisjoint(fixed):
            return True
        return tuple(map(_ADDRESS, bindings))

    def _idle_twin(self, key: tuple, busy: Instance,
                   addresses: tuple | None) -> Instance | None:
        """Another instance of `key` that is idle by its lane's last-seen value and already
        holds the bound buffers (its binding table written for `addresses`; no descriptors
        written at submit): replaying the same buffers back to back takes it as it is."""
        patched = bool(self._plan.bda_patches)
        if patched and addresses is None:
            return None
        for inst in self._instances.get(key, ()):
            p = inst.point
            if inst is not busy and not inst.late_count and \
                    (p is None or p.value <= p.timeline.reached) and \
                    (not patched or inst.table_signature == addresses):
                return inst
        return None

    def _submit_instance(self, key: tuple, bindings: Sequence[Buffer], lane: int,
                         wait, words: tuple = (), groups=None,
                         aliased: bool = False, addresses: tuple | None = None,
                         timeline=None) -> TimelinePoint:
        """Submit an instance of `key` (bound to `bindings`, or `addresses` when the caller
        has them) on `lane` (its Lane object `timeline`, when the caller has it)."""
        self._last_instance = None  # until this submission is made (it may raise below)
        inst = self._acquire(key, bindings, words, aliased)
        plan = self._plan
        if groups is not None:
            signature = groups.tobytes()
            if signature != inst.indirect_signature:
                inst.indirect[:] = groups  # type: ignore[index]
                inst.indirect_signature = signature
        if inst.late_count:
            write_late_sets(self.device, inst, bindings)
        if plan.bda_patches:
            patch_table(inst, plan, bindings, addresses)
        if timeline is None:
            timeline = self._lane(lane)
        point = timeline.submit(inst.command_buffer, wait, plan.details)
        inst.point = point
        inst.keepalive = bindings
        self.last_handle = inst.handle
        self._last_instance = None if words else (key, inst, lane, timeline)
        return point

    def _lane(self, lane: int):
        lanes = self.device._lanes
        timeline = lanes[lane] if type(lane) is int and 0 <= lane < len(lanes) else None
        if timeline is None:  # not opened yet, or not a lane (checked there)
            timeline = self.device._timeline(lane)
        return timeline

    def release(self) -> None:
        """Free every recorded instance (waits for those in flight)."""
        self._last_checked = None  # it holds the last bindings (and so their device)
        self._last_instance = None
        with self._submit_lock:
            for pool in self._instances.values():
                for inst in pool:
                    if inst.point is not None:
                        inst.point.wait(self.device.timeout)
                    self._free_instance(inst)
            self._instances.clear()

    def __del__(self) -> None:
        # A dropped command buffer hands its instances to the device, which frees them
        # once their submissions have completed (no waiting inside the garbage collector).
        try:
            instances = [i for pool in self._instances.values() for i in pool]
            self._instances.clear()
            if instances and not self.device._closed:
                self.device._retired.append((self, instances))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
