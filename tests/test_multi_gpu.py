"""Several GPU agents of one system (issue 20): a virtual MI300X-like node (8 x gfx942,
XGMI links), selection by ordinal and UUID, ROCR_VISIBLE_DEVICES, link facts from
hsa_amd_agent_memory_pool_get_info, peer access and device-to-device copies on the copy
engine without a host bounce.

The tests taking `node` run twice: on the virtual node and on the emulated driver with four
GPU nodes (`amdgpu:emulated:4xgfx90a`), where Debian's real ROCr 5.2.3 reads the emulated kernel's
topology, applies ROCR_VISIBLE_DEVICES itself and copies between GPUs with its blit
kernels on the emulated gfx90a."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import amdgpu
from amdgpu.device import DeviceSpec
from amdgpu.errors import DeviceError, HsaError
from amdgpu.selection import parse_spec
from hsa.provider import LinkType, PoolAccess
from hsa.virtual import VirtualProvider

pytestmark = pytest.mark.hsa_virtual
NODE = "amdgpu:virtual:8xgfx942"
# AMDGPU_TEST_EMULATED_HIVE names another emulated hive: tests/test_rocm6_suites.py runs these
# on amdgpu:emulated:4xgfx942 under ROCr 6.4.3
EMULATED_NODE = os.environ.get("AMDGPU_TEST_EMULATED_HIVE", "amdgpu:emulated:4xgfx90a")
ROOT = Path(__file__).resolve().parents[1]


def _emulated_or_skip() -> None:
    from hsa.emulated import runs_kernels, unavailable_reason

    why = unavailable_reason() or ("" if runs_kernels() else "no gfx9 executor")
    if why:
        pytest.skip(f"amdgpu:emulated: {why}")


@pytest.fixture(params=[NODE, EMULATED_NODE], ids=["virtual", "emulated"])
def node(request) -> str:
    if request.param == EMULATED_NODE:
        _emulated_or_skip()
    return request.param


def _gpus(node: str) -> int:
    return int(node.rsplit(":", 1)[1].split("x")[0])


def _system(node: str):
    """The node's provider itself (ROCr over the emulated driver, or the virtual system)."""
    if node == EMULATED_NODE:
        from hsa.emulated import EmulatedProvider
        from hsa.virtual.topology import expand_gpus

        return EmulatedProvider(node=expand_gpus(node.rsplit(":", 1)[1].split(",")))
    return VirtualProvider(gpus=("8xgfx942",))


def test_node_specs_parse_counts_ordinals_and_uuids(monkeypatch):
    assert parse_spec(NODE + ":3") == DeviceSpec("hsa", "virtual", ("gfx942",) * 8, 3)
    assert str(parse_spec(NODE + ":3")) == NODE + ":3"
    by_uuid = parse_spec(NODE + ":GPU-00ab")
    assert by_uuid.uuid == "GPU-00ab" and str(by_uuid) == NODE + ":GPU-00ab"
    assert parse_spec("amdgpu:GPU-1234abcd").uuid == "GPU-1234abcd"
    with pytest.raises(DeviceError, match="at most 64"):
        parse_spec("amdgpu:virtual:65xgfx942")
    with pytest.raises(DeviceError, match="index below 8"):
        parse_spec(NODE + ":8")
    monkeypatch.setenv("AMDGPU_VIRTUAL_NODE", "4xgfx942")
    assert parse_spec("amdgpu:virtual:2").gpus == ("gfx942",) * 4
    assert str(parse_spec("amdgpu:virtual:2")) == "amdgpu:virtual:2"
    monkeypatch.delenv("AMDGPU_VIRTUAL_NODE")
    assert parse_spec("amdgpu:virtual").gpus == ("gfx1100",)  # the default stays one GPU
    assert parse_spec(EMULATED_NODE + ":3") == DeviceSpec("hsa", "emulated", ("gfx90a",) * 4, 3)
    assert str(parse_spec(EMULATED_NODE + ":3")) == EMULATED_NODE + ":3"
    assert parse_spec(EMULATED_NODE + ":GPU-656d").uuid == "GPU-656d"
    with pytest.raises(DeviceError, match="at most 16"):
        parse_spec("amdgpu:emulated:17xgfx90a")
    with pytest.raises(DeviceError, match="index below 4"):
        parse_spec(EMULATED_NODE + ":4")
    monkeypatch.setenv("AMDGPU_EMULATED_NODE", "2xgfx90a")
    assert parse_spec("amdgpu:emulated:1").gpus == ("gfx90a",) * 2
    assert str(parse_spec("amdgpu:emulated:1")) == "amdgpu:emulated:1"
    monkeypatch.delenv("AMDGPU_EMULATED_NODE")
    assert parse_spec("amdgpu:emulated") == DeviceSpec("hsa", "emulated", ("gfx90a",), 0)
    assert str(parse_spec("amdgpu:emulated:gfx90a")) == "amdgpu:emulated"


