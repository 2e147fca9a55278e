"""Target registry, target-id parsing and the xnack/sramecc compatibility rules."""

from __future__ import annotations

import pytest

from amdgpu.errors import CodeObjectError
from hsa.abi.codeobject import target_id_from_flags
from hsa.abi.targets import (
    TARGETS,
    TargetId,
    by_mach,
    compatibility_score,
    is_compatible,
    known_names,
    lookup,
)

pytestmark = pytest.mark.generic


@pytest.mark.parametrize("name,family,wave,mach,lds", [
    ("gfx942", "gfx9", 64, 0x4C, 64 * 1024),
    ("gfx950", "gfx9", 64, 0x4F, 160 * 1024),
    ("gfx1100", "gfx11", 32, 0x41, 64 * 1024),
    ("gfx1101", "gfx11", 32, 0x46, 64 * 1024),
    ("gfx1151", "gfx11", 32, 0x4A, 64 * 1024),
    ("gfx1200", "gfx12", 32, 0x48, 64 * 1024),
    ("gfx1201", "gfx12", 32, 0x4E, 64 * 1024),
    ("gfx1250", "gfx12", 32, 0x49, 320 * 1024),
])
def test_registry_facts(name: str, family: str, wave: int, mach: int, lds: int) -> None:
    t = lookup(name)
    assert (t.name, t.family, t.wave_size, t.mach, t.lds_size) == (name, family, wave, mach, lds)
    assert by_mach(mach) is t


@pytest.mark.parametrize("alias,name", [
    ("cdna3", "gfx942"), ("cdna4", "gfx950"), ("mi355x", "gfx950"), ("mi350x", "gfx950"),
    ("cdna5", "gfx1250"), ("mi455x", "gfx1250"), ("mi450", "gfx1250"), ("rdna3", "gfx1100"),
    ("rdna4", "gfx1201"), ("CDNA3", "gfx942"), ("gfx942:sramecc+:xnack-", "gfx942"),
])
def test_aliases(alias: str, name: str) -> None:
    assert lookup(alias).name == name


def test_feature_support() -> None:
    assert lookup("gfx942").features() == ("sramecc", "xnack")
    assert lookup("gfx950").supports_xnack and lookup("gfx950").supports_sramecc
    for name in ("gfx1100", "gfx1201", "gfx1250"):
        assert not lookup(name).supports_xnack and not lookup(name).supports_sramecc
    assert all(TARGETS[m].generic == "gfx11-generic" for m in TARGETS["gfx11-generic"].members)


def test_unknown_target_lists_known_names() -> None:
    with pytest.raises(CodeObjectError) as info:
        lookup("gfx9999")
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "gfx9999" in msg and "gfx942" in msg and "gfx1250" in msg and "cdna3" in msg
    assert "\n" not in msg
    assert "rdna4" in known_names()


@pytest.mark.parametrize("text,name,xnack,sramecc,canonical", [
    ("gfx942:sramecc+:xnack-", "gfx942", "off", "on", "gfx942:sramecc+:xnack-"),
    ("gfx942:xnack-:sramecc+", "gfx942", "off", "on", "gfx942:sramecc+:xnack-"),
    ("gfx942:xnack+", "gfx942", "on", "any", "gfx942:xnack+"),
    ("gfx942", "gfx942", "any", "any", "gfx942"),
    ("amdgcn-amd-amdhsa--gfx950:sramecc-", "gfx950", "any", "off", "gfx950:sramecc-"),
    ("cdna3:xnack-", "gfx942", "off", "any", "gfx942:xnack-"),
    ("rdna3", "gfx1100", "any", "any", "gfx1100"),
])
def test_target_id_parse_and_format(text, name, xnack, sramecc, canonical) -> None:
    tid = TargetId.parse(text)
    assert (tid.name, tid.xnack, tid.sramecc) == (name, xnack, sramecc)
    assert str(tid) == canonical
    assert TargetId.parse(str(tid)) == tid


@pytest.mark.parametrize("text,pattern", [
    ("gfx1100:xnack+", "gfx1100 does not support xnack"),
    ("gfx1250:sramecc-", "gfx1250 does not support sramecc"),
    ("gfx942:xnack", "must be sramecc\\+/- or xnack\\+/-"),
    ("gfx942:wave32+", "unknown feature 'wave32'"),
    ("gfx942:xnack+:xnack-", "xnack given twice"),
    ("gfx1", "unknown AMD GPU target"),
])
def test_bad_target_ids(text: str, pattern: str) -> None:
    with pytest.raises(CodeObjectError, match=pattern):
        TargetId.parse(text)


# (code object, agent, compatible): "any" runs on either; on/off must match the agent.
COMPAT = [
    ("gfx942", "gfx942:sramecc+:xnack-", True),
    ("gfx942:xnack-", "gfx942:sramecc+:xnack-", True),
    ("gfx942:xnack+", "gfx942:sramecc+:xnack-", False),
    ("gfx942:sramecc-", "gfx942:sramecc+:xnack-", False),
    ("gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", True),
    ("gfx942:sramecc+:xnack+", "gfx942:sramecc+:xnack-", False),
    ("gfx942:xnack+", "gfx942:xnack+", True),
    ("gfx942:xnack+", "gfx942", True),  # agent setting unknown: accepted
    ("gfx942", "gfx950", False),
    ("gfx1100", "gfx1101", False),
    ("gfx1100", "gfx1100", True),
    ("gfx11-generic", "gfx1101", True),
    ("gfx11-generic", "gfx1201", False),
    ("gfx12-generic", "gfx1201", True),
    ("gfx12-generic", "gfx1250", False),
    ("gfx9-4-generic:xnack-", "gfx950:xnack-", True),
    ("gfx9-4-generic:xnack-", "gfx950:xnack+", False),
    ("gfx1100", "gfx11-generic", False),
]


@pytest.mark.parametrize("code,agent,ok", COMPAT)
def test_compatibility_table(code: str, agent: str, ok: bool) -> None:
    assert is_compatible(code, agent) is ok
    assert (compatibility_score(code, agent) >= 0) is ok


def test_score_prefers_exact_features_then_exact_processor() -> None:
    agent = "gfx942:sramecc+:xnack-"
    order = ["gfx942:sramecc+:xnack-", "gfx942:xnack-", "gfx942", "gfx9-4-generic:xnack-"]
    scores = [compatibility_score(c, agent) for c in order]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)


@pytest.mark.parametrize("flags,expected", [
    (0x04C, "gfx942"), (0x54C, "gfx942"), (0xE4C, "gfx942:sramecc+:xnack-"),
    (0xB4C, "gfx942:sramecc-:xnack+"), (0x24F, "gfx950:xnack-"), (0x041, "gfx1100"),
    (0x549, "gfx1250"), (0x1000054, "gfx11-generic"),
])
def test_target_id_from_e_flags(flags: int, expected: str) -> None:
    assert target_id_from_flags(flags) == expected


def test_unknown_mach_uses_metadata_name_or_fails() -> None:
    # 0x33 is gfx1010, which the table does not list: the metadata's name is used.
    assert target_id_from_flags(0x233, "gfx1010") == "gfx1010:xnack-"
    with pytest.raises(CodeObjectError, match="unknown EF_AMDGPU_MACH 0x33"):
        target_id_from_flags(0x33)
