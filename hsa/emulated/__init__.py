"""amdgpu:emulated: the real ROCr (Debian's libhsa-runtime64 5.2.3, unmodified) over an
emulated AMD kernel driver whose GPU is the virtual AMD system.

`EmulatedProvider()` is a `RocrProvider` whose process first loaded our libhsakmt.so.1
(hsa/emulated/thunk, built by scripts/setup.sh) and started the device side
(`hsa.emulated.driver`). Everything above the thunk is AMD's code: hsa_init, agents, pools,
queues, signals, the code-object loader, blit kernels, error handling.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import Any

from ground.errors import HsaError, HsaUnavailable
from ground.status import HSA_STATUS_ERROR_INVALID_ISA, HSA_STATUS_ERROR_NOT_INITIALIZED
from hsa.rocr.library import candidate_paths, first_existing
from hsa.rocr.provider import RocrProvider
from hsa.virtual import executor as executor_registry

from . import build, driver
from .driver import DEFAULT_ISA, SUPPORTED_ISAS, start

FAMILY = "gfx9"
_live_lock = threading.Lock()
_live = 0  # EmulatedProviders not shut down: while any is, this process's ROCr is emulated
_live_gpus = 0  # the GPU node count those providers' ROCr was started with


def runs_kernels() -> bool:
    """Whether the emulated GPU can run machine code: hsa/virtual has a gfx9 executor."""
    return executor_registry.has_executor(FAMILY)


class EmulatedProvider(RocrProvider):
    """ROCr over the emulated driver: `EmulatedProvider(isa="gfx90a", gpus=1)`; `gpus` GPU
    nodes (1..16) with XGMI links between them (`amdgpu:emulated:4xgfx90a`)."""

    driver = "emulated"
    # hsa/virtual's packet processor runs ROCr's queues and writes the completion records
    # (stamped with ROCr's queue id, see driver.EmulatedQueue), as on amdgpu:virtual
    records_completions = True

    def __init__(self, isa: str = DEFAULT_ISA, *, gpus: int = 1, require_gpu: bool = True):
        global _live, _live_gpus
        with _live_lock:
            # ROCr reads the topology once per process-wide hsa_init: while a provider holds
            # it, a different node cannot appear
            if _live and _live_gpus != gpus:
                raise HsaUnavailable(
                    HSA_STATUS_ERROR_NOT_INITIALIZED,
                    f"this process's ROCr runs over an emulated node of {_live_gpus} GPU(s), so "
                    f"it cannot also show {gpus}; close the amdgpu:emulated devices first, or "
                    "open this node in a new process", "hsa_init")
            self.device = start(isa, first_existing(candidate_paths()), gpus)
            _live += 1
            _live_gpus = gpus
        self.gpus = gpus
        self._counted = True
        try:
            super().__init__(require_gpu=require_gpu)
        except BaseException:
            self._uncount()
            raise

    def _uncount(self) -> None:
        global _live
        if not getattr(self, "_counted", False):
            return
        self._counted = False
        with _live_lock:
            _live -= 1
            if _live == 0:
                driver.stop()

    def shut_down(self) -> None:
        try:
            super().shut_down()
        finally:
            self._uncount()

    # ROCr copies, fills and loads code with its own gfx90a blit kernels, and aborts the
    # process when its internal blit queue fails: without a gfx9 executor say so instead.
    def _needs_kernels(self, call: str) -> None:
        if not runs_kernels():
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ISA,
                f"{call} on amdgpu:emulated runs ROCr's gfx90a blit kernels, and hsa/virtual "
                "has no gfx9 ISA executor yet; use amdgpu:virtual for copies and kernels",
                call,
            )

    def memory_copy(self, *args: Any, **kwargs: Any) -> Any:
        self._needs_kernels("hsa_memory_copy")
        return super().memory_copy(*args, **kwargs)

    def memory_async_copy(self, *args: Any, **kwargs: Any) -> Any:
        self._needs_kernels("hsa_amd_memory_async_copy")
        return super().memory_async_copy(*args, **kwargs)

    def executable_freeze(self, *args: Any, **kwargs: Any) -> Any:
        self._needs_kernels("hsa_executable_freeze")
        return super().executable_freeze(*args, **kwargs)


def refuse_system_rocr() -> None:
    """One process has one ROCr: once it runs over the emulated driver, "amdgpu:N" (ROCr
    over /dev/kfd) cannot be opened in the same process."""
    if _live:
        raise HsaUnavailable(
            HSA_STATUS_ERROR_NOT_INITIALIZED,
            "this process runs ROCr over the emulated AMD driver (amdgpu:emulated), so its ROCr "
            "sees no real GPU; open amdgpu:N in a process that does not open amdgpu:emulated",
            "hsa_init",
        )


def unavailable_reason() -> str:
    """Why this process could not open amdgpu:emulated ("" when it could), without
    starting it: for amdgpu.devices()."""
    if driver._lib is not None:
        return ""
    ours = os.path.realpath(build.library_path())
    foreign = [p for p in driver._loaded_objects()
               if os.path.basename(p).startswith("libhsakmt.so") and os.path.realpath(p) != ours]
    if foreign:
        return (f"this process already loaded ROCr over {foreign[0]}; open amdgpu:emulated in "
                "a new process")
    if build.is_stale(build.library_path()) and (
            shutil.which("gcc") is None or not os.path.exists(build.HEADER)):
        return f"the emulated driver's libhsakmt.so.1 is not built and cannot be; {build.NEXT_STEP}"
    return ""


__all__ = [
    "DEFAULT_ISA",
    "SUPPORTED_ISAS",
    "EmulatedProvider",
    "refuse_system_rocr",
    "runs_kernels",
    "start",
    "unavailable_reason",
]
