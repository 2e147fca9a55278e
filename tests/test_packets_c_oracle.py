"""Byte-exact checks against the installed hsa.h / hsa_ext_amd.h.

tests/c/packet_layout.c is compiled with gcc into a temporary directory; it prints the
offset and size of every packet field and encodes packets field by field in C, composing
headers from hsa.h's own enums. Our dtypes, single builders and batch builders must agree
byte for byte.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import packets

pytestmark = pytest.mark.generic

C_SOURCE = Path(__file__).parent / "c" / "packet_layout.c"
HEADERS = Path("/usr/include/hsa/hsa.h"), Path("/usr/include/hsa/hsa_ext_amd.h")

DTYPES = {
    "hsa_kernel_dispatch_packet_t": packets.KERNEL_DISPATCH,
    "hsa_agent_dispatch_packet_t": packets.AGENT_DISPATCH,
    "hsa_barrier_and_packet_t": packets.BARRIER_AND,
    "hsa_barrier_or_packet_t": packets.BARRIER_OR,
    "hsa_amd_barrier_value_packet_t": packets.BARRIER_VALUE,
}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the C oracle for packet layouts cannot be built")
    missing = [str(h) for h in HEADERS if not h.exists()]
    if missing:
        pytest.skip(f"HSA headers missing ({', '.join(missing)}): install libhsa-runtime-dev")
    exe = tmp_path_factory.mktemp("packet_oracle") / "packet_layout"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(C_SOURCE)], check=True,
                   capture_output=True, text=True)
    return exe


def _run(exe: Path, mode: str, stdin: str = "") -> list[str]:
    done = subprocess.run([str(exe), mode], input=stdin, capture_output=True, text=True,
                          check=True, timeout=30)
    return done.stdout.splitlines()


def test_every_field_offset_and_size_matches_the_headers(oracle):
    seen = {name: set() for name in DTYPES}
    for line in _run(oracle, "layout"):
        struct_name, field, offset, size = line.split()
        dtype = DTYPES[struct_name]
        if field == "-":
            assert dtype.itemsize == int(size) == 64
            continue
        field_dtype, field_offset = dtype.fields[field][:2]
        assert (field_offset, field_dtype.itemsize) == (int(offset), int(size)), (
            struct_name, field)
        seen[struct_name].add(field)
    for struct_name, dtype in DTYPES.items():
        assert seen[struct_name] == set(dtype.names), struct_name


def _cases(rng: random.Random, count: int) -> list[tuple[str, dict, str]]:
    """(kind, builder kwargs, oracle input line) with random valid values and edge values."""
    u64 = (1 << 64) - 1
    out = []

    def signal():
        return rng.choice([0, 1, u64, rng.getrandbits(64), rng.getrandbits(48) << 4])

    for i in range(count):
        barrier = rng.random() < 0.5
        acq, rel = rng.randrange(3), rng.randrange(3)
        common = dict(barrier=barrier, acquire_fence_scope=acq, release_fence_scope=rel)
        prefix = f"{int(barrier)} {acq} {rel}"
        kind = ["kernel_dispatch", "barrier_and", "barrier_or", "agent_dispatch",
                "barrier_value"][i % 5]
        if kind == "kernel_dispatch":
            dims = rng.randint(1, 3)
            wg = [1, 1, 1]
            grid = [1, 1, 1]
            budget = 1024
            for d in range(dims):
                wg[d] = rng.randint(1, budget)
                budget //= wg[d]
                grid[d] = rng.choice([1, 0xFFFFFFFF, rng.getrandbits(32) or 1])
            kw = dict(workgroup_size=tuple(wg[:dims]), grid_size=tuple(grid[:dims]),
                      private_segment_size=rng.getrandbits(32),
                      group_segment_size=rng.getrandbits(32),
                      kernel_object=rng.getrandbits(64) or 1,
                      kernarg_address=(rng.getrandbits(60) << 4) or 16,
                      completion_signal=signal(), **common)
            line = (f"{kind} {prefix} {dims} {wg[0]} {wg[1]} {wg[2]} {grid[0]} {grid[1]} "
                    f"{grid[2]} {kw['private_segment_size']} {kw['group_segment_size']} "
                    f"{kw['kernel_object']} {kw['kernarg_address']} {kw['completion_signal']}")
        elif kind in ("barrier_and", "barrier_or"):
            deps = [signal() for _ in range(rng.randint(0, 5))]
            kw = dict(dep_signals=deps, completion_signal=signal(), **common)
            full = deps + [0] * (5 - len(deps))
            line = f"{kind} {prefix} {' '.join(map(str, full))} {kw['completion_signal']}"
        elif kind == "agent_dispatch":
            args = [rng.getrandbits(64) for _ in range(rng.randint(0, 4))]
            kw = dict(type=rng.getrandbits(16), return_address=signal(), args=args,
                      completion_signal=signal(), **common)
            full = args + [0] * (4 - len(args))
            line = (f"{kind} {prefix} {kw['type']} {kw['return_address']} "
                    f"{' '.join(map(str, full))} {kw['completion_signal']}")
        else:
            value = rng.choice([0, -1, 1 << 63, rng.getrandbits(64)])
            mask = rng.choice([-1, 0, rng.getrandbits(64)])
            kw = dict(signal=signal(), value=value, mask=mask, cond=rng.randrange(4),
                      completion_signal=signal(), **common)
            line = (f"{kind} {prefix} {kw['signal']} {value % (1 << 64)} {mask % (1 << 64)} "
                    f"{kw['cond']} {kw['completion_signal']}")
        out.append((kind, kw, line))
    return out


BUILDERS = {
    "kernel_dispatch": packets.kernel_dispatch,
    "barrier_and": packets.barrier_and,
    "barrier_or": packets.barrier_or,
    "agent_dispatch": packets.agent_dispatch,
    "barrier_value": packets.barrier_value,
}


@pytest.fixture(scope="module")
def encoded(oracle):
    cases = _cases(random.Random(20261130), 500)
    lines = _run(oracle, "encode", "\n".join(line for _, _, line in cases) + "\n")
    assert len(lines) == len(cases)
    return [(kind, kw, bytes.fromhex(h)) for (kind, kw, _), h in zip(cases, lines, strict=True)]


def test_single_builders_match_c_byte_for_byte(encoded):
    for kind, kw, expected in encoded:
        got = BUILDERS[kind](**kw)
        assert got == expected, f"{kind} {kw}\n got {got.hex()}\nwant {expected.hex()}"


def test_decode_then_encode_reproduces_c_bytes(encoded):
    for _kind, _kw, expected in encoded:
        assert packets.encode(packets.decode(expected)) == expected


def test_structured_dtypes_read_c_bytes(encoded):
    for kind, kw, expected in encoded:
        if kind != "kernel_dispatch":
            continue
        rec = np.frombuffer(expected, packets.KERNEL_DISPATCH)[0]
        assert int(rec["kernel_object"]) == kw["kernel_object"]
        assert int(rec["kernarg_address"]) == kw["kernarg_address"]
        assert int(rec["setup"]) == len(kw["workgroup_size"])


def test_batch_builders_match_c_byte_for_byte(encoded):
    groups: dict[str, list] = {}
    for kind, kw, expected in encoded:
        groups.setdefault(kind, []).append((kw, expected))
    common = ("barrier", "acquire_fence_scope", "release_fence_scope", "completion_signal")

    def column(items, key):
        return np.array([kw[key] for kw, _ in items], dtype=np.uint64)

    def flags(items):
        return {k: np.array([int(kw[k]) for kw, _ in items]) for k in common[:3]}

    for kind, items in groups.items():
        want = b"".join(e for _, e in items)
        extra = dict(flags(items), completion_signal=column(items, "completion_signal"))
        if kind == "kernel_dispatch":
            def padded(key, items=items):
                return np.array([list(kw[key]) + [1] * (3 - len(kw[key])) for kw, _ in items])
            block = packets.kernel_dispatch_batch(
                workgroup_size=padded("workgroup_size"), grid_size=padded("grid_size"),
                dims=np.array([len(kw["workgroup_size"]) for kw, _ in items]),
                private_segment_size=column(items, "private_segment_size"),
                group_segment_size=column(items, "group_segment_size"),
                kernel_object=column(items, "kernel_object"),
                kernarg_address=column(items, "kernarg_address"), **extra)
        elif kind in ("barrier_and", "barrier_or"):
            deps = np.array([kw["dep_signals"] + [0] * (5 - len(kw["dep_signals"]))
                             for kw, _ in items], dtype=np.uint64)
            builder = (packets.barrier_and_batch if kind == "barrier_and"
                       else packets.barrier_or_batch)
            block = builder(dep_signals=deps, **extra)
        elif kind == "agent_dispatch":
            args = np.array([kw["args"] + [0] * (4 - len(kw["args"])) for kw, _ in items],
                            dtype=np.uint64)
            block = packets.agent_dispatch_batch(
                type=column(items, "type"), return_address=column(items, "return_address"),
                args=args, **extra)
        else:
            block = packets.barrier_value_batch(
                signal=column(items, "signal"),
                value=np.array([kw["value"] % (1 << 64) for kw, _ in items], dtype=np.uint64),
                mask=np.array([kw["mask"] % (1 << 64) for kw, _ in items], dtype=np.uint64),
                cond=np.array([kw["cond"] for kw, _ in items]), **extra)
        assert block.dtype.itemsize == 64 and len(block) == len(items)
        assert block.tobytes() == want, kind
