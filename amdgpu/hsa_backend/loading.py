"""HsaDevice's loading: code objects and bundles into executables, and finding a loaded
kernel by the address of its code."""

from __future__ import annotations

from typing import Any

from amdgpu.hsa_backend.executable import HsaExecutable, load_bundle
from amdgpu.hsa_backend.parts import DeviceParts


class DeviceLoading(DeviceParts):
    # --- code ----------------------------------------------------------------------------
    def load(self, bundle: Any) -> HsaExecutable:
        self._check_open()
        exe = load_bundle(self, bundle)
        self._executables.append(exe)
        return exe

    def kernel_name(self, kernel_object: int) -> str | None:
        """The name of the loaded kernel whose code is at `kernel_object`, else None (a
        queue error names the kernel it stopped at)."""
        for exe in self._executables:
            for k in exe.kernels.values():
                if k.kernel_object == kernel_object:
                    return k.name
        return None
