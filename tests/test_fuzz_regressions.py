"""Every input a fuzzer found a bug with, replayed (issue 35): tests/data/fuzz/regressions/
TARGET/NAME goes through the same target function as under atheris (tools/fuzz/targets.py),
which must return: a project error is the promised answer to bad bytes, anything else
escaping fails the test. The seed corpora (tests/data/fuzz/TARGET/) are replayed too, so a
target that breaks on valid input is caught here, not after minutes of fuzzing.

`make fuzz` runs the fuzzers themselves (FUZZ_SECONDS per target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.fuzz.targets import TARGETS

DATA = Path(__file__).parent / "data" / "fuzz"


def _inputs(folder: Path) -> list:
    return [pytest.param(t, p, id=f"{t}/{p.name}") for t in sorted(TARGETS)
            if (folder / t).is_dir() for p in sorted((folder / t).iterdir()) if p.is_file()]


REGRESSIONS = _inputs(DATA / "regressions")
SEEDS = _inputs(DATA)


def _needs(target: str) -> None:
    if target == "loader":
        from hsa.virtual.executor import executor_for

        if executor_for("gfx11") is None:
            pytest.skip("the loader target opens amdgpu:virtual (gfx1100)")


@pytest.mark.parametrize(("target", "path"), REGRESSIONS)
def test_a_fuzzer_finding_stays_fixed(target, path):
    _needs(target)
    TARGETS[target](path.read_bytes())


@pytest.mark.parametrize(("target", "path"), SEEDS)
def test_a_seed_goes_through_its_target(target, path):
    _needs(target)
    TARGETS[target](path.read_bytes())


def test_every_target_has_seeds():
    assert {t for t in TARGETS if any((DATA / t).glob("*"))} == set(TARGETS)
