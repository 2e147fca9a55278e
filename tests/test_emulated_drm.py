"""hsa/emulated/drm.py: the render node's answers, with layouts checked byte for byte against
libdrm's own headers (Debian 12's libdrm-dev; sid's, newer, once the ROCm 6 root filesystem
exists), and the queries replayed the way libdrm_amdgpu makes them (drmGetVersion's two
calls, amdgpu_query_info's return_pointer/return_size contract).
"""

from __future__ import annotations

import ctypes
import errno
import shutil
from pathlib import Path

import pytest
from rocm6_rootfs import ensure_rootfs
from uapi_headers import c_layout, read_defines, read_structs

from hsa.emulated import drm, sysfs
from hsa.emulated.models import MODELS, parse_node

pytestmark = pytest.mark.generic

DEBIAN = Path("/usr/include/libdrm")
STRUCTS = ["drm_version", "drm_amdgpu_info", "drm_amdgpu_info_device", "drm_amdgpu_info_hw_ip",
           "drm_amdgpu_info_firmware", "drm_amdgpu_info_vram_gtt", "drm_amdgpu_heap_info",
           "drm_amdgpu_memory_info", "drm_amdgpu_query_fw"]
# fields a newer header named that older ones call padding
RENAMED = {("drm_amdgpu_info_device", "_pad"): "pcie_gen",
           ("drm_amdgpu_info_device", "_pad1"): "pcie_num_lanes",
           ("drm_amdgpu_info_hw_ip", "_pad"): "ip_discovery_version"}


def _dirs() -> list:
    return [pytest.param(DEBIAN, id="debian12"),
            pytest.param("usr/include/libdrm", id="sid")]  # in the rootfs


@pytest.fixture(scope="module", params=_dirs())
def oracle(request, tmp_path_factory):
    headers: Path | str = request.param
    if isinstance(headers, str):  # sid's, in the ROCm 6 root filesystem (built on first use)
        headers = ensure_rootfs("sid") / headers
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the C oracle cannot be built")
    if not (headers / "amdgpu_drm.h").exists():
        pytest.skip(f"{headers}/amdgpu_drm.h missing: install libdrm-dev")
    work = tmp_path_factory.mktemp("drm_oracle")
    text = ""
    for name in ("drm.h", "drm_mode.h", "amdgpu_drm.h"):
        body = (headers / name).read_text()
        (work / name).write_text(body)
        text += body
    structs = read_structs(text)
    wanted = {s: structs[s] for s in STRUCTS}
    defines = read_defines(text)
    constants = sorted(n for n in defines if isinstance(getattr(drm, n, None), int))
    layout, values = c_layout(work, "amdgpu_drm.h", wanted, constants)
    return layout, values, defines


def test_layouts_match_the_header(oracle):
    layout, _, _ = oracle
    for struct, fields in layout.items():
        c_size = fields.pop("-")[1]
        cls = getattr(drm, struct)
        known = set()
        for field, (offset, size) in fields.items():
            ours = RENAMED.get((struct, field), field)
            known.add(ours)
            descr = getattr(cls, ours)
            assert (descr.offset, descr.size) == (offset, size), (struct, field)
        assert ctypes.sizeof(cls) >= c_size, struct
        for name, _ in cls._fields_:  # ours may only add trailing fields of newer headers
            if name not in known and name not in getattr(cls, "_anonymous_", ()):
                assert getattr(cls, name).offset >= c_size, (struct, name)


def test_request_numbers_and_constants_match(oracle):
    _, values, defines = oracle
    assert "DRM_IOCTL_VERSION" in defines and "DRM_IOCTL_AMDGPU_INFO" in defines
    assert len(values) >= 15
    for name, value in values.items():
        assert getattr(drm, name) == value, name


def _constants(tmp_path, names):
    _, values = c_layout(tmp_path, "amdgpu_drm.h", {}, names, flags=("-I", str(DEBIAN)))
    return values


def test_request_numbers_from_the_macros(tmp_path):
    if not (DEBIAN / "amdgpu_drm.h").exists():
        pytest.skip("install libdrm-dev")
    values = _constants(tmp_path, ["DRM_IOCTL_VERSION", "DRM_IOCTL_AMDGPU_INFO"])
    assert values == {"DRM_IOCTL_VERSION": drm.DRM_IOCTL_VERSION,
                      "DRM_IOCTL_AMDGPU_INFO": drm.DRM_IOCTL_AMDGPU_INFO}


