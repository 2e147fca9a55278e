"""amdgpu-run: JSON output on Vulkan (lavapipe) and amdgpu:virtual, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from amdgpu.cli import EXIT_ERROR, main

KEYS = {
    "workload",
    "device",
    "driver",
    "target",
    "dispatches",
    "correct",
    "max_abs_error",
    "host_us_per_dispatch",
}


def _vulkan_available() -> bool:
    # list_devices() answers [] where there is no Vulkan loader or device; anything it
    # raises is a bug and must fail the test, not skip it.
    from amdgpu import vulkan

    return any(r.available for r in vulkan.list_devices())


def _gfx11_executor() -> bool:
    from hsa.virtual.executor import executor_for

    return executor_for("gfx11") is not None


def _run_json(capsys, *argv) -> dict:
    rc = main([*argv, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    return json.loads(out[-1])


@pytest.mark.vulkan
def test_json_on_vulkan_with_replay(capsys):
    if not _vulkan_available():
        pytest.skip("no Vulkan device (lavapipe) here")
    d = _run_json(capsys, "chain-3", "--device", "vulkan", "--repeat", "2", "--replay")
    assert KEYS | {"replay_host_us"} <= set(d)
    assert d["driver"] == "vulkan" and d["target"] == "vulkan" and d["dispatches"] == 3
    assert d["correct"] is True and d["max_abs_error"] < 1e-5
    assert d["replay_host_us"] > 0


@pytest.mark.vulkan
def test_default_driver_is_vulkan(capsys, monkeypatch):
    if not _vulkan_available():
        pytest.skip("no Vulkan device (lavapipe) here")
    monkeypatch.delenv("AMDGPU_DRIVER", raising=False)
    d = _run_json(capsys, "saxpy")
    assert d["driver"] == "vulkan" and d["correct"] is True


@pytest.mark.hsa_virtual
@pytest.mark.isa_gfx11
def test_json_on_amdgpu_virtual(capsys):
    if not _gfx11_executor():
        pytest.skip("gfx11 executor not present")
    d = _run_json(capsys, "saxpy", "--device", "amdgpu:virtual", "--replay")
    assert d["driver"] == "amdgpu" and d["target"] == "gfx1100" and d["correct"] is True
    assert KEYS | {"replay_host_us"} <= set(d)


@pytest.mark.hsa_rocr
def test_json_on_amdgpu_emulated(capsys):
    """The real ROCr over the emulated AMD driver runs an IREE workload on the gfx90a."""
    from hsa.emulated import runs_kernels

    if not runs_kernels():
        pytest.skip("the emulated gfx90a needs hsa/virtual's gfx9 executor")
    d = _run_json(capsys, "saxpy", "--device", "amdgpu:emulated", "--replay")
    assert d["driver"] == "amdgpu" and d["target"] == "gfx90a" and d["correct"] is True
    assert KEYS | {"replay_host_us"} <= set(d)


@pytest.mark.generic
@pytest.mark.parametrize(
    "argv, words",
    [
        (["saxpy", "--device", "cuda:0"], "unknown device spec"),
        (["no-such-workload", "--device", "amdgpu:virtual"], "unknown workload"),
        (["saxpy", "--size", "3", "--device", "amdgpu:virtual"], "--size"),
        (["saxpy", "--repeat", "0", "--device", "amdgpu:virtual"], "--repeat"),
        (["/nonexistent/model.mlir", "--device", "amdgpu:virtual"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(capsys, argv, words):
    assert main(argv) == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err and "Traceback" not in err


@pytest.mark.generic
def test_hsa_unavailable_or_faulting_kernel_is_one_line(capsys):
    rc = main(["saxpy", "--driver", "amdgpu"])  # ROCr: unavailable on a machine without kfd
    err = capsys.readouterr().err.strip()
    if not os.path.exists("/dev/kfd"):  # here the run cannot succeed: it must say why
        assert rc == EXIT_ERROR and "/dev/kfd" in err and "amdgpu:virtual" in err
    if rc != 0:
        assert rc == EXIT_ERROR and err.count("\n") == 0 and "Traceback" not in err


@pytest.mark.hsa_virtual
def test_faulting_kernel_is_one_line(capsys, monkeypatch):
    """Without the executor the dispatch stops the queue; with it, an output buffer made
    too small (4 bytes for 16 KiB) makes the kernel fault. Either way: one line, exit 2."""
    import amdgpu.program

    if _gfx11_executor():
        monkeypatch.setattr(amdgpu.program, "_nbytes", lambda t: 4)
    assert main(["chain-2", "--device", "amdgpu:virtual"]) == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lane 0" in err and "Traceback" not in err


@pytest.mark.hsa_virtual
@pytest.mark.isa_gfx11
def test_a_wrong_device_result_is_reported_and_exits_1(capsys, monkeypatch):
    """The `correct` verdict can fail: dispatching half the grid leaves half the output
    unwritten on the virtual GPU, and amdgpu-run says so (exit 1, correct false)."""
    if not _gfx11_executor():
        pytest.skip("gfx11 executor not present")
    from amdgpu.cli import EXIT_WRONG
    from amdgpu.program import ProgramRunner

    shape = ProgramRunner._shape

    def half_grid(d: dict) -> tuple:
        grid, block = shape(d)
        assert grid[0] >= 2 * block[0], "the workload must have >= 2 workgroups to halve"
        return (grid[0] // 2, *grid[1:]), block

    monkeypatch.setattr(ProgramRunner, "_shape", staticmethod(half_grid))
    rc = main(["saxpy", "--device", "amdgpu:virtual", "--replay", "--json"])
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == EXIT_WRONG
    assert d["correct"] is False and d["max_abs_error"] > 1e-3


@pytest.mark.generic
def test_console_script_lists_and_debug_shows_traceback():
    exe = [sys.executable, "-m", "amdgpu.cli"]
    listed = subprocess.run([*exe, "--list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "amdgpu:virtual" in listed.stdout
    assert "chain-N" in listed.stdout
    dbg = subprocess.run(
        [*exe, "saxpy", "--device", "bogus", "--debug"], capture_output=True, text=True, timeout=120
    )
    assert dbg.returncode != 0 and "Traceback" in dbg.stderr


MLIR = """
func.func @scale_add(%a: tensor<64x32xf32>, %b: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %0 = arith.mulf %a, %b : tensor<64x32xf32>
  %1 = arith.addf %0, %a : tensor<64x32xf32>
  return %1 : tensor<64x32xf32>
}
"""


@pytest.mark.vulkan
def test_any_mlir_file_checked_against_iree_cpu(tmp_path, capsys):
    if not _vulkan_available():
        pytest.skip("no Vulkan device (lavapipe) here")
    path = tmp_path / "scale_add.mlir"
    path.write_text(MLIR)
    d = _run_json(capsys, str(path), "--device", "vulkan")
    assert d["correct"] is True and d["dispatches"] >= 1 and d["max_abs_error"] < 1e-5


@pytest.mark.hsa_virtual
def test_trace_file_gets_the_dispatch_packets(tmp_path, capsys):
    import packets

    trace = tmp_path / "run.trace"
    rc = main(["saxpy", "--device", "amdgpu:virtual", "--trace", str(trace), "--json"])
    capsys.readouterr()
    # without the gfx11 executor the dispatch is a queue error; with it, the run is correct
    assert rc == (0 if _gfx11_executor() else EXIT_ERROR)
    kinds = [
        r.decode()["type"] for r in packets.read_trace(trace) if type(r).__name__ == "PacketRecord"
    ]
    assert packets.PacketType.KERNEL_DISPATCH in kinds
    assert packets.trace.active_sink() is None  # the CLI took its sink down again
