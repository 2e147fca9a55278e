"""Bad input to every CLI (amdgpu-run, packet-trace, hwlab, python -m compiler): a non-zero
exit, exactly one line on stderr (cause + next step), no traceback, no hang, and no partial
output file left where one was being written. Plus the driver-side cases found by the same
audit: a fault on one lane leaves the other lanes' buffers readable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import packets
from tools.packet_trace import synth

pytestmark = pytest.mark.generic

CLIS = {
    "amdgpu-run": ["-m", "amdgpu.cli"],
    "packet-trace": ["-m", "tools.packet_trace.cli"],
    "hwlab": ["-m", "tools.hwlab.cli"],
    "compiler": ["-m", "compiler"],
}


def run_cli(cli: str, *argv, cwd: Path | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, *CLIS[cli], *map(str, argv)],
        capture_output=True, text=True, timeout=60, cwd=cwd,
        env=dict(os.environ, COLUMNS="160"),
    )
    return done.returncode, done.stdout, done.stderr


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(("cli", "argv", "expect"), [
    ("amdgpu-run", ["saxpy", "--repeat", "x"], "argument --repeat: invalid int value"),
    ("packet-trace", ["show"], "the following arguments are required: file"),
    ("hwlab", ["run", "--bogus"], "unrecognized arguments: --bogus"),
    ("compiler", ["compile", "saxpy", "--cov", "9"], "argument --cov: invalid choice"),
])
def test_usage_errors_are_one_line(cli, argv, expect):
    code, _, err = run_cli(cli, *argv)
    line = one_line(err)
    assert code == 2 and expect in line and "--help" in line


# --- python -m compiler ------------------------------------------------------------------
def test_compile_non_utf8_mlir_is_one_line(tmp_path):
    src = tmp_path / "junk.mlir"
    src.write_bytes(bytes(range(128, 256)) * 8)  # iree-compile quotes it back: not UTF-8
    out = tmp_path / "junk.bundle"
    code, _, err = run_cli("compiler", "compile", src, "-t", "gfx1100", "-o", out)
    assert code == 1 and "junk.mlir:1:1: error: unexpected character" in one_line(err)
    assert not out.exists()


def test_compile_opencl_without_kernels(tmp_path):
    src = tmp_path / "helpers.cl"
    src.write_text("static float twice(float x) { return 2.0f * x; }\n")
    out = tmp_path / "helpers.bundle"
    for _ in range(2):  # the second run hits the compile cache and must fail the same way
        code, _, err = run_cli("compiler", "compile", src, "-t", "gfx1100", "-o", out)
        assert code == 1 and "helpers.cl defines no __kernel function" in one_line(err)
    assert not out.exists()


def test_compile_output_is_a_folder(tmp_path):
    code, _, err = run_cli("compiler", "compile", "fill", "-t", "gfx1100", "-o", tmp_path)
    assert code == 1 and f"-o {tmp_path} is a folder" in one_line(err)


# --- amdgpu-run ----------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["-3", "abc"])
def test_run_size_must_be_positive(size):
    code, _, err = run_cli("amdgpu-run", "chain", "--size", size, "--device", "amdgpu:virtual")
    assert code == 2 and f"--size {size}: use a positive whole number" in one_line(err)


def test_run_trace_in_missing_folder(tmp_path):
    trace = tmp_path / "no" / "run.trace"
    code, _, err = run_cli("amdgpu-run", "saxpy", "--device", "amdgpu:virtual", "--trace", trace)
    line = one_line(err)
    assert code == 2 and f"cannot create the trace file {trace}" in line
    assert "Error:" not in line  # no Python exception type name


def test_failed_run_leaves_no_empty_trace(tmp_path):
    trace = tmp_path / "run.trace"
    code, _, err = run_cli("amdgpu-run", "nosuch", "--device", "amdgpu:virtual", "--trace", trace)
    assert code == 2 and "unknown workload 'nosuch'" in one_line(err)
    assert not trace.exists()


# --- packet-trace --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_bad")
    good = folder / "good.aqltrace"
    synth.write_sample(good)
    data = good.read_bytes()
    last = max(r.offset for r in packets.read_trace(good))
    (folder / "cut.aqltrace").write_bytes(data[:last + 20])
    (folder / "magic.aqltrace").write_bytes(b"NOTATRACE" + data[9:])
    (folder / "empty.aqltrace").write_bytes(b"")
    return folder


@pytest.mark.parametrize("bad", ["cut", "magic", "empty", "missing"])
@pytest.mark.parametrize("command", ["export", "graph"])
def test_bad_trace_leaves_no_output_file(tmp_path, traces, bad, command):
    out = tmp_path / ("out.json" if command == "export" else "out.dot")
    argv = (["export", "--perfetto", out] if command == "export" else ["graph", "-o", out])
    code, _, err = run_cli("packet-trace", *argv, traces / f"{bad}.aqltrace")
    line = one_line(err)
    assert code == 2 and ("; " in line)  # a cause, then the next step
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no temp file either
    # An existing output file is kept as it was.
    out.write_text("before")
    code, _, _ = run_cli("packet-trace", *argv, traces / f"{bad}.aqltrace")
    assert code == 2 and out.read_text() == "before"


def test_export_and_graph_of_a_good_trace(tmp_path, traces):
    out = tmp_path / "t.json"
    code, _, err = run_cli("packet-trace", "export", "--perfetto", out, traces / "good.aqltrace")
    assert code == 0 and err == "" and out.read_text().rstrip().endswith("}")
    dot = tmp_path / "t.dot"
    code, _, _ = run_cli("packet-trace", "graph", "-o", dot, traces / "good.aqltrace")
    assert code == 0 and dot.read_text().startswith("digraph")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.dot", "t.json"]


def test_output_in_missing_folder(tmp_path, traces):
    out = tmp_path / "no" / "t.json"
    code, _, err = run_cli("packet-trace", "export", "--perfetto", out, traces / "good.aqltrace")
    assert code == 2 and f"cannot write {out}" in one_line(err)


def test_record_into_missing_folder_does_not_run_the_command(tmp_path):
    marker = tmp_path / "ran"
    code, _, err = run_cli("packet-trace", "record", "-o", tmp_path / "no" / "x.trace", "--",
                           sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert code == 2 and "does not exist" in one_line(err)
    assert not marker.exists()


def test_truncated_trace_names_the_next_step(traces):
    code, _, err = run_cli("packet-trace", "stats", traces / "cut.aqltrace")
    assert code == 2 and "record again" in one_line(err)


# --- hwlab ---------------------------------------------------------------------------------
def test_hwlab_report_folder_checked_before_the_run(tmp_path):
    report = tmp_path / "no" / "r.json"
    code, out, err = run_cli("hwlab", "run", "--device", "amdgpu:virtual", "--json", report)
    assert code == 2 and f"--json {report}: its folder does not exist" in one_line(err)
    assert out == ""  # nothing ran


def test_hwlab_missing_suite_file_and_non_report(tmp_path):
    code, _, err = run_cli("hwlab", "run", "--suite", tmp_path / "nope.py")
    assert code == 2 and "suite file" in one_line(err) and "does not exist" in err
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    code, _, err = run_cli("hwlab", "merge", other)
    assert code == 2 and "pass a file written by 'hwlab run --json'" in one_line(err)


# --- driver: a fault on one lane ---------------------------------------------------------
def _gfx11_executor() -> bool:
    from hsa.virtual.executor import executor_for

    return executor_for("gfx11") is not None


OOB_CL = """__kernel void oob(__global float *y, uint off) {
    y[get_global_id(0) + off] = 1.0f;
}
"""


@pytest.mark.hsa_virtual
@pytest.mark.skipif(not _gfx11_executor(), reason="no gfx11 ISA executor in the virtual GPU")
def test_fault_on_one_lane_leaves_other_lanes_readable(tmp_path):
    import amdgpu
    import compiler
    from amdgpu.errors import QueueError

    src = tmp_path / "oob.cl"
    src.write_text(OOB_CL)
    with amdgpu.open("amdgpu:virtual") as dev:
        assert dev.lanes >= 2
        oob = dev.load(compiler.compile(src, targets=["gfx1100"])).kernel("oob")
        fill = dev.load(compiler.compile("fill", targets=["gfx1100"])).kernel("fill")
        y = dev.buffer(np.zeros(64, np.float32))
        # The virtual system's allocations sit at host addresses, so a fixed distance past
        # `y` may land in another of them (order-dependent): step on until nothing is there.
        off = 100000000
        while dev.provider.memory.overlaps(y.address + 4 * off, 4 * 64):
            off += 1 << 20
        with pytest.raises(QueueError) as err:
            dev.dispatch(oob, 64, 64, args=(y, np.uint32(off))).wait()
        text = str(err.value)
        assert "(kernel oob): memory fault at address 0x" in text
        assert "code-object offset 0x" in text
        assert len(text.splitlines()) == 1
        # Lane 1 still runs, and its result can be read (lane 0's error was already seen).
        args = [y, np.float32(7.0).view(np.uint32), np.uint32(64)]
        dev.dispatch(fill, 64, 64, args=tuple(args[:len(fill.args)]), lane=1).wait()
        assert y.to_numpy(np.float32)[0] in (7.0, np.float32(7.0).view(np.uint32))
        with pytest.raises(QueueError):  # the device still says a lane stopped
            dev.synchronize()


@pytest.mark.hsa_virtual
def test_virtual_gfx942_runs_the_kernel_in_wave64(tmp_path):
    """gfx942 has an executor now (issue 13): the library kernel runs and fills."""
    import amdgpu
    import compiler

    with amdgpu.open("amdgpu:virtual:gfx942") as dev:
        k = dev.load(compiler.compile("fill", targets=["gfx942"])).kernel("fill")
        y = dev.buffer(np.zeros(100, np.float32))
        args = (y, np.float32(3.5).view(np.uint32), np.uint32(100))[:len(k.args)]
        dev.dispatch(k, 128, 64, args=args).wait()
        got = y.to_numpy(np.float32)
        assert got[0] in (3.5, np.float32(3.5).view(np.uint32).astype(np.float32))
        assert np.all(got == got[0])
