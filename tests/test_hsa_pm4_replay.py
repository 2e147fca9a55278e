"""PM4 command buffers on the HSA path (amdgpu/hsa_backend/pm4_replay.py): a finalized
command buffer replays as ONE PM4_IB AQL packet jumping to a resident PM4 indirect buffer,
and gives the results of the AQL path, on the virtual gfx90a, gfx942, gfx1100 and gfx1201 and
under ROCr 5.2.3 over the emulated kernel (gfx90a). The kernels are OpenCL C compiled by the
project's clang; the oracle is numpy and the AQL replay of the same command buffer."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import require_clang

import amdgpu
import packets
from amdgpu.errors import DeviceError, HsaUnavailable, KernelArgumentError
from amdgpu.hsa_backend import pm4_replay
from packets import pm4

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.runs_kernels]

SOURCE = r"""
__kernel void saxpy(__global float *y, __global const float *x, float a, uint n) {
  size_t i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void mirror(__global float *out, __global const float *in, uint n) {
  __local float tile[64];
  uint l = get_local_id(0);
  size_t g = get_global_id(0);
  tile[l] = g < n ? in[g] : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (g < n) out[g] = tile[l ^ 63] * 2.0f + (float)get_group_id(0);
}
__kernel void scratchy(__global float *out, uint k) {
  volatile float priv[64];
  for (uint i = 0; i < 64; i++) priv[i] = (float)i;
  out[get_global_id(0)] = priv[(get_global_id(0) + k) & 63];
}
__kernel void fields(__global uint *out) {
  __constant ushort *p = (__constant ushort *)__builtin_amdgcn_dispatch_ptr();
  if (get_global_id(0) == 0) {
    out[0] = p[2];
    out[1] = ((__constant uint *)p)[3];
  }
}
"""
N = 1000  # not a multiple of 64: the PM4 dispatch takes thread counts (partial workgroups)
M = 960  # a multiple of 64: workgroup counts
TARGETS = ("gfx90a", "gfx942", "gfx1100", "gfx1201")
_CODE: dict[str, bytes] = {}


def _code(target: str, tmp_path_factory) -> bytes:
    if target not in _CODE:
        require_clang()
        from compiler.clang import compile_opencl

        path = tmp_path_factory.mktemp("pm4cb") / "k.cl"
        path.write_text(SOURCE)
        _CODE[target] = compile_opencl(path, target, code_object_version=5)
    return _CODE[target]


def _record(dev, code, mode):
    exe = dev.load(code)
    saxpy, mirror, fields = (exe.kernel(n) for n in ("saxpy", "mirror", "fields"))
    cb = dev.command_buffer(mode=mode)
    y, x, out, f = (cb.binding(i) for i in range(4))
    cb.dispatch(saxpy, N, 64, (y, x, np.float32(2.0), np.uint32(N)))
    cb.barrier()  # the second saxpy reads what the first wrote
    cb.dispatch(saxpy, N, 64, (y, x, np.float32(0.5), np.uint32(N)))
    cb.barrier()  # mirror reads y after both saxpys
    cb.dispatch(mirror, M, 64, (out, y, np.uint32(M)))
    cb.dispatch(fields, 100, 32, (f,))  # independent of mirror: no barrier between them
    cb.kernels_ = (saxpy, mirror, fields)  # for the checks below
    return cb.finalize()


def _expected(x, y0, replays):
    y = y0.copy()
    for _ in range(replays):
        y = y + np.float32(2.0) * x
        y = y + np.float32(0.5) * x
    out = np.zeros_like(y)
    idx = np.arange(M)
    out[:M] = y[(idx & ~63) | ((idx & 63) ^ 63)] * np.float32(2.0) + (idx // 64).astype(
        np.float32)
    return y, out


def _run(dev, cb, replays=3):
    """Replays alternating between two binding tables; returns each table's results and
    the ring write index advance per replay."""
    rng = np.random.default_rng(7)
    tables, host = [], []
    for _ in range(2):
        x = rng.integers(0, 16, N).astype(np.float32)
        y0 = rng.integers(0, 16, N).astype(np.float32)
        host.append((x, y0))
        tables.append([dev.buffer(y0), dev.buffer(x), dev.buffer(np.zeros(N, np.float32)),
                       dev.buffer(np.zeros(2, np.uint32))])
    queue = dev.lanes_[0].queue
    advances = []
    for r in range(2 * replays):
        before = queue.load_write_index()
        dev.submit(cb, tables[r % 2])
        advances.append(queue.load_write_index() - before)
    dev.synchronize()
    got = [tuple(b.to_numpy(dt) for b, dt in zip(t, (np.float32, np.float32, np.float32,
                                                  np.uint32), strict=True))
           for t in tables]
    return got, host, advances


@pytest.mark.parametrize("target", TARGETS)
def test_pm4_and_aql_replays_agree(target, tmp_path_factory):
    code = _code(target, tmp_path_factory)
    results = {}
    for mode in ("pm4", "aql"):
        with amdgpu.open(f"amdgpu:virtual:{target}", lanes=1) as dev:
            cb = _record(dev, code, mode)
            assert cb.path == mode
            assert (cb.pm4_program is not None) == (mode == "pm4")
            got, host, advances = _run(dev, cb)
            if mode == "pm4":  # one PM4_IB vendor packet per replay of 4 dispatches
                assert advances == [1] * 6
                ring = dev.lanes_[0].queue.ring.reshape(-1, 64)
                raw = ring[(dev.lanes_[0].queue.load_write_index() - 1)
                           % dev.lanes_[0].queue.size].tobytes()
                address, dwords = pm4.parse_pm4_ib_aql_packet(raw)
                assert dwords == cb.pm4_program.dwords
            else:
                assert all(a >= 4 for a in advances)
            results[mode] = got
    for (x, y0), table in zip(host, results["pm4"], strict=True):
        y, out = _expected(x, y0, 3)
        np.testing.assert_array_equal(table[0], y)
        np.testing.assert_array_equal(table[2], out)
        assert table[3].tolist() == [32, 100]  # workgroup_size_x, grid_size_x of `fields`
    for a, b in zip(results["pm4"], results["aql"], strict=True):
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(u, v)


def test_the_pm4_buffer_holds_what_the_descriptor_says(tmp_path_factory):
    code = _code("gfx942", tmp_path_factory)
    with amdgpu.open("amdgpu:virtual:gfx942", lanes=1) as dev:
        cb = _record(dev, code, None)  # auto: PM4 on gfx942
        assert cb.path == "pm4" and cb.path_reason.startswith("auto: gfx942 is CDNA")
        saxpy = cb.kernels_[0]
        prog = cb.pm4_program
        assert prog.completed_at() == 0
        _run(dev, cb, replays=1)
        first = prog.completed_at()
        assert first > 0
        words = prog.stream()
        lines = pm4.describe_stream(words, "gfx9")
        text = "\n".join(lines)
        dispatch_lines = [ln for ln in lines if "-> dispatch program" in ln]
        assert len(dispatch_lines) == 4
        # the entry of the loaded saxpy >> 8 << 8 (COMPUTE_PGM_LO/HI), its RSRC1 as recorded
        desc = saxpy.info.descriptor
        entry = saxpy.kernel_object + desc.kernel_code_entry_byte_offset
        assert f"program 0x{entry:x}" in dispatch_lines[0]
        assert f"COMPUTE_PGM_RSRC1=0x{desc.compute_pgm_rsrc1:x}" in text
        # partial grid: thread counts (1000), whole grid: workgroup counts (960 / 64)
        assert "DISPATCH_DIRECT 1000x1x1" in text and "DISPATCH_DIRECT 15x1x1" in text
        assert "lds 512 B" in dispatch_lines[2]  # mirror's 256-byte tile: one granule
        # the kernarg pointer (the user SGPRs the enable bits ask for) is in the instance
        inst = list(prog.instances.values())[-1]  # the latest used: what stream() shows
        karg = inst.address + prog.kernarg_offset
        assert f"user SGPRs [0x{karg & 0xFFFFFFFF:x}, 0x{karg >> 32:x}]" in dispatch_lines[0]
        # two recorded barriers: a CS_PARTIAL_FLUSH + ACQUIRE_MEM each, before the second
        # saxpy and before mirror (none before `fields`); RELEASE_MEM closes the buffer
        assert text.count("EVENT_WRITE") == 2 and text.count("ACQUIRE_MEM") == 2
        flushes = [i for i, ln in enumerate(lines) if "EVENT_WRITE" in ln]
        dispatches = [i for i, ln in enumerate(lines) if "DISPATCH_DIRECT" in ln]
        assert dispatches[0] < flushes[0] < dispatches[1] < flushes[1] < dispatches[2]
        assert "RELEASE_MEM" in lines[-1] and "data_sel=GPU_CLOCK" in lines[-1]
        _run(dev, cb, replays=1)
        assert prog.completed_at() > first


def test_which_targets_take_pm4_by_default(monkeypatch):
    monkeypatch.delenv(pm4_replay.ENV, raising=False)
    for target in ("gfx90a", "gfx942", "gfx950"):
        assert pm4_replay.resolve_mode(None, target)[0] == "pm4"
    for target in ("gfx1100", "gfx1201", "gfx1250"):
        assert pm4_replay.resolve_mode(None, target)[0] == "aql"
    assert pm4_replay.resolve_mode("pm4", "gfx1100") == ("pm4", "mode=pm4")
    monkeypatch.setenv(pm4_replay.ENV, "aql")
    assert pm4_replay.resolve_mode(None, "gfx942") == ("aql", "AMDGPU_COMMAND_BUFFER=aql")
    for target, pm4_default in (("gfx942", True), ("gfx1100", False)):  # hwlab devices' row
        with amdgpu.open(f"amdgpu:virtual:{target}") as dev:
            path = dev.report().paths["pm4_command_buffers"]
            assert path.available == pm4_default and target in path.reason
    monkeypatch.setenv(pm4_replay.ENV, "fast")
    with pytest.raises(KernelArgumentError, match="AMDGPU_COMMAND_BUFFER='fast': use one of"):
        pm4_replay.resolve_mode(None, "gfx942")


def test_bad_input_is_one_line_and_submits_nothing(tmp_path_factory):
    code = _code("gfx942", tmp_path_factory)
    with amdgpu.open("amdgpu:virtual:gfx942", lanes=1) as dev, \
            amdgpu.open("amdgpu:virtual:gfx1100", lanes=1) as other:
        with pytest.raises(KernelArgumentError, match="use one of auto, pm4, aql"):
            dev.command_buffer(mode="fast")
        saxpy = dev.load(code).kernel("saxpy")
        cb = dev.command_buffer(mode="pm4")
        view = cb.binding(0).view(4096)  # the slot's binding needs 4096 + bytes
        cb.dispatch(saxpy, 64, 64, (view, cb.binding(1), np.float32(1.0), np.uint32(64)))
        cb.finalize()
        x = dev.buffer(np.ones(64, np.float32))
        y = dev.buffer(np.zeros(1024 + 64, np.float32))
        dev.submit(cb, [y, x]).wait(30)
        inst = next(iter(cb.pm4_program.instances.values()))
        kernargs = inst.kernargs.copy()
        queue = dev.lanes_[0].queue
        before = queue.load_write_index()
        small = dev.buffer(np.zeros(1000, np.float32))  # 4000 bytes < 4096
        with pytest.raises(KernelArgumentError) as e:
            dev.submit(cb, [small, x])
        assert "smaller than the 4096 bytes" in str(e.value) and "\n" not in str(e.value)
        assert queue.load_write_index() == before  # nothing submitted
        np.testing.assert_array_equal(inst.kernargs, kernargs)  # nothing patched
        # a PM4 buffer recorded for gfx942 replayed on a gfx1100 device
        other_queue = other.lanes_[0].queue
        other_before = other_queue.load_write_index()
        with pytest.raises(DeviceError) as e:
            other.submit(cb, [other.buffer(4096 + 256), other.buffer(256)])
        msg = str(e.value)
        assert "recorded for gfx942 (gfx9 registers and packets)" in msg and "gfx1100" in msg
        assert other_queue.load_write_index() == other_before
        # and at the level below the device check, a lane of another target
        with pytest.raises(DeviceError, match="is a gfx1100 queue"):
            cb.pm4_program.submit(other.lanes_[0], (y.address, x.address), (), None)
        assert other_queue.load_write_index() == other_before
        # PM4 asked for, a host operation recorded: refused at finalize
        bad = dev.command_buffer(mode="pm4")
        bad.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(1), np.float32(1.0),
                                     np.uint32(64)))
        bad.fill(bad.binding(0), np.uint8(1), 6)  # 6 bytes: a host fill
        with pytest.raises(KernelArgumentError, match="cannot replay through PM4 "
                           r"\(mode=pm4\): it holds host fill/copy operations"):
            bad.finalize()
        auto = dev.command_buffer()  # auto keeps such a buffer on AQL, saying why
        auto.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(1), np.float32(1.0),
                                      np.uint32(64)))
        auto.fill(auto.binding(0), np.uint8(1), 6)
        auto.finalize()
        assert auto.path == "aql" and "host fill/copy" in auto.path_reason
        # a kernel that needs scratch: the queue's scratch setup is not the command buffer's
        scratchy = dev.load(code).kernel("scratchy")
        assert scratchy.private_segment_size > 0
        for mode in ("pm4", None):
            sc = dev.command_buffer(mode=mode)
            sc.dispatch(scratchy, 64, 64, (sc.binding(0), np.uint32(1)))
            if mode == "pm4":
                with pytest.raises(KernelArgumentError, match="kernel 'scratchy' uses scratch"):
                    sc.finalize()
            else:
                sc.finalize()
                assert sc.path == "aql" and "uses scratch" in sc.path_reason
    with pytest.raises(DeviceError, match="was closed"):
        dev.submit(cb, [y, x])  # a replay after the device closed


def test_tables_past_the_kept_instances_take_the_aql_path(tmp_path_factory):
    code = _code("gfx942", tmp_path_factory)
    with amdgpu.open("amdgpu:virtual:gfx942", lanes=1) as dev:
        saxpy = dev.load(code).kernel("saxpy")
        cb = dev.command_buffer(mode="pm4")
        cb.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(1), np.float32(3.0),
                                    np.uint32(64)))
        cb.finalize()
        x = dev.buffer(np.arange(64, dtype=np.float32))
        ys = [dev.buffer(np.full(64, i, np.float32)) for i in range(pm4_replay.MAX_INSTANCES + 3)]
        gate = dev.provider.signal_create(1)  # hold the lane: every instance stays in flight
        dev.lanes_[0].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
        queue = dev.lanes_[0].queue
        kinds = []
        ring = queue.ring.reshape(-1, 64)
        for y in ys:
            before = queue.load_write_index()
            dev.submit(cb, [y, x])
            assert queue.load_write_index() - before == 1
            kinds.append(packets.decode(ring[before % queue.size].tobytes())["type"])
        prog = cb.pm4_program
        assert len(prog.instances) == pm4_replay.MAX_INSTANCES
        # the first 8 tables: one PM4_IB packet each; then the AQL path's dispatch packet
        k = pm4_replay.MAX_INSTANCES
        assert kinds[:k] == [packets.PacketType.VENDOR_SPECIFIC] * k
        assert kinds[k:] == [packets.PacketType.KERNEL_DISPATCH] * (len(ys) - k)
        dev.provider.signal_store(gate, 0)
        dev.synchronize()
        for i, y in enumerate(ys):
            np.testing.assert_array_equal(y.to_numpy(np.float32), i + 3.0 * np.arange(64))
        # now idle: a new table re-patches the oldest instance of the lane in place
        fresh = dev.buffer(np.zeros(64, np.float32))
        before = queue.load_write_index()
        dev.submit(cb, [fresh, x]).wait(30)
        assert queue.load_write_index() - before == 1
        assert len(prog.instances) == pm4_replay.MAX_INSTANCES
        np.testing.assert_array_equal(fresh.to_numpy(np.float32), 3.0 * np.arange(64))


def test_packet_trace_shows_a_pm4_replay(tmp_path_factory, tmp_path, capsys, monkeypatch):
    from tools.packet_trace.cli import main

    monkeypatch.setenv("COLUMNS", "400")
    code = _code("gfx942", tmp_path_factory)
    path = tmp_path / "replay.aqltrace"
    writer = packets.TraceWriter(path)
    previous = packets.set_sink(writer)
    try:
        with amdgpu.open("amdgpu:virtual:gfx942", lanes=1) as dev:
            cb = _record(dev, code, "pm4")
            _run(dev, cb, replays=1)
    finally:
        packets.set_sink(previous)
        writer.close()
    assert main(["show", str(path), "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert out.count("pm4_ib") == 2  # two replays, one packet each
    assert out.count("-> dispatch program") == 8  # four dispatches decoded per replay
    assert "DISPATCH_DIRECT 1000x1x1" in out and "COMPUTE_USER_DATA_0=0x" in out


@pytest.mark.slow  # ~10 s: ROCr's loader and two command buffers on the emulated gfx90a
def test_rocr_forwards_the_pm4_replay_to_the_command_processor(tmp_path_factory):
    """ROCr 5.2.3 over the emulated kernel (gfx90a): the PM4_IB packet written into ROCr's
    AQL queue reaches the command processor, and the replays give the AQL path's results."""
    code = _code("gfx90a", tmp_path_factory)
    try:
        dev = amdgpu.open("amdgpu:emulated", lanes=1)
    except HsaUnavailable as e:
        pytest.skip(f"amdgpu:emulated unavailable: {e}")
    try:
        if dev.target != "gfx90a":
            pytest.skip(f"the emulated node is {dev.target}; this test records gfx90a code")
        results = {}
        for mode in ("pm4", "aql"):
            cb = _record(dev, code, mode)
            assert cb.path == mode
            results[mode], host, _ = _run(dev, cb, replays=2)
        assert cb.pm4_program is None
        for (x, y0), table in zip(host, results["pm4"], strict=True):
            y, out = _expected(x, y0, 2)
            np.testing.assert_array_equal(table[0], y)
            np.testing.assert_array_equal(table[2], out)
            assert table[3].tolist() == [32, 100]
        for a, b in zip(results["pm4"], results["aql"], strict=True):
            for u, v in zip(a, b, strict=True):
                np.testing.assert_array_equal(u, v)
    finally:
        dev.close()


def test_parameters_lanes_and_waits_on_the_pm4_path(tmp_path_factory):
    """Scalar and integer parameters patch the resident kernargs with the bindings (the
    u64 sites and the u32/f32 ones); a replay on a second lane gets its own instance; a
    replay waiting for another lane's point runs after it."""
    code = _code("gfx942", tmp_path_factory)
    with amdgpu.open("amdgpu:virtual:gfx942", lanes=2) as dev:
        saxpy = dev.load(code).kernel("saxpy")
        cb = dev.command_buffer(mode="pm4")
        a, n = cb.scalar("a", np.float32), cb.param("n")
        cb.dispatch(saxpy, 256, 64, (cb.binding(0), cb.binding(1), a, n))
        cb.finalize()
        assert cb.path == "pm4"
        x = dev.buffer(np.arange(256, dtype=np.float32))
        ys = [dev.buffer(np.zeros(256, np.float32)) for _ in range(2)]
        gate0 = dev.provider.signal_create(1)  # lane 0 held until lane 1 has submitted
        dev.lanes_[0].publish(packets.barrier_and(dep_signals=[gate0], barrier=True))
        first = dev.submit(cb, [ys[0], x], lane=0, params={"a": 2.0, "n": 100})
        dev.submit(cb, [ys[0], x], lane=0, params={"a": 0.5, "n": 200})
        point = dev.submit(cb, [ys[0], x], lane=0, params={"a": 0.5, "n": 200})
        # lane 1: y1 = 3 * y0 once lane 0's replays are done (the wait packets go first)
        q1 = dev.lanes_[1].queue
        gate = dev.provider.signal_create(1)  # lane 1 held while its ring is read
        dev.lanes_[1].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
        before = q1.load_write_index()
        dev.submit(cb, [ys[1], ys[0]], lane=1, wait=[point], params={"a": 3.0, "n": 256})
        published = q1.load_write_index() - before
        ring = q1.ring.reshape(-1, 64)
        kinds = [packets.decode(ring[(before + i) % q1.size].tobytes())["type"]
                 for i in range(published)]
        dev.provider.signal_store(gate, 0)
        dev.provider.signal_store(gate0, 0)
        dev.synchronize()
        # a wait packet (BARRIER_VALUE or a proxy's BARRIER_AND), then the PM4_IB packet
        assert published == 2 and kinds[-1] == packets.PacketType.VENDOR_SPECIFIC, kinds
        idx = np.arange(256, dtype=np.float32)
        want0 = (np.where(idx < 100, 2.0 * idx, 0) + np.where(idx < 200, idx, 0)).astype(
            np.float32)
        np.testing.assert_array_equal(ys[0].to_numpy(np.float32), want0)
        np.testing.assert_array_equal(ys[1].to_numpy(np.float32), 3.0 * want0)
        del first
        lanes = {key[0].index for key in cb.pm4_program.instances}
        assert lanes == {0, 1} and len(cb.pm4_program.instances) == 3


def test_a_dropped_pm4_command_buffer_gives_its_memory_back(tmp_path_factory):
    import gc

    code = _code("gfx942", tmp_path_factory)
    with amdgpu.open("amdgpu:virtual:gfx942", lanes=1) as dev:
        saxpy = dev.load(code).kernel("saxpy")
        x, y = dev.buffer(np.ones(64, np.float32)), dev.buffer(np.zeros(64, np.float32))
        dev.synchronize()
        allocations = dev.provider._user_allocs

        def record():
            cb = dev.command_buffer(mode="pm4")
            cb.dispatch(saxpy, 64, 64, (cb.binding(0), cb.binding(1), np.float32(1.0),
                                        np.uint32(64)))
            return cb.finalize()

        cb = record()
        before = len(allocations)
        dev.submit(cb, [y, x])
        dev.submit(cb, [x, y])
        assert len(allocations) == before + 2  # two instances: one allocation each
        del cb
        gc.collect()
        dev.synchronize()  # the lanes completed them: reaped here
        assert len(allocations) == before
        cb = record()
        dev.submit(cb, [y, x])  # and one left at close: close() frees it
    assert not allocations
