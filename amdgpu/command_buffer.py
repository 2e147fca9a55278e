"""The command-buffer API shared by both backends, binding slots, and the checks every
backend gets from one place.

A command buffer is recorded once (`dispatch`, `fill`, `copy`, `barrier`), finalized, then
submitted many times with a binding table: `cb.binding(i)` stands for "the buffer passed
as bindings[i] at submit", so changing buffers needs no re-record. Parameters do the same
for values: `cb.param("n")` (an integer: a grid axis in work-items, or an integer kernel
argument) and `cb.scalar("alpha", np.float32)` (a typed by-value argument) are placeholders
filled from `submit(..., params={"n": 1000, "alpha": 0.5})`.

The base validates once for every backend, with one error type per mistake: recording
after finalize or submitting before it (DeviceError), a buffer of another device or a
freed one (DeviceError), a fill value that is not an explicit 1-, 2- or 4-byte pattern or does not
divide the length (DeviceError, `amdgpu.fill`), a range outside its buffer
(BufferRangeError), and at submit a binding table of the wrong length, of buffers of
another device, freed, or smaller than the ranges recorded for their slots
(KernelArgumentError), and parameters: a name declared twice with different types at
record time, and at submit one never bound, bound twice, unknown, of the wrong type or shape,
or a grid value outside 1..2**32-1 (KernelArgumentError, before anything is submitted).
Backends only plan and replay.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from amdgpu.buffer import Buffer, Lifetime, check_usable, owner_token
from amdgpu.fill import check_fill_length, fill_pattern
from ground.errors import BufferRangeError, DeviceError, KernelArgumentError


@dataclass(frozen=True)
class BindingSlot:
    """Binding `index` of the table given at submit, from byte `offset` of that buffer;
    `nbytes` bytes of it when given, else the rest of the buffer."""

    index: int
    offset: int = 0
    nbytes: int | None = None

    def view(self, offset: int, nbytes: int | None = None) -> BindingSlot:
        """Bytes [offset, offset + nbytes) of this slot (offset relative to the slot)."""
        offset = int(offset)
        if offset < 0 or (nbytes is not None and int(nbytes) < 0):
            raise BufferRangeError(
                f"a slot view needs a non-negative offset and size, got {offset}, {nbytes}"
            )
        if nbytes is None:
            nbytes = None if self.nbytes is None else self.nbytes - offset
        else:
            nbytes = int(nbytes)
        if self.nbytes is not None and offset + (nbytes or 0) > self.nbytes:
            raise BufferRangeError(
                f"bytes [{offset}, {offset + (nbytes or 0)}) are outside a slot view of "
                f"{self.nbytes} bytes: check the offset and size"
            )
        return BindingSlot(self.index, self.offset + offset, nbytes)


@dataclass(frozen=True)
class Param:
    """A value placeholder filled at submit from `params[name]`. `dtype` None: an integer
    (a grid axis, a workgroup count, an integer kernel argument of any width); else the
    scalar type the argument slot takes (`cb.scalar`)."""

    name: str
    dtype: np.dtype | None = None

    @property
    def kind(self) -> str:
        return "int" if self.dtype is None else self.dtype.name


def split_grid(grid: Any) -> tuple[Any, list[tuple[int, Param]]]:
    """(grid with 1 in place of each placeholder axis, [(axis, Param)]): the record-time
    shape a backend checks and plans with; each listed axis is patched at submit."""
    if isinstance(grid, Param):
        return 1, [(0, grid)]
    if isinstance(grid, (tuple, list)) and any(isinstance(g, Param) for g in grid):
        axes = [(i, g) for i, g in enumerate(grid) if isinstance(g, Param)]
        return tuple(1 if isinstance(g, Param) else g for g in grid), axes
    return grid, []


class CommandBuffer(abc.ABC):
    """Record once, replay many times (see `Device.submit`)."""

    device: Any

    def binding(self, index: int) -> BindingSlot:
        """Slot `index` of the binding table given at submit."""
        if type(index) is not int or index < 0:
            raise KernelArgumentError(f"binding index must be a non-negative int, got {index!r}")
        return BindingSlot(index)

    def param(self, name: str) -> Param:
        """An integer placeholder: a grid axis (`grid=cb.param("n")`, work-items) or an
        integer kernel argument, filled from `submit(..., params={name: value})`."""
        return self._declare(name, None)

    def scalar(self, name: str, dtype: Any) -> Param:
        """A by-value kernel argument of numpy type `dtype` (np.float32, np.int32, ...),
        filled from `submit(..., params={name: value})`."""
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is None or dt.kind not in "iuf" or dt.itemsize not in (1, 2, 4, 8):
            raise KernelArgumentError(
                f"scalar {name!r}: dtype must be a numpy integer or float type "
                f"(np.float32, np.int32, ...), got {dtype!r}"
            )
        return self._declare(name, dt)

    def _declare(self, name: str, dtype: np.dtype | None) -> Param:
        self.check_recording()
        if not isinstance(name, str) or not name:
            raise KernelArgumentError(f"a parameter name must be a non-empty str, got {name!r}")
        declared = self._declared_params()
        p = Param(name, dtype)
        old = declared.get(name)
        if old is not None and old != p:
            raise KernelArgumentError(
                f"parameter {name!r} is declared twice, as {old.kind} and as {p.kind}: "
                f"give each placeholder one type (or another name)"
            )
        declared[name] = p
        return p

    def _declared_params(self) -> dict[str, Param]:
        d = self.__dict__.get("_params")
        if d is None:
            d = self.__dict__["_params"] = {}
        return d

    def check_param(self, p: Param) -> Param:
        """A placeholder a recording reads: one of this command buffer's."""
        if self._declared_params().get(p.name) != p:
            raise KernelArgumentError(
                f"parameter {p.name!r} was made by another command buffer: use this one's "
                f"cb.param / cb.scalar"
            )
        return p

    def check_grid_param(self, kernel_name: str, axis: int, p: Param) -> Param:
        """A placeholder recorded as grid axis `axis`: integer-typed and this buffer's."""
        if p.dtype is not None and p.dtype.kind not in "iu":
            raise KernelArgumentError(
                f"kernel {kernel_name!r}: grid axis {axis} takes an integer parameter "
                f"(cb.param), got {p.name!r} of {p.kind}"
            )
        return self.check_param(p)

    def use_params(self, params: Any) -> None:
        """A backend records, once the operation is accepted, that its plan reads these
        placeholders (submit then requires a value for each)."""
        used = self.__dict__.setdefault("_used_params", set())
        used.update(self.check_param(p).name for p in params)

    @property
    def params(self) -> dict[str, str]:
        """The parameters submit needs: name -> "int" or the scalar's dtype name."""
        used = self.__dict__.get("_used_params", ())
        return {n: p.kind for n, p in self._declared_params().items() if n in used}

    def check_params(self, params: Any) -> dict[str, int | float]:
        """The values given at submit, checked against what the recording reads: every
        used placeholder bound exactly once, no unknown name, each of its type and shape.
        Returns name -> Python int or float (already converted through the scalar's dtype)."""
        used = self.__dict__.get("_used_params")
        if params is None:
            if not used:  # the common case: nothing to bind, nothing bound
                return {}
            params = {}
        declared = self._declared_params()
        if used and isinstance(params, dict) and params.keys() == used:  # the common case
            return {name: _param_value(declared[name], v) for name, v in params.items()}
        if isinstance(params, Mapping):
            items = list(params.items())
        elif isinstance(params, (list, tuple)):
            items = []
            for it in params:
                if not (isinstance(it, (tuple, list)) and len(it) == 2):
                    raise KernelArgumentError(
                        f"params must be a dict or (name, value) pairs, got {it!r} in the list"
                    )
                items.append((it[0], it[1]))
        else:
            raise KernelArgumentError(
                f"params must be a dict of name -> value, got {type(params).__name__}"
            )
        if not used and not items:
            return {}
        out: dict[str, int | float] = {}
        for name, value in items:
            if name in out:
                raise KernelArgumentError(f"parameter {name!r} is bound twice: give it once")
            p = declared.get(name)
            if p is None or name not in (used or ()):
                known = ", ".join(sorted(used or ())) or "none"
                raise KernelArgumentError(
                    f"unknown parameter {name!r}: this command buffer reads {known}"
                )
            out[name] = _param_value(p, value)
        missing = sorted(set(used or ()) - set(out))
        if missing:
            raise KernelArgumentError(
                f"parameter(s) {', '.join(map(repr, missing))} never bound: pass "
                f"params={{{', '.join(f'{m!r}: ...' for m in missing)}}} to submit"
            )
        return out

    @abc.abstractmethod
    def dispatch(self, kernel: Any, grid: Any, block: Any = None, args: Any = ()) -> None:
        """Record a dispatch of `kernel` over `grid` work-items (HSA's convention)."""

    @abc.abstractmethod
    def fill(self, buffer: Any, value: Any, nbytes: int | None = None) -> None:
        """Record a fill of `nbytes` (default: the whole buffer or slot) with `value`'s
        pattern (`amdgpu.fill`)."""

    @abc.abstractmethod
    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        """Record a copy of `nbytes` from `src` to `dst` (buffers or slots)."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Everything recorded after waits for everything recorded before."""

    @abc.abstractmethod
    def finalize(self) -> CommandBuffer:
        """Close recording; later records are a DeviceError."""

    # --- the checks, once for every backend ------------------------------------------------
    def _slot_need(self) -> dict[int, int]:
        need = self.__dict__.get("_slot_bytes")
        if need is None:
            need = self.__dict__["_slot_bytes"] = {}
        return need

    def check_target(self, target: Any, nbytes: int | None, what: str) -> int | None:
        """A buffer or slot used by a fill or copy: this device's and alive, the range
        inside it. Returns the length (None: the rest of a slot, known at submit)."""
        if isinstance(target, BindingSlot):
            if nbytes is None:
                nbytes = target.nbytes
            elif target.nbytes is not None and nbytes > target.nbytes:
                raise BufferRangeError(
                    f"{what} of {nbytes} bytes does not fit a slot view of {target.nbytes} bytes"
                )
            need = self._slot_need()
            end = target.offset + (nbytes or 0)
            need[target.index] = max(need.get(target.index, 0), end)
            return nbytes
        if isinstance(target, Buffer):
            if target.device is not self.device:
                raise DeviceError(
                    f"{what}: {target!r} belongs to another device: use a buffer of "
                    f"{getattr(self.device, 'spec', 'this device')}"
                )
            nbytes = target.nbytes if nbytes is None else nbytes
            target._check_range(0, nbytes)
            self.keep_recorded(target)
            return nbytes
        raise KernelArgumentError(
            f"{what} wants a Buffer or a binding slot (cb.binding(i)), got {target!r}"
        )

    def check_fill(self, target: Any, value: Any, nbytes: Any) -> tuple[np.ndarray, int | None]:
        """(pattern, length) of a recorded fill, every mistake refused here."""
        self.check_recording()
        if nbytes is not None:
            nbytes = _count(nbytes, "fill size")
        pattern = fill_pattern(value)
        nbytes = self.check_target(target, nbytes, "fill")
        if nbytes is not None:
            check_fill_length(pattern, nbytes)
        return pattern, nbytes

    def check_copy(self, dst: Any, src: Any, nbytes: Any) -> int:
        self.check_recording()
        nbytes = _count(nbytes, "copy size")
        self.check_target(dst, nbytes, "copy destination")
        self.check_target(src, nbytes, "copy source")
        return nbytes

    def check_recording(self) -> None:
        if self.finalized_:
            raise DeviceError("this command buffer is finalized: record a new one")

    def check_finalized(self) -> None:
        if not self.finalized_:
            raise DeviceError("submit a finalized command buffer: call cb.finalize() first")

    @property
    def finalized_(self) -> bool:  # overridden by each backend from its own state
        return False

    def keep_recorded(self, buffer: Buffer) -> None:
        """A buffer recorded into the commands (not through a slot): checked again at each
        submit (check_recorded), since it may be freed after recording."""
        self.__dict__.setdefault("_recorded", []).append(buffer)

    def check_recorded(self) -> None:
        """The recorded buffers are still alive and usable (check_usable): looked at again
        only when some buffer's lifetime ended since the last look (Lifetime.ends), so a
        replay pays one identity test; the compiled submit reads `_recorded_checked` too."""
        ends = Lifetime.ends
        if self.__dict__.get("_recorded_checked") is ends:
            return
        for b in self.__dict__.get("_recorded", ()):
            check_usable(b, self.device, "a buffer recorded into this command buffer")
        self._recorded_checked = ends

    def check_bindings(self, bindings: Any, slots: int) -> None:
        """A binding table at submit: `slots` buffers of this device, alive, each as large
        as the ranges recorded for its slot; and the buffers recorded directly, alive."""
        self.check_recorded()
        if not isinstance(bindings, (list, tuple)):
            raise KernelArgumentError(
                f"bindings must be a list or tuple of buffers, got {type(bindings).__name__}"
            )
        if len(bindings) != slots:
            raise KernelArgumentError(
                f"the command buffer uses {slots} binding slot(s); got {len(bindings)} buffer(s)"
            )
        need = self.__dict__.get("_slot_bytes") or {}
        device = self.device
        token = owner_token(device)
        for i, b in enumerate(bindings):
            if not isinstance(b, Buffer):
                raise KernelArgumentError(
                    f"binding {i} ({b!r}) is not a buffer of {getattr(device, 'spec', '?')}"
                )
            if b._life.owner is not token:  # not alive and this device's: say why, or a peer's
                check_usable(b, device, f"binding {i}")
            if b.nbytes < need.get(i, 0):
                raise KernelArgumentError(
                    f"binding {i} ({b!r}) is smaller than the {need[i]} bytes the command "
                    f"buffer recorded for its slot: bind a larger buffer"
                )


