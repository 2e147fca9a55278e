"""Narrowed barriers (barrier mode "narrow", command_plan.dependencies): each `barrier()`
records only what the operations around it need, and results stay right.

The plan tests build recordings from the operation records directly (no device); the
device tests run them on lavapipe, whose results are checked, and inspect what each
barrier recorded (`CommandBuffer.recorded_barriers`)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from amdgpu.vulkan import VulkanDevice, list_devices
from amdgpu.vulkan.command_plan import (
    COMPUTE_READ,
    COMPUTE_WRITE,
    END,
    TRANSFER_READ,
    TRANSFER_WRITE,
    Barrier,
    BufferRef,
    Copy,
    Dependency,
    Dispatch,
    Fill,
    dependencies,
    locate_any,
)
from amdgpu.vulkan.sync import COMPUTE, TRANSFER

C, T = COMPUTE, TRANSFER
RW = COMPUTE_READ | COMPUTE_WRITE


class _Kernel:
    def __init__(self, readonly):
        self.readonly = readonly


def _d(*refs, readonly=()):
    return Dispatch(_Kernel(readonly), (1, 1, 1), list(refs), np.zeros(0, np.uint32))


def _s(slot, offset=0, nbytes=None):
    return BufferRef(slot, None, offset, nbytes)


B = Barrier()


@pytest.mark.generic
def test_read_after_write_chain_keeps_a_memory_dependency_on_the_written_slot_only():
    # x -> y, y -> x, ...: slot 0 read-only in the first, slot 1 in the second
    ops = [_d(_s(0), _s(1), readonly=(True, False)), B,
           _d(_s(1), _s(0), readonly=(True, False)), B,
           _d(_s(0), _s(1), readonly=(True, False))]
    first, second = dependencies(ops)
    # what the first wrote (slot 1) is read next and written two later: only slot 1
    assert first == Dependency(C, C, ((("slot", 1), 0, END, COMPUTE_WRITE, RW),))
    # slot 0 written by the second, read by the third (no later write): read access only
    assert second == Dependency(C, C, ((("slot", 0), 0, END, COMPUTE_WRITE, COMPUTE_READ),))


@pytest.mark.generic
def test_write_after_read_is_an_execution_dependency_alone():
    ops = [_d(_s(0), _s(1), readonly=(True, False)), B, Fill(_s(0), 7)]
    (dep,) = dependencies(ops)
    # the dispatch only read slot 0; the fill writes it: wait, but no memory to flush.
    # Slot 1 was written but nothing after touches it: no memory dependency either.
    assert dep == Dependency(C, T, ())


@pytest.mark.generic
def test_barrier_between_unrelated_work_is_left_out_and_the_next_one_covers_it():
    ops = [_d(_s(0), readonly=(False,)), B,       # writes slot 0
           _d(_s(1), readonly=(False,)), B,       # unrelated: slot 1
           _d(_s(0), readonly=(True,))]           # reads what the first wrote
    first, second = dependencies(ops)
    assert first is None
    # the recorded one orders both earlier dispatches' writes, slot 0's for the reader
    assert second == Dependency(C, C, ((("slot", 0), 0, END, COMPUTE_WRITE, COMPUTE_READ),))


@pytest.mark.generic
def test_disjoint_ranges_of_one_slot_need_no_barrier_overlapping_ones_do():
    fill_lo, fill_hi = Fill(_s(0, 0, 256), 1), Fill(_s(0, 256, 256), 2)
    assert dependencies([fill_lo, B, fill_hi]) == [None]
    overlapping = Copy(_s(1, 0, 64), _s(0, 192, 128), 128)  # reads bytes 192..320 of slot 0
    (dep,) = dependencies([fill_lo, B, overlapping])
    assert dep == Dependency(T, T, ((("slot", 0), 0, 256, TRANSFER_WRITE, TRANSFER_READ),))


@pytest.mark.generic
def test_reads_on_both_sides_need_nothing():
    ops = [_d(_s(0), readonly=(True,)), B, Copy(_s(1), _s(0), 64)]
    (dep,) = dependencies(ops)
    # the copy writes slot 1, which the dispatch never touched; both only read slot 0
    assert dep is None


@pytest.mark.generic
def test_barriers_next_to_an_empty_side_order_everything():
    ops = [B, _d(_s(0), readonly=(True,)), B, B]
    lead, trail, double = dependencies(ops)
    everything = (COMPUTE_READ | TRANSFER_READ | COMPUTE_WRITE | TRANSFER_WRITE)
    assert lead == Dependency(C | T, C, (("any", 0, END, COMPUTE_WRITE | TRANSFER_WRITE,
                                          RW),))
    assert trail.src == C and trail.dst == C | T and trail.ranges[0][4] == everything
    assert double.src == double.dst == C | T


@pytest.mark.generic
def test_any_memory_view_keeps_every_barrier_with_a_write():
    # bound to overlapping buffers, slot 0 and slot 1 may be the same memory
    ops = [_d(_s(0), readonly=(False,)), B, _d(_s(1), readonly=(True,))]
    assert dependencies(ops) == [None]
    (dep,) = dependencies(ops, locate_any)
    assert dep is not None and dep.ranges[0][3] == COMPUTE_WRITE


# --- on the device ------------------------------------------------------------------------

def _usable() -> bool:
    reports = list_devices()
    return bool(reports) and reports[0].available


needs_vulkan = pytest.mark.skipif(not _usable(), reason="no usable Vulkan device")
N = 4096
ADDONE = f"""func.func @addone(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %c = arith.constant dense<1.0> : tensor<{N}xf32>
  %r = arith.addf %x, %c : tensor<{N}xf32>
  return %r : tensor<{N}xf32>
}}
"""


@pytest.fixture(scope="module")
def addone(tmp_path_factory):
    saved = os.environ.get("AMDGPU_VULKAN_TEST_BUNDLES")  # for machines without iree-compile
    if saved and os.path.exists(os.path.join(saved, "addone.bundle")):
        from compiler.bundle import KernelBundle

        return KernelBundle.load(os.path.join(saved, "addone.bundle"))
    iree = pytest.importorskip("compiler.iree", reason="compiler.iree not available")
    src = tmp_path_factory.mktemp("vkb") / "addone.mlir"
    src.write_text(ADDONE)
    return iree.compile_mlir(src, vulkan_abis=("descriptors", "bda"))


@pytest.fixture(params=["bda", "descriptor_sets"])
def dev(request):
    device = VulkanDevice(0, path=request.param)
    if device.path != request.param:
        device.close()
        pytest.skip(f"{request.param} unavailable here")
    yield device
    device.close()


def _kernel(dev, compiled):
    d = compiled.program["dispatches"][0]
    grid = [c * w for c, w in zip(d["workgroup_count"], d["workgroup_size"], strict=False)]
    return dev.load(compiled).kernel(d["kernel"]), grid


def _chain_then_transfers(dev, kernel, grid):
    """Six x+1 dispatches ping-ponging between slots 0 and 1 (read after write at every
    barrier), then a fill of slot 1, which the sixth dispatch read (write after read), and
    a copy of slot 0, which it wrote, into slot 2 (read after write by a transfer)."""
    cb = dev.command_buffer()
    s0, s1, s2 = cb.binding(0), cb.binding(1), cb.binding(2)
    for i in range(6):
        cb.dispatch(kernel, grid, args=(s0, s1) if i % 2 == 0 else (s1, s0))
        cb.barrier()
    cb.fill(s1, np.float32(-1.0))
    cb.copy(s2, s0, 4 * N)
    return cb.finalize()


@pytest.mark.vulkan
@needs_vulkan
def test_read_after_write_chain_and_write_after_read_on_the_device(dev, addone):
    assert dev.tuning.barrier == "narrow"
    kernel, grid = _kernel(dev, addone)
    assert kernel.readonly == (True, False)  # IREE's layout flags the input ReadOnly
    cb = _chain_then_transfers(dev, kernel, grid)
    a, b, out = (dev.buffer(np.zeros(N, np.float32)) for _ in range(3))
    for start in (0.0, 10.0):
        a.write(np.full(N, start, np.float32))
        dev.submit(cb, [a, b, out]).wait(30)
        np.testing.assert_array_equal(out.to_numpy(np.float32), start + 6)
        np.testing.assert_array_equal(a.to_numpy(np.float32), start + 6)
        np.testing.assert_array_equal(b.to_numpy(np.float32), -1.0)  # the fill came last
    forms = cb.recorded_barriers([a, b, out])
    assert len(forms) == 6 and None not in forms  # every barrier here is needed
    for i, form in enumerate(forms[:5]):
        # dispatch i wrote slot (i + 1) % 2: the memory dependency names that one only,
        # for what comes later (compute reads and writes, then the fill or the copy)
        assert form[1:3] == (C, C | T)
        if form[0] == "buffers":  # descriptors baked into the recording: its buffer
            (key, lo, hi, written, later), = form[3]
            assert key == ("mem", (b if i % 2 == 0 else a).handle.uid)
            assert (lo, hi, written) == (0, 4 * N, COMPUTE_WRITE)
        else:  # bda: the buffer is bound at submit; one memory barrier, storage accesses
            assert form[0] == "global" and form[3] == COMPUTE_WRITE
            later = form[4]
        assert later & COMPUTE_READ
    # the sixth dispatch read slot 1 (the fill overwrites it) and wrote slot 0 (the copy
    # reads it): compute -> transfer, slot 0's range for the copy's read
    last = forms[5]
    assert last[1:3] == (C, T)
    if last[0] == "buffers":
        (key, _, _, written, later), = last[3]
        assert key == ("mem", a.handle.uid) and (written, later) == (COMPUTE_WRITE,
                                                                       TRANSFER_READ)
    else:
        assert last[3:] == (COMPUTE_WRITE, TRANSFER_READ)


@pytest.mark.vulkan
@needs_vulkan
def test_aliased_bindings_get_the_conservative_recording(addone):
    """Slots taken as distinct memory: bound to one buffer, they are not, and the submit
    records the command buffer with every barrier kept as if all memory were shared."""
    dev = VulkanDevice(0, path="descriptor_sets")
    try:
        kernel, grid = _kernel(dev, addone)
        cb = dev.command_buffer()
        s0, s1 = cb.binding(0), cb.binding(1)
        cb.dispatch(kernel, grid, args=(s1, s0))  # writes slot 0
        cb.barrier()
        cb.fill(s1, np.float32(5.0))  # unrelated to slot 0... unless slot 1 is slot 0
        cb.finalize()
        assert cb._plan.alias_sensitive
        x, y = dev.buffer(np.zeros(N, np.float32)), dev.buffer(np.zeros(N, np.float32))
        assert cb.recorded_barriers([x, y])[0][2] == T  # needed: the fill overwrites y read
        shared = dev.buffer(np.zeros(N, np.float32))
        forms = cb.recorded_barriers([shared, shared])
        assert forms[0] is not None and forms[0][0] == "global"
        dev.submit(cb, [shared, shared]).wait(30)
        np.testing.assert_array_equal(shared.to_numpy(np.float32), 5.0)  # fill after +1
    finally:
        dev.close()


_SYNC_CHECK = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_vulkan_barriers as t
from amdgpu.vulkan import VulkanDevice, command_buffer
from amdgpu.vulkan.instance import take_validation_messages
from compiler.bundle import KernelBundle

dev = VulkanDevice(0, path="push_descriptors")
kernel, grid = t._kernel(dev, KernelBundle.load(sys.argv[2]))
bufs = [dev.buffer(np.zeros(t.N, np.float32)) for _ in range(3)]
take_validation_messages()
dev.submit(t._chain_then_transfers(dev, kernel, grid), bufs).wait(30)
kept = [m for m in take_validation_messages() if "SYNC-HAZARD" in m]
real = command_buffer.dependencies
def drop_third(ops, *locate):
    deps = real(ops, *locate)
    deps[2] = None
    return deps
command_buffer.dependencies = drop_third
dev.submit(t._chain_then_transfers(dev, kernel, grid), bufs).wait(30)
dropped = [m for m in take_validation_messages() if "SYNC-HAZARD" in m]
from amdgpu.vulkan.instance import VulkanInstance
on = VulkanInstance.shared().validation
print(json.dumps({"validation": on, "kept": kept, "dropped": dropped}))
dev.close()
"""


