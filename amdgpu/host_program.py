"""Runs IREE's HAL-level host program (compiler/iree_host.py) over the Device API.

The interpreter executes what IREE compiled, op by op: the initializers once (executables,
command buffers memoized at load time, constants moved into globals), then the entry
function per run, with its branches (`cf.br`/`cf.cond_br` over blocks: the scf.if/while of
the source), host reads of device values (`hal.buffer.load` waits for the device first),
push constants computed on the host, command buffers recorded at run time, queue copies,
fills, transient allocations (`queue.alloca`/`dealloca`, reused through a free list keyed by
size) and results that alias anything.

Values: integers are Python ints wrapped to their type's width (i1 is 0/1), floats numpy
scalars of their type, buffers `_Buf` (a device buffer and a byte range; host-side
`util.buffer`s are bytes), buffer views `_View`, command buffers `_Recording`.

A recorded command buffer runs immediately (one `dispatch`/`copy`/`fill` per command) or,
with `replay=True`, as a driver command buffer recorded once over binding slots and
submitted with each execution's binding table (IREE's memoized command buffers are exactly
that: recorded at initialization, executed with `queue.execute.indirect`). A recording made
by an initializer may also name the initializers' buffers (the weights) directly: those are
fixed in the driver command buffer, so the whole execution is one submission.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from amdgpu import dtypes
from ground.errors import DeviceError

_INT_WIDTHS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}
_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_LOAD_TYPES = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
               "index": np.int64, "i1": np.uint8, **_FLOATS}
# arith.cmpi predicates (MLIR's CmpIPredicate numbers)
_CMPI = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule",
         8: "ugt", 9: "uge"}
_MAX_STEPS = 50_000_000


def _float_type(t: str) -> Any:
    if t == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _FLOATS.get(t)


def _wrap(value: int, t: str) -> int:
    bits = _INT_WIDTHS.get(t, 64)
    value = int(value) & ((1 << bits) - 1)
    if bits > 1 and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _unsigned(value: int, t: str) -> int:
    return int(value) & ((1 << _INT_WIDTHS.get(t, 64)) - 1)


class _Buf:
    """A byte range of a device buffer (or of host bytes, for util.buffer)."""

    __slots__ = ("base", "offset", "length")

    def __init__(self, base: Any, offset: int, length: int):
        self.base, self.offset, self.length = base, int(offset), int(length)

    def view(self, offset: int = 0, length: int | None = None) -> Any:
        if length is None or length < 0:
            length = self.length - offset
        return self.base.view(self.offset + int(offset), int(length))

    def sub(self, offset: int, length: int) -> _Buf:
        if length < 0:
            length = self.length - offset
        return _Buf(self.base, self.offset + int(offset), int(length))


class _View:
    __slots__ = ("buf", "shape", "dtype")

    def __init__(self, buf: _Buf, shape: list[int], dtype: str):
        self.buf, self.shape, self.dtype = buf, shape, dtype


class _Recording:
    """A HAL command buffer: its commands with host values resolved at record time.

    `fixed`: the buffers it may name directly (besides binding-table slots) and still be
    replayed as one driver command buffer: for a recording made by an initializer (IREE's
    memoized command buffers), the initializers' allocations (the model's weights and
    other globals), which live as long as the program; none for one made at run time."""

    def __init__(self, capacity: int, fixed: frozenset = frozenset()):
        self.capacity = capacity
        self.fixed = fixed  # ids of the device buffers direct references may name
        self.commands: list[tuple] = []
        self.driver_cb: Any = None  # the replayable recording over slots, made once
        self._replayable: bool | None = None

    @property
    def replayable(self) -> bool:
        """Whether every reference is a slot or a buffer of `fixed` (no host updates)."""
        if self._replayable is None:
            self._replayable = self._check_replayable()
        return self._replayable

    def _check_replayable(self) -> bool:
        def fixed_or_slots(refs) -> bool:
            return all(isinstance(r[0], int) or (isinstance(r[0], _Buf) and id(r[0].base)
                                                 in self.fixed) for r in refs)

        for c in self.commands:
            if c[0] == "dispatch" and not fixed_or_slots(c[4]):
                return False
            if c[0] in ("copy", "fill") and not fixed_or_slots(
                    c[1:3] if c[0] == "copy" else c[1:2]):
                return False
            if c[0] == "update":
                return False
        return True


# Placeholder for "the initializers' buffers" until a recording first runs.
_INIT_BUFFERS: frozenset = frozenset({"initializers"})


class _Return(Exception):
    def __init__(self, values: list):
        self.values = values


class HostProgram:
    """One program's host side on one device: initializers run at construction."""

    def __init__(self, device: Any, executable: Any, host: dict, timeout: float = 60.0):
        self.device = device
        self.executable = executable
        self.host = host
        self.timeout = timeout
        self.globals: dict[str, Any] = dict(host.get("globals") or {})
        self.kernels: dict[str, Any] = {}
        self.dispatched: list[str] = []  # kernels of the last run, in order
        self._owned: list[Any] = []  # allocations of the current run
        self._pool: dict[int, list[Any]] = {}
        self._persistent: list[Any] = []  # initializer allocations (constants)
        self._pending = False
        self._constants: dict[int, bytes] = {}
        self._replay = False
        self._steps = 0
        self._in_init = True
        for init in host.get("initializers", []):
            self._call(init, [])
        self._in_init = False

    # --- the run -------------------------------------------------------------------------
    def run(self, inputs: list[Any], replay: bool = False) -> list[Any]:
        """Run the entry function on input device buffers; returns its results (views).

        An input may be a result of an earlier run (a model's KV cache carried between
        calls on the device): the allocation behind it stays out of the free list for this
        run, so no new result is placed over it."""
        held = {id(getattr(b, "root", b)) for b in inputs}
        keep = []
        for buf in self._owned:  # the previous run's buffers become reusable
            if id(getattr(buf, "root", buf)) in held:
                keep.append(buf)
            else:
                self._pool.setdefault(len(buf), []).append(buf)
        self._owned = keep
        self.dispatched = []
        self._replay = replay
        self._steps = 0
        func = self.host["funcs"][self.host["entry"]]
        views = []
        for buf, t in zip(inputs, self.host["inputs"], strict=True):
            views.append(_View(_Buf(buf, 0, len(buf)), list(t["shape"]), t["dtype"]))
        return self._call(func, views)

    def read(self, results: list[Any]) -> list[np.ndarray]:
        self._sync()
        out = []
        for value in results:
            if isinstance(value, _View):
                n = dtypes.storage_nbytes(value.shape, value.dtype)
                raw = value.buf.view(0, n).to_numpy(np.uint8) if n else np.zeros(0, np.uint8)
                out.append(dtypes.unpack(raw, value.dtype, value.shape))
            else:
                out.append(np.asarray(value))
        return out

    def free(self) -> None:
        for buf in [*self._owned, *(b for bs in self._pool.values() for b in bs)]:
            try:
                buf.free()
            except Exception:  # noqa: BLE001 - freeing is best effort at the end of a run
                pass
        self._owned, self._pool = [], {}

    # --- interpretation ------------------------------------------------------------------
    def _call(self, func: dict, args: list) -> list:
        return _interpret_call(self, func, args)

    # --- values --------------------------------------------------------------------------
    def _sync(self) -> None:
        if self._pending:
            self.device.synchronize(self.timeout)
            self._pending = False

    def _alloc(self, size: int) -> Any:
        size = max(int(size), 1)
        free = self._pool.get(size)
        buf = free.pop() if free else self.device.buffer(size)
        (self._persistent if self._in_init else self._owned).append(buf)
        return buf

    def _kernel(self, name: str) -> Any:
        k = self.kernels.get(name)
        if k is None:
            if self.executable is None:
                raise DeviceError(f"the program dispatches {name!r} but the bundle has no kernels")
            k = self.kernels[name] = self.executable.kernel(name)
        return k


