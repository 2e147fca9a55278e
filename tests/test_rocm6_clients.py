"""Today's ROCm clients, unmodified, on the emulated kernel inside scripts/rocm6.sh's Debian
sid root filesystem (issue 29): HIP 6.4.3 programs built with sid's hipcc for gfx942,
gfx1100 and gfx1201 (HIP 6.4.3 has no gfx950).

Needs root; the root filesystem is built on first use (tests/rocm6_rootfs.py), whichever
test of the run comes first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rocm6_rootfs import ensure_rootfs

pytestmark = [pytest.mark.generic]

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "rocm6.sh"
# a node of these tests' own spelling: a device server per node name, whichever checkout
# started it
NODE = "1xgfx942"


def rocm6(*args: str, node: str = NODE, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO,
                          env={**os.environ, "AMDGPU_EMULATED_NODE": node})


@pytest.fixture(scope="module")
def sid() -> None:
    ensure_rootfs("sid")  # built here on a fresh machine


#: one hipcc build serves the emulated MI300X, RX 7900 XTX and RX 9070 XT. Not gfx950: sid's
#: HIP 6.4.3 has no MI355X in its device table (test_hip64_refuses_gfx950 below).
ARCHS = ("gfx942", "gfx1100", "gfx1201")
NODES = [f"1x{a}" for a in ARCHS]


@pytest.fixture(scope="module")
def hip_program(sid) -> str:
    """tests/emulated/hip_program.hip built by sid's hipcc 7.0 for ARCHS (HIP 6.4.3)."""
    return _hipcc("tests/emulated/hip_program.hip", "hip_program")


def _hipcc(source: str, name: str) -> str:
    """The program built for ARCHS; built again only when its source or ARCHS changed (a
    stamp beside it names their hash)."""
    import hashlib

    out = REPO / "build" / "rocm6" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256((REPO / source).read_bytes() + ",".join(ARCHS).encode()).hexdigest()
    stamp = out.with_name(name + ".stamp")
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return str(out.relative_to(REPO))
    built = rocm6("hipcc", *(f"--offload-arch={a}" for a in ARCHS), "-o",
                  str(out.relative_to(REPO)), source, timeout=600)
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    stamp.write_text(key)
    return str(out.relative_to(REPO))


@pytest.mark.slow
@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("mode", ["basic", "host", "pinned", "graph"])
def test_hip64_programs_run_on_the_emulated_mi300x(hip_program, mode, node):
    """Launch on a stream, events, copies both ways and atomics (basic); hipHostRegister'd
    memory written in place (host); hipHostMalloc'd memory read back directly (pinned):
    two kernels captured from a stream into a graph and launched twice (graph): each result
    checked by the program against the host's arithmetic. On an MI300X, an RX 7900 XTX and
    an RX 9070 XT."""
    run = rocm6(hip_program, mode, node=node)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert f"{mode} ok" in run.stdout


@pytest.mark.slow
def test_hip64_peer_copy_on_two_mi300x(hip_program):
    run = rocm6(hip_program, "peer", node="2xgfx942")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "peer ok" in run.stdout


@pytest.fixture(scope="module")
def hip_printf(sid) -> str:
    return _hipcc("tests/data/isa/hip_printf.hip", "hip_printf")


@pytest.mark.slow
@pytest.mark.parametrize("node", NODES)
def test_hip64_device_printf(hip_printf, node):
    """Device printf (HIP's hostcall buffer, serviced by the host runtime while the kernel
    runs) and a system-scope atomic: tests/data/isa/hip_printf.hip."""
    run = rocm6(hip_printf, node=node)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    lines = run.stdout.splitlines()
    assert "device printf: thread 0 value 40" in lines
    assert "device printf: thread 1 value 41" in lines
    assert "sync no error, counter 64" in lines


@pytest.fixture(scope="module")
def hip_grid_sync(sid) -> str:
    return _hipcc("tests/data/isa/hip_grid_sync.hip", "hip_grid_sync")


