"""Builders, batch builders, decode/encode and text forms: hypothesis round trips and the
rejection of invalid fields."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packets
from amdgpu.errors import PacketError

pytestmark = pytest.mark.generic

U64 = st.integers(0, (1 << 64) - 1)
U32 = st.integers(0, (1 << 32) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
SCOPE = st.sampled_from(list(packets.FenceScope))
COMMON = st.fixed_dictionaries(
    {"barrier": st.booleans(), "acquire_fence_scope": SCOPE, "release_fence_scope": SCOPE}
)
FAST = settings(max_examples=150, deadline=None)


@st.composite
def dispatch_kwargs(draw):
    dims = draw(st.integers(1, 3))
    wg, budget = [], 1024
    for _ in range(dims):
        w = draw(st.integers(1, budget))
        wg.append(w)
        budget //= w
    grid = [draw(st.integers(1, (1 << 32) - 1)) for _ in range(dims)]
    return dict(
        workgroup_size=tuple(wg), grid_size=tuple(grid),
        private_segment_size=draw(U32), group_segment_size=draw(U32),
        kernel_object=draw(st.integers(1, (1 << 64) - 1)),
        kernarg_address=draw(st.integers(1, (1 << 60) - 1)) * 16,
        completion_signal=draw(U64), **draw(COMMON),
    )


VALID = {
    "kernel_dispatch": (packets.kernel_dispatch, dispatch_kwargs()),
    "barrier_and": (packets.barrier_and, st.fixed_dictionaries(
        {"dep_signals": st.lists(U64, max_size=5), "completion_signal": U64})),
    "barrier_or": (packets.barrier_or, st.fixed_dictionaries(
        {"dep_signals": st.lists(U64, max_size=5), "completion_signal": U64})),
    "agent_dispatch": (packets.agent_dispatch, st.fixed_dictionaries(
        {"type": st.integers(0, 0xFFFF), "return_address": U64,
         "args": st.lists(U64, max_size=4), "completion_signal": U64})),
    "barrier_value": (packets.barrier_value, st.fixed_dictionaries(
        {"signal": U64, "value": I64, "mask": I64,
         "cond": st.sampled_from(list(packets.BarrierValueCondition)),
         "completion_signal": U64})),
}


@pytest.mark.parametrize("kind", sorted(VALID))
def test_encode_decode_encode_round_trip(kind):
    builder, strategy = VALID[kind]

    @FAST
    @given(strategy, COMMON)
    def check(kwargs, common):
        kwargs = {**common, **kwargs}
        raw = builder(**kwargs)
        assert isinstance(raw, bytes) and len(raw) == 64
        fields = packets.decode(raw)
        assert fields["kind"] == kind
        assert fields["barrier"] == kwargs["barrier"]
        assert fields["acquire_fence_scope"] == kwargs["acquire_fence_scope"]
        assert fields["release_fence_scope"] == kwargs["release_fence_scope"]
        assert fields["completion_signal"] == kwargs["completion_signal"]
        assert packets.encode(fields) == raw
        # the structured dtype reads what the builder wrote
        rec = np.frombuffer(raw, packets.dtype_for(fields["type"], fields.get("AmdFormat")))[0]
        assert int(rec["header"]) == fields["header"]
        assert int(rec["completion_signal"]) == kwargs["completion_signal"]
        # text forms never fail and name the packet type
        assert packets.format_packet(raw).split()[0] in (fields["type"].name,
                                                          "AMD_BARRIER_VALUE")
        assert "\n" in packets.format_packet(raw, multiline=True)

    check()


@FAST
@given(dispatch_kwargs())
def test_dispatch_fields_survive_decoding(kw):
    fields = packets.decode(packets.kernel_dispatch(**kw))
    dims = len(kw["workgroup_size"])
    assert fields["dims"] == dims
    wg = (fields["workgroup_size_x"], fields["workgroup_size_y"], fields["workgroup_size_z"])
    grid = (fields["grid_size_x"], fields["grid_size_y"], fields["grid_size_z"])
    assert wg == tuple(kw["workgroup_size"]) + (1,) * (3 - dims)
    assert grid == tuple(kw["grid_size"]) + (1,) * (3 - dims)
    assert fields["kernarg_address"] == kw["kernarg_address"]
    assert fields["kernel_object"] == kw["kernel_object"]


@FAST
@given(st.lists(dispatch_kwargs(), min_size=1, max_size=20))
def test_batch_equals_single_builds(kws):
    def padded(key):
        return np.array([list(k[key]) + [1] * (3 - len(k[key])) for k in kws])

    def col(key, dtype=np.uint64):
        return np.array([int(k[key]) for k in kws], dtype=dtype)

    block = packets.kernel_dispatch_batch(
        workgroup_size=padded("workgroup_size"), grid_size=padded("grid_size"),
        dims=np.array([len(k["workgroup_size"]) for k in kws]),
        private_segment_size=col("private_segment_size"),
        group_segment_size=col("group_segment_size"), kernel_object=col("kernel_object"),
        kernarg_address=col("kernarg_address"), completion_signal=col("completion_signal"),
        barrier=col("barrier", bool), acquire_fence_scope=col("acquire_fence_scope", int),
        release_fence_scope=col("release_fence_scope", int),
    )
    assert block.dtype == packets.KERNEL_DISPATCH
    assert block.tobytes() == b"".join(packets.kernel_dispatch(**k) for k in kws)
    assert [packets.encode(f) for f in packets.decode_many(block)] == [
        packets.kernel_dispatch(**k) for k in kws]


def test_batch_scalars_broadcast_and_dims_inferred():
    block = packets.kernel_dispatch_batch(
        workgroup_size=(8, 8), grid_size=(64, 32), kernel_object=0x1000,
        kernarg_address=np.arange(4, dtype=np.uint64) * 64 + 0x10000)
    assert len(block) == 4
    assert (block["setup"] == 2).all()
    assert list(block["kernarg_address"]) == [0x10000, 0x10040, 0x10080, 0x100C0]
    assert block[2].tobytes() == packets.kernel_dispatch(
        workgroup_size=(8, 8), grid_size=(64, 32), kernel_object=0x1000,
        kernarg_address=0x10080)
    one_d = packets.kernel_dispatch_batch(workgroup_size=np.array([64, 128]),
                                          grid_size=4096, kernel_object=1, kernarg_address=16)
    assert list(one_d["workgroup_size_x"]) == [64, 128] and (one_d["setup"] == 1).all()
    counted = packets.barrier_and_batch(dep_signals=[7, 8], count=3)
    assert len(counted) == 3 and (counted["dep_signal"][:, :2] == [7, 8]).all()


def test_barrier_value_unsigned_spelling_is_the_same_bits():
    a = packets.barrier_value(signal=1, value=-1, mask=-1, cond=0)
    b = packets.barrier_value(signal=1, value=(1 << 64) - 1, mask=(1 << 64) - 1, cond=0)
    assert a == b
    assert packets.decode(a)["AmdFormat"] == packets.AmdVendorFormat.BARRIER_VALUE
    assert packets.decode(a)["type"] == packets.PacketType.VENDOR_SPECIFIC


def test_header_setup_helpers():
    h = packets.encode_header(packets.PacketType.BARRIER_OR, False, 1, 2)
    assert h == 5 | 1 << 9 | 2 << 11
    assert packets.decode_header(h) == {
        "type": packets.PacketType.BARRIER_OR, "barrier": False,
        "acquire_fence_scope": packets.FenceScope.AGENT,
        "release_fence_scope": packets.FenceScope.SYSTEM,
    }
    assert packets.decode_setup(packets.encode_setup(3)) == 3
    assert packets.decode(packets.invalid())["kind"] == "invalid"


BASE = dict(workgroup_size=64, grid_size=1024, kernel_object=0x1000, kernarg_address=0x2000)


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(dims=0), "dims=0"),
        (dict(dims=4), "dims=4"),
        (dict(workgroup_size=(8, 8), dims=1), "beyond dims"),
        (dict(grid_size=(64, 64, 2), dims=2), "beyond dims"),
        (dict(workgroup_size=0), "< 1"),
        (dict(workgroup_size=(32, 0)), "< 1"),
        (dict(workgroup_size=(64, 32)), "at most 1024"),
        (dict(workgroup_size=2048), "at most 1024"),
        (dict(grid_size=0), "grid_size"),
        (dict(grid_size=1 << 32), "grid_size_x"),
        (dict(workgroup_size=(1, 2, 3, 4)), "1 to 3"),
        (dict(kernel_object=0), "kernel_object is 0"),
        (dict(kernarg_address=0), "kernarg_address is 0"),
        (dict(kernarg_address=0x2008), "16-byte"),
        (dict(acquire_fence_scope=3), "acquire_fence_scope=3"),
        (dict(release_fence_scope=-1), "release_fence_scope=-1"),
        (dict(private_segment_size=1 << 32), "private_segment_size"),
        (dict(completion_signal=-1), "completion_signal"),
        (dict(kernel_object=1 << 64), "kernel_object"),
    ],
)
def test_invalid_dispatch_fields_are_rejected(change, words):
    with pytest.raises(PacketError) as err:
        packets.kernel_dispatch(**{**BASE, **change})
    message = str(err.value)
    assert words in message and "\n" not in message


@pytest.mark.parametrize(
    "build",
    [
        lambda: packets.barrier_and(dep_signals=[1] * 6),
        lambda: packets.barrier_or(dep_signals=[1] * 6),
        lambda: packets.barrier_and(dep_signals=[-1]),
        lambda: packets.barrier_or(dep_signals=[1], acquire_fence_scope=3),
        lambda: packets.barrier_value(signal=1, value=0, cond=4),
        lambda: packets.barrier_value(signal=1, value=1 << 64, cond=0),
        lambda: packets.barrier_value(signal=-1, value=0, cond=0),
        lambda: packets.agent_dispatch(type=1 << 16),
        lambda: packets.agent_dispatch(type=1, args=[0] * 5),
    ],
)
def test_invalid_barrier_and_agent_fields_are_rejected(build):
    with pytest.raises(PacketError):
        build()


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(workgroup_size=np.array([64, 2048])), "packet 1"),
        (dict(grid_size=np.array([[4, 4], [4, 0]])), "packet 1"),
        (dict(workgroup_size=np.array([[8, 8], [8, 8]]), dims=np.array([2, 1])), "packet 1"),
        (dict(kernarg_address=np.array([16, 32, 40], dtype=np.uint64)), "packet 2"),
        (dict(kernel_object=np.array([1, 0])), "packet 1"),
        (dict(dims=np.array([1, 4])), "packet 1"),
        (dict(acquire_fence_scope=np.array([0, 3])), "acquire_fence_scope"),
        (dict(completion_signal=np.array([-1, 0])), "completion_signal"),
        (dict(kernel_object=np.array([1, 2]), kernarg_address=np.array([16, 32, 48])),
         "different lengths"),
    ],
)
def test_batch_validation_names_the_first_bad_packet(change, words):
    with pytest.raises(PacketError) as err:
        packets.kernel_dispatch_batch(**{**BASE, **change})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_batch_barrier_rejections():
    with pytest.raises(PacketError, match="at most 5"):
        packets.barrier_and_batch(dep_signals=np.ones((3, 6), np.uint64))
    with pytest.raises(PacketError, match="cond"):
        packets.barrier_value_batch(signal=1, value=0, cond=np.array([0, 9]))
    with pytest.raises(PacketError, match="at most 4"):
        packets.agent_dispatch_batch(type=1, args=np.zeros((2, 5), np.uint64))


def test_decode_rejects_wrong_sizes():
    with pytest.raises(PacketError, match="64 bytes"):
        packets.decode(b"\x00" * 63)
    with pytest.raises(PacketError, match="multiple of 64"):
        packets.decode_many(b"\x00" * 65)


@FAST
@given(st.lists(st.integers(1, 2048), min_size=1, max_size=3), st.data())
def test_workgroup_products_over_1024_are_always_rejected(wg, data):
    kw = {**BASE, "workgroup_size": tuple(wg), "grid_size": (64,) * len(wg)}
    product = int(np.prod(wg))
    if product > packets.MAX_WORKGROUP_PRODUCT:
        with pytest.raises(PacketError, match="at most 1024"):
            packets.kernel_dispatch(**kw)
        with pytest.raises(PacketError, match="packet 0"):
            packets.kernel_dispatch_batch(**{**kw, "workgroup_size": np.array([wg])})
    else:
        assert packets.decode(packets.kernel_dispatch(**kw))["workgroup_size_x"] == wg[0]


@FAST
@given(st.integers(1, (1 << 64) - 1), st.integers(0, 3), st.integers(0, 3))
def test_misaligned_kernargs_and_bad_scopes_are_rejected(address, acquire, release):
    kw = {**BASE, "kernarg_address": address, "acquire_fence_scope": acquire,
          "release_fence_scope": release}
    if address % 16 or acquire == 3 or release == 3:
        with pytest.raises(PacketError):
            packets.kernel_dispatch(**kw)
        with pytest.raises(PacketError):
            packets.kernel_dispatch_batch(**{**kw, "kernarg_address": np.uint64(address)})
    else:
        raw = packets.kernel_dispatch(**kw)
        assert packets.decode(raw)["kernarg_address"] == address
