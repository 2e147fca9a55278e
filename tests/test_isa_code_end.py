"""A kernel whose code has no s_endpgm on its path (what IREE's CDNA pipeline emits for a
dispatch it proves unreachable: ONNX's test_lstm_defaults gives gfx90a a 0-byte and gfx942 a
preamble-only `matmul_3x3x2` kernel) stops the queue with one line saying that execution ran
past the end of the code, with the kernel's name and the code-object offset."""

from __future__ import annotations

import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = [pytest.mark.hsa_virtual, pytest.mark.isa_gfx9]

SOURCE = """.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl no_end
.p2align 8
.type no_end,@function
no_end:
  s_nop 0
  s_nop 0
.rodata
.p2align 6
.amdhsa_kernel no_end
  .amdhsa_next_free_vgpr 4
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: no_end
    .symbol: no_end.kd
    .kernarg_segment_size: 0
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 64
    .sgpr_count: 8
    .vgpr_count: 4
    .max_flat_workgroup_size: 64
    .args: []
...
.end_amdgpu_metadata
"""


def test_running_off_the_end_is_one_clear_line():
    from amdgpu.errors import HsaError

    h = Harness("gfx942")
    code = h.load(build_code_object(SOURCE, "assembler", mcpu="gfx942"))
    with pytest.raises(HsaError) as err:
        h.dispatch(code, "no_end", (64,), (64,), [])
    text = str(err.value)
    assert "kernel no_end at code-object offset 0x" in text
    assert "execution ran past the end of the code object's code" in text
    assert "no s_endpgm" in text and "\n" not in text


@pytest.mark.slow
def test_irees_empty_lstm_dispatch_on_cdna_is_one_line(capsys):
    """The issue's real case: ONNX's backend test `test_lstm_defaults` as IREE's ONNX
    importer writes it (tests/data/iree/onnx_lstm_defaults.mlir), compiled by IREE for
    gfx942, whose dispatch 7 (matmul_3x3x2_f32) IREE leaves without a body; amdgpu-run stops
    with the one line. On gfx1100 IREE emits the body and the program is right."""
    from pathlib import Path

    from amdgpu.cli import main

    path = Path(__file__).parent / "data" / "iree" / "onnx_lstm_defaults.mlir"
    rc = main([str(path), "--device", "amdgpu:virtual:gfx942", "--json"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "\n" not in err, err
    assert "matmul_3x3x2_f32 at code-object offset 0x" in err
    assert "execution ran past the end of the code object's code" in err
    rc = main([str(path), "--device", "amdgpu:virtual:gfx1100", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and '"correct": true' in out[-1], out