_INF = float("inf")
_LIMITS: dict[Any, tuple[str, float, float]] = {}  # dtype -> (kind, lowest, highest)


def _limits(dt: np.dtype | None) -> tuple[str, float, float]:
    got = _LIMITS.get(dt)
    if got is None:
        if dt is None:
            got = ("i", -float("inf"), float("inf"))
        elif dt.kind == "f":
            got = ("f", -float(np.finfo(dt).max), float(np.finfo(dt).max))
        else:
            got = ("i", int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        _LIMITS[dt] = got
    return got


def _param_value(p: Param, value: Any) -> int | float:
    """`value` for placeholder `p`: one number of its type (an int for `param`, the
    scalar's dtype for `scalar`), else one KernelArgumentError line."""
    kind, lo, hi = _limits(p.dtype)
    t = type(value)
    if t is float and kind == "f":  # the fast paths: a plain Python number in range
        if lo <= value <= hi:
            return value
        if value != value or value in (_INF, -_INF):  # NaN and the infinities pass
            return value
        raise KernelArgumentError(
            f"parameter {p.name!r} ({p.kind}) cannot hold {value!r}: pass a value in "
            f"{lo:g}..{hi:g}"
        )
    if t is int and lo <= value <= hi:
        return value if kind == "i" else float(p.dtype.type(value))  # type: ignore[union-attr]
    if isinstance(value, np.ndarray):
        if value.shape != ():
            raise KernelArgumentError(
                f"parameter {p.name!r} wants one {p.kind} value, got an array of shape "
                f"{value.shape}: pass a number"
            )
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise KernelArgumentError(
            f"parameter {p.name!r} wants a {p.kind} number, got {type(value).__name__}"
        )
    dt = p.dtype
    if dt is None or dt.kind in "iu":
        if isinstance(value, (float, np.floating)):
            raise KernelArgumentError(
                f"parameter {p.name!r} is an integer ({p.kind}), got the float {value!r}"
            )
        v = int(value)
        if dt is not None:
            info = np.iinfo(dt)
            if not info.min <= v <= info.max:
                raise KernelArgumentError(
                    f"parameter {p.name!r} ({p.kind}) cannot hold {v}: pass a value in "
                    f"{info.min}..{info.max}"
                )
        return v
    with np.errstate(over="ignore"):
        f = float(dt.type(value))
    if not -_INF < f < _INF and np.isfinite(float(value)):
        raise KernelArgumentError(
            f"parameter {p.name!r} ({p.kind}) cannot hold {value!r}: pass a value in range"
        )
    return f


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise BufferRangeError(f"{what} must be a non-negative int of bytes, got {value!r}")
    return int(value)
