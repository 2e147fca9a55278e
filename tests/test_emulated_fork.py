"""/dev/kfd after fork, as kfd_chardev.c's kfd_ioctl has it: "Only the process that opened
/dev/kfd can use the file descriptor. Child processes need to create their own KFD device
context" (EBADF). A forked child's ioctls must not reach the server over the parent's
connection (their replies would cross the parent's); the parent keeps working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hsa.emulated import build

pytestmark = pytest.mark.generic
ROOT = Path(__file__).resolve().parent.parent

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


def test_a_forked_child_gets_ebadf_and_the_parent_keeps_its_kfd():
    build.ensure_built()
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(AMDGPU_EMULATED_NODE="gfx90a", PYTHONPATH=str(ROOT),
               LD_PRELOAD=str(build.shim_path()))
    run = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    version = lines[0].removeprefix("parent ")
    assert version.startswith("(1, ")  # KFD major version 1
    assert lines[1:] == ["child 2", f"parent again {version}"]