@pytest.mark.slow
@pytest.mark.parametrize("node", NODES)
def test_hip64_cooperative_groups_grid_sync(hip_grid_sync, node):
    """hipLaunchCooperativeKernel and cg::this_grid().sync() under HIP 6.4: hipcc 7 builds
    grid.sync() as a spin on a counter in the launch's workspace (no GWS instructions), so
    every workgroup must make progress while the first ones wait (the executor yields at
    s_sleep); HIP offers cooperative launch where the KFD node reports num_gws (64 on every
    target of a current kernel, gfx11/gfx12 included). The grid-wide sum is exact."""
    run = rocm6(hip_grid_sync, node=node, timeout=300)
    out = run.stdout + run.stderr
    assert "cooperative launch 1" in run.stdout, out[-3000:]
    assert run.returncode == 0 and "grid sync ok" in run.stdout, out[-3000:]


@pytest.mark.slow
def test_hip64_refuses_gfx950(hip_program):
    """HIP 6.4.3 as Debian builds it enumerates the MI355X's ROCr agent but has no gfx950 in
    its own device table, so a HIP program finds no device: HIP's word (AMD_LOG_LEVEL=1),
    not the emulated kernel's (ROCr 6.4.3 itself runs gfx950: tests/test_rocm6_suites.py)."""
    run = rocm6("env", "AMD_LOG_LEVEL=1", hip_program, "basic", node="1xgfx950")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert "Unsupported HSA device gfx950" in out, out[-3000:]
    assert "no ROCm-capable device is detected" in out, out[-3000:]


@pytest.mark.slow
def test_hip64_memory_fault_is_reported_as_an_error(hip_program):
    run = rocm6(hip_program, "fault")
    assert run.returncode != 0
    out = run.stdout + run.stderr
    # one report, as the real kernel gives it: amdkfd evicts the queues and signals the
    # memory event (kfd_signal_vm_fault_event); the queue's inactive signal is not written,
    # so HIP's queue callback never races ROCr's VM-fault handler (server.py, _on_error)
    assert "Memory access fault by GPU node-1" in out, out[-3000:]
    assert "Page not present" in out, out[-3000:]
    assert "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION" not in out, out[-3000:]
    assert "fault ok" not in out


@pytest.mark.slow
def test_sid_rocminfo_lists_a_mixed_node(sid):
    """ROCr 6.4 over four GPUs: libdrm tells their render nodes apart by st_rdev 226:<minor>
    (with one device number for all it merged them and ACQUIRE_VM got the wrong GPU)."""
    from hsa.emulated.models import parse_node

    node = "gfx942,gfx950,gfx1100,gfx1201"
    done = rocm6("rocminfo", node=node)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    gpus = done.stdout.split("Device Type:             GPU")
    assert len(gpus) == 5
    names = [line.split(":", 1)[1].strip() for line in done.stdout.splitlines()
             if line.strip().startswith("Marketing Name:")]
    assert names[1:] == [m.marketing_name for m in parse_node(node)]


