"""Code objects validated like a loader would (issue 17): kernel descriptor bits that are
reserved or out of range for the target (rsrc1/2/3, properties, reserved bytes), segments
bounded by the file's sections and a sane maximum, kernel names without NUL, and `inspect`
refusing what is not a regular file of sane size. Every real compiler output in tests/data
(hipcc, Triton, clang) still reads: the rules are checked against what nobody here wrote."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import amdgpu
from amdgpu.errors import AmdgpuError, CodeObjectError
from hsa.abi.codeobject import (
    MAX_IMAGE_BYTES,
    is_offload_bundle,
    read_code_object,
    read_offload_bundle,
)

pytestmark = pytest.mark.generic
DATA = Path(__file__).parent / "data" / "codeobjects"
RSRC3, RSRC1, RSRC2, PROPS = 44, 48, 52, 56  # descriptor byte offsets


@pytest.fixture(scope="module")
def objects(code_objects):
    return {"gfx942": code_objects[("gfx942:sramecc+:xnack-", 5)].read(),
            "gfx1100": code_objects[("gfx1100", 5)].read(),
            "gfx1201": code_objects[("gfx1201", 5)].read()}


def descriptor_at(data: bytes, kernel: str = "saxpy") -> int:
    co = read_code_object(data)
    vaddr = co.kernels[kernel].descriptor_address
    seg = next(s for s in co.segments if s.vaddr <= vaddr < s.vaddr + s.filesz)
    return seg.offset + vaddr - seg.vaddr


def patched(data: bytes, offset: int, fmt: str, value) -> bytes:
    bad = bytearray(data)
    struct.pack_into(fmt, bad, offset, value)
    return bytes(bad)


def refused(data: bytes, pattern: str) -> str:
    with pytest.raises(CodeObjectError, match=pattern) as info:
        read_code_object(data)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_every_real_compiler_output_still_reads():
    count = 0
    for path in sorted(DATA.rglob("*.hsaco")):
        data = path.read_bytes()
        blobs = ([b for b in read_offload_bundle(data).values() if b[:4] == b"\x7fELF"]
                 if is_offload_bundle(data) else [data])
        for blob in blobs:
            assert read_code_object(blob).kernels
            count += 1
    assert count >= 20


@pytest.mark.parametrize("target", ["gfx942", "gfx1100", "gfx1201"])
@pytest.mark.parametrize("register", [RSRC1, RSRC2, RSRC3])
def test_an_all_ones_resource_register_is_refused(objects, target, register):
    data = objects[target]
    at = descriptor_at(data)
    text = refused(patched(data, at + register, "<I", 0xFFFFFFFF),
                   r"^corrupt kernel descriptor saxpy\.kd \(kernel 'saxpy'\): ")
    assert "must be 0" in text and target in text


@pytest.mark.parametrize("target, register, bit, name", [
    ("gfx1100", RSRC1, 10, "PRIORITY"), ("gfx1100", RSRC1, 20, "PRIV"),
    ("gfx942", RSRC1, 22, "DEBUG_MODE"), ("gfx942", RSRC1, 30, "RESERVED2"),
    ("gfx1100", RSRC2, 6, "ENABLE_TRAP_HANDLER"), ("gfx1201", RSRC2, 15, "GRANULATED_LDS_SIZE"),
    ("gfx1100", RSRC2, 31, "RESERVED0"), ("gfx942", RSRC3, 8, "RESERVED0"),
    ("gfx942", RSRC3, 20, "RESERVED1"), ("gfx1100", RSRC3, 20, "RESERVED2/3/4"),
    ("gfx1201", RSRC3, 1, "RESERVED0"),
])
def test_one_reserved_bit_is_refused_naming_it(objects, target, register, bit, name):
    data = objects[target]
    at = descriptor_at(data)
    value = struct.unpack_from("<I", data, at + register)[0]
    assert not value >> bit & 1
    refused(patched(data, at + register, "<I", value | 1 << bit), f"sets {name} ")


def test_reserved_properties_bytes_and_ranges(objects):
    data = objects["gfx1100"]
    at = descriptor_at(data)
    props = struct.unpack_from("<H", data, at + PROPS)[0]
    refused(patched(data, at + PROPS, "<H", props | 1 << 13), "kernel_code_properties .* "
            "sets RESERVED1")
    refused(patched(data, at + 30, "<B", 1), r"reserved1 \(bytes 24-43\) is not zero")
    refused(patched(data, at + 62, "<B", 0x80), r"reserved3 \(bytes 60-63\) is not zero")
    rsrc1 = struct.unpack_from("<I", data, at + RSRC1)[0]
    refused(patched(data, at + RSRC1, "<I", rsrc1 | 0x3F), "means 512 VGPRs, more than the 256")
    rsrc2 = struct.unpack_from("<I", data, at + RSRC2)[0]
    refused(patched(data, at + RSRC2, "<I", rsrc2 | 3 << 11), r"ENABLE_VGPR_WORKITEM_ID is 3")
    refused(patched(data, at + RSRC2, "<I", rsrc2 & ~(0x1F << 1)), "USER_SGPR_COUNT 0 is out "
            "of range")


def first_load_phdr(data: bytes) -> int:
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    return next(phoff + 56 * i for i in range(phnum)
                if struct.unpack_from("<I", data, phoff + 56 * i)[0] == 1)


@pytest.mark.parametrize("bit", [48, 40, 33, 28])
def test_a_flipped_p_memsz_is_refused_before_any_mapping(objects, bit):
    """512 TiB, 1 TiB, 8 GiB: past the maximum; 256 MiB: more than the sections need."""
    data = objects["gfx1100"]
    at = first_load_phdr(data) + 40
    memsz = struct.unpack_from("<Q", data, at)[0]
    bad = patched(data, at, "<Q", memsz ^ 1 << bit)
    text = refused(bad, r"^corrupt ELF: segment \d+ at offset ")
    assert ("GiB a code object may map" in text) == (1 << bit > MAX_IMAGE_BYTES)


@pytest.mark.hsa_virtual
def test_a_flipped_p_memsz_fails_to_load_with_one_line(objects):
    data = objects["gfx1100"]
    at = first_load_phdr(data) + 40
    bad = patched(data, at, "<Q", struct.unpack_from("<Q", data, at)[0] | 1 << 49)
    dev = amdgpu.open("amdgpu:virtual")
    try:
        with pytest.raises(AmdgpuError, match="p_memsz or p_vaddr is damaged"):
            dev.load(bad)
        assert dev.load(data).kernel("saxpy") is not None  # the device is fine afterwards
    finally:
        dev.close()


@pytest.mark.parametrize("name, why", [(b"sa\x00py", "control character '\\\\x00'"),
                                       (b"sa\npy", "control character '\\\\n'")])
def test_a_kernel_name_with_nul_or_control_characters_is_refused(objects, name, why):
    data = objects["gfx1100"]
    needle = b"\xa5saxpy"  # msgpack fixstr "saxpy": the .name of the kernel
    assert needle in data
    bad = data.replace(needle, b"\xa5" + name, 1)
    refused(bad, rf"^corrupt metadata: amdhsa.kernels\[\d\] .name .* holds the {why}")


def inspect(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler", "inspect", *map(str, argv)],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parent.parent)


def test_inspect_refuses_devices_fifos_directories_and_huge_files(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.hsaco"
    with open(huge, "wb") as f:
        f.truncate((1 << 30) + 1)  # sparse: no disk used
    for path, what in (("/dev/zero", "a character device"), (fifo, "a FIFO"),
                       (tmp_path, "a directory"), (huge, "more than the 1024 MiB")):
        done = inspect(path)
        assert done.returncode == 1 and what in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    done = inspect("--json", DATA / "hipcc_saxpy.hsaco")
    assert done.returncode == 0
    doc = json.loads(done.stdout)
    assert [list(c["kernels"]) for c in doc["code_objects"].values()] == [["saxpy"], ["saxpy"]]
