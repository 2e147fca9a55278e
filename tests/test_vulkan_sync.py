"""Replay-latency settings of the Vulkan backend (amdgpu.vulkan.sync): barrier masks per
neighbouring work, where barriers sit in a recording, and the environment variables."""

from __future__ import annotations

import pytest

from amdgpu.errors import VulkanError
from amdgpu.vulkan import sync
from amdgpu.vulkan.instance import vk

COMPUTE_STAGE = vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
TRANSFER_STAGE = vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT
STORAGE_READ = vk.VK_ACCESS_2_SHADER_STORAGE_READ_BIT
STORAGE_WRITE = vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT


@pytest.mark.generic
def test_tight_compute_to_compute_is_storage_only():
    masks = sync.barrier_masks("tight", sync.COMPUTE, sync.COMPUTE)
    assert masks == (COMPUTE_STAGE, STORAGE_WRITE, COMPUTE_STAGE, STORAGE_READ | STORAGE_WRITE)


@pytest.mark.generic
def test_transfer_sides_add_transfer_stages_and_accesses():
    src_stage, src_access, dst_stage, dst_access = sync.barrier_masks(
        "tight", sync.TRANSFER, sync.COMPUTE
    )
    assert src_stage == TRANSFER_STAGE and src_access == vk.VK_ACCESS_2_TRANSFER_WRITE_BIT
    assert dst_stage == COMPUTE_STAGE
    src_stage, _, dst_stage, dst_access = sync.barrier_masks("tight", sync.COMPUTE, sync.ANY)
    assert src_stage == COMPUTE_STAGE
    assert dst_stage == COMPUTE_STAGE | TRANSFER_STAGE
    assert dst_access & vk.VK_ACCESS_2_TRANSFER_READ_BIT


@pytest.mark.generic
def test_compute_mode_uses_generic_shader_accesses_and_full_ignores_neighbours():
    _, src_access, _, dst_access = sync.barrier_masks("compute", sync.COMPUTE, sync.COMPUTE)
    assert src_access == vk.VK_ACCESS_2_SHADER_WRITE_BIT
    assert dst_access == vk.VK_ACCESS_2_SHADER_READ_BIT | vk.VK_ACCESS_2_SHADER_WRITE_BIT
    full = sync.barrier_masks("full", sync.COMPUTE, sync.COMPUTE)
    assert full == sync.barrier_masks("compute", sync.ANY, sync.ANY)
    assert full[0] == full[2] == COMPUTE_STAGE | TRANSFER_STAGE


@pytest.mark.generic
def test_empty_side_means_any_work():
    cache = sync.BarrierCache()
    info = cache.get("tight", 0, sync.COMPUTE)
    assert info is cache.get("tight", sync.ANY, sync.COMPUTE)  # one struct per mask set
    assert info.pMemoryBarriers[0].srcStageMask == COMPUTE_STAGE | TRANSFER_STAGE
    assert info.memoryBarrierCount == 1


@pytest.mark.generic
def test_barrier_sides_of_a_recording():
    from amdgpu.vulkan.command_buffer import CommandBuffer, _Barrier, _Copy, _Dispatch, _Fill

    cb = CommandBuffer.__new__(CommandBuffer)
    d, f, c, b = _Dispatch.__new__(_Dispatch), _Fill(None, 0), _Copy(None, None, 4), _Barrier()
    cb.ops = [b, d, b, d, f, b, b, c, b]
    C, T = sync.COMPUTE, sync.TRANSFER
    assert cb._barrier_sides() == [(0, C), (C, C | T), (C | T, 0), (0, T), (T, 0)]


@pytest.mark.generic
def test_tuning_from_environment(monkeypatch):
    for name in ("BARRIER", "SPIN_US", "SIMULTANEOUS_USE", "BDA_TABLE", "ELIDE", "BUFFER_MEMORY"):
        monkeypatch.delenv(f"AMDGPU_VULKAN_{name}", raising=False)
    assert sync.Tuning.from_env(cpu_device=True) == sync.Tuning()
    assert sync.Tuning.from_env(cpu_device=False).spin_us == sync.SPIN_US_GPU > 0
    monkeypatch.setenv("AMDGPU_VULKAN_BARRIER", "full")
    monkeypatch.setenv("AMDGPU_VULKAN_SPIN_US", "25")
    monkeypatch.setenv("AMDGPU_VULKAN_SIMULTANEOUS_USE", "0")
    monkeypatch.setenv("AMDGPU_VULKAN_BDA_TABLE", "host")
    monkeypatch.setenv("AMDGPU_VULKAN_ELIDE", "off")
    monkeypatch.setenv("AMDGPU_VULKAN_BUFFER_MEMORY", "device")
    assert sync.Tuning.from_env(cpu_device=True) == sync.Tuning(
        barrier="full",
        spin_us=25.0,
        simultaneous_use=False,
        table_memory="host",
        elide=False,
        buffer_memory="device",
    )
    monkeypatch.setenv("AMDGPU_VULKAN_BARRIER", "none")
    with pytest.raises(VulkanError, match="AMDGPU_VULKAN_BARRIER='none' is not one of"):
        sync.Tuning.from_env(cpu_device=True)
    monkeypatch.setenv("AMDGPU_VULKAN_BARRIER", "tight")
    monkeypatch.setenv("AMDGPU_VULKAN_SPIN_US", "soon")
    with pytest.raises(VulkanError, match="SPIN_US='soon' is not a number"):
        sync.Tuning.from_env(cpu_device=True)
