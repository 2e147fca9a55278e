"""MLIR (linalg/tensor, static shapes) -> HSACO per AMD target + SPIR-V per Vulkan ABI, via IREE.

One `iree-compile` run per target (gfx target id, or Vulkan with one dispatch ABI) with
`--dump-compilation-phases-to` and `--iree-hal-dump-executable-binaries-to`: the dumped
binaries are the kernels, the `executable-targets` phase gives each export's workgroup size
and pipeline layout, and the `hal` phase gives the host program. Both phases are walked with
IREE's MLIR Python bindings (`iree.compiler.ir`).

Facts checked against IREE 3.13 (iree-compile 3.13.0rc20261016):

- AMD: `--iree-hal-target-device=amdgpu --iree-rocm-target=<gfx>` dumps one raw HSACO per
  linked executable (`module_<name>_<gfx>.hsaco`, code object v5, EI_ABIVERSION 3); all
  dispatches of a program link into one code object. Kernel symbols are the export names.
  Kernel arguments (read from the code object metadata): one `global_buffer` pointer per
  binding (8 bytes each, in binding order), then one 4-byte `by_value` per i32 constant; no
  hidden arguments. Example chain_4 on gfx1100: args at offsets 0, 8 (pointers), 16, 20
  (i32), kernarg_segment_size 24. IREE does not emit code object v6; asking for it is an
  error here.
- Vulkan: IREE writes one SPIR-V module per entry point (`module_<exe>_<export>.spv`). A
  Vulkan variant's `data` is those modules concatenated; `info["modules"]` gives each one's
  offset and size, `info["entry_points"][name]["module"]` its index.
  * descriptors ABI (`vulkan-spirv-fb`): binding i of the pipeline layout is (set 0,
    binding i), storage buffers; push constants are the i32 constants from offset 0.
  * bda ABI (`vulkan-spirv-bda-v1`): no descriptor sets. Push constants start with the
    32-byte root (IREE's iree_hal_vulkan_bda_dispatch_root_v1_t): u64 binding_table_address
    (dwords 0-1), u64 constants_address (2-3), u32 binding_base (4), u32 constant_base (5),
    u32 flags (6), u32 reserved (7); the i32 constants follow from byte 32. The shaders of
    IREE 3.13 read only binding_table_address (entry i at table + 8*i); write 0 to the rest.
    The binding table is an array of u64 buffer device addresses, one per binding in order
    (IREE: BdaBindingTableEntryType ADDRESS64). Needs bufferDeviceAddress.
  The default Vulkan target ("portable") is IREE's vp_android_baseline_2022 limits (128
  invocations, 16 KiB shared memory, no subgroup operations, so results do not depend on
  the device's subgroup size) plus fp16 arithmetic (shaderFloat16) so f16 programs compile.
  Any IREE Vulkan target name ("ampere", "rdna3", ...) may be given instead, or a device's
  own target (`vulkan_target_for`, what amdgpu-run uses): "features:" + its Vulkan features
  that change the wgp (Float16/64, Int8/16/64, 8/16-bit storage) and, where its compute
  stage has them, "subgroup=N:shuffle|arithmetic" at its default subgroup size N (the size
  a SPIR-V 1.3 module runs at without a required-size pipeline). Every Vulkan target
  decomposes linalg.pack/unpack before dispatches form (IREE's SPIR-V code generation
  cannot tile them to invocations).
- Host program (`--compile-to=hal`, static shapes): the entry function allocates results
  and transients with `hal.device.queue.alloca`, and runs memoized command buffers with
  `hal.device.queue.execute.indirect ... bindings([...])` (the binding table). Each command
  buffer records `hal.command_buffer.dispatch ... workgroups([x, y, z]) constants([...])
  bindings([(slot)[offset, length], ...])` and `hal.command_buffer.execution_barrier`.
  IREE packs several transients into one allocation and passes their offsets as dispatch
  constants: that is why chain_4's middle dispatches have constants.

`bundle.program` (see /tmp/contracts.md) comes from the first compiled target; every
variant's `info["dispatches"]` holds its own {kernel, workgroup_size, workgroup_count,
constants, binding_count, constant_count} for the same dispatch sequence (they differ between
targets: wave64 targets get 64-wide workgroups). Beyond the contract, `program["function"]`
names the entry function and each output carries its byte `size`. Binding offsets are the
binding-table offset plus the dispatch's own offset; bindings of one transient may overlap
(IREE reuses and subdivides it, handing sub-offsets to the kernel as constants).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ground.errors import CompileError

from . import spirv

__all__ = [
    "VULKAN_ABIS",
    "DEFAULT_VULKAN_TARGET",
    "IreeVariant",
    "IreeResult",
    "iree_version",
    "iree_compile_path",
    "compile_mlir",
    "vulkan_device_flags",
]

VULKAN_ABIS = ("descriptors", "bda")
DEFAULT_VULKAN_TARGET = "portable"
_TIMEOUT_S = 600
_BDA_ROOT_WORDS = 8

# vp_android_baseline_2022's limits (what IREE uses by default) plus fp16 arithmetic.
_PORTABLE_WGP = (
    "compute = fp32|fp16|int32, storage = b32, subgroup = none, subgroup_size_choices = [64], "
    "max_workgroup_sizes = [128, 128, 64], max_thread_count_per_workgroup = 128, "
    "max_workgroup_memory_bytes = 16384, max_workgroup_counts = [65535, 65535, 65535]"
)
_VULKAN_FORMATS = {"descriptors": "vulkan-spirv-fb", "bda": "vulkan-spirv-bda-v1"}
# IREE's SPIR-V code generation cannot tile linalg.pack / linalg.unpack to invocations
# ("failed to tile to invocations", on every Vulkan target: IREE runs no pack tests on
# Vulkan). Decomposed before dispatches are formed (pad + expand_shape + transpose, and
# back for unpack: the same values) they compile as ordinary elementwise dispatches.
_DECOMPOSE_PACK_UNPACK = ("--iree-preprocessing-pass-pipeline="
                          "builtin.module(util.func(iree-codegen-decompose-pack-unpack-ops))")
# IREE demotes f64 to f32 by default, but only inside the program: its inputs and results
# stay f64 buffer views, so a program that needs f64 (casts to and from DOUBLE) reads twice
# the bytes its buffers hold. Follow the program's types, as IREE's own test suites do.
KEEP_F64 = ("--iree-input-demote-f64-to-f32=false",)
_BDA_FEATURES = "cap:Int64,cap:PhysicalStorageBufferAddresses,ext:SPV_KHR_physical_storage_buffer"

_DTYPES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "si8": "int8", "si16": "int16", "si32": "int32", "si64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    # ml_dtypes names (amdgpu.dtypes): bf16 above, the f8/f4 families, sub-byte integers
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "f8E8M0FNU": "float8_e8m0fnu", "f8E3M4": "float8_e3m4", "f8E4M3": "float8_e4m3",
    "f4E2M1FN": "float4_e2m1fn", "f6E2M3FN": "float6_e2m3fn", "f6E3M2FN": "float6_e3m2fn",
    "i2": "int2", "i4": "int4", "si4": "int4", "ui2": "uint2", "ui4": "uint4",
}


@dataclass
class IreeVariant:
    kind: str  # "hsaco" | "spirv"
    target: str  # target id, or "vulkan"
    abi: str | None  # None for hsaco, "descriptors" | "bda" for spirv
    data: bytes
    info: dict
    program: dict | None = None  # the program as compiled for this target


@dataclass
class IreeResult:
    variants: list[IreeVariant] = field(default_factory=list)
    program: dict | None = None


@functools.cache
def iree_compile_path() -> str:
    try:
        from iree.compiler.tools import binaries
    except ImportError:
        raise CompileError(
            "IREE's compiler is not installed; run `pip install 'iree-base-compiler>=3.12,<3.14'`"
        ) from None
    return str(binaries.find_tool("iree-compile"))


@functools.cache
def iree_version() -> str:
    """'iree 3.13.0rc20261016' (goes into cache keys)."""
    try:
        from iree.compiler import version
    except ImportError:
        raise CompileError(
            "IREE's compiler is not installed; run `pip install 'iree-base-compiler>=3.12,<3.14'`"
        ) from None
    return f"iree {version.VERSION}"


# Vulkan feature (as VkPhysicalDevice*Features names it) -> what it adds to the target's
# wgp: compute types and storage widths; IREE derives the SPIR-V capabilities from them.
_FEATURE_COMPUTE = {"shaderFloat16": "fp16", "shaderFloat64": "fp64", "shaderInt64": "int64",
                    "shaderInt16": "int16", "shaderInt8": "int8"}
_FEATURE_STORAGE = {"storageBuffer16BitAccess": "b16", "storageBuffer8BitAccess": "b8",
                    "shaderInt64": "b64"}
FEATURES_PREFIX = "features:"
_SUBGROUP_TOKEN = "subgroup="
# IREE's wgp subgroup op -> the Vulkan subgroup operations its SPIR-V needs.
_SUBGROUP_NEEDS = {"shuffle": {"basic", "shuffle", "shuffle_relative"},
                   "arithmetic": {"basic", "arithmetic"}}


def vulkan_target_for(features, subgroup_size: int = 0, subgroup_ops=()) -> str:
    """The `vulkan_target` for a device with these Vulkan features (its enabled_features,
    as `hwlab devices` reports them): "features:" + the ones that change IREE's target,
    then "subgroup=N:OPS" where the device's compute stage has the subgroup operations IREE
    uses (`subgroup_ops`: VkSubgroupFeatureFlagBits names, as VulkanDevice.subgroup_ops):
    shuffle (needs shuffle + shuffle_relative) and arithmetic, at its default size N."""
    wanted = sorted(set(features) & (set(_FEATURE_COMPUTE) | set(_FEATURE_STORAGE)))
    ops = _iree_subgroup_ops(subgroup_ops)
    if subgroup_size > 0 and ops:
        wanted.append(f"{_SUBGROUP_TOKEN}{int(subgroup_size)}:{'|'.join(ops)}")
    return FEATURES_PREFIX + ",".join(wanted)


def _iree_subgroup_ops(vulkan_ops) -> list[str]:
    """IREE's wgp subgroup ops for a device's Vulkan subgroup operations: IREE's `shuffle`
    emits GroupNonUniformShuffle and ShuffleRelative, `arithmetic` GroupNonUniformArithmetic
    (all on top of basic)."""
    have = set(vulkan_ops)
    if "basic" not in have:
        return []
    return [name for name, need in _SUBGROUP_NEEDS.items() if need <= have]


def _features_wgp(spec: str) -> str:
    tokens = [f for f in spec[len(FEATURES_PREFIX):].split(",") if f]
    subgroup = [t for t in tokens if t.startswith(_SUBGROUP_TOKEN)]
    features = {t for t in tokens if not t.startswith(_SUBGROUP_TOKEN)}
    unknown = features - set(_FEATURE_COMPUTE) - set(_FEATURE_STORAGE)
    if unknown:
        raise CompileError(
            f"unknown Vulkan features {sorted(unknown)} in vulkan_target; use names from "
            f"{sorted(set(_FEATURE_COMPUTE) | set(_FEATURE_STORAGE))}"
        )
    compute = ["fp32", "int32"] + [v for k, v in _FEATURE_COMPUTE.items() if k in features]
    storage = ["b32"] + [v for k, v in _FEATURE_STORAGE.items() if k in features]
    # fp16 arithmetic is needed by f16 programs; keep it as the portable target does.
    if "fp16" not in compute:
        compute.insert(1, "fp16")
    wgp = _PORTABLE_WGP.replace("compute = fp32|fp16|int32", "compute = " + "|".join(compute)
                                ).replace("storage = b32", "storage = " + "|".join(storage))
    if subgroup:
        size, ops = _parse_subgroup(subgroup[-1])
        wgp = wgp.replace("subgroup = none, subgroup_size_choices = [64]",
                          f"subgroup = {'|'.join(ops)}, subgroup_size_choices = [{size}]")
    return wgp


def _parse_subgroup(token: str) -> tuple[int, list[str]]:
    """"subgroup=8:shuffle|arithmetic" -> (8, ["shuffle", "arithmetic"])."""
    size_text, _, ops_text = token[len(_SUBGROUP_TOKEN):].partition(":")
    ops = [o for o in ops_text.split("|") if o]
    if not size_text.isdigit() or int(size_text) <= 0 or not ops or set(ops) - set(_SUBGROUP_NEEDS):
        raise CompileError(
            f"bad subgroup entry {token!r} in vulkan_target; write subgroup=SIZE:OPS with OPS "
            f"from {'|'.join(_SUBGROUP_NEEDS)} (e.g. subgroup=32:shuffle|arithmetic)"
        )
    return int(size_text), ops


def vulkan_device_flags(abi: str, vulkan_target: str = DEFAULT_VULKAN_TARGET) -> list[str]:
    """iree-compile flags that select a Vulkan device with one dispatch ABI."""
    if abi not in VULKAN_ABIS:
        raise CompileError(f"unknown Vulkan dispatch ABI {abi!r}; use one of {VULKAN_ABIS}")
    wgp = _PORTABLE_WGP
    if vulkan_target.startswith(FEATURES_PREFIX):
        wgp = _features_wgp(vulkan_target)
    elif vulkan_target != DEFAULT_VULKAN_TARGET:
        return [
            "--iree-hal-target-device=vulkan",
            f"--iree-vulkan-target={vulkan_target}",
            f"--iree-vulkan-dispatch-abi={abi}",
            _DECOMPOSE_PACK_UNPACK,
        ]
    features = "spirv:v1.3,cap:Shader" + (f",{_BDA_FEATURES}" if abi == "bda" else "")
    device = (
        f'#hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", '
        f'"{_VULKAN_FORMATS[abi]}", {{iree_codegen.target_info = #iree_gpu.target<'
        f'arch = "portable", features = "{features}", wgp = <{wgp}>>}}>]> '
        f": !hal.device"
    )
    return [f"--iree-hal-target-device={device}", _DECOMPOSE_PACK_UNPACK]


def _lacks_f64(flags: list[str]) -> bool:
    """A Vulkan target of ours (portable or a device's features) without fp64 compute; an
    IREE target name ("ampere") is IREE's to judge."""
    device = next((f for f in flags if f.startswith("--iree-hal-target-device=#")), None)
    return device is not None and "fp64" not in device


def _amd_device_flags(target_id: str) -> list[str]:
    name, *features = target_id.split(":")
    # Software fp4/fp8 where the chip has none (f8E4M3FN on gfx1100/gfx942, ...), as IREE's
    # own ROCm e2e suite compiles (tests/e2e/linalg check_rocm_hip). It only turns IREE's
    # "not supported on this chipset" errors into code, so no cached bundle goes stale.
    flags = ["--iree-hal-target-device=amdgpu", f"--iree-rocm-target={name}",
             "--iree-llvmgpu-enable-small-float-emulation"]
    if features:  # "sramecc+", "xnack-" -> "+sramecc,-xnack"
        flags.append(
            "--iree-rocm-target-features=" + ",".join(f"{f[-1]}{f[:-1]}" for f in features)
        )
    return flags


# --- running iree-compile ---------------------------------------------------------------
@dataclass
class _Run:
    hal_text: str
    targets_text: str
    binaries: dict[str, bytes]  # file name -> bytes


# iree-compile failures that one flag avoids without changing what the program computes:
# (the start of IREE's first diagnostic, as _first_diagnostic words it; the flag).
_IREE_WORKAROUNDS = (
    # IREE 3.13 bug, gfx950 only (reduced: tests/data/iree/skinny_matmul_vdmfma.mlir,
    # one 8x256 @ 256x64 f16 linalg.matmul): a skinny 16-bit matmul (M <= 8, K a multiple
    # of 128) gets the VDMFMA (sparse MFMA) virtual intrinsic (iree-org/iree#24103), and the
    # direct-load path asks getXorShuffleParamsForTunedChipset for its LDS swizzle
    # (iree-org/iree#24254). gfx950's table has no VDMFMA entry; validateXorShuffle
    # (Codegen/Utils/GPUUtils.cpp) then reads the failed FailureOr's row width (0) and
    # divides by it: SIGFPE. Without direct load (global load DMA into LDS) the operands
    # reach LDS by ordinary loads: the same matmul, no swizzle asked for.
    ("IREE crashed in mlir::iree_compiler::getXorShuffleParamsForTunedChipset ",
     "--iree-llvmgpu-use-direct-load=false"),
    # IREE 3.13 bug, gfx90a: the same skinny f16 matmul gets VDMFMA there too (derived from
    # MFMA_F32_16x16x16_F16, which gfx90a has, without asking whether the chip has sparse
    # MFMA), and its own AMDGPU dialect then refuses the op. The tile-and-fuse matmul
    # pipeline is the one that picks VDMFMA; without it the matmul goes through IREE's
    # vector-distribute pipeline with dense MFMA.
    ("<unknown>:0: error: 'amdgpu.sparse_mfma' op sparse MFMA (smfmac) only supported on "
     "gfx942+", "--iree-codegen-llvmgpu-use-tile-and-fuse-matmul=false"),
)


def _workaround_for(stderr: str) -> str | None:
    first = _first_diagnostic(stderr)
    return next((flag for start, flag in _IREE_WORKAROUNDS if first.startswith(start)), None)


def _crash_frame(stderr: str) -> str | None:
    """The first frame of IREE's own code in an iree-compile crash's stack dump."""
    crash = re.search(r"^\s*#\d+ 0x[0-9a-f]+ (mlir::iree_compiler::[^(]+)\(", stderr, re.M)
    return crash.group(1) if crash else None


def _first_diagnostic(stderr: str) -> str:
    for line in stderr.splitlines():
        if ": error:" in line:
            return line.strip()
    # A crash: LLVM's stack dump; the first frame of IREE's own code names where.
    frame = _crash_frame(stderr)
    if frame:
        return f"IREE crashed in {frame} (its bug, not the program's)"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[0] if lines else "no diagnostics"


def _run_tool(argv: list[str], label: str) -> subprocess.CompletedProcess:
    try:
        # errors="replace": diagnostics quote the source, which may not be UTF-8.
        return subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise CompileError(
            f"iree-compile ({label}) took more than {_TIMEOUT_S} s; simplify the program"
        ) from None


def _crashed(done: subprocess.CompletedProcess) -> bool:
    """Killed by a signal (LLVM's handler re-raises it), or LLVM's crash banner."""
    return done.returncode < 0 or "Please report issues to" in done.stderr


def _run_iree(source: Path, device_flags: list[str], label: str, extra: Sequence[str]) -> _Run:
    with tempfile.TemporaryDirectory(prefix="amdgpu-iree-") as tmp:
        phases, bins = os.path.join(tmp, "phases"), os.path.join(tmp, "bin")
        argv = [
            iree_compile_path(), str(source), *device_flags,
            f"--dump-compilation-phases-to={phases}",
            f"--iree-hal-dump-executable-binaries-to={bins}",
            # Binaries are serialized by the end of the hal phase; the VM module is not needed.
            "--compile-to=hal", "-o", os.path.join(tmp, "hal.mlir"), *KEEP_F64, *extra,
        ]
        done = _run_tool(argv, label)
        if done.returncode != 0:
            stderr = done.stderr
            if _crashed(done) and _crash_frame(stderr) is None:
                # Two of IREE's compile threads crashing at once garble (or cut short) the
                # stack dump; one thread tells where, for the message and _IREE_WORKAROUNDS.
                again = _run_tool([*argv, "--mlir-disable-threading"], label)
                if _crash_frame(again.stderr):
                    stderr = again.stderr
            err = CompileError(
                f"iree-compile ({label}): {_first_diagnostic(stderr)}; "
                "fix the source or the options and compile again"
            )
            err.diagnostics = stderr  # type: ignore[attr-defined]
            raise err
        found = {p.name.split(".", 2)[-1]: p for p in Path(phases).glob("*.mlir")}
        try:
            hal_text = found["hal.mlir"].read_text()
            targets_text = found["executable-targets.mlir"].read_text()
        except KeyError:
            raise CompileError(
                f"iree-compile ({label}) wrote no hal/executable-targets phase dumps; "
                "this IREE version is not supported (use >=3.12,<3.14)"
            ) from None
        binaries = {p.name: p.read_bytes() for p in sorted(Path(bins).glob("*")) if p.is_file()}
    return _Run(hal_text, targets_text, binaries)


def _run_iree_around_bugs(source: Path, device_flags: list[str], label: str,
                          extra: Sequence[str]) -> tuple[_Run, list[str]]:
    """_run_iree, again with a flag from _IREE_WORKAROUNDS each time IREE fails in a way
    one of them avoids; returns the run and the flags it took."""
    workaround: list[str] = []
    while True:
        try:
            return _run_iree(source, device_flags, label, [*extra, *workaround]), workaround
        except CompileError as exc:
            flag = _workaround_for(getattr(exc, "diagnostics", ""))
            if flag is None or flag in extra or flag in workaround:
                raise
            workaround.append(flag)


# --- walking the IR ---------------------------------------------------------------------
def _ir():
    from iree.compiler import ir

    return ir


def _parse(text: str, label: str):
    ir = _ir()
    ctx = ir.Context()
    try:
        return ctx, ir.Module.parse(text, ctx)
    except Exception as exc:  # noqa: BLE001 - MLIR raises its own error types
        raise CompileError(f"cannot read IREE's {label} IR: {str(exc).splitlines()[0]}") from None


def _walk(op):
    """Every operation nested in `op`, in program order (pre-order)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


def _attr_str(op, name: str) -> str:
    ir = _ir()
    return ir.StringAttr(op.attributes[name]).value


def _sym(op) -> str:
    return _attr_str(op, "sym_name")


def _owner(value):
    """The defining operation of a value, or None for a block argument."""
    ir = _ir()
    if isinstance(value, ir.BlockArgument):
        return None
    return value.owner.operation


def _const(value) -> int:
    ir = _ir()
    op = _owner(value)
    if op is None or op.name != "arith.constant":
        raise CompileError(
            "the IREE program uses a value that is not a constant where a static shape was "
            "expected; use static shapes"
        )
    return ir.IntegerAttr(op.attributes["value"]).value


@dataclass
class _Export:
    name: str
    ordinal: int
    workgroup_size: list[int]
    binding_count: int
    readonly: list[bool]
    constant_count: int


def _layout(attr) -> tuple[int, list[bool], int]:
    """(binding count, read-only flags, constant count) of a #hal.pipeline.layout."""
    # The HAL attributes have no Python accessors; read the printed attribute's fields.
    text = str(attr)
    constants = 0
    if "constants = " in text:
        constants = int(text.split("constants = ", 1)[1].split(",", 1)[0].split(">", 1)[0])
    bindings = text.split("#hal.pipeline.binding<")[1:]
    readonly = ["ReadOnly" in b.split(">", 1)[0] for b in bindings]
    return len(bindings), readonly, constants


def _read_exports(text: str) -> dict[tuple[str, str, str], _Export]:
    ir = _ir()
    _ctx, module = _parse(text, "executable-targets")
    exports: dict[tuple[str, str, str], _Export] = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "hal.executable":
            continue
        executable = _sym(op)
        for variant in _walk(op):
            if variant.name != "hal.executable.variant":
                continue
            for export in variant.regions[0].blocks[0].operations:
                export = export.operation
                if export.name != "hal.executable.export":
                    continue
                size = [1, 1, 1]
                if "workgroup_size" in export.attributes:
                    size = [ir.IntegerAttr(a).value for a in export.attributes["workgroup_size"]]
                count, readonly, constants = _layout(export.attributes["layout"])
                ordinal = ir.IntegerAttr(export.attributes["ordinal"]).value
                exports[(executable, _sym(variant), _sym(export))] = _Export(
                    _sym(export), ordinal, size, count, readonly, constants
                )
    return exports


def _dtype(value) -> str:
    ir = _ir()
    op = _owner(value)
    if op is None or op.name != "hal.element_type":
        raise CompileError("the IREE program has a tensor of unknown element type")
    name = str(ir.TypeAttr(op.attributes["type"]).value)
    return _DTYPES.get(name, name)


def _shape(values) -> list[int]:
    return [_const(v) for v in values]


class _ProgramReader:
    """Turns the `hal` phase of one compile into the contract's `program` dict."""

    def __init__(self, text: str, exports: dict[tuple[str, str, str], _Export]):
        self._ctx, self.module = _parse(text, "hal")
        self.text = text
        self.exports = exports
        # The source function's argument types, for inputs the compiled program never reads.
        self.declared_inputs: list[dict | None] | None = None
        self.funcs = {}
        self.initializers = []
        self.executable_targets: dict[str, tuple[str, str]] = {}
        for op in self.module.body.operations:
            op = op.operation
            if op.name == "util.func":
                self.funcs[_sym(op)] = op
            elif op.name == "util.initializer":
                self.initializers.append(op)
        # Which (executable, variant) each executable global holds.
        ir = _ir()
        for init in self.initializers:
            created = None
            for inner in _walk(init):
                if inner.name == "hal.executable.create":
                    created = ir.SymbolRefAttr(inner.attributes["executable_target"]).value
                elif inner.name == "util.global.store" and created:
                    glob = ir.FlatSymbolRefAttr(inner.attributes["global"]).value
                    self.executable_targets[glob] = (created[0], created[1])

    def entry(self):
        ir = _ir()
        # The synchronous wrapper first: iree-turbine exports `f` and `f$async` (fences).
        ordered = sorted(self.funcs.items(), key=lambda item: item[0].endswith("$async"))
        for name, op in ordered:
            if "iree.abi.stub" in op.attributes and (
                "sym_visibility" not in op.attributes
                or ir.StringAttr(op.attributes["sym_visibility"]).value == "public"
            ):
                return name, op
        raise CompileError("the MLIR program has no public function; export one func.func")

    def command_buffer_func(self, value):
        """The memoized function that records the command buffer held by `value`."""
        ir = _ir()
        load = _owner(value)
        if load is None or load.name != "util.global.load":
            raise CompileError(
                "the IREE program records its command buffer inline; only memoized "
                "(static-shape) programs are supported"
            )
        glob = ir.FlatSymbolRefAttr(load.attributes["global"]).value
        for init in self.initializers:
            calls = {}
            for inner in _walk(init):
                if inner.name == "util.call":
                    callee = ir.FlatSymbolRefAttr(inner.attributes["callee"]).value
                    calls[inner.results[0]] = callee
                elif inner.name == "util.global.store":
                    if ir.FlatSymbolRefAttr(inner.attributes["global"]).value == glob:
                        for result, callee in calls.items():
                            if result == inner.operands[0]:
                                return self.funcs[callee]
        raise CompileError(f"cannot find how the IREE program records {glob}; unsupported IR")

    def export_of(self, dispatch) -> _Export:
        ir = _ir()
        entry = _owner(dispatch.operands[2])
        if entry is not None and entry.name == "hal.executable.lookup.function":
            path = tuple(ir.SymbolRefAttr(entry.attributes["entry_point"]).value)
            if path in self.exports:
                return self.exports[path]
            # Linking merges executables (mlp_dispatch_0, _1 -> mlp_linked) after the
            # executable-targets phase; export names stay unique and unchanged.
            by_name = [e for key, e in self.exports.items() if key[2] == path[-1]]
            if len(by_name) == 1:
                return by_name[0]
            raise CompileError(f"cannot find export {'::'.join(path)} in IREE's executables")
        # Older form: an ordinal into the executable's exports.
        ordinal = _const(dispatch.operands[2])
        load = _owner(dispatch.operands[1])
        glob = ir.FlatSymbolRefAttr(load.attributes["global"]).value
        executable, variant = self.executable_targets[glob]
        for (exe, var, _name), export in self.exports.items():
            if exe == executable and var == variant and export.ordinal == ordinal:
                return export
        raise CompileError(f"dispatch of unknown export ordinal {ordinal} in {executable}")

    def _origin(self, value, buffer_source: dict, table=None):
        """(kind, index, byte offset) of a buffer value, or of a binding slot (an index
        into `table`, the binding table of the command buffer's execution)."""
        ir = _ir()
        if table is not None and isinstance(value.type, ir.IndexType):
            source, offset, _length = table[_const(value)]
            if source is None:
                return None
            return source[0], source[1], source[2] + offset
        return buffer_source.get(value)

    def read(self) -> dict:
        ir = _ir()
        name, func = self.entry()
        block = func.regions[0].blocks[0]
        inputs: list[dict] = [{} for _ in block.arguments]
        outputs: list[dict] = []
        alloca_size: dict = {}
        # hashable Value -> ("input", i, offset) | ("alloca", j, offset)
        buffer_source: dict = {}
        steps: list = []  # ("exec", cb_func, table) | ("copy"|"fill", fields)
        for op in _walk(func):
            kind = op.name
            if kind in _HOST_CONTROL_FLOW:
                raise CompileError(
                    f"the IREE program has host control flow ({kind}) in {name}: it reads "
                    "device values back to decide what runs, which amdgpu-run does not "
                    "interpret yet; make the branch a tensor select (arith.select) or split "
                    "the program"
                )
            if kind == "hal.buffer_view.assert":
                arg = op.operands[0]
                if isinstance(arg, ir.BlockArgument):
                    view = op.opview
                    inputs[arg.arg_number] = {
                        "shape": _shape(view.shape), "dtype": _dtype(view.element_type)
                    }
            elif kind == "hal.buffer_view.buffer":
                arg = op.operands[0]
                if isinstance(arg, ir.BlockArgument):
                    buffer_source[op.results[0]] = ("input", arg.arg_number, 0)
            elif kind == "hal.device.queue.alloca":
                j = len(alloca_size)
                buffer_source[op.results[0]] = ("alloca", j, 0)
                alloca_size[j] = _const(op.operands[-1])
            elif kind == "hal.buffer.subspan":
                view = op.opview
                base = buffer_source.get(view.source_buffer)
                if base is not None:
                    buffer_source[op.results[0]] = (
                        base[0], base[1], base[2] + _const(view.source_offset)
                    )
            elif kind == "util.optimization_barrier":
                for src, dst in zip(op.operands, op.results, strict=False):
                    if src in buffer_source:
                        buffer_source[dst] = buffer_source[src]
            elif kind == "hal.device.queue.execute.indirect":
                view = op.opview
                table = [
                    (buffer_source.get(b), _const(o), _const(n))
                    for b, o, n in zip(view.binding_buffers, view.binding_offsets,
                                       view.binding_lengths, strict=True)
                ]
                steps.append(("exec", self.command_buffer_func(view.command_buffer), table))
            elif kind == "hal.device.queue.execute":
                raise CompileError(
                    "the IREE program records a command buffer at run time (its push "
                    "constants or bindings come from values read on the host), which "
                    "amdgpu-run does not interpret yet; give every tensor a static shape"
                )
            elif kind in ("hal.device.queue.copy", "hal.device.queue.fill"):
                steps.append(("transfer", self._transfer(op, buffer_source, None)))
            elif kind in ("hal.device.queue.update", "hal.device.queue.read",
                          "hal.device.queue.write"):
                raise CompileError(
                    f"the IREE program uses {kind} (host data into device buffers), which "
                    "amdgpu-run does not carry yet; pass the data as an input instead"
                )
            elif kind == "util.return":
                inputs = self._with_declared(name, inputs)
                for value in op.operands:
                    if isinstance(value, ir.BlockArgument):  # an input returned unchanged
                        t = inputs[value.arg_number]
                        outputs.append({**t, "_source": ("input", value.arg_number, 0),
                                        "_length": _nbytes_of(t)})
                        continue
                    create = _owner(value)
                    if create is None or create.name != "hal.buffer_view.create":
                        raise CompileError(
                            f"an output of {name} comes from {getattr(create, 'name', '?')}, "
                            "not a buffer view over a device buffer; unsupported IR"
                        )
                    view = create.opview
                    source = buffer_source.get(view.source_buffer)
                    if source is None:
                        raise CompileError(
                            f"an output of {name} lives in a buffer of unknown origin "
                            "(a global or a constant); unsupported IR"
                        )
                    outputs.append({
                        "shape": _shape(view.shape), "dtype": _dtype(view.element_type),
                        "_source": (source[0], source[1], source[2] + _const(view.source_offset)),
                        "_length": _const(view.source_length),
                    })
        # An allocation that is exactly one output (offset 0, whole length, the only output
        # in it) is that output's buffer; any other allocation is a transient, and outputs
        # inside it (argmax's two results in one block), or inside an input (in-place
        # updates, reshapes), are read from there: `at` names the slot and offset.
        holders: dict[int, list[int]] = {}
        for i, out in enumerate(outputs):
            if out["_source"][0] == "alloca":
                holders.setdefault(out["_source"][1], []).append(i)
        output_of_alloca: dict[int, int] = {}
        for j, outs in holders.items():
            (src, length) = outputs[outs[0]]["_source"], outputs[outs[0]]["_length"]
            if len(outs) == 1 and src[2] == 0 and length == alloca_size[j]:
                output_of_alloca[j] = outs[0]
        transient_of_alloca: dict[int, int] = {}
        transients: list[dict] = []
        for j in range(len(alloca_size)):
            if j not in output_of_alloca:
                transient_of_alloca[j] = len(transients)
                transients.append({"size": alloca_size[j]})

        def classify(source) -> tuple[str, int]:
            if source is None:
                raise CompileError("a dispatch binds a buffer of unknown origin; unsupported IR")
            if source[0] == "input":
                return "input", source[1]
            if source[1] in output_of_alloca:
                return "output", output_of_alloca[source[1]]
            return "transient", transient_of_alloca[source[1]]

        for i, out in enumerate(outputs):
            source, length = out.pop("_source"), out.pop("_length")
            out["size"] = length
            if source[0] == "alloca" and output_of_alloca.get(source[1]) == i:
                continue
            kind_, idx = classify(source)
            out["at"] = {"kind": kind_, "index": idx, "offset": source[2]}

        def binding(origin, length) -> dict:
            kind_, idx = classify(origin)
            return {"kind": kind_, "index": idx, "offset": origin[2], "length": length}

        dispatches: list[dict] = []
        per_target = []
        ordered: list[dict] = []
        barrier = False
        for step in steps:
            barrier = barrier or bool(ordered)  # a later submission waits for the earlier
            if step[0] == "transfer":
                t = step[1]
                for key in ("src", "dst"):
                    if key in t:
                        t[key] = binding(t[key], t["length"])
                ordered.append(t)
                continue
            _tag, cb_func, table = step
            for op in _walk(cb_func):
                if op.name == "hal.command_buffer.execution_barrier":
                    barrier = True
                elif op.name == "hal.command_buffer.dispatch":
                    view = op.opview
                    export = self.export_of(op)
                    bindings = []
                    for slot_v, off_v, len_v, readonly in zip(
                        view.binding_buffers, view.binding_offsets, view.binding_lengths,
                        export.readonly, strict=True,
                    ):
                        source, table_offset, _table_length = table[_const(slot_v)]
                        kind, idx = classify(source)
                        bindings.append({
                            "kind": kind, "index": idx,
                            "offset": source[2] + table_offset + _const(off_v),
                            "length": _const(len_v), "readonly": readonly,
                        })
                    constants = [_const(c) & 0xFFFFFFFF for c in view.constants]
                    count = [_const(view.workgroup_x), _const(view.workgroup_y),
                             _const(view.workgroup_z)]
                    ordered.append({"op": "dispatch", "index": len(dispatches)})
                    dispatches.append({
                        "kernel": export.name, "spirv_entry": export.name,
                        "workgroup_size": list(export.workgroup_size), "workgroup_count": count,
                        "bindings": bindings, "constants": constants, "barrier_before": barrier,
                    })
                    per_target.append({
                        "kernel": export.name, "workgroup_size": list(export.workgroup_size),
                        "workgroup_count": count, "constants": constants,
                        "binding_count": export.binding_count,
                        "constant_count": export.constant_count,
                    })
                    barrier = False
                elif op.name in ("hal.command_buffer.fill_buffer",
                                 "hal.command_buffer.copy_buffer"):
                    t = self._transfer(op, buffer_source, table)
                    for key in ("src", "dst"):
                        if key in t:
                            t[key] = binding(t[key], t["length"])
                    ordered.append(t)
                    barrier = True
                elif op.name.startswith("hal.command_buffer.") and op.name.split(".")[-1] in (
                    "update_buffer", "collective"
                ):
                    raise CompileError(
                        f"the IREE program records {op.name}, which amdgpu-run does not "
                        "carry yet; pass that data as an input instead"
                    )
        if not ordered and not outputs:
            raise CompileError("the MLIR program compiles to no work and no results")
        program = {
            "function": name, "inputs": inputs, "outputs": outputs,
            "transients": transients, "dispatches": dispatches,
        }
        if any(s["op"] != "dispatch" for s in ordered):
            # Copies and fills between the dispatches, in program order.
            program["steps"] = ordered
        return {"program": program, "dispatches": per_target}

    def read_host(self) -> dict:
        """The whole host program for the interpreter (compiler/iree_host.py): for programs
        the static reading above refuses (host control flow, command buffers recorded at
        run time, constants in globals)."""
        from . import iree_host

        name, func = self.entry()
        inputs = self._with_declared(name, self._asserted_inputs(func, depth=0))
        host = iree_host.host_program(self.module, self.exports, _DTYPES, name, inputs,
                                      iree_host.resources(self.text))
        kernels: dict[str, dict] = {}
        for fn in [*host["initializers"], *host["funcs"].values()]:
            for blk in fn["blocks"]:
                for op in blk["ops"]:
                    if op["op"] == "hal.executable.lookup.function":
                        k = op["a"]["kernel"]
                        kernels[k["name"]] = {
                            "kernel": k["name"], "workgroup_size": k["workgroup_size"],
                            "binding_count": k["binding_count"],
                            "constant_count": k["constant_count"],
                        }
        program = {"function": name, "inputs": inputs, "outputs": [], "transients": [],
                   "dispatches": [], "host": True}
        return {"program": program, "dispatches": list(kernels.values()), "host": host}

    def _with_declared(self, name: str, inputs: list[dict]) -> list[dict]:
        """Fill in the inputs the compiled program never asserts (it does not read them: a
        Reduce's axes, Dropout's ratio, CastLike's `like`) from the source's signature, so
        they are accepted, their shapes checked, and ignored."""
        missing = [i for i, t in enumerate(inputs) if not t]
        if not missing:
            return inputs
        declared = self.declared_inputs or []
        out = list(inputs)
        for i in missing:
            t = declared[i] if i < len(declared) else None
            if not t:
                raise CompileError(
                    f"input {i} of {name} is not a tensor (a scalar or a list); pass tensors only"
                )
            out[i] = dict(t)
        return out

    def _asserted_inputs(self, func, depth: int) -> list[dict]:
        """Shape and dtype of each argument from its hal.buffer_view.assert, following
        calls (iree-turbine's `f` passes its views on to `f$async`, which asserts them)."""
        ir = _ir()
        block = func.regions[0].blocks[0]
        inputs: list[dict] = [{} for _ in block.arguments]
        for op in _walk(func):
            if op.name == "hal.buffer_view.assert":
                arg = op.operands[0]
                if isinstance(arg, ir.BlockArgument):
                    view = op.opview
                    inputs[arg.arg_number] = {
                        "shape": _shape(view.shape), "dtype": _dtype(view.element_type)
                    }
            elif op.name == "util.call" and depth < 4:
                callee = self.funcs.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                if callee is None or not callee.regions[0].blocks:
                    continue
                inner = self._asserted_inputs(callee, depth + 1)
                for pos, value in enumerate(op.operands):
                    if isinstance(value, ir.BlockArgument) and pos < len(inner) and inner[pos]:
                        inputs[value.arg_number] = inputs[value.arg_number] or inner[pos]
        return inputs

    def _transfer(self, op, buffer_source: dict, table) -> dict:
        """A queue or command-buffer copy/fill as a program step (origins unresolved)."""
        ir = _ir()
        view = op.opview
        dst = self._origin(view.target_buffer, buffer_source, table)
        length = _const(view.length)
        if dst is None:
            raise CompileError(f"{op.name} writes a buffer of unknown origin; unsupported IR")
        dst = (dst[0], dst[1], dst[2] + _const(view.target_offset))
        if op.name.endswith("copy") or op.name.endswith("copy_buffer"):
            src = self._origin(view.source_buffer, buffer_source, table)
            if src is None:
                raise CompileError(
                    f"{op.name} reads a buffer of unknown origin (a constant or a global); "
                    "unsupported IR"
                )
            src = (src[0], src[1], src[2] + _const(view.source_offset))
            return {"op": "copy", "src": src, "dst": dst, "length": length}
        width = ir.IntegerType(view.pattern.type).width // 8
        pattern = _const(view.pattern) & ((1 << (8 * width)) - 1)
        return {"op": "fill", "dst": dst, "length": length,
                "pattern": list(pattern.to_bytes(width, "little"))}


_SUB_BYTE_BITS = {"int2": 2, "uint2": 2, "int4": 4, "uint4": 4, "float4_e2m1fn": 4}
_TORCH_TENSOR = re.compile(r"!torch\.vtensor<\[([-\d,\s]*)\],\s*(\w+)>")
_BUILTIN_TENSOR = re.compile(r"tensor<((?:\d+x)*)(\w+)>")


_PUBLIC_FUNC = re.compile(r"func\.func\s+(?:public\s+)?@\"?([\w$.-]+)\"?\s*\(([^)]*)\)")


def _refuse_dynamic_inputs(text: str, source: str, function: str) -> None:
    """The entry function with a dynamic dimension in an argument: one line naming it."""
    for m in _PUBLIC_FUNC.finditer(text):
        if m.group(1) != function:
            continue
        for i, arg in enumerate(m.group(2).split("%")[1:]):
            typ = arg.split(":", 1)[-1]
            if "?" in typ and ("tensor<" in typ):
                shown = typ.strip().rstrip(",").split("{")[0].strip()
                raise CompileError(
                    f"{source}: input {i} of @{m.group(1)} has a dynamic shape ({shown}); "
                    "amdgpu-run runs static shapes: export it with a fixed size for every "
                    "dimension (iree-turbine: no dynamic_shapes)"
                )


def declared_inputs(text: str, function: str) -> list[dict | None] | None:
    """Shape and dtype of each argument of `function` as the source declares it
    (`!torch.vtensor<[3,4],f32>` or `tensor<3x4xf32>`), None for an argument that is not
    a static-shape tensor; None when the function is not found."""
    base = function.removesuffix("$async")
    m = re.search(r"func\.func\s+(?:public\s+|private\s+)?@\"?" + re.escape(base)
                  + r"\"?\s*\(", text)
    if m is None:
        return None
    depth, start, args = 0, m.end(), []
    i = start
    while i < len(text):
        c = text[i]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            if depth == 0:
                args.append(text[start:i])
                break
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i])
            start = i + 1
        i += 1
    out: list[dict | None] = []
    for arg in args:
        typ = arg.split(":", 1)[1] if ":" in arg else arg
        t = _TORCH_TENSOR.search(typ)
        if t:
            dims = [d.strip() for d in t.group(1).split(",") if d.strip()]
            elem = t.group(2)
        else:
            t = _BUILTIN_TENSOR.search(typ)
            dims = [d for d in t.group(1).split("x") if d] if t else []
            elem = t.group(2) if t else ""
        if not t or any(not d.isdigit() for d in dims) or elem not in _DTYPES:
            out.append(None)
            continue
        out.append({"shape": [int(d) for d in dims], "dtype": _DTYPES[elem]})
    return out if any(a.strip() for a in args) else []


