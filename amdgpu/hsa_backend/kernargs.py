"""Kernel arguments: a layout per kernel from its code-object metadata, and the ring of
kernarg memory that dispatches take their blocks from.

`KernargLayout.from_kernel(info)` reads `hsa.abi.codeobject.KernelInfo`: the explicit args
(global_buffer -> a device address, by_value -> packed by the size and offset that the
metadata gives, dynamic_shared_pointer -> the LDS offset of the dynamic area), then the
hidden args that the kernel lists (each at the offset the metadata gives, so code objects
v4, v5 and v6 all work). The layout is a numpy structured dtype (`layout.dtype`, one field
per argument at its metadata offset) and an equivalent precompiled `struct.Struct`, so an
immediate dispatch fills its whole block with one `pack_into`, and a command buffer keeps
templates it patches with vector writes. IREE kernels (bindings, then i32 constants) take
the same path: their metadata lists global_buffer args, then by_value ones.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from amdgpu.buffer import Buffer, check_usable
from ground.errors import KernelArgumentError, SignalTimeout
from hsa.abi.hidden_args import GEOMETRY_KINDS, geometry_value

KERNARG_ALIGNMENT = 16  # HSA: kernarg buffers are at least 16-byte aligned

# Hidden args that the driver fills from the dispatch shape: hsa.abi.hidden_args.
_GEOMETRY_KINDS = GEOMETRY_KINDS
# Hidden pointers the driver does not support (yet): written as null, so a kernel that
# uses printf or hostcalls faults visibly instead of writing into random memory.
_NULL_KINDS = {
    "hidden_printf_buffer",
    "hidden_hostcall_buffer",
    "hidden_multigrid_sync_arg",
    "hidden_heap_v1",
    "hidden_default_queue",
    "hidden_completion_action",
    "hidden_none",
    "hidden_private_base",  # apertures: gfx9+ read them from registers
    "hidden_shared_base",
}
_QUEUE_PTR_KIND = "hidden_queue_ptr"

_INT_TYPES = {
    "char": "b",
    "signed char": "b",
    "unsigned char": "B",
    "uchar": "B",
    "bool": "B",
    "short": "h",
    "unsigned short": "H",
    "ushort": "H",
    "int": "i",
    "unsigned int": "I",
    "uint": "I",
    "long": "q",
    "unsigned long": "Q",
    "ulong": "Q",
    "long long": "q",
    "unsigned long long": "Q",
    "size_t": "Q",
    "int8_t": "b",
    "uint8_t": "B",
    "int16_t": "h",
    "uint16_t": "H",
    "int32_t": "i",
    "uint32_t": "I",
    "int64_t": "q",
    "uint64_t": "Q",
}
_FLOAT_TYPES = {"half": "e", "_Float16": "e", "float": "f", "double": "d"}
_BY_SIZE_INT = {1: "B", 2: "H", 4: "I", 8: "Q"}
_STRUCT_TO_NUMPY = {
    "b": "i1",
    "B": "u1",
    "h": "<i2",
    "H": "<u2",
    "i": "<i4",
    "I": "<u4",
    "q": "<i8",
    "Q": "<u8",
    "e": "<f2",
    "f": "<f4",
    "d": "<f8",
}
_INT_RANGES = {
    "b": (-(1 << 7), 1 << 7),
    "B": (-(1 << 7), 1 << 8),
    "h": (-(1 << 15), 1 << 15),
    "H": (-(1 << 15), 1 << 16),
    "i": (-(1 << 31), 1 << 31),
    "I": (-(1 << 31), 1 << 32),
    "q": (-(1 << 63), 1 << 63),
    "Q": (-(1 << 63), 1 << 64),
}


@dataclass(frozen=True)
class ExplicitArg:
    """One argument the caller passes."""

    index: int
    name: str
    kind: str  # "buffer" | "value" | "bytes" | "dynamic_lds"
    offset: int
    size: int
    code: str  # struct code of the packed value ("Q" for a pointer, "Ns" for raw bytes)
    type_name: str
    is_float: bool = False
    strict_type: bool = False  # metadata named the type: floats need float-like values


class KernargLayout:
    """Where each argument of one kernel lives in its kernarg segment, and how to fill it."""

    def __init__(
        self,
        kernel_name: str,
        args: Sequence[Any],
        segment_size: int,
        segment_align: int,
        group_segment_fixed_size: int = 0,
    ):
        self.kernel_name = kernel_name
        self.alignment = max(KERNARG_ALIGNMENT, int(segment_align or 0))
        self.explicit: list[ExplicitArg] = []
        self.hidden: list[tuple[str, int, int]] = []  # (value_kind, offset, size)
        self.group_segment_fixed_size = int(group_segment_fixed_size)
        end = 0
        for a in args:
            kind = str(a.value_kind)
            size, offset = int(a.size), int(a.offset)
            end = max(end, offset + size)
            if kind.startswith("hidden_") or getattr(a, "is_hidden", False):
                self.hidden.append((kind, offset, size))
                continue
            i = len(self.explicit)
            name = a.name or f"arg{i}"
            type_name = (a.type_name or "").strip().rstrip("*").strip() if a.type_name else ""
            if kind == "global_buffer":
                self.explicit.append(ExplicitArg(i, name, "buffer", offset, size, "Q", type_name))
            elif kind == "dynamic_shared_pointer":
                code = "I" if size == 4 else "Q"
                self.explicit.append(
                    ExplicitArg(i, name, "dynamic_lds", offset, size, code, type_name)
                )
            elif kind == "by_value":
                value_code, is_float, strict = _value_code(type_name, size)
                kind_ = "value" if value_code else "bytes"
                self.explicit.append(
                    ExplicitArg(
                        i,
                        name,
                        kind_,
                        offset,
                        size,
                        value_code or f"{size}s",
                        type_name,
                        is_float,
                        strict,
                    )
                )
            else:  # image, sampler, pipe, queue: not supported by this driver
                raise KernelArgumentError(
                    f"kernel {kernel_name!r} argument {name!r} has value_kind {kind!r}, which this "
                    f"driver does not support: use buffers and by-value arguments"
                )
        # The block covers every argument the metadata lists (a kernel reads no other
        # bytes); the metadata's segment size (v5: explicit + 256 hidden bytes) may be
        # larger. Filling only what is read keeps command-buffer kernarg copies small.
        self.segment_size = int(segment_size or 0)
        self.size = _round_up(max(end, 1), KERNARG_ALIGNMENT)
        self._build()

    @classmethod
    def from_kernel(cls, info: Any) -> KernargLayout:
        """From a `hsa.abi.codeobject.KernelInfo`."""
        return cls(
            info.name,
            info.args,
            info.kernarg_segment_size,
            info.kernarg_segment_align,
            getattr(info, "group_segment_fixed_size", 0),
        )

    # --- compiled forms ------------------------------------------------------------------
    def _build(self) -> None:
        # (offset, field name, struct code, numpy type, role); role is the explicit arg's
        # index or the hidden arg's value_kind.
        fields: list[tuple[int, str, str, str, int | str]] = []
        for a in self.explicit:
            fields.append(
                (a.offset, a.name, a.code, _STRUCT_TO_NUMPY.get(a.code, f"V{a.size}"), a.index)
            )
        for kind, offset, size in self.hidden:
            code = _BY_SIZE_INT.get(size, f"{size}s")
            fields.append((offset, kind, code, _STRUCT_TO_NUMPY.get(code, f"V{size}"), kind))
        fields.sort(key=lambda f: f[0])
        fmt, pos, names = "<", 0, []
        self._template: list = []
        self._explicit_pos = [0] * len(self.explicit)
        self._hidden_slots: list[tuple[int, str, int]] = []  # (value position, source, axis)
        self._queue_ptr_pos: list[int] = []
        for p, (offset, name, code, _np_t, role) in enumerate(fields):
            if offset < pos:
                raise KernelArgumentError(
                    f"kernel {self.kernel_name!r} metadata has overlapping arguments at offset "
                    f"{offset}: rebuild the code object"
                )
            if offset > pos:
                fmt += f"{offset - pos}x"
            fmt += code
            pos = offset + struct.calcsize("<" + code)
            names.append(name if name not in names else f"{name}_{offset}")
            self._template.append(bytes(struct.calcsize("<" + code)) if code.endswith("s") else 0)
            if isinstance(role, int):
                self._explicit_pos[role] = p
            elif role in _GEOMETRY_KINDS:
                source, axis = _GEOMETRY_KINDS[role]
                self._hidden_slots.append((p, source, axis))
            elif role == _QUEUE_PTR_KIND:
                self._queue_ptr_pos.append(p)
            # everything else (global offsets, unsupported pointers) stays 0 / null
        if self.size > pos:
            fmt += f"{self.size - pos}x"
        self.struct = struct.Struct(fmt)
        self.dtype = np.dtype(
            {
                "names": names,
                "formats": [f[3] for f in fields],
                "offsets": [f[0] for f in fields],
                "itemsize": self.size,
            }
        )
        self.buffer_offsets = [a.offset for a in self.explicit if a.kind == "buffer"]
        self.queue_ptr_offsets = [o for k, o, _ in self.hidden if k == _QUEUE_PTR_KIND]
        self._hidden_cache: dict[tuple, bytes] = {}
        # where the hidden args start (the block's end without any): hidden_bytes returns
        # the block from here, whether or not explicit args come after (hand-built layouts
        # may interleave them; such a layout has no fast path)
        self.hidden_start = min((o for _, o, _ in self.hidden), default=self.size)
        self._fields = fields
        self._fast = self._generate_fast_path(fields)

    def unchecked_fast_path(self) -> Callable[[Sequence[Any], Any], tuple] | None:
        """The fast path's converter without its buffer-state test (each buffer's
        `_life.owner is owner`): only for benchmarks/bench_dispatch.py, which prints what
        issue 35's checks cost beside the checked figure. The driver never uses it."""
        return self._generate_fast_path(self._fields, check_owner=False)

    def _generate_fast_path(self, fields: list, check_owner: bool = True
                            ) -> Callable[[Sequence[Any], Any], tuple] | None:
        """A function `(args, owner) -> explicit struct values` for the common case: buffers
        are live Buffers of `owner` (the dispatching device), values have exactly the
        accepted types. Anything else (or a wrong count)
        raises, and the caller falls back to `values()`, which converts or names the
        problem. Generated once per layout, like a namedtuple's methods. None when explicit
        and hidden args interleave (then every dispatch takes the general path)."""

        hidden_start = self.hidden_start
        if any(a.offset + a.size > hidden_start for a in self.explicit):
            return None
        fmt, pos = "<", 0
        names = [f"a{i}" for i in range(len(self.explicit))]
        exprs = []
        for _offset, _name, code, _np_t, role in fields:
            if not isinstance(role, int):
                continue
            a = self.explicit[role]
            if a.offset > pos:
                fmt += f"{a.offset - pos}x"
            fmt += code
            pos = a.offset + struct.calcsize("<" + code)
            v = names[role]
            if a.kind == "buffer" and check_owner:  # alive and the owner's: one identity
                exprs.append(f"({v}.address if type({v}) is _Buffer and {v}._life.owner is "
                             f"owner else _bad)")  # test (Lifetime)
            elif a.kind == "buffer":
                exprs.append(f"({v}.address if type({v}) is _Buffer else _bad)")
            elif a.kind == "value" and a.is_float:
                exprs.append(f"({v} if type({v}) in _F else _bad)")
            elif a.kind == "value":
                exprs.append(f"({v} if type({v}) in _I else _bad)")
            else:
                exprs.append("_bad")
        if hidden_start > pos:  # pad to where the hidden args start
            fmt += f"{hidden_start - pos}x"
        self.explicit_struct = struct.Struct(fmt)
        ns: dict[str, Any] = {"_Buffer": Buffer, "_F": _FAST_FLOAT, "_I": _FAST_INT, "_bad": _Bad()}
        if names:
            comma = "," if len(names) == 1 else ""
            body = f"    {', '.join(names)}{comma} = args\n    return ({', '.join(exprs)}{comma})\n"
        else:
            body = "    if args:\n        raise ValueError\n    return ()\n"
        where = f"<kernargs {self.kernel_name}>"
        source = compile("def fast(args, owner):\n" + body, where, "exec")
        exec(source, ns)  # noqa: S102
        return ns["fast"]

    def hidden_bytes(
        self, grid: tuple, block: tuple, dims: int, dynamic_lds: int = 0, queue_ptr: int = 0
    ) -> bytes:
        """Bytes [hidden_start, size) of the block for this dispatch shape (cached). Where
        explicit args come after a hidden one (a hand-built, interleaved layout), their
        slots in that range hold zeros (bytes args) or placeholder 0 values."""
        key = (grid, block, dims, dynamic_lds, queue_ptr)
        h = self._hidden_cache.get(key)
        if h is None:
            vals = list(self._template)
            self._fill_hidden(vals, grid, block, dims, dynamic_lds, queue_ptr)
            for a in self.explicit:  # explicit slots hold placeholders: any valid value
                if a.kind != "bytes":
                    vals[self._explicit_pos[a.index]] = 0
            h = self.struct.pack(*vals)[self.hidden_start :]
            if len(self._hidden_cache) > 256:
                self._hidden_cache.clear()
            self._hidden_cache[key] = h
        return h

    def fill(
        self,
        memory: Any,
        offset: int,
        args: Sequence[Any],
        grid: tuple,
        block: tuple,
        dims: int,
        dynamic_lds: int = 0,
        queue_ptr: int = 0,
        device: Any = None,
    ) -> None:
        """Write one dispatch's whole block at `offset` of `memory` (a writable buffer):
        the explicit args with one `pack_into`, the hidden args as one cached byte run.
        Raises KernelArgumentError naming the kernel and argument when args are wrong, and
        BufferStateError for a buffer not usable on `device`."""
        fast = self._fast
        if fast is not None:
            try:
                self.explicit_struct.pack_into(memory, offset, *fast(args, device))
                start = offset + self.hidden_start
                memory[start : offset + self.size] = self.hidden_bytes(
                    grid, block, dims, dynamic_lds, queue_ptr
                )
                return
            except (ValueError, TypeError, AttributeError, struct.error):
                pass
        self.struct.pack_into(memory, offset, *self.values(
            args, grid, block, dims, dynamic_lds, queue_ptr, device=device))

    # --- filling -------------------------------------------------------------------------
    def values(
        self,
        args: Sequence[Any],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        dims: int,
        dynamic_lds: int = 0,
        queue_ptr: int = 0,
        resolve_buffer: Callable[[int, Any], int | None] | None = None,
        device: Any = None,
    ) -> list:
        """The struct values of one dispatch (explicit args checked and converted); with
        `device`, each Buffer is checked to be alive and usable there (check_usable)."""
        explicit = self.explicit
        if not isinstance(args, (tuple, list)):
            raise KernelArgumentError(
                f"kernel {self.kernel_name!r} takes its arguments as a tuple or list, got "
                f"{type(args).__name__}: pass args=(...)"
            )
        if len(args) != len(explicit):
            names = ", ".join(a.name for a in explicit)
            raise KernelArgumentError(
                f"kernel {self.kernel_name!r} takes {len(explicit)} argument(s) ({names}), "
                f"got {len(args)}: pass them in this order"
            )
        vals = list(self._template)
        pos = self._explicit_pos
        for a, v in zip(explicit, args, strict=False):
            if a.kind == "buffer":
                addr: int | None
                if device is not None and isinstance(v, Buffer):
                    addr = check_usable(
                        v, device, f"argument {a.index} {a.name!r} of kernel {self.kernel_name!r}")
                else:
                    addr = getattr(v, "address", None)
                if addr is None:
                    if resolve_buffer is not None:
                        addr = resolve_buffer(a.index, v)
                    elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                        addr = int(v)
                if addr is None:
                    raise self._type_error(a, v, "a device Buffer")
                vals[pos[a.index]] = addr
            elif a.kind == "value":
                vals[pos[a.index]] = self._convert(a, v)
            elif a.kind == "dynamic_lds":
                vals[pos[a.index]] = _round_up(self.group_segment_fixed_size, 16)
            else:
                raw = (
                    bytes(v)
                    if isinstance(v, (bytes, bytearray, memoryview))
                    else (
                        np.asarray(v).tobytes()
                        if isinstance(v, (np.ndarray, np.void, np.generic))
                        else None
                    )
                )
                if raw is None or len(raw) != a.size:
                    raise self._type_error(a, v, f"{a.size} bytes (bytes or a numpy record)")
                vals[pos[a.index]] = raw
        self._fill_hidden(vals, grid, block, dims, dynamic_lds, queue_ptr)
        return vals

    def _fill_hidden(self, vals: list, grid, block, dims, dynamic_lds, queue_ptr) -> None:
        for p, source, axis in self._hidden_slots:
            vals[p] = geometry_value(source, axis, grid, block, dims, dynamic_lds)
        for p in self._queue_ptr_pos:
            vals[p] = queue_ptr

    def pack(self, *a, **k) -> bytes:
        return self.struct.pack(*self.values(*a, **k))

    def pack_into(self, memory: Any, offset: int, *a, **k) -> None:
        """Fill the block at `offset` of `memory` (writable buffer) in one write."""
        self.struct.pack_into(memory, offset, *self.values(*a, **k))

    def _convert(self, a: ExplicitArg, v: Any):
        if isinstance(v, bool) or v is None or hasattr(v, "address"):
            raise self._type_error(a, v, a.type_name or f"a {a.size}-byte value")
        if a.is_float:
            if isinstance(v, (float, int, np.floating, np.integer)):
                return float(v)
            raise self._type_error(a, v, a.type_name or "a float")
        if isinstance(v, (np.floating, float)):
            if a.strict_type:
                raise self._type_error(a, v, a.type_name)
            # IREE passes every constant as i32: a float goes in as its bits.
            if a.size == 4:
                return int(np.float32(v).view(np.uint32))
            if a.size == 8:
                return int(np.float64(v).view(np.uint64))
            if a.size == 2:
                return int(np.float16(v).view(np.uint16))
            raise self._type_error(a, v, f"a {a.size}-byte integer")
        if isinstance(v, (int, np.integer)):
            v = int(v)
            lo, hi = _INT_RANGES[a.code]
            if not lo <= v < hi:
                raise KernelArgumentError(
                    f"kernel {self.kernel_name!r} argument {a.name!r} ({a.type_name or a.code}) "
                    f"cannot hold {v}: pass a value in range"
                )
            if a.code.isupper() and v < 0:  # an unsigned slot takes a negative as two's complement
                v += 1 << (8 * a.size)
            elif a.code.islower() and v >= (1 << (8 * a.size - 1)):
                v -= 1 << (8 * a.size)
            return v
        raise self._type_error(a, v, a.type_name or f"a {a.size}-byte value")

    def _type_error(self, a: ExplicitArg, v: Any, wanted: str) -> KernelArgumentError:
        return KernelArgumentError(
            f"kernel {self.kernel_name!r} argument {a.index} {a.name!r} wants {wanted}, got "
            f"{type(v).__name__}: pass the right kind of value"
        )

    def describe(self) -> list[dict]:
        """The layout as a list of {name, kind, offset, size, type_name} (for traces and
        tests). type_name is the metadata's type without `const`/`*` ("float", "uint"),
        "" where the metadata names none; hidden args are named by their value_kind."""
        out = [
            {"name": a.name, "kind": a.kind, "offset": a.offset, "size": a.size,
             "type_name": a.type_name.replace("const ", "").strip()}
            for a in self.explicit
        ]
        out += [
            {"name": k, "kind": "hidden", "offset": o, "size": s, "type_name": ""}
            for k, o, s in self.hidden
        ]
        return sorted(out, key=lambda d: d["offset"])

    def __repr__(self) -> str:
        return (
            f"<KernargLayout {self.kernel_name} {self.size} bytes, "
            f"{len(self.explicit)} explicit, {len(self.hidden)} hidden>"
        )


