"""Executables and kernels: SPIR-V variants of a bundle turned into compute pipelines.

One kernel per compute entry point. Its layout comes from reading the SPIR-V (descriptor
bindings, push-constant block), completed by the variant's `info` where the compiler gives
it. IREE's two ABIs:
- `descriptors`: binding i is (set 0, binding i) in the shader; constants are push
  constants at offset 0. Dispatched with push descriptors (one set within
  maxPushDescriptors) or with descriptor sets.
- `bda`: push constants hold an 8-dword root (dwords 0-1: the device address of the binding
  table, an array of u64 addresses, one per binding), then the constants at offset 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amdgpu.geometry import dim3, size_key, workgroups
from compiler.spirv import (
    EntryInterface,
    ShaderInterface,
    missing_features,
    missing_subgroup_ops,
    reflect,
)
from ground.errors import KernelArgumentError, VulkanError

from .instance import check, vk

if TYPE_CHECKING:  # pragma: no cover
    from .context import VulkanContext

# Values the `vulkan` package leaves as None.
LAYOUT_UPDATE_AFTER_BIND_POOL = 0x2  # VK_DESCRIPTOR_SET_LAYOUT_CREATE_UPDATE_AFTER_BIND_POOL_BIT
POOL_UPDATE_AFTER_BIND = 0x2  # VK_DESCRIPTOR_POOL_CREATE_UPDATE_AFTER_BIND_BIT
BDA_ROOT_BYTES = 32  # IREE kBdaDispatchRootDwordCount (8) * 4
PATHS = ("bda", "push_descriptors", "descriptor_sets")


@dataclass(frozen=True)
class KernelParam:
    """One kernel argument: a buffer (binding) or a 32-bit constant."""

    name: str
    kind: str  # "buffer" | "u32"
    index: int


def _entry_info(info: dict, entry: str) -> dict:
    """Per-entry facts from a variant's info dict, whichever of the likely shapes it has."""
    if not info:
        return {}
    keys = ("entry_points", "kernels", "exports", "entries")
    for key in keys:
        table = info.get(key)
        if isinstance(table, dict) and isinstance(table.get(entry), dict):
            return table[entry]
        if isinstance(table, list):
            for item in table:
                if isinstance(item, dict) and entry in (
                    item.get("name"),
                    item.get("entry_point"),
                    item.get("spirv_entry"),
                ):
                    return item
    return {} if any(k in info for k in keys) else info


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return len(value)
    return None


def _readonly(entry: EntryInterface, info: dict, descriptor_bindings: list,
              count: int) -> tuple[bool, ...]:
    """Per kernel binding, whether the kernel only reads it: the SPIR-V says NonWritable,
    or IREE's layout flags it ReadOnly in every dispatch of this kernel the variant's info
    lists. Unknown: read and written (barriers then order it both ways)."""
    out = [False] * count
    nonwritable = {(b.set, b.binding): b.readonly for b in entry.bindings}
    for i, sb in enumerate(descriptor_bindings[:count]):
        out[i] = nonwritable.get(sb, False)
    listed: list[list] = [
        d["bindings"] for d in (info or {}).get("dispatches", ()) or ()
        if isinstance(d, dict) and entry.name in (d.get("kernel"), d.get("spirv_entry"))
        and isinstance(d.get("bindings"), list)
    ]
    if listed and all(len(b) == count for b in listed):
        for i in range(count):
            if all(isinstance(b[i], dict) and b[i].get("readonly") is True for b in listed):
                out[i] = True
    return tuple(out)


