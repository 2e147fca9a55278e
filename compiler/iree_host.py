"""IREE's HAL-level host program as data: what `amdgpu.host_program` interprets.

Programs whose host side is more than one fixed sequence of command buffers (the static
reader in compiler/iree.py handles those) are kept whole: every `util.initializer` and
`util.func` of the `hal` phase becomes a list of blocks of operations over numbered SSA
registers, JSON-ready, so the bundle carries it and the driver runs it without MLIR:

    {"entry": "main", "inputs": [{"shape", "dtype"}...],
     "initializers": [FUNC...], "funcs": {name: FUNC}}
    FUNC = {"args": [reg...], "blocks": [{"args": [reg...], "ops": [OP...]}]}
    OP   = {"op": "hal.buffer.load", "in": [reg...], "out": [reg...], "types": [...],
            "f": {operand field: reg | [reg...]}, "a": {attribute: value},
            "succ": [[block index, [reg...]]...]}

Operands are named as IREE's Python op views name them (`source_buffer`, `binding_offsets`,
...), so the interpreter reads `f["source_offset"]` instead of counting operand positions.
Attributes become ints, floats, strings, symbol paths and type names; a `util.buffer.constant`
becomes its bytes (base64); `hal.executable.lookup.function` gets the export's kernel facts
(name, workgroup size, binding and constant counts) from the executable-targets phase.
This is the host control flow (cf branches that read device values back), command buffers
recorded at run time with host-computed push constants, constants moved to globals and
transient reuse, as IREE compiled them: nothing is pattern-matched.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from ground.errors import CompileError

# Attributes that are big and never needed to run the program.
_SKIP_ATTRS = {"iree.reflection", "iree.abi.stub", "function_type", "tied_operands",
               "inlining_policy", "sym_visibility", "fastmath", "overflowFlags"}
_MESSAGE_CHARS = 160


class _Writer:
    def __init__(self, module, exports: dict, dtype_names: dict, ir):
        self.ir = ir
        self.module = module
        self.exports = exports
        self.dtype_names = dtype_names
        self.regs: dict = {}  # Value -> register number
        self._base_names = set(dir(ir.OpView))

    def reg(self, value) -> int:
        r = self.regs.get(value)
        if r is None:
            r = self.regs[value] = len(self.regs)
        return r

    # --- attributes ----------------------------------------------------------------------
    def attr(self, name: str, attr) -> Any:
        ir = self.ir
        for cls, conv in (
            (ir.BoolAttr, lambda a: bool(a.value)),
            (ir.IntegerAttr, lambda a: int(a.value)),
            (ir.FloatAttr, lambda a: float(a.value)),
            (ir.StringAttr, lambda a: a.value[:_MESSAGE_CHARS]),
            (ir.FlatSymbolRefAttr, lambda a: a.value),
            (ir.SymbolRefAttr, lambda a: list(a.value)),
            (ir.TypeAttr, lambda a: str(a.value)),
        ):
            try:
                return conv(cls(attr))
            except (ValueError, TypeError):
                continue
        text = str(attr)
        if name == "operandSegmentSizes" or text.startswith("array<i32"):
            body = text.split(":", 1)[1].rstrip(">").strip() if ":" in text else ""
            return [int(x) for x in body.split(",") if x.strip()]
        return text[:_MESSAGE_CHARS]

    # --- operations ----------------------------------------------------------------------
    def op(self, op, blocks: list) -> dict:
        out: dict[str, Any] = {
            "op": op.name,
            "in": [self.reg(v) for v in op.operands],
            "out": [self.reg(v) for v in op.results],
            "types": [str(v.type) for v in op.results],
            "in_types": [str(v.type) for v in op.operands],
        }
        attrs: dict[str, Any] = {}
        for name in op.attributes:
            if name in _SKIP_ATTRS:
                continue
            a = op.attributes[name]
            if op.name == "util.buffer.constant" and name == "value":
                attrs["bytes"] = base64.b64encode(_constant_bytes(a)).decode()
                continue
            attrs[name] = self.attr(name, a)
        if op.name == "hal.element_type":
            attrs["dtype"] = self.dtype_names.get(attrs.get("type", ""), attrs.get("type"))
        if op.name == "hal.executable.lookup.function":
            attrs["kernel"] = self._kernel(attrs["entry_point"])
        if attrs:
            out["a"] = attrs
        fields = self._fields(op)
        if fields:
            out["f"] = fields
        successors = list(getattr(op, "successors", []))
        if successors:
            if op.name == "cf.br":
                groups = [list(op.operands)]
            elif op.name == "cf.cond_br":
                view = op.opview
                groups = [list(view.trueDestOperands), list(view.falseDestOperands)]
            else:
                raise CompileError(
                    f"the IREE host program branches with {op.name}, which amdgpu-run does not "
                    "interpret yet; use scf.if/scf.while (cf.cond_br) instead"
                )
            out["succ"] = [
                [_block_index(blocks, succ), [self.reg(v) for v in group]]
                for succ, group in zip(successors, groups, strict=True)
            ]
        return out

    def _fields(self, op) -> dict:
        """The op view's named operands (value or list of values) as registers."""
        ir = self.ir
        try:
            view = op.opview
        except Exception:  # noqa: BLE001 - an op without a registered view: operands only
            return {}
        results = set(op.results)
        fields: dict[str, Any] = {}
        for name in dir(type(view)):
            if name.startswith("_") or name in self._base_names or name in ("Adaptor",):
                continue
            try:
                got = getattr(view, name)
            except Exception:  # noqa: BLE001 - absent optional operands, attribute getters
                continue
            if isinstance(got, ir.Value):
                if got not in results:
                    fields[name] = self.reg(got)
            elif isinstance(got, (ir.OpOperandList, list, tuple)) and all(
                isinstance(v, ir.Value) for v in got
            ):
                if not any(v in results for v in got):
                    fields[name] = [self.reg(v) for v in got]
        return fields

    def _kernel(self, path: list) -> dict:
        key = tuple(path)
        export = self.exports.get(key)
        if export is None:  # linking renamed the executable; export names stay unique
            found = [e for k, e in self.exports.items() if k[-1] == key[-1]]
            if len(found) != 1:
                raise CompileError(f"cannot find export {'::'.join(path)} in IREE's executables")
            export = found[0]
        return {"name": export.name, "workgroup_size": list(export.workgroup_size),
                "binding_count": export.binding_count, "constant_count": export.constant_count}

    def func(self, op) -> dict:
        region = op.regions[0]
        blocks = list(region.blocks)
        out = []
        for block in blocks:
            ops = []
            for inner in block.operations:
                inner = inner.operation
                if inner.regions and any(len(r.blocks) for r in inner.regions):
                    raise CompileError(
                        f"the IREE host program nests regions in {inner.name}, which amdgpu-run "
                        "does not interpret yet; unsupported IR"
                    )
                ops.append(self.op(inner, blocks))
            out.append({"args": [self.reg(a) for a in block.arguments], "ops": ops})
        return {"args": out[0]["args"] if out else [], "blocks": out}


