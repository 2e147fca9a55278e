"""hsa.rocr against the ROCr library installed here (Debian's libhsa-runtime64-1 5.2.3):
loading, status strings, the HsaUnavailable diagnosis, capabilities by symbol lookup, and
`hsa.open_provider`. Tests that need a GPU agent are marked `hsa_rocr` and skip with ROCr's
own reason."""

from __future__ import annotations

import ctypes
import os

import pytest

import hsa
import hsa.rocr.library as rocr_library
from amdgpu.errors import HsaError, HsaUnavailable, IllegalInstruction, MemoryFault
from hsa.rocr import (
    RocrProvider,
    candidate_paths,
    diagnose_init_failure,
    init_count,
    library_capabilities,
    library_path,
    library_version,
    load_library,
)
from hsa.rocr.api import OPTIONAL, REQUIRED, HsaApi, error_for_status
from hsa.status import (
    HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
    HSA_STATUS_ERROR_INVALID_ARGUMENT,
    HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
    HSA_STATUS_ERROR_MEMORY_FAULT,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES,
)


def _system_library():
    try:
        return load_library()
    except HsaUnavailable as exc:
        pytest.skip(f"no libhsa-runtime64 on this machine: {exc}")


@pytest.fixture(scope="module")
def lib():
    return _system_library()


class HidingLibrary:
    """A CDLL-like object that hides some symbols of a real library."""

    def __init__(self, real, hidden):
        self._real = real
        self._hidden = set(hidden)
        self._name = "fake-libhsa-runtime64.so"

    def __getitem__(self, name):
        if name in self._hidden:
            raise AttributeError(f"fake library has no {name}")
        return self._real[name]


# --- loading -----------------------------------------------------------------------------
@pytest.mark.generic
def test_load_library_finds_rocr(lib):
    path = library_path(lib)
    assert "libhsa-runtime64" in os.path.basename(path)
    assert os.path.exists(path)
    assert hasattr(lib, "hsa_init")


@pytest.mark.generic
def test_library_version_of_debian_package(lib):
    version = library_version(library_path(lib))
    if not version.rocm_version:
        pytest.skip(f"no ROCm version found for {version.path}")
    assert version.rocm_tuple >= (5,)
    assert version.rocm_version in version.describe()


@pytest.mark.generic
def test_status_string_is_rocrs_own_text_without_init(lib):
    api = HsaApi(lib, library_path(lib))
    text = api.status_string(HSA_STATUS_ERROR_OUT_OF_RESOURCES)
    assert "HSA_STATUS_ERROR_OUT_OF_RESOURCES" in text
    assert api.status_string(0).startswith("HSA_STATUS_SUCCESS")
    assert api.status_string(0x7777) == "unknown HSA status 0x7777"
    error = api.error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "hsa_init")
    assert error.status == HSA_STATUS_ERROR_OUT_OF_RESOURCES
    assert str(error).startswith("hsa_init: HSA_STATUS_ERROR_OUT_OF_RESOURCES")
    assert "0x1008" in str(error)


@pytest.mark.generic
def test_candidate_paths_order(tmp_path):
    for name in ("rocm-5.7.1", "rocm-6.2.0", "rocm", "rocm-6.10.0"):
        (tmp_path / name / "lib").mkdir(parents=True)
    override = tmp_path / "custom"
    override.mkdir()
    paths = candidate_paths({"HSA_RUNTIME_PATH": str(override)}, opt_root=str(tmp_path))
    assert paths[0] == str(override / "libhsa-runtime64.so.1")
    rocm = [p for p in paths if "/rocm" in p and p.endswith(".so.1")]
    assert [p.split("/")[-3] for p in rocm] == ["rocm-6.10.0", "rocm-6.2.0", "rocm-5.7.1", "rocm"]
    assert paths[-2:] == ["libhsa-runtime64.so.1", "libhsa-runtime64.so"]


@pytest.mark.generic
def test_hsa_runtime_path_file_is_tried_first(tmp_path, lib):
    real = library_path(lib)
    paths = candidate_paths({"HSA_RUNTIME_PATH": real}, opt_root=str(tmp_path))
    assert paths[0] == real


@pytest.mark.generic
@pytest.mark.parametrize("bogus", ["dir", "file", "missing"])
def test_bogus_hsa_runtime_path_falls_back(tmp_path, lib, bogus):
    target = tmp_path / "nothing-here"
    if bogus == "dir":
        target.mkdir()
    elif bogus == "file":
        target.write_bytes(b"not a shared library")
    loaded = load_library({"HSA_RUNTIME_PATH": str(target)}, opt_root=str(tmp_path))
    assert library_path(loaded) == library_path(lib)


