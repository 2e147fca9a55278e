"""Shared fixtures and options of the test suite.

Which ROCr the `hsa_rocr` tests run on:

Where /dev/kfd exists, ROCr runs over the machine's own driver. Where it does not (this
machine), the `hsa_rocr` tests run on Debian's real libhsa-runtime64 over the emulated AMD
driver (`amdgpu:emulated`, hsa/emulated) instead of skipping. `--rocr=system` (or
AMDGPU_TEST_ROCR=system) turns that off, so they skip with ROCr's "no /dev/kfd" reason.

The cross-device conformance suite (`test_device_conformance.py`) takes `lab_device`: here
it is parametrized over every device this machine offers (`amdgpu.devices()`: the virtual
system's agents, the Vulkan devices, ROCr's agents and `amdgpu:emulated` where they exist),
so `make test` runs the same suite on both backends. `hwlab run` loads the same file and
parametrizes `lab_device` itself (over the lab's devices); this file then steps aside.

A test whose hardware-class markers a device lacks is skipped with the reason, as hwlab
does. The fixtures (`device`, `fresh_device`, `trace_sink`, `hold`) are hwlab's own.

No test module imports another (tests/test_import_contract.py checks it): fixtures several
modules use are here (`code_objects`), and code they share lives in helper modules of tests/
whose names do not start with `test_` (HELPERS below), imported by their bare names.
"""

from __future__ import annotations

import os

import pytest

from tools.hwlab.fixtures import (  # noqa: F401 - fixtures, found by name
    device,
    fresh_device,
    hold,
    open_devices,
    trace_sink,
)
from tools.hwlab.inventory import HARDWARE_CLASSES, LabDevice, inventory

#: The helper modules of tests/: shared code, not tests of their own. pytest rewrites the
#: asserts of test modules only, so these are registered to report their failures as well.
HELPERS = ("codeobject_builds", "codeobjects", "gfx11_alu_cases", "hip_emulated",
           "image_descriptors", "kernel_checks",
           "linux_headers", "llvm_readelf", "provider_suite", "rocm6_rootfs", "rocr_mock",
           "toolchains", "uapi_headers")
pytest.register_assert_rewrite(*HELPERS)


def pytest_addoption(parser):
    parser.addoption(
        "--rocr",
        choices=("auto", "system", "emulated"),
        default=os.environ.get("AMDGPU_TEST_ROCR", "auto"),
        help="ROCr tests over the emulated AMD driver where /dev/kfd is missing (auto), "
             "always (emulated) or never (system)",
    )


def rocr_is_emulated(config) -> bool:
    choice = config.getoption("--rocr")
    return choice == "emulated" or (choice == "auto" and not os.path.exists("/dev/kfd"))


#: A node spec ("gfx942"): the session holds one amdgpu:emulated provider of that node open
#: from start to end (tests/test_rocm6_suites.py sets it inside scripts/rocm6.sh). sid's ROCr
#: 6.4.3 takes one hsa_init per process here: after its hsa_shut_down a second hsa_init fails
#: (HSA_STATUS_ERROR_OUT_OF_RESOURCES, /dev/kfd is never reopened), while nested
#: hsa_init/hsa_shut_down pairs under a held one are counted. ROCr 5.2.3 and 6.1.2 reopen.
HOLD_EMULATED_ENV = "AMDGPU_TEST_HOLD_EMULATED"
_held_provider = None


def pytest_configure(config):
    os.environ["AMDGPU_TEST_ROCR_EMULATED"] = "1" if rocr_is_emulated(config) else "0"


def pytest_sessionstart(session):
    global _held_provider
    node = os.environ.get(HOLD_EMULATED_ENV, "").strip()
    if node and _held_provider is None:
        from hsa.emulated import EmulatedProvider
        from hsa.emulated.models import parse_node

        _held_provider = EmulatedProvider(node=[m.target for m in parse_node(node)])


def pytest_sessionfinish(session, exitstatus):
    global _held_provider
    if _held_provider is not None:
        _held_provider.shut_down()
        _held_provider = None


# What ROCr does with GPU machine code: its blit kernels (copies, fills, code loading) and
# the tests' own kernels. On the emulated GPU these need hsa/virtual's gfx9 executor.
_RUNS_KERNELS = {"run_kernel", "memory_copy", "memory_async_copy", "executable_freeze",
                 "memory_fill", "dispatch", "upload", "download"}
#: Fixtures of code objects (the provider suite's KERNELS_CL, the compiler tests' builds).
_LOADS_CODE = {"kernel_objects", "code_objects"}


def pytest_collection_modifyitems(config, items):
    if not rocr_is_emulated(config):
        return
    from hsa.emulated import runs_kernels

    if runs_kernels():
        return
    skip = pytest.mark.skip(
        reason="runs GPU machine code (a kernel or ROCr's blit kernels): the emulated gfx90a "
               "needs hsa/virtual's gfx9 executor, not on this branch yet")
    for item in items:
        if item.get_closest_marker("hsa_rocr") is None:
            continue
        fn = getattr(item, "function", None)
        names = set(getattr(getattr(fn, "__code__", None), "co_names", ()))
        if names & _RUNS_KERNELS or _LOADS_CODE & set(getattr(item, "fixturenames", ())):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def code_objects(tmp_path_factory):
    """{(mcpu, version): Built} of tests/codeobject_builds.py: the compiler-area tests' clang
    code objects, built once per session (skipped where the ziglang wheel is missing)."""
    from codeobject_builds import build_all, have_clang

    if not have_clang():
        pytest.skip("ziglang (clang 22) is not installed: pip install ziglang")
    return build_all(tmp_path_factory.getbasetemp() / "compiler_code_objects")


_LOCAL: list[LabDevice] | None = None


def local_devices() -> list[LabDevice]:
    """This machine's devices that can be opened (read once per session)."""
    global _LOCAL
    if _LOCAL is None:
        _LOCAL = [d for d in inventory("local") if d.available]
    return _LOCAL


def _hwlab_runs(config) -> bool:
    return bool(getattr(config, "hwlab_runner", False))


def pytest_generate_tests(metafunc):
    if "lab_device" in metafunc.fixturenames and not _hwlab_runs(metafunc.config):
        devices = local_devices()
        metafunc.parametrize(
            "lab_device", devices, ids=[d.spec for d in devices], scope="session"
        )


def pytest_runtest_setup(item):
    if _hwlab_runs(item.config):
        return  # hwlab's runner skips by hardware class itself
    dev = item.callspec.params.get("lab_device") if hasattr(item, "callspec") else None
    if dev is None:
        return
    if dev.spec.startswith("amdgpu:emulated"):
        from hsa.emulated import runs_kernels

        if not runs_kernels():  # ROCr copies and fills with its own gfx9 blit kernels
            pytest.skip(
                f"{dev.spec}: ROCr's memory copies run gfx90a blit kernels, and hsa/virtual "
                f"has no gfx9 executor on this branch yet"
            )
    for mark in item.iter_markers():
        if mark.name in HARDWARE_CLASSES and mark.name not in dev.hardware_classes:
            pytest.skip(dev.missing_class_reason(mark.name))
