"""gfx1250's extended kernel-dispatch packet (hsa_amd_ext_kernel_dispatch_packet_t).

Debian's libhsa-runtime-dev (ROCr 5.2) headers are too old to hold this packet, so the
oracle here is twofold: the public layout as ROCr's current hsa_ext_amd.h gives it (quoted
in issue #18, written out below), and tests/c/ext_dispatch_layout.c, a C struct declared
from that layout with hsa.h's types and laid out and encoded by gcc.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import packets
from amdgpu.errors import PacketError

pytestmark = pytest.mark.generic

C_SOURCE = Path(__file__).parent / "c" / "ext_dispatch_layout.c"

# (field, offset, size) from the public layout.
PUBLIC_LAYOUT = [
    ("header", 0, 2), ("amd_format", 2, 1), ("setup", 3, 1),
    ("workgroup_size_x", 4, 2), ("workgroup_size_y", 6, 2), ("workgroup_size_z", 8, 2),
    ("reserved0", 10, 2), ("cluster_count_x", 12, 4), ("cluster_count_y", 16, 2),
    ("cluster_count_z", 18, 2), ("cluster_size_x", 20, 1), ("cluster_size_y", 21, 1),
    ("cluster_size_z", 22, 1), ("perf_hint", 23, 1), ("private_segment_size", 24, 4),
    ("group_segment_size", 28, 4), ("kernel_object", 32, 8), ("kernarg_address", 40, 8),
    ("dep_signal", 48, 8), ("completion_signal", 56, 8),
]


def test_dtype_matches_the_public_layout_field_by_field():
    dt = packets.EXT_KERNEL_DISPATCH
    assert dt.itemsize == 64
    assert list(dt.names) == [f for f, _, _ in PUBLIC_LAYOUT]
    for field, offset, size in PUBLIC_LAYOUT:
        fdt, off = dt.fields[field][:2]
        assert (off, fdt.itemsize) == (offset, size), field
    assert int(packets.AmdVendorFormat.EXT_KERNEL_DISPATCH) == 3
    assert packets.dtype_for(0, 3) is dt


def test_debian_headers_do_not_hold_the_packet_yet():
    header = Path("/usr/include/hsa/hsa_ext_amd.h")
    if not header.exists():
        pytest.skip("hsa_ext_amd.h is not installed")
    # If this starts failing, the distribution caught up: compile against its struct instead.
    assert "ext_kernel_dispatch" not in header.read_text()


@pytest.fixture(scope="module")
def oracle(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the C oracle cannot be built")
    if not Path("/usr/include/hsa/hsa.h").exists():
        pytest.skip("hsa.h missing: install libhsa-runtime-dev")
    exe = tmp_path_factory.mktemp("ext_oracle") / "ext_dispatch_layout"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-o", str(exe), str(C_SOURCE)],
                   check=True, capture_output=True, text=True)
    return exe


def _run(exe: Path, mode: str, stdin: str = "") -> list[str]:
    return subprocess.run([str(exe), mode], input=stdin, capture_output=True, text=True,
                          check=True, timeout=30).stdout.splitlines()


def test_gcc_lays_out_the_struct_as_our_dtype(oracle):
    rows = [line.split() for line in _run(oracle, "layout")]
    assert rows[0] == ["-", "0", "64"]
    got = [(f, int(o), int(s)) for f, o, s in rows[1:]]
    assert got == PUBLIC_LAYOUT
    assert got == [(f, packets.EXT_KERNEL_DISPATCH.fields[f][1],
                    packets.EXT_KERNEL_DISPATCH.fields[f][0].itemsize) for f, _, _ in got]


def _random_case(rng: random.Random):
    dims = rng.randint(1, 3)
    wg, cnt, size = [1, 1, 1], [1, 1, 1], [1, 1, 1]
    budget = 1024
    for d in range(dims):
        wg[d] = rng.randint(1, budget)
        budget //= wg[d]
        cnt[d] = rng.choice([1, rng.randint(1, 0xFFFF), 0xFFFF if d else 0xFFFFFFFF])
        size[d] = rng.choice([1, 2, rng.randint(1, 255)])
    barrier, acq, rel = rng.random() < 0.5, rng.randrange(3), rng.randrange(3)
    kw = dict(workgroup_size=tuple(wg[:dims]), cluster_count=tuple(cnt[:dims]),
              cluster_size=tuple(size[:dims]), private_segment_size=rng.getrandbits(32),
              group_segment_size=rng.getrandbits(32), kernel_object=rng.getrandbits(64) or 1,
              kernarg_address=(rng.getrandbits(60) << 4) or 16,
              dep_signal=rng.choice([0, rng.getrandbits(64)]),
              completion_signal=rng.choice([0, rng.getrandbits(64)]),
              perf_hint=rng.getrandbits(8), barrier=barrier, acquire_fence_scope=acq,
              release_fence_scope=rel)
    values = [int(barrier) | acq << 1 | rel << 3, 3, dims, *wg, 0, *cnt, *size,
              kw["perf_hint"], kw["private_segment_size"], kw["group_segment_size"],
              kw["kernel_object"], kw["kernarg_address"], kw["dep_signal"],
              kw["completion_signal"]]
    return kw, " ".join(map(str, values))


def test_builders_encode_byte_for_byte_like_gcc(oracle):
    rng = random.Random(1250)
    cases = [_random_case(rng) for _ in range(300)]
    lines = _run(oracle, "encode", "\n".join(line for _, line in cases) + "\n")
    assert len(lines) == len(cases)
    for (kw, _), hexed in zip(cases, lines, strict=True):
        want = bytes.fromhex(hexed)
        got = packets.ext_kernel_dispatch(**kw)
        assert got == want, kw
        batch = packets.ext_kernel_dispatch_batch(**kw)
        assert batch.dtype == packets.EXT_KERNEL_DISPATCH and batch.tobytes() == want
        fields = packets.decode(want)
        assert fields["kind"] == "ext_kernel_dispatch"
        assert packets.encode(fields) == want
    # a batch of all of them at once, every field given per packet
    cols = {k: [kw[k] for kw, _ in cases] for k in ("private_segment_size",
            "group_segment_size", "kernel_object", "kernarg_address", "dep_signal",
            "completion_signal", "perf_hint", "acquire_fence_scope", "release_fence_scope",
            "barrier")}
    pad = lambda t: list(t) + [1] * (3 - len(t))  # noqa: E731
    batch = packets.ext_kernel_dispatch_batch(
        workgroup_size=np.array([pad(kw["workgroup_size"]) for kw, _ in cases]),
        cluster_count=np.array([pad(kw["cluster_count"]) for kw, _ in cases]),
        cluster_size=np.array([pad(kw["cluster_size"]) for kw, _ in cases]),
        dims=[len(kw["workgroup_size"]) for kw, _ in cases],
        **{k: np.array(v, dtype=np.uint64 if k not in ("barrier",) else bool)
           for k, v in cols.items()})
    assert batch.tobytes() == b"".join(bytes.fromhex(h) for h in lines)


def test_decode_derives_the_grid_and_formats_clusters():
    pkt = packets.ext_kernel_dispatch(workgroup_size=(64, 2), cluster_count=(3, 4),
                                      cluster_size=(2, 1), kernel_object=0x1000,
                                      kernarg_address=0x2000, dep_signal=0x99)
    f = packets.decode(pkt)
    assert (f["grid_size_x"], f["grid_size_y"], f["grid_size_z"]) == (384, 8, 1)
    assert f["dims"] == 2 and f["amd_format"] == 3 and f["dep_signal"] == 0x99
    line = packets.format_packet(pkt)
    assert line.startswith("AMD_EXT_KERNEL_DISPATCH ")
    assert "clusters=3x4x1 cluster=2x1x1 grid=384x8x1" in line and "dep_signal=0x99" in line
    assert "  cluster_size_x: 2" in packets.format_packet(pkt, multiline=True)


@pytest.mark.parametrize("kw, message", [
    (dict(dims=0), "dims=0 is out of range"),
    (dict(dims=4), "dims=4 is out of range"),
    (dict(workgroup_size=0), "workgroup_size=(0, 1, 1) has an entry < 1"),
    (dict(cluster_size=(1, 0)), "cluster_size=(1, 0, 1) has an entry < 1"),
    (dict(cluster_count=0), "cluster_count=(0, 1, 1) has an entry < 1"),
    (dict(cluster_size=256), "cluster_size_x=256 does not fit"),
    (dict(cluster_count=(1, 1 << 16)), "cluster_count_y=65536 does not fit"),
    (dict(workgroup_size=(64, 32)), "has 2048 work-items"),
    (dict(dims=1, cluster_size=(1, 2)), "dimensions beyond dims must be 1"),
    (dict(kernel_object=0), "kernel_object is 0"),
    (dict(kernarg_address=0x2008), "not 16-byte aligned"),
])
def test_rocr_rules_are_one_line_errors(kw, message):
    args = dict(workgroup_size=64, cluster_count=4, kernel_object=0x1000,
                kernarg_address=0x2000) | kw
    with pytest.raises(PacketError, match=message.replace("(", r"\(").replace(")", r"\)")):
        packets.ext_kernel_dispatch(**args)
    batch_args = dict(args)
    if "cluster_size_x=256" in message or "cluster_count_y" in message:
        message = "does not fit"
    with pytest.raises(PacketError):
        packets.ext_kernel_dispatch_batch(**batch_args)


def test_reserved0_must_be_zero():
    with pytest.raises(PacketError, match="reserved0=0x1 is not 0"):
        packets.ext_dispatch_check(1, (64, 1, 1), (1, 1, 1), (1, 1, 1), reserved0=1)
    packets.ext_dispatch_check(1, (64, 1, 1), (1, 1, 1), (1, 1, 1))