def _nbytes_of(t: dict) -> int:
    """Bytes of a tensor as IREE stores it (sub-byte types packed; amdgpu.dtypes agrees)."""
    import ml_dtypes
    import numpy as np

    name = t["dtype"]
    bits = _SUB_BYTE_BITS.get(name)
    if bits is None:
        dt = getattr(ml_dtypes, name, None) or np.dtype(name)
        bits = np.dtype(dt).itemsize * 8
    n = 1
    for d in t["shape"]:
        n *= int(d)
    return (n * bits + 7) // 8


_HOST_CONTROL_FLOW = ("scf.if", "scf.while", "scf.for", "cf.cond_br", "cf.switch")


# --- putting variants together ----------------------------------------------------------
def _hsaco_variant(run: _Run, target: str, read: dict, source_name: str) -> IreeVariant:
    hsacos = [data for name, data in run.binaries.items() if name.endswith(".hsaco")]
    if not read["dispatches"] and not hsacos:
        hsacos = [b""]  # copies/views only: no kernels to load
    if len(hsacos) != 1:
        raise CompileError(
            f"iree-compile ({target}) produced {len(hsacos)} code objects; expected one "
            "linked executable (do not pass --iree-hal-link-executables=false)"
        )
    info = {
        "compiler": iree_version(), "source": source_name, "code_object_version": 5,
        "kernels": sorted({d["kernel"] for d in read["dispatches"]}),
        "kernel_args": "one 8-byte global pointer per binding, then one i32 per constant",
        "dispatches": read["dispatches"],
    }
    return IreeVariant("hsaco", target, None, hsacos[0], info)


