"""The emulated AMD driver (hsa/emulated): our libhsakmt.so.1 under Debian's real ROCr.

Checked here: the thunk's event and queue rules from C (tests/c/thunk_events.c, built with
gcc against the libhsakmt-dev headers), the one-line errors for bad setups, the
amdgpu:emulated device spec, and queue errors travelling the real path (device side ->
queue_inactive_signal -> ROCr's handler -> the queue's callback). The provider conformance
suite runs on it too (tests/test_provider_conformance.py, tests/conftest.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import amdgpu
from amdgpu.errors import HsaUnavailable
from hsa.emulated import build, driver
from hsa.status import HSA_STATUS_ERROR_INVALID_PACKET_FORMAT

HERE = Path(__file__).resolve().parent
ROCR = "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1"

pytestmark = pytest.mark.generic


def _need_gcc():
    if shutil.which("gcc") is None or not os.path.exists(build.HEADER):
        pytest.skip("gcc or the libhsakmt-dev headers are missing: the thunk cannot be built")


@pytest.fixture(scope="module")
def thunk() -> Path:
    _need_gcc()
    return build.ensure_built()


def test_thunk_has_rocrs_soname_and_version_node(thunk):
    text = thunk.read_bytes()
    assert b"libhsakmt.so.1\0" in text and b"HSAKMT_1\0" in text
    if not os.path.exists(ROCR):
        pytest.skip("Debian's libhsa-runtime64-1 is not installed")
    imported = subprocess.run(["objdump", "-T", ROCR], capture_output=True, text=True).stdout
    wanted = {line.split()[-1] for line in imported.splitlines() if "hsaKmt" in line}
    ours = subprocess.run(["objdump", "-T", str(thunk)], capture_output=True, text=True).stdout
    defined = {line.split()[-1] for line in ours.splitlines()
               if "HSAKMT_1" in line and ".text" in line}
    assert len(wanted) >= 40 and wanted <= defined, sorted(wanted - defined)


def test_event_and_queue_rules_from_c(thunk, tmp_path):
    exe = tmp_path / "thunk_events"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(HERE / "c" / "thunk_events.c"),
                    f"-L{thunk.parent}", "-l:libhsakmt.so.1", "-lpthread",
                    f"-Wl,-rpath,{thunk.parent}"], check=True, capture_output=True)
    # AMDGPU_EMULATED=0: the program is its own device side (no embedded Python)
    env = dict(os.environ, AMDGPU_EMULATED_DETACH_MS="300", AMDGPU_EMULATED="0")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) >= 16, run.stdout + run.stderr
    assert all(line.startswith("ok ") for line in lines), run.stdout


# --- bad input: one line with the cause --------------------------------------------------
def test_unsupported_isa_is_one_line():
    with pytest.raises(HsaUnavailable) as info:
        driver.start("gfx1100")
    text = str(info.value)
    assert "gfx90a" in text and "gfx1100" in text and "\n" not in text


def test_statically_linked_rocr_is_one_line(tmp_path):
    _need_gcc()
    src = tmp_path / "rocr.c"
    src.write_text("int hsa_init(void) { return 0; }\nint hsaKmtOpenKFD(void) { return 0; }\n")
    lib = tmp_path / "libhsa-runtime64.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    needed = driver.needed_libraries(str(lib))
    assert needed is not None and "libhsakmt.so.1" not in needed
    with pytest.raises(HsaUnavailable) as info:
        driver.check_rocr_links_thunk(str(lib))
    text = str(info.value)
    assert "statically" in text and "6.3" in text and "\n" not in text


def test_debian_rocr_links_the_thunk_dynamically():
    if not os.path.exists(ROCR):
        pytest.skip("Debian's libhsa-runtime64-1 is not installed")
    assert "libhsakmt.so.1" in driver.needed_libraries(ROCR)
    driver.check_rocr_links_thunk(ROCR)  # no error


def test_missing_prebuilt_thunk_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv(build.ENV_VAR, str(tmp_path / "nothing" / "libhsakmt.so.1"))
    with pytest.raises(HsaUnavailable) as info:
        build.ensure_built()
    assert "does not exist" in str(info.value) and "setup.sh" in str(info.value)


def test_broken_thunk_source_is_one_line(monkeypatch, tmp_path):
    _need_gcc()
    bad = tmp_path / "hsakmt_emu.c"
    bad.write_text("this is not C\n")
    monkeypatch.setattr(build, "SOURCES", (bad, build.SOURCES[1]))
    with pytest.raises(HsaUnavailable) as info:
        build.build(tmp_path / "out" / "libhsakmt.so.1")
    text = str(info.value)
    assert "gcc failed" in text and "\n" not in text
    assert not (tmp_path / "out" / "libhsakmt.so.1").exists()


# --- the device spec ---------------------------------------------------------------------
def test_spec_parsing():
    from amdgpu.device import DeviceSpec
    from amdgpu.selection import parse_spec

    assert parse_spec("amdgpu:emulated") == DeviceSpec("hsa", "emulated", ("gfx90a",), 0)
    assert parse_spec("amdgpu:emulated:gfx90a") == DeviceSpec("hsa", "emulated", ("gfx90a",), 0)
    assert str(parse_spec("amdgpu:emulated:gfx90a")) == "amdgpu:emulated"
    assert parse_spec("amdgpu:emulated").system == "emulated:gfx90a"
    with pytest.raises(amdgpu.errors.DeviceError):
        parse_spec("amdgpu:emulated:notatarget")


def test_devices_lists_emulated():
    reports = {r.spec: r for r in amdgpu.devices()}
    assert "amdgpu:emulated" in reports
    emu = reports["amdgpu:emulated"]
    assert emu.target == "gfx90a" and emu.backend == "hsa"


def test_open_device_on_real_rocr(thunk):
    with amdgpu.open("amdgpu:emulated") as dev:
        assert dev.provider.name == "rocr" and dev.provider.driver == "emulated"
        assert dev.agent.isa.startswith("gfx90a")
        # one ROCr per process: while it runs over the emulated driver, amdgpu:0 says so
        with pytest.raises(HsaUnavailable, match="emulated AMD driver"):
            amdgpu.open("amdgpu")


# --- queue errors through the real path ----------------------------------------------------
def test_bad_packet_reaches_the_queue_callback_through_rocr(thunk):
    from hsa.emulated import EmulatedProvider

    provider = EmulatedProvider()
    try:
        gpu = provider.gpu_agents()[0].handle
        seen = []
        queue = provider.queue_create(gpu, 64, callback=lambda status, q: seen.append(status))
        words = np.zeros(8, dtype=np.uint64)
        words[0] = 7 | (1 << 8)  # packet type 7 does not exist
        idx = queue.add_write_index(1)
        off = (idx % queue.size) * 64
        queue.ring[off + 4: off + 64] = words.view(np.uint8)[4:]
        queue.ring[off: off + 4].view(np.uint32)[0] = np.uint32(words[0])
        queue.doorbell(idx)
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [HSA_STATUS_ERROR_INVALID_PACKET_FORMAT]
        provider.queue_destroy(queue)
        # the process and the device survive: a new queue runs a barrier
        signal = provider.signal_create(1)
        q2 = provider.queue_create(gpu, 64)
        words[:] = 0
        words[0] = 3 | (1 << 8) | (2 << 11) | (2 << 13)  # BARRIER_AND, system scopes
        words[7] = signal
        idx = q2.add_write_index(1)
        off = (idx % q2.size) * 64
        q2.ring[off + 4: off + 64] = words.view(np.uint8)[4:]
        q2.ring[off: off + 4].view(np.uint32)[0] = np.uint32(words[0])
        q2.doorbell(idx)
        from hsa.provider import SignalCondition

        assert provider.signal_wait(signal, SignalCondition.EQ, 0, timeout_s=5.0) == 0
        provider.queue_destroy(q2)
        provider.signal_destroy(signal)
    finally:
        provider.shut_down()


def test_plain_rocr_after_emulated_shutdown_fails_as_without_kfd(thunk):
    if os.path.exists("/dev/kfd"):
        pytest.skip("/dev/kfd exists here")
    from hsa.emulated import EmulatedProvider
    from hsa.rocr import RocrProvider

    EmulatedProvider().shut_down()
    with pytest.raises(HsaUnavailable, match="/dev/kfd does not exist"):
        RocrProvider()


# --- a plain C program, one environment variable -----------------------------------------
def test_c_program_runs_on_real_rocr_with_ld_library_path(thunk, tmp_path):
    if not os.path.exists(ROCR):
        pytest.skip("Debian's libhsa-runtime64-1 is not installed")
    exe = tmp_path / "hsa_barrier"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(HERE / "c" / "hsa_barrier.c"),
                    "-lhsa-runtime64"], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMDGPU_EMULATED")}
    env["LD_LIBRARY_PATH"] = str(thunk.parent)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "agent gfx90a: barrier completed, signal 0" in run.stdout