@pytest.mark.generic
def test_no_library_anywhere_is_one_clean_line(tmp_path, monkeypatch):
    monkeypatch.setattr(rocr_library, "SONAMES", ("libhsa-runtime64-absent.so.9",))
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"junk")
    with pytest.raises(HsaUnavailable) as info:
        load_library({"HSA_RUNTIME_PATH": str(bad)}, opt_root=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message
    assert "libhsa-runtime64 not found" in message
    assert "HSA_RUNTIME_PATH" in message and str(bad) in message
    assert "install libhsa-runtime64-1 or ROCm" in message
    assert "amdgpu:virtual" in message and "Vulkan" in message


# --- hsa_init on this machine --------------------------------------------------------------
@pytest.mark.generic
def test_provider_unavailable_names_the_cause_in_one_line(lib):
    if os.path.exists("/dev/kfd"):
        pytest.skip("/dev/kfd exists here: hsa_init does not fail for want of it")
    before = init_count()
    with pytest.raises(HsaUnavailable) as info:
        RocrProvider()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("hsa_init: /dev/kfd does not exist")
    assert "use --device amdgpu:virtual, or the Vulkan fallback" in message
    assert info.value.status == HSA_STATUS_ERROR_OUT_OF_RESOURCES
    assert info.value.call == "hsa_init"
    assert init_count() == before, "a failed hsa_init is not counted"


@pytest.mark.generic
def test_open_provider_rocr_raises_the_same(lib):
    if os.path.exists("/dev/kfd"):
        pytest.skip("/dev/kfd exists here")
    with pytest.raises(HsaUnavailable, match="/dev/kfd"):
        hsa.open_provider("rocr")


@pytest.mark.generic
def test_diagnosis_without_permission(tmp_path, monkeypatch):
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    line = diagnose_init_failure(0x1008, "out of resources", kfd=str(kfd))
    assert f"no read/write permission on {kfd}" in line
    assert "render" in line and line.endswith("use --device amdgpu:virtual, or the Vulkan fallback")


@pytest.mark.generic
def test_diagnosis_with_kfd_present_quotes_rocr(tmp_path):
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    line = diagnose_init_failure(
        0x1008, "HSA_STATUS_ERROR_OUT_OF_RESOURCES", kfd=str(kfd), dri=str(tmp_path / "dri")
    )
    assert "HSA_STATUS_ERROR_OUT_OF_RESOURCES" in line and "\n" not in line


@pytest.mark.generic
def test_diagnosis_render_nodes_without_permission(tmp_path, monkeypatch):
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    dri = tmp_path / "dri"
    dri.mkdir()
    (dri / "renderD128").write_text("")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if "renderD" in str(p) else real_access(p, m)
    )
    line = diagnose_init_failure(0x1008, "x", kfd=str(kfd), dri=str(dri))
    assert "renderD" in line


# --- symbols and capabilities --------------------------------------------------------------
@pytest.mark.generic
def test_every_bound_function_exists_in_installed_rocr(lib):
    api = HsaApi(lib, library_path(lib))
    absent = [name for name in REQUIRED if getattr(api, name) is None]
    assert absent == []
    # ROCr 5.2.3 already has every optional call the provider binds.
    assert [n for n in OPTIONAL if n in api.missing] == []


@pytest.mark.generic
def test_capabilities_of_installed_rocr(lib):
    caps = hsa.rocr.capabilities(lib)
    version = library_version(library_path(lib))
    for name in ("async_copy", "profiling", "signal_wait_any", "barrier_value"):
        assert caps[name].available, (name, caps[name].reason)
    if version.rocm_tuple[:2] == (5, 2):
        for name in ("vmem", "queue_get_info", "async_copy_on_engine", "code_object_v6"):
            assert not caps[name].available, name
        assert "hsa_amd_vmem_address_reserve" in caps["vmem"].reason
        assert "5.2.3" in caps["vmem"].reason
        assert "up to v5" in caps["code_object_v6"].reason


@pytest.mark.generic
def test_missing_optional_symbol_is_a_capability_with_reason(lib):
    fake = HidingLibrary(lib, {"hsa_amd_memory_async_copy", "hsa_amd_profiling_get_dispatch_time"})
    api = HsaApi(fake)
    assert api.hsa_amd_memory_async_copy is None
    assert "hsa_amd_memory_async_copy" in api.missing
    assert api.hsa_memory_copy is not None
    caps = library_capabilities(fake)
    assert not caps["async_copy"].available
    assert "hsa_amd_memory_async_copy" in caps["async_copy"].reason
    assert not caps["profiling"].available
    assert "hsa_amd_profiling_get_dispatch_time" in caps["profiling"].reason
    assert "set_profiler_enabled" not in caps["profiling"].reason.split(" not in ")[0]
    assert caps["signal_wait_any"].available


