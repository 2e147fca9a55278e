"""Kernel checks shared by several test modules (not a test module itself).

The ISA executors' kernel suite: clang-compiled OpenCL kernels (hsa/virtual/gfx11/testing.py's
TEST_KERNELS_CL) against numpy. Each check takes the module's `harness` (a Harness for one
target) and `code` (TEST_KERNELS_CL loaded on it) fixtures; tests/test_gfx11_kernels.py runs
them on gfx1100, tests/test_gfx9_kernels.py on gfx90a, gfx942 and gfx950 in wave64: the same
source must give the same answers on every family the core serves. The collecting module's
`pytestmark` (isa_gfx11, isa_gfx9) applies to them there.

`missing_barrier_case` is the driver-level check that a command buffer without a barrier
between a producer and its consumer reads stale data under AMDGPU_VIRTUAL_OVERLAP=reverse,
and the right data with one (tests/test_driver_dispatch.py on gfx1100, tests/test_gfx9_kernels.py
on gfx942).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amdgpu.errors import HsaError, MemoryFault
from hsa.status import HSA_STATUS_ERROR_EXCEPTION, HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
BLOCKS = st.sampled_from([1, 32, 64, 96, 100, 128, 256, 1024])

#: The kernel tests, in order: a test module collects them by importing these names.
KERNEL_TESTS = (
    "test_fill",
    "test_copy_with_partial_workgroups",
    "test_saxpy",
    "test_lds_reduction_with_barriers",
    "test_lds_address_wraps_at_32_bits",
    "test_2d_grid",
    "test_3d_grid_packs_workitem_ids",
    "test_integer_ops_bit_exact",
    "test_float_ops",
    "test_math_library_expansions",
    "test_double_division_and_clamps",
    "test_calls_stack_and_generic_pointers",
    "test_workgroups_run_in_batches",
    "test_empty_grid_runs_nothing",
    "test_flat_access_mixing_apertures",
    "test_out_of_bounds_write_faults_with_kernel_pc_and_address",
    "test_trap_is_a_queue_exception",
)


@SETTINGS
@given(n=st.integers(1, 5000), block=BLOCKS, value=st.integers(0, 2**32 - 1))
def test_fill(harness, code, n, block, value):
    out = harness.buffer(np.full(n + 8, 0x5A5A5A5A, np.uint32))
    grid = -(-n // block) * block
    harness.dispatch(code, "fill", (grid,), (block,), [out, value, n])
    got = harness.read(out, np.uint32, n + 8)
    assert np.array_equal(got[:n], np.full(n, value, np.uint32))
    assert np.all(got[n:] == 0x5A5A5A5A)  # nothing past n


@SETTINGS
@given(n=st.integers(1, 5000), block=BLOCKS, partial=st.booleans())
def test_copy_with_partial_workgroups(harness, code, n, block, partial):
    src = np.random.default_rng(n).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    dst = harness.alloc(4 * n)
    grid = n if partial else -(-n // block) * block  # partial: the last workgroup is short
    harness.dispatch(code, "copy", (grid,), (block,), [dst, harness.buffer(src), n])
    assert np.array_equal(harness.read(dst, np.uint32, n), src)


@SETTINGS
@given(n=st.integers(1, 4000), block=BLOCKS, a=st.floats(-100, 100, width=32))
def test_saxpy(harness, code, n, block, a):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    ya = harness.buffer(y)
    harness.dispatch(code, "saxpy", (n,), (block,), [ya, harness.buffer(x), a, n])
    # v_fmac_f32 rounds once: compare with a fused reference, exactly
    ref = (np.float64(np.float32(a)) * x.astype(np.float64) + y).astype(np.float32)
    assert np.array_equal(harness.read(ya, np.float32, n), ref)


def test_lds_address_wraps_at_32_bits(harness, code):
    # clang's tile[63 - l] reaches the LDS as (0 - l) + offset:252 (a negative vaddr)
    x = np.arange(256, dtype=np.uint32) * 7 + 3
    out = harness.alloc(4 * 256)
    harness.dispatch(code, "lds_reverse", (256,), (64,), [out, harness.buffer(x)])
    expect = x.reshape(4, 64)[:, ::-1].reshape(-1)
    assert np.array_equal(harness.read(out, np.uint32, 256), expect)


@SETTINGS
@given(n=st.integers(1, 3000), block=st.sampled_from([32, 64, 128, 256]))
def test_lds_reduction_with_barriers(harness, code, n, block):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    groups = -(-n // block)
    out = harness.alloc(4 * groups)
    harness.dispatch(code, "lds_reduce", (groups * block,), (block,),
                     [out, harness.buffer(x), n])
    padded = np.zeros(groups * block, np.float32)
    padded[:n] = x
    ref = padded.reshape(groups, block).sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(harness.read(out, np.float32, groups), ref, rtol=1e-5,
                               atol=1e-4)


@SETTINGS
@given(w=st.integers(1, 80), h=st.integers(1, 40), bx=st.sampled_from([1, 4, 8, 16, 32]),
       by=st.sampled_from([1, 2, 4, 8]))
def test_2d_grid(harness, code, w, h, bx, by):
    rng = np.random.default_rng(w * 100 + h)
    a = rng.integers(-1000, 1000, (h, w)).astype(np.int32)
    b = rng.integers(-1000, 1000, (h, w)).astype(np.int32)
    c = harness.alloc(a.nbytes)
    harness.dispatch(code, "add2d", (w, h), (bx, by),
                     [c, harness.buffer(a), harness.buffer(b), w, h])
    xs, ys = np.meshgrid(np.arange(w), np.arange(h))
    assert np.array_equal(harness.read(c, np.int32, w * h).reshape(h, w), a * 3 + b + (xs ^ ys))


@SETTINGS
@given(w=st.integers(1, 20), h=st.integers(1, 12), dd=st.integers(1, 9),
       block=st.sampled_from([(1, 1, 1), (4, 4, 2), (8, 2, 2), (3, 5, 7), (32, 1, 1)]))
def test_3d_grid_packs_workitem_ids(harness, code, w, h, dd, block):
    out = harness.alloc(4 * w * h * dd)
    harness.dispatch(code, "idx3d", (w, h, dd), block, [out, w, h, dd])
    z, y, x = np.meshgrid(np.arange(dd), np.arange(h), np.arange(w), indexing="ij")
    got = harness.read(out, np.uint32, w * h * dd).reshape(dd, h, w)
    assert np.array_equal(got, (x | (y << 10) | (z << 20)).astype(np.uint32))


def test_integer_ops_bit_exact(harness, code):
    n = 300
    rng = np.random.default_rng(1)
    a = rng.integers(-2**30, 2**30, n).astype(np.int32)
    b = rng.integers(-2**30, 2**30, n).astype(np.int32)
    a[:20], b[:20] = rng.integers(-100, 100, 20), rng.integers(-100, 100, 20)
    out = harness.alloc(32 * n)
    harness.dispatch(code, "int_ops", (n,), (64,), [out, harness.buffer(a), harness.buffer(b), n])
    got = harness.read(out, np.int32, 8 * n).reshape(n, 8)
    x, y = a.astype(np.int64), b.astype(np.int64)
    ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
    yo = (b | 1).astype(np.int64)
    ref = np.stack([np.trunc(x / yo), np.fmod(x, yo), ux // (uy | 1),
                    np.maximum(x, y) - np.minimum(x, y), (x >> (y & 31)) ^ (ux >> (uy & 31)),
                    (x * y) >> 32, np.where(x < y, x * 7, y - 3),
                    (ux.astype(np.uint64) * uy.astype(np.uint64)) % np.uint64(1000003)],
                   axis=1).astype(np.int64)
    assert np.array_equal(got, (ref & 0xFFFFFFFF).astype(np.uint32).view(np.int32))


def test_float_ops(harness, code):
    n = 300
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    y = (rng.standard_normal(n) * 10).astype(np.float32)
    out = harness.alloc(32 * n)
    harness.dispatch(code, "float_ops", (n,), (64,), [out, harness.buffer(x), harness.buffer(y), n])
    got = harness.read(out, np.float32, 8 * n).reshape(n, 8)
    f = np.float32
    ref = np.stack([x / y, np.sqrt(np.abs(x)), np.floor(x * f(3.5)) + np.ceil(y),
                    np.trunc(x * f(100)).astype(np.int32).astype(f),
                    np.maximum(x, y) * np.minimum(x, y),
                    (x.astype(np.float64) * y + 1.25).astype(f),
                    (np.abs(y) * f(1000)).astype(np.uint32).astype(f),
                    np.where(x > y, x - y, y * f(0.5))], axis=1)
    # division goes through v_rcp/v_div_* sequences: 1 ulp; the rest is exact
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=2e-7)
    assert np.array_equal(got[:, 1:], ref[:, 1:])


def test_math_library_expansions(harness, code):
    n = 200
    x = (np.random.default_rng(4).standard_normal(n) * 3).astype(np.float32)
    out = harness.alloc(32 * n)
    counter = harness.buffer(np.zeros(1, np.int32))
    harness.dispatch(code, "misc", (n,), (64,), [out, harness.buffer(x), counter, n])
    got = harness.read(out, np.float32, 8 * n).reshape(n, 8)
    f = np.float32
    d = x.astype(np.float64) * 1.000001
    h16 = x.astype(np.float16)
    ll = (x * f(1000)).astype(np.int64)
    acc = np.array([sum(f(np.sin(f(x[j] + k))) * f(0.5) for k in range(j % 7)) for j in range(n)],
                   np.float64)
    ref = np.stack([d * d, h16.astype(np.float64) ** 2 + 1.5,
                    np.trunc(ll / 7) + np.fmod(ll, 5), acc, np.exp(x * f(0.1)),
                    np.log(np.abs(x) + f(1)),
                    [bin(v).count("1") + 32 - (v + 1).bit_length() for v in range(n)],
                    (np.abs(x.astype(np.float64)) + 0.5) ** 1.7], axis=1)
    tol = np.array([1e-7, 2e-3, 0, 1e-6, 1e-6, 1e-6, 0, 1e-6])  # half math rounds to f16
    assert np.all(np.abs(got - ref) <= tol * np.maximum(np.abs(ref), 1)), np.abs(got - ref).max(0)
    assert harness.read(counter, np.int32, 1)[0] == n


def test_double_division_and_clamps(harness, code):
    n = 100
    rng = np.random.default_rng(8)
    a = (rng.standard_normal(n) * 4).astype(np.float32)
    b = (rng.standard_normal(n) * 4).astype(np.float32)
    out = harness.alloc(12 * n)
    harness.dispatch(code, "ddiv_clamp", (n,), (32,),
                     [out, harness.buffer(a), harness.buffer(b), n])
    got = harness.read(out, np.float32, 3 * n).reshape(n, 3)
    ref = ((a.astype(np.float64) + 1e-9) / (b.astype(np.float64) * 1.1)).astype(np.float32)
    np.testing.assert_allclose(got[:, 0], ref, rtol=1e-7)  # v_div_*_f64 sequence
    np.testing.assert_array_equal(got[:, 1], np.minimum(np.maximum(a, np.float32(-0.5)), b))
    third = np.where(a > 0, (a * np.float32(7)).astype(np.uint32), 3) % 5
    np.testing.assert_array_equal(got[:, 2], third.astype(np.float32))


def test_calls_stack_and_generic_pointers(harness, code):
    x = np.random.default_rng(3).random(128).astype(np.float32)
    out = harness.alloc(4 * 128)
    harness.dispatch(code, "gen_ptrs", (128,), (64,), [out, harness.buffer(x)])
    ref = np.zeros(128, np.float64)
    for i in range(128):
        lane, wg = i % 64, i // 64
        tmp = x[wg * 64:(wg + 1) * 64].astype(np.float64) * 2
        priv = [x[(i + j) % 128] for j in range(8)]
        k = lane % 3 + 1
        ref[i] = (tmp[lane % 32] + tmp[lane % 32 + 1] + tmp[lane % 32 + 2]
                  + x[i % 64] + x[i % 64 + 2] + x[i % 64 + 4] + priv[0] + priv[k] + priv[2 * k])
    np.testing.assert_allclose(harness.read(out, np.float32, 128), ref, rtol=1e-6)


def test_workgroups_run_in_batches(harness, code, monkeypatch):
    """A grid larger than one batch of wide state runs batch after batch (LDS per batch)."""
    from hsa.virtual.isa import executor as gfx11_executor

    monkeypatch.setattr(gfx11_executor, "BATCH_BYTES", 1)  # one workgroup per batch
    n, block = 1000, 128
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    groups = -(-n // block)
    out = harness.alloc(4 * groups)
    harness.dispatch(code, "lds_reduce", (groups * block,), (block,),
                     [out, harness.buffer(x), n])
    padded = np.zeros(groups * block, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(harness.read(out, np.float32, groups),
                               padded.reshape(groups, block).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_empty_grid_runs_nothing(harness, code):
    out = harness.buffer(np.zeros(4, np.uint32))
    harness.dispatch(code, "fill", (0,), (64,), [out, 7, 4])
    assert not harness.read(out, np.uint32, 4).any()


def test_flat_access_mixing_apertures(harness, code):
    n = 128
    x = np.arange(n, dtype=np.float32)
    xa = harness.buffer(x)
    out = harness.alloc(4 * n)
    harness.dispatch(code, "mixed_ptrs", (n,), (64,), [out, xa])
    lane = np.arange(n) % 64
    kind = lane % 3
    tmp = np.where(kind == 0, x * 2 + 1, x)
    new_in = np.where(kind == 1, x * 2 + 1, x)
    priv = np.where(kind == 2, (x + 100) * 2 + 1, x + 100)
    np.testing.assert_array_equal(harness.read(out, np.float32, n), tmp + new_in + priv)
    np.testing.assert_array_equal(harness.read(xa, np.float32, n), new_in)


def test_out_of_bounds_write_faults_with_kernel_pc_and_address(harness, code):
    out = harness.alloc(4 * 64)
    # The harness's allocations live at host addresses, so a fixed distance past `out` may
    # land in another of them (order-dependent): step on until the 64 stores hit nothing.
    offset = 100000
    while harness.memory.overlaps(out + 4 * offset, 4 * 64):
        offset += 4096
    with pytest.raises(MemoryFault) as info:
        harness.dispatch(code, "oob_write", (64,), (64,), [out, offset])
    e = info.value
    assert e.status == HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION
    assert e.address == out + 4 * offset
    text = str(e)
    assert "kernel oob_write" in text and f"address 0x{e.address:x}" in text
    # the pc as llvm-objdump shows it: an offset in the code object, with the mnemonic
    where = text.split(" at code-object offset ")[1].split(":")[0]
    offset, mnemonic = int(where.split()[0], 16), where.split()[1].strip("()")
    assert 0 <= offset < code.size and mnemonic.startswith("global_store")
    assert f"0x{code.base + offset:x}" not in text  # no host addresses of the code


def test_trap_is_a_queue_exception(harness, code):
    out = harness.alloc(4 * 64)
    harness.dispatch(code, "trap_if", (64,), (64,), [out, 1000])  # nobody traps
    assert np.array_equal(harness.read(out, np.uint32, 64), np.arange(64))
    with pytest.raises(HsaError) as info:
        harness.dispatch(code, "trap_if", (64,), (64,), [out, 5])
    assert info.value.status == HSA_STATUS_ERROR_EXCEPTION
    assert "kernel trap_if executed s_trap" in str(info.value)


def missing_barrier_case(dev, code: dict) -> None:
    """`code`: {"fill": bundle, "copy": bundle} for dev's target. Fill then copy, recorded
    with and without a barrier between them: with one the copy sees the fill's values."""
    n = 256
    fill = dev.load(code["fill"]).kernel("fill")
    copy = dev.load(code["copy"]).kernel("copy")
    for with_barrier in (True, False):
        cb = dev.command_buffer()
        src, dst = cb.binding(0), cb.binding(1)
        cb.dispatch(fill, n, 64, (src, np.float32(5.0), n))
        if with_barrier:
            cb.barrier()
        cb.dispatch(copy, n, 64, (dst, src, n))
        cb.finalize()
        a, b = dev.buffer(n * 4), dev.buffer(n * 4)
        dev.submit(cb, [a, b]).wait(30)
        assert (a.to_numpy(np.float32) == 5.0).all()
        expected = 5.0 if with_barrier else 0.0
        assert (b.to_numpy(np.float32) == expected).all()
