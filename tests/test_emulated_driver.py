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
from amdgpu.errors import HsaUnavailable, MemoryFault
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


def test_several_gpu_nodes_topology_from_c(thunk, tmp_path):
    """AMDGPU_EMULATED_GPUS=3: the nodes, io links, UUIDs, per-node queues and node maps
    ROCr's BuildTopology and memory regions read (tests/c/thunk_topology.c)."""
    exe = tmp_path / "thunk_topology"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(HERE / "c" / "thunk_topology.c"),
                    f"-L{thunk.parent}", "-l:libhsakmt.so.1", "-lpthread",
                    f"-Wl,-rpath,{thunk.parent}"], check=True, capture_output=True)
    env = dict(os.environ, AMDGPU_EMULATED_GPUS="3", AMDGPU_EMULATED="0",
               AMDGPU_EMULATED_DETACH_MS="300")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) >= 18, run.stdout + run.stderr
    assert all(line.startswith("ok ") for line in lines), run.stdout
    env["AMDGPU_EMULATED_GPUS"] = "17"  # more than the thunk offers: OpenKFD says so
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode != 0 and "AMDGPU_EMULATED_GPUS" in run.stderr and "1..16" in run.stderr


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


def test_completion_records_carry_rocrs_queue_id_in_every_session(thunk):
    """The packet processor stamps completion records with ROCr's queue id (hsa_queue_t.id),
    not the thunk's KFD id: those restart with each ROCr session in the process while
    ROCr's keep counting, so from the second session on they named a queue of the first.
    Each dispatch gets exactly one completion record (the timer adds none of its own)."""
    import collections

    import packets
    from hsa.emulated import runs_kernels
    from tools.hwlab.fixtures import library_bundle

    if not runs_kernels():
        pytest.skip("the emulated GPU needs hsa/virtual's gfx9 executor to run kernels")
    sink = packets.MemorySink()
    previous = packets.set_sink(sink)
    try:
        for session in range(3):
            with amdgpu.open("amdgpu:emulated") as dev:
                k = dev.load(library_bundle(dev, "fill")).kernel("fill")
                buf = dev.buffer(4096)
                start = len(sink.records)
                with dev.time_dispatches() as timer:
                    for lane in (0, 1):
                        dev.dispatch(k, 1024, 256, (buf, np.float32(1), np.uint32(1024)),
                                     lane=lane)
                dev.synchronize()
                recs = sink.records[start:]
                dispatched = {
                    (r.queue_id, r.packet_id) for r in recs
                    if isinstance(r, packets.trace.PacketRecord)
                    and r.decode()["type"] == packets.PacketType.KERNEL_DISPATCH
                }
                done = collections.Counter(
                    (r.queue_id, r.packet_id) for r in recs
                    if isinstance(r, packets.trace.CompletionRecord))
                lanes = {ln.queue.id for ln in dev.lanes_}
                assert {q for q, _ in dispatched} == lanes, (session, dispatched, lanes)
                assert set(done) <= {(q, p) for q in lanes for p in range(1 << 20)}, (
                    f"session {session}: completion records name queues {set(done)}, the "
                    f"lanes are {lanes}")
                assert dispatched <= set(done), (session, dispatched - set(done))
                assert max(done.values()) == 1, f"session {session}: duplicates {done}"
                assert {t.queue_id for t in timer.times} == lanes
    finally:
        packets.set_sink(previous)


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
    assert "GPU agents: 1" in run.stdout
    env["AMDGPU_EMULATED_GPUS"] = "3"  # three GPU nodes; the barrier runs on the third
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "agent gfx90a: barrier completed, signal 0" in run.stdout
    assert "GPU agents: 3" in run.stdout


# --- a GPU memory fault through the real path --------------------------------------------
OOB_CL = ("__kernel void oob(__global unsigned int* out, unsigned long far) {\n"
          "  *(__global unsigned int*)(far) = 7u; out[0] = 1u; }\n")


