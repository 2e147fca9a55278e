"""The project's one SPIR-V reader: the interface facts a Vulkan pipeline needs and the
module facts the compiler reports, read from the words.

It reads the binary (SPIR-V spec, section 2.3 "Physical Layout": a 5-word header, then
instructions whose first word is `word_count << 16 | opcode`): capabilities, extensions,
the addressing model, entry points, local size, descriptor bindings (set, binding,
storage class, NonWritable) and the push-constant block (size, member offsets, and which
members are physical-storage-buffer pointers, which is how IREE's `bda` ABI passes its
address table). It never validates code.

`reflect` is the Vulkan backend's view (`ShaderInterface`, VulkanError on bad input);
`read_spirv` the compiler's (`SpirvModule`, CompileError), built from the same reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ground.errors import AmdgpuError, CompileError, VulkanError

MAGIC = 0x07230203

# Opcodes (SPIR-V spec, "Instructions").
OP_NAME = 5
OP_MEMBER_NAME = 6
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_TYPE_BOOL = 20
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_VECTOR = 23
OP_TYPE_ARRAY = 28
OP_TYPE_RUNTIME_ARRAY = 29
OP_TYPE_STRUCT = 30
OP_TYPE_POINTER = 32
OP_CONSTANT = 43
OP_SPEC_CONSTANT = 50
OP_VARIABLE = 59
OP_DECORATE = 71
OP_MEMBER_DECORATE = 72
OP_EXECUTION_MODE_ID = 331
OP_CAPABILITY = 17
OP_EXTENSION = 10
OP_MEMORY_MODEL = 14

# Decorations and enums.
DEC_BLOCK = 2
DEC_BUFFER_BLOCK = 3
DEC_ARRAY_STRIDE = 6
DEC_SPEC_ID = 1
DEC_BINDING = 33
DEC_DESCRIPTOR_SET = 34
DEC_OFFSET = 35
DEC_NON_WRITABLE = 24
MODE_LOCAL_SIZE = 17
MODE_LOCAL_SIZE_ID = 38
SC_UNIFORM = 2
SC_PUSH_CONSTANT = 9
SC_STORAGE_BUFFER = 12
SC_PHYSICAL_STORAGE_BUFFER = 5349
EXEC_MODEL_GLCOMPUTE = 5


@dataclass(frozen=True)
class DescriptorBinding:
    set: int
    binding: int
    storage_class: int  # SC_STORAGE_BUFFER or SC_UNIFORM
    name: str = ""
    readonly: bool = False


@dataclass(frozen=True)
class PushConstantMember:
    offset: int
    size: int
    is_pointer: bool  # a PhysicalStorageBuffer pointer (8 bytes): a device address


@dataclass
class EntryInterface:
    """The resources one compute entry point uses."""

    name: str
    local_size: tuple[int, int, int] = (1, 1, 1)
    bindings: list[DescriptorBinding] = field(default_factory=list)
    push_constant_size: int = 0
    push_constant_members: list[PushConstantMember] = field(default_factory=list)

    @property
    def sets(self) -> list[int]:
        return sorted({b.set for b in self.bindings})


@dataclass
class ShaderInterface:
    """What one SPIR-V module tells about its compute entry points and resources."""

    version: tuple[int, int] = (1, 0)
    entries: dict[str, EntryInterface] = field(default_factory=dict)
    uses_physical_storage_buffer: bool = False
    capabilities: set[int] = field(default_factory=set)
    capability_order: list[int] = field(default_factory=list)  # as the module lists them
    extensions: list[str] = field(default_factory=list)
    addressing_model: int = 0
    # Largest struct made only of PhysicalStorageBuffer pointers: the `bda` binding table
    # as far as the shader reads it (IREE declares it up to the highest binding it uses).
    bda_table_entries: int = 0

    @property
    def entry_points(self) -> list[str]:
        return list(self.entries)


def _string(words: np.ndarray, start: int) -> tuple[str, int]:
    """Decode a nul-terminated literal string; return it and the word index after it."""
    raw = words[start:].tobytes()
    end = raw.index(b"\0")
    return raw[:end].decode("utf-8", "replace"), start + end // 4 + 1


def reflect(code: bytes, error: type[AmdgpuError] = VulkanError) -> ShaderInterface:
    """Read the interface of a SPIR-V module; raise `error` if it is not SPIR-V."""
    if len(code) < 20 or len(code) % 4:
        raise error(
            f"not a SPIR-V module ({len(code)} bytes, not a multiple of 4 or too short); "
            "pass the bytes of a .spv file"
        )
    words = np.frombuffer(code, dtype="<u4")
    if int(words[0]) != MAGIC:
        raise error(
            f"not a SPIR-V module (magic 0x{int(words[0]):08x}, expected 0x{MAGIC:08x}); "
            "pass the bytes of a .spv file"
        )
    names: dict[int, str] = {}
    decorations: dict[int, dict[int, int]] = {}
    member_offsets: dict[int, dict[int, int]] = {}
    types: dict[int, tuple] = {}
    constants: dict[int, int] = {}
    variables: list[tuple[int, int, int]] = []  # (result id, pointer type, storage class)
    entry_ids: dict[int, tuple[str, list[int]]] = {}
    local_size: dict[int, tuple[int, int, int]] = {}
    info = ShaderInterface(version=((int(words[1]) >> 16) & 0xFF, (int(words[1]) >> 8) & 0xFF))
    i, n = 5, len(words)
    while i < n:
        head = int(words[i])
        count, op = head >> 16, head & 0xFFFF
        if count == 0 or i + count > n:
            raise error(f"truncated SPIR-V instruction at word {i}; the module is corrupt")
        ops = words[i + 1 : i + count]
        if op == OP_CAPABILITY:
            info.capabilities.add(int(ops[0]))
            info.capability_order.append(int(ops[0]))
        elif op == OP_EXTENSION:
            info.extensions.append(_string(words, i + 1)[0])
        elif op == OP_MEMORY_MODEL:
            info.addressing_model = int(ops[0])
        elif op == OP_NAME:
            names[int(ops[0])] = _string(words, i + 2)[0]
        elif op == OP_ENTRY_POINT:
            if int(ops[0]) == EXEC_MODEL_GLCOMPUTE:
                name, after = _string(words, i + 3)
                entry_ids[int(ops[1])] = (name, [int(w) for w in words[after : i + count]])
        elif op == OP_EXECUTION_MODE and int(ops[1]) == MODE_LOCAL_SIZE:
            local_size[int(ops[0])] = (int(ops[2]), int(ops[3]), int(ops[4]))
        elif op == OP_DECORATE:
            value = int(ops[2]) if len(ops) > 2 else 1
            decorations.setdefault(int(ops[0]), {})[int(ops[1])] = value
        elif op == OP_MEMBER_DECORATE and int(ops[2]) == DEC_OFFSET:
            member_offsets.setdefault(int(ops[0]), {})[int(ops[1])] = int(ops[3])
        elif op in (OP_TYPE_INT, OP_TYPE_FLOAT):
            types[int(ops[0])] = ("scalar", int(ops[1]) // 8)
        elif op == OP_TYPE_BOOL:
            types[int(ops[0])] = ("scalar", 4)
        elif op == OP_TYPE_VECTOR:
            types[int(ops[0])] = ("vector", int(ops[1]), int(ops[2]))
        elif op == OP_TYPE_ARRAY:
            types[int(ops[0])] = ("array", int(ops[1]), int(ops[2]))
        elif op == OP_TYPE_RUNTIME_ARRAY:
            types[int(ops[0])] = ("runtime_array", int(ops[1]))
        elif op == OP_TYPE_STRUCT:
            types[int(ops[0])] = ("struct", [int(m) for m in ops[1:]])
        elif op == OP_TYPE_POINTER:
            sc = int(ops[1])
            types[int(ops[0])] = ("pointer", sc, int(ops[2]))
            if sc == SC_PHYSICAL_STORAGE_BUFFER:
                info.uses_physical_storage_buffer = True
        elif op in (OP_CONSTANT, OP_SPEC_CONSTANT):
            constants[int(ops[1])] = int(ops[2]) if len(ops) > 2 else 0
        elif op == OP_VARIABLE:
            variables.append((int(ops[1]), int(ops[0]), int(ops[2])))
        i += count

    def size_of(type_id: int) -> int:
        t = types.get(type_id, ("scalar", 4))
        if t[0] == "scalar":
            return t[1]
        if t[0] == "vector":
            return size_of(t[1]) * t[2]
        if t[0] == "array":
            stride = decorations.get(type_id, {}).get(DEC_ARRAY_STRIDE) or size_of(t[1])
            return stride * constants.get(t[2], 1)
        if t[0] == "pointer":
            return 8
        if t[0] == "struct":
            offsets = member_offsets.get(type_id, {})
            if not t[1]:
                return 0
            last = len(t[1]) - 1
            return offsets.get(last, 0) + size_of(t[1][last])
        return 0

    for t in types.values():
        if t[0] == "struct" and t[1]:
            members = [types.get(m, ("",)) for m in t[1]]
            if all(m[0] == "pointer" and m[1] == SC_PHYSICAL_STORAGE_BUFFER for m in members):
                info.bda_table_entries = max(info.bda_table_entries, len(members))
    all_variables = {var_id for var_id, _, _ in variables}
    for entry_id, (name, interface) in entry_ids.items():
        entry = EntryInterface(name=name, local_size=local_size.get(entry_id, (1, 1, 1)))
        # SPIR-V 1.4+ lists every global an entry point uses; older modules list only
        # inputs and outputs, so then every resource of the module counts.
        used = set(interface) if info.version >= (1, 4) else all_variables
        for var_id, ptr_type, sc in variables:
            if var_id not in used:
                continue
            deco = decorations.get(var_id, {})
            if sc in (SC_STORAGE_BUFFER, SC_UNIFORM) and DEC_BINDING in deco:
                entry.bindings.append(
                    DescriptorBinding(
                        set=deco.get(DEC_DESCRIPTOR_SET, 0),
                        binding=deco[DEC_BINDING],
                        storage_class=sc,
                        name=names.get(var_id, ""),
                        readonly=DEC_NON_WRITABLE in deco,
                    )
                )
            elif sc == SC_PUSH_CONSTANT:
                pointee = types.get(ptr_type, ("pointer", sc, 0))[2]
                struct = types.get(pointee)
                if struct and struct[0] == "struct":
                    offsets = member_offsets.get(pointee, {})
                    for m, member_type in enumerate(struct[1]):
                        mt = types.get(member_type, ("scalar", 4))
                        entry.push_constant_members.append(
                            PushConstantMember(
                                offset=offsets.get(m, 0),
                                size=size_of(member_type),
                                is_pointer=mt[0] == "pointer"
                                and mt[1] == SC_PHYSICAL_STORAGE_BUFFER,
                            )
                        )
                    entry.push_constant_size = max(entry.push_constant_size, size_of(pointee))
        entry.bindings.sort(key=lambda b: (b.set, b.binding))
        info.entries[name] = entry
    if not info.entries:
        raise error("the SPIR-V module has no GLCompute entry point; pass a compute shader")
    return info


# SPIR-V capabilities (spec 3.31) -> the Vulkan feature a device must enable for them.
CAPABILITY_FEATURES = {
    9: "shaderFloat16",
    10: "shaderFloat64",
    11: "shaderInt64",
    22: "shaderInt16",
    39: "shaderInt8",
    4433: "storageBuffer16BitAccess",
    4434: "uniformAndStorageBuffer16BitAccess",
    4448: "storageBuffer8BitAccess",
    4449: "uniformAndStorageBuffer8BitAccess",
    5345: "vulkanMemoryModel",
    5347: "bufferDeviceAddress",
}


def missing_features(info: ShaderInterface, enabled: set[str]) -> list[str]:
    """Device features the module's capabilities need but the device has not enabled."""
    needed = {CAPABILITY_FEATURES[c] for c in info.capabilities if c in CAPABILITY_FEATURES}
    return sorted(needed - enabled)