def _spirv_variant(run: _Run, abi: str, read: dict, source_name: str,
                   vulkan_target: str) -> IreeVariant:
    modules: list[Any] = []
    entry_points: dict[str, Any] = {}
    blob = bytearray()
    capabilities: list[str] = []
    layouts = {d["kernel"]: d for d in read["dispatches"]}
    for _name, data in sorted(run.binaries.items()):
        if not _name.endswith(".spv"):
            continue
        module = spirv.read_spirv(data)
        index = len(modules)
        modules.append({
            "offset": len(blob), "size": len(data), "entry_points": list(module.entry_points),
            "spirv_version": list(module.version), "capabilities": module.capabilities,
            "extensions": module.extensions, "addressing_model": module.addressing_model,
        })
        blob += data
        capabilities += [c for c in module.capabilities if c not in capabilities]
        for ep_name, ep in module.entry_points.items():
            layout = layouts.get(ep_name, {})
            constant_count = layout.get("constant_count", 0)
            binding_count = layout.get("binding_count", len(ep.bindings))
            entry = {
                "module": index,
                "workgroup_size": list(ep.workgroup_size or (1, 1, 1)),
                "bindings": [list(b) for b in ep.bindings],
                "readonly": ep.readonly,
                "binding_count": binding_count,
                "push_constant_words": ep.push_constant_words,
                "constant_count": constant_count,
                "constant_offset_words": _BDA_ROOT_WORDS if abi == "bda" else 0,
                "bda": None,
            }
            if abi == "bda":
                entry["bda"] = {
                    "root_words": _BDA_ROOT_WORDS, "table_address_words": [0, 1],
                    "table_entry_bytes": 8, "binding_count": binding_count,
                    # dword index of each root field (IREE bda_dispatch_root_v1)
                    "root_fields": {"binding_table_address": 0, "constants_address": 2,
                                    "binding_base": 4, "constant_base": 5, "flags": 6,
                                    "reserved0": 7},
                }
            entry_points[ep_name] = entry
    if not modules and read["dispatches"]:
        raise CompileError(f"iree-compile (vulkan {abi}) produced no SPIR-V modules")
    missing = [d["kernel"] for d in read["dispatches"] if d["kernel"] not in entry_points]
    if missing:
        raise CompileError(f"SPIR-V modules lack entry points {missing}; unsupported IREE output")
    info = {
        "compiler": iree_version(), "source": source_name, "abi": abi,
        "vulkan_target": vulkan_target, "modules": modules, "entry_points": entry_points,
        "capabilities": capabilities, "dispatches": read["dispatches"],
    }
    return IreeVariant("spirv", "vulkan", abi, bytes(blob), info)


