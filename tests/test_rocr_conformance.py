"""The provider-conformance suite (tests/test_provider_conformance.py) run against RocrProvider
over the stand-in ROCr library (tests/c/rocr_mock_runtime.c): every ctypes call the suite
makes goes through the real bindings, with no GPU.

The suite is imported, not copied; only the `provider` fixture is replaced. Tests that need
machine code to run (they call `run_kernel`) are left out: the mock executes none.
"""

from __future__ import annotations

import ctypes

import pytest

try:
    import test_provider_conformance as conformance
except ImportError as exc:  # pragma: no cover - the suite is another area's file
    pytest.skip(f"the conformance suite cannot be imported: {exc}", allow_module_level=True)

from test_rocr_mock import _build

from hsa.rocr import RocrProvider

pytestmark = pytest.mark.generic

_EXECUTES_CODE = "run_kernel"

for _name in dir(conformance):
    _value = getattr(conformance, _name)
    if _name.startswith("test_") and callable(_value):
        if _EXECUTES_CODE not in getattr(getattr(_value, "__code__", None), "co_names", ()):
            globals()[_name] = _value
    elif _name in ("gpu", "queue", "code_objects"):
        globals()[_name] = _value  # fixtures the suite's tests ask for


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    lib = ctypes.CDLL(str(_build(tmp_path_factory.mktemp("conformance_mock"), minimal=False)))
    p = RocrProvider(lib)
    yield p
    p.shut_down()


def test_the_suite_was_imported():
    names = [n for n in globals() if n.startswith("test_") and n != "test_the_suite_was_imported"]
    assert len(names) >= 20, names
