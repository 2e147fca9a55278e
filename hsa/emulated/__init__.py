"""amdgpu:emulated: the real ROCr (Debian's libhsa-runtime64 5.2.3, unmodified) over an
emulated AMD kernel driver whose GPU is the virtual AMD system.

`EmulatedProvider()` is a `RocrProvider` whose process first loaded our libhsakmt.so.1
(hsa/emulated/thunk, built by scripts/setup.sh) and started the device side
(`hsa.emulated.driver`). Everything above the thunk is AMD's code: hsa_init, agents, pools,
queues, signals, the code-object loader, blit kernels, error handling.
"""

from __future__ import annotations

from typing import Any

from amdgpu.errors import HSA_STATUS_ERROR_INVALID_ISA, HsaError
from hsa.rocr.provider import RocrProvider
from hsa.virtual import executor as executor_registry

from .driver import DEFAULT_ISA, SUPPORTED_ISAS, start

FAMILY = "gfx9"


def runs_kernels() -> bool:
    """Whether the emulated GPU can run machine code: hsa/virtual has a gfx9 executor."""
    return executor_registry.has_executor(FAMILY)


class EmulatedProvider(RocrProvider):
    """ROCr over the emulated driver: `EmulatedProvider(isa="gfx90a")`."""

    driver = "emulated"

    def __init__(self, isa: str = DEFAULT_ISA, *, require_gpu: bool = True):
        self.device = start(isa)
        super().__init__(require_gpu=require_gpu)

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


__all__ = ["DEFAULT_ISA", "EmulatedProvider", "SUPPORTED_ISAS", "runs_kernels", "start"]
