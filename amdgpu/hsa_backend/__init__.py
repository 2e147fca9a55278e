"""The HSA path of the driver (opt-in): one GPU agent of an HSA provider as a Device.

device.py          HsaDevice: buffers, loading, immediate dispatch, submit, timestamps
kernargs.py        KernargLayout (from code-object metadata) and KernargRing
lanes.py           QueueLane: an AQL queue + a timeline signal + a kernarg ring
executable.py      HsaExecutable / HsaKernel (variant by ISA, symbol "name.kd")
command_buffer.py  HsaCommandBuffer: packet block + kernarg template + patch sites
system.py          one provider per HSA system, shared by its devices
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "HsaDevice":
        from amdgpu.hsa_backend.device import HsaDevice

        return HsaDevice
    raise AttributeError(f"module 'amdgpu.hsa_backend' has no attribute {name!r}")
