"""hsa/emulated/abi.py against the kernel's own linux/kfd_ioctl.h, byte for byte.

The oracle is C compiled with gcc against the header: for every struct the header declares
(found by a small reader of the header text, independent of abi.py) it prints sizeof and
each field's offsetof and size; it prints every AMDKFD_IOC_* request number and every
constant abi.py shares with the header. The headers: Debian 12's (linux-libc-dev, KFD 1.11)
and, once `bash scripts/rocm6.sh --build` made the sid root filesystem, sid's newer one.

Structs grow only at their end between KFD versions, so abi.py (the newest layout) may have
trailing fields an older header lacks; every field the header has must sit where it says.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
from rocm6_rootfs import ensure_rootfs
from uapi_headers import c_layout, read_defines, read_structs

from hsa.emulated import abi

pytestmark = pytest.mark.generic

DEBIAN_HEADER = Path("/usr/include/linux/kfd_ioctl.h")
# KFD 1.18 renamed set_memory_policy_args' pad (its last u32) to misc_process_flag
# values that grow with the interface version
GROWING = {"KFD_IOCTL_MINOR_VERSION", "AMDKFD_COMMAND_END"}
RENAMED = {("kfd_ioctl_set_memory_policy_args", "pad"): "misc_process_flag"}


def _headers() -> list:
    out = [pytest.param(DEBIAN_HEADER, id="debian12")]
    out.append(pytest.param("usr/include/linux/kfd_ioctl.h", id="sid"))  # in the rootfs
    return out


@pytest.fixture(scope="module", params=_headers())
def oracle(request, tmp_path_factory):
    header: Path | str = request.param
    if isinstance(header, str):  # sid's, in the ROCm 6 root filesystem (built on first use)
        header = ensure_rootfs("sid") / header
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the C oracle cannot be built")
    if not header.exists():
        pytest.skip(f"{header} missing: install linux-libc-dev")
    text = header.read_text()
    structs = read_structs(text)
    defines = read_defines(text)
    work = tmp_path_factory.mktemp("kfd_oracle")
    (work / "linux").mkdir()
    (work / "linux" / "kfd_ioctl.h").write_text(text)
    # it includes <drm/drm.h> only for the __u32/__u64 types (Debian ships drm.h in libdrm-dev)
    (work / "drm").mkdir()
    (work / "drm" / "drm.h").write_text("#include <linux/types.h>\n")
    constants = sorted(n for n in defines if isinstance(getattr(abi, n, None), int))
    layout, values = c_layout(work, "linux/kfd_ioctl.h", structs, constants)
    return structs, defines, layout, values


def _ours(struct: str, field: str) -> tuple[int, int]:
    cls = getattr(abi, struct)
    descr = getattr(cls, RENAMED.get((struct, field), field))
    return descr.offset, descr.size


def test_every_struct_of_the_header_is_declared(oracle):
    structs, _, _, _ = oracle
    assert len(structs) > 30
    missing = [s for s in structs if not isinstance(getattr(abi, s, None), type)]
    assert not missing


def test_every_field_sits_where_the_header_puts_it(oracle):
    _, _, layout, _ = oracle
    for struct, fields in layout.items():
        c_size = fields.pop("-")[1]
        cls = getattr(abi, struct)
        for field, (offset, size) in fields.items():
            assert _ours(struct, field) == (offset, size), (struct, field)
        # ours may only be longer by trailing fields a newer KFD added
        assert ctypes.sizeof(cls) >= c_size, struct
        known = {RENAMED.get((struct, f), f) for f in fields}
        for name, _ in cls._fields_:
            if name not in known and name not in getattr(cls, "_anonymous_", ()):
                assert getattr(cls, name).offset >= c_size, (struct, name)


def test_the_layout_checks_can_fail():
    # a reader that found no fields, or abi fields that moved, must show up
    fields = read_structs("struct a { __u32 x; union { __u64 y; struct { __u32 r; } s; }; "
                          "struct { __u32 p; } q; __u32 m[4][4]; __u32 flex[]; };")
    assert fields == {"a": ["x", "y", "s", "q", "m"]}
    assert abi.kfd_ioctl_create_queue_args.doorbell_offset.offset == 24


def test_every_request_number_and_constant_matches(oracle):
    _, defines, layout, values = oracle
    requests = sorted(n for n in defines if n.startswith("AMDKFD_IOC_"))
    assert len(requests) >= 35
    for name in requests:
        c_value = values.get(name)
        assert c_value is not None, f"{name} is in the header but not in abi.py"
        ours = getattr(abi, name)
        name_found, struct, user_size = abi.decode(c_value)
        assert name_found == name
        assert abi.ioc_nr(ours) == abi.ioc_nr(c_value)
        assert abi.ioc_dir(ours) == abi.ioc_dir(c_value)
        assert user_size <= ctypes.sizeof(struct)
        if user_size == ctypes.sizeof(struct):
            assert ours == c_value, name
        assert abi.IOCTLS[ours] == (name, struct)
    constants = [n for n in values if not n.startswith("AMDKFD_IOC_")]
    assert len(constants) > 80
    for name in constants:
        if name in GROWING:  # abi.py is the newer interface
            assert getattr(abi, name) >= values[name], name
        elif values[name] < 0:  # (1 << 31) is a negative int that callers store in a __u32
            assert getattr(abi, name) == values[name] & 0xFFFFFFFF, name
        else:
            assert getattr(abi, name) == values[name], name
    # every value-like define of the header is in abi.py (function-like macros and the
    # SMI event format strings are not values)
    wanted = {n for n in defines if not n.startswith(("KFD_EVENT_FMT_", "AMDKFD_IO"))
              and n not in ("KFD_SMI_EVENT_MASK_FROM_INDEX", "KFD_EC_MASK")
              and not n.startswith(("KFD_EC_MASK_", "KFD_DBG_EC_"))}
    assert sorted(wanted - set(values)) == []


def test_decode_follows_the_kernel():
    # an older caller's shorter create_queue (KFD 1.11, 88 bytes) is the same ioctl
    old = abi._IOWR(ord("K"), 0x02, type("old", (ctypes.Structure,),
                                         {"_fields_": [("b", ctypes.c_uint8 * 88)]}))
    req = abi.decode(old)
    assert req == ("AMDKFD_IOC_CREATE_QUEUE", abi.kfd_ioctl_create_queue_args, 88)
    args = abi.kfd_ioctl_create_queue_args.from_user(b"\x01" * 88)
    assert args.ctl_stack_size == 0x01010101 and args.sdma_engine_id == 0
    assert abi.decode(abi._IOWR(ord("K"), 0x7F, abi.kfd_ioctl_get_version_args)) is None
    assert abi.decode(abi._IOWR(ord("d"), 0x02, abi.kfd_ioctl_get_version_args)) is None
    assert len(abi.IOCTLS) == len(abi.IOCTLS_BY_NR) == 46