def _interpret_call(self: HostProgram, func: dict, args: list) -> list:
    """HostProgram._call with the function's blocks at hand for branch arguments."""
    env: dict[int, Any] = dict(zip(func["args"], args, strict=True))
    blocks = func["blocks"]
    block = 0
    handlers = _HANDLERS
    try:
        while True:
            ops = blocks[block]["ops"]
            nxt = None
            for op in ops:
                self._steps += 1
                if self._steps > _MAX_STEPS:
                    raise DeviceError(
                        f"the IREE host program ran {_MAX_STEPS} operations without "
                        "returning (a loop that does not end?); check its exit condition"
                    )
                succ = op.get("succ")
                if succ is not None:
                    take = 0 if op["op"] != "cf.cond_br" or env[op["in"][0]] else 1
                    nxt = succ[take]
                    break
                handler = handlers.get(op["op"])
                if handler is None:
                    raise DeviceError(
                        f"the IREE host program uses {op['op']}, which amdgpu-run does not "
                        "interpret yet; simplify the program or file an issue with it"
                    )
                got = handler(self, op, [env.get(r) for r in op["in"]], env)
                outs = op["out"]
                if outs:
                    if len(outs) == 1:
                        env[outs[0]] = got
                    else:
                        env.update(zip(outs, got, strict=True))
            if nxt is None:
                raise DeviceError("a block of the IREE host program has no terminator")
            index, regs = nxt
            values = [env[r] for r in regs]
            block = index
            env.update(zip(blocks[block]["args"], values, strict=True))
    except _Return as ret:
        return ret.values