def _validation_layer() -> bool:
    from amdgpu.vulkan.instance import VALIDATION_LAYER, vk

    try:
        return any(p.layerName == VALIDATION_LAYER
                   for p in vk.vkEnumerateInstanceLayerProperties())
    except Exception:  # noqa: BLE001 - no loader
        return False


@pytest.mark.vulkan
@needs_vulkan
@pytest.mark.skipif(not _validation_layer(),
                    reason="Khronos validation layer not installed (vulkan-validationlayers)")
def test_khronos_synchronization_validation_agrees(addone, tmp_path):
    """The Khronos validation layer's synchronization validation (nobody here wrote it)
    checks the narrowed barriers of the recording above: no hazard; with the barrier
    after the third dispatch dropped, it reports the read after write. Its own process:
    the layer is chosen when the Vulkan instance is made."""
    import json
    import subprocess
    import sys

    bundle = tmp_path / "addone.bundle"
    if hasattr(addone, "save"):
        addone.save(bundle)
    else:
        from compiler.bundle import KernelBundle, Variant

        KernelBundle("addone", "test", [Variant(v.kind, v.target, v.abi, v.data, v.info)
                                         for v in addone.variants], addone.program).save(bundle)
    env = dict(os.environ, AMDGPU_VULKAN_VALIDATION="1",
               VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT")
    done = subprocess.run(
        [sys.executable, "-c", _SYNC_CHECK, os.path.dirname(__file__), str(bundle)],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["validation"]
    assert seen["kept"] == []
    assert any("READ_AFTER_WRITE" in m or "READ-AFTER-WRITE" in m for m in seen["dropped"]), \
        seen["dropped"]
