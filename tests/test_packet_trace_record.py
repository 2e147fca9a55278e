"""packet-trace record: the child runs with AMDGPU_TRACE set, its exit status is passed on and
a summary line counts records and packets; traces written by amdgpu-run --trace read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.packet_trace.cli import main

pytestmark = pytest.mark.generic

CHILD = textwrap.dedent("""
    import sys
    import packets
    from tools.packet_trace.synth import LoopbackQueue
    ring = LoopbackQueue(64, queue_id=5).ring()  # opens the AMDGPU_TRACE writer
    for i in range(7):
        ring.publish(packets.kernel_dispatch(workgroup_size=32, grid_size=64,
                                             kernel_object=0x1000, kernarg_address=0x2000))
    ring.publish(packets.barrier_and(dep_signals=[]))
    sys.exit(int(sys.argv[1]))
""")


@pytest.mark.parametrize("status", [0, 3])
def test_record_passes_the_exit_status_and_summarizes(tmp_path, capsys, status):
    out = tmp_path / "run.aqltrace"
    code = main(["record", "-o", str(out), "--", sys.executable, "-c", CHILD, str(status)])
    _, err = capsys.readouterr()
    assert code == status
    assert f"{out}: 8 records, 8 packets (command exit status {status})" in err
    assert main(["stats", "--json", str(out)]) == 0
    stats = json.loads(capsys.readouterr()[0])
    assert stats["packets"]["kernel_dispatch"] == 7 and stats["packets"]["barrier_and"] == 1
    assert stats["per_queue"][0]["queue"] == 5


def test_record_without_a_trace_says_so(tmp_path, capsys):
    out = tmp_path / "none.aqltrace"
    code = main(["record", "-o", str(out), "--", sys.executable, "-c", "raise SystemExit(4)"])
    err = capsys.readouterr()[1]
    # The command failed on its own: the fact, not a guess that it is no amdgpu program.
    assert code == 4 and err.strip() == (f"packet-trace: no trace written to {out}: the "
                                         "command failed (exit status 4) before it created "
                                         "a queue")
    code = main(["record", "-o", str(out), "--", sys.executable, "-c", "pass"])
    assert code == 0 and "not an amdgpu-direct program" in capsys.readouterr()[1]


def test_record_of_a_missing_program_is_one_line(tmp_path, capsys):
    code = main(["record", "-o", str(tmp_path / "x"), "--", "/nonexistent/program"])
    err = capsys.readouterr()[1]
    assert code == 2 and err.count("\n") == 1 and "no such program" in err


def test_an_unwritable_output_is_one_line_before_the_command_runs(tmp_path):
    """The issue's command: the trace path cannot be created, so packet-trace says so in
    one line and runs nothing (amdgpu-run used to fail on AMDGPU_TRACE and print its own
    error line too)."""
    marker = tmp_path / "ran"
    for out in ("/proc/x.aqltrace", str(tmp_path), str(tmp_path / "no" / "x.aqltrace")):
        proc = subprocess.run(
            [sys.executable, "-m", "tools.packet_trace", "record", "-o", out, "--",
             sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and not proc.stdout, proc
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
            f"packet-trace: cannot write {out}: "), proc.stderr
        assert not marker.exists(), f"the command ran although {out} cannot be written"


def test_an_existing_fifo_is_refused_not_removed(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = main(["record", "-o", str(fifo), "--", sys.executable, "-c", "pass"])
    assert code == 2 and fifo.exists()
    assert "is not a regular file" in capsys.readouterr()[1]


def test_console_script_and_module_entry_points(tmp_path):
    script = Path(sys.executable).parent / "packet-trace"
    commands = [[sys.executable, "-m", "tools.packet_trace"]]
    if script.exists():  # installed by `pip install -e .`
        commands.append([str(script)])
    for command in commands:
        proc = subprocess.run([*command, "stats", str(tmp_path / "missing")],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("packet-trace: ")
        assert "Traceback" not in proc.stderr


@pytest.mark.hsa_virtual
def test_amdgpu_run_trace_reads_back(tmp_path, capsys):
    out = tmp_path / "saxpy.aqltrace"
    proc = subprocess.run([sys.executable, "-m", "amdgpu.cli", "saxpy", "--device",
                           "amdgpu:virtual", "--trace", str(out)], capture_output=True,
                          text=True, timeout=300)
    # amdgpu-run is part of the package: a run that fails or writes no trace is a failure.
    assert proc.returncode == 0, proc.stderr.strip()[-400:]
    assert out.exists() and out.stat().st_size > 16, "amdgpu-run --trace wrote no packets"
    assert main(["stats", "--json", str(out)]) == 0
    stats = json.loads(capsys.readouterr()[0])
    assert stats["packets"]["kernel_dispatch"] >= 1
    assert any(name.startswith("saxpy") for name in stats["kernels"]), stats["kernels"]
    # the driver writes completion records: they give per-kernel device time
    assert stats["completions"] >= 1 and stats["unmatched_completions"] == 0
    saxpy = next(k for k in stats["per_kernel"] if k["kernel"].startswith("saxpy"))
    # the run's repetition plus the one amdgpu-run times per dispatch (dev.time_dispatches)
    assert saxpy["dispatches"] == 2
    assert saxpy["device"]["count"] == 2 and saxpy["device"]["total_ns"] > 0
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr()[0]
    assert "kernel_dispatch" in shown and "saxpy" in shown
