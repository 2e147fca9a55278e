"""Device selection: spec parsing, the opt-in flag, open() errors and devices()."""

from __future__ import annotations

import numpy as np
import pytest

import amdgpu
from amdgpu.device import DeviceSpec
from amdgpu.errors import BufferRangeError, DeviceError, HsaUnavailable
from amdgpu.selection import parse_spec, resolve


@pytest.mark.generic
@pytest.mark.parametrize(
    "spec, expected",
    [
        ("amdgpu", DeviceSpec("hsa", "rocr", (), 0)),
        ("amdgpu:1", DeviceSpec("hsa", "rocr", (), 1)),
        ("amdgpu:virtual", DeviceSpec("hsa", "virtual", ("gfx1100",), 0)),
        ("amdgpu:virtual:gfx1100", DeviceSpec("hsa", "virtual", ("gfx1100",), 0)),
        (
            "amdgpu:virtual:gfx1100,gfx1100:1",
            DeviceSpec("hsa", "virtual", ("gfx1100", "gfx1100"), 1),
        ),
        ("amdgpu:virtual:gfx1100,gfx942", DeviceSpec("hsa", "virtual", ("gfx1100", "gfx942"), 0)),
        ("vulkan", DeviceSpec("vulkan", "", (), 0)),
        ("vulkan:2", DeviceSpec("vulkan", "", (), 2)),
    ],
)
def test_parse_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.generic
@pytest.mark.parametrize(
    "spec",
    [
        "cuda",
        "amdgpu:x",
        "amdgpu:virtual:nvidia",
        "vulkan:a",
        "amdgpu:1:2",
        "",
        "amdgpu:virtual:gfx1100:0:1",
    ],
)
def test_unknown_spec_is_one_line_listing_valid_forms(spec):
    with pytest.raises(DeviceError) as e:
        amdgpu.open(spec)
    text = str(e.value)
    assert "\n" not in text and "amdgpu:virtual" in text and "vulkan:N" in text


@pytest.mark.generic
def test_virtual_index_out_of_range():
    with pytest.raises(DeviceError, match="index below 2"):
        parse_spec("amdgpu:virtual:gfx1100,gfx1100:2")


@pytest.mark.generic
def test_opt_in_flag(monkeypatch):
    monkeypatch.delenv("AMDGPU_DRIVER", raising=False)
    assert resolve().backend == "vulkan"  # auto -> Vulkan
    assert resolve(driver="auto").backend == "vulkan"
    assert resolve(driver="amdgpu") == DeviceSpec("hsa", "rocr", (), 0)
    assert resolve("amdgpu:virtual").backend == "hsa"  # the spec opts in
    assert resolve("vulkan", driver="auto").backend == "vulkan"
    monkeypatch.setenv("AMDGPU_DRIVER", "amdgpu")
    assert resolve().backend == "hsa"  # env opts in
    assert resolve("vulkan").backend == "vulkan"  # an explicit spec beats the env
    assert resolve(driver="vulkan").backend == "vulkan"
    monkeypatch.setenv("AMDGPU_DRIVER", "vulkan")
    assert resolve().backend == "vulkan"
    monkeypatch.setenv("AMDGPU_DRIVER", "cuda")
    with pytest.raises(DeviceError, match="AMDGPU_DRIVER"):
        resolve()
    with pytest.raises(DeviceError, match="unknown driver"):
        resolve(driver="hip")
    with pytest.raises(DeviceError, match="drop one"):
        resolve("amdgpu:virtual", driver="vulkan")


@pytest.mark.generic
def test_hsa_asked_for_but_unavailable_gives_rocr_cause(monkeypatch):
    monkeypatch.delenv("AMDGPU_DRIVER", raising=False)
    try:
        dev = amdgpu.open(driver="amdgpu")
    except HsaUnavailable as e:
        text = str(e)
        assert "\n" not in text and "amdgpu:virtual" in text
        assert e.status != 0
    else:  # a machine with ROCr and a GPU agent
        assert dev.backend == "hsa"
        dev.close()


@pytest.mark.hsa_virtual
def test_devices_lists_backends_and_paths_separately():
    reports = amdgpu.devices()
    by_spec = {r.spec: r for r in reports}
    virt = by_spec["amdgpu:virtual"]
    assert virt.available and virt.backend == "hsa" and virt.target == "gfx1100"
    for path in ("barrier_value", "profiling", "async_copy"):
        assert path in virt.paths
        cap = virt.paths[path]
        assert cap.available or cap.reason
    assert any(r.backend == "vulkan" for r in reports)
    rocr = [r for r in reports if r.backend == "hsa" and not r.spec.startswith("amdgpu:virtual")]
    assert rocr and all(r.available or r.reason for r in rocr)


@pytest.mark.hsa_virtual
def test_open_virtual_device_facts_and_buffers():
    with amdgpu.open("amdgpu:virtual") as dev:
        assert (dev.backend, dev.driver, dev.target, dev.spec) == (
            "hsa",
            "amdgpu",
            "gfx1100",
            "amdgpu:virtual",
        )
        assert dev.lanes >= 2
        data = np.arange(64, dtype=np.float32)
        buf = dev.buffer(data)
        assert buf.nbytes == 256 and buf.address
        np.testing.assert_array_equal(buf.to_numpy(np.float32), data)
        view = buf.view(16, 32)
        assert view.address == buf.address + 16
        np.testing.assert_array_equal(view.to_numpy(np.float32), data[4:12])
        view.write(np.full(8, -1, np.float32))
        got = buf.to_numpy(np.float32)
        assert (got[4:12] == -1).all() and got[3] == 3 and got[12] == 12
        assert buf.to_numpy(np.float32, (8, 8)).shape == (8, 8)
        with pytest.raises(BufferRangeError):
            buf.view(250, 16)
        with pytest.raises(BufferRangeError):
            view.write(np.zeros(9, np.float32))
        with pytest.raises(DeviceError):
            view.free()
        empty = dev.buffer(128)
        assert empty.nbytes == 128
        buf.free()
        with pytest.raises(DeviceError, match="freed"):
            buf.to_numpy()


@pytest.mark.hsa_virtual
def test_two_agent_virtual_system_copies_between_devices():
    spec = "amdgpu:virtual:gfx1100,gfx1100"
    with amdgpu.open(spec) as d0, amdgpu.open(spec + ":1") as d1:
        assert d0.provider is d1.provider  # one system
        assert d0.agent.handle != d1.agent.handle
        src = d0.buffer(np.arange(100, dtype=np.int32))
        dst = d1.buffer(400)
        with pytest.raises(DeviceError, match="no peer access.*enable_peer_access"):
            d1.copy(dst, src)
        d1.enable_peer_access(d0)
        d1.copy(dst, src).wait(5.0)
        np.testing.assert_array_equal(dst.to_numpy(np.int32), np.arange(100))
        d0.fill(src, np.int32(7))
        assert (src.to_numpy(np.int32) == 7).all()
        # a cross-device wait: d1's lane waits for d0's timeline
        p0 = d0.barrier(0)
        p1 = d1.barrier(0, wait=[p0])
        p1.wait(5.0)
        assert p0.done() and p1.done()


@pytest.mark.hsa_virtual
def test_bundle_without_a_variant_for_the_agent_isa():
    import compiler
    from amdgpu.errors import BundleError

    bundle = compiler.compile("fill", targets=["gfx1100"])
    with amdgpu.open("amdgpu:virtual:gfx942") as dev:
        assert dev.target == "gfx942"
        with pytest.raises(BundleError) as e:
            dev.load(bundle)
        assert "gfx1100" in str(e.value) and "\n" not in str(e.value)
