"""Every way a code object can be bad gives one CodeObjectError line; never another exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amdgpu.errors import CodeObjectError
from hsa.abi.codeobject import read_code_object

pytestmark = pytest.mark.generic

_SHDR = struct.Struct("<IIQQQQIIQQ")


def _one_line_error(data: bytes, pattern: str) -> str:
    with pytest.raises(CodeObjectError, match=pattern) as info:
        read_code_object(data)
    message = str(info.value)
    assert "\n" not in message and message.strip() == message
    return message


def _section_header_offset(data: bytes, name: str) -> int:
    """File offset of the section header of section `name`."""
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    strtab = _SHDR.unpack_from(data, shoff + shstrndx * 64)
    names = data[strtab[4]:strtab[4] + strtab[5]]
    for i in range(shnum):
        hdr = _SHDR.unpack_from(data, shoff + i * 64)
        if names[hdr[0]:].split(b"\0", 1)[0].decode() == name:
            return shoff + i * 64
    raise AssertionError(f"no section {name}")


@pytest.fixture(scope="module")
def gfx942(code_objects) -> bytes:
    return code_objects[("gfx942:sramecc+:xnack-", 5)].read()


def _descriptor_file_offset(data: bytes, kernel: str) -> int:
    co = read_code_object(data)
    vaddr = co.kernels[kernel].descriptor_address
    seg = next(s for s in co.segments if s.vaddr <= vaddr < s.vaddr + s.filesz)
    return seg.offset + vaddr - seg.vaddr


def test_not_elf() -> None:
    msg = _one_line_error(b"__kernel void f() {}", r"^not an ELF file")
    assert "expected an AMDGPU code object" in msg
    _one_line_error(b"", r"^not an ELF file")


def test_not_amdgpu(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    struct.pack_into("<H", data, 18, 62)  # EM_X86_64
    _one_line_error(bytes(data), r"^not an AMDGPU code object: e_machine 62 \(expected 224")
    data = bytearray(gfx942)
    data[4] = 1  # ELFCLASS32
    _one_line_error(bytes(data), r"^not an AMDGPU code object: ELF class 1")


def test_not_hsa_os_abi(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    data[7] = 0  # ELFOSABI_NONE, what a Mesa/PAL object would carry
    _one_line_error(bytes(data), r"^not the HSA OS ABI: EI_OSABI 0 \(expected 64")


@pytest.mark.parametrize("abi_version,what", [(1, "code object v3"), (0, "code object v2 or 3"),
                                              (9, "EI_ABIVERSION 9")])
def test_unsupported_code_object_version(gfx942: bytes, abi_version: int, what: str) -> None:
    data = bytearray(gfx942)
    data[8] = abi_version
    msg = _one_line_error(bytes(data), r"^unsupported code object version: " + what)
    assert "-mcode-object-version=5" in msg


def test_truncated_file_names_the_offset(gfx942: bytes) -> None:
    shoff, = struct.unpack_from("<Q", gfx942, 40)
    _one_line_error(gfx942[: shoff + 100],
                    rf"^truncated section header table at offset 0x{shoff:x}: ")
    _one_line_error(gfx942[:40], r"^truncated ELF header at offset 0x0")


def test_truncated_section_names_the_offset(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    at = _section_header_offset(gfx942, ".note")
    struct.pack_into("<Q", data, at + 24, len(data) - 8)  # sh_offset near the end
    _one_line_error(bytes(data), rf"^truncated section \.note at offset 0x{len(data) - 8:x}: ")


def test_corrupt_metadata(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    desc = gfx942.index(b"AMDGPU\0\0") + 8  # the msgpack body follows the padded note name
    data[desc] = 0xC1  # a byte msgpack never uses
    _one_line_error(bytes(data), r"^corrupt metadata: NT_AMDGPU_METADATA is not valid msgpack")


def test_corrupt_metadata_wrong_type(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    name = b".kernarg_segment_size"
    starts = [i for i in range(len(gfx942)) if gfx942.startswith(name, i)]
    # lds_reverse's value (8) is a one-byte positive fixint: make it `false`.
    key = next(i + len(name) for i in starts if gfx942[i + len(name)] < 0x80)
    data[key] = 0xC2
    _one_line_error(bytes(data),
                    r"^corrupt metadata: kernel 'lds_reverse' \.kernarg_segment_size is bool")


def test_metadata_and_descriptor_disagree_on_kernarg_size(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    at = _descriptor_file_offset(gfx942, "saxpy")
    struct.pack_into("<I", data, at + 8, 281)
    _one_line_error(bytes(data), r"^metadata and descriptor disagree: kernel 'saxpy' "
                                 r"\.kernarg_segment_size is 280 but saxpy\.kd kernarg_size "
                                 r"gives 281")


def test_metadata_and_descriptor_disagree_on_wave_size(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    at = _descriptor_file_offset(gfx942, "lds_reverse")
    props, = struct.unpack_from("<H", data, at + 56)
    struct.pack_into("<H", data, at + 56, props | 1 << 10)  # claims wave32 on gfx942
    _one_line_error(bytes(data), r"^metadata and descriptor disagree: kernel 'lds_reverse' "
                                 r"\.wavefront_size is 64 but lds_reverse\.kd wavefront_size32 "
                                 r"gives 32")


def test_metadata_and_descriptor_disagree_on_lds(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    at = _descriptor_file_offset(gfx942, "lds_reverse")
    struct.pack_into("<I", data, at, 0)
    _one_line_error(bytes(data), r"^metadata and descriptor disagree: .*group_segment_fixed_size")


# ---- fuzzing: random flips and truncations raise CodeObjectError or parse, nothing else ----
@st.composite
def mutated(draw, sources: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(sources)))
    shoff, = struct.unpack_from("<Q", data, 40)
    # Bias flips toward the structures the parser walks: headers, section table, notes.
    regions = [(0, 64), (64, 64 + 8 * 56), (shoff, len(data)), (0x200, 0x900), (0, len(data))]
    for _ in range(draw(st.integers(1, 8))):
        lo, hi = draw(st.sampled_from(regions))
        pos = draw(st.integers(lo, max(lo, min(hi, len(data)) - 1)))
        if draw(st.booleans()):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        else:
            data[pos] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


def test_mutated_code_objects_only_raise_code_object_error(code_objects) -> None:
    sources = [code_objects[("gfx942:sramecc+:xnack-", 5)].read(),
               code_objects[("gfx1100", 4)].read(linked=False),
               code_objects[("gfx1201", 5)].read()]

    @settings(max_examples=200, deadline=2000, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutated(sources))
    def check(data: bytes) -> None:
        try:
            co = read_code_object(data)
        except CodeObjectError as exc:
            assert "\n" not in str(exc)
        else:
            assert co.code_object_version in (4, 5, 6)

    check()


def test_code_entry_outside_executable_segment(gfx942: bytes) -> None:
    data = bytearray(gfx942)
    at = _descriptor_file_offset(gfx942, "saxpy")
    struct.pack_into("<q", data, at + 16, -0x100000)
    _one_line_error(bytes(data), r"^corrupt ELF: kernel 'saxpy' code entry .* lies in no "
                                 r"executable segment")
