"""The provider-conformance suite (tests/provider_suite.py, which
tests/test_provider_conformance.py runs on the virtual system and ROCr) run against
RocrProvider over the stand-in ROCr library (tests/c/rocr_mock_runtime.c): every ctypes call
the suite makes goes through the real bindings, with no GPU.

The suite is shared, not copied; this module supplies the `provider` fixture. Tests that need
machine code to run (they call `run_kernel`) are left out: the mock executes none.
"""

from __future__ import annotations

import ctypes

import pytest
from provider_suite import suite_members
from rocr_mock import build_mock_library

from hsa.rocr import RocrProvider

pytestmark = pytest.mark.generic

# the suite's tests and fixtures, but for those that run machine code: the mock executes none
globals().update(suite_members(runs_code=False))


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    path = build_mock_library(tmp_path_factory.mktemp("conformance_mock"), minimal=False)
    lib = ctypes.CDLL(str(path))
    p = RocrProvider(lib)
    yield p
    p.shut_down()


def test_the_suite_was_imported():
    names = [n for n in globals() if n.startswith("test_") and n != "test_the_suite_was_imported"]
    assert len(names) >= 20, names
