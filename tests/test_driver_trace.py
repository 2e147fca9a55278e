"""What the HSA driver puts into a packet trace (issue 8): kernarg bytes and kernel names
on immediate dispatches, kernel symbol records (with typed kernarg layouts) once per kernel
per sink, so packet-trace names replayed packets and decodes arguments by name and type.

The lane is held on a gate while packets are inspected, so nothing needs to run; the
end-to-end test through amdgpu-run and packet-trace needs the gfx11 executor."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import require_clang

import amdgpu
import packets
from packets.trace import KernelSymbolRecord, PacketRecord
from tools.packet_trace.model import decode_kernargs, parse_layout

pytestmark = pytest.mark.hsa_virtual


@pytest.fixture(scope="module")
def saxpy_code():
    import compiler

    require_clang()  # skips only when clang is absent; a failed compile fails
    return compiler.compile("saxpy_hidden", targets=["gfx1100"])


@pytest.fixture
def dev():
    d = amdgpu.open("amdgpu:virtual", lanes=1)
    gate = d.provider.signal_create(1)
    d.lanes_[0].publish(packets.barrier_and(dep_signals=[gate], barrier=True))
    yield d
    d.provider.signal_store(gate, 0)
    d.close(timeout=0)  # a release error fails the test


@pytest.fixture
def sink():
    s = packets.MemorySink()
    old = packets.set_sink(s)
    yield s
    packets.set_sink(old)


def _records(sink, kind):
    return [r for r in sink.records if isinstance(r, kind)]


def test_layout_describes_types_for_packet_trace(dev, saxpy_code):
    k = dev.load(saxpy_code).kernel("saxpy_hidden")
    desc = k.layout.describe()
    assert all({"name", "kind", "offset", "size", "type_name"} <= set(d) for d in desc)
    by_offset = {d["offset"]: d for d in desc}
    assert by_offset[16]["kind"] == "value" and by_offset[16]["type_name"] == "float"
    assert by_offset[0]["kind"] == "buffer"
    assert any(d["kind"] == "hidden" and d["type_name"] == "" for d in desc)
    specs = parse_layout(desc)
    assert [s.type_name for s in specs if s.offset == 16] == ["float"]


def test_immediate_dispatch_records_kernargs_and_name(dev, saxpy_code, sink):
    k = dev.load(saxpy_code).kernel("saxpy_hidden")  # the sink is active at load
    syms = _records(sink, KernelSymbolRecord)
    assert [(s.kernel_object, s.name) for s in syms] == [(k.kernel_object, "saxpy_hidden")]
    x, y = dev.buffer(1024), dev.buffer(1024)
    dev.dispatch(k, 256, 64, (y, x, np.float32(2.5), 256))
    (rec,) = [r for r in _records(sink, PacketRecord) if r.decode()["kind"] == "kernel_dispatch"]
    assert rec.symbol == "saxpy_hidden"
    ln = dev.lanes_[0]
    addr = rec.decode()["kernarg_address"] - ln.kernarg_address
    assert rec.kernarg == ln.kernarg_memory[addr:addr + len(rec.kernarg)].tobytes()
    values = {v.spec.offset: v.value for v in decode_kernargs(parse_layout(syms[0].layout),
                                                              rec.kernarg)}
    assert values[0] == y.address and values[8] == x.address
    assert values[16] == 2.5 and values[20] == 256
    assert len(_records(sink, KernelSymbolRecord)) == 1  # no repeat for the dispatch


def test_sink_after_load_learns_each_kernel_once(dev, saxpy_code):
    k = dev.load(saxpy_code).kernel("saxpy_hidden")  # no sink yet
    x, y = dev.buffer(1024), dev.buffer(1024)
    s = packets.MemorySink()
    old = packets.set_sink(s)
    try:
        for _ in range(3):
            dev.dispatch(k, 256, 64, (y, x, 1.0, 256))
        cb = dev.command_buffer()
        for _ in range(2):
            cb.dispatch(k, 256, 64, (cb.binding(0), cb.binding(1), 1.0, 256))
        dev.submit(cb.finalize(), [y, x])
    finally:
        packets.set_sink(old)
    syms = _records(s, KernelSymbolRecord)
    assert [(r.kernel_object, r.name) for r in syms] == [(k.kernel_object, "saxpy_hidden")]
    assert syms[0] is s.records[0], "the symbol comes before the packets that use it"
    pkts = [r for r in _records(s, PacketRecord) if r.decode()["kind"] == "kernel_dispatch"]
    assert len(pkts) == 5
    assert all(p.kernarg is not None and p.symbol == "saxpy_hidden" for p in pkts[:3])
    # a replayed block is a batch record: named through kernel_object
    assert all(p.decode()["kernel_object"] == k.kernel_object for p in pkts[3:])
    # a second sink hears about the kernel again
    s2 = packets.MemorySink()
    old = packets.set_sink(s2)
    try:
        dev.dispatch(k, 256, 64, (y, x, 1.0, 256))
    finally:
        packets.set_sink(old)
    assert len(_records(s2, KernelSymbolRecord)) == 1


def test_single_dispatch_replay_carries_its_kernargs(dev, saxpy_code, sink):
    k = dev.load(saxpy_code).kernel("saxpy_hidden")
    x, y = dev.buffer(1024), dev.buffer(1024)
    cb = dev.command_buffer()
    cb.dispatch(k, 256, 64, (cb.binding(0), cb.binding(1), np.float32(-1.5), 256))
    dev.submit(cb.finalize(), [y, x])
    (rec,) = [r for r in _records(sink, PacketRecord) if r.decode()["kind"] == "kernel_dispatch"]
    assert rec.symbol == "saxpy_hidden" and rec.kernarg is not None
    specs = parse_layout(k.layout.describe())
    values = {v.spec.offset: v.value for v in decode_kernargs(specs, rec.kernarg)}
    assert values[0] == y.address and values[8] == x.address and values[16] == -1.5


def test_untraced_dispatch_records_nothing(dev, saxpy_code):
    if packets.trace.active_sink() is not None:
        pytest.skip("a trace sink is active (AMDGPU_TRACE is set)")
    k = dev.load(saxpy_code).kernel("saxpy_hidden")
    x, y = dev.buffer(1024), dev.buffer(1024)
    dev.dispatch(k, 256, 64, (y, x, 1.0, 256))
    assert k.trace_announced is None


@pytest.mark.isa_gfx11
@pytest.mark.parametrize("replay", [False, True])
def test_amdgpu_run_trace_shows_names_and_values(tmp_path, capsys, replay):
    from hsa.virtual.executor import executor_for

    if executor_for("gfx11") is None:
        pytest.skip("gfx11 executor not present")
    from amdgpu.cli import main as run_main
    from tools.packet_trace.cli import main as trace_main

    trace = tmp_path / "run.trace"
    workload = "saxpy" if replay else "saxpy-hidden"
    argv = [workload, "--device", "amdgpu:virtual", "--trace", str(trace)]
    assert run_main(argv + (["--replay"] if replay else [])) == 0
    capsys.readouterr()
    assert trace_main(["show", str(trace), "--format", "plain"]) == 0
    out = capsys.readouterr().out
    if replay:  # IREE saxpy: four buffer bindings, immediate and then replayed
        assert "saxpy_dispatch_0" in out
        assert out.count("arg3=0x") == 2, "both the immediate and the replayed packet"
    else:  # OpenCL saxpy_hidden: the float constant decoded by its metadata type
        assert "saxpy_hidden" in out
        assert "arg2=2.0 (value)" in out and "arg3=4096 (value)" in out
        assert "hidden_block_count_x=" in out
