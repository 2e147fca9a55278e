"""The wire between the emulated kernel's client shim (shim/kfd_shim.c) and its device
server (server.py): message heads, the shared events page's layout, the run directory.

A client connection is a unix stream socket; each request is a head (REQUEST), the ioctl's
argument struct and the data its input pointers point at (MAP/UNMAP's device ids, a userptr's
offset in the memfd sent with it); each reply is a head (REPLY), the struct back, the writes
to make at the client's output pointers (u64 address, u32 length, u32 pad, bytes) and the mmap
offsets of the memfds that come with the reply (u64 offset, u64 size each, the fds by
SCM_RIGHTS in the same order).
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

VERSION = 2  # HELLO carries it (in nfds); kfd_shim.c's PROTOCOL_VERSION
OP_HELLO, OP_IOCTL, OP_STATUS, OP_HOLD, OP_RELEASE, OP_FAULT = 1, 2, 3, 4, 5, 6
KIND_KFD, KIND_RENDER = 1, 2
REQUEST = struct.Struct("<IIQIIII")  # op, kind, request (HELLO: minor), arglen, extralen, nfds, pid
REPLY = struct.Struct("<iIII")  # ret (0 or -errno), arglen, nwrites, nkeys
WRITE = struct.Struct("<QII")
KEY = struct.Struct("<QQ")

# The events page (one per KFD client, a memfd mapped by both sides)
EVENTS_SEQ = 0  # u32 futex word: bumped on every signal
EVENTS_FAULT = 64  # kfd_hsa_memory_exception_data of the last memory fault (32 bytes)
EVENTS_HW_EXCEPTION = 96  # kfd_hsa_hw_exception_data of the last queue reset (16 bytes)
EVENTS_SIGNALED = 4096  # u32[MAX_EVENTS]: manual-reset events' state
EVENTS_FIRED = 4096 + 16384  # u32[MAX_EVENTS]: how often each event fired
EVENTS_CONSUMED = 4096 + 32768  # u32[MAX_EVENTS]: FIRED as of the last wait that took it
EVENTS_AUTO_RESET = 4096 + 49152  # u8[MAX_EVENTS]
EVENTS_TYPE = 4096 + 49152 + 4096  # u8[MAX_EVENTS]
EVENTS_PAGE_BYTES = 65536
MAX_EVENTS = 4096

NODE_ENV = "AMDGPU_EMULATED_NODE"
DEFAULT_NODE = "gfx90a"


def run_dir(spec: str) -> Path:
    """/tmp/amdgpu-emulated-<uid>/<spec>: the server's socket, lock, log and sysfs tree (the
    shim computes the same path)."""
    return Path(f"/tmp/amdgpu-emulated-{os.getuid()}") / re.sub(r"[^A-Za-z0-9,]", "_", spec)


def request(spec: str, op: int = OP_STATUS, pid: int | None = None, address: int = 0) -> dict:
    """Ask the node's running server: OP_STATUS (its clients: pid, allocations, bytes,
    queues, each AQL queue's indices), OP_HOLD / OP_RELEASE (benchmarks: doorbells kept from
    the queues, then passed on), OP_FAULT (tests: a GPU memory fault at `address` in client
    `pid`, as a kernel's would be: its fault record and memory events, its queues on that
    GPU evicted). Raises OSError when no server runs for `spec`."""
    import time

    for attempt in range(3):  # a server exiting when idle may drop the connection
        try:
            return _request(spec, op, os.getpid() if pid is None else pid, address)
        except (ConnectionError, FileNotFoundError):
            if attempt == 2:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _request(spec: str, op: int, pid: int, address: int) -> dict:
    import json
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(run_dir(spec) / "sock"))
        s.sendall(REQUEST.pack(op, 0, address, 0, 0, 0, pid))
        head = b""
        while len(head) < REPLY.size:
            chunk = s.recv(REPLY.size - len(head))
            if not chunk:
                raise ConnectionError("the device server closed the connection")
            head += chunk
        _ret, length, _w, _k = REPLY.unpack(head)
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            if not chunk:
                raise ConnectionError("the device server closed the connection")
            body += chunk
    return json.loads(body)
