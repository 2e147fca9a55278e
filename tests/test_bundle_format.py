"""Kernel bundles: variants, variant_for rules, the msgpack file format."""

from __future__ import annotations

import msgpack
import pytest

from amdgpu.errors import BundleError
from compiler.bundle import BUNDLE_MAGIC, KernelBundle, Variant, is_bundle

pytestmark = pytest.mark.generic


def _bundle() -> KernelBundle:
    b = KernelBundle("saxpy", "ab" * 32, program={"dispatches": [{"kernel": "saxpy",
                                                                   "workgroup_size": [64, 1, 1]}]})
    b.add(Variant("hsaco", "gfx942", None, b"any-any", {"kernels": ["saxpy"]}))
    b.add(Variant("hsaco", "gfx942:xnack-", None, b"xnack-off"))
    b.add(Variant("hsaco", "gfx942:sramecc+:xnack+", None, b"both-on"))
    b.add(Variant("hsaco", "rdna3", None, b"gfx1100"))
    b.add(Variant("hsaco", "gfx11-generic", None, b"generic"))
    b.add(Variant("spirv", "vulkan", "descriptors", b"\x03\x02\x23\x07desc"))
    b.add(Variant("spirv", "vulkan", "bda", b"\x03\x02\x23\x07bda"))
    return b


@pytest.mark.parametrize("agent,picked", [
    ("gfx942:sramecc+:xnack-", b"xnack-off"),  # xnack- exact beats "any"
    ("gfx942:sramecc-:xnack-", b"xnack-off"),
    ("gfx942:sramecc+:xnack+", b"both-on"),  # exact match on both
    ("gfx942:sramecc-:xnack+", b"any-any"),  # only "any" fits
    ("gfx1100", b"gfx1100"),  # exact processor beats the generic object
    ("gfx1103", b"generic"),
    ("cdna3:xnack-", b"xnack-off"),
])
def test_variant_for_rules(agent: str, picked: bytes) -> None:
    assert _bundle().variant_for(agent).data == picked


def test_variant_for_without_match_lists_what_the_bundle_has() -> None:
    with pytest.raises(BundleError) as info:
        _bundle().variant_for("gfx1201")
    msg = str(info.value)
    assert "no code object for gfx1201" in msg and "\n" not in msg
    assert "hsaco gfx942:xnack-" in msg and "spirv vulkan (bda)" in msg
    with pytest.raises(BundleError, match="unknown AMD GPU target"):
        _bundle().variant_for("gfx7")


def test_spirv_and_vulkan() -> None:
    b = _bundle()
    assert b.spirv("bda").data.endswith(b"bda")
    assert b.variant_for("vulkan").abi == "descriptors"
    only = KernelBundle("k", "00" * 32, [Variant("hsaco", "gfx1100", None, b"x")])
    with pytest.raises(BundleError, match="no SPIR-V for the 'bda' ABI; it has: hsaco gfx1100"):
        only.spirv("bda")
    with pytest.raises(BundleError, match="no SPIR-V for vulkan"):
        only.variant_for("vulkan")


def test_add_replaces_same_kind_target_abi() -> None:
    b = _bundle()
    n = len(b.variants)
    b.add(Variant("hsaco", "gfx1100", None, b"newer"))
    assert len(b.variants) == n and b.variant_for("gfx1100").data == b"newer"
    assert b.targets.count("gfx1100") == 1


@pytest.mark.parametrize("args,pattern", [
    (("ptx", "gfx942", None, b""), "variant kind 'ptx'"),
    (("hsaco", "gfx942", "bda", b""), "takes no abi"),
    (("hsaco", "gfx1100:xnack+", None, b""), "does not support xnack"),
    (("spirv", "gfx1100", "bda", b""), "target must be 'vulkan'"),
    (("spirv", "vulkan", "push", b""), "abi 'push'"),
    (("hsaco", "gfx942", None, "text"), "data must be bytes"),
])
def test_variant_validation(args, pattern: str) -> None:
    with pytest.raises(BundleError, match=pattern):
        Variant(*args)


def test_round_trip_bytes_and_file(tmp_path) -> None:
    b = _bundle()
    data = b.to_bytes()
    assert is_bundle(data) and not is_bundle(b"\x7fELF" + data)
    again = KernelBundle.from_bytes(data)
    assert again == b
    path = b.save(tmp_path / "sub" / "saxpy.kbundle")
    assert KernelBundle.load(path) == b
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind


def test_bad_bundle_files(tmp_path) -> None:
    with pytest.raises(BundleError, match="not a kernel bundle: not msgpack"):
        KernelBundle.from_bytes(b"\xc1\xc1")
    with pytest.raises(BundleError, match="no 'amdgpu-direct.bundle' magic"):
        KernelBundle.from_bytes(msgpack.packb({"magic": "x"}))
    newer = msgpack.packb({"magic": BUNDLE_MAGIC, "version": 99})
    with pytest.raises(BundleError, match="version 99 is newer than this reader"):
        KernelBundle.from_bytes(newer)
    broken = msgpack.packb({"magic": BUNDLE_MAGIC, "version": 1, "name": "k"})
    with pytest.raises(BundleError, match="corrupt kernel bundle"):
        KernelBundle.from_bytes(broken)
    with pytest.raises(BundleError, match="cannot read kernel bundle"):
        KernelBundle.load(tmp_path / "missing.kbundle")
    with pytest.raises(BundleError, match="cannot be written"):
        KernelBundle("k", "00", [Variant("hsaco", "gfx1100", None, b"", {"f": object()})]
                     ).to_bytes()


def test_variant_from_code_object(code_objects) -> None:
    data = code_objects[("gfx942:sramecc+:xnack-", 5)].read()
    v = Variant.from_code_object(data, {"compiler": "clang 22"})
    assert v.target == "gfx942:sramecc+:xnack-" and v.kind == "hsaco"
    assert set(v.code_object().kernels) == {"saxpy", "lds_reverse", "scratch"}
    b = KernelBundle("kernels", "cd" * 32, [v])
    assert b.variant_for("gfx942:sramecc+:xnack-") is v
    with pytest.raises(BundleError, match="no code object for gfx942:sramecc-:xnack-"):
        b.variant_for("gfx942:sramecc-:xnack-")
