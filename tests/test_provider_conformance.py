"""One conformance suite for every HSA provider (tests/provider_suite.py: signals, pools,
queues and barrier packets, executables and errors), run here against the virtual AMD system
("virtual") and against real ROCr ("rocr"), which is skipped with ROCr's own reason where no
GPU agent is present; tests/test_rocr_conformance.py runs it over the stand-in ROCr library.

Tests that would crash a real runtime (ROCr dereferences signal handles without checking)
run on the virtual provider only, and say so.
"""

from __future__ import annotations

import os

import pytest
from provider_suite import suite_members

from amdgpu.errors import HsaUnavailable


# --- providers ---------------------------------------------------------------------------
def _make_virtual():
    from hsa.virtual import VirtualProvider

    return VirtualProvider(gpus=("gfx1100",))


def _make_rocr():
    try:
        from hsa.emulated import EmulatedProvider
        from hsa.rocr import RocrProvider
    except ImportError as exc:
        pytest.skip(f"hsa.rocr cannot be imported: {exc}")
    emulated = os.environ.get("AMDGPU_TEST_ROCR_EMULATED") == "1"  # see tests/conftest.py
    try:  # without /dev/kfd: the real ROCr over the emulated AMD driver
        if not emulated:
            return RocrProvider()
        from amdgpu.device import default_emulated_gpus  # AMDGPU_EMULATED_NODE, else gfx90a

        return EmulatedProvider(node=default_emulated_gpus())
    except HsaUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("virtual", marks=pytest.mark.hsa_virtual),
        pytest.param("rocr", marks=pytest.mark.hsa_rocr),
    ],
)
def provider(request):
    p = _make_virtual() if request.param == "virtual" else _make_rocr()
    yield p
    p.shut_down()


globals().update(suite_members())  # the suite's tests and fixtures, collected here
