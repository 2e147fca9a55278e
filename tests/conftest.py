"""Which ROCr the suite's `hsa_rocr` tests run on.

Where /dev/kfd exists, ROCr runs over the machine's own driver. Where it does not (this
machine), the `hsa_rocr` tests run on Debian's real libhsa-runtime64 over the emulated AMD
driver (`amdgpu:emulated`, hsa/emulated) instead of skipping. `--rocr=system` (or
AMDGPU_TEST_ROCR=system) turns that off, so they skip with ROCr's "no /dev/kfd" reason.
"""

from __future__ import annotations

import os

import pytest


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


def pytest_configure(config):
    os.environ["AMDGPU_TEST_ROCR_EMULATED"] = "1" if rocr_is_emulated(config) else "0"


# What ROCr does with GPU machine code: its blit kernels (copies, fills, code loading) and
# the tests' own kernels. On the emulated GPU these need hsa/virtual's gfx9 executor.
_RUNS_KERNELS = {"run_kernel", "memory_copy", "memory_async_copy", "executable_freeze",
                 "memory_fill", "dispatch", "upload", "download"}


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
        if names & _RUNS_KERNELS or "code_objects" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)