@pytest.mark.generic
def test_missing_required_symbol_makes_the_library_unusable(lib):
    fake = HidingLibrary(lib, {"hsa_queue_create", "hsa_signal_wait_scacquire"})
    with pytest.raises(HsaUnavailable) as info:
        RocrProvider(fake)
    message = str(info.value)
    assert "hsa_queue_create" in message and "hsa_signal_wait_scacquire" in message
    assert "\n" not in message and "amdgpu:virtual" in message


@pytest.mark.generic
def test_bindings_do_not_touch_the_shared_function_objects(lib):
    HsaApi(lib, library_path(lib))
    # ctypes caches lib.<name>; HsaApi uses lib[name], so the cached object keeps defaults.
    assert lib.hsa_signal_load_scacquire.restype is ctypes.c_int


@pytest.mark.generic
@pytest.mark.parametrize(
    "status,cls",
    [
        (HSA_STATUS_ERROR_MEMORY_FAULT, MemoryFault),
        (HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, MemoryFault),
        (HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION, IllegalInstruction),
        (HSA_STATUS_ERROR_INVALID_ARGUMENT, HsaError),
    ],
)
def test_error_for_status(status, cls):
    error = error_for_status(status, "text", "call", address=0x1000)
    assert type(error) is cls
    assert error.status == status and error.call == "call"
    if cls is MemoryFault:
        assert error.address == 0x1000


# --- open_provider -------------------------------------------------------------------------
@pytest.mark.generic
def test_open_provider_rejects_unknown_names():
    with pytest.raises(HsaError, match="unknown HSA provider"):
        hsa.open_provider("cuda")
    with pytest.raises(HsaError, match="takes no options"):
        hsa.open_provider("rocr:gfx942")


@pytest.mark.hsa_virtual
def test_open_provider_virtual_with_gpus():
    provider = hsa.open_provider("virtual:gfx1100,gfx1100")
    try:
        assert provider.name == "virtual"
        assert [a.name for a in provider.gpu_agents()] == ["gfx1100", "gfx1100"]
    finally:
        provider.shut_down()
    default = hsa.open_provider("virtual")
    try:
        assert len(default.gpu_agents()) == 1
    finally:
        default.shut_down()


# --- a real GPU ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_provider():
    try:  # without /dev/kfd: the real ROCr over the emulated AMD driver (tests/conftest.py)
        if os.environ.get("AMDGPU_TEST_ROCR_EMULATED") == "1":
            from hsa.emulated import EmulatedProvider

            provider = EmulatedProvider()
        else:
            provider = RocrProvider()
    except HsaUnavailable as exc:
        pytest.skip(str(exc))
    yield provider
    provider.shut_down()


@pytest.mark.hsa_rocr
def test_real_gpu_agents_and_pools(real_provider):
    gpus = real_provider.gpu_agents()
    assert gpus and all(a.isa.startswith("gfx") for a in gpus)
    assert all(a.wavefront_size in (32, 64) and a.compute_units > 0 for a in gpus)
    kernarg = [
        p
        for c in real_provider.cpu_agents()
        for p in real_provider.agent_pools(c.handle)
        if p.is_kernarg
    ]
    assert kernarg, "ROCr exposes a kernarg pool on the CPU agent"
    assert real_provider.version().startswith("1.")


@pytest.mark.hsa_rocr
def test_real_gpu_barrier_through_a_queue(real_provider):
    from hsa.provider import SignalCondition
    from packets import Ring, barrier_and

    gpu = real_provider.gpu_agents()[0]
    queue = real_provider.queue_create(gpu.handle, max(64, gpu.queue_min_size))
    done = real_provider.signal_create(1)
    try:
        ring = Ring(
            queue.ring,
            queue.size,
            queue.load_write_index,
            queue.add_write_index,
            queue.load_read_index,
            queue.doorbell,
        )
        ring.publish(barrier_and(dep_signals=[], completion_signal=done))
        assert real_provider.signal_wait(done, SignalCondition.LT, 1, 5.0) == 0
        assert queue.load_read_index() == 1
        assert queue.error is None
    finally:
        real_provider.signal_destroy(done)
        real_provider.queue_destroy(queue)
