"""The device API both backends implement: `Device`, `TimelinePoint`, `DeviceSpec`.

This module is the base the backends build on; it imports neither of them. Choosing and
opening a device (spec parsing, the opt-in rules, `open`, `devices`) is
`amdgpu.selection`, which imports the backends.
"""

from __future__ import annotations

import abc
import collections
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from amdgpu.buffer import Buffer, HostBuffer, host_bytes
from amdgpu.fill import check_fill_length, fill_pattern
from ground.errors import BufferRangeError, DeviceError, KernelArgumentError
from hsa.provider import Capability, LinkInfo
from hsa.virtual.topology import compact_gpus, expand_gpus

DEFAULT_VIRTUAL_GPUS = ("gfx1100",)
VIRTUAL_NODE_ENV = "AMDGPU_VIRTUAL_NODE"  # e.g. "8xgfx942": what plain amdgpu:virtual opens
EMULATED_NODE_ENV = "AMDGPU_EMULATED_NODE"  # e.g. "4xgfx90a": what plain amdgpu:emulated opens
DEFAULT_EMULATED_GPU = "gfx90a"
STAGING_MIN = 64 << 10  # async transfers' staging buffers: the smallest kept
STAGING_CACHE = 64 << 20  # bytes of idle staging a device keeps for reuse


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device spec."""

    backend: str  # "hsa" | "vulkan"
    provider: str = ""  # "rocr" | "virtual" | "emulated" (hsa only)
    gpus: tuple[str, ...] = ()  # virtual/emulated system's GPU targets
    index: int = 0
    uuid: str = ""  # "GPU-<hex>": select the agent by UUID instead of by index

    @property
    def driver(self) -> str:
        return "amdgpu" if self.backend == "hsa" else "vulkan"

    @property
    def system(self) -> str:
        """The provider key: "rocr" or "virtual:gfx1100,gfx1100"."""
        if self.provider in ("virtual", "emulated"):
            return self.provider + ":" + compact_gpus(self.gpus)
        return self.provider

    def __str__(self) -> str:
        if self.backend == "vulkan":
            return f"vulkan:{self.index}"
        which = self.uuid or str(self.index)
        if self.provider == "rocr":
            return f"amdgpu:{which}"
        if self.provider == "emulated":
            if len(self.gpus) > 1 and self.gpus != default_emulated_gpus():
                return f"amdgpu:emulated:{compact_gpus(self.gpus)}:{which}"
            default = self.gpus == default_emulated_gpus()
            head = "amdgpu:emulated" if default else f"amdgpu:emulated:{self.gpus[0]}"
            return head if which == "0" else f"{head}:{which}"
        if self.gpus == default_virtual_gpus():
            return "amdgpu:virtual" if which == "0" else f"amdgpu:virtual:{which}"
        return f"amdgpu:virtual:{compact_gpus(self.gpus)}:{which}"


def default_virtual_gpus() -> tuple[str, ...]:
    """The GPUs of plain `amdgpu:virtual`: one gfx1100, or the node AMDGPU_VIRTUAL_NODE
    names ("8xgfx942", "gfx942,gfx942")."""
    import os

    text = os.environ.get(VIRTUAL_NODE_ENV, "").strip().lower()
    if not text:
        return DEFAULT_VIRTUAL_GPUS
    return tuple(expand_gpus(text.split(",")))


def default_emulated_gpus() -> tuple[str, ...]:
    """The GPU nodes of plain `amdgpu:emulated`: one gfx90a, or the node AMDGPU_EMULATED_NODE
    names ("4xgfx90a")."""
    import os

    text = os.environ.get(EMULATED_NODE_ENV, "").strip().lower()
    if not text:
        return (DEFAULT_EMULATED_GPU,)
    return tuple(expand_gpus(text.split(",")))


# --- the device API both backends implement ------------------------------------------------
class TimelinePoint:
    """A value on one queue lane's timeline: done once the lane has completed `value`
    submissions. `timeline` is the backend's lane object (it knows how to wait).
    A plain slotted class: one is made per dispatch, so its construction is kept cheap."""

    __slots__ = ("lane", "value", "timeline")

    def __init__(self, lane: int, value: int, timeline: Any = None):
        self.lane = lane
        self.value = value
        self.timeline = timeline

    def wait(self, timeout: float = 10.0) -> None:
        """Block until the point is reached; SignalTimeout after `timeout` seconds, the
        lane's error (QueueError) if the lane stopped."""
        if self.timeline is not None:
            self.timeline.wait(self.value, timeout)

    def done(self) -> bool:
        return self.timeline is None or self.timeline.completed() >= self.value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TimelinePoint)
            and self.lane == other.lane
            and self.value == other.value
            and self.timeline is other.timeline
        )

    def __hash__(self) -> int:
        return hash((self.lane, self.value, id(self.timeline)))

    def __repr__(self) -> str:
        return f"TimelinePoint(lane={self.lane}, value={self.value})"