def _block_index(blocks: list, block) -> int:
    for i, b in enumerate(blocks):
        if b == block:
            return i
    raise CompileError("a branch of the IREE host program leaves its function; unsupported IR")


_DENSE_HEX = re.compile(r'dense<"0x([0-9A-Fa-f]*)">')
_BLOBS: dict[str, bytes] = {}  # dialect resources of the module being written


def _constant_bytes(attr) -> bytes:
    """The bytes of a util.buffer.constant's value (#util.composite of dense hex blobs, a
    string, or one dense array)."""
    text = str(attr)
    if text.startswith('"'):
        from iree.compiler import ir

        return ir.StringAttr(attr).value.encode()
    head = re.match(r"#util\.composite<(\d+)xi8", text)
    blobs = [bytes.fromhex(h) for h in _DENSE_HEX.findall(text)]
    if head:
        total = int(head.group(1))
        inner = text.split("[", 1)[1].rsplit("]", 1)[0]
        parts = [p.strip() for p in re.split(r",\s*(?=dense)", inner) if p.strip()]
        if len(parts) != len(blobs) or not all(p.startswith('dense<"0x') for p in parts):
            data = _numpy_elements(parts)
        else:
            data = b"".join(blobs)
        if len(data) != total:
            raise CompileError(
                f"a constant of the IREE program holds {len(data)} bytes, not {total}; "
                "unsupported constant encoding"
            )
        return data
    if len(blobs) == 1:
        return blobs[0]
    return _numpy_elements([text])