class Kernel:
    """A compute pipeline for one entry point, on one dispatch path."""

    def __init__(
        self,
        executable: Executable,
        entry: EntryInterface,
        abi: str,
        path: str,
        module,
        info: dict,
        binding_hint: int | None,
    ):
        device = executable.device
        self.executable = executable
        self.name = entry.name
        self.abi = abi
        self.path = path
        self.uid = id(self)
        extra = _entry_info(info, entry.name)
        wg = extra.get("workgroup_size")
        self.workgroup_size: tuple[int, int, int] = tuple(entry.local_size)  # type: ignore
        if wg and tuple(int(v) for v in list(wg) + [1] * (3 - len(wg))) != self.workgroup_size:
            raise VulkanError(
                f"kernel {entry.name}: info says workgroup size {list(wg)} but the SPIR-V "
                f"says {list(entry.local_size)}; the bundle is inconsistent, recompile it"
            )
        if abi == "bda":
            self.constants_offset = BDA_ROOT_BYTES
            n_constants = max(0, entry.push_constant_size - BDA_ROOT_BYTES) // 4
            n_bindings = _count(extra.get("binding_count"))
            if n_bindings is None:
                n_bindings = binding_hint
            if n_bindings is None:  # the shader's own table type, when it is unambiguous
                n_bindings = executable.bda_table_entries
            self.descriptor_bindings: list[tuple[int, int]] = []
        else:
            self.constants_offset = 0
            n_constants = entry.push_constant_size // 4
            self.descriptor_bindings = [(b.set, b.binding) for b in entry.bindings]
            if all(s == 0 for s, _ in self.descriptor_bindings):
                # IREE: kernel binding i is (set 0, binding i), also where the shader leaves
                # one unused (then the layout still has it and the dispatch still passes it).
                count = max([b + 1 for _, b in self.descriptor_bindings], default=0)
                count = max(count, _count(extra.get("binding_count")) or 0)
                self.descriptor_bindings = [(0, i) for i in range(count)]
            n_bindings = len(self.descriptor_bindings)
        hinted_constants = _count(extra.get("constant_count", extra.get("constants")))
        if hinted_constants is not None:
            n_constants = max(n_constants, hinted_constants)
        self.binding_count = n_bindings
        self.readonly = _readonly(entry, info, self.descriptor_bindings, n_bindings)
        self.constant_count = n_constants
        self.push_size = self.constants_offset + 4 * n_constants
        if self.push_size > device.physical.max_push_constants:
            raise VulkanError(
                f"kernel {entry.name} needs {self.push_size} bytes of push constants, the "
                f"device allows {device.physical.max_push_constants}; use fewer constants"
            )
        self.args = tuple(
            [KernelParam(f"binding{i}", "buffer", i) for i in range(n_bindings)]
            + [KernelParam(f"constant{i}", "u32", i) for i in range(n_constants)]
        )
        self._create_pipeline(device, module)

    # --- Vulkan objects ------------------------------------------------------------------
    def _create_pipeline(self, device: VulkanContext, module) -> None:
        ffi, lib = vk.ffi, vk.lib
        self.set_layouts: list = []
        # Descriptor sets whose contents may change after binding: replay rewrites them
        # instead of re-recording (needs descriptorBindingStorageBufferUpdateAfterBind).
        self.update_after_bind = self.path == "descriptor_sets" and device.update_after_bind
        self.set_binding_numbers: list[list[int]] = []  # per set: binding numbers in order
        if self.abi == "descriptors" and self.descriptor_bindings:
            sets = sorted({s for s, _ in self.descriptor_bindings})
            push = self.path == "push_descriptors"
            for s in range(max(sets) + 1):
                numbers = sorted(b for ss, b in self.descriptor_bindings if ss == s)
                bindings = [
                    vk.VkDescriptorSetLayoutBinding(
                        binding=b,
                        descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                        descriptorCount=1,
                        stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
                    )
                    for b in numbers
                ]
                flags = vk.VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR if push else 0
                binding_flags = None
                if self.update_after_bind:
                    flags |= LAYOUT_UPDATE_AFTER_BIND_POOL
                    binding_flags = (
                        vk.VkDescriptorSetLayoutBindingFlagsCreateInfo(
                            bindingCount=len(bindings),
                            pBindingFlags=[vk.VK_DESCRIPTOR_BINDING_UPDATE_AFTER_BIND_BIT]
                            * len(bindings),
                        )
                        if bindings
                        else None
                    )
                out = ffi.new("VkDescriptorSetLayout*")
                layout_info = vk.VkDescriptorSetLayoutCreateInfo(
                    pNext=binding_flags,
                    flags=flags,
                    bindingCount=len(bindings),
                    pBindings=bindings or None,
                )
                check(
                    lib.vkCreateDescriptorSetLayout(
                        device.handle,
                        ffi.addressof(layout_info),
                        ffi.NULL,
                        out,
                    ),
                    "vkCreateDescriptorSetLayout",
                    f"kernel {self.name}",
                )
                self.set_layouts.append(out[0])
                self.set_binding_numbers.append(numbers)
        ranges = (
            [
                vk.VkPushConstantRange(
                    stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=self.push_size
                )
            ]
            if self.push_size
            else None
        )
        out = ffi.new("VkPipelineLayout*")
        pipeline_layout_info = vk.VkPipelineLayoutCreateInfo(
            setLayoutCount=len(self.set_layouts),
            pSetLayouts=self.set_layouts or None,
            pushConstantRangeCount=1 if ranges else 0,
            pPushConstantRanges=ranges,
        )
        check(
            lib.vkCreatePipelineLayout(
                device.handle,
                ffi.addressof(pipeline_layout_info),
                ffi.NULL,
                out,
            ),
            "vkCreatePipelineLayout",
            f"kernel {self.name}",
        )
        self.pipeline_layout = out[0]
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName=self.name
        )
        info = vk.VkComputePipelineCreateInfo(
            stage=stage, layout=self.pipeline_layout, basePipelineIndex=-1
        )
        out = ffi.new("VkPipeline*")
        check(
            lib.vkCreateComputePipelines(
                device.handle, ffi.NULL, 1, ffi.addressof(info), ffi.NULL, out
            ),
            "vkCreateComputePipelines",
            f"kernel {self.name} ({self.abi}); the driver rejected the SPIR-V",
        )
        self.pipeline = out[0]

    def destroy(self) -> None:
        dev = self.executable.device.handle
        vk.lib.vkDestroyPipeline(dev, self.pipeline, vk.ffi.NULL)
        vk.lib.vkDestroyPipelineLayout(dev, self.pipeline_layout, vk.ffi.NULL)
        for layout in self.set_layouts:
            vk.lib.vkDestroyDescriptorSetLayout(dev, layout, vk.ffi.NULL)

    def groups(self, grid, block=None) -> tuple[int, int, int]:
        """Workgroup counts for a grid in work-items (ceil-div by the workgroup size)."""
        cache = self.__dict__.setdefault("_groups", {})
        gkey = size_key(grid)  # types told apart: True or 1.0 never hits the entry of 1
        key = (gkey, size_key(block)) if gkey is not None else None
        if key is not None and (key[1] is not None or block is None):
            groups = cache.get(key)
            if groups is not None:
                return groups
        else:
            key = None
        g = dim3(grid, "grid", self.name)
        if block is not None:
            b = dim3(block, "block", self.name)
            if b != tuple(self.workgroup_size):
                raise KernelArgumentError(
                    f"kernel {self.name} was compiled for workgroup size "
                    f"{list(self.workgroup_size)}, got block={list(b)}; pass block=None"
                )
        groups = workgroups(g, tuple(self.workgroup_size))  # type: ignore[arg-type]
        if key is not None and len(cache) < 1024:
            cache[key] = groups
        return groups

    def __repr__(self) -> str:
        return (
            f"Kernel({self.name!r}, path={self.path}, bindings={self.binding_count}, "
            f"constants={self.constant_count}, workgroup_size={self.workgroup_size})"
        )


