"""gfx1100 instruction cases (not a test module): hand-written assembly, one small kernel
per case, with its numpy reference; tests/test_gfx11_alu.py runs them on the executor and
tests/test_gfx11_decoder.py decodes their code objects.

Each kernel runs 8 workgroups of one wave32 wave. Lane i of wave w reads a, b, c from three
256-word arrays at index 32*w + i into v1, v2, v3, runs the case's instructions, and stores
v4. Scalar cases move lane 0's inputs to SGPRs with v_readfirstlane, so their reference is
per wave. `kernel_source(names)` is the assembly of the named CASES, `wmma_source()` that of
every WMMA_FORMS entry.
"""

from __future__ import annotations

import numpy as np

N = 256
f32, u32, i32 = np.float32, np.uint32, np.int32
SCALAR = "v_readfirstlane_b32 s8, v1\nv_readfirstlane_b32 s9, v2\nv_readfirstlane_b32 s10, v3\n"


def F(x):  # noqa: N802 - bits as float32
    return np.asarray(x, u32).view(f32)


def B(x):  # noqa: N802 - float32 as bits
    return np.asarray(x, f32).view(u32)


def S(x):  # noqa: N802 - bits as int32
    return np.asarray(x, u32).view(i32)


def per_wave(fn):
    """Reference of a scalar case: lane 0 of each wave, broadcast over the wave."""
    def ref(a, b, c):
        r = np.asarray(fn(a[::32], b[::32], c[::32]))
        return np.repeat(np.broadcast_to(r, (N // 32,)), 32)
    return ref


def popcount(x):
    return np.array([bin(int(v)).count("1") for v in np.asarray(x, u32)], u32)


def brev32(x):
    return np.array([int(f"{int(v):032b}"[::-1], 2) for v in np.asarray(x, u32)], u32)


def fma32(a, b, c):
    return (F(a).astype(np.float64) * F(b) + F(c)).astype(f32)


def fma16(a, b, c):  # f16 FMA: one rounding
    return (a.astype(np.float64) * b + c).astype(np.float16).astype(f32)


def h16(x):  # f32 values -> f16 bits in the low half
    return np.asarray(x, f32).astype(np.float16).view(np.uint16).astype(u32)


def h16_rtz(x):  # f32 values -> f16 bits rounded toward zero: the largest f16 not above |x|
    table = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mag = np.abs(np.asarray(x, np.float64))
    bits = np.where(np.isinf(mag), 0x7C00, np.searchsorted(table, mag, side="right") - 1)
    return bits.astype(u32) | (np.signbit(x).astype(u32) << u32(15))


def f16lo(x):
    return (np.asarray(x, u32) & u32(0xFFFF)).astype(np.uint16).view(np.float16).astype(f32)


def f16hi(x):
    return (np.asarray(x, u32) >> u32(16)).astype(np.uint16).view(np.float16).astype(f32)


_LANE = np.arange(N) % 32

# name: (instructions, input kind, reference(a, b, c) -> uint32 bits, tolerance or None)
CASES = {
    "add_nc": ("v_add_nc_u32 v4, v1, v2", "u32", lambda a, b, c: a + b, None),
    "sub_nc": ("v_sub_nc_u32 v4, v1, v2", "u32", lambda a, b, c: a - b, None),
    "subrev_nc": ("v_subrev_nc_u32 v4, v1, v2", "u32", lambda a, b, c: b - a, None),
    "mul_lo": ("v_mul_lo_u32 v4, v1, v2", "u32", lambda a, b, c: a * b, None),
    "mul_hi_u": ("v_mul_hi_u32 v4, v1, v2", "u32",
                 lambda a, b, c: (a.astype(np.uint64) * b >> np.uint64(32)).astype(u32), None),
    "mul_hi_i": ("v_mul_hi_i32 v4, v1, v2", "u32",
                 lambda a, b, c: (S(a).astype(np.int64) * S(b) >> 32).astype(u32), None),
    "mul_u24": ("v_mul_u32_u24 v4, v1, v2", "u32",
                lambda a, b, c: (a & u32(0xFFFFFF)) * (b & u32(0xFFFFFF)), None),
    "mad_u24": ("v_mad_u32_u24 v4, v1, v2, v3", "u32",
                lambda a, b, c: (a & u32(0xFFFFFF)) * (b & u32(0xFFFFFF)) + c, None),
    "logic": ("v_and_b32 v5, v1, v2\nv_xor_b32 v6, v5, v3\nv_or_b32 v4, v6, 0x80\n"
              "v_xnor_b32 v4, v4, v1", "u32", lambda a, b, c: ~(((a & b) ^ c | 0x80) ^ a), None),
    "shifts": ("v_lshlrev_b32 v5, v2, v1\nv_lshrrev_b32 v6, v2, v3\nv_ashrrev_i32 v7, v2, v1\n"
               "v_xad_u32 v4, v5, v6, v7", "u32",
               lambda a, b, c: ((a << (b & 31)) ^ (c >> (b & 31)))
               + (S(a) >> (b & 31).astype(i32)).astype(u32), None),
    "bfe_u": ("v_bfe_u32 v4, v1, v2, v3", "u32",
              lambda a, b, c: np.where((c & 31) == 0, 0, (a >> (b & 31)) & (
                  ((np.uint64(1) << (c & 31).astype(np.uint64)) - np.uint64(1)).astype(u32))),
              None),
    "bfe_i": ("v_bfe_i32 v4, v1, 8, 5", "u32",
              lambda a, b, c: (((S(a) >> 8) & 31) ^ 16) - 16, None),
    "bfi": ("v_bfi_b32 v4, v1, v2, v3", "u32", lambda a, b, c: (a & b) | (~a & c), None),
    "alignbit": ("v_alignbit_b32 v4, v1, v2, v3", "u32",
                 lambda a, b, c: ((a.astype(np.uint64) << np.uint64(32) | b)
                                  >> (c & 31).astype(np.uint64)).astype(u32), None),
    "alignbyte": ("v_alignbyte_b32 v4, v1, v2, v3", "u32",
                  lambda a, b, c: ((a.astype(np.uint64) << np.uint64(32) | b)
                                   >> (8 * (c & 3)).astype(np.uint64)).astype(u32), None),
    "perm": ("v_perm_b32 v4, v1, v2, 0x0c050703", "u32",
             lambda a, b, c: ((b >> 24) & 0xFF) | (((a >> 24) & 0xFF) << 8)
             | (((a >> 8) & 0xFF) << 16), None),
    "three_ops": ("v_add3_u32 v5, v1, v2, v3\nv_lshl_or_b32 v6, v1, 3, v2\n"
                  "v_and_or_b32 v7, v1, v2, v3\nv_or3_b32 v4, v5, v6, v7", "u32",
                  lambda a, b, c: (a + b + c) | ((a << 3) | b) | ((a & b) | c), None),
    "lshl_add": ("v_lshl_add_u32 v5, v1, 2, v2\nv_add_lshl_u32 v6, v1, v2, 1\n"
                 "v_sub_nc_u32 v4, v5, v6", "u32",
                 lambda a, b, c: ((a << 2) + b) - ((a + b) << 1), None),
    "minmax_int": ("v_min_i32 v5, v1, v2\nv_max_u32 v6, v2, v3\nv_med3_i32 v7, v1, v2, v3\n"
                   "v_min3_u32 v8, v1, v2, v3\nv_xor3_b32 v4, v5, v6, v7\n"
                   "v_xor_b32 v4, v4, v8", "u32",
                   lambda a, b, c: B(0) | (S(np.minimum(S(a), S(b))).view(u32)
                                           ^ np.maximum(b, c)
                                           ^ np.median(np.stack([S(a), S(b), S(c)]),
                                                       axis=0).astype(i32).view(u32)
                                           ^ np.minimum(np.minimum(a, b), c)), None),
    # a VGPR-pair address with a negative immediate offset (signed, modulo 2**64)
    "global_negative_offset": ("v_mov_b32 v7, s7\n"
                               "v_add_co_u32 v6, vcc_lo, s6, v10\n"
                               "v_add_co_ci_u32_e32 v7, vcc_lo, 0, v7, vcc_lo\n"
                               "v_add_co_u32 v6, vcc_lo, 0x40, v6\n"
                               "v_add_co_ci_u32_e32 v7, vcc_lo, 0, v7, vcc_lo\n"
                               "global_load_b32 v4, v[6:7], off offset:-64\n"
                               "s_waitcnt vmcnt(0)", "u32", lambda a, b, c: a, None),
    "carry_chain": ("v_add_co_u32 v5, vcc_lo, v1, v2\n"
                    "v_add_co_ci_u32_e32 v4, vcc_lo, 0, v3, vcc_lo", "u32",
                    lambda a, b, c: c + ((a.astype(np.uint64) + b) >> np.uint64(32)).astype(u32),
                    None),
    "borrow_chain": ("v_sub_co_u32 v5, vcc_lo, v1, v2\n"
                     "v_subrev_co_ci_u32_e32 v4, vcc_lo, 0, v3, vcc_lo", "u32",
                     lambda a, b, c: c - (a < b).astype(u32), None),
    "cmp_cndmask": ("v_cmp_lt_i32_e32 vcc_lo, v1, v2\nv_cndmask_b32_e32 v4, v3, v1, vcc_lo",
                    "u32", lambda a, b, c: np.where(S(a) < S(b), a, c), None),
    "cmp_e64_sgpr": ("v_cmp_gt_u32_e64 s16, v1, v2\nv_cndmask_b32_e64 v4, 7, -1, s16", "u32",
                     lambda a, b, c: np.where(a > b, u32(0xFFFFFFFF), u32(7)), None),
    "cmpx_exec": ("v_mov_b32 v4, 5\ns_mov_b32 s16, exec_lo\nv_cmpx_ne_u32_e32 v1, v2\n"
                  "v_mov_b32 v4, v3\ns_mov_b32 exec_lo, s16", "small",
                  lambda a, b, c: np.where(a != b, c, u32(5)), None),
    "saveexec": ("v_mov_b32 v4, 1\nv_cmp_gt_u32_e32 vcc_lo, v1, v2\n"
                 "s_and_saveexec_b32 s16, vcc_lo\nv_add_nc_u32 v4, v3, 9\n"
                 "s_or_b32 exec_lo, exec_lo, s16\nv_add_nc_u32 v4, v4, 1", "small",
                 lambda a, b, c: np.where(a > b, c + 10, u32(2)), None),
    "mad_u64": ("v_mov_b32 v6, v3\nv_mov_b32 v7, 0\n"
                "v_mad_u64_u32 v[8:9], null, v1, v2, v[6:7]\nv_xor_b32 v4, v8, v9", "u32",
                lambda a, b, c: (lambda r: (r & np.uint64(0xFFFFFFFF)).astype(u32)
                                 ^ (r >> np.uint64(32)).astype(u32))(
                                     a.astype(np.uint64) * b + c), None),
    "lshl_b64": ("v_and_b32 v5, 31, v2\nv_lshlrev_b64 v[6:7], v5, v[3:4]\n"
                 "v_mov_b32 v4, v7", "u32",
                 lambda a, b, c: (c.astype(np.uint64) << (b & 31).astype(np.uint64)
                                  >> np.uint64(32)).astype(u32), None),
    "add_f32": ("v_add_f32 v4, v1, v2", "f32", lambda a, b, c: B(F(a) + F(b)), 0),
    "sub_f32": ("v_sub_f32 v4, v1, v2", "f32", lambda a, b, c: B(F(a) - F(b)), 0),
    "mul_f32": ("v_mul_f32 v4, v1, v2", "f32", lambda a, b, c: B(F(a) * F(b)), 0),
    "fma_f32": ("v_fma_f32 v4, v1, v2, v3", "f32", lambda a, b, c: B(fma32(a, b, c)), 0),
    "fmac_f32": ("v_mov_b32 v4, v3\nv_fmac_f32 v4, v1, v2", "f32",
                 lambda a, b, c: B(fma32(a, b, c)), 0),
    "fmaak": ("v_fmaak_f32 v4, v1, v2, 0x3fc00000", "f32",
              lambda a, b, c: B(fma32(a, b, B(np.full(N, 1.5, f32)))), 0),
    "modifiers": ("v_add_f32_e64 v4, -v1, |v2|", "f32",
                  lambda a, b, c: B(-F(a) + np.abs(F(b))), 0),
    "clamp_omod": ("v_mul_f32_e64 v4, v1, v2 clamp\nv_add_f32_e64 v4, v4, v3 mul:2", "f32",
                   lambda a, b, c: B((np.clip(F(a) * F(b), 0, 1) + F(c)) * f32(2)), 0),
    "minmax_f32": ("v_max_f32 v5, v1, v2\nv_min_f32 v6, v2, v3\nv_max3_f32 v7, v1, v2, v3\n"
                   "v_add_f32 v4, v5, v6\nv_add_f32 v4, v4, v7", "f32",
                   lambda a, b, c: B(np.maximum(F(a), F(b)) + np.minimum(F(b), F(c))
                                     + np.maximum(np.maximum(F(a), F(b)), F(c))), 0),
    "rounding": ("v_floor_f32 v5, v1\nv_ceil_f32 v6, v2\nv_rndne_f32 v7, v3\n"
                 "v_trunc_f32 v8, v1\nv_fract_f32 v9, v2\nv_add_f32 v4, v5, v6\n"
                 "v_add_f32 v4, v4, v7\nv_add_f32 v4, v4, v8\nv_add_f32 v4, v4, v9", "f32",
                 lambda a, b, c: B(np.floor(F(a)) + np.ceil(F(b)) + np.rint(F(c))
                                   + np.trunc(F(a)) + (F(b) - np.floor(F(b)))), 0),
    "conversions": ("v_cvt_i32_f32 v5, v1\nv_cvt_f32_i32 v6, v5\nv_cvt_u32_f32 v7, v2\n"
                    "v_cvt_f32_u32 v8, v7\nv_add_f32 v4, v6, v8", "f32",
                    lambda a, b, c: B(np.trunc(F(a)) + np.trunc(np.maximum(F(b), 0))), 0),
    "transcendental": ("v_exp_f32 v5, v1\nv_log_f32 v6, |v2|\nv_rcp_f32 v7, v3\n"
                       "v_sqrt_f32 v8, |v1|\nv_rsq_f32 v9, |v2|\nv_add_f32 v4, v5, v6\n"
                       "v_add_f32 v4, v4, v7\nv_add_f32 v4, v4, v8\nv_add_f32 v4, v4, v9",
                       "small_f32",
                       lambda a, b, c: B(np.exp2(F(a)) + np.log2(np.abs(F(b))) + 1 / F(c)
                                         + np.sqrt(np.abs(F(a))) + 1 / np.sqrt(np.abs(F(b)))),
                       1e-5),
    "ldexp_frexp": ("v_frexp_mant_f32 v5, v1\nv_frexp_exp_i32_f32 v6, v1\n"
                    "v_ldexp_f32 v4, v5, v6", "f32", lambda a, b, c: a, 0),
    "cmp_class": ("v_cmp_class_f32_e64 s16, v1, 0x60\nv_cndmask_b32_e64 v4, 0, 1, s16", "f32",
                  lambda a, b, c: (F(a) == 0).astype(u32), None),
    "cmp_f32": ("v_cmp_nge_f32_e32 vcc_lo, v1, v2\nv_cndmask_b32_e32 v4, v3, v2, vcc_lo", "f32",
                lambda a, b, c: np.where(~(F(a) >= F(b)), b, c), None),
    "div_sequence": ("v_div_scale_f32 v5, null, v2, v2, v1\nv_rcp_f32 v6, v5\n"
                     "v_div_scale_f32 v7, vcc_lo, v1, v2, v1\nv_fma_f32 v8, -v5, v6, 1.0\n"
                     "v_fmac_f32 v6, v8, v6\nv_mul_f32 v8, v7, v6\n"
                     "v_fma_f32 v9, -v5, v8, v7\nv_fmac_f32 v8, v9, v6\n"
                     "v_fma_f32 v5, -v5, v8, v7\nv_div_fmas_f32 v5, v5, v6, v8\n"
                     "v_div_fixup_f32 v4, v5, v2, v1", "f32",
                     lambda a, b, c: B(F(a) / F(b)), 2e-7),
    "f16": ("v_cvt_f16_f32 v5, v1\nv_cvt_f16_f32 v6, v2\nv_add_f16 v7, v5, v6\n"
            "v_mul_f16 v7, v7, v5\nv_cvt_f32_f16 v4, v7", "small_f32",
            lambda a, b, c: B(((F(a).astype(np.float16) + F(b).astype(np.float16))
                               * F(a).astype(np.float16)).astype(f32)), 0),
    "packed_f16": ("v_pk_fma_f16 v5, v1, v2, v3\nv_pk_add_f16 v4, v5, v1 op_sel:[1,0] "
                   "op_sel_hi:[0,1]", "f16x2",
                   lambda a, b, c: h16(fma16(f16hi(a), f16hi(b), f16hi(c)) + f16lo(a))
                   | (h16(fma16(f16lo(a), f16lo(b), f16lo(c)) + f16hi(a)) << u32(16)), None),
    "dot2": ("v_dot2_f32_f16 v4, v1, v2, v3", "f16x2_f32",
             lambda a, b, c: B(f16lo(a) * f16lo(b) + f16hi(a) * f16hi(b) + F(c)), 1e-6),
    "fma_mix": ("v_fma_mix_f32 v4, v1, v2, v3 op_sel_hi:[1,1,0]", "f16x2_f32",
                lambda a, b, c: B(f16lo(a).astype(np.float64) * f16lo(b) + F(c)), 1e-6),
    "cvt_pk_rtz": ("v_cvt_pk_rtz_f16_f32 v4, v1, v2", "small_f32",  # rounds toward zero
                   lambda a, b, c: h16_rtz(F(a)) | (h16_rtz(F(b)) << u32(16)), None),
    "f64": ("v_cvt_f64_f32 v[6:7], v1\nv_cvt_f64_f32 v[8:9], v2\n"
            "v_mul_f64 v[6:7], v[6:7], v[8:9]\nv_cvt_f32_f64 v4, v[6:7]", "f32",
            lambda a, b, c: B((F(a).astype(np.float64) * F(b)).astype(f32)), 0),
    "mbcnt": ("v_mbcnt_lo_u32_b32 v5, v1, v3\nv_mbcnt_hi_u32_b32 v4, v2, v5", "u32",
              lambda a, b, c: popcount(a & ((np.uint64(1) << _LANE.astype(np.uint64))
                                            - np.uint64(1)).astype(u32)) + c, None),
    "bcnt": ("v_bcnt_u32_b32 v4, v1, v2", "u32", lambda a, b, c: popcount(a) + b, None),
    "readfirstlane": ("v_readfirstlane_b32 s16, v1\nv_add_nc_u32 v4, s16, v2", "u32",
                      lambda a, b, c: np.repeat(a[::32], 32) + b, None),
    "permlanex16": ("s_mov_b32 s16, 0x76543210\ns_mov_b32 s17, 0xfedcba98\n"
                    "v_permlanex16_b32 v4, v1, s16, s17", "u32",
                    lambda a, b, c: a.reshape(-1, 2, 16)[:, ::-1].reshape(-1), None),
    "dpp_row_shr": ("v_mov_b32 v4, v3\nv_mov_b32_dpp v4, v1 row_shr:1 row_mask:0xf "
                    "bank_mask:0xf", "u32",
                    lambda a, b, c: np.where(_LANE % 16 == 0, c, np.roll(a, 1)), None),
    "dpp_add_xmask": ("v_add_f32_dpp v4, v1, v2 row_xmask:1 row_mask:0xf bank_mask:0xf "
                      "bound_ctrl:1", "f32",
                      lambda a, b, c: B(F(a.reshape(-1, 2)[:, ::-1].reshape(-1)) + F(b)), 0),
    "dpp_vop3": ("v_add_f32_e64_dpp v4, -v1, |v2| row_xmask:2 row_mask:0xf bank_mask:0xf "
                 "bound_ctrl:1", "f32",
                 lambda a, b, c: B(-F(a[np.arange(N) ^ 2]) + np.abs(F(b))), 0),
    # VOP3b (a carry-out SGPR) with DPP16: src0 is the DPP16 code 250 (IREE's i8 matmul on
    # gfx1100 has v_add_co_u32_e64_dpp); the carry goes back in through v_add_co_ci_u32
    "dpp_vop3_carry": ("v_add_co_u32_e64_dpp v5, s16, v1, v2 row_xmask:1 row_mask:0xf "
                       "bank_mask:0xf\nv_add_co_ci_u32_e64 v4, s17, v5, 0, s16", "u32",
                       lambda a, b, c: _add_carry(a.reshape(-1, 2)[:, ::-1].reshape(-1), b),
                       None),
    "dpp_quad_perm": ("v_mov_b32_dpp v4, v1 quad_perm:[3,2,1,0] row_mask:0xf bank_mask:0xf",
                      "u32", lambda a, b, c: a.reshape(-1, 4)[:, ::-1].reshape(-1), None),
    "dpp8": ("v_mov_b32_dpp v4, v1 dpp8:[7,6,5,4,3,2,1,0]", "u32",
             lambda a, b, c: a.reshape(-1, 8)[:, ::-1].reshape(-1), None),
    "ds_bpermute": ("v_and_b32 v5, 31, v2\nv_lshlrev_b32 v5, 2, v5\n"
                    "ds_bpermute_b32 v4, v5, v1\ns_waitcnt lgkmcnt(0)", "u32",
                    lambda a, b, c: a[(np.arange(N) & ~31) + (b & 31)], None),
    "ds_swizzle": ("ds_swizzle_b32 v4, v1 offset:swizzle(SWAP,1)\ns_waitcnt lgkmcnt(0)", "u32",
                   lambda a, b, c: a.reshape(-1, 2)[:, ::-1].reshape(-1), None),
    "lds_roundtrip": ("v_lshlrev_b32 v5, 2, v0\nds_store_b32 v5, v1\n"
                      "ds_store_b16 v5, v2 offset:128\ns_waitcnt lgkmcnt(0)\n"
                      "v_xor_b32 v6, 4, v5\nds_load_b32 v7, v6\nds_load_u16 v8, v6 offset:128\n"
                      "s_waitcnt lgkmcnt(0)\nv_add_nc_u32 v4, v7, v8", "u32",
                      lambda a, b, c: a.reshape(-1, 2)[:, ::-1].reshape(-1)
                      + (b.reshape(-1, 2)[:, ::-1].reshape(-1) & u32(0xFFFF)), None),
    "lds_atomic": ("v_mov_b32 v5, 0\nv_mov_b32 v6, 0\nds_store_b32 v5, v6\n"
                   "s_waitcnt lgkmcnt(0)\nds_add_rtn_u32 v7, v5, v1\ns_waitcnt lgkmcnt(0)\n"
                   "ds_load_b32 v4, v5\ns_waitcnt lgkmcnt(0)", "small",
                   lambda a, b, c: np.repeat(a.reshape(-1, 32).sum(axis=1).astype(u32), 32),
                   None),
    # every lane of every wave adds to word 768 of the inputs; returns old values (glc)
    "global_atomic": ("v_mov_b32 v5, 0\nglobal_atomic_add_u32 v6, v5, v1, s[6:7] offset:3072 "
                      "glc\ns_waitcnt vmcnt(0)\nv_mov_b32 v4, v6", "small", None, None),
    # raw buffer (V#) of 64 bytes over the a inputs: lanes past it read 0
    "buffer_load": ("s_mov_b32 s12, s6\ns_and_b32 s13, s7, 0xffff\ns_mov_b32 s14, 64\n"
                    "s_mov_b32 s15, 0x31027000\nv_lshlrev_b32 v5, 2, v0\n"
                    "buffer_load_b32 v4, v5, s[12:15], 0 offen offset:4\ns_waitcnt vmcnt(0)",
                    "u32", lambda a, b, c: np.where(_LANE < 15, a[(_LANE + 1) % 32], 0), None),
    # raw buffer of 64 bytes over the zeroed 4th input block: stores past it are dropped
    "buffer_store": ("s_add_u32 s12, s6, 0xc00\ns_addc_u32 s13, s7, 0\n"
                     "s_and_b32 s13, s13, 0xffff\ns_mov_b32 s14, 64\n"
                     "s_mov_b32 s15, 0x31027000\nv_lshlrev_b32 v5, 2, v0\n"
                     "buffer_store_b32 v1, v5, s[12:15], 0 offen\nv_mov_b32 v4, 0",
                     "u32", lambda a, b, c: np.zeros(N, u32), None),
    # 64-bit atomics: each lane adds a (zero-extended) to its own 8-byte slot of block 4
    "global_atomic64": ("v_lshlrev_b32 v5, 3, v0\nv_mov_b32 v6, v1\nv_mov_b32 v7, 0\n"
                        "global_atomic_add_u64 v5, v[6:7], s[6:7] offset:3072\n"
                        "v_mov_b32 v8, 0\nv_mov_b32 v9, 0\nv_mov_b32 v12, 5\nv_mov_b32 v13, 0\n"
                        "global_atomic_cmpswap_b64 v[14:15], v5, v[12:15], s[6:7] offset:3328 "
                        "glc\ns_waitcnt vmcnt(0)\nv_mov_b32 v4, 0", "small",
                        lambda a, b, c: np.zeros(N, u32), None),
    # buffer atomics through a 64-byte V# over block 4: lanes past it do nothing, return 0
    "buffer_atomic": ("s_add_u32 s12, s6, 0xc00\ns_addc_u32 s13, s7, 0\n"
                      "s_and_b32 s13, s13, 0xffff\ns_mov_b32 s14, 64\n"
                      "s_mov_b32 s15, 0x31027000\nv_lshlrev_b32 v5, 2, v0\nv_mov_b32 v4, v1\n"
                      "buffer_atomic_add_u32 v4, v5, s[12:15], 0 offen glc\n"
                      "s_waitcnt vmcnt(0)", "small", None, None),
    # VOPD operands sit in different VGPR banks (register number mod 4)
    "vopd": ("v_mov_b32 v4, v3\nv_mov_b32 v5, v3\nv_mov_b32 v8, v1\nv_mov_b32 v9, v2\n"
             "v_dual_fmac_f32 v4, v1, v2 :: v_dual_dot2acc_f32_f16 v5, v8, v9\n"
             "v_dual_max_f32 v6, v4, v1 :: v_dual_mul_f32 v7, v5, v2\nv_add_f32 v4, v6, v7",
             "f16x2_f32",
             lambda a, b, c: B(np.maximum(fma32(a, b, c), F(a))
                               + (F(c) + f16lo(a) * f16lo(b) + f16hi(a) * f16hi(b)) * F(b)),
             1e-5),
    "lds_atomic64": ("v_mov_b32 v5, 0\nv_mov_b32 v6, 0\nv_mov_b32 v7, 1\n"
                     "ds_store_b64 v5, v[6:7]\ns_waitcnt lgkmcnt(0)\nv_mov_b32 v8, v1\n"
                     "v_mov_b32 v9, 0\nds_add_rtn_u64 v[12:13], v5, v[8:9]\n"
                     "s_waitcnt lgkmcnt(0)\nds_load_b64 v[12:13], v5\ns_waitcnt lgkmcnt(0)\n"
                     "v_add_nc_u32 v4, v12, v13", "small",
                     lambda a, b, c: np.repeat(a.reshape(-1, 32).sum(axis=1).astype(u32) + 1,
                                               32), None),
    # typed loads convert through the V#'s format and DST_SEL: 32_FLOAT, x y z w
    "tbuffer": ("s_mov_b32 s12, s6\ns_and_b32 s13, s7, 0xffff\ns_mov_b32 s14, 0x400\n"
                "s_mov_b32 s15, 0x31016fac\nv_lshlrev_b32 v5, 3, v0\n"
                "tbuffer_load_format_xy v[12:13], v5, s[12:15], 0 format:[BUF_FMT_32_32_UINT] "
                "offen\nbuffer_load_format_x v14, v5, s[12:15], 0 offen offset:4\n"
                "s_waitcnt vmcnt(0)\nv_add_nc_u32 v4, v12, v13\nv_add_nc_u32 v4, v4, v14",
                "u32", lambda a, b, c: np.tile(a[0:64:2] + 2 * a[1:64:2], N // 32), None),
    "swap": ("v_swap_b32 v1, v2\nv_sub_nc_u32 v4, v1, v2", "u32", lambda a, b, c: b - a, None),
    "sad_u8": ("v_sad_u8 v4, v1, v2, v3", "u32",
               lambda a, b, c: c + sum(np.abs(((a >> k) & 255).astype(np.int64)
                                              - ((b >> k) & 255)) for k in (0, 8, 16, 24)),
               None),
    "s_bits64": (SCALAR + "s_bcnt1_i32_b64 s11, s[8:9]\ns_brev_b64 s[12:13], s[8:9]\n"
                 "s_bfm_b64 s[14:15], 5, 30\ns_add_u32 s11, s11, s12\n"
                 "s_xor_b32 s11, s11, s15\nv_mov_b32 v4, s11", "u32",
                 per_wave(lambda a, b, c: (popcount(a) + popcount(b) + brev32(b))
                          ^ u32(0x7)), None),
    "s_arith": (SCALAR + "s_add_u32 s11, s8, s9\ns_cselect_b32 s12, 1, 0\n"
                "s_mul_i32 s13, s11, s10\ns_add_u32 s13, s13, s12\nv_mov_b32 v4, s13", "u32",
                per_wave(lambda a, b, c: (a + b) * c + ((a.astype(np.uint64) + b)
                                                         >> np.uint64(32)).astype(u32)), None),
    "s_addc_64": (SCALAR + "s_add_u32 s12, s8, s9\ns_addc_u32 s13, s10, 0\n"
                  "v_mov_b32 v4, s13", "u32",
                  per_wave(lambda a, b, c: c + ((a.astype(np.uint64) + b)
                                                >> np.uint64(32)).astype(u32)), None),
    "s_logic_shift": (SCALAR + "s_and_b32 s11, s8, s9\ns_lshl_b32 s12, s10, 3\n"
                      "s_lshr_b32 s13, s8, 5\ns_ashr_i32 s14, s9, 7\ns_xor_b32 s11, s11, s12\n"
                      "s_xor_b32 s11, s11, s13\ns_xor_b32 s11, s11, s14\ns_not_b32 s11, s11\n"
                      "v_mov_b32 v4, s11", "u32",
                      per_wave(lambda a, b, c: ~((a & b) ^ (c << 3) ^ (a >> 5)
                                                 ^ (S(b) >> 7).view(u32))), None),
    "s_bfe_cmp": (SCALAR + "s_bfe_u32 s11, s8, 0x80004\ns_cmp_lt_i32 s9, s10\n"
                  "s_cselect_b32 s12, s11, 0x1234\ns_min_u32 s13, s8, s9\n"
                  "s_max_i32 s14, s9, s10\ns_add_u32 s12, s12, s13\ns_add_u32 s12, s12, s14\n"
                  "v_mov_b32 v4, s12", "u32",
                  per_wave(lambda a, b, c: np.where(S(b) < S(c), (a >> 4) & 0xFF, 0x1234)
                           + np.minimum(a, b) + np.maximum(S(b), S(c)).view(u32)), None),
    "s_64bit": (SCALAR + "s_mov_b32 s12, s8\ns_mov_b32 s13, s9\ns_lshl_b64 s[12:13], s[12:13], 4\n"
                "s_or_b64 s[12:13], s[12:13], 1\nv_mov_b32 v4, s13\nv_add_nc_u32 v4, v4, s12",
                "u32", per_wave(lambda a, b, c: (lambda r: (r >> np.uint64(32)).astype(u32)
                                                  + (r & np.uint64(0xFFFFFFFF)).astype(u32))(
                    ((b.astype(np.uint64) << np.uint64(32) | a) << np.uint64(4)) | np.uint64(1))),
                None),
    "s_branch_divergent": (SCALAR + "s_cmp_gt_u32 s8, s9\ns_cbranch_scc1 .Ltaken\n"
                           "v_mov_b32 v4, 11\ns_branch .Ljoin\n.Ltaken:\nv_mov_b32 v4, 22\n"
                           ".Ljoin:\nv_add_nc_u32 v4, v4, v3", "u32",
                           lambda a, b, c: np.repeat(np.where(a[::32] > b[::32], 22, 11), 32)
                           .astype(u32) + c, None),
    "s_loop": (SCALAR + "s_and_b32 s8, s8, 15\nv_mov_b32 v4, 0\n.Lloop:\n"
               "s_cmp_eq_u32 s8, 0\ns_cbranch_scc1 .Ldone\nv_add_nc_u32 v4, v4, v2\n"
               "s_sub_u32 s8, s8, 1\ns_branch .Lloop\n.Ldone:", "u32",
               lambda a, b, c: np.repeat(a[::32] & 15, 32) * b, None),
}


def _clz64(x):
    return np.array([63 - int(v).bit_length() + 1 if v else 0xFFFFFFFF for v in x], u32)


def _cls64(x):
    return _clz64([(~int(v)) & (2**64 - 1) if int(v) >> 63 else int(v) for v in x])


def _wide(a, b):
    return [int(lo) | int(hi) << 32 for lo, hi in zip(a, b, strict=True)]


# Issue #12: opcodes compilers emit that had no semantics.
CASES.update({
    "s_bitset": (SCALAR + "s_mov_b32 s11, s10\ns_bitset1_b32 s11, s8\ns_bitset0_b32 s11, s9\n"
                 "v_mov_b32 v4, s11", "u32",
                 per_wave(lambda a, b, c: (c | (u32(1) << (a & 31))) & ~(u32(1) << (b & 31))),
                 None),
    "s_clz_cls_64": (SCALAR + "s_lshr_b32 s9, s9, s10\ns_clz_i32_u64 s11, s[8:9]\n"
                     "s_cls_i32_i64 s12, s[8:9]\ns_lshl_b32 s12, s12, 8\n"
                     "s_or_b32 s11, s11, s12\nv_mov_b32 v4, s11", "u32",
                     per_wave(lambda a, b, c: (lambda w: _clz64(w) | (_cls64(w) << u32(8)))(
                         _wide(a, b >> (c & 31)))), None),
    "s_movrel": (SCALAR + "s_mov_b32 s16, 1\ns_mov_b32 s17, 2\ns_mov_b32 s18, 3\n"
                 "s_and_b32 s11, s8, 1\ns_add_u32 m0, s11, 1\ns_movrels_b32 s12, s16\n"
                 "s_movreld_b32 s16, s10\ns_add_u32 s12, s12, s17\nv_mov_b32 v4, s12", "u32",
                 per_wave(lambda a, b, c: np.where(a & 1, u32(5), u32(2) + c)), None),
    "v_movrel": ("s_mov_b32 m0, 2\nv_mov_b32 v5, 7\nv_mov_b32 v6, 8\nv_mov_b32 v7, v1\n"
                 "v_movrels_b32 v8, v5\nv_movreld_b32 v3, v2\nv_add_nc_u32 v4, v8, v5", "u32",
                 lambda a, b, c: a + b, None),
    "cndmask_b16": ("v_cmp_gt_u32_e32 vcc_lo, v1, v2\nv_mov_b32 v4, v3\n"
                    "v_cndmask_b16 v4.h, v1.l, v2.h, vcc_lo", "u32",
                    lambda a, b, c: (c & u32(0xFFFF)) | (np.where(a > b, b >> u32(16),
                                                                  a & u32(0xFFFF)) << u32(16)),
                    None),
    "sub_add_nc_i32_clamp": ("v_sub_nc_i32 v5, v1, v2 clamp\nv_add_nc_i32 v6, v1, v3 clamp\n"
                             "v_sub_nc_i32 v7, v1, v2\nv_xor_b32 v4, v5, v6\n"
                             "v_xor_b32 v4, v4, v7", "u32",
                             lambda a, b, c: (np.clip(S(a).astype(np.int64) - S(b), -2**31,
                                                      2**31 - 1).astype(u32)
                                              ^ np.clip(S(a).astype(np.int64) + S(c), -2**31,
                                                        2**31 - 1).astype(u32) ^ (a - b)),
                             None),
    "fma_mix_inline_f16": ("v_fma_mix_f32 v4, v1, 1.0, v3 op_sel_hi:[1,1,0]", "f16x2_f32",
                           lambda a, b, c: B(f16lo(a).astype(np.float64) + F(c)), 1e-6),
    "buffer_offset_wraps": ("s_mov_b32 s16, s6\ns_and_b32 s17, s7, 0xffff\n"
                            "s_mov_b32 s18, 4096\ns_mov_b32 s19, 0x31016fac\n"
                            "v_subrev_nc_u32 v5, 16, v10\n"
                            "buffer_load_b32 v4, v5, s[16:19], 0 offen offset:16\n"
                            "s_waitcnt vmcnt(0)", "u32", lambda a, b, c: a, None),
    "sendmsg_rtn_clock": ("s_sendmsg_rtn_b64 s[12:13], sendmsg(MSG_RTN_GET_REALTIME)\n"
                          "s_waitcnt lgkmcnt(0)\ns_nop 7\n"
                          "s_sendmsg_rtn_b64 s[14:15], sendmsg(MSG_RTN_GET_REALTIME)\n"
                          "s_waitcnt lgkmcnt(0)\ns_sub_u32 s16, s14, s12\n"
                          "s_subb_u32 s17, s15, s13\ns_cselect_b32 s18, 0, 2\n"
                          "s_cmp_lg_u64 s[12:13], 0\ns_cselect_b32 s19, 1, 0\n"
                          "s_add_u32 s18, s18, s19\nv_mov_b32 v4, s18", "u32",
                          lambda a, b, c: np.full(N, 3, u32), None),  # nonzero, monotonic
    "bfrev_inline": ("v_bfrev_b32 v5, 1.0\nv_bfrev_b32_e64 v6, -4\nv_xor_b32 v4, v5, v6\n"
                     "v_xor_b32 v4, v4, v1", "u32",
                     lambda a, b, c: a ^ u32(0x1FC) ^ brev32([0xFFFFFFFC])[0], None),
})

def _fields(x, bits, signed):
    x = np.asarray(x, u32).astype(np.int64)
    out = [(x >> (bits * k)) & ((1 << bits) - 1) for k in range(32 // bits)]
    if signed:
        out = [np.where(v >= 1 << (bits - 1), v - (1 << bits), v) for v in out]
    return out


def _dot(a, b, c, bits, sa, sb, signed_acc, clamp):
    acc = (S(c) if signed_acc else c).astype(np.int64)
    acc = acc + sum(x * y for x, y in zip(_fields(a, bits, sa), _fields(b, bits, sb),
                                          strict=True))
    if clamp:
        acc = np.clip(acc, -2**31, 2**31 - 1) if signed_acc else np.clip(acc, 0, 2**32 - 1)
    return acc.astype(u32)


def _i16(x, hi=False):
    return ((np.asarray(x, u32) >> u32(16 if hi else 0)) & u32(0xFFFF)).astype(np.uint16).view(
        np.int16).astype(np.int64)


def _pk16(lo, hi):
    return (np.asarray(lo).astype(np.int64).astype(u32) & u32(0xFFFF)) | (
        (np.asarray(hi).astype(np.int64).astype(u32) & u32(0xFFFF)) << u32(16))


def _f16bits(x):
    return np.asarray(x, np.float64).astype(f32).astype(np.float16).view(np.uint16).astype(u32)


# Issue #12: dot products, packing conversions and packed 16-bit ops compilers emit.
CASES.update({
    "dot4_iu8": ("v_dot4_i32_iu8 v4, v1, v2, v3 neg_lo:[1,1,0]", "u32",
                 lambda a, b, c: _dot(a, b, c, 8, True, True, True, False), None),
    "dot4_iu8_mixed_clamp": ("v_dot4_i32_iu8 v4, v1, v2, v3 neg_lo:[0,1,0] clamp", "u32",
                             lambda a, b, c: _dot(a, b, c, 8, False, True, True, True), None),
    "dot4_u8_clamp": ("v_dot4_u32_u8 v4, v1, v2, v3 clamp", "u32",
                      lambda a, b, c: _dot(a, b, c, 8, False, False, False, True), None),
    "dot8_iu4": ("v_dot8_i32_iu4 v4, v1, v2, v3 neg_lo:[1,0,0]", "u32",
                 lambda a, b, c: _dot(a, b, c, 4, True, False, True, False), None),
    "dot8_u4": ("v_dot8_u32_u4 v4, v1, v2, v3", "u32",
                lambda a, b, c: _dot(a, b, c, 4, False, False, False, False), None),
    "dot2_f16_f16": ("v_mov_b32 v4, v3\nv_dot2_f16_f16 v4, v1, v2, v3", "f16x2",
                     lambda a, b, c: (c & u32(0xFFFF0000)) | _f16bits(
                         f16lo(a).astype(np.float64) * f16lo(b) + f16hi(a).astype(np.float64)
                         * f16hi(b) + f16lo(c)), None),
    "cvt_pk_saturate": ("v_cvt_pk_i16_i32 v5, v1, v2\nv_cvt_pk_u16_u32 v6, v1, v3\n"
                        "v_xor_b32 v4, v5, v6", "u32",
                        lambda a, b, c: _pk16(np.clip(S(a), -32768, 32767),
                                              np.clip(S(b), -32768, 32767))
                        ^ _pk16(np.minimum(a, 65535), np.minimum(c, 65535)), None),
    "cvt_pk_u8_f32": ("v_cvt_pk_u8_f32 v4, v1, v2, v3", "f32",
                      lambda a, b, c: (c & ~(u32(0xFF) << ((b & 3) * 8))) | (
                          np.rint(np.clip(np.nan_to_num(F(a)), 0, 255)).astype(u32)
                          << ((b & 3) * 8)), None),
    "cvt_pk_norm_f32": ("v_cvt_pk_norm_i16_f32 v5, v1, v2\nv_cvt_pk_norm_u16_f32 v6, v2, v1\n"
                        "v_xor_b32 v4, v5, v6", "small_f32",
                        lambda a, b, c: _pk16(np.rint(np.clip(F(a), -1, 1) * 32767),
                                              np.rint(np.clip(F(b), -1, 1) * 32767))
                        ^ _pk16(np.rint(np.clip(F(b), 0, 1) * 65535),
                                np.rint(np.clip(F(a), 0, 1) * 65535)), None),
    "sat_pk_u8_i16": ("v_mov_b32 v4, v3\nv_sat_pk_u8_i16 v4.l, v1", "u32",
                      lambda a, b, c: (c & u32(0xFFFF0000)) | np.clip(_i16(a), 0, 255).astype(
                          u32) | (np.clip(_i16(a, True), 0, 255).astype(u32) << u32(8)), None),
    "pk_mad_i16": ("v_pk_mad_i16 v4, v1, v2, v3", "u32",
                   lambda a, b, c: _pk16(_i16(a) * _i16(b) + _i16(c),
                                         _i16(a, True) * _i16(b, True) + _i16(c, True)), None),
    "pk_ashrrev_i16": ("v_pk_ashrrev_i16 v4, v1, v2", "u32",
                       lambda a, b, c: _pk16(_i16(b) >> (_i16(a) & 15),
                                             _i16(b, True) >> (_i16(a, True) & 15)), None),
    "global_atomic_csub": ("global_store_b32 v10, v3, s[6:7] offset:3072\ns_waitcnt vmcnt(0)\n"
                           "global_atomic_csub_u32 v5, v10, v1, s[6:7] offset:3072 glc\n"
                           "s_waitcnt vmcnt(0)\nglobal_load_b32 v6, v10, s[6:7] offset:3072\n"
                           "s_waitcnt vmcnt(0)\nv_add_nc_u32 v4, v5, v6", "u32",
                           lambda a, b, c: c + (c - np.minimum(a, c)), None),
    # compare as floats: c + 0.0 turns -0.0 into +0.0, which still matches the stored -0.0
    "global_atomic_cmpswap_f32": ("v_xor_b32 v3, 0x80000000, v3\n"
                                  "global_store_b32 v10, v3, s[6:7] offset:3072\n"
                                  "s_waitcnt vmcnt(0)\nv_mov_b32 v6, v1\n"
                                  "v_add_f32 v7, 0, v3\nv_cmp_gt_f32 vcc_lo, v1, v2\n"
                                  "v_cndmask_b32 v7, v7, v2, vcc_lo\n"
                                  "global_atomic_cmpswap_f32 v5, v10, v[6:7], s[6:7] "
                                  "offset:3072 glc\ns_waitcnt vmcnt(0)\n"
                                  "global_load_b32 v4, v10, s[6:7] offset:3072\n"
                                  "s_waitcnt vmcnt(0)", "f32",
                                  lambda a, b, c: np.where(F(a) > F(b), c ^ u32(0x80000000),
                                                           a), None),
    "mov_b16_e64_true16": ("v_mov_b32 v4, v3\nv_mov_b16_e64 v4.h, v1.l", "u32",
                           lambda a, b, c: (c & u32(0xFFFF)) | (a << u32(16)), None),
    "ds_append": ("v_mov_b32 v5, 0\nv_mov_b32 v6, 100\nds_store_b32 v5, v6 offset:16\n"
                  "s_waitcnt lgkmcnt(0)\ns_mov_b32 m0, 0\nv_mov_b32 v4, 5\n"
                  "s_mov_b32 s16, exec_lo\nv_and_b32 v7, 1, v1\nv_cmpx_ne_u32_e32 0, v7\n"
                  "ds_append v4 offset:16\ns_waitcnt lgkmcnt(0)\ns_mov_b32 exec_lo, s16\n"
                  "ds_load_b32 v8, v5 offset:16\ns_waitcnt lgkmcnt(0)\n"
                  "v_add_nc_u32 v4, v4, v8", "u32",
                  lambda a, b, c: np.where(a & 1, u32(100), u32(5)) + u32(100) + np.repeat(
                      (a & 1).reshape(-1, 32).sum(axis=1), 32).astype(u32), None),
    "ds_mskor": ("v_lshlrev_b32 v9, 2, v0\nds_store_b32 v9, v3\ns_waitcnt lgkmcnt(0)\n"
                 "ds_mskor_rtn_b32 v4, v9, v1, v2\ns_waitcnt lgkmcnt(0)\n"
                 "ds_load_b32 v8, v9\ns_waitcnt lgkmcnt(0)\nv_xor_b32 v4, v4, v8", "u32",
                 lambda a, b, c: c ^ ((c & ~a) | b), None),
    # compares as floats: the stored -0.0 matches the compare value +0.0
    "ds_cmpstore_f32": ("v_xor_b32 v3, 0x80000000, v3\nv_lshlrev_b32 v9, 2, v0\n"
                        "ds_store_b32 v9, v3\ns_waitcnt lgkmcnt(0)\nv_add_f32 v7, 0, v3\n"
                        "v_cmp_gt_f32 vcc_lo, v1, v2\nv_cndmask_b32 v7, v7, v2, vcc_lo\n"
                        "ds_cmpstore_rtn_f32 v5, v9, v1, v7\ns_waitcnt lgkmcnt(0)\n"
                        "ds_load_b32 v4, v9\ns_waitcnt lgkmcnt(0)", "f32",
                        lambda a, b, c: np.where(F(a) > F(b), c ^ u32(0x80000000), a), None),
    # VOP2 true16: v1.h is VGPR field 129 (IREE's f16 reductions: v_fmac_f16_e32 v5.h,
    # v1.h, v1.h); the accumulator is D's own half, the low half of v4 is kept
    "fmac_f16_true16": ("v_mov_b32 v4, v3\nv_fmac_f16_e32 v4.h, v1.h, v2.h\n"
                        "v_fmamk_f16 v4.l, v1.l, 0x3c00, v2.h", "f16x2",
                        lambda a, b, c: h16(fma16(f16lo(a), np.float16(1.0), f16hi(b)))
                        | (h16(fma16(f16hi(a), f16hi(b), f16hi(c))) << u32(16)), None),
    "pk_fmac_f16": ("v_mov_b32 v4, v3\nv_pk_fmac_f16 v4, v1, v2", "f16x2",
                    lambda a, b, c: h16(fma16(f16lo(a), f16lo(b), f16lo(c)))
                    | (h16(fma16(f16hi(a), f16hi(b), f16hi(c))) << u32(16)), None),
})

def case_inputs(kind: str, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    def one():
        if kind == "u32":
            return rng.integers(0, 2**32, N, dtype=np.uint64).astype(u32)
        if kind == "small":
            return rng.integers(0, 20, N).astype(u32)
        if kind in ("f32", "small_f32"):
            scale = 10 if kind == "f32" else 2
            x = (rng.standard_normal(N) * scale).astype(f32)
            x[::17] = 0.0 if kind == "f32" else 0.5
            return B(x)
        if kind.startswith("f16x2"):
            return (h16(rng.standard_normal(N)) | (h16(rng.standard_normal(N)) << u32(16)))
        raise KeyError(kind)

    a, b, c = one(), one(), one()
    if kind == "f16x2_f32":
        c = B((rng.standard_normal(N)).astype(f32))
    if kind == "f32":  # some exact ties and integers for the rounding cases
        c[::5] = B(np.arange(0, N, 5) * 0.5 - 30).astype(u32)
    return a, b, c


def _add_carry(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y + (the carry out of x + y), modulo 2**32."""
    s = x.astype(np.uint64) + y.astype(np.uint64)
    return ((s + (s >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(u32)


def kernel_source(names: list[str]) -> str:
    parts = ['.amdgcn_target "amdgcn-amd-amdhsa--gfx1100"', ".text"]
    meta = []
    for name in names:
        body = CASES[name][0].replace(".L", f".L{name}_")
        parts.append(f"""
.globl k_{name}
.p2align 8
.type k_{name},@function
k_{name}:
  s_load_b128 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v10, 2, v0
  s_lshl_b32 s3, s2, 7
  v_add_nc_u32 v10, s3, v10
  s_waitcnt lgkmcnt(0)
  global_load_b32 v1, v10, s[6:7]
  global_load_b32 v2, v10, s[6:7] offset:1024
  global_load_b32 v3, v10, s[6:7] offset:2048
  s_waitcnt vmcnt(0)
{body}
  global_store_b32 v10, v4, s[4:5]
  s_endpgm
""")
        meta.append(f"""  - .name: k_{name}
    .symbol: k_{name}.kd
    .kernarg_segment_size: 16
    .group_segment_fixed_size: 256
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 24
    .vgpr_count: 16
    .max_flat_workgroup_size: 32
    .args:
      - {{.offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global}}""")
    parts.append(".rodata")
    for name in names:
        parts.append(f"""
.p2align 6
.amdhsa_kernel k_{name}
  .amdhsa_next_free_vgpr 16
  .amdhsa_next_free_sgpr 24
  .amdhsa_user_sgpr_count 2
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_group_segment_fixed_size 256
  .amdhsa_kernarg_size 16
  .amdhsa_wavefront_size32 1
.end_amdhsa_kernel""")
    parts.append(".amdgpu_metadata\n---\namdhsa.version: [1, 2]\namdhsa.kernels:")
    parts.extend(meta)
    parts.append("...\n.end_amdgpu_metadata\n")
    return "\n".join(parts)


# --- WMMA ---------------------------------------------------------------------------------------
WMMA_FORMS = {
    "f32_f16": "v_wmma_f32_16x16x16_f16 v[48:55], v[16:23], v[24:31], v[32:39]",
    "f32_bf16": "v_wmma_f32_16x16x16_bf16 v[48:55], v[16:23], v[24:31], v[32:39]",
    "f16_f16": "v_wmma_f16_16x16x16_f16 v[48:55], v[16:23], v[24:31], v[40:47]",
    "f16_f16_hi": "v_wmma_f16_16x16x16_f16 v[48:55], v[16:23], v[24:31], v[40:47] "
                  "op_sel:[0,0,1]",
    "bf16_bf16": "v_wmma_bf16_16x16x16_bf16 v[48:55], v[16:23], v[24:31], v[40:47]",
}


def wmma_source() -> str:
    loads = []
    for base, first in ((0, 16), (1024, 24), (2048, 32), (3072, 40)):
        for k in range(8):
            loads.append(f"  global_load_b32 v{first + k}, v10, s[6:7] offset:{base + 128 * k}")
    stores = [f"  global_store_b32 v10, v{48 + k}, s[4:5] offset:{128 * k}" for k in range(8)]
    parts = ['.amdgcn_target "amdgcn-amd-amdhsa--gfx1100"', ".text"]
    meta = []
    for name, inst in WMMA_FORMS.items():
        body = "\n".join(loads + ["  s_waitcnt vmcnt(0)", f"  {inst}"] + stores)
        parts.append(f".globl w_{name}\n.p2align 8\n.type w_{name},@function\nw_{name}:\n"
                     f"  s_load_b128 s[4:7], s[0:1], 0x0\n  v_lshlrev_b32 v10, 2, v0\n"
                     f"  s_waitcnt lgkmcnt(0)\n{body}\n  s_endpgm\n")
        meta.append(f"""  - .name: w_{name}
    .symbol: w_{name}.kd
    .kernarg_segment_size: 16
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 64
    .max_flat_workgroup_size: 32
    .args:
      - {{.offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global}}""")
    parts.append(".rodata")
    for name in WMMA_FORMS:
        parts.append(f".p2align 6\n.amdhsa_kernel w_{name}\n  .amdhsa_next_free_vgpr 64\n"
                     "  .amdhsa_next_free_sgpr 16\n  .amdhsa_user_sgpr_count 2\n"
                     "  .amdhsa_user_sgpr_kernarg_segment_ptr 1\n  .amdhsa_kernarg_size 16\n"
                     "  .amdhsa_wavefront_size32 1\n.end_amdhsa_kernel")
    parts.append(".amdgpu_metadata\n---\namdhsa.version: [1, 2]\namdhsa.kernels:")
    parts.extend(meta)
    parts.append("...\n.end_amdgpu_metadata\n")
    return "\n".join(parts)


def bf16_bits(x: np.ndarray) -> np.ndarray:  # exact for the small integers used here
    return (np.asarray(x, f32).view(u32) >> u32(16)).astype(u32)


def pack_operand(m: np.ndarray, bits) -> np.ndarray:
    """16x16 matrix -> (8 VGPRs, 32 lanes): lane l holds row (A) / column (B) l % 16."""
    h = bits(m)  # (16, 16) 16-bit patterns, [lane-row][k]
    regs = h[:, 0::2] | (h[:, 1::2] << u32(16))  # (16, 8)
    return np.concatenate([regs, regs], axis=0).T.astype(u32)  # (8, 32)
