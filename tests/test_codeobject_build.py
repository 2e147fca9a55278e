"""The code objects the compiler-area tests read (tests/codeobject_builds.py, served by the
`code_objects` fixture of tests/conftest.py) are built for every entry of BUILDS."""

from __future__ import annotations

import pytest
from codeobject_builds import BUILDS, Built

pytestmark = pytest.mark.generic


def test_every_build_produces_an_elf(code_objects: dict[tuple[str, int], Built]) -> None:
    assert len(code_objects) == len(BUILDS)
    for built in code_objects.values():
        assert built.read().startswith(b"\x7fELF")
        assert built.read(linked=False).startswith(b"\x7fELF")
