"""The emulated kernel's GPU models (hsa/emulated/models.py) and the sysfs tree it writes
(hsa/emulated/sysfs.py), read back the way libhsakmt reads it.

The reader here is written from libhsakmt's topology.c (5.2.3 and ROCr 6.4's copy), not
from sysfs.py: files of "name value" lines taken with sscanf("%s %llu\\n") until one fails,
node directories counted, gpu_id files, links followed. Marketing names are checked against
libdrm's own amdgpu.ids (Debian 12's; sid's, newer, once the ROCm 6 root filesystem exists).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from uapi_headers import sid_file

from amdgpu.errors import DeviceError
from hsa.abi.targets import TargetId
from hsa.emulated import sysfs
from hsa.emulated.models import MODELS, parse_node

pytestmark = pytest.mark.generic

# Every key libhsakmt's topology.c compares with strcmp (5.2.3 and ROCr 6.4's copy); the
# node keys both versions read, plus num_xcc (6.x). p2p_links_count is left out on purpose.
NODE_KEYS = (
    "cpu_cores_count simd_count mem_banks_count caches_count io_links_count "
    "cpu_core_id_base simd_id_base capability debug_prop max_waves_per_simd lds_size_in_kb "
    "gds_size_in_kb wave_front_size array_count simd_arrays_per_engine cu_per_simd_array "
    "simd_per_cu max_slots_scratch_cu fw_version vendor_id device_id location_id domain "
    "max_engine_clk_fcompute max_engine_clk_ccompute local_mem_size drm_render_minor "
    "sdma_fw_version hive_id unique_id num_sdma_engines num_sdma_xgmi_engines num_gws "
    "num_sdma_queues_per_engine num_cp_queues num_xcc gfx_target_version").split()
# the kernel's node_show prints these only for a GPU node (its `if (dev->gpu)` block)
GPU_ONLY_KEYS = ("max_engine_clk_fcompute local_mem_size fw_version capability debug_prop "
                 "sdma_fw_version unique_id num_xcc").split()
MEM_KEYS = "heap_type size_in_bytes flags width mem_clk_max".split()
CACHE_KEYS = ("processor_id_low level size cache_line_size cache_lines_per_tag association "
              "latency type").split()
LINK_KEYS = ("type version_major version_minor node_from node_to weight min_latency "
             "max_latency min_bandwidth max_bandwidth recommended_transfer_size flags").split()
SYSTEM_KEYS = ["platform_oem", "platform_id", "platform_rev"]
_LINE = re.compile(r"\s*(\S+)\s+([0-9]+)\n")


def read_props(path: Path) -> dict[str, int]:
    """sscanf(p, "%s %llu\\n%n") in a loop, as libhsakmt: stops at the first line that is not
    a name and a number (a cache's sibling_map)."""
    text, pos, out = path.read_text(), 0, {}
    while m := _LINE.match(text, pos):
        out[m.group(1)] = int(m.group(2))
        pos = m.end()
    return out


def read_tree(root: Path) -> dict:
    topo = root / "sys/devices/virtual/kfd/kfd/topology"
    nodes_dir = topo / "nodes"
    count = len([d for d in nodes_dir.iterdir() if d.is_dir()])
    nodes = []
    for n in range(count):
        d = nodes_dir / str(n)
        props = read_props(d / "properties")
        nodes.append({
            "gpu_id": int((d / "gpu_id").read_text()),
            "name": (d / "name").read_text(),
            "props": props,
            "mem": [read_props(d / f"mem_banks/{i}/properties")
                    for i in range(props["mem_banks_count"])],
            "caches": [read_props(d / f"caches/{i}/properties")
                       for i in range(props["caches_count"])],
            "cache_text": [(d / f"caches/{i}/properties").read_text()
                           for i in range(props["caches_count"])],
            "links": [read_props(d / f"io_links/{i}/properties")
                      for i in range(props["io_links_count"])],
        })
    return {"generation": int((topo / "generation_id").read_text()),
            "system": read_props(topo / "system_properties"), "nodes": nodes}


def _ids_files() -> list[Path]:
    found = [Path("/usr/share/libdrm/amdgpu.ids")]
    found.append(sid_file("usr/share/libdrm/amdgpu.ids"))
    return [p for p in found if p is not None and p.exists()]


def _amdgpu_ids() -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for path in _ids_files():
        for line in path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",", 2)]
            if len(parts) == 3 and not line.startswith("#"):
                try:
                    out[(int(parts[0], 16), int(parts[1], 16))] = parts[2]
                except ValueError:
                    continue
    return out


