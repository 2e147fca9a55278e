"""tinygrad's AMD backend (PyPI tinygrad, DEV=AMD:LLVM) over the emulated kernel: it talks to
/dev/kfd and sysfs itself, creates a KFD PM4 compute queue (KFD_IOC_QUEUE_TYPE_COMPUTE) and
an SDMA queue, and its kernels run on hsa/virtual's command processor. The results are
checked against numpy; the queue type is tinygrad's own report. Without the server's PM4
queues tinygrad cannot open the device (CREATE_QUEUE of type 0 was EINVAL).

Its compile pool's workers are spawned (vfork, then exec) while /dev/kfd is open: the vfork
child's closes must leave the shim's table of the parent alone (tests/test_emulated_fork.py).

A malformed PM4 stream faults the queue: tinygrad's wait ends with its KFD fault report (the
HW exception event), and the server's log names the packet's dword offset."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hsa.emulated import build, protocol

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLIENT = HERE / "emulated" / "tinygrad_client.py"

pytestmark = [pytest.mark.generic, pytest.mark.slow]

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad (the test extra) is not installed")


def _llvm() -> bool:
    """tinygrad's AMD:LLVM compiler loads libLLVM (LLVM-21 .. LLVM-14 by name) by ctypes."""
    return any(ctypes.util.find_library(f"LLVM-{v}") for v in range(17, 22)) or bool(
        ctypes.util.find_library("LLVM"))


def _run(node: str, mode: str, **extra: str) -> subprocess.CompletedProcess:
    build.ensure_built()
    if not _llvm():
        pytest.skip("no libLLVM >= 17 with the AMDGPU target for tinygrad's AMD:LLVM compiler "
                    "(Debian: libllvm19)")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "DEV", "AMD_AQL")}
    shim = str(build.shim_path())
    # tinygrad calls mmap through its own handle of libc (not interposed by LD_PRELOAD);
    # LIBC_PATH makes that handle the shim, whose other libc symbols are libc's
    env.update(AMDGPU_EMULATED_NODE=node, PYTHONPATH=str(ROOT), LD_PRELOAD=shim,
               LIBC_PATH=shim, DEV="AMD:LLVM", **extra)
    return subprocess.run([sys.executable, str(CLIENT), mode], env=env, capture_output=True,
                          text=True, timeout=600)


# node spellings of these tests' own (a server per spelling): no other test's server serves them
@pytest.mark.parametrize("node, arch, aql, queue", [("GFX1100", "gfx1100", None, "pm4"),
                                                    ("GFX942", "gfx942", "0", "pm4"),
                                                    ("GFX942", "gfx942", None, "aql")])
def test_tinygrad_ops_run_on_kfd_queues(node, arch, aql, queue):
    """gfx1100: tinygrad's default queue is PM4. gfx942 (8 XCCs): tinygrad defaults to its
    AQL queue (PM4 in ROCr's PM4_IB packets; its kernargs are 8-byte aligned, which the
    CP accepts), AMD_AQL=0 asks for its PM4 queue."""
    run = _run(node, "ops", **({"AMD_AQL": aql} if aql else {}))
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert f"arch {arch}" in lines and f"queue {queue}" in lines
    assert [ln for ln in lines if ln.startswith("ok ")] == [
        "ok add_mul", "ok sum_axis", "ok max", "ok matmul", "ok where_exp"]


def test_kernels_compiled_in_tinygrads_worker_pool_run_after_it_started():
    """Two kernels realized together go to tinygrad's spawned compile pool; the next VRAM
    allocation failed with ENOTTY when the pool's vfork child had cleared the shim's entry
    for descriptor 3 (tinygrad's /dev/kfd in a plain script such as this client)."""
    run = _run("GFX1100", "pool")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert run.stdout.splitlines() == ["pool yes", "ok var", "ok moments"]


def test_malformed_pm4_faults_the_queue_through_kfd_events():
    run = _run("GFX1100", "bad-pm4")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    fault = [ln for ln in run.stdout.splitlines() if ln.startswith("fault: ")]
    # kfd_hsa_hw_exception_data as tinygrad prints it: a per-engine (queue) reset, GPU hang
    assert fault and fault[0].startswith("fault: HW fault: reset_type=1 reset_cause=0 "), run.stdout
    pid = next(ln.split()[1] for ln in run.stdout.splitlines() if ln.startswith("pid "))
    log = (protocol.run_dir("GFX1100") / "server.log").read_text().splitlines()
    assert any(f"client {pid} PM4 queue 0: PM4 ring at 0x" in ln
               and "dword 0: packet OP_0x7e (opcode 0x7e) is not one" in ln for ln in log), \
        log[-5:]