class _Bad:
    """Placed where the fast path cannot take a value: struct.pack rejects it."""


_FAST_FLOAT = frozenset({float, int, np.float16, np.float32, np.float64})
_FAST_INT = frozenset(
    {int, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64}
)


def _value_code(type_name: str, size: int) -> tuple[str | None, bool, bool]:
    """(struct code, is_float, metadata named the type) for a by_value arg."""
    t = type_name.replace("const ", "").strip()
    if t in _FLOAT_TYPES and struct.calcsize("<" + _FLOAT_TYPES[t]) == size:
        return _FLOAT_TYPES[t], True, True
    if t in _INT_TYPES and struct.calcsize("<" + _INT_TYPES[t]) == size:
        return _INT_TYPES[t], False, True
    if size in _BY_SIZE_INT:
        return _BY_SIZE_INT[size], False, False
    return None, False, False


def _round_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


class KernargRing:
    """A ring allocator over one kernarg-pool allocation.

    Blocks are handed out in order, each tagged with the timeline value of the submission
    that reads it; a block is reused once its lane's timeline has passed that value.
    `completed()` returns the lane's completed value, `wait(value, timeout)` waits for one.
    The last RING_SLACK bytes are never handed out: a kernel's widened scalar load past its
    last argument still reads inside the allocation.
    """

    RING_SLACK = 256

    def __init__(
        self,
        base_address: int,
        memory: np.ndarray,
        completed: Callable[[], int],
        wait: Callable[[int, float], None],
    ):
        self.base = int(base_address)
        self.memory = memory  # writable uint8 host view of the allocation
        self.capacity = self.capacity_for(memory.size)
        self._completed = completed
        self._wait = wait
        self._head = 0  # next free offset
        self._limit = self.capacity  # end of the free run that starts at head
        # Live blocks, oldest first: their start offsets and the timeline values that free
        # them (two deques of ints: no tuple per dispatch for the garbage collector).
        self._starts: deque[int] = deque()
        self._values: deque[int] = deque()

    def allocate(self, nbytes: int, timeline_value: int, timeout: float = 10.0) -> int:
        """Offset of a fresh 16-byte aligned block of `nbytes` (an address is base+offset)."""
        nbytes = (nbytes + 15) & ~15
        start = self._head
        end = start + nbytes
        if end <= self._limit and nbytes:  # the common case: room after head
            self._head = end
            self._starts.append(start)
            self._values.append(timeline_value)
            return start
        return self._allocate_slow(max(nbytes, KERNARG_ALIGNMENT), timeline_value, timeout)

    def _allocate_slow(self, nbytes: int, timeline_value: int, timeout: float) -> int:
        if nbytes > self.capacity:
            raise KernelArgumentError(
                f"{nbytes} bytes of kernel arguments exceed the {self.capacity}-byte kernarg "
                f"ring: submit fewer dispatches at once"
            )
        block = False
        while True:
            self._reclaim(block=block, timeout=timeout)
            start = self._fit(nbytes)
            if start is not None:
                self._head = start + nbytes
                self._starts.append(start)
                self._values.append(timeline_value)
                self._update_limit()
                return start
            block = True

    def _update_limit(self) -> None:
        if not self._starts:
            self._limit = self.capacity
            return
        tail = self._starts[0]
        self._limit = self.capacity if self._head > tail else tail

    def _fit(self, nbytes: int) -> int | None:
        if not self._starts:
            return 0
        head, tail = self._head, self._starts[0]
        if head > tail:  # live run is [tail, head): free at the end, then at the start
            if head + nbytes <= self.capacity:
                return head
            return 0 if nbytes <= tail else None
        return head if head + nbytes <= tail else None  # wrapped: free run is [head, tail)

    def _reclaim(self, block: bool, timeout: float) -> None:
        done = self._completed()
        freed = False
        starts, values = self._starts, self._values
        while values and values[0] <= done:
            values.popleft()
            starts.popleft()
            freed = True
        if not values:
            self._head = 0
        if freed or not block or not values:
            self._update_limit()
            return
        oldest = values[0]
        try:
            self._wait(oldest, timeout)
        except SignalTimeout as e:
            raise SignalTimeout(e.status, f"kernarg ring full and {e.text}", e.call) from e
        self._reclaim(block=False, timeout=0)

    def reclaim(self) -> None:
        self._reclaim(block=False, timeout=0)

    @staticmethod
    def capacity_for(nbytes: int) -> int:
        """The bytes a ring over `nbytes` of memory hands out (the compiled lane's too)."""
        return max(nbytes - KernargRing.RING_SLACK, KERNARG_ALIGNMENT)

    @property
    def head(self) -> int:
        """The next free offset."""
        return self._head

    def blocks(self) -> list[tuple[int, int]]:
        """[(start, timeline value)] of the blocks in use, oldest first."""
        return list(zip(self._starts, self._values, strict=True))

    @property
    def in_use(self) -> int:
        return len(self._values)
