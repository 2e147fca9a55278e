"""IREE programs whose host side is a program, not a fixed sequence: host control flow that
reads device values back (scf.while / scf.if, lowered by IREE to cf branches over
hal.buffer.load), command buffers recorded at run time with push constants computed on the
host, and constants moved into globals. The whole HAL-level host program is interpreted
(amdgpu/host_program.py) and every result is checked against IREE's own CPU runtime
(iree.runtime, local-task) in the same test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amdgpu.cli import main
from amdgpu.workloads import _compare, iree_cpu_reference

DATA = Path(__file__).parent / "data" / "iree"
PROGRAMS = ["while_threshold", "if_reduction", "dynamic_offset", "constant_global"]


def _cli(capsys, path, device) -> dict:
    rc = main([str(path), "--device", device, "--replay", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    return json.loads(out[-1])


def _has_vulkan() -> bool:
    from amdgpu import vulkan

    return any(r.available for r in vulkan.list_devices())


@pytest.mark.parametrize("name", PROGRAMS)
def test_host_program_on_virtual(capsys, name):
    d = _cli(capsys, DATA / f"{name}.mlir", "amdgpu:virtual")
    assert d["correct"] is True, d


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_host_program_on_gfx942(capsys, name):
    d = _cli(capsys, DATA / f"{name}.mlir", "amdgpu:virtual:gfx942")
    assert d["correct"] is True, d


@pytest.mark.vulkan
@pytest.mark.parametrize("name", PROGRAMS)
def test_host_program_on_vulkan(capsys, name):
    if not _has_vulkan():
        pytest.skip("no Vulkan device (lavapipe) here")
    d = _cli(capsys, DATA / f"{name}.mlir", "vulkan")
    assert d["correct"] is True, d


def _runner(name: str, spec: str = "amdgpu:virtual"):
    import amdgpu
    import compiler
    from amdgpu.program import ProgramRunner

    dev = amdgpu.open(spec)
    targets = ["vulkan"] if dev.backend == "vulkan" else [dev.target]
    bundle = compiler.compile(DATA / f"{name}.mlir", targets=targets)
    return ProgramRunner(dev, bundle)


@pytest.mark.parametrize("replay", [False, True])
def test_while_runs_until_the_device_value_crosses(replay):
    """The loop count depends on data read back from the device: 1.5 -> 100 takes 5
    doublings (sum |x| = 6 * 2^k >= 100 at k = 5), so 6 reductions and 5 doublings run."""
    runner = _runner("while_threshold")
    assert runner.program.get("host") is True
    for x, doublings in ((np.full(4, 1.5, np.float32), 5), (np.full(4, 30.0, np.float32), 0),
                         (np.array([-1, 0, 0, 0], np.float32), 7)):
        buffers = runner.allocate([x])
        (runner.replay if replay else runner.run_immediate)(buffers)
        (got,) = runner.read_outputs(buffers)
        (want,) = iree_cpu_reference(DATA / "while_threshold.mlir", "grow", [x])
        assert _compare([got], [want], False)[0], (got, want)
        kernels = [d["kernel"] for d in runner.dispatches]
        assert sum("reduction" in k for k in kernels) == doublings + 1
        assert sum("elementwise" in k for k in kernels) == doublings
        buffers.free()


def test_if_takes_both_branches():
    runner = _runner("if_reduction")
    x = np.arange(8, dtype=np.float32) - 2.0
    y = np.linspace(-1, 1, 8).astype(np.float32)
    for sign in (1, -1):
        ins = [sign * x, y]
        got = runner.run(ins)
        want = iree_cpu_reference(DATA / "if_reduction.mlir", "pick", ins)
        assert _compare(got, want, False)[0]
        assert len(runner.dispatches) == (2 if sign > 0 else 1)


def test_push_constant_from_a_host_read():
    runner = _runner("dynamic_offset")
    x = np.arange(16, dtype=np.float32)
    for i in (0, 5, 12, 99):
        (got,) = runner.run([x, np.array(i, np.int32)])
        start = min(i, 12)
        assert np.array_equal(got, x[start:start + 4] ** 2), (i, got)


def test_host_program_is_kept_in_the_bundle():
    """The host program is data in the variant (no MLIR needed to run it) and survives the
    bundle's serialization; running it leaves it unchanged."""
    import compiler
    from compiler.bundle import KernelBundle

    bundle = compiler.compile(DATA / "constant_global.mlir", targets=["gfx1100"])
    host = bundle.variants[0].info["host"]
    ops = {op["op"] for f in [*host["funcs"].values(), *host["initializers"]]
           for b in f["blocks"] for op in b["ops"]}
    assert {"util.buffer.constant", "hal.allocator.import",
            "hal.device.queue.execute.indirect"} <= ops
    again = KernelBundle.from_bytes(bundle.to_bytes())
    assert again.variants[0].info["host"] == host
    import amdgpu
    from amdgpu.program import ProgramRunner

    x = np.ones(2048, np.float32)
    (got,) = ProgramRunner(amdgpu.open("amdgpu:virtual"), again).run([x])
    (want,) = iree_cpu_reference(DATA / "constant_global.mlir", "addc", [x])
    assert np.array_equal(got, want)
    assert KernelBundle.from_bytes(again.to_bytes()).variants[0].info["host"] == host


def test_compare_takes_0d_results():
    got, want = np.float64(1.0), np.array(1.0 + 1e-12)
    assert _compare([np.asarray(got)], [want], False)[0]
    assert not _compare([np.array(2.0)], [want], False)[0]
    assert _compare([np.array(np.nan)], [np.array(np.nan)], False)[0]
