"""The program runner (bundle.program) over the Device API: Vulkan end to end, and the
recorded HSA command buffer checked packet by packet on amdgpu:virtual (no executor)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import amdgpu
import packets
from amdgpu.errors import KernelArgumentError
from amdgpu.program import ProgramRunner


@pytest.fixture(scope="module")
def chain_bundle():
    import compiler

    return compiler.compile("chain_3", targets=["gfx1100", "vulkan"])


@pytest.mark.vulkan
def test_program_on_vulkan_immediate_and_replay(chain_bundle):
    from amdgpu.vulkan import list_devices
    from compiler import library

    # skip only where no Vulkan device is usable; an error opening a usable one fails
    reports = list_devices()
    if not any(r.available for r in reports):
        pytest.skip(f"no usable Vulkan device: {[r.reason for r in reports]}")
    dev = amdgpu.open("vulkan")
    with dev:
        runner = ProgramRunner(dev, chain_bundle)
        inputs = library.example_inputs("chain_3")
        want = library.reference("chain_3", *inputs)[0]
        for replay in (False, True):
            (got,) = runner.run(inputs, replay=replay)
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.hsa_virtual
def test_recorded_program_binds_slots_and_barriers(chain_bundle):
    from compiler import library

    dev = amdgpu.open("amdgpu:virtual")
    try:
        runner = ProgramRunner(dev, chain_bundle)
        program = runner.program
        assert len(runner.dispatches) == 3
        cb = runner.record()
        (block,) = cb.packets
        decoded = packets.decode_many(block)
        kinds = [d["type"] for d in decoded]
        assert kinds[:3] == [packets.PacketType.KERNEL_DISPATCH] * 3
        for i, d in enumerate(runner.dispatches):
            assert decoded[i]["barrier"] == (i == 0 or d["barrier_before"])
            assert decoded[i]["workgroup_size_x"] == d["workgroup_size"][0]
        buffers = runner.allocate(library.example_inputs("chain_3"))
        ln = dev.lanes_[0]
        gate = dev.provider.signal_create(1)
        ln.publish(packets.barrier_and(dep_signals=[gate], barrier=True))
        first = ln.queue.load_write_index()
        runner.replay(buffers)
        ring = ln.queue.ring.reshape(-1, 64)
        table = buffers.table
        for i, d in enumerate(runner.dispatches):
            pkt = packets.decode(ring[(first + i) % ln.queue.size].tobytes())
            off = pkt["kernarg_address"] - ln.kernarg_address
            words = struct.unpack_from(f"<{len(d['bindings'])}Q", ln.kernarg_memory, off)
            base = {
                "input": 0,
                "output": len(program["inputs"]),
                "transient": len(program["inputs"]) + len(program["outputs"]),
            }
            want = [
                table[base[b["kind"]] + b["index"]].address + b["offset"] for b in d["bindings"]
            ]
            assert list(words) == want
        dev.provider.signal_store(gate, 0)
        with pytest.raises(KernelArgumentError, match="input"):
            runner.allocate([])
    finally:
        dev.close(timeout=0)  # a release error fails the test