def _variants(bundle) -> list[tuple[str, bytes, dict]]:
    """(abi, SPIR-V bytes, info) for each SPIR-V variant of a bundle-like object."""
    if isinstance(bundle, (bytes, bytearray, memoryview)):
        return [("", bytes(bundle), {})]
    if isinstance(bundle, dict):
        return [(abi, bytes(data), {}) for abi, data in bundle.items()]
    variants = getattr(bundle, "variants", None)
    if variants is None and getattr(bundle, "kind", None) is not None:
        variants = [bundle]
    out = []
    for v in variants or []:
        if getattr(v, "kind", None) == "spirv":
            out.append((v.abi or "", bytes(v.data), dict(v.info or {})))
    return out


def _modules(data: bytes, info: dict) -> list[bytes]:
    """A variant's SPIR-V modules: `info["modules"]` slices a concatenation (compiler.iree)."""
    table = info.get("modules")
    if isinstance(table, list) and table and all("offset" in m for m in table):
        return [data[int(m["offset"]) : int(m["offset"]) + int(m["size"])] for m in table]
    return [data]


@dataclass
class _ParsedVariant:
    abi: str
    info: dict
    modules: list[bytes]
    interfaces: list[ShaderInterface]

    def entries(self) -> dict[str, tuple[int, EntryInterface]]:
        return {
            name: (i, e) for i, itf in enumerate(self.interfaces) for name, e in itf.entries.items()
        }


