"""Which ROCr the suite's `hsa_rocr` tests run on.

`--rocr=system` (the default) leaves ROCr over the machine's own libhsakmt and /dev/kfd:
without an AMD GPU those tests skip with ROCr's reason. `--rocr=emulated` (or
AMDGPU_TEST_ROCR=emulated) starts the emulated AMD driver before anything loads ROCr, so
the same tests run on Debian's real libhsa-runtime64 over the virtual GPU (`make test` runs
that second pass). One process has one ROCr, so the two cannot share a process.
"""

from __future__ import annotations

import os


def pytest_addoption(parser):
    parser.addoption(
        "--rocr",
        choices=("system", "emulated"),
        default=os.environ.get("AMDGPU_TEST_ROCR", "system"),
        help="ROCr over the system's libhsakmt (default) or over the emulated AMD driver",
    )


def pytest_configure(config):
    if config.getoption("--rocr") == "emulated":
        from hsa.emulated import start

        start()


# What ROCr does with GPU machine code: its blit kernels (copies, fills, code loading) and
# the tests' own kernels. On the emulated GPU these need hsa/virtual's gfx9 executor.
_RUNS_KERNELS = {"run_kernel", "memory_copy", "memory_async_copy", "executable_freeze",
                 "memory_fill", "dispatch", "upload", "download"}


def pytest_collection_modifyitems(config, items):
    if config.getoption("--rocr") != "emulated":
        return
    import pytest

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
