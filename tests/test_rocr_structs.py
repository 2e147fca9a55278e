"""hsa.rocr's ctypes layouts and enum values against the installed ROCr headers.

A C file is generated from the Python tables (every structure in `structs.STRUCTS`, every
field, every HSA_/AMD_ constant), compiled with gcc against <hsa/*.h> and run; whatever gcc
says is the truth.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from hsa.rocr import structs

HEADERS = ["hsa.h", "hsa_ext_amd.h", "amd_hsa_queue.h", "amd_hsa_signal.h"]
INCLUDE_DIR = "/usr/include/hsa"

pytestmark = pytest.mark.generic


def _generate_c() -> str:
    lines = [f"#include <hsa/{h}>" for h in HEADERS]
    lines += ["#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for cname, ctype in structs.STRUCTS.items():
        lines.append(f'  printf("size {cname} %zu\\n", sizeof({cname}));')
        for field, *_ in ctype._fields_:
            lines.append(
                f'  printf("field {cname}.{field} %zu %zu\\n", offsetof({cname}, {field}), '
                f"sizeof((({cname}*)0)->{field}));"
            )
    for name in sorted(structs.constants()):
        lines.append(f'  printf("const {name} %lld\\n", (long long)({name}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, tuple[int, ...]]:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: cannot compile the header layout check")
    missing = [h for h in HEADERS if not os.path.exists(os.path.join(INCLUDE_DIR, h))]
    if missing:
        pytest.skip(f"ROCr headers missing from {INCLUDE_DIR}: {missing} (libhsa-runtime-dev)")
    work = tmp_path_factory.mktemp("rocr_structs")
    src, exe = work / "rocr_structs.c", work / "rocr_structs"
    src.write_text(_generate_c())
    build = subprocess.run(
        [gcc, "-std=gnu11", "-Wall", "-o", str(exe), str(src)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30, check=True)
    layout: dict[str, tuple[int, ...]] = {}
    for line in run.stdout.splitlines():
        kind, name, *values = line.split()
        layout[f"{kind} {name}"] = tuple(int(v) for v in values)
    return layout


@pytest.mark.parametrize("cname", sorted(structs.STRUCTS))
def test_struct_size_and_fields_match_headers(c_layout, cname):
    ctype = structs.STRUCTS[cname]
    assert ctypes.sizeof(ctype) == c_layout[f"size {cname}"][0], cname
    for field, *_ in ctype._fields_:
        descriptor = getattr(ctype, field)
        offset, size = c_layout[f"field {cname}.{field}"]
        assert (descriptor.offset, descriptor.size) == (offset, size), f"{cname}.{field}"


def test_every_constant_matches_headers(c_layout):
    constants = structs.constants()
    assert len(constants) > 30
    wrong = {
        name: (value, c_layout[f"const {name}"][0])
        for name, value in constants.items()
        if value != c_layout[f"const {name}"][0]
    }
    assert not wrong, f"python value vs header value: {wrong}"


def test_documented_amd_queue_offsets():
    # The offsets the REFERENCE and the packet processor rely on, spelled out.
    assert structs.AmdQueue.write_dispatch_id.offset == 56
    assert structs.AmdQueue.read_dispatch_id.offset == 128
    assert structs.AmdQueue.queue_properties.offset == 180
    assert structs.AmdQueue.queue_inactive_signal.offset == 192
    assert structs.AmdSignal.value.offset == 8
    assert structs.HsaQueue.doorbell_signal.offset == 16
    assert ctypes.sizeof(structs.AmdSignal) == 64


def test_generated_c_names_every_field():
    text = _generate_c()
    for cname, ctype in structs.STRUCTS.items():
        for field, *_ in ctype._fields_:
            assert f"offsetof({cname}, {field})" in text