class TargetDtypeError(CompileError):
    """A program in a type that this target's code generation cannot compile."""


def _bf16_refusal(exc: CompileError, name: str, source_text: str) -> CompileError:
    """IREE's SPIR-V code generation compiles bf16 element-wise code but not bf16 matmuls
    and convolutions (IREE 3.13: "failed to legalize operation 'vector.bitcast' ...
    vector<4xbf16>"): such a failure is one line naming bf16 and where it runs instead."""
    first = str(exc)
    if not re.search(r"\bbf16\b", source_text) or "bf16" not in first:
        return exc
    return TargetDtypeError(
        f"{name} computes in bf16, which IREE cannot compile for Vulkan here (SPIR-V has no "
        "bf16 arithmetic and IREE does not emulate it for this program); run it on an amdgpu "
        "device (gfx942/gfx950 have bf16 MFMA, gfx1100/gfx1201 bf16 WMMA; e.g. "
        "--device amdgpu:virtual, a gfx1100) or convert it to f16/f32"
    )


def compile_mlir(
    source: str | os.PathLike,
    gfx_targets: Sequence[str] = (),
    *,
    vulkan_abis: Sequence[str] = (),
    vulkan_target: str = DEFAULT_VULKAN_TARGET,
    code_object_version: int = 5,
    extra_flags: Sequence[str] = (),
) -> IreeResult:
    """Compile an MLIR file for AMD target ids and Vulkan ABIs; returns variants + program.

    Raises CompileError with IREE's first diagnostic (its full stderr on `.diagnostics`).
    """
    path = Path(source)
    if not path.is_file():
        raise CompileError(f"MLIR source {str(path)!r} does not exist; check the path")
    if code_object_version != 5:
        raise CompileError(
            f"IREE emits code object v5 only; code_object_version={code_object_version} is "
            "available for OpenCL C sources (clang) only"
        )
    if not gfx_targets and not vulkan_abis:
        raise CompileError("no targets to compile for; name a gfx target or 'vulkan'")
    result = IreeResult()
    first_structure = None
    source_text = path.read_text(errors="replace")
    jobs: list[tuple[str, list[str], str | None]] = [
        (t, _amd_device_flags(t), None) for t in gfx_targets]
    jobs += [("vulkan", vulkan_device_flags(a, vulkan_target), a) for a in vulkan_abis]
    vulkan_errors: list[CompileError] = []
    needs_f64 = re.search(r"\bf64\b", source_text) is not None
    for target, flags, abi in jobs:
        label = target if abi is None else f"vulkan {abi}"
        if abi is not None and needs_f64 and _lacks_f64(flags):
            raise CompileError(
                f"{path.name} computes in f64, which the Vulkan target {vulkan_target!r} cannot "
                "(no shaderFloat64); run it on a device with Float64 (amdgpu-run uses the "
                "device's own features) or an amdgpu device, or cast to f32 in the source"
            )
        try:
            run, workaround = _run_iree_around_bugs(path, flags, label, extra_flags)
        except CompileError as exc:
            if abi is None:
                raise
            # Each Vulkan ABI is built on its own: a failing one (bda needs Int64) does not
            # throw away the other; the error stands only when none builds.
            vulkan_errors.append(exc)
            if len(vulkan_errors) == len(vulkan_abis) and not gfx_targets:
                raise _bf16_refusal(vulkan_errors[0], path.name, source_text) from None
            continue
        reader = _ProgramReader(run.hal_text, _read_exports(run.targets_text))
        entry = reader.entry()[0]
        _refuse_dynamic_inputs(source_text, path.name, entry.removesuffix("$async"))
        reader.declared_inputs = declared_inputs(source_text, entry)
        try:
            read = reader.read()
        except CompileError:
            # More than one fixed sequence of command buffers: keep the whole host program.
            read = reader.read_host()
        program = read["program"]
        structure = [
            [(b["kind"], b["index"], b["offset"], b["length"]) for b in d["bindings"]]
            for d in program["dispatches"]
        ]
        if result.program is None:
            result.program, first_structure = program, structure
        if structure != first_structure and not program.get("host"):
            raise CompileError(
                f"IREE split the program differently for {label} than for the first target; "
                "compile those targets into separate bundles"
            )
        if abi is None:
            variant = _hsaco_variant(run, target, read, path.name)
        else:
            variant = _spirv_variant(run, abi, read, path.name, vulkan_target)
        if "host" in read:
            variant.info["host"] = read["host"]
        if workaround:  # what IREE failed without, for whoever reads the bundle
            variant.info["iree_workaround"] = workaround
        variant.program = program
        result.variants.append(variant)
    return result