@pytest.fixture
def node(tmp_path):
    return sysfs.write_topology(tmp_path, parse_node("gfx942"))[0]


def _info(query: int, size: int, pointer: int = 0x1000, **union) -> bytes:
    req = drm.drm_amdgpu_info(return_pointer=pointer, return_size=size, query=query)
    for part, fields in union.items():
        for k, v in fields.items():
            setattr(getattr(req, part), k, v)
    return bytes(req)


def test_version_as_drmGetVersion_asks(node):
    # first call: no buffers, lengths come back
    first = drm.answer(drm.DRM_IOCTL_VERSION, bytes(drm.drm_version()), node)
    v = drm.drm_version.from_buffer_copy(first)
    assert (v.version_major, v.name_len, v.date_len, v.desc_len) == (3, 6, 8, 7)
    assert drm.pointer_writes(drm.DRM_IOCTL_VERSION, first, node) == []
    # second call: buffers of those lengths
    raw = bytearray(first)
    for field, address in (("name", 0x1000), ("date", 0x2000), ("desc", 0x3000)):
        offset = getattr(drm.drm_version, field).offset
        raw[offset:offset + 8] = address.to_bytes(8, "little")
    writes = dict(drm.pointer_writes(drm.DRM_IOCTL_VERSION, bytes(raw), node))
    assert writes == {0x1000: b"amdgpu", 0x2000: b"20150101", 0x3000: b"AMD GPU"}
    # a short buffer gets a cut copy and the full length, as the kernel's drm_copy_field
    short = drm.drm_version(name_len=3)
    raw = bytearray(bytes(short))
    offset = drm.drm_version.name.offset
    raw[offset:offset + 8] = (0x1000).to_bytes(8, "little")
    assert drm.pointer_writes(drm.DRM_IOCTL_VERSION, bytes(raw), node) == [(0x1000, b"amd")]


@pytest.mark.parametrize("target", list(MODELS))
def test_dev_info_describes_the_model(tmp_path, target):
    info_node = sysfs.write_topology(tmp_path, parse_node(target))[0]
    size = ctypes.sizeof(drm.drm_amdgpu_info_device)
    arg = _info(drm.AMDGPU_INFO_DEV_INFO, size)
    assert drm.answer(drm.DRM_IOCTL_AMDGPU_INFO, arg, info_node) == arg  # _IOW: unchanged
    [(address, data)] = drm.pointer_writes(drm.DRM_IOCTL_AMDGPU_INFO, arg, info_node)
    assert address == 0x1000 and len(data) == size
    d = drm.drm_amdgpu_info_device.from_buffer_copy(data)
    m = MODELS[target]
    assert (d.device_id, d.pci_rev, d.family) == (m.device_id, m.revision_id, m.family_id)
    assert d.cu_active_number == m.compute_units
    assert sum(bin(x).count("1") for row in d.cu_bitmap for x in row) <= m.compute_units
    assert d.max_engine_clock == m.max_engine_clock_mhz * 1000
    assert d.gpu_counter_freq == drm.GPU_COUNTER_KHZ
    assert d.wave_front_size == m.wave_size and d.vram_bit_width == m.memory_width_bits
    assert d.virtual_address_offset < d.virtual_address_max <= 1 << 47
    assert d.high_va_offset >= 0xFFFF800000000000
    assert d.ids_flags & 1 == 0  # not an APU (libhsakmt's Integrated)


def test_older_callers_get_a_cut_reply(node):
    # Debian 12's libdrm asks with its smaller drm_amdgpu_info_device
    arg = _info(drm.AMDGPU_INFO_DEV_INFO, 352)
    [(_, data)] = drm.pointer_writes(drm.DRM_IOCTL_AMDGPU_INFO, arg, node)
    assert len(data) == 352