def test_every_agent_by_ordinal_and_by_uuid(node):
    n = _gpus(node)
    with _system(node) as p:
        uuids = [a.uuid for a in p.gpu_agents()]
    assert len(set(uuids)) == n and all(u.startswith("GPU-") and len(u) == 20 for u in uuids)
    k = n - 3
    with amdgpu.open(f"{node}:{k}") as dk, amdgpu.open(node + ":" + uuids[k]) as by_uuid:
        assert dk.uuid == uuids[k] and by_uuid.agent.handle == dk.agent.handle
        assert dk.agent.node == k + 1  # node 0 is the CPU
    with pytest.raises(DeviceError, match="no GPU agent .* has UUID GPU-0000000000000bad"):
        amdgpu.open(node + ":GPU-0000000000000bad")


def test_rocr_visible_devices_hides_and_orders_gpus(monkeypatch, node):
    n = _gpus(node)
    with _system(node) as p:
        uuids = [a.uuid for a in p.gpu_agents()]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", f"{n - 1},{uuids[2].upper()},0")
    with _system(node) as p:
        seen = p.gpu_agents()
    assert [a.uuid for a in seen] == [uuids[n - 1], uuids[2], uuids[0]]
    assert [a.node for a in seen] == [n, 3, 1]  # KFD node numbers do not move
    with amdgpu.open(node + ":1") as d:  # ordinals count the visible agents
        assert d.uuid == uuids[2]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1,bogus,2")  # ROCr stops at a bad token
    with _system(node) as p:
        assert [a.uuid for a in p.gpu_agents()] == [uuids[1]]


# A GPU's access to host memory: the virtual system says ALLOWED_BY_DEFAULT; ROCr 5.2.3
# (MemoryRegion::GetAccessInfo) says DISALLOWED_BY_DEFAULT for system memory to any GPU,
# though it maps each non-restricted system allocation to every GPU when allocating it.
HOST_ACCESS = {NODE: PoolAccess.ALLOWED_BY_DEFAULT,
               EMULATED_NODE: PoolAccess.DISALLOWED_BY_DEFAULT}


def test_link_facts_xgmi_within_the_hive_pcie_elsewhere(node):
    with _system(node) as p:
        g = p.gpu_agents()
        cpu = p.cpu_agents()[0]
        peer_vram = next(x for x in p.agent_pools(g[1].handle) if x.is_coarse_grained)
        own_vram = next(x for x in p.agent_pools(g[0].handle) if x.is_coarse_grained)
        host = next(x for x in p.agent_pools(cpu.handle) if x.is_fine_grained)
        (hop,) = p.agent_pool_links(g[0].handle, peer_vram.handle)
        assert (hop.link_type, hop.numa_distance) == (LinkType.XGMI, 15)
        assert p.agent_pool_access(g[0].handle, peer_vram.handle) == \
            PoolAccess.DISALLOWED_BY_DEFAULT
        assert p.agent_pool_links(g[0].handle, own_vram.handle) == []
        (to_host,) = p.agent_pool_links(g[0].handle, host.handle)
        assert (to_host.link_type, to_host.numa_distance) == (LinkType.PCIE, 20)
        assert p.agent_pool_access(g[0].handle, host.handle) == HOST_ACCESS[node]


def test_gpus_outside_a_hive_go_through_the_host():
    with VirtualProvider(gpus=("gfx1100", "gfx1100")) as p:  # two Radeons: through the host
        g = p.gpu_agents()
        vram = next(x for x in p.agent_pools(g[1].handle) if x.is_coarse_grained)
        hops = p.agent_pool_links(g[0].handle, vram.handle)
        assert [h.link_type for h in hops] == [LinkType.PCIE, LinkType.PCIE]


def test_virtual_copy_engine_refuses_peer_memory_without_allow_access():
    with VirtualProvider(gpus=("2xgfx942",)) as p:
        a, b = p.gpu_agents()
        pa = next(x for x in p.agent_pools(a.handle) if x.is_coarse_grained)
        pb = next(x for x in p.agent_pools(b.handle) if x.is_coarse_grained)
        src, dst = p.memory_pool_allocate(pa.handle, 4096), p.memory_pool_allocate(pb.handle, 4096)
        done = p.signal_create(1)
        with pytest.raises(HsaError, match="not mapped for agent"):
            p.memory_async_copy(dst, b.handle, src, a.handle, 4096, [], done)
        p.agents_allow_access([a.handle, b.handle], src)
        p.agents_allow_access([a.handle, b.handle], dst)
        p.memory_async_copy(dst, b.handle, src, a.handle, 4096, [], done)
        from hsa.provider import SignalCondition

        p.signal_wait(done, SignalCondition.EQ, 0, 5.0)


