"""/dev/kfd after fork, as kfd_chardev.c's kfd_ioctl has it: "Only the process that opened
/dev/kfd can use the file descriptor. Child processes need to create their own KFD device
context" (EBADF). A forked child's ioctls must not reach the server over the parent's
connection (their replies would cross the parent's); the parent keeps working. The render
node's descriptor gets EBADF in a forked child too (the same shared connection).

A vfork child (CPython's subprocess and multiprocessing start children so) runs in the
parent's memory until it execs: what it closes must not change the parent's descriptor table
in the shim. CPython 3.11's child closed the /proc/self/fd directory it had opened, which got
number 3, a plain script's /dev/kfd: the parent's next KFD ioctl went to the bare socket and
failed with ENOTTY (tinygrad's first VRAM allocation after its compile pool started)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hsa.emulated import build

pytestmark = pytest.mark.generic
ROOT = Path(__file__).resolve().parent.parent
NODE = "gfx90a"

CHILD = r"""
import errno, fcntl, os, struct
GET_VERSION = 0x80084B01  # _IOR('K', 0x01, struct kfd_ioctl_get_version_args)
fd = os.open("/dev/kfd", os.O_RDWR)
print("parent", struct.unpack("II", fcntl.ioctl(fd, GET_VERSION, bytes(8))))
pid = os.fork()
if pid == 0:
    try:
        fcntl.ioctl(fd, GET_VERSION, bytes(8))
        os._exit(1)
    except OSError as exc:
        os._exit(2 if exc.errno == errno.EBADF else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
print("parent again", struct.unpack("II", fcntl.ioctl(fd, GET_VERSION, bytes(8))))
"""


def _env() -> dict[str, str]:
    build.ensure_built()
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(AMDGPU_EMULATED_NODE=NODE, PYTHONPATH=str(ROOT),
               LD_PRELOAD=str(build.shim_path()))
    return env


def test_a_forked_child_gets_ebadf_and_the_parent_keeps_its_kfd():
    run = subprocess.run([sys.executable, "-c", CHILD], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    version = lines[0].removeprefix("parent ")
    assert version.startswith("(1, ")  # KFD major version 1
    assert lines[1:] == ["child 2", f"parent again {version}"]


SUBPROCESS = r"""
import fcntl, os, struct, subprocess
GET_VERSION = 0x80084B01
fd = os.open("/dev/kfd", os.O_RDWR)
print("kfd fd", fd, struct.unpack("II", fcntl.ioctl(fd, GET_VERSION, bytes(8))))
# two consecutive descriptors to pass (multiprocessing's spawn passes several): CPython 3.11's
# child then closes through a /proc/self/fd listing whose own descriptor gets number 3
r, w = os.pipe()
subprocess.run(["true"], pass_fds=(r, w), check=True)
print("after", struct.unpack("II", fcntl.ioctl(fd, GET_VERSION, bytes(8))))
"""


def test_a_subprocess_started_by_vfork_leaves_the_parents_kfd_alone():
    """CPython's own subprocess path, from a plain script whose /dev/kfd is descriptor 3."""
    run = subprocess.run([sys.executable, "-c", SUBPROCESS], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    first, after = run.stdout.splitlines()
    assert first.startswith("kfd fd 3 (1, "), first  # the number the child's listing reuses
    assert after == "after " + first.removeprefix("kfd fd 3 ")


def test_vfork_and_fork_children_of_a_c_program(tmp_path):
    """tests/c/fork_descriptors.c, with the kernel's kfd_ioctl.h and libdrm's drm.h: a vfork
    child's close leaves the parent's /dev/kfd working; a forked child owns its copy of the
    shim's table (a new file at the closed number is that file, not /dev/kfd), and gets
    EBADF on the inherited /dev/kfd and render node, which keep answering the parent, and
    EINVAL for an mmap of the parent's BO through /dev/kfd (kfd_mmap's kfd_get_process)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the C client cannot be built")
    for header in ("/usr/include/linux/kfd_ioctl.h", "/usr/include/libdrm/drm.h"):
        if not Path(header).exists():
            pytest.skip(f"{header} missing: install linux-libc-dev and libdrm-dev")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "drm").symlink_to("/usr/include/libdrm")
    exe = tmp_path / "fork_descriptors"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-I", str(tmp_path / "include"), "-o",
                    str(exe), str(ROOT / "tests" / "c" / "fork_descriptors.c")], check=True)
    run = subprocess.run([str(exe), "/dev/dri/renderD128"], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    version = lines[0].removeprefix("parent kfd ")
    assert version.startswith("1."), lines
    kfd = 3  # the C program's first descriptor after 0-2
    assert lines[1:] == [f"vfork child closed {kfd}: kfd {version}",
                         "fork child kfd: EBADF",
                         f"fork child new file at {kfd}: ENOTTY",
                         "fork child render: EBADF",
                         "parent bo alloc ok mmap ok",
                         "fork child bo mmap: EINVAL",
                         f"parent render ok kfd {version}"]
    assert "render node descriptor 4 was opened by process" in run.stderr