def _numpy_elements(parts: list[str]) -> bytes:
    """Bytes of dense attributes printed as splats or element lists (`dense<0> :
    vector<16xi8>`, `dense<[1, 2]> : tensor<2xi32>`)."""
    import ml_dtypes
    import numpy as np

    kinds = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
             "f16": np.float16, "f32": np.float32, "f64": np.float64, "i1": np.int8,
             "si8": np.int8, "si16": np.int16, "si32": np.int32, "si64": np.int64,
             "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64}
    kinds.update({k: getattr(ml_dtypes, v) for k, v in _ML_DTYPES.items()})
    out = bytearray()
    for part in parts:
        r = re.match(r"dense_resource<([\w.$-]+)>", part)
        if r:
            if r.group(1) not in _BLOBS:
                raise CompileError(f"a constant of the IREE program names resource "
                                   f"{r.group(1)}, which the module does not hold")
            out += _BLOBS[r.group(1)]
            continue
        m = re.match(r'dense<(.*)>\s*:\s*(?:tensor|vector)<([0-9x]*)(complex<f(?:32|64)>|\w+)>',
                     part, re.S)
        if not m:
            raise CompileError(f"cannot read a constant of the IREE program ({part[:40]}...)")
        body, dims, elem = m.groups()
        if body.startswith('"0x'):
            out += bytes.fromhex(body[3:-1])
            continue
        if elem.startswith("complex<"):  # (re,im) pairs, stored re then im
            dt = np.dtype(np.complex64 if elem == "complex<f32>" else np.complex128)
            pairs = re.findall(r"\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)", body)
            arr = np.array([complex(float(a), float(b)) for a, b in pairs], dt)
            count = 1
            for d in dims.strip("x").split("x"):
                count *= int(d) if d else 1
            if arr.size == 1 and count != 1:
                arr = np.full(count, arr[0], dt)
            out += arr.tobytes()
            continue
        if elem not in kinds:
            raise CompileError(f"a constant of the IREE program has element type {elem}; "
                               "unsupported constant encoding")
        count = 1
        for d in dims.strip("x").split("x"):
            count *= int(d) if d else 1
        values = [v for v in re.split(r"[\[\],\s]+", body) if v]
        values = [1 if v == "true" else 0 if v == "false" else v for v in values]
        dt = np.dtype(kinds[elem])
        if any(isinstance(v, str) and v.startswith("0x") for v in values):
            # MLIR prints floats it cannot print exactly (NaN, inf, f8 codes) as bit patterns
            raw = np.dtype(f"u{dt.itemsize}")
            arr = np.array([np.array(int(v, 16), raw).view(dt) if isinstance(v, str)
                            and v.startswith("0x") else np.array(float(v)).astype(dt)
                            for v in values], dt)
        else:
            arr = np.array(values, dtype=np.float64).astype(dt)
        if arr.size == 1 and count != 1:
            arr = np.full(count, arr[0], kinds[elem])
        out += _packed(arr, _SUB_BYTE_BITS.get(elem))
    return bytes(out)


# MLIR element types numpy lacks -> ml_dtypes names (the table of compiler/iree.py)
_ML_DTYPES = {
    "bf16": "bfloat16", "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2",
    "f8E4M3FNUZ": "float8_e4m3fnuz", "f8E5M2FNUZ": "float8_e5m2fnuz",
    "f8E4M3B11FNUZ": "float8_e4m3b11fnuz", "f8E8M0FNU": "float8_e8m0fnu",
    "f8E3M4": "float8_e3m4", "f8E4M3": "float8_e4m3", "f4E2M1FN": "float4_e2m1fn",
    "f6E2M3FN": "float6_e2m3fn", "f6E3M2FN": "float6_e3m2fn",
    "i2": "int2", "i4": "int4", "si4": "int4", "si2": "int2", "ui2": "uint2", "ui4": "uint4",
}
# types IREE packs below one byte: element k in bits [k*w, (k+1)*w), lowest first
_SUB_BYTE_BITS = {"i2": 2, "si2": 2, "ui2": 2, "i4": 4, "si4": 4, "ui4": 4, "f4E2M1FN": 4}


def _packed(arr: Any, width: int | None) -> bytes:
    import numpy as np

    if width is None:
        return arr.tobytes()
    codes = arr.reshape(-1).view(np.uint8) & ((1 << width) - 1)
    per = 8 // width
    codes = np.concatenate([codes, np.zeros((-len(codes)) % per, np.uint8)]).reshape(-1, per)
    shifts = (np.arange(per, dtype=np.uint8) * width).astype(np.uint8)
    return np.bitwise_or.reduce(codes << shifts, axis=1).astype(np.uint8).tobytes()


_RESOURCE = re.compile(r'^\s*"?([\w.$-]+)"?\s*:\s*"0x([0-9A-Fa-f]*)"', re.M)


def resources(text: str) -> dict[str, bytes]:
    """The module's `dialect_resources` blobs (iree-turbine's weights), by name: the hex
    string's first 4 bytes are the blob's alignment, the rest its data."""
    at = text.rfind("dialect_resources")
    if at < 0:
        return {}
    return {m.group(1): bytes.fromhex(m.group(2))[4:] for m in _RESOURCE.finditer(text, at)}


def host_program(module, exports: dict, dtype_names: dict, entry: str, inputs: list,
                 blobs: dict[str, bytes] | None = None) -> dict:
    """The whole host program of a parsed `hal` phase module (see the module docstring)."""
    from iree.compiler import ir

    global _BLOBS
    _BLOBS = blobs or {}
    writer = _Writer(module, exports, dtype_names, ir)
    initializers, funcs, globals_ = [], {}, {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "util.global":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            initial = op.attributes["initial_value"] if "initial_value" in op.attributes else None
            globals_[name] = None if initial is None else writer.attr("initial_value", initial)
        elif op.name == "util.initializer":
            initializers.append(writer.func(op))
        elif op.name == "util.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = writer.func(op)
    return {"entry": entry, "inputs": inputs, "globals": globals_,
            "initializers": initializers, "funcs": funcs,
            "registers": len(writer.regs)}