# --- models -------------------------------------------------------------------------------
def test_every_target_is_modelled_and_its_version_names_it():
    assert set(MODELS) == {"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"}
    for target, m in MODELS.items():
        major, minor, step = m.gfx_version
        # ROCr names the ISA gfx<major><minor hex><stepping hex> from KFD's version
        assert f"gfx{major}{minor:x}{step:x}" == target
        assert m.simd_count // m.simd_per_cu == m.compute_units
        assert m.wave_size == TargetId.parse(target).target.wave_size
        assert m.array_count * m.cu_per_array >= m.compute_units
        assert m.sdma_engines + m.sdma_xgmi_engines >= 2
        assert m.xgmi == (target in ("gfx90a", "gfx942", "gfx950"))


def test_marketing_names_are_libdrms():
    ids = _amdgpu_ids()
    if not ids:
        pytest.skip("no amdgpu.ids: install libdrm-common")
    checked = 0
    for m in MODELS.values():
        name = ids.get((m.device_id, m.revision_id))
        if name is None:  # Debian 12's list predates the part; sid's has it
            continue
        assert name == m.marketing_name, m.target
        checked += 1
    assert checked >= 1
    if len(_ids_files()) > 1:  # sid's list knows all five
        assert checked == len(MODELS)


@pytest.mark.parametrize("spec,targets", [
    ("gfx90a", ["gfx90a"]),
    ("4xgfx90a", ["gfx90a"] * 4),
    ("2xgfx942,gfx1201", ["gfx942", "gfx942", "gfx1201"]),
    (" GFX950 , mi300x", ["gfx950", "gfx942"]),
    ("16xgfx1100", ["gfx1100"] * 16),
])
def test_parse_node(spec, targets):
    assert [m.target for m in parse_node(spec)] == targets


@pytest.mark.parametrize("spec,why", [
    ("", "no GPU named"), ("17xgfx90a", "more than 16"), ("gfx1030", "not an emulated GPU"),
    ("0xgfx90a", "is not"), ("gfx942,,gfx90a", "not a target"), ("x4gfx90a", "is not"),
    ("9xgfx942,8xgfx1201", "more than 16"),
])
def test_parse_node_refuses_in_one_line(spec, why):
    with pytest.raises(DeviceError) as err:
        parse_node(spec)
    text = str(err.value)
    assert why in text and "\n" not in text and "2xgfx942,gfx1201" in text


# --- the sysfs tree -------------------------------------------------------------------------
@pytest.fixture
def mixed(tmp_path):
    gpus = parse_node("2xgfx942,gfx950,gfx1100,gfx1201")
    return tmp_path, gpus, sysfs.write_topology(tmp_path, gpus), read_tree(tmp_path)


def test_topology_reads_back_with_every_key(mixed):
    root, gpus, written, tree = mixed
    assert tree["generation"] >= 1
    assert set(tree["system"]) == set(SYSTEM_KEYS)
    nodes = tree["nodes"]
    assert len(nodes) == 1 + len(gpus)
    for node in nodes:
        wanted = set(NODE_KEYS) - (set(GPU_ONLY_KEYS) if node["gpu_id"] == 0 else set())
        assert not wanted - set(node["props"]), node["name"]
        for mem in node["mem"]:
            assert set(MEM_KEYS) <= set(mem)
        for cache in node["caches"]:
            assert set(CACHE_KEYS) <= set(cache)
        for link in node["links"]:
            assert set(LINK_KEYS) <= set(link)
    for text in (c for n in nodes for c in n["cache_text"]):
        assert text.splitlines()[-1].startswith("sibling_map ")
    cpu = nodes[0]
    assert cpu["gpu_id"] == 0 and cpu["props"]["simd_count"] == 0
    assert cpu["props"]["cpu_cores_count"] >= 1
    assert cpu["mem"][0]["heap_type"] == 0 and cpu["mem"][0]["size_in_bytes"] > 0


