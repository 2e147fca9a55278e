"""Global wave sync on the virtual gfx90a: HIP cooperative groups' grid.sync(), as Debian's
hipcc (HIP 5.2) builds it (ds_gws_barrier between workgroup barriers:
tests/data/codeobjects/hipcc_grid_sync.hsaco, source in make_fixtures.py), gives numpy's
sums; a dispatch whose workgroups cannot all be resident at once is refused by name."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from codeobjects import hip_entries, load_kernel

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx9]

ENTRY = "hipv4-amdgcn-amd-amdhsa--gfx90a"


def _grid_sum(dev, n: int, blocks: int):
    kernel = load_kernel(dev, hip_entries("hipcc_grid_sync.hsaco")[ENTRY], "grid_sum")
    x = np.random.default_rng(n).integers(-1000, 1000, n).astype(np.int32)
    part = dev.buffer(np.full(blocks, 99, np.int32))
    out = dev.buffer(np.zeros(1, np.int32))
    dev.dispatch(kernel, blocks * 256, 256, (dev.buffer(x), part, out, np.int32(n))).wait(60)
    return x, part.to_numpy(np.int32), out.to_numpy(np.int32)[0]


def test_code_holds_gws_barriers():
    """Two ds_gws_barrier (LLVM's encoding D93B0000, llvm-objdump-19 of the object)."""
    data = hip_entries("hipcc_grid_sync.hsaco")[ENTRY]
    assert data.count(struct.pack("<I", 0xD93B0000)) == 2


def test_grid_sync_sums():
    import amdgpu

    dev = amdgpu.open("amdgpu:virtual:gfx90a")
    try:
        x, part, total = _grid_sum(dev, 1000, 4)
    finally:
        dev.close()
    np.testing.assert_array_equal(part, [x[b * 256:(b + 1) * 256].sum() for b in range(4)])
    assert total == x.sum()


def test_grid_sync_in_batches_is_refused(monkeypatch):
    """More workgroups than run at once: ds_gws_barrier cannot hold the grid; one line."""
    import amdgpu
    from amdgpu.errors import QueueError
    from hsa.virtual.isa import executor

    monkeypatch.setattr(executor, "BATCH_BYTES", 1)  # one workgroup a batch
    dev = amdgpu.open("amdgpu:virtual:gfx90a")
    try:
        with pytest.raises(QueueError) as err:
            _grid_sum(dev, 1000, 4)
    finally:
        dev.close()
    text = str(err.value)
    assert "ds_gws_barrier needs every workgroup of the dispatch resident" in text
    assert "code-object offset 0x" in text and "\n" not in text