class TransferPoint(TimelinePoint):
    """The point of a `read_async`: later work may wait on it like any point; `result()`
    (or `wait()`) waits, then moves the bytes from staging into the caller's array (a no-op
    for a HostBuffer destination) and returns that array."""

    __slots__ = ("array", "_finish")

    def __init__(self, point: TimelinePoint, array: Any, finish: Any = None):
        super().__init__(point.lane, point.value, point.timeline)
        self.array = array
        self._finish = finish

    def wait(self, timeout: float = 10.0) -> None:
        super().wait(timeout)
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()

    def result(self, timeout: float = 10.0) -> Any:
        self.wait(timeout)
        return self.array


class Device(abc.ABC):
    """The driver's device API; `HsaDevice` and `VulkanDevice` implement all of it.

    Conventions every backend keeps:
    - `grid` counts work-items, not work-groups (HSA's convention): a grid of 1000 with a
      block of 256 is 4 work-groups, the last one partial. Both are an int or a 1..3-tuple
      of positive ints (`amdgpu.geometry.launch_geometry`).
    - A lane is an in-order timeline (`lanes` of them, 0..lanes-1; `lane(i)` is its
      `Lane` object); every submission returns the `TimelinePoint` it completes at, and
      `wait=` takes a list of points.
    - `fill` repeats an explicit 1-, 2- or 4-byte pattern (`amdgpu.fill`).
    - Mistakes raise the same classes on every backend (`amdgpu.errors`): a bad device
      argument (lane, fill value, freed or foreign buffer) DeviceError, a bad kernel
      argument or binding table KernelArgumentError, a range outside a buffer
      BufferRangeError.
    """

    spec: str
    backend: str  # "hsa" | "vulkan"
    driver: str  # "amdgpu" | "vulkan"
    name: str
    target: str
    paths: dict[str, Capability]

    @property
    @abc.abstractmethod
    def lanes(self) -> int:
        """How many lanes (independent in-order timelines) this device offers."""

    def lane(self, index: int) -> Lane:
        """Lane `index` (DeviceError outside 0..lanes-1): the `Lane` object, the same type
        on every backend (one per index: `dev.lane(1) is dev.lane(1)`)."""
        index = self.check_lane(index)
        lanes = self.__dict__.get("_lane_objects")
        if lanes is None:
            lanes = self.__dict__["_lane_objects"] = {}
        lane = lanes.get(index)
        if lane is None:
            lane = lanes[index] = Lane(self, index)
        return lane

    @abc.abstractmethod
    def _timeline(self, index: int) -> Any:
        """The backend's own object for lane `index` (an HSA queue lane, a Vulkan timeline
        semaphore): `.submitted`, `.completed()`, `.wait(value, timeout)`. What
        TimelinePoints carry; not part of the public API."""

    @abc.abstractmethod
    def buffer(self, array_or_nbytes: Any, dtype: Any = None) -> Buffer:
        """Device memory: an int is a size in bytes (items of `dtype` when given), an array
        (anything numpy takes but a bare numpy scalar) is copied in."""

    @abc.abstractmethod
    def load(self, bundle: Any) -> Any:
        """The executable of a compiled bundle's variant for this device; `.kernel(name)`."""

    @abc.abstractmethod
    def dispatch(
        self,
        kernel: Any,
        grid: Any,
        block: Any = None,
        args: Sequence[Any] = (),
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Run `kernel` now (asynchronously) over `grid` work-items in work-groups of
        `block`; returns the point the dispatch completes at."""

    @abc.abstractmethod
    def command_buffer(self) -> Any:
        """A new command buffer to record (`amdgpu.command_buffer.CommandBuffer`)."""

    @abc.abstractmethod
    def submit(
        self,
        cb: Any,
        bindings: Sequence[Buffer] = (),
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
        *,
        params: Any = None,
    ) -> TimelinePoint:
        """Replay a command buffer (finalizing it first if needed) with `bindings`, and
        `params` (name -> value) for its `cb.param` / `cb.scalar` placeholders."""

    @abc.abstractmethod
    def synchronize(self, timeout: float = 10.0) -> None:
        """Wait for every lane (SignalTimeout after `timeout`, a lane's QueueError)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Wait for the work, free everything; later calls are a DeviceError or
        VulkanError."""

    # --- shared operations: one command buffer each, unless a backend does better ---------
    def fill(
        self,
        dst: Buffer,
        value: Any,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Fill `nbytes` of `dst` (default all of it) with `value`'s pattern."""
        cb = self.command_buffer()
        cb.fill(dst, value, nbytes)
        return self.submit(cb.finalize(), [], lane, wait)

    def copy(
        self,
        dst: Buffer,
        src: Buffer,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Copy `nbytes` (default: the smaller buffer's size) from `src` to `dst`."""
        nbytes = self.check_copy(dst, src, nbytes)
        cb = self.command_buffer()
        cb.copy(dst, src, nbytes)
        return self.submit(cb.finalize(), [], lane, wait)

    def barrier(self, lane: int = 0, wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """A submission with no commands: `lane` reaches the returned point once the
        points in `wait` (on any lane) and everything before on `lane` are done."""
        return self.submit(self.command_buffer().finalize(), [], lane, wait)

    # --- buffers still held at close ------------------------------------------------------
    # Every root buffer is remembered weakly; close() frees the memory of those the caller
    # still holds and of those dropped but not yet reaped, so a closed device keeps nothing
    # of a system that other devices keep open (its provider shuts down only with the last).
    def _track_root(self, buf: Buffer) -> None:
        roots = self.__dict__.get("_roots")
        if roots is None:
            roots = self.__dict__.setdefault("_roots", weakref.WeakSet())
        roots.add(buf)

    def _take_unreleased(self) -> list[tuple[Any, Buffer | None]]:
        """At close: (handle, root buffer or None when it was dropped) of every root buffer
        whose memory is not released yet, each marked freed so nothing releases it twice;
        the backend frees them."""
        out: list[tuple[Any, Buffer | None]] = [
            (handle, None) for handle, _marks in self.__dict__.pop("_dropped", ())]
        for root in list(self.__dict__.get("_roots", ())):
            if not root._freed:
                root._freed = True
                out.append((root.handle, root))
        return out

    # --- buffers dropped without free() ---------------------------------------------------
    # A root Buffer's finalizer hands its handle to `_dropped_buffer` (any thread, at any
    # point: it only appends). `_reap_dropped`, run at allocations and synchronize, frees
    # each one once every lane has completed what was submitted before the drop, so the GPU
    # never sees that memory reused under work that still uses it. A backend provides
    # `_live_lanes()` (lanes with `.submitted` and `.completed()`) and `_release_handle`.
    def _dropped_buffer(self, handle: Any) -> None:
        if self.__dict__.get("_closed", False):
            return
        marks = [(ln, ln.submitted) for ln in self._live_lanes()]
        self.__dict__.setdefault("_dropped", collections.deque()).append((handle, marks))

    def _reap_dropped(self) -> None:
        dropped = self.__dict__.get("_dropped")
        if not dropped:
            return
        for _ in range(len(dropped)):
            try:
                handle, marks = dropped.popleft()
            except IndexError:  # another thread reaped the rest
                return
            if all(ln.completed() >= value for ln, value in marks):
                self._release_handle(handle)
            else:
                dropped.append((handle, marks))

    def _live_lanes(self) -> list:
        return []

    def _release_handle(self, handle: Any) -> None:
        """Free the root allocation behind a dropped buffer's handle."""
        raise DeviceError(f"{type(self).__name__} cannot release dropped buffers")

    # --- asynchronous transfers (Buffer.write_async / read_async) -------------------------
    # A backend provides `host_buffer`, `_release_host(buf)` (free without waiting for the
    # lanes) and may override `_copy_async(dst, src, nbytes, lane, wait)` (default: `copy`,
    # which is a lane submission on every backend). Staging buffers are held until their
    # copy's point is reached, then freed on a later transfer or at synchronize/close.
    def host_buffer(self, array_or_nbytes: Any, dtype: Any = None) -> HostBuffer:
        """Pinned host memory this device reaches directly (`.array`: zero-copy)."""
        raise DeviceError(f"{self.spec} ({type(self).__name__}) offers no host buffers")

    def pin(self, array: Any) -> HostBuffer:
        """Register an existing numpy array with the GPU (zero-copy async transfers)."""
        raise DeviceError(
            f"{self.spec} ({type(self).__name__}) cannot pin host arrays: use "
            f"dev.host_buffer(...) and fill its .array instead"
        )

    def pinned_view(self, array: Any) -> Buffer | None:
        """The pinned buffer bytes `array` occupies, or None (see `pin`)."""
        return None

    def _unpinned(self, array: np.ndarray, what: str, buf: Buffer) -> DeviceError:
        return DeviceError(
            f"{what}(zero_copy=True) with {buf!r}: the array at 0x{int(array.ctypes.data):x} "
            f"({array.nbytes} bytes) is not pinned for {self.spec}: dev.pin(array) first, or "
            f"leave zero_copy off to stage it"
        )

    def _release_host(self, buf: Buffer) -> None:
        """Free a staging HostBuffer whose transfer completed (no wait for the lanes)."""
        raise DeviceError(f"{self.spec} ({type(self).__name__}) offers no host buffers")

    def copy_async(self, dst: Buffer, src: Buffer, nbytes: int | None = None, *,
                   lane: int = 0, wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """Copy `nbytes` (default: the smaller buffer's size) from `src` to `dst`, ordered
        on `lane`, without waiting; returns the point the copy completes at. Either buffer
        may be a HostBuffer of this device, or a peer's buffer after `enable_peer_access`.
        HSA copies on a copy engine (hsa_amd_memory_async_copy); Vulkan records a copy."""
        self._check_open()
        nbytes = self.check_copy(dst, src, nbytes)
        self.check_lane(lane)
        self.check_wait(wait)
        self._check_peers(dst, src, "copy_async")
        if not nbytes:
            return self.barrier(lane, list(wait))
        return self._copy_async(dst.view(0, nbytes), src.view(0, nbytes), nbytes, lane,
                                list(wait))

    def _copy_async(self, dst: Buffer, src: Buffer, nbytes: int, lane: int,
                    wait: Sequence[TimelinePoint]) -> TimelinePoint:
        return self.copy(dst, src, nbytes, lane, wait)

    # --- several devices of one system: peer access ---------------------------------------
    # A backend whose devices reach each other's memory (HSA: GPU agents of one system)
    # overrides these four; elsewhere a device reaches only its own memory, and asking for
    # more is a DeviceError that says what to do instead.
    def enable_peer_access(self, peer: Device) -> None:
        """Let this device and `peer` reach each other's memory, so copies between them run
        without a host bounce."""
        self._check_open()
        if peer is not self:
            raise DeviceError(
                f"{self.spec}: the {self.backend} backend has no peer access (to "
                f"{getattr(peer, 'spec', peer)!r}): copy through the host (b.to_numpy, "
                f"a.buffer), or open both as GPU agents of one HSA system (amdgpu:N)"
            )

    def can_access_peer(self, peer: Any) -> bool:
        """Whether this device reaches `peer`'s memory (its own: always)."""
        return peer is self

    def links(self, peer: Device | None = None) -> list[LinkInfo]:
        """The hops from this device to `peer`'s memory (to host memory when None)."""
        raise DeviceError(
            f"{self.spec}: the {self.backend} backend reports no link topology: open the GPU "
            f"as an HSA agent (amdgpu:N) to see its links (hwlab devices lists them)"
        )

    def _check_peers(self, dst: Buffer, src: Buffer, what: str) -> None:
        """Refuse a copy with a buffer of a device this one cannot reach."""
        for buf in (dst, src):
            if not self.can_access_peer(buf.device):
                raise DeviceError(
                    f"{what}: {buf!r} is on {buf.device.spec}, which {self.spec} cannot "
                    f"reach: copy through the host (to_numpy, then write)"
                )

    def _check_open(self) -> None:
        if self.__dict__.get("_closed", False):
            raise DeviceError(f"{self.spec} was closed: open it again")

    def _held_transfers(self) -> list:
        held = self.__dict__.get("_transfers")
        if held is None:
            held = self.__dict__["_transfers"] = []
        return held

    def _pending_reads(self) -> dict:
        pending = self.__dict__.get("_reads")
        if pending is None:
            pending = self.__dict__["_reads"] = {}
        return pending

    def _land_read(self, staging: HostBuffer) -> None:
        """Move a finished read_async's bytes from its staging into the caller's array."""
        entry = self._pending_reads().pop(id(staging), None)
        if entry is not None:
            flat, nbytes = entry
            flat[:] = staging._array[:nbytes]

    def _staging_buffer(self, nbytes: int) -> HostBuffer:
        """A pinned staging buffer of at least `nbytes`: a cached one whose transfer is done
        (at most twice the size), else a new one of the next power of two (64 KiB at least):
        an allocation per transfer costs more than the copy on small transfers."""
        cache = self.__dict__.setdefault("_staging_cache", [])
        for i, buf in enumerate(cache):
            if nbytes <= buf.nbytes <= 2 * max(nbytes, STAGING_MIN):
                return cache.pop(i)
        size = max(STAGING_MIN, 1 << max(nbytes - 1, 1).bit_length())
        return self.host_buffer(size)

    def _release_transfers(self, all_done: bool = False) -> None:
        """Staging of completed transfers back to the cache (freed past STAGING_CACHE
        bytes); `all_done`: the caller knows every lane is idle (close)."""
        held = self._held_transfers()
        cache = self.__dict__.setdefault("_staging_cache", [])
        keep = []
        for point, staging in held:
            if all_done or point.done():
                self._land_read(staging)
                if staging.root._freed:
                    continue
                if not all_done and sum(b.nbytes for b in cache) + staging.nbytes <= STAGING_CACHE:
                    cache.append(staging)
                else:
                    staging._freed = True
                    self._release_host(staging)
            else:
                keep.append((point, staging))
        held[:] = keep
        if all_done:
            for staging in cache:
                staging._freed = True
                self._release_host(staging)
            cache.clear()

    def _check_transfer(self, buf: Any, what: str, lane: Any, wait: Any) -> None:
        self.check_buffer(buf, what)
        self.check_lane(lane)
        self.check_wait(wait)
        self._release_transfers()

    def _host_side(self, host: Any, what: str) -> HostBuffer:
        if host.device is not self:
            raise DeviceError(
                f"{what}: {host!r} is pinned for another device: use {self.spec}'s host_buffer"
            )
        host._check_alive()
        return host

    def write_async(
        self,
        dst: Buffer,
        array: Any,
        offset: int = 0,
        *,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
        zero_copy: bool = False,
    ) -> TimelinePoint:
        """`dst.write_async(array, offset, lane=, wait=)`: see Buffer.write_async."""
        self._check_transfer(dst, "write_async", lane, wait)
        offset = _count(offset, "write_async offset")
        pinned = self.pinned_view(array) if isinstance(array, np.ndarray) else None
        if isinstance(array, HostBuffer) or pinned is not None:
            src = pinned if pinned is not None else self._host_side(array, "write_async")
            staging = None
            nbytes = src.nbytes
            dst._check_range(offset, nbytes)
        elif zero_copy:
            raise self._unpinned(np.asarray(array), "write_async", dst)
        else:
            data = host_bytes(array, "write_async")
            nbytes = data.size
            dst._check_range(offset, nbytes)
            staging = self._staging_buffer(nbytes)
            src = staging
            staging._array[:nbytes] = data
        if not nbytes:
            point = self.barrier(lane, list(wait))
        else:
            point = self._copy_async(dst.view(offset, nbytes), src.view(0, nbytes), nbytes,
                                     lane, list(wait))
        if staging is not None:
            self._held_transfers().append((point, staging))
        return point

    def read_async(
        self,
        src: Buffer,
        out: Any = None,
        offset: int = 0,
        *,
        dtype: Any = np.uint8,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
        zero_copy: bool = False,
    ) -> TransferPoint:
        """`src.read_async(out, offset, dtype=, lane=, wait=)`: see Buffer.read_async."""
        self._check_transfer(src, "read_async", lane, wait)
        offset = _count(offset, "read_async offset")
        staging: HostBuffer | None = None
        flat = np.empty(0, np.uint8)  # the caller's array's bytes, when staged
        result: Any
        pinned = self.pinned_view(out) if isinstance(out, np.ndarray) else None
        dst: Buffer
        if isinstance(out, HostBuffer):
            dst = self._host_side(out, "read_async")
            nbytes, result = dst.nbytes, dst
        elif pinned is not None:
            if not out.flags.writeable:
                raise KernelArgumentError("read_async wants a writable out= array")
            dst, nbytes, result = pinned, pinned.nbytes, out
            src._check_range(offset, nbytes)
        elif zero_copy and out is not None:
            raise self._unpinned(np.asarray(out), "read_async", src)
        elif zero_copy:
            raise DeviceError(
                f"read_async(zero_copy=True) from {src!r} needs out= a pinned array or a "
                f"HostBuffer on {self.spec}: dev.pin(array) or dev.host_buffer(n)"
            )
        else:
            if out is None:
                dtype = np.dtype(dtype)
                rest = src.nbytes - offset
                src._check_range(offset, max(rest, 0))
                if rest % dtype.itemsize:
                    raise BufferRangeError(
                        f"read_async: {rest} bytes from offset {offset} are not a whole number "
                        f"of {dtype} items: pass an offset or an out array that fits"
                    )
                out = np.empty(rest // dtype.itemsize, dtype)
            elif (
                not isinstance(out, np.ndarray)
                or not out.flags.c_contiguous
                or not out.flags.writeable
            ):
                raise KernelArgumentError(
                    f"read_async wants out= a HostBuffer, a writable C-contiguous numpy array "
                    f"or None, got {type(out).__name__}: use np.empty(...) or np.ascontiguousarray"
                )
            nbytes, result = out.nbytes, out
            flat = out.reshape(-1).view(np.uint8)
            src._check_range(offset, nbytes)
            staging = dst = self._staging_buffer(nbytes)
        if not nbytes:
            point = self.barrier(lane, list(wait))
        else:
            point = self._copy_async(dst.view(0, nbytes), src.view(offset, nbytes), nbytes,
                                     lane, list(wait))
        if staging is None:
            return TransferPoint(point, result)
        self._held_transfers().append((point, staging))
        self._pending_reads()[id(staging)] = (flat, nbytes)
        held = staging
        return TransferPoint(point, result, lambda: self._land_read(held))

    # --- the checks every backend makes the same way -------------------------------------
    def check_lane(self, lane: Any) -> int:
        if type(lane) is not int or not 0 <= lane < self.lanes:
            raise DeviceError(f"{self.spec} has lanes 0..{self.lanes - 1}, not {lane!r}")
        return lane

    @staticmethod
    def check_wait(wait: Any) -> None:
        if not isinstance(wait, (list, tuple)) or not all(
            isinstance(p, TimelinePoint) for p in wait
        ):
            raise KernelArgumentError(
                f"wait must be a list of TimelinePoints (what submissions return), got {wait!r}"
            )

    def check_buffer(self, buf: Any, what: str, foreign_ok: bool = False) -> Buffer:
        if not isinstance(buf, Buffer):
            raise KernelArgumentError(f"{what} wants a Buffer, got {buf!r}")
        if buf.device is not self and not foreign_ok:
            raise DeviceError(f"{what}: {buf!r} belongs to another device: use one of {self.spec}")
        buf._check_alive()
        return buf

    def check_fill(self, dst: Any, value: Any, nbytes: Any) -> tuple[Any, int]:
        """(pattern, length) of a direct fill; every mistake refused here."""
        self.check_buffer(dst, "fill")
        pattern = fill_pattern(value)
        nbytes = dst.nbytes if nbytes is None else _count(nbytes, "fill size")
        dst._check_range(0, nbytes)
        check_fill_length(pattern, nbytes)
        return pattern, nbytes

    def check_copy(self, dst: Any, src: Any, nbytes: Any) -> int:
        self.check_buffer(dst, "copy destination", foreign_ok=True)
        self.check_buffer(src, "copy source", foreign_ok=True)
        if self not in (dst.device, src.device):
            raise DeviceError(f"copy: neither buffer belongs to {self.spec}")
        nbytes = min(dst.nbytes, src.nbytes) if nbytes is None else _count(nbytes, "copy size")
        dst._check_range(0, nbytes)
        src._check_range(0, nbytes)
        return nbytes

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        # Both backends are Devices by what they offer (the Vulkan one does not inherit).
        if cls is Device:
            needed = (
                "buffer", "load", "dispatch", "command_buffer", "submit", "synchronize",
                "fill", "copy", "barrier", "_timeline",
            )
            return all(any(n in B.__dict__ for B in other.__mro__) for n in needed)
        return NotImplemented

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec} {self.name} ({self.target})>"


class Lane:
    """One lane of a device: an in-order timeline (a stream), `dev.lane(i)`.

    Work submitted through a lane runs in submission order; each submission returns the
    `TimelinePoint` it completes at (the lane's timeline value after it). The methods are
    the device's own with `lane=` filled in, so both backends behave the same:

        lane = dev.lane(1)
        p = lane.dispatch(kernel, grid, block, args, wait=[other_point])
        lane.submit(cb, bindings)
        lane.barrier(wait=[p])      # a point after `p` and everything before on this lane
        lane.synchronize()          # wait for everything submitted here
        lane.point()                # the point of the latest submission
    """

    __slots__ = ("device", "index")

    def __init__(self, device: Device, index: int):
        self.device = device
        self.index = index

    @property
    def submitted(self) -> int:
        """The timeline value of the latest submission (0 before the first)."""
        return int(self.device._timeline(self.index).submitted)

    def completed(self) -> int:
        """The timeline value the lane has completed so far."""
        return int(self.device._timeline(self.index).completed())

    def point(self, value: int | None = None) -> TimelinePoint:
        """The point at timeline `value` (default: the latest submission's), to wait on or
        pass in another submission's `wait`."""
        timeline = self.device._timeline(self.index)
        if value is None:
            value = timeline.submitted
        elif type(value) is not int or value < 0:
            raise DeviceError(f"a timeline value is a non-negative int, not {value!r}")
        return TimelinePoint(self.index, value, timeline)

    def dispatch(self, kernel: Any, grid: Any, block: Any = None, args: Sequence[Any] = (),
                 wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """`dev.dispatch(...)` on this lane."""
        return self.device.dispatch(kernel, grid, block, args, lane=self.index, wait=wait)

    def submit(self, cb: Any, bindings: Sequence[Buffer] = (),
               wait: Sequence[TimelinePoint] = (), *, params: Any = None) -> TimelinePoint:
        """`dev.submit(...)` on this lane: replay a command buffer with `bindings` (and
        `params` for its parameters)."""
        return self.device.submit(cb, bindings, lane=self.index, wait=wait, params=params)

    def fill(self, dst: Buffer, value: Any, nbytes: int | None = None,
             wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """`dev.fill(...)` on this lane."""
        return self.device.fill(dst, value, nbytes, lane=self.index, wait=wait)

    def copy(self, dst: Buffer, src: Buffer, nbytes: int | None = None,
             wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """`dev.copy(...)` on this lane."""
        return self.device.copy(dst, src, nbytes, lane=self.index, wait=wait)

    def barrier(self, wait: Sequence[TimelinePoint] = ()) -> TimelinePoint:
        """A point after everything before on this lane and the points in `wait`."""
        return self.device.barrier(lane=self.index, wait=wait)

    def synchronize(self, timeout: float = 10.0) -> None:
        """Wait for everything submitted on this lane so far (SignalTimeout after
        `timeout` seconds, the lane's QueueError if it stopped)."""
        self.point().wait(timeout)

    def __repr__(self) -> str:
        return f"<Lane {self.index} of {self.device.spec}>"


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise BufferRangeError(f"{what} must be a non-negative int of bytes, got {value!r}")
    return int(value)


__all__ = ["DEFAULT_VIRTUAL_GPUS", "Device", "DeviceSpec", "Lane", "TimelinePoint"]
