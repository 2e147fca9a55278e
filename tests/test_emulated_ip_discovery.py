"""The emulated driver's ip_discovery tree (hsa/emulated/sysfs.py), which tinygrad's KFD
interface reads to pick its register and packet tables: the hardware ids are the kernel's
soc15_hw_ip.h (gcc oracle over Debian's linux-source-6.1), the layout amdgpu_discovery.c's
die/<die>/<hw_id>/<instance>/{major,minor,revision}, reached through the render node."""

from __future__ import annotations

import pytest

from hsa.emulated import sysfs
from hsa.emulated.models import MODELS
from tests.linux_headers import evaluate

pytestmark = pytest.mark.generic


def test_hw_ids_are_the_kernels(tmp_path):
    got = evaluate(["drivers/gpu/drm/amd/include/soc15_hw_ip.h"],
                   {"GC": "GC_HWID", "SDMA0": "SDMA0_HWID", "NBIF": "NBIF_HWID"}, tmp_path)
    assert got == {"GC": sysfs.GC_HWID, "SDMA0": sysfs.SDMA0_HWID, "NBIF": sysfs.NBIF_HWID}


def test_every_model_has_its_blocks_in_the_tree(tmp_path):
    gpus = [MODELS[t] for t in sorted(MODELS)]
    nodes = sysfs.write_topology(tmp_path, gpus)
    for node in nodes:
        die = (tmp_path / f"sys/class/drm/renderD{node.drm_render_minor}/device"
               / "ip_discovery/die/0")
        blocks = {int(p.name): tuple(int((p / "0" / f).read_text()) for f in
                                     ("major", "minor", "revision"))
                  for p in die.iterdir() if p.name.isdigit()}
        target = node.model.target
        assert set(blocks) == {sysfs.GC_HWID, sysfs.SDMA0_HWID, sysfs.NBIF_HWID}
        assert blocks == sysfs.IP_VERSIONS[target]
        assert blocks[sysfs.GC_HWID][0] == node.model.gfx_version[0]  # GC 9/11/12: gfx9/11/12
        assert int((die / "num_ips").read_text()) == len(blocks)
