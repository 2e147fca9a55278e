"""An SDMA packet the engine does not model, on the emulated kernel: the queue stops and the
process hears it at once, never a hang. ROCr 5.2 listens to no HW-exception event (what the
driver raises after resetting a hung engine), so the server writes the fault's one line to
the process's stderr and then raises the VM-fault event, on which ROCr reports and aborts
(checked end to end by hand with real HIP: docs in README "The command processor")."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from ground.errors import MemoryFault
from hsa.emulated import server
from hsa.virtual.sdma import SdmaFault

pytestmark = pytest.mark.generic


def test_tell_process_writes_one_line_to_its_stderr():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server.tell_process(child.pid, "amdgpu emulated kernel: a line\n")
    _, err = child.communicate("", timeout=30)
    assert err == "amdgpu emulated kernel: a line\n"
    server.tell_process(child.pid, "gone")  # the process is gone: no exception


def test_an_unmodelled_sdma_packet_faults_the_process(monkeypatch):
    told, faults = [], []
    monkeypatch.setattr(server, "tell_process", lambda pid, line: told.append((pid, line)))
    client = types.SimpleNamespace(pid=4321, memory_fault=lambda a, g: faults.append((a, g)))
    queue = object.__new__(server.SdmaQueue)
    queue.client = client
    queue.node = types.SimpleNamespace(gpu_id=77)
    queue.worker = types.SimpleNamespace(engine=types.SimpleNamespace(base=0x7F0000))
    queue._on_error(SdmaFault("client 4321 SDMA queue 2: ring at 0x7f0000 byte 24: SDMA "
                              "dword 0: COPY sub-op 5 (tiled sub-window copy) is not modeled"))
    assert told == [(4321, "amdgpu emulated kernel: client 4321 SDMA queue 2: ring at 0x7f0000 "
                           "byte 24: SDMA dword 0: COPY sub-op 5 (tiled sub-window copy) is "
                           "not modeled (HSA status 0x1009)")]
    assert faults == [(0x7F0000, 77)]
    told.clear()
    queue._on_error(MemoryFault(0x29, "bad address", address=0x40))  # a VM fault: no line
    assert told == [] and faults[-1] == (0x40, 77)
