"""A small SPIR-V module reader: what a Vulkan backend needs to bind a compute shader.

It reads the binary (SPIR-V spec, section 2.3 "Physical Layout": a 5-word header, then
instructions whose first word is `word_count << 16 | opcode`) and collects, per module:
capabilities, extensions, the addressing model, and per GLCompute entry point its name,
LocalSize, its descriptor bindings (set, binding, NonWritable) and the push-constant block
size in 32-bit words. No instruction semantics are interpreted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from amdgpu.errors import CompileError

__all__ = ["SpirvModule", "SpirvEntryPoint", "read_spirv", "split_modules", "CAPABILITY_NAMES"]

MAGIC = 0x07230203

# Opcodes (SPIR-V spec, 3.52) used here.
_OP_EXTENSION = 10
_OP_MEMORY_MODEL = 14
_OP_ENTRY_POINT = 15
_OP_EXECUTION_MODE = 16
_OP_CAPABILITY = 17
_OP_TYPE_INT = 21
_OP_TYPE_FLOAT = 22
_OP_TYPE_VECTOR = 23
_OP_TYPE_ARRAY = 28
_OP_TYPE_RUNTIME_ARRAY = 29
_OP_TYPE_STRUCT = 30
_OP_TYPE_POINTER = 32
_OP_CONSTANT = 43
_OP_VARIABLE = 59
_OP_DECORATE = 71
_OP_MEMBER_DECORATE = 72

_EXEC_MODEL_GLCOMPUTE = 5
_EXEC_MODE_LOCAL_SIZE = 17
_DECORATION_BINDING = 33
_DECORATION_DESCRIPTOR_SET = 34
_DECORATION_OFFSET = 35
_DECORATION_NON_WRITABLE = 24
_STORAGE_UNIFORM = 2
_STORAGE_PUSH_CONSTANT = 9
_STORAGE_STORAGE_BUFFER = 12

ADDRESSING_MODELS = {
    0: "Logical", 1: "Physical32", 2: "Physical64", 5348: "PhysicalStorageBuffer64",
}

#: Capability numbers (SPIR-V spec, 3.31) that matter for device feature checks.
CAPABILITY_NAMES = {
    0: "Matrix", 1: "Shader", 9: "Float16", 10: "Float64", 11: "Int64", 12: "Int64Atomics",
    22: "Int16", 39: "Int8", 61: "GroupNonUniform", 62: "GroupNonUniformVote",
    63: "GroupNonUniformArithmetic", 64: "GroupNonUniformBallot",
    65: "GroupNonUniformShuffle", 66: "GroupNonUniformShuffleRelative",
    4433: "StorageBuffer16BitAccess", 4434: "UniformAndStorageBuffer16BitAccess",
    4435: "StoragePushConstant16", 4448: "StorageBuffer8BitAccess",
    4449: "UniformAndStorageBuffer8BitAccess", 4450: "StoragePushConstant8",
    4441: "VariablePointersStorageBuffer", 4442: "VariablePointers",
    5347: "PhysicalStorageBufferAddresses", 6016: "DotProductInputAll",
    6017: "DotProductInput4x8Bit", 6018: "DotProductInput4x8BitPacked", 6019: "DotProduct",
    6022: "CooperativeMatrixKHR",
}


@dataclass
class SpirvEntryPoint:
    name: str
    workgroup_size: tuple[int, int, int] | None
    bindings: list[tuple[int, int]] = field(default_factory=list)  # (set, binding)
    readonly: list[bool] = field(default_factory=list)
    push_constant_words: int = 0


@dataclass
class SpirvModule:
    version: tuple[int, int]
    addressing_model: str
    capabilities: list[str]
    extensions: list[str]
    entry_points: dict[str, SpirvEntryPoint]
    size: int


def _string(words: list[int] | tuple[int, ...]) -> tuple[str, int]:
    """A nul-terminated UTF-8 literal packed in words; returns (text, words used)."""
    raw = struct.pack(f"<{len(words)}I", *words)
    end = raw.find(b"\0")
    end = len(raw) if end < 0 else end
    return raw[:end].decode("utf-8", "replace"), end // 4 + 1


def _words(data: bytes) -> tuple[int, ...]:
    if len(data) < 20 or len(data) % 4:
        raise CompileError(f"SPIR-V binary of {len(data)} bytes is truncated; recompile")
    words = struct.unpack(f"<{len(data) // 4}I", data)
    if words[0] != MAGIC:
        raise CompileError("not a SPIR-V module (bad magic); recompile the shader")
    return words


def read_spirv(data: bytes) -> SpirvModule:
    """Read one SPIR-V module's interface. Raises CompileError for a malformed binary."""
    words = _words(bytes(data))
    try:
        return _read(words, len(data))
    except (IndexError, KeyError, RecursionError, struct.error, ValueError) as exc:
        raise CompileError(
            f"SPIR-V module is malformed ({type(exc).__name__}); recompile the shader"
        ) from None


