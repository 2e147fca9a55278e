"""Loads straight into LDS on CDNA: clang's __builtin_amdgcn_global_load_lds is gfx90a's
`global_load_dword ... lds` (FLAT bit 13; the data goes to LDS at M0 + 4 * lane, no VGPR
is written) and gfx942's `global_load_lds_dword` opcode. Before the gfx9 decoder read the
lds bit, gfx90a's form loaded into v0 and left LDS alone (a wrong result, silently)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx9

SRC = r"""
__kernel void k(__global int *out, __global int *in) {
  __local int tile[64];
  int l = __builtin_amdgcn_workitem_id_x();
  int g = __builtin_amdgcn_workgroup_id_x() * 64 + l;
  tile[l] = -1;
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_global_load_lds(in + g, tile, 4, 0, 0);
  __builtin_amdgcn_s_waitcnt(0);
  __builtin_amdgcn_s_barrier();
  out[g] = tile[(l + 1) % 64];
}
"""


@pytest.mark.parametrize("target,form", [("gfx90a", r"global_load_dword v\d+, s\[\d+:\d+\] lds|"
                                          r"global_load_dword v\[\d+:\d+\], off lds"),
                                         ("gfx942", "global_load_lds_dword")])
def test_global_load_lds_fills_lds(target, form, tmp_path):
    import re

    obj = build_code_object(SRC, "cl", mcpu=target)
    if shutil.which("llvm-objdump-19"):  # the object holds the form under test
        (tmp_path / "k.o").write_bytes(obj)
        text = subprocess.run(["llvm-objdump-19", "-d", str(tmp_path / "k.o")],
                              capture_output=True, text=True, check=True).stdout
        assert re.search(form, text), text
    h = Harness(target)
    x = np.arange(256, dtype=np.int32) * 7 + 3
    out = h.alloc(4 * 256)
    h.dispatch(h.load(obj), "k", (256,), (64,), [out, h.buffer(x)])
    lane = np.arange(256)
    assert np.array_equal(h.read(out, np.int32, 256), x[(lane + 1) % 64 + lane // 64 * 64])