@pytest.mark.slow
def test_render_nodes_stat_as_the_kernels(sid):
    """stat, fstat and statx (Python's os.stat/os.fstat go through them) of each render node:
    a character device 226:128+i, and /sys/dev/char/226:<minor>/device/drm names its card."""
    probe = ("import os, stat\n"
             "for i in range(2):\n"
             "    p = f'/dev/dri/renderD{128 + i}'\n"
             "    fd = os.open(p, os.O_RDWR)\n"
             "    for st in (os.stat(p), os.fstat(fd)):\n"
             "        print(p, stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), "
             "os.minor(st.st_rdev))\n"
             "    print(sorted(os.listdir(f'/sys/dev/char/226:{128 + i}/device/drm')))\n")
    done = rocm6("python", "-c", probe, node="2xgfx942")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines == ["/dev/dri/renderD128 True 226 128"] * 2 + ["['card0', 'renderD128']"] + \
        ["/dev/dri/renderD129 True 226 129"] * 2 + ["['card1', 'renderD129']"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_amdgpu_run_on_rocr64_inside_the_root_filesystem(sid, target):
    """The project's own driver on sid's ROCr 6.4.3 over the emulated MI300X: the workload's
    result is checked against numpy by amdgpu-run itself. gfx1100 is not the node rocm6.sh
    started (AMDGPU_EMULATED_NODE is 1xgfx942): the shim starts its device server from
    inside, with the root filesystem's Python (AMDGPU_EMULATED_PYTHON)."""
    done = rocm6("amdgpu-run", "fill", "--device", f"amdgpu:emulated:{target}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"({target})" in done.stdout and "amdgpu:emulated" in done.stdout
    assert "result              correct" in done.stdout


@pytest.mark.parametrize("rocr,target,words", [
    ("5.2.3", "gfx942", "gfx942 needs ROCr 6.1 or later"),
    ("5.2.3", "gfx1201", "ROCr 5.2.3 takes gfx90a agents only"),
    ("6.1.2", "gfx950", "gfx950 needs ROCr 6.4 or later"),
    ("6.1.2", "gfx1201", "ROCr 6.1.2 takes gfx90a, gfx942, gfx1100 agents only"),
])
def test_the_rocr_at_hand_decides_which_agents_run(rocr, target, words):
    from ground.errors import HsaUnavailable
    from hsa.emulated import check_rocr_takes
    from hsa.rocr.library import LibraryVersion

    for ok in ("gfx90a", *(["gfx942", "gfx1100"] if rocr >= "6.1" else [])):
        check_rocr_takes([ok], LibraryVersion("/x", rocm_version=rocr))
    with pytest.raises(HsaUnavailable) as refused:
        check_rocr_takes(["gfx90a", target], LibraryVersion("/x", rocm_version=rocr))
    assert words in str(refused.value) and "\n" not in str(refused.value)
    for target in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):  # sid's 6.4.3
        check_rocr_takes([target], LibraryVersion("/x", rocm_version="6.4.3"))
    check_rocr_takes(["gfx1201"], LibraryVersion("/x"))  # unknown: ROCr says it itself


@pytest.mark.slow
def test_hip_python_launch_beside_ours_and_hip(sid):
    """benchmarks/bench_hip_emulated.py inside the root filesystem: our dispatch, HIP 6.4.3
    through ctypes and hip-python's hipModuleLaunchKernel launch the same gfx942 kernel on
    the same emulated MI300X, and each one's results are checked (no timing is asserted)."""
    done = rocm6("python", "benchmarks/bench_hip_emulated.py", "--target", "gfx942",
                 "--launches", "20", "--replay", "100")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    out = done.stdout
    assert "ROCr 6.4.3" in out and "kernel fill gfx942" in out
    for row in ("our dispatch", "hipModuleLaunchKernel", "hip-python hipModuleLaunchKernel"):
        line = next(line for line in out.splitlines() if line.strip().startswith(row))
        assert line.endswith("results ok: True"), out


IREE_PROGRAM = """
func.func @main(%a: tensor<1024xf32>, %b: tensor<1024xf32>) -> tensor<1024xf32> {
  %e = tensor.empty() : tensor<1024xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                        affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%a, %b : tensor<1024xf32>, tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %m, %x : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}
"""


@pytest.mark.slow
def test_iree_runtime_runs_a_hip_program_on_the_emulated_mi300x(sid):
    """IREE's own runtime (iree-run-module of the iree-base-runtime wheel in the root
    filesystem's venv) with its HIP driver over HIP 6.4.3: a program compiled for gfx942 by
    the same IREE's iree-compile runs, its output checked against numpy."""
    import numpy as np

    work = REPO / "build" / "rocm6" / f"iree-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        (work / "prog.mlir").write_text(IREE_PROGRAM)
        a = np.linspace(-3, 5, 1024, dtype=np.float32)
        b = np.arange(1024, dtype=np.float32) % 7 - 2
        np.save(work / "a.npy", a)
        np.save(work / "b.npy", b)
        rel = work.relative_to(REPO)
        compiled = rocm6("/opt/venv/bin/iree-compile", "--iree-hal-target-device=hip",
                         "--iree-rocm-target=gfx942", f"{rel}/prog.mlir", "-o",
                         f"{rel}/prog.vmfb")
        assert compiled.returncode == 0, compiled.stderr[-3000:]
        run = rocm6("/opt/venv/bin/iree-run-module", "--device=hip",
                    f"--module={rel}/prog.vmfb", "--function=main", f"--input=@{rel}/a.npy",
                    f"--input=@{rel}/b.npy", f"--output=@{rel}/out.npy")
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        # the same float32 arithmetic, one rounding apart where the compiler fuses a*b+a
        np.testing.assert_allclose(np.load(work / "out.npy"), a * b + a, rtol=1e-6, atol=1e-5)
    finally:
        shutil.rmtree(work, ignore_errors=True)