def _read(words: tuple[int, ...], size: int) -> SpirvModule:
    version = ((words[1] >> 16) & 0xFF, (words[1] >> 8) & 0xFF)
    caps: list[str] = []
    exts: list[str] = []
    addressing = "Logical"
    entries: dict[int, str] = {}
    interfaces: dict[int, list[int]] = {}
    local_size: dict[int, tuple[int, int, int]] = {}
    decorations: dict[int, dict[int, int]] = {}
    member_offsets: dict[int, dict[int, int]] = {}
    types: dict[int, tuple] = {}
    constants: dict[int, int] = {}
    variables: dict[int, tuple[int, int]] = {}  # id -> (pointer type id, storage class)
    pos = 5
    while pos < len(words):
        count, opcode = words[pos] >> 16, words[pos] & 0xFFFF
        if count == 0 or pos + count > len(words):
            raise CompileError(f"SPIR-V instruction at word {pos} is malformed; recompile")
        ops = words[pos + 1 : pos + count]
        if opcode == _OP_CAPABILITY:
            caps.append(CAPABILITY_NAMES.get(ops[0], str(ops[0])))
        elif opcode == _OP_EXTENSION:
            exts.append(_string(ops)[0])
        elif opcode == _OP_MEMORY_MODEL:
            addressing = ADDRESSING_MODELS.get(ops[0], str(ops[0]))
        elif opcode == _OP_ENTRY_POINT and ops[0] == _EXEC_MODEL_GLCOMPUTE:
            name, used = _string(ops[2:])
            entries[ops[1]] = name
            interfaces[ops[1]] = list(ops[2 + used :])
        elif opcode == _OP_EXECUTION_MODE and ops[1] == _EXEC_MODE_LOCAL_SIZE:
            local_size[ops[0]] = (ops[2], ops[3], ops[4])
        elif opcode == _OP_DECORATE:
            decorations.setdefault(ops[0], {})[ops[1]] = ops[2] if len(ops) > 2 else 1
        elif opcode == _OP_MEMBER_DECORATE and ops[2] == _DECORATION_OFFSET:
            member_offsets.setdefault(ops[0], {})[ops[1]] = ops[3]
        elif opcode in (_OP_TYPE_INT, _OP_TYPE_FLOAT):
            types[ops[0]] = ("scalar", ops[1] // 8)
        elif opcode == _OP_TYPE_VECTOR:
            types[ops[0]] = ("vector", ops[1], ops[2])
        elif opcode == _OP_TYPE_ARRAY:
            types[ops[0]] = ("array", ops[1], ops[2])
        elif opcode == _OP_TYPE_RUNTIME_ARRAY:
            types[ops[0]] = ("runtime_array", ops[1])
        elif opcode == _OP_TYPE_STRUCT:
            types[ops[0]] = ("struct", tuple(ops[1:]))
        elif opcode == _OP_TYPE_POINTER:
            types[ops[0]] = ("pointer", ops[1], ops[2])
        elif opcode == _OP_CONSTANT:
            constants[ops[1]] = ops[2]
        elif opcode == _OP_VARIABLE:
            variables[ops[1]] = (ops[0], ops[2])
        pos += count

    def size_of(type_id: int) -> int:
        kind = types.get(type_id, ("scalar", 4))
        if kind[0] == "scalar":
            return kind[1]
        if kind[0] == "vector":
            return size_of(kind[1]) * kind[2]
        if kind[0] == "array":
            stride = decorations.get(type_id, {}).get(6)  # ArrayStride
            return (stride or size_of(kind[1])) * constants.get(kind[2], 0)
        if kind[0] == "struct":
            offsets = member_offsets.get(type_id, {})
            end, running = 0, 0
            for i, member in enumerate(kind[1]):
                start = offsets.get(i, running)
                running = start + size_of(member)
                end = max(end, running)
            return end
        return 8  # pointers (PhysicalStorageBuffer) and runtime arrays count as 8 bytes

    # Modules from IREE list every global in the entry point interface (SPIR-V >= 1.4) or
    # only Input/Output ones (older); fall back to all variables of the module.
    result: dict[str, SpirvEntryPoint] = {}
    for entry_id, name in entries.items():
        iface = [v for v in interfaces[entry_id] if v in variables]
        candidates = iface if any(
            variables[v][1] in (_STORAGE_STORAGE_BUFFER, _STORAGE_UNIFORM, _STORAGE_PUSH_CONSTANT)
            for v in iface
        ) else list(variables)
        entry = SpirvEntryPoint(name, local_size.get(entry_id))
        found = []
        for var in candidates:
            ptr_type, storage = variables[var]
            deco = decorations.get(var, {})
            if storage in (_STORAGE_STORAGE_BUFFER, _STORAGE_UNIFORM) and (
                _DECORATION_BINDING in deco
            ):
                found.append((deco.get(_DECORATION_DESCRIPTOR_SET, 0), deco[_DECORATION_BINDING],
                              _DECORATION_NON_WRITABLE in deco))
            elif storage == _STORAGE_PUSH_CONSTANT:
                pointee = types.get(ptr_type, ("pointer", 0, 0))[2]
                entry.push_constant_words = max(entry.push_constant_words,
                                                (size_of(pointee) + 3) // 4)
        for set_, binding, readonly in sorted(found):
            entry.bindings.append((set_, binding))
            entry.readonly.append(readonly)
        result[name] = entry
    return SpirvModule(version, addressing, caps, exts, result, size)


def split_modules(data: bytes, modules: list[dict]) -> list[bytes]:
    """The module slices of a concatenated variant: `modules` holds {offset, size} dicts."""
    return [data[m["offset"] : m["offset"] + m["size"]] for m in modules]
