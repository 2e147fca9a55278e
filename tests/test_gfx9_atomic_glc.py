"""gfx9 atomics write their VGPR only when GLC (gfx940: SC0) asks for the old value.

The MI200/MI300 ISA guides: for FLAT, GLOBAL and MUBUF atomics, GLC=1 returns the value
memory held before the operation into VDST (MUBUF: VDATA); GLC=0 returns nothing and the
register is left alone. LLVM encodes its no-return forms with a zero VDST field, so the
kernel writes them as words with the VDST field naming a live register (the returning
forms' encodings, from llvm-mc-19, with bit 16 (FLAT) or 14 (MUBUF) cleared): a decoder
or executor that returned old values anyway would overwrite it."""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx9

# returning encodings (llvm-mc-19 -mcpu=gfx940; gfx90a's are the same words):
GLOBAL_ADD_V5 = (0xDD098000, 0x0504010A)  # global_atomic_add v5, v10, v1, s[4:5] sc0
BUFFER_ADD_V6 = (0xE1085000, 0x8002060A)  # buffer_atomic_add v6, v10, s[8:11], 0 offen sc0
FLAT_ADD_V7 = (0xDD090000, 0x0700010C)  # flat_atomic_add v7, v[12:13], v1 sc0


def _no_return(words: tuple[int, int], glc_bit: int) -> str:
    return f"  .long 0x{words[0] & ~(1 << glc_bit):08x}, 0x{words[1]:08x}"


def _source(target: str) -> str:
    return f"""
.amdgcn_target "amdgcn-amd-amdhsa--{target}"
.text
.globl k
.p2align 8
.type k,@function
k:
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v10, 2, v0
  v_mov_b32 v1, 3
  v_mov_b32 v5, 0x12345
  v_mov_b32 v6, 7
  v_mov_b32 v7, 0x777
  s_waitcnt lgkmcnt(0)
{_no_return(GLOBAL_ADD_V5, 16)}
  s_mov_b32 s8, s4
  s_and_b32 s9, s5, 0xffff
  s_mov_b32 s10, 256
  s_mov_b32 s11, 0x27000
{_no_return(BUFFER_ADD_V6, 14)}
  v_mov_b32 v12, s4
  v_mov_b32 v13, s5
  v_add_co_u32 v12, vcc, v12, v10
  v_addc_co_u32 v13, vcc, 0, v13, vcc
{_no_return(FLAT_ADD_V7, 16)}
  s_waitcnt vmcnt(0)
  global_atomic_add v8, v10, v1, s[4:5] {"glc" if target == "gfx90a" else "sc0"}
  s_waitcnt vmcnt(0)
  global_store_dword v10, v5, s[6:7]
  global_store_dword v10, v6, s[6:7] offset:256
  global_store_dword v10, v7, s[6:7] offset:512
  global_store_dword v10, v8, s[6:7] offset:768
  s_endpgm
.rodata
.p2align 6
.amdhsa_kernel k
  .amdhsa_next_free_vgpr 16
  .amdhsa_next_free_sgpr 24
  .amdhsa_accum_offset 16
  .amdhsa_user_sgpr_count 2
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_kernarg_size 16
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: k
    .symbol: k.kd
    .kernarg_segment_size: 16
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 64
    .sgpr_count: 24
    .vgpr_count: 16
    .max_flat_workgroup_size: 64
    .args:
      - {{.offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global}}
...
.end_amdgpu_metadata
"""


@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx950"])
def test_atomics_without_glc_leave_their_register(target: str):
    h = Harness(target)
    code = h.load(build_code_object(_source(target), "assembler", mcpu=target))
    counters = h.buffer(np.full(64, 100, np.uint32))
    out = h.buffer(np.zeros(4 * 64, np.uint32))
    h.dispatch(code, "k", (64,), (64,), [counters, out])
    v5, v6, v7, v8 = h.read(out, np.uint32, 4 * 64).reshape(4, 64)
    assert (v5 == 0x12345).all() and (v6 == 7).all() and (v7 == 0x777).all()
    # every no-return atomic happened (global +3, buffer +7 from v6, flat +3) ...
    assert (h.read(counters, np.uint32, 64) == 100 + 3 + 7 + 3 + 3).all()
    assert (v8 == 113).all()  # ... and the returning one got the value before it
