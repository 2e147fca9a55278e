"""The process-wide VkInstance, physical-device probing and `list_devices()`.

Backend availability follows IREE's rewritten Vulkan driver: Vulkan >= 1.3 with
timelineSemaphore, scalarBlockLayout and synchronization2. The optimized paths are separate
checks: bufferDeviceAddress (the `bda` ABI) and VK_KHR_push_descriptor.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from ground.errors import VulkanError
from hsa.provider import Capability

from .report import DeviceReport

try:  # the loader may be absent: list_devices() then reports no device
    import vulkan as vk
except (ImportError, OSError) as error:  # pragma: no cover - depends on the machine
    vk = None
    _IMPORT_ERROR = str(error)
else:
    _IMPORT_ERROR = ""

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
PUSH_DESCRIPTOR_EXT = "VK_KHR_push_descriptor"
REQUIRED_FEATURES = ("timelineSemaphore", "scalarBlockLayout", "synchronization2")

_RESULT_NAMES: dict[int, str] = {}


def result_name(result: int) -> str:
    """VK_ERROR_DEVICE_LOST for -4, and so on."""
    if not _RESULT_NAMES and vk is not None:
        for name in dir(vk):
            if name.startswith("VK_ERROR_") or name in (
                "VK_TIMEOUT",
                "VK_NOT_READY",
                "VK_INCOMPLETE",
                "VK_SUCCESS",
            ):
                value = getattr(vk, name)
                if isinstance(value, int):
                    _RESULT_NAMES.setdefault(value, name)
    return _RESULT_NAMES.get(result, f"VkResult({result})")


_NEXT_STEP = {
    "VK_ERROR_DEVICE_LOST": "the device was lost; close it and open a new one",
    "VK_ERROR_OUT_OF_DEVICE_MEMORY": "out of device memory; free buffers or use smaller ones",
    "VK_ERROR_OUT_OF_HOST_MEMORY": "out of host memory; free buffers or use smaller ones",
    "VK_ERROR_INVALID_SHADER_NV": "the driver rejected the SPIR-V; recompile the kernel",
    "VK_ERROR_INITIALIZATION_FAILED": "check the Vulkan driver installation (ICD)",
}


def check(result: int, call: str, detail: str = "") -> None:
    """Raise VulkanError with one clear line when a Vulkan call did not return VK_SUCCESS."""
    if result == 0:
        return
    name = result_name(result)
    message = f"{call} failed: {name}"
    if detail:
        message += f" ({detail})"
    validation = take_validation_messages()
    if validation:
        message += f"; validation: {validation[-1]}"
    message += f"; {_NEXT_STEP.get(name, 'see the Vulkan driver log')}"
    raise VulkanError(message)


def reraise(error: Exception, call: str, detail: str = "") -> VulkanError:
    """Turn an exception of the `vulkan` package into a VulkanError."""
    code = getattr(error, "code", None)
    if code is None and vk is not None:
        for value, cls in vk.exception_codes.items():
            if type(error) is cls:
                code = value
    try:
        check(code if code is not None else -1, call, detail)
    except VulkanError as wrapped:
        return wrapped
    return VulkanError(f"{call} failed: {error}")  # pragma: no cover


# --- validation layer messages -------------------------------------------------------------
_validation_messages: list[str] = []


def take_validation_messages() -> list[str]:
    messages = list(_validation_messages)
    _validation_messages.clear()
    return messages


def _debug_callback(severity, types, data, user):  # pragma: no cover - needs the layer
    text = vk.ffi.string(data.pMessage).decode("utf-8", "replace")
    if severity >= vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT:
        _validation_messages.append(" ".join(text.split()))
        del _validation_messages[:-16]
    return 0


@dataclass
class PhysicalDevice:
    """What one physical device supports, as far as this driver cares."""

    index: int
    handle: object
    name: str
    api_version: tuple[int, int, int]
    driver: str
    features: dict[str, bool]
    extensions: set[str]
    max_push_descriptors: int
    max_push_constants: int
    min_storage_offset_alignment: int
    update_after_bind: bool
    compute_family: int
    compute_queue_count: int
    missing: list[str] = field(default_factory=list)
    max_group_count: tuple[int, int, int] = (65535, 65535, 65535)  # maxComputeWorkGroupCount
    # VkPhysicalDeviceSubgroupProperties: the default subgroup size and the operations
    # (SUBGROUP_OPS names) supported in compute shaders; 0 / () where not in compute.
    subgroup_size: int = 0
    subgroup_ops: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def api(self) -> str:
        return ".".join(map(str, self.api_version))

    def path_capabilities(self) -> dict[str, Capability]:
        bda = (
            Capability(True)
            if self.features.get("bufferDeviceAddress")
            else Capability(False, "bufferDeviceAddress feature not supported")
        )
        if PUSH_DESCRIPTOR_EXT not in self.extensions:
            push = Capability(False, f"{PUSH_DESCRIPTOR_EXT} not supported")
        elif self.max_push_descriptors <= 0:
            push = Capability(False, "maxPushDescriptors is 0")
        else:
            push = Capability(True)
        return {"bda": bda, "push_descriptors": push}

    @property
    def subgroup(self) -> str:
        """'8: basic, vote, arithmetic, ...' (what `hwlab devices` prints), or 'none'."""
        if not self.subgroup_size:
            return "none"
        return f"{self.subgroup_size}: {', '.join(self.subgroup_ops) or 'none'}"

    def report(self) -> DeviceReport:
        reason = "" if self.available else "missing " + ", ".join(self.missing)
        return DeviceReport(
            spec=f"vulkan:{self.index}",
            backend="vulkan",
            name=self.name,
            target="vulkan",
            available=self.available,
            reason=reason,
            paths=self.path_capabilities(),
            versions={"api": self.api, "driver": self.driver, "subgroup": self.subgroup},
        )

    def describe(self) -> str:
        state = "ok" if self.available else "missing " + ", ".join(self.missing)
        return f"vulkan:{self.index} {self.name} (Vulkan {self.api}, {state})"


class VulkanInstance:
    """One VkInstance for the process, created on first use."""

    _lock = threading.Lock()
    _shared: VulkanInstance | None = None

    def __init__(self) -> None:
        if vk is None:
            raise VulkanError(
                f"the Vulkan loader cannot be used ({_IMPORT_ERROR}); install libvulkan1 "
                "and a Vulkan driver (e.g. mesa-vulkan-drivers)"
            )
        try:
            layers = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
            extensions = {p.extensionName for p in vk.vkEnumerateInstanceExtensionProperties(None)}
        except Exception as error:  # noqa: BLE001 - the loader raises several kinds
            raise VulkanError(
                f"the Vulkan loader found no driver ({error}); install a Vulkan ICD "
                "(mesa-vulkan-drivers gives lavapipe) or use amdgpu:virtual"
            ) from error
        want_validation = os.environ.get("AMDGPU_VULKAN_VALIDATION", "1") != "0"
        self.validation = want_validation and VALIDATION_LAYER in layers
        use_debug = self.validation and "VK_EXT_debug_utils" in extensions
        app = vk.VkApplicationInfo(
            pApplicationName="amdgpu-direct",
            applicationVersion=1,
            pEngineName="amdgpu-direct",
            engineVersion=1,
            apiVersion=vk.VK_MAKE_VERSION(1, 3, 0),
        )
        info = vk.VkInstanceCreateInfo(
            pApplicationInfo=app,
            enabledLayerCount=1 if self.validation else 0,
            ppEnabledLayerNames=[VALIDATION_LAYER] if self.validation else None,
            enabledExtensionCount=1 if use_debug else 0,
            ppEnabledExtensionNames=["VK_EXT_debug_utils"] if use_debug else None,
        )
        try:
            self.handle = vk.vkCreateInstance(info, None)
        except vk.VkError as error:
            raise reraise(error, "vkCreateInstance", "Vulkan 1.3 instance") from error
        self._messenger = None
        if use_debug:  # pragma: no cover - needs the validation layer
            try:
                create = vk.vkGetInstanceProcAddr(self.handle, "vkCreateDebugUtilsMessengerEXT")
                self._messenger = create(
                    self.handle,
                    vk.VkDebugUtilsMessengerCreateInfoEXT(
                        messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                        | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                        messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                        | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT,
                        pfnUserCallback=_debug_callback,
                    ),
                    None,
                )
            except Exception:  # noqa: BLE001 - messages are a help, not a requirement
                self._messenger = None
        self.physical_devices = [
            _probe(i, pd) for i, pd in enumerate(vk.vkEnumeratePhysicalDevices(self.handle))
        ]

    @classmethod
    def shared(cls) -> VulkanInstance:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared


# VkSubgroupFeatureFlagBits, in bit order.
SUBGROUP_OPS = ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative",
                "clustered", "quad")


def _subgroup(handle, api_version) -> tuple[int, tuple[str, ...]]:
    """(subgroupSize, supported operations) for compute shaders; (0, ()) where the device
    has no subgroup operations in the compute stage (or the query is not there)."""
    if api_version < (1, 1, 0):
        return 0, ()
    try:
        props = vk.VkPhysicalDeviceSubgroupProperties()
        vk.vkGetPhysicalDeviceProperties2(handle, vk.VkPhysicalDeviceProperties2(pNext=props))
    except Exception:  # noqa: BLE001 - an old loader or binding: no subgroup operations
        return 0, ()
    if not props.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT:
        return 0, ()
    ops = tuple(n for i, n in enumerate(SUBGROUP_OPS) if props.supportedOperations & (1 << i))
    return int(props.subgroupSize), ops


def _probe(index: int, handle) -> PhysicalDevice:
    props = vk.vkGetPhysicalDeviceProperties(handle)
    version = props.apiVersion
    api_version = (
        vk.VK_VERSION_MAJOR(version),
        vk.VK_VERSION_MINOR(version),
        vk.VK_VERSION_PATCH(version),
    )
    extensions = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(handle, None)}
    features: dict[str, bool] = {}
    driver = str(props.driverVersion)
    max_push = 0
    update_after_bind = False
    if api_version >= (1, 2, 0):
        f13 = vk.VkPhysicalDeviceVulkan13Features()
        f12 = vk.VkPhysicalDeviceVulkan12Features(pNext=f13 if api_version >= (1, 3, 0) else None)
        vk.vkGetPhysicalDeviceFeatures2(handle, vk.VkPhysicalDeviceFeatures2(pNext=f12))
        features["timelineSemaphore"] = bool(f12.timelineSemaphore)
        features["scalarBlockLayout"] = bool(f12.scalarBlockLayout)
        features["bufferDeviceAddress"] = bool(f12.bufferDeviceAddress)
        features["synchronization2"] = (
            bool(f13.synchronization2) if api_version >= (1, 3, 0) else False
        )
        update_after_bind = bool(f12.descriptorBindingStorageBufferUpdateAfterBind)
        push_props = vk.VkPhysicalDevicePushDescriptorPropertiesKHR()
        driver_props = vk.VkPhysicalDeviceDriverProperties(
            pNext=push_props if PUSH_DESCRIPTOR_EXT in extensions else None
        )
        vk.vkGetPhysicalDeviceProperties2(
            handle, vk.VkPhysicalDeviceProperties2(pNext=driver_props)
        )
        info = vk.ffi.string(driver_props.driverInfo).decode("utf-8", "replace")
        name = vk.ffi.string(driver_props.driverName).decode("utf-8", "replace")
        driver = info or name or driver
        if PUSH_DESCRIPTOR_EXT in extensions:
            max_push = int(push_props.maxPushDescriptors)
    subgroup_size, subgroup_ops = _subgroup(handle, api_version)
    missing = []
    if api_version < (1, 3, 0):
        missing.append(f"Vulkan 1.3 (has {'.'.join(map(str, api_version))})")
    missing += [f for f in REQUIRED_FEATURES if not features.get(f)]
    family, count = -1, 0
    for i, q in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(handle)):
        if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT:
            # Prefer a compute-only family (async compute), else the first with compute.
            better = family < 0 or not (q.queueFlags & vk.VK_QUEUE_GRAPHICS_BIT)
            if better:
                family, count = i, q.queueCount
    if family < 0:
        missing.append("a compute queue")
    limits_count = props.limits.maxComputeWorkGroupCount
    return PhysicalDevice(
        index=index,
        handle=handle,
        name=props.deviceName,
        api_version=api_version,
        driver=driver,
        features=features,
        extensions=extensions,
        max_push_descriptors=max_push,
        max_push_constants=int(props.limits.maxPushConstantsSize),
        min_storage_offset_alignment=int(props.limits.minStorageBufferOffsetAlignment),
        update_after_bind=update_after_bind,
        compute_family=family,
        compute_queue_count=count,
        missing=missing,
        max_group_count=(int(limits_count[0]), int(limits_count[1]), int(limits_count[2])),
        subgroup_size=subgroup_size,
        subgroup_ops=subgroup_ops,
    )


def physical_devices() -> list[PhysicalDevice]:
    return VulkanInstance.shared().physical_devices


def list_devices() -> list[DeviceReport]:
    """One DeviceReport per Vulkan physical device; [] when Vulkan cannot be used at all."""
    try:
        return [pd.report() for pd in physical_devices()]
    except VulkanError:
        return []