class Executable:
    """The kernels of a bundle's SPIR-V variant, as pipelines for this device."""

    def __init__(self, device: VulkanContext, bundle):
        self.device = device
        self.kernels: dict[str, Kernel] = {}
        self.modules: list = []
        variants = _variants(bundle)
        if not variants:
            raise VulkanError(
                "the bundle has no SPIR-V variant; compile the .mlir source with target "
                "'vulkan' (OpenCL C gives HSACO only)"
            )
        program = getattr(bundle, "program", None)
        program_dispatches = program.get("dispatches") if isinstance(program, dict) else None
        by_abi: dict[str, _ParsedVariant] = {}
        for abi, data, info in variants:
            modules = _modules(data, info)
            interfaces = [reflect(m) for m in modules]
            if not abi:
                bda = all(
                    itf.uses_physical_storage_buffer
                    and not any(e.bindings for e in itf.entries.values())
                    for itf in interfaces
                )
                abi = "bda" if bda else "descriptors"
            by_abi[abi] = _ParsedVariant(abi, info, modules, interfaces)
        path = device.path
        abi = "bda" if path == "bda" else "descriptors"
        if abi not in by_abi:
            other = "descriptors" if abi == "bda" else "bda"
            if other == "bda" and not device.bda_enabled:
                raise VulkanError(
                    "the bundle has only `bda` SPIR-V but this device has no "
                    "bufferDeviceAddress; compile with abi=('descriptors',)"
                )
            abi = other
            path = "bda" if abi == "bda" else device.descriptor_path
        chosen = by_abi[abi]
        # Refuse what the driver would reject (or crash on) with the features it lacks.
        for interface in chosen.interfaces:
            lacking = missing_features(interface, device.enabled_features)
            if lacking:
                raise VulkanError(
                    f"the SPIR-V ({abi}) needs device features {', '.join(lacking)} that "
                    f"{device.spec} ({device.name}) does not offer; compile for a smaller "
                    "Vulkan target (iree-compile --iree-vulkan-target=vp_android_baseline_2022)"
                )
            lacking = missing_subgroup_ops(interface, getattr(device, "subgroup_ops", ()))
            if lacking:
                raise VulkanError(
                    f"the SPIR-V ({abi}) uses subgroup operations {', '.join(lacking)} that "
                    f"{device.spec} ({device.name}) does not support in compute shaders; "
                    "compile for this device's own target (amdgpu-run does) or one without "
                    "subgroup operations"
                )
        self.abi, self.path = abi, path
        handles = [self._create_module(m) for m in chosen.modules]
        # Binding counts for `bda` kernels: prefer info, else the descriptors twin.
        twin = by_abi["descriptors"].entries() if abi == "bda" and "descriptors" in by_abi else {}
        for name, (index, entry) in chosen.entries().items():
            hint = None
            if name in twin:  # the descriptors twin: highest (set 0) binding + 1
                hint = max([b.binding + 1 for b in twin[name][1].bindings], default=0)
            kernel_path = path
            if path == "push_descriptors" and not device.fits_push_descriptors(entry):
                kernel_path = "descriptor_sets"
            self.bda_table_entries = chosen.interfaces[index].bda_table_entries
            self.kernels[name] = Kernel(
                self, entry, abi, kernel_path, handles[index], chosen.info, hint
            )
            if program_dispatches:  # the host program's ReadOnly flags, where it has them
                self.kernels[name].readonly = _readonly(
                    entry, {"dispatches": program_dispatches},
                    self.kernels[name].descriptor_bindings, self.kernels[name].binding_count)

    def _create_module(self, code: bytes):
        ffi = vk.ffi
        info = vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code)
        out = ffi.new("VkShaderModule*")
        check(
            vk.lib.vkCreateShaderModule(self.device.handle, ffi.addressof(info), ffi.NULL, out),
            "vkCreateShaderModule",
            f"{len(code)} bytes of SPIR-V; the driver rejected it",
        )
        self.modules.append(out[0])
        return out[0]

    def kernel(self, name: str) -> Kernel:
        """A kernel by entry-point name, or by a part of it that names exactly one."""
        if name in self.kernels:
            return self.kernels[name]
        matches = [k for k in self.kernels if name in k]
        if len(matches) == 1:
            return self.kernels[matches[0]]
        raise KernelArgumentError(
            f"no single kernel named {name!r} (matches {matches}); have {sorted(self.kernels)}"
        )

    def close(self) -> None:
        for kernel in self.kernels.values():
            kernel.destroy()
        for module in self.modules:
            vk.lib.vkDestroyShaderModule(self.device.handle, module, vk.ffi.NULL)
        self.kernels.clear()
        self.modules.clear()