def test_out_of_bounds_kernel_reaches_rocrs_fault_handling(thunk, tmp_path):
    """The executor's fault -> the VM-fault event (HSA_EVENTID_MEMORY_FATAL_PROCESS) ->
    ROCr's VMFaultHandler -> the provider's system event handler -> MemoryFault from the
    wait; the queue's callback gets MEMORY_APERTURE_VIOLATION; the process survives and
    the device can be opened again."""
    from hsa.emulated import EmulatedProvider, runs_kernels
    from hsa.provider import SignalCondition
    from hsa.status import HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION
    from packets import kernel_dispatch

    if not runs_kernels():
        pytest.skip("the emulated gfx90a needs hsa/virtual's gfx9 executor, not here yet")
    from provider_suite import (
        compile_cl,
        device_pool,
        kernarg_pool,
        load_executable,
        publish,
    )

    data = compile_cl(OOB_CL, "gfx90a", tmp_path)
    provider = EmulatedProvider()
    try:
        gpu = provider.gpu_agents()[0].handle
        exe = load_executable(provider, gpu, data)
        sym = provider.executable_get_symbol_by_name(exe, "oob.kd", gpu)
        out = provider.memory_pool_allocate(device_pool(provider, gpu), 4096)
        kernarg = provider.memory_pool_allocate(kernarg_pool(provider), 4096)
        provider.agents_allow_access([gpu], kernarg)
        args = provider.host_view(kernarg, 4096)
        args[:] = 0
        args[0:8].view(np.uint64)[0] = out
        args[8:16].view(np.uint64)[0] = 0x10  # outside every allocation
        seen = []
        queue = provider.queue_create(gpu, 64, callback=lambda status, q: seen.append(status))
        done = provider.signal_create(1)
        publish(queue, kernel_dispatch(
            workgroup_size=(64, 1, 1), grid_size=(64, 1, 1), dims=1,
            kernel_object=sym.kernel_object, kernarg_address=kernarg, private_segment_size=0,
            group_segment_size=0, completion_signal=done))
        with pytest.raises(MemoryFault) as info:
            provider.signal_wait(done, SignalCondition.EQ, 0, 5.0)
        assert info.value.address == 0x10
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION]
        provider.queue_destroy(queue)
    finally:
        provider.shut_down()
    again = EmulatedProvider()
    try:
        assert again.gpu_agents()[0].isa.startswith("gfx90a")
    finally:
        again.shut_down()


# --- ROCr's PM4-IB vendor packet (hsa_executable_freeze's icache invalidate) ---------------
def _pm4_ib_packet(ib_address: int, dwords: int) -> np.ndarray:
    words = np.zeros(8, dtype=np.uint64)
    jump = [(3 << 30) | ((4 - 2) << 16) | (0x3F << 8),  # type-3 INDIRECT_BUFFER, 4 dwords
            ib_address & 0xFFFFFFFC, ib_address >> 32, dwords | (1 << 23)]
    words[0] = 0 | (1 << 16) | (jump[0] << 32)  # VENDOR_SPECIFIC, AmdFormat PM4_IB
    words[1] = jump[1] | (jump[2] << 32)
    words[2] = jump[3] | (0xA << 32)  # dw_cnt_remain as ROCr writes it
    return words


def _ring(queue, words: np.ndarray) -> int:
    idx = queue.add_write_index(1)
    off = (idx % queue.size) * 64
    queue.ring[off + 4: off + 64] = words.view(np.uint8)[4:]
    queue.ring[off: off + 4].view(np.uint32)[0] = np.uint32(words[0] & 0xFFFFFFFF)
    queue.doorbell(idx)
    return idx


@pytest.mark.parametrize("opcode, accepted", [(0x58, True), (0x37, False)])
def test_pm4_indirect_buffer(thunk, opcode, accepted):
    """ACQUIRE_MEM (ROCr's InvalidateCodeCaches) is run; a WRITE_DATA to register 0, which
    the virtual GPU does not model, stops the queue, reported through ROCr to the queue's
    callback (hsa/virtual/pm4.py runs the buffer)."""
    from hsa.emulated import EmulatedProvider

    provider = EmulatedProvider()
    try:
        gpu = provider.gpu_agents()[0].handle
        cpu_pool = provider.agent_pools(provider.cpu_agents()[0].handle)[0].handle
        ib = provider.memory_pool_allocate(cpu_pool, 4096)
        provider.agents_allow_access([gpu], ib)
        body = provider.host_view(ib, 4096).view(np.uint32)
        body[:8] = 0
        body[0] = (3 << 30) | ((7 - 1) << 16) | (opcode << 8)  # 7 body dwords follow
        seen = []
        queue = provider.queue_create(gpu, 64, callback=lambda status, q: seen.append(status))
        idx = _ring(queue, _pm4_ib_packet(ib, 8))
        deadline = time.monotonic() + 5
        while queue.load_read_index() <= idx and not seen and time.monotonic() < deadline:
            time.sleep(0.005)
        if accepted:
            assert queue.load_read_index() == idx + 1 and not seen
        else:
            while not seen and time.monotonic() < deadline:
                time.sleep(0.005)
            assert seen == [HSA_STATUS_ERROR_INVALID_PACKET_FORMAT]
        provider.queue_destroy(queue)
        provider.memory_pool_free(ib)
    finally:
        provider.shut_down()
