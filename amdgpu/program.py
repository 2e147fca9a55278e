"""Run an IREE multi-dispatch program (`bundle.program`) over the Device API.

The program (compiler area E) lists inputs, outputs, transients and a dispatch sequence;
each dispatch names its kernel, workgroup size and count, bindings (kind, index, byte
offset, length) and i32 constants, and whether it needs a barrier before it. The runner is
backend-agnostic: it uses only `Device.buffer/load/dispatch/command_buffer/submit`, so it
runs on the HSA path and on Vulkan alike.

The binding table has one slot per input, then per output, then per transient, in that
order; a recorded command buffer refers to slots (`cb.binding(i)`), so replaying it with
new input and output buffers needs no re-record.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from amdgpu import dtypes
from ground.errors import DeviceError, KernelArgumentError


@dataclass
class ProgramBuffers:
    """The device buffers of one run: the binding table in slot order."""

    inputs: list[Any]
    outputs: list[Any]
    transients: list[Any]
    results: list[Any] | None = None  # a host program's returned values (host_program.py)

    @property
    def table(self) -> list[Any]:
        return [*self.inputs, *self.outputs, *self.transients]

    def free(self) -> None:
        for b in self.table:
            try:
                b.free()
            except Exception:  # noqa: BLE001 - freeing is best effort at the end of a run
                pass


def _nbytes(t: dict) -> int:
    if "size" in t:
        return int(t["size"])
    return dtypes.storage_nbytes(t.get("shape", []), t["dtype"])


def input_bytes(arr: Any, t: dict) -> np.ndarray:
    """The bytes a program input's buffer holds for `arr` (IREE's packing)."""
    a = np.asarray(arr, dtype=dtypes.dtype(t["dtype"]))
    return dtypes.pack(a)


class ProgramRunner:
    """Loads a bundle's kernels once; runs its program immediately or as a replay."""

    def __init__(self, device: Any, bundle: Any):
        program = getattr(bundle, "program", None)
        if not program or not (
            program.get("dispatches") or program.get("outputs") or program.get("host")
        ):
            raise DeviceError(
                f"bundle {getattr(bundle, 'name', '?')!r} has no program: compile an .mlir "
                f"source (OpenCL C bundles hold kernels only)"
            )
        self.device = device
        self.bundle = bundle
        self.program = program
        self.host = None
        self._cb = None
        variant = self._variant(bundle, device)
        host = (getattr(variant, "info", None) or {}).get("host") if program.get("host") else None
        if program.get("host"):
            if host is None:
                raise DeviceError(
                    f"bundle {getattr(bundle, 'name', '?')!r} has a host program but no variant "
                    f"for {getattr(device, 'target', '?')}: compile it for this device"
                )
            from amdgpu.host_program import HostProgram

            # The whole host program, interpreted (branches, host reads, run-time command
            # buffers); its initializers run here, once.
            self.executable = device.load(bundle) if variant.data else None
            self.host = HostProgram(device, self.executable, host)
            self.dispatches: list[dict] = []
            self.kernels: list[Any] = []
            self._slot_base = {"input": 0, "output": 0, "transient": 0}
            return
        # A program of copies and views only has no kernels to load.
        self.executable = device.load(bundle) if program["dispatches"] else None
        self.dispatches = self._for_variant(bundle, device, program["dispatches"])
        self.kernels = [self._kernel(d) for d in self.dispatches]
        self._slot_base = {
            "input": 0,
            "output": len(program["inputs"]),
            "transient": len(program["inputs"]) + len(program["outputs"]),
        }

    @staticmethod
    def _variant(bundle: Any, device: Any) -> Any:
        """The bundle variant this device runs, or None."""
        try:
            if device.backend == "hsa":
                return bundle.variant_for(device.isa)
            return next((v for v in bundle.variants if v.kind == "spirv"), None)
        except Exception:  # noqa: BLE001 - no per-variant facts: keep the program's own
            return None

    @classmethod
    def _for_variant(cls, bundle: Any, device: Any, dispatches: list[dict]) -> list[dict]:
        """The program's dispatches with the workgroup size, count and constants of the
        variant this device runs: IREE tiles per target (gfx1100 may use 32-wide groups
        where SPIR-V uses 64), while `program` records the first target's choice."""
        variant = cls._variant(bundle, device)
        facts = (getattr(variant, "info", None) or {}).get("dispatches")
        if not facts or len(facts) != len(dispatches):
            return list(dispatches)
        out = []
        for d, f in zip(dispatches, facts, strict=False):
            d = dict(d)
            for key in ("workgroup_size", "workgroup_count", "constants"):
                if key in f:
                    d[key] = f[key]
            out.append(d)
        return out

    def _kernel(self, d: dict) -> Any:
        names = [d["kernel"]]
        if getattr(self.device, "backend", "") == "vulkan" and d.get("spirv_entry"):
            names.insert(0, d["spirv_entry"])
        last = None
        exe = self.executable
        if exe is None:  # a program without dispatches loads no code object
            raise DeviceError(f"program dispatch kernel {d['kernel']!r}: the program loaded no "
                              "code object (it has no dispatches)")
        for name in names:
            try:
                return exe.kernel(name)
            except Exception as e:  # noqa: BLE001 - try the other name, then report
                last = e
        raise DeviceError(f"program dispatch kernel {d['kernel']!r} is not in the bundle: {last}")

    # --- buffers -------------------------------------------------------------------------
    def allocate(self, inputs: Sequence[Any]) -> ProgramBuffers:
        """Device buffers for `inputs` (numpy arrays, converted to the program's dtypes),
        zeroed outputs, and transients."""
        p = self.program
        if len(inputs) != len(p["inputs"]):
            raise KernelArgumentError(
                f"program {p.get('function', '?')!r} takes {len(p['inputs'])} input(s), got "
                f"{len(inputs)}: pass one array per input"
            )
        dev = self.device
        ins = []
        for i, (arr, t) in enumerate(zip(inputs, p["inputs"], strict=False)):
            a = np.ascontiguousarray(np.asarray(arr, dtype=dtypes.dtype(t["dtype"])))
            if list(a.shape) != list(t["shape"]) and a.size == int(np.prod(t["shape"])):
                a = a.reshape(t["shape"])  # e.g. a 1-element array for a 0-d tensor
            if list(a.shape) != list(t["shape"]):
                raise KernelArgumentError(
                    f"program input {i} has shape {list(a.shape)}, the program wants "
                    f"{list(t['shape'])}: pass arrays of the compiled shapes"
                )
            raw = dtypes.pack(a)
            ins.append(dev.buffer(raw if raw.nbytes else np.zeros(1, np.uint8)))
        if self.host is not None:  # the host program allocates what it needs
            return ProgramBuffers(ins, [], [])
        # An output `at` a slot and offset (in an input, or in a shared allocation) lives
        # there; its own slot keeps the table layout and holds one byte.
        outs = [
            dev.buffer(np.zeros(1 if "at" in t else max(_nbytes(t), 1), np.uint8))
            for t in p["outputs"]
        ]
        trans = [dev.buffer(max(int(t["size"]), 1)) for t in p.get("transients", [])]
        return ProgramBuffers(ins, outs, trans)

    def read_outputs(self, buffers: ProgramBuffers) -> list[np.ndarray]:
        if self.host is not None:
            if buffers.results is None:
                raise DeviceError("the program has not run on these buffers yet; run it first")
            return self.host.read(buffers.results)
        out = []
        table = buffers.table
        for buf, t in zip(buffers.outputs, self.program["outputs"], strict=False):
            n, offset = _nbytes(t), 0
            if "at" in t:
                at = t["at"]
                buf, offset = table[self._slot_base[at["kind"]] + int(at["index"])], at["offset"]
            raw = buf.view(offset, n).to_numpy(np.uint8) if n else np.zeros(0, np.uint8)
            out.append(dtypes.unpack(raw, t["dtype"], t["shape"]))
        return out

    # --- running -------------------------------------------------------------------------
    def _args(self, d: dict, table: Sequence[Any]) -> list[Any]:
        args: list[Any] = []
        for b in d["bindings"]:
            slot = table[self._slot_base[b["kind"]] + int(b["index"])]
            off = int(b.get("offset", 0))
            if off:
                slot = slot.view(off, int(b["length"])) if b.get("length") else slot.view(off)
            args.append(slot)
        args.extend(np.uint32(c & 0xFFFFFFFF) for c in d.get("constants", []))
        return args

    @staticmethod
    def _shape(d: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid in work-items, workgroup size), trailing 1-sized dimensions dropped."""
        wg = [int(x) for x in d["workgroup_size"]]
        grid = [c * w for c, w in zip((int(x) for x in d["workgroup_count"]), wg, strict=False)]
        dims = 3
        while dims > 1 and grid[dims - 1] == 1 and wg[dims - 1] == 1:
            dims -= 1
        return tuple(grid[:dims]), tuple(wg[:dims])

    def steps(self) -> list[dict]:
        """The program's work in order: dispatches, copies and fills."""
        return self.program.get("steps") or [
            {"op": "dispatch", "index": i} for i in range(len(self.dispatches))
        ]

    def _slot_view(self, b: dict, table: Sequence[Any]) -> Any:
        slot = table[self._slot_base[b["kind"]] + int(b["index"])]
        return slot.view(int(b["offset"]), int(b["length"]))

    def _transfer(self, step: dict, table: Sequence[Any]) -> tuple:
        dst = self._slot_view(step["dst"], table)
        if step["op"] == "copy":
            return ("copy", dst, self._slot_view(step["src"], table), int(step["length"]))
        return ("fill", dst, bytes(step["pattern"]), int(step["length"]))

    def launches(self, buffers: ProgramBuffers) -> list[tuple]:
        """(kernel, grid, block, args tuple) per dispatch for these buffers, built once per
        ProgramBuffers (repeated runs reuse the same tuples, which the HSA path turns into
        cached kernarg bytes)."""
        cached = getattr(buffers, "_launches", None)
        if cached is None or cached[0] is not self:
            table = buffers.table
            plan = []
            for step in self.steps():
                if step["op"] != "dispatch":
                    plan.append(self._transfer(step, table))
                    continue
                d, k = self.dispatches[step["index"]], self.kernels[step["index"]]
                grid, block = self._shape(d)
                plan.append((k, grid, block, tuple(self._args(d, table))))
            cached = (self, plan)
            buffers._launches = cached  # type: ignore[attr-defined]
        return cached[1]

    def run_immediate(self, buffers: ProgramBuffers, lane: int = 0) -> Any:
        """One `dispatch` per program dispatch (the lane keeps them in order)."""
        if self.host is not None:
            return self._run_host(buffers, replay=False)
        point = None
        dispatch = self.device.dispatch
        dev = self.device
        for launch in self.launches(buffers):
            if launch[0] == "copy":
                point = dev.copy(launch[1], launch[2], launch[3], lane=lane)
            elif launch[0] == "fill":
                point = dev.fill(launch[1], launch[2], launch[3], lane=lane)
            else:
                point = dispatch(*launch[:4], lane=lane)
        return point

    def record(self) -> Any:
        """The program as a finalized command buffer over binding slots (cached). A host
        program records each of its command buffers on first replay instead."""
        if self.host is not None:
            return None
        if self._cb is None:
            cb = self.device.command_buffer()
            slots = [
                cb.binding(i)
                for i in range(
                    len(self.program["inputs"])
                    + len(self.program["outputs"])
                    + len(self.program.get("transients", []))
                )
            ]
            for i, step in enumerate(self.steps()):
                if step["op"] != "dispatch":
                    op, dst, src, n = self._transfer(step, slots)
                    if i:
                        cb.barrier()
                    cb.copy(dst, src, n) if op == "copy" else cb.fill(dst, src, n)
                    cb.barrier()
                    continue
                d, k = self.dispatches[step["index"]], self.kernels[step["index"]]
                if i and d.get("barrier_before", True):
                    cb.barrier()
                grid, block = self._shape(d)
                cb.dispatch(k, grid, block, self._args(d, slots))
            self._cb = cb.finalize() or cb
        return self._cb

    def _slots_used(self) -> int:
        """1 + the highest binding slot any step uses (a command buffer's table size):
        outputs read from inside an input use no slot of their own."""
        used = [-1]
        for step in self.steps():
            if step["op"] == "dispatch":
                bs = self.dispatches[step["index"]]["bindings"]
            else:
                bs = [step[k] for k in ("src", "dst") if k in step]
            used += [self._slot_base[b["kind"]] + int(b["index"]) for b in bs]
        return max(used) + 1

    def _run_host(self, buffers: ProgramBuffers, replay: bool) -> None:
        assert self.host is not None
        buffers.results = self.host.run(buffers.inputs, replay=replay)
        self.dispatches = [{"kernel": k} for k in self.host.dispatched]

    def replay(self, buffers: ProgramBuffers, lane: int = 0) -> Any:
        if self.host is not None:
            return self._run_host(buffers, replay=True)
        return self.device.submit(self.record(), buffers.table[: self._slots_used()], lane=lane)

    def run(
        self, inputs: Sequence[Any], *, replay: bool = False, timeout: float = 60.0
    ) -> list[np.ndarray]:
        """Allocate, run once (immediate or replayed), read the outputs, free."""
        buffers = self.allocate(inputs)
        try:
            (self.replay if replay else self.run_immediate)(buffers)
            self.device.synchronize(timeout)
            return self.read_outputs(buffers)
        finally:
            buffers.free()


def time_call(fn, *args, **kwargs) -> tuple[Any, float]:
    """(result, seconds) of one call."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0