def test_gpu_nodes_say_what_the_models_say(mixed):
    root, gpus, written, tree = mixed
    ids = set()
    for info, node, model in zip(written, tree["nodes"][1:], gpus, strict=True):
        p = node["props"]
        assert node["gpu_id"] == info.gpu_id and 0 < info.gpu_id < 1 << 16
        ids.add(info.gpu_id)
        assert p["simd_count"] // p["simd_per_cu"] == model.compute_units
        assert p["gfx_target_version"] == model.gfx_target_version
        assert p["device_id"] == model.device_id and p["vendor_id"] == 0x1002
        assert p["drm_render_minor"] == info.drm_render_minor >= 128
        assert p["lds_size_in_kb"] * 1024 == model.lds_bytes
        assert p["wave_front_size"] == model.wave_size
        assert p["num_xcc"] == model.num_xcc
        assert p["max_engine_clk_fcompute"] == model.max_engine_clock_mhz
        assert node["mem"][0]["size_in_bytes"] == model.vram_bytes
        assert f"GPU-{p['unique_id']:016x}" == sysfs.topology.gpu_uuid(model.target,
                                                                        info.ordinal)
        levels = {c["level"]: c["size"] for c in node["caches"]}
        assert levels[1] == model.l1_kib and levels[2] == model.l2_kib
        assert levels.get(3, 0) == model.l3_kib
        assert node["name"] == model.asic_name + "\n"
        assert (p["capability"] >> 12) & 3 == 2  # DoorbellType
        assert bool(p["capability"] & 1 << 26) == model.xgmi  # sramecc+ on the MI parts
    assert len(ids) == len(gpus)


def test_links_pcie_to_the_cpu_xgmi_inside_a_hive(mixed):
    root, gpus, written, tree = mixed
    nodes = tree["nodes"]
    assert [link["node_to"] for link in nodes[0]["links"]] == [1, 2, 3, 4, 5]
    hive = {n: nodes[n]["props"]["hive_id"] for n in range(1, len(nodes))}
    # the two MI300X share a hive; the lone MI355X and the Radeons are in none
    assert hive[1] == hive[2] != 0 and hive[3] == hive[4] == hive[5] == 0
    for n in range(1, len(nodes)):
        links = nodes[n]["links"]
        assert all(link["node_from"] == n for link in links)
        assert links[0]["node_to"] == 0 and links[0]["type"] == 2  # PCIe
        xgmi = sorted(link["node_to"] for link in links if link["type"] == 11)
        assert xgmi == ([2] if n == 1 else [1] if n == 2 else [])
        assert all(link["weight"] == 15 for link in links if link["type"] == 11)


def test_drm_and_module_files(mixed):
    root, gpus, written, tree = mixed
    assert (root / "sys/module/amdgpu/initstate").read_text() == "live\n"
    assert any(line.startswith("amdgpu ") for line in
               (root / "proc/modules").read_text().splitlines())
    assert (root / "sys/class/kfd/kfd/topology/nodes/1/gpu_id").read_text() == \
        f"{written[0].gpu_id}\n"
    for info in written:
        render = root / f"sys/class/drm/renderD{info.drm_render_minor}"
        assert (render / "dev").read_text() == f"226:{info.drm_render_minor}\n"
        device = render / "device"
        assert int((device / "device").read_text(), 16) == info.model.device_id
        assert int((device / "revision").read_text(), 16) == info.model.revision_id
        assert f"PCI_SLOT_NAME={info.pci_slot}" in (device / "uevent").read_text()
        assert os.path.basename(os.readlink(device / "subsystem")) == "pci"
        assert os.path.basename(os.readlink(device / "driver")) == "amdgpu"
        char = root / f"sys/dev/char/226:{info.drm_render_minor}"
        assert char.resolve() == render.resolve()
        # every link stays inside the tree
        assert str(render.resolve()).startswith(str(root.resolve()))


