"""KernargLayout against code-object metadata (clang-compiled objects), pure: no device."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amdgpu.buffer import Buffer
from amdgpu.errors import KernelArgumentError
from amdgpu.hsa_backend.kernargs import KernargLayout, KernargRing
from hsa.abi.codeobject import KernelArg, read_code_object

pytestmark = pytest.mark.generic

SOURCE = r"""
__kernel void saxpy(__global float *y, __global const float *x, float a, uint n) {
  size_t i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void mixed(__global int *out, char c, short s, long l, double d, __global int *o2,
                    __local int *lds) {
  out[0] = c + s + (int)l + (int)d + get_local_size(1) + get_num_groups(2); o2[0] = lds[0];
}
__kernel void noargs(void) {}
"""


@pytest.fixture(scope="module")
def code_object(tmp_path_factory):
    from compiler.clang import compile_opencl

    path = tmp_path_factory.mktemp("kernargs") / "k.cl"
    path.write_text(SOURCE)
    return read_code_object(compile_opencl(path, "gfx1100", code_object_version=5))


def _buf(address: int) -> Buffer:
    return Buffer(None, address, 4096)


def test_layout_matches_metadata_offsets(code_object):
    for info in code_object.kernels.values():
        layout = KernargLayout.from_kernel(info)
        last = max((a.offset + a.size for a in info.args), default=1)
        assert layout.size == (last + 15) // 16 * 16  # every listed arg, nothing more
        assert layout.size % 16 == 0 and layout.dtype.itemsize == layout.size
        fields = {off: name for name, (_, off) in layout.dtype.fields.items()}
        for arg in info.args:
            assert arg.offset in fields, (info.name, arg)
            assert layout.dtype.fields[fields[arg.offset]][0].itemsize == arg.size
        assert len(layout.explicit) == len(info.explicit_args)


def test_saxpy_block_bytes(code_object):
    info = code_object.kernels["saxpy"]
    layout = KernargLayout.from_kernel(info)
    mem = memoryview(bytearray(layout.size + 32))
    layout.fill(
        mem, 16, (_buf(0x1000), _buf(0x2000), np.float32(2.5), 1000), (1000, 1, 1), (256, 1, 1), 1
    )
    rec = np.frombuffer(mem[16 : 16 + layout.size], layout.dtype)[0]
    by_kind = {a.value_kind: a.offset for a in info.hidden_args}
    raw = bytes(mem[16 : 16 + layout.size])
    assert struct.unpack_from("<QQfI", raw, 0) == (0x1000, 0x2000, 2.5, 1000)
    assert struct.unpack_from("<I", raw, by_kind["hidden_block_count_x"])[0] == 3  # floor
    assert struct.unpack_from("<H", raw, by_kind["hidden_group_size_x"])[0] == 256
    assert struct.unpack_from("<H", raw, by_kind["hidden_remainder_x"])[0] == 1000 % 256
    assert struct.unpack_from("<H", raw, by_kind["hidden_grid_dims"])[0] == 1
    assert struct.unpack_from("<Q", raw, by_kind["hidden_global_offset_x"])[0] == 0
    assert rec[0] == 0x1000  # the structured dtype reads the same bytes


def test_mixed_types_dynamic_lds_and_3d(code_object):
    info = code_object.kernels["mixed"]
    layout = KernargLayout.from_kernel(info)
    assert [a.kind for a in layout.explicit] == [
        "buffer",
        "value",
        "value",
        "value",
        "value",
        "buffer",
        "dynamic_lds",
    ]
    mem = memoryview(bytearray(layout.size))
    layout.fill(
        mem,
        0,
        (_buf(0x10), -3, -300, -(1 << 40), 1.5, _buf(0x20), None),
        (64, 30, 5),
        (8, 4, 2),
        3,
        dynamic_lds=512,
    )
    raw = bytes(mem)
    offs = [a.offset for a in info.explicit_args]
    assert struct.unpack_from("<b", raw, offs[1])[0] == -3
    assert struct.unpack_from("<h", raw, offs[2])[0] == -300
    assert struct.unpack_from("<q", raw, offs[3])[0] == -(1 << 40)
    assert struct.unpack_from("<d", raw, offs[4])[0] == 1.5
    h = {a.value_kind: a.offset for a in info.hidden_args}
    assert struct.unpack_from("<III", raw, h["hidden_block_count_x"]) == (8, 7, 2)
    assert struct.unpack_from("<HHH", raw, h["hidden_group_size_x"]) == (8, 4, 2)
    assert struct.unpack_from("<HHH", raw, h["hidden_remainder_x"]) == (0, 2, 1)
    assert struct.unpack_from("<H", raw, h["hidden_grid_dims"])[0] == 3
    assert struct.unpack_from("<I", raw, h["hidden_dynamic_lds_size"])[0] == 512


def test_wrong_arguments_name_kernel_and_argument(code_object):
    layout = KernargLayout.from_kernel(code_object.kernels["saxpy"])
    mem = memoryview(bytearray(layout.size))
    geom = ((64, 1, 1), (64, 1, 1), 1)
    cases = [
        ((_buf(1), _buf(2), 1.0), "takes 4 argument"),
        ((_buf(1), 7.0, 1.0, 4), "argument 1"),
        ((_buf(1), _buf(2), _buf(3), 4), "argument 2"),
        ((_buf(1), _buf(2), 1.0, 2.5), "argument 3"),
        ((_buf(1), _buf(2), 1.0, 1 << 33), "cannot hold"),
        ((_buf(1), _buf(2), 1.0, True), "argument 3"),
    ]
    for args, words in cases:
        with pytest.raises(KernelArgumentError) as e:
            layout.fill(mem, 0, args, *geom)
        assert "saxpy" in str(e.value) and words in str(e.value), str(e.value)
        assert "\n" not in str(e.value)


def test_negative_int_into_unsigned_is_twos_complement(code_object):
    layout = KernargLayout.from_kernel(code_object.kernels["saxpy"])
    raw = layout.pack((_buf(1), _buf(2), 1.0, -1), (64, 1, 1), (64, 1, 1), 1)
    assert struct.unpack_from("<I", raw, 20)[0] == 0xFFFFFFFF


def test_no_args_kernel(code_object):
    layout = KernargLayout.from_kernel(code_object.kernels["noargs"])
    mem = memoryview(bytearray(layout.size))
    layout.fill(mem, 0, (), (1, 1, 1), (1, 1, 1), 1)
    with pytest.raises(KernelArgumentError):
        layout.fill(mem, 0, (1,), (1, 1, 1), (1, 1, 1), 1)


def _iree_args(bindings: int, constants: int) -> list[KernelArg]:
    args = [
        KernelArg(None, None, 8 * i, 8, "global_buffer", "global", None, False)
        for i in range(bindings)
    ]
    args += [
        KernelArg(None, None, 8 * bindings + 4 * i, 4, "by_value", None, None, False)
        for i in range(constants)
    ]
    return args


def test_iree_abi_bindings_then_i32_constants():
    layout = KernargLayout("iree_dispatch_0", _iree_args(3, 2), 8 * 3 + 8, 8)
    raw = layout.pack(
        (_buf(0x100), _buf(0x200), _buf(0x300), 7, np.float32(1.0)), (64, 1, 1), (64, 1, 1), 1
    )
    assert struct.unpack_from("<QQQII", raw, 0) == (0x100, 0x200, 0x300, 7, 0x3F800000)
    assert layout.buffer_offsets == [0, 8, 16]


@settings(max_examples=60, deadline=None)
@given(
    grid=st.tuples(st.integers(1, 5000), st.integers(1, 300), st.integers(1, 40)),
    block=st.tuples(st.integers(1, 16), st.integers(1, 8), st.integers(1, 8)),
    a=st.floats(-1e6, 1e6, width=32),
    n=st.integers(0, (1 << 32) - 1),
)
def test_fast_path_equals_checked_path(code_object, grid, block, a, n):
    info = code_object.kernels["mixed"]
    layout = KernargLayout.from_kernel(info)
    args = (_buf(0x1000), 5, 6, n, a, _buf(0x2000), None)
    mem = memoryview(bytearray(layout.size))
    layout.fill(mem, 0, args, grid, block, 3)
    assert bytes(mem) == layout.pack(args, grid, block, 3)
    h = {x.value_kind: x.offset for x in info.hidden_args}
    counts = struct.unpack_from("<III", mem, h["hidden_block_count_x"])
    rem = struct.unpack_from("<HHH", mem, h["hidden_remainder_x"])
    for axis in range(3):
        assert counts[axis] * block[axis] + rem[axis] == grid[axis]


def test_kernarg_ring_reclaims_by_timeline_value():
    completed = [0]
    waited = []

    def wait(value, timeout):
        waited.append(value)
        completed[0] = value

    mem = np.zeros(1024 + KernargRing.RING_SLACK, np.uint8)
    ring = KernargRing(0x10000, mem, lambda: completed[0], wait)
    offs = [ring.allocate(300, v) for v in (1, 2, 3)]
    assert offs == [0, 304, 608] and all(o % 16 == 0 for o in offs)
    # full: the next block waits for value 1, then reuses its space (wrap to 0)
    assert ring.allocate(300, 4) == 0
    assert waited == [1]
    completed[0] = 3
    assert ring.allocate(600, 5) == 304
    with pytest.raises(KernelArgumentError):
        ring.allocate(2048, 6)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 3)), min_size=1, max_size=60))
def test_kernarg_ring_never_hands_out_live_memory(steps):
    """Random sizes and completions: a block handed out never overlaps a block whose
    submission has not completed, and stays inside the usable capacity, 16-byte aligned."""
    state = {"completed": 0}

    def wait(value, timeout):
        state["completed"] = max(state["completed"], value)

    mem = np.zeros(1024 + KernargRing.RING_SLACK, np.uint8)
    ring = KernargRing(0, mem, lambda: state["completed"], wait)
    live: dict[int, tuple[int, int]] = {}
    for value, (nbytes, completes) in enumerate(steps, start=1):
        state["completed"] = min(value - 1, state["completed"] + completes)
        start = ring.allocate(nbytes, value)
        end = start + nbytes
        assert start % 16 == 0 and end <= ring.capacity
        done = state["completed"]
        for v, (s, e) in list(live.items()):
            if v <= done:
                del live[v]
            else:
                assert end <= s or start >= e, (start, end, s, e, v, done)
        live[value] = (start, end)


def test_padding_between_explicit_and_hidden_args():
    """Explicit args ending at 20 with hidden args from 24: the block is still whole."""
    args = [
        KernelArg(None, "float*", 0, 8, "global_buffer", "global", None, False),
        KernelArg(None, "float", 8, 4, "by_value", None, None, False),
        KernelArg(None, "uint", 12, 4, "by_value", None, None, False),
        KernelArg(None, "uint", 16, 4, "by_value", None, None, False),
        KernelArg(None, None, 24, 4, "hidden_block_count_x", None, None, True),
        KernelArg(None, None, 36, 2, "hidden_group_size_x", None, None, True),
    ]
    layout = KernargLayout("padded", args, 280, 8)
    mem = memoryview(bytearray(layout.size))
    layout.fill(mem, 0, (_buf(0x40), 1.0, 2, 3), (256, 1, 1), (64, 1, 1), 1)
    assert bytes(mem) == layout.pack((_buf(0x40), 1.0, 2, 3), (256, 1, 1), (64, 1, 1), 1)
    assert struct.unpack_from("<QfIIxxxxI", mem, 0) == (0x40, 1.0, 2, 3, 4)


def test_hidden_bytes_of_an_interleaved_layout():
    """A hand-built layout whose explicit args come after hidden ones (no fast path):
    hidden_bytes is the block from the first hidden arg on, each hidden value where its
    metadata offset says (hsa.abi.hidden_args computes them), the explicit slots zero, and
    the whole block packs the same with it as without."""
    from hsa.abi.hidden_args import hidden_value

    args = [
        KernelArg(None, "float*", 0, 8, "global_buffer", "global", None, False),
        KernelArg(None, None, 8, 4, "hidden_block_count_x", None, None, True),
        KernelArg(None, "uint", 12, 4, "by_value", None, None, False),  # after a hidden arg
        KernelArg(None, None, 16, 2, "hidden_group_size_x", None, None, True),
        KernelArg(None, None, 18, 2, "hidden_none", None, None, True),
        KernelArg(None, "float", 20, 4, "by_value", None, None, False),
        KernelArg(None, None, 24, 4, "hidden_remainder_x", None, None, True),
    ]
    layout = KernargLayout("interleaved", args, 32, 8)
    assert layout._fast is None and layout.hidden_start == 8
    grid, block = (1000, 1, 1), (64, 1, 1)
    hidden = layout.hidden_bytes(grid, block, 1)
    assert len(hidden) == layout.size - 8
    for kind, off, size in (("hidden_block_count_x", 8, 4), ("hidden_group_size_x", 16, 2),
                            ("hidden_remainder_x", 24, 4)):
        got = int.from_bytes(hidden[off - 8 : off - 8 + size], "little")
        assert got == hidden_value(kind, grid, block, 1), kind
    assert hidden[12 - 8 : 16 - 8] == bytes(4) and hidden[20 - 8 : 24 - 8] == bytes(4)
    whole = layout.pack((_buf(0x40), 7, 2.5), grid, block, 1)
    count, rem = (hidden_value(k, grid, block, 1) for k in ("hidden_block_count_x",
                                                             "hidden_remainder_x"))
    assert struct.unpack_from("<QIIHHfI", whole) == (0x40, count, 7, 64, 0, 2.5, rem)
    assert whole[8:] == bytes(a | b for a, b in zip(hidden, whole[8:], strict=True))
    mem = memoryview(bytearray(layout.size))
    layout.fill(mem, 0, (_buf(0x40), 7, 2.5), grid, block, 1)  # the checked path
    assert bytes(mem) == whole