# --- operation handlers: (program, op, operand values, env) -> result(s) ------------------
def _f(op: dict, env: dict, name: str) -> Any:
    """The value of the named operand field."""
    reg = op["f"][name]
    return [env[r] for r in reg] if isinstance(reg, list) else env[reg]


def _has(op: dict, name: str) -> bool:
    return name in op.get("f", {})


def _constant(p, op, ins, env):
    value = op["a"]["value"]
    t = op["types"][0]
    if isinstance(value, str):
        raise DeviceError(
            f"the IREE host program holds a constant {value[:40]}..., which amdgpu-run does "
            "not interpret yet (only scalar constants)"
        )
    ft = _float_type(t)
    if ft is not None:
        return ft(value)
    return _wrap(int(value), t)


def _int_binary(fn):
    def handler(p, op, ins, env):
        t = op["types"][0]
        a, b = ins
        return _wrap(fn(int(a), int(b), t), t)
    return handler


def _div_trunc(a: int, b: int) -> int:
    if b == 0:
        raise DeviceError("the IREE host program divides by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _float_binary(fn):
    def handler(p, op, ins, env):
        ft = _float_type(op["types"][0]) or np.float64
        with np.errstate(all="ignore"):
            return ft(fn(ins[0], ins[1]))
    return handler


def _cmpi(p, op, ins, env):
    pred = _CMPI[op["a"]["predicate"]]
    a, b = int(ins[0]), int(ins[1])
    if pred[0] == "u":
        bits = 64
        a, b = a & ((1 << bits) - 1), b & ((1 << bits) - 1)
        pred = pred[1:]
    elif pred[0] == "s":
        pred = pred[1:]
    return int({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
                "ge": a >= b}[pred])


def _cmpf(p, op, ins, env):
    pred = op["a"]["predicate"]
    a, b = float(ins[0]), float(ins[1])
    unordered = np.isnan(a) or np.isnan(b)
    if pred in (0, 15):
        return int(pred == 15)
    if pred == 7:
        return int(not unordered)
    if pred == 14:
        return int(unordered)
    ordered, rel = (True, pred) if pred < 8 else (False, pred - 7)
    if unordered:
        return int(not ordered)
    return int({1: a == b, 2: a > b, 3: a >= b, 4: a < b, 5: a <= b, 6: a != b}[rel])


def _select(p, op, ins, env):
    return ins[1] if ins[0] else ins[2]


def _int_cast(p, op, ins, env):
    t = op["types"][0]
    src = ins[0]
    name = op["op"]
    if name in ("arith.extui", "arith.index_castui"):
        # from the operand's own width: the op's operand type is the result of another op
        src = _unsigned(src, _operand_type(op))
    return _wrap(int(src), t)


def _operand_type(op: dict, field: str | None = None) -> str:
    """The type of the op's first operand, or of its operand field `field`."""
    types = op.get("in_types") or ["i64"]
    if field is None:
        return types[0]
    return types[op["in"].index(op["f"][field])]


def _to_float(p, op, ins, env):
    t = op["types"][0]
    ft = _float_type(t)
    v = ins[0]
    if op["op"] == "arith.uitofp":
        v = _unsigned(v, _operand_type(op))
    return ft(float(v) if not isinstance(v, int) else v)


def _to_int(p, op, ins, env):
    t = op["types"][0]
    return _wrap(int(np.trunc(float(ins[0]))), t)


def _bitcast(p, op, ins, env):
    t = op["types"][0]
    v = ins[0]
    ft = _float_type(t)
    if ft is not None:  # int -> float of the same width
        width = np.dtype(ft).itemsize * 8
        return np.array([_unsigned(v, f"i{width}")], dtype=f"u{width // 8}").view(ft)[0]
    if isinstance(v, (np.floating, float)):
        arr = np.array([v], dtype=type(v) if not isinstance(v, float) else np.float64)
        return _wrap(int(arr.view(f"i{arr.itemsize}")[0]), t)
    return _wrap(v, t)


def _return(p, op, ins, env):
    raise _Return(list(ins))


def _call(p, op, ins, env):
    callee = op["a"]["callee"]
    func = p.host["funcs"].get(callee)
    if func is None:
        raise DeviceError(f"the IREE host program calls {callee}, which it does not define "
                          "(an external function); unsupported")
    got = p._call(func, list(ins))
    return got[0] if len(op["out"]) == 1 else got


def _check_ok(p, op, ins, env):
    if ins[0]:
        message = op.get("a", {}).get("message", "")
        raise DeviceError(f"the IREE program failed a check (status {ins[0]}): {message}")


def _assert(p, op, ins, env):
    """cf.assert: the program's own check of a value it computed (a Resize's scales)."""
    if not ins[0]:
        message = op.get("a", {}).get("msg", "") or "(no message)"
        raise DeviceError(f"the IREE program's assertion failed: {message}; check the "
                          "input values it names")


def _global_load(p, op, ins, env):
    return p.globals.get(op["a"]["global"])


def _global_store(p, op, ins, env):
    p.globals[op["a"]["global"]] = ins[0]


def _query(p, op, ins, env):
    types = op["types"]
    value_type = types[-1]
    if value_type == "i1":
        return [1, 1]  # the program was compiled for this device and its format
    default = op.get("a", {}).get("default_value", 0)
    return [1, int(default) if not isinstance(default, str) else 0]


def _view_create(p, op, ins, env):
    buf = _f(op, env, "source_buffer")
    offset, length = _f(op, env, "source_offset"), _f(op, env, "source_length")
    shape = [int(d) for d in _f(op, env, "shape")]
    dtype = _f(op, env, "element_type")
    return _View(buf.sub(offset, length), shape, dtype)


def _view_dim(p, op, ins, env):
    return ins[0].shape[op["a"]["index"]]


def _subspan(p, op, ins, env):
    buf = _f(op, env, "source_buffer")
    return buf.sub(_f(op, env, "source_offset"), _f(op, env, "length"))


def _load(p, op, ins, env):
    buf, offset = _f(op, env, "source_buffer"), _f(op, env, "source_offset")
    t = op["types"][0]
    dt = np.dtype(_LOAD_TYPES.get(t) or _float_type(t))
    if isinstance(buf.base, (bytes, bytearray)):
        raw = np.frombuffer(bytes(buf.base[buf.offset + offset:][:dt.itemsize]), np.uint8)
    else:
        p._sync()
        raw = buf.view(offset, dt.itemsize).to_numpy(np.uint8)
    value = raw.view(dt)[0]
    if t in _INT_WIDTHS:
        return _wrap(int(value), t)
    return value


def _store(p, op, ins, env):
    value = _f(op, env, "value")
    buf, offset = _f(op, env, "target_buffer"), _f(op, env, "target_offset")
    t = _operand_type(op, "value")
    if t in _INT_WIDTHS:
        width = max(_INT_WIDTHS[t] // 8, 1)
        raw = np.frombuffer(_unsigned(value, t).to_bytes(width, "little"), np.uint8)
    else:
        raw = np.array([value], _float_type(t)).view(np.uint8)
    p._sync()
    buf.view(offset, raw.nbytes).write(raw)


def _alloca(p, op, ins, env):
    size = _f(op, env, "result_size")
    return _Buf(p._alloc(size), 0, size)


def _dealloca(p, op, ins, env):
    buf = _f(op, env, "buffer")
    # Back to the free list at once: the lane runs in order, so a later allocation's work
    # cannot overtake the work still reading this one.
    if buf is not None and buf.offset == 0 and any(b is buf.base for b in p._owned):
        p._owned = [b for b in p._owned if b is not buf.base]
        p._pool.setdefault(len(buf.base), []).append(buf.base)


def _allocate(p, op, ins, env):
    size = _f(op, env, "result_size")
    return _Buf(p._alloc(size), 0, size)


def _import(p, op, ins, env):
    src = _f(op, env, "source")
    offset, length = _f(op, env, "offset"), _f(op, env, "length")
    data = np.frombuffer(bytes(src[offset:offset + length]), np.uint8)
    buf = p.device.buffer(data if data.nbytes else np.zeros(1, np.uint8))
    (p._persistent if p._in_init else p._owned).append(buf)
    return [1, _Buf(buf, 0, length)]


def _buffer_constant(p, op, ins, env):
    cached = p._constants.get(id(op))
    if cached is None:
        cached = p._constants[id(op)] = base64.b64decode(op["a"]["bytes"])
    return cached


def _file_from_memory(p, op, ins, env):
    src = _f(op, env, "buffer")
    offset, length = _f(op, env, "offset"), _f(op, env, "length")
    return bytes(src[offset:offset + length])


def _queue_read(p, op, ins, env):
    src = _f(op, env, "source_file")
    soff = _f(op, env, "source_offset")
    dst, doff, n = _f(op, env, "target_buffer"), _f(op, env, "target_offset"), _f(op, env, "length")
    p._sync()
    dst.view(doff, n).write(np.frombuffer(bytes(src[soff:soff + n]), np.uint8))


def _queue_update(p, op, ins, env):
    src, soff = _f(op, env, "source_buffer"), _f(op, env, "source_offset")
    dst, doff, n = _f(op, env, "target_buffer"), _f(op, env, "target_offset"), _f(op, env, "length")
    p._sync()
    dst.view(doff, n).write(np.frombuffer(bytes(src[soff:soff + n]), np.uint8))


def _queue_copy(p, op, ins, env):
    src, soff = _f(op, env, "source_buffer"), _f(op, env, "source_offset")
    dst, doff, n = _f(op, env, "target_buffer"), _f(op, env, "target_offset"), _f(op, env, "length")
    if n:
        p.device.copy(dst.view(doff, n), src.view(soff, n), n)
        p._pending = True


def _pattern(op: dict, env: dict) -> bytes:
    value = _f(op, env, "pattern")
    width = {"i8": 1, "i16": 2, "i32": 4, "i64": 8}[_operand_type(op, "pattern")]
    return (_unsigned(value, f"i{width * 8}")).to_bytes(width, "little")


def _queue_fill(p, op, ins, env):
    dst, doff, n = _f(op, env, "target_buffer"), _f(op, env, "target_offset"), _f(op, env, "length")
    if n:
        p.device.fill(dst.view(doff, n), _pattern(op, env), n)
        p._pending = True


def _cb_create(p, op, ins, env):
    cap = _f(op, env, "binding_capacity") if _has(op, "binding_capacity") else 0
    # Made by an initializer: it may name the initializers' buffers directly (the set is
    # taken when it first runs, so allocations after this op count too).
    return _Recording(int(cap or 0), _INIT_BUFFERS if p._in_init else frozenset())


def _binding(op: dict, env: dict, buf_reg: int, off: int, length: int) -> tuple:
    value = env[buf_reg]
    return (value if isinstance(value, int) else value, int(off), int(length))


def _cb_dispatch(p, op, ins, env):
    rec = _f(op, env, "command_buffer")
    kernel = env[op["f"]["entry_point"]]
    count = [int(_f(op, env, k)) for k in ("workgroup_x", "workgroup_y", "workgroup_z")]
    consts = [int(c) & 0xFFFFFFFF for c in _f(op, env, "constants")]
    bindings = [
        _binding(op, env, b, off, n) for b, off, n in zip(
            op["f"]["binding_buffers"], _f(op, env, "binding_offsets"),
            _f(op, env, "binding_lengths"), strict=True)
    ]
    rec.commands.append(("dispatch", kernel, count, consts, bindings))


def _cb_barrier(p, op, ins, env):
    rec = _f(op, env, "command_buffer")
    rec.commands.append(("barrier",))


def _cb_copy(p, op, ins, env):
    rec = _f(op, env, "command_buffer")
    n = int(_f(op, env, "length"))
    src = (_f(op, env, "source_buffer"), int(_f(op, env, "source_offset")), n)
    dst = (_f(op, env, "target_buffer"), int(_f(op, env, "target_offset")), n)
    rec.commands.append(("copy", dst, src, n))


def _cb_fill(p, op, ins, env):
    rec = _f(op, env, "command_buffer")
    n = int(_f(op, env, "length"))
    dst = (_f(op, env, "target_buffer"), int(_f(op, env, "target_offset")), n)
    rec.commands.append(("fill", dst, _pattern(op, env), n))


def _cb_update(p, op, ins, env):
    rec = _f(op, env, "command_buffer")
    n = int(_f(op, env, "length"))
    src, soff = _f(op, env, "source_buffer"), int(_f(op, env, "source_offset"))
    dst = (_f(op, env, "target_buffer"), int(_f(op, env, "target_offset")), n)
    rec.commands.append(("update", dst, bytes(src[soff:soff + n]), n))


def _execute(p, op, ins, env):
    rec = _f(op, env, "command_buffer")
    table = []
    if _has(op, "binding_buffers"):
        table = list(zip(_f(op, env, "binding_buffers"), _f(op, env, "binding_offsets"),
                         _f(op, env, "binding_lengths"), strict=True))
    _run_recording(p, rec, table)


def _resolve(table: list, ref: tuple) -> Any:
    """A device buffer view for a command's binding (a slot of `table`, or a buffer)."""
    target, off, n = ref
    if isinstance(target, int):
        buf, toff, tlen = table[target]
        base = buf.sub(toff, tlen)
        return base.view(off, n)
    return target.view(off, n)


def _grid(kernel: dict, count: list[int]) -> tuple[tuple, tuple]:
    wg = [int(x) for x in kernel["workgroup_size"]]
    grid = [c * w for c, w in zip(count, wg, strict=True)]
    dims = 3
    while dims > 1 and grid[dims - 1] == 1 and wg[dims - 1] == 1:
        dims -= 1
    return tuple(grid[:dims]), tuple(wg[:dims])


def _run_recording(p: HostProgram, rec: _Recording, table: list) -> None:
    dev = p.device
    for c in rec.commands:
        if c[0] == "dispatch":
            p.dispatched.append(c[1]["name"])
    if rec.fixed is _INIT_BUFFERS and not p._in_init:  # the initializers' buffers, all made
        rec.fixed = frozenset(id(b) for b in p._persistent)
    if p._replay and (table or rec.fixed) and rec.replayable:
        if rec.driver_cb is None:
            rec.driver_cb = _record_driver_cb(p, rec)
        views = []
        for buf, toff, tlen in table:
            views.append(buf.sub(toff, tlen).view(0, None))
        dev.submit(rec.driver_cb, views)
        p._pending = True
        return
    for c in rec.commands:
        kind = c[0]
        if kind == "dispatch":
            _tag, kernel, count, consts, bindings = c
            if not all(count):
                continue
            grid, block = _grid(kernel, count)
            args = [_resolve(table, b) for b in bindings]
            args += [np.uint32(x) for x in consts]
            dev.dispatch(p._kernel(kernel["name"]), grid, block, args)
        elif kind == "copy":
            if c[3]:
                dev.copy(_resolve(table, c[1]), _resolve(table, c[2]), c[3])
        elif kind == "fill":
            if c[3]:
                dev.fill(_resolve(table, c[1]), c[2], c[3])
        elif kind == "update":
            p._sync()
            _resolve(table, c[1]).write(np.frombuffer(c[2], np.uint8))
        p._pending = True


def _record_driver_cb(p: HostProgram, rec: _Recording) -> Any:
    dev = p.device
    cb = dev.command_buffer()
    slots = [cb.binding(i) for i in range(rec.capacity)]

    def slot(ref):
        target, off, n = ref
        if isinstance(target, int):
            return slots[target].view(off, n)
        return target.view(off, n)  # an initializer's buffer (`_Recording.fixed`)

    for c in rec.commands:
        kind = c[0]
        if kind == "barrier":
            cb.barrier()
        elif kind == "dispatch":
            _tag, kernel, count, consts, bindings = c
            if not all(count):
                continue
            grid, block = _grid(kernel, count)
            args = [slot(b) for b in bindings] + [np.uint32(x) for x in consts]
            cb.dispatch(p._kernel(kernel["name"]), grid, block, args)
        elif kind == "copy" and c[3]:
            cb.copy(slot(c[1]), slot(c[2]), c[3])
        elif kind == "fill" and c[3]:
            cb.fill(slot(c[1]), c[2], c[3])
    return cb.finalize() or cb


def _noop(p, op, ins, env):
    return None


def _identity(p, op, ins, env):
    return ins[0] if len(ins) == 1 else list(ins)


def _attr_int(name: str):
    def handler(p, op, ins, env):
        return int(op.get("a", {}).get(name, 0) or 0)
    return handler


_INT_OPS = {
    "addi": lambda a, b, t: a + b, "subi": lambda a, b, t: a - b,
    "muli": lambda a, b, t: a * b, "andi": lambda a, b, t: a & b,
    "ori": lambda a, b, t: a | b, "xori": lambda a, b, t: a ^ b,
    "shli": lambda a, b, t: a << (b & 63), "shrsi": lambda a, b, t: a >> (b & 63),
    "shrui": lambda a, b, t: _unsigned(a, t) >> (b & 63),
    "divsi": lambda a, b, t: _div_trunc(a, b),
    "divui": lambda a, b, t: _div_trunc(_unsigned(a, t), _unsigned(b, t)),
    "remsi": lambda a, b, t: a - _div_trunc(a, b) * b,
    "remui": lambda a, b, t: _unsigned(a, t) % _unsigned(b, t),
    "ceildivsi": lambda a, b, t: -((-a) // b),
    "ceildivui": lambda a, b, t: -((-_unsigned(a, t)) // _unsigned(b, t)),
    "floordivsi": lambda a, b, t: a // b,
    "maxsi": lambda a, b, t: max(a, b), "minsi": lambda a, b, t: min(a, b),
    "maxui": lambda a, b, t: a if _unsigned(a, t) >= _unsigned(b, t) else b,
    "minui": lambda a, b, t: a if _unsigned(a, t) <= _unsigned(b, t) else b,
}
_FLOAT_OPS = {
    "addf": lambda a, b: a + b, "subf": lambda a, b: a - b, "mulf": lambda a, b: a * b,
    "divf": lambda a, b: a / b, "remf": np.fmod, "maximumf": np.maximum,
    "minimumf": np.minimum, "maxnumf": np.fmax, "minnumf": np.fmin,
}

_HANDLERS: dict[str, Any] = {
    "arith.constant": _constant, "arith.cmpi": _cmpi, "arith.cmpf": _cmpf,
    "arith.select": _select,
    "arith.index_cast": _int_cast, "arith.index_castui": _int_cast, "arith.extsi": _int_cast,
    "arith.extui": _int_cast, "arith.trunci": _int_cast,
    "arith.sitofp": _to_float, "arith.uitofp": _to_float, "arith.extf": _to_float,
    "arith.truncf": _to_float, "arith.fptosi": _to_int, "arith.fptoui": _to_int,
    "arith.bitcast": _bitcast,
    "arith.negf": lambda p, op, ins, env: -ins[0],
    "util.null": _noop, "util.optimization_barrier": _identity,
    "util.cmp.eq": lambda p, op, ins, env: int(ins[0] is ins[1] or (
        not isinstance(ins[0], (_Buf, _View, _Recording)) and ins[0] == ins[1])),
    "util.cmp.ne": lambda p, op, ins, env: int(not (ins[0] is ins[1] or (
        not isinstance(ins[0], (_Buf, _View, _Recording)) and ins[0] == ins[1]))),
    "util.return": _return, "util.call": _call, "util.status.check_ok": _check_ok,
    "cf.assert": _assert,
    "util.global.load": _global_load, "util.global.store": _global_store,
    "util.buffer.constant": _buffer_constant,
    "util.buffer.size": lambda p, op, ins, env: len(ins[0]),
    "util.align": lambda p, op, ins, env: (int(ins[0]) + int(ins[1]) - 1) // int(ins[1])
    * int(ins[1]),
    "hal.devices.count": lambda p, op, ins, env: 1,
    "hal.devices.get": lambda p, op, ins, env: "device",
    "hal.device.query": _query,
    "hal.device.allocator": lambda p, op, ins, env: "allocator",
    "hal.executable.create": lambda p, op, ins, env: p.executable,
    "hal.executable.lookup.function": lambda p, op, ins, env: op["a"]["kernel"],
    "hal.memory_type": _attr_int("type"), "hal.buffer_usage": _attr_int("usage"),
    "hal.encoding_type": _attr_int("encoding"),
    "hal.element_type": lambda p, op, ins, env: op["a"]["dtype"],
    "hal.buffer_view.assert": _noop, "hal.buffer.assert": _noop,
    "hal.buffer_view.buffer": lambda p, op, ins, env: ins[0].buf,
    "hal.buffer_view.create": _view_create, "hal.buffer_view.dim": _view_dim,
    "hal.buffer_view.rank": lambda p, op, ins, env: len(ins[0].shape),
    "hal.buffer_view.element_type": lambda p, op, ins, env: ins[0].dtype,
    "hal.buffer.length": lambda p, op, ins, env: ins[0].length,
    "hal.buffer.subspan": _subspan, "hal.buffer.load": _load, "hal.buffer.store": _store,
    "hal.fence.create": lambda p, op, ins, env: "fence",
    "hal.fence.join": lambda p, op, ins, env: "fence",
    "hal.fence.await": lambda p, op, ins, env: 0,
    "hal.fence.signal": _noop, "hal.fence.query": lambda p, op, ins, env: 0,
    "hal.device.queue.alloca": _alloca, "hal.device.queue.dealloca": _dealloca,
    "hal.device.queue.copy": _queue_copy, "hal.device.queue.fill": _queue_fill,
    "hal.device.queue.update": _queue_update, "hal.device.queue.read": _queue_read,
    "hal.device.queue.execute": _execute, "hal.device.queue.execute.indirect": _execute,
    "hal.device.queue.barrier": _noop, "hal.device.queue.flush": _noop,
    "hal.allocator.allocate": _allocate, "hal.allocator.import": _import,
    "hal.ex.file.from_memory": _file_from_memory,
    "hal.command_buffer.create": _cb_create, "hal.command_buffer.dispatch": _cb_dispatch,
    "hal.command_buffer.execution_barrier": _cb_barrier,
    "hal.command_buffer.copy_buffer": _cb_copy, "hal.command_buffer.fill_buffer": _cb_fill,
    "hal.command_buffer.update_buffer": _cb_update,
    "hal.command_buffer.finalize": _noop,
    "hal.command_buffer.begin_debug_group": _noop, "hal.command_buffer.end_debug_group": _noop,
}
_HANDLERS.update({f"arith.{k}": _int_binary(v) for k, v in _INT_OPS.items()})
_HANDLERS.update({f"arith.{k}": _float_binary(v) for k, v in _FLOAT_OPS.items()})
