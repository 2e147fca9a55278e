"""gfx1250 workgroup clusters end to end with real compiled kernels: HIP compiled by clang 22
(the `ziglang` wheel) with `cluster_dims(2, 2, 1)`, dispatched through the driver with the
extended dispatch packet (`dev.dispatch(..., cluster=(2, 2, 1))`) on amdgpu:virtual:gfx1250.

The kernels read what LLVM's gfx1250 lowering reads: cluster ids from TTMP9/TTMP7, the place
in the cluster and its maxima from TTMP6, the flat place from HW_REG_IB_STS2 [24:21]; the
exchange kernel publishes a value, waits at the cluster barrier (s_barrier_signal_isfirst,
then s_barrier_signal -3 / s_barrier_wait -3 as LLVM emits __builtin_amdgcn_s_cluster_barrier)
and reads its neighbour's, which is right only if the cluster's workgroups run together.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import build_code_object

pytestmark = pytest.mark.hsa_virtual

HIP = r"""
#define KERNEL extern "C" __attribute__((global)) __attribute__((cluster_dims(2, 2, 1)))
#define WG_X __builtin_amdgcn_workgroup_id_x()
#define WG_Y __builtin_amdgcn_workgroup_id_y()
KERNEL void cluster_ids(unsigned int *out) {
  unsigned int w = WG_X + WG_Y * 64;
  if (__builtin_amdgcn_workitem_id_x() == 0) {
    unsigned int *o = out + 8 * w;
    o[0] = __builtin_amdgcn_cluster_id_x();
    o[1] = __builtin_amdgcn_cluster_id_y();
    o[2] = __builtin_amdgcn_cluster_workgroup_id_x();
    o[3] = __builtin_amdgcn_cluster_workgroup_id_y();
    o[4] = __builtin_amdgcn_cluster_workgroup_flat_id();
    o[5] = __builtin_amdgcn_cluster_workgroup_max_id_x();
    o[6] = __builtin_amdgcn_cluster_workgroup_max_flat_id();
    o[7] = WG_X;
  }
}
KERNEL void cluster_exchange(unsigned int *slots, unsigned int *out) {
  unsigned int w = WG_X + WG_Y * 64;
  if (__builtin_amdgcn_workitem_id_x() == 0)
    __atomic_store_n(&slots[w], 1000 + w, __ATOMIC_RELAXED);
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
  __builtin_amdgcn_s_cluster_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
  if (__builtin_amdgcn_workitem_id_x() == 0)  /* the workgroup beside it in x, same cluster */
    out[w] = __atomic_load_n(&slots[(WG_X ^ 1) + WG_Y * 64], __ATOMIC_RELAXED);
}
"""


@lru_cache(maxsize=1)
def code_object() -> tuple[bytes, str]:
    """(the linked code object, its assembly): HIP -> assembly with clang 22, then the
    harness's assembler + ld.lld path."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.hip"
        src.write_text(HIP)
        asm = subprocess.run(
            [sys.executable, "-m", "ziglang", "clang", "-x", "hip", "--offload-arch=gfx1250",
             "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O2", "-S", str(src), "-o", "-"],
            capture_output=True, text=True, timeout=300)
    assert asm.returncode == 0, f"clang 22 (ziglang) did not compile the HIP: {asm.stderr}"
    return build_code_object(asm.stdout, "assembler", mcpu="gfx1250"), asm.stdout


def test_the_compiler_emits_cluster_reads_and_the_cluster_barrier():
    _, asm = code_object()
    for needle in ("ttmp6", "hwreg(HW_REG_IB_STS2, 21, 4)", "s_barrier_signal_isfirst -1",
                   "s_barrier_signal -3", "s_barrier_wait -3", ".cluster_dims:"):
        assert needle in asm, needle


@pytest.fixture
def dev():
    import amdgpu

    d = amdgpu.open("amdgpu:virtual:gfx1250")
    yield d
    d.close()


def _kernel(dev, name: str):
    from codeobjects import load_kernel

    return load_kernel(dev, code_object()[0], name)


GRID = (8, 4)  # workgroups: 4 x 2 clusters of 2 x 2
BLOCK = 64


def test_cluster_ids_as_the_kernel_reads_them(dev):
    out = dev.buffer(np.full(8 * 64 * GRID[1], 0xDEAD, np.uint32))
    dev.dispatch(_kernel(dev, "cluster_ids"), (GRID[0] * BLOCK, GRID[1]), (BLOCK, 1),
                 (out,), cluster=(2, 2, 1)).wait(60)
    got = out.to_numpy(np.uint32).reshape(-1, 8)
    for y in range(GRID[1]):
        for x in range(GRID[0]):
            row = got[x + 64 * y]
            flat = (x % 2) + 2 * (y % 2)
            assert list(row) == [x // 2, y // 2, x % 2, y % 2, flat, 1, 3, x], (x, y, row)


def test_cluster_barrier_holds_every_workgroup_of_the_cluster(dev):
    slots = dev.buffer(np.zeros(64 * GRID[1], np.uint32))
    out = dev.buffer(np.zeros(64 * GRID[1], np.uint32))
    dev.dispatch(_kernel(dev, "cluster_exchange"), (GRID[0] * BLOCK, GRID[1]), (BLOCK, 1),
                 (slots, out), cluster=(2, 2, 1)).wait(60)
    got = out.to_numpy(np.uint32).reshape(GRID[1], 64)[:, :GRID[0]]
    x, y = np.meshgrid(np.arange(GRID[0]), np.arange(GRID[1]))
    np.testing.assert_array_equal(got, 1000 + (x ^ 1) + 64 * y)


def test_cluster_barrier_with_one_cluster_per_batch(dev, monkeypatch):
    """With batches as small as they go (one cluster each), the exchange still needs the
    cluster's four workgroups in one batch: the executor orders workgroups by cluster."""
    from hsa.virtual.isa import executor

    monkeypatch.setattr(executor, "BATCH_BYTES", 1)
    test_cluster_barrier_holds_every_workgroup_of_the_cluster(dev)


def test_cluster_exchange_replayed(dev):
    """The same clustered dispatch recorded once and replayed twice from a command buffer."""
    k = _kernel(dev, "cluster_exchange")
    slots = dev.buffer(np.zeros(64 * GRID[1], np.uint32))
    out = dev.buffer(np.zeros(64 * GRID[1], np.uint32))
    cb = dev.command_buffer()
    cb.dispatch(k, (GRID[0] * BLOCK, GRID[1]), (BLOCK, 1), (slots, out), cluster=(2, 2, 1))
    cb.finalize()
    x, y = np.meshgrid(np.arange(GRID[0]), np.arange(GRID[1]))
    for _ in range(2):
        out.write(np.zeros(64 * GRID[1], np.uint32))
        dev.submit(cb).wait(60)
        got = out.to_numpy(np.uint32).reshape(GRID[1], 64)[:, :GRID[0]]
        np.testing.assert_array_equal(got, 1000 + (x ^ 1) + 64 * y)


def test_cluster_order_keeps_clusters_whole():
    from hsa.virtual.isa.executor import _cluster_order

    order, batch = _cluster_order((8, 4, 1), (2, 2, 1), 6)
    assert batch == 4 and sorted(order.tolist()) == list(range(32))
    for first in range(0, 32, batch):
        wg = order[first:first + batch]
        clusters = {(int(w) % 8 // 2, int(w) // 8 // 2) for w in wg}
        assert len(clusters) == 1, wg
    assert _cluster_order((5, 1, 1), (1, 1, 1), 3)[1] == 3