# GroupNonUniform* capabilities -> the subgroup operation (VkSubgroupFeatureFlagBits name)
# a device must support in compute shaders for them.
CAPABILITY_SUBGROUP_OPS = {
    61: "basic", 62: "vote", 63: "arithmetic", 64: "ballot", 65: "shuffle",
    66: "shuffle_relative", 67: "clustered", 68: "quad",
}


def missing_subgroup_ops(info: ShaderInterface, supported) -> list[str]:
    """Subgroup operations the module's capabilities need but the device lacks."""
    needed = {CAPABILITY_SUBGROUP_OPS[c] for c in info.capabilities
              if c in CAPABILITY_SUBGROUP_OPS}
    return sorted(needed - set(supported))


# --- the compiler's view of a module ------------------------------------------------------
ADDRESSING_MODELS = {
    0: "Logical", 1: "Physical32", 2: "Physical64", 5348: "PhysicalStorageBuffer64",
}

#: Capability numbers (SPIR-V spec, 3.31) that matter for device feature checks.
CAPABILITY_NAMES = {
    0: "Matrix", 1: "Shader", 9: "Float16", 10: "Float64", 11: "Int64", 12: "Int64Atomics",
    22: "Int16", 39: "Int8", 61: "GroupNonUniform", 62: "GroupNonUniformVote",
    63: "GroupNonUniformArithmetic", 64: "GroupNonUniformBallot",
    65: "GroupNonUniformShuffle", 66: "GroupNonUniformShuffleRelative",
    67: "GroupNonUniformClustered", 68: "GroupNonUniformQuad",
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


def read_spirv(data: bytes) -> SpirvModule:
    """Read one SPIR-V module's interface. Raises CompileError for a malformed binary."""
    data = bytes(data)
    try:
        info = reflect(data, error=CompileError)
    except (IndexError, KeyError, RecursionError, ValueError) as exc:
        raise CompileError(
            f"SPIR-V module is malformed ({type(exc).__name__}); recompile the shader"
        ) from None
    entries = {
        name: SpirvEntryPoint(
            name,
            e.local_size,
            [(b.set, b.binding) for b in e.bindings],
            [b.readonly for b in e.bindings],
            (e.push_constant_size + 3) // 4,
        )
        for name, e in info.entries.items()
    }
    return SpirvModule(
        info.version,
        ADDRESSING_MODELS.get(info.addressing_model, str(info.addressing_model)),
        [CAPABILITY_NAMES.get(c, str(c)) for c in info.capability_order],
        list(info.extensions),
        entries,
        len(data),
    )


def split_modules(data: bytes, modules: list[dict]) -> list[bytes]:
    """The module slices of a concatenated variant: `modules` holds {offset, size} dicts."""
    return [data[m["offset"] : m["offset"] + m["size"]] for m in modules]