_UNMAPPED_PEER_COPY = textwrap.dedent("""
    import numpy as np
    from hsa.emulated import EmulatedProvider
    from hsa.provider import SignalCondition

    p = EmulatedProvider(gpus=2)
    a, b = p.gpu_agents()
    pa = next(x for x in p.agent_pools(a.handle) if x.is_coarse_grained)
    pb = next(x for x in p.agent_pools(b.handle) if x.is_coarse_grained)
    src, dst = p.memory_pool_allocate(pa.handle, 4096), p.memory_pool_allocate(pb.handle, 4096)
    done = p.signal_create(1)
    p.agents_allow_access([a.handle, b.handle], src)
    p.agents_allow_access([a.handle, b.handle], dst)
    p.memory_async_copy(dst, b.handle, src, a.handle, 4096, [], done)
    p.signal_wait(done, SignalCondition.EQ, 0, 30.0)
    print("allowed copy done", flush=True)
    # mapped to GPU node 2 only (large: ROCr cuts small ones from a shared block)
    lone = p.memory_pool_allocate(pb.handle, 64 << 20)
    p.signal_store(done, 1)
    p.memory_async_copy(lone, b.handle, src, a.handle, 4096, [], done)
    p.signal_wait(done, SignalCondition.EQ, 0, 30.0)
    print("unmapped copy reported done", flush=True)
""")