def test_the_rest_of_what_libdrm_and_tools_ask(node):
    def ask(query, size, **union):
        [(_, data)] = drm.pointer_writes(drm.DRM_IOCTL_AMDGPU_INFO,
                                         _info(query, size, **union), node)
        return data
    assert int.from_bytes(ask(drm.AMDGPU_INFO_ACCEL_WORKING, 4), "little") == 1
    reg = ask(drm.AMDGPU_INFO_READ_MMR_REG, 4,
              read_mmr_reg={"dword_offset": 0x263E, "count": 1, "instance": 0xFFFFFFFF})
    assert len(reg) == 4
    ip = drm.drm_amdgpu_info_hw_ip.from_buffer_copy(ask(
        drm.AMDGPU_INFO_HW_IP_INFO, 32, query_hw_ip={"type": drm.AMDGPU_HW_IP_COMPUTE}))
    assert (ip.hw_ip_version_major, ip.hw_ip_version_minor) == (9, 4) and ip.available_rings
    sdma = drm.drm_amdgpu_info_hw_ip.from_buffer_copy(ask(
        drm.AMDGPU_INFO_HW_IP_INFO, 32, query_hw_ip={"type": drm.AMDGPU_HW_IP_DMA}))
    assert bin(sdma.available_rings).count("1") == 16  # MI300X: 2 PCIe + 14 XGMI engines
    # GFX on an MI300X, UVD anywhere: the kernel answers "none", not an error
    for ip_type in (0, 3):
        none = drm.drm_amdgpu_info_hw_ip.from_buffer_copy(ask(
            drm.AMDGPU_INFO_HW_IP_INFO, 32, query_hw_ip={"type": ip_type}))
        assert none.available_rings == 0
        assert ask(drm.AMDGPU_INFO_HW_IP_COUNT, 4, query_hw_ip={"type": ip_type}) == bytes(4)
    vram = drm.drm_amdgpu_info_vram_gtt.from_buffer_copy(ask(drm.AMDGPU_INFO_VRAM_GTT, 24))
    assert vram.vram_size == MODELS["gfx942"].vram_bytes
    mem = drm.drm_amdgpu_memory_info.from_buffer_copy(ask(drm.AMDGPU_INFO_MEMORY, 96))
    assert mem.vram.total_heap_size == vram.vram_size and mem.gtt.total_heap_size > 0
    fw = drm.drm_amdgpu_info_firmware.from_buffer_copy(ask(
        drm.AMDGPU_INFO_FW_VERSION, 8, query_fw={"fw_type": drm.AMDGPU_INFO_FW_GFX_MEC}))
    assert fw.ver == sysfs.FW_VERSION


def test_radeons_have_a_gfx_ring(tmp_path):
    radeon = sysfs.write_topology(tmp_path, parse_node("gfx1201"))[0]
    arg = _info(drm.AMDGPU_INFO_HW_IP_INFO, 32, query_hw_ip={"type": drm.AMDGPU_HW_IP_GFX})
    [(_, data)] = drm.pointer_writes(drm.DRM_IOCTL_AMDGPU_INFO, arg, radeon)
    gfx = drm.drm_amdgpu_info_hw_ip.from_buffer_copy(data)
    assert (gfx.hw_ip_version_major, gfx.available_rings) == (12, 1)


@pytest.mark.parametrize("arg,code", [
    (_info(0x7F, 8), errno.EINVAL),  # a query no kernel knows
    (_info(drm.AMDGPU_INFO_DEV_INFO, 0), errno.EINVAL),  # no room for the answer
    (_info(drm.AMDGPU_INFO_DEV_INFO, 8, pointer=0), errno.EINVAL),
    (_info(drm.AMDGPU_INFO_READ_MMR_REG, 4, read_mmr_reg={"dword_offset": 0x1234, "count": 1}),
     errno.EINVAL),
    (_info(drm.AMDGPU_INFO_HW_IP_INFO, 32, query_hw_ip={"type": 10}), errno.EINVAL),
])
def test_refusals_carry_the_kernels_errno(node, arg, code):
    for call in (drm.answer, drm.pointer_writes):
        with pytest.raises(OSError) as err:
            call(drm.DRM_IOCTL_AMDGPU_INFO, arg, node)
        assert err.value.errno == code
    with pytest.raises(OSError) as err:
        drm.answer(0xC0106401, bytes(16), node)  # a DRM request not emulated
    assert err.value.errno == errno.ENOTTY