def test_rewriting_a_smaller_node_leaves_no_old_nodes(tmp_path):
    sysfs.write_topology(tmp_path, parse_node("4xgfx90a"))
    sysfs.write_topology(tmp_path, parse_node("gfx1100"))
    tree = read_tree(tmp_path)
    assert len(tree["nodes"]) == 2 and tree["nodes"][0]["props"]["io_links_count"] == 1
    with pytest.raises(ValueError):
        sysfs.write_topology(tmp_path, [])


# --- Debian's real libhsakmt over the emulated kernel ---------------------------------------
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_debian_libhsakmt_reads_the_nodes(tmp_path):
    """Debian 12's libhsakmt 5.2.3 (not ours) over the emulated kernel (its shim and device
    server, started by scripts/emulated.sh) parses what sysfs.py wrote and what drm.py
    answers: node count, SIMDs, gfx version, device ids, clocks, VRAM, marketing names from
    libdrm, XGMI inside the MI250X hive and a path through the CPU to the MI300X."""
    import shutil
    import subprocess

    launcher = REPO / "scripts" / "emulated.sh"
    if not launcher.exists():
        pytest.skip("the emulated kernel's shim and server (issue 28, scripts/emulated.sh) "
                    "are not in this checkout yet")
    if shutil.which("gcc") is None or not Path("/usr/include/hsakmt.h").exists():
        pytest.skip("needs gcc and libhsakmt-dev (scripts/setup.sh installs them)")
    exe = tmp_path / "hsakmt_nodes"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(REPO / "tests/c/hsakmt_nodes.c"),
                    "-lhsakmt", "-ldl"], check=True, capture_output=True, text=True)
    spec = "2xgfx90a,gfx942"
    done = subprocess.run(["bash", str(launcher), str(exe)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "AMDGPU_EMULATED_NODE": spec})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    facts: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        facts.setdefault(key, []).append(value)
    assert facts["lib"][0].endswith("/libhsakmt.so.1") and "/build/" not in facts["lib"][0]
    assert facts["nodes"] == ["4"]
    for n, model in enumerate(parse_node(spec), start=1):
        node = {}
        for v in facts[str(n)]:
            k, _, rest = v.partition(" ")
            node.setdefault(k, []).append(rest)
        assert int(node["simds"][0]) == model.simd_count
        assert node["gfx"] == [".".join(map(str, model.gfx_version))]
        assert int(node["device_id"][0]) == model.device_id
        assert int(node["clock"][0]) == model.max_engine_clock_mhz
        assert int(node["wave"][0]) == model.wave_size
        assert f"1 {model.vram_bytes}" in node["mem"]  # HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC
        debian_ids = Path("/usr/share/libdrm/amdgpu.ids").read_text()
        if f"{model.device_id:04X},\t{model.revision_id:02X}," in debian_ids:
            assert node["name"] == [model.marketing_name]  # libdrm 2.4.114 knows the part
        else:
            assert node["name"] == ["AMD Radeon Graphics"]  # its fallback
        links = {int(v.split()[0]): v.split()[1:] for v in node["link"]}
        assert links[0] == ["2", "20"]  # PCIe to the CPU
    gpu1 = {}
    for v in facts["1"]:
        if v.startswith("link "):
            to, kind, weight = v.split()[1:]
            gpu1[int(to)] = (int(kind), int(weight))
    assert gpu1[2] == (11, 15)  # XGMI inside the MI250X hive
    assert gpu1[3][1] == 40  # the MI300X: two PCIe hops through the CPU