def test_emulated_gpu_faults_on_peer_memory_without_allow_access():
    """VRAM is mapped to its owner only (libhsakmt's MAP_MEMORY_TO_GPU, as ROCr asks) and
    hsa_amd_agents_allow_access maps it to peers; the blit kernel ROCr runs on GPU 1 for a
    copy into GPU 2's memory that was never shared faults on the emulated GPU (its SDMA
    engine; the device server's log names the mapping), and the application gets ROCr's
    fault report."""
    _emulated_or_skip()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ROCR_VISIBLE_DEVICES", None)
    run = subprocess.run([sys.executable, "-c", _UNMAPPED_PEER_COPY], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert "allowed copy done" in run.stdout, run.stderr[-2000:]
    assert "unmapped copy reported done" not in run.stdout
    assert run.returncode != 0
    # ROCr's report, as over KFD: its VM-fault handler's or its blit queue's error
    assert "GPU memory fault at" in run.stderr or "MEMORY_APERTURE_VIOLATION" in run.stderr
    from hsa.emulated import protocol

    log = (protocol.run_dir("2xgfx90a") / "server.log").read_text()
    assert "is not mapped for agent 1" in log  # GPU node 1 ran the copy


def test_peer_copy_runs_on_the_copy_engine_without_a_host_bounce(node):
    with amdgpu.open(node + ":0") as d0, amdgpu.open(node + ":1") as d1:
        assert d0.links(d1)[0].link_type == LinkType.XGMI
        data = np.arange(1 << 16, dtype=np.float32)
        src = d0.buffer(data)
        dst = d1.buffer(data.nbytes)
        with pytest.raises(DeviceError) as e:
            d1.copy_async(dst, src)
        assert "no peer access" in str(e.value) and "enable_peer_access" in str(e.value)
        assert "\n" not in str(e.value)
        d1.enable_peer_access(d0)
        assert d1.can_access_peer(d0) and d0.can_access_peer(d1)
        p = d0.provider
        calls = []
        real_async = p.memory_async_copy

        def counted(*args):
            calls.append(args)
            return real_async(*args)

        def bounce(*_args):
            raise AssertionError("a host-side hsa_memory_copy during a peer copy")

        p.memory_async_copy, p.memory_copy = counted, bounce
        try:
            point = d1.copy_async(dst, src, lane=1)
            point.wait(10.0)
        finally:
            del p.memory_async_copy, p.memory_copy
        ((dst_addr, dst_agent, src_addr, src_agent, size, _deps, _sig),) = calls
        assert (dst_addr, src_addr, size) == (dst.address, src.address, data.nbytes)
        assert (dst_agent, src_agent) == (d1.agent.handle, d0.agent.handle)
        np.testing.assert_array_equal(dst.to_numpy(np.float32), data)


def test_peer_copy_is_ordered_after_a_dispatch_on_the_peer(node):
    with amdgpu.open(node + ":2") as d2, amdgpu.open(node + ":3") as d3:
        d2.enable_peer_access(d3)
        src = d3.buffer(4096)
        fill = d3.fill(src, np.uint32(0xABCD1234))  # a kernel on d3's lane
        dst = d2.buffer(4096)
        d2.copy_async(dst, src, wait=[fill]).wait(10.0)
        assert (dst.to_numpy(np.uint32) == 0xABCD1234).all()


def test_peer_access_needs_one_system(node):
    with amdgpu.open(node + ":0") as d0, amdgpu.open("amdgpu:virtual") as other:
        with pytest.raises(DeviceError, match="same HSA system"):
            d0.enable_peer_access(other)


def test_hwlab_devices_lists_every_agent_with_pools_and_links(monkeypatch, capsys):
    import json

    from tools.hwlab.cli import main

    monkeypatch.setenv("AMDGPU_VIRTUAL_NODE", "4xgfx942")
    assert main(["devices", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)
            if r["spec"].startswith("amdgpu:virtual")]
    assert [r["spec"] for r in rows] == ["amdgpu:virtual"] + [f"amdgpu:virtual:{i}"
                                                              for i in (1, 2, 3)]
    topo = rows[0]["topology"]
    assert {p["kind"] for p in topo["pools"]} == {"coarse", "fine", "group"}
    peers = [ln for ln in topo["links"] if ln["to"].startswith("GPU-")]
    assert len(peers) == 3 and all(ln["type"] == "XGMI" and ln["hops"] == 1 for ln in peers)
    assert {ln["to"] for ln in peers} == {r["topology"]["uuid"] for r in rows[1:]}
    (host,) = [ln for ln in topo["links"] if ln["to"] == "cpu"]
    assert (host["type"], host["numa_distance"]) == ("PCIE", 20)
    assert main(["devices"]) == 0
    assert "XGMI" in capsys.readouterr().out


def test_bad_transfers_are_one_line_naming_buffer_device_and_next_step(node):
    from amdgpu.errors import BufferRangeError

    a, b = f"{node}:{_gpus(node) - 2}", f"{node}:{_gpus(node) - 1}"
    with amdgpu.open(a) as d4, amdgpu.open(b) as d5:
        small, big = d4.buffer(64), d4.buffer(4096)
        freed = d4.buffer(64)
        freed.free()
        other = d5.buffer(64)
        cases = [
            (BufferRangeError, lambda: d4.copy_async(small, big, 128),
             (f"0x{small.address:x}", a, "check the offset")),
            (DeviceError, lambda: d4.copy_async(freed, small),
             (f"0x{freed.address:x}", a, "allocate a new one")),
            (DeviceError, lambda: d4.copy_async(small, other),
             (repr(other), b, "enable_peer_access")),
            (DeviceError, lambda: small.write_async(np.zeros(16, np.uint8), zero_copy=True),
             (repr(small), a, "dev.pin(array)")),
        ]
        before = small.to_numpy().copy()
        for kind, call, needles in cases:
            with pytest.raises(kind) as e:
                call()
            text = str(e.value)
            assert "\n" not in text
            for needle in needles:
                assert needle in text, (needle, text)
        np.testing.assert_array_equal(small.to_numpy(), before)  # nothing half-copied


def test_readme_multi_gpu_example_runs(node):
    """examples/multi_gpu.py, the README's multi-GPU copy, on the virtual node and on the
    real ROCr over the emulated driver's four GPU nodes."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ROCR_VISIBLE_DEVICES", None)
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "multi_gpu.py"), node],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    link, peer, small = run.stdout.splitlines()
    first, _, rest = link.partition(" -> ")
    assert first.startswith("GPU-") and rest.endswith("[('XGMI', 15)]") and first not in rest
    assert peer == "peer copy: [0. 1. 2.] True"
    assert small.startswith("10,000 small buffers: {'slabs': 2,")
    assert "'blocks_in_use': 10000" in small


def test_one_emulated_node_at_a_time_in_a_process():
    """ROCr reads the topology at its first hsa_init: while devices of one emulated node are
    open, another node size is refused in one line; once they close, it opens."""
    from amdgpu.errors import HsaUnavailable

    _emulated_or_skip()
    with amdgpu.open(EMULATED_NODE + ":0"):
        with pytest.raises(HsaUnavailable) as e:
            amdgpu.open("amdgpu:emulated")
        text = str(e.value)
        assert "4 GPU(s)" in text and "cannot also show 1" in text and "new process" in text
        assert "\n" not in text
    with amdgpu.open("amdgpu:emulated") as d:
        from hsa.virtual.topology import gpu_uuid

        assert len(d.provider.gpu_agents()) == 1 and d.uuid == gpu_uuid("gfx90a", 0)
