"""The ground floor of amdgpu-direct: the vocabulary every layer shares and that imports
nothing of the project.

    ground.errors   the one exception hierarchy (`AmdgpuError` and its classes)
    ground.status   hsa_status_t numbers (hsa.h, hsa_ext_amd.h)

Every package (packets, hsa, compiler, amdgpu, tools) imports these from here, so each
import arrow points down. `amdgpu.errors` and `hsa.status` re-export them for users.
"""
