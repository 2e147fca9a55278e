"""gfx9's renames onto the core's canonical mnemonics, and what only gfx9 has.

Most gfx9 instructions are core instructions under older names (v_addc_co_u32 is RDNA's
v_add_co_ci_u32, global_load_dword is global_load_b32, s_andn2_b64 is s_and_not1_b64):
`canonical()` renames them and the core compiles them. Here live the instructions the core
does not know: MFMA and the AccVGPR moves, packed fp32 (v_pk_fma/mul/add/mov), v_mov_b64,
v_lshl_add_u64, the unfused mac/mad forms, SDWA operand selects, and s_memtime.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable

import numpy as np

from hsa.virtual.gfx9 import gfx950
from hsa.virtual.gfx9.mfma import compile_mfma
from hsa.virtual.gfx9.smfmac import compile_smfmac
from hsa.virtual.isa import executor as core
from hsa.virtual.isa import image
from hsa.virtual.isa import operands as d
from hsa.virtual.isa.state import AGPR_ROW, WaveGroup
from hsa.virtual.isa.valu import AluForm, _fma, base_name, read_src, to_type, write_result

u32, u64, f32, f64 = np.uint32, np.uint64, np.float32, np.float64

# --- renames ---------------------------------------------------------------------------------
_EXACT = {
    "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32",
    "v_addc_co_u32": "v_add_co_ci_u32", "v_subb_co_u32": "v_sub_co_ci_u32",
    "v_subbrev_co_u32": "v_subrev_co_ci_u32", "v_add_i32": "v_add_nc_i32",
    "v_sub_i32": "v_sub_nc_i32", "v_add_i16": "v_add_nc_i16", "v_sub_i16": "v_sub_nc_i16",
    "v_ffbh_u32": "v_clz_i32_u32", "v_ffbl_b32": "v_ctz_i32_b32", "v_ffbh_i32": "v_cls_i32",
    "v_cvt_pkrtz_f16_f32": "v_cvt_pk_rtz_f16_f32", "v_dot2c_f32_f16": "v_dot2acc_f32_f16",
    "v_fma_legacy_f32": "v_fma_dx9_zero_f32",
    "v_cvt_pknorm_i16_f32": "v_cvt_pk_norm_i16_f32",
    "v_cvt_pknorm_u16_f32": "v_cvt_pk_norm_u16_f32",
    "v_cvt_pknorm_i16_f16": "v_cvt_pk_norm_i16_f16",
    "v_cvt_pknorm_u16_f16": "v_cvt_pk_norm_u16_f16",
    # gfx9's VI-compatible 16-bit integer MADs: no op_sel, the high half zeroed (zero_hi16)
    "v_mad_legacy_u16": "v_mad_u16", "v_mad_legacy_i16": "v_mad_i16",
    "s_ff1_i32_b32": "s_ctz_i32_b32", "s_ff1_i32_b64": "s_ctz_i32_b64",
    "s_flbit_i32_b32": "s_clz_i32_u32", "s_flbit_i32_b64": "s_clz_i32_u64",
    "s_flbit_i32": "s_cls_i32", "s_flbit_i32_i64": "s_cls_i32_i64",
    "s_andn1_saveexec_b64": "s_and_not0_saveexec_b64",
    "s_orn1_saveexec_b64": "s_or_not0_saveexec_b64",
    "s_andn1_wrexec_b64": "s_and_not0_wrexec_b64", "s_andn2_wrexec_b64": "s_and_not1_wrexec_b64",
    "ds_wrxchg_rtn_b32": "ds_storexchg_rtn_b32", "ds_wrxchg_rtn_b64": "ds_storexchg_rtn_b64",
    "ds_cmpst_b32": "ds_cmpstore_b32", "ds_cmpst_rtn_b32": "ds_cmpstore_rtn_b32",
    "ds_cmpst_b64": "ds_cmpstore_b64", "ds_cmpst_rtn_b64": "ds_cmpstore_rtn_b64",
}
_MEM_SUFFIX = {  # gfx9 type suffixes of loads/stores -> RDNA's
    "dword": "b32", "dwordx2": "b64", "dwordx3": "b96", "dwordx4": "b128", "ubyte": "u8",
    "sbyte": "i8", "ushort": "u16", "sshort": "i16", "byte": "b8", "short": "b16",
    "byte_d16_hi": "d16_hi_b8", "short_d16_hi": "d16_hi_b16", "ubyte_d16": "d16_u8",
    "ubyte_d16_hi": "d16_hi_u8", "sbyte_d16": "d16_i8", "sbyte_d16_hi": "d16_hi_i8",
    "short_d16": "d16_b16",
}
_ATOMIC = {"swap": "swap_b32", "cmpswap": "cmpswap_b32", "add": "add_u32", "sub": "sub_u32",
           "smin": "min_i32", "umin": "min_u32", "smax": "max_i32", "umax": "max_u32",
           "and": "and_b32", "or": "or_b32", "xor": "xor_b32", "inc": "inc_u32",
           "dec": "dec_u32"}
_ATOMIC.update({k + "_x2": v[:-2] + "64" for k, v in _ATOMIC.items()})
_SMEM_SUFFIX = {"dword": "b32", "dwordx2": "b64", "dwordx4": "b128", "dwordx8": "b256",
                "dwordx16": "b512"}
_DS_SUFFIX = {"b32": "b32", "b64": "b64", "b96": "b96", "b128": "b128", "u8": "u8",
              "i8": "i8", "u16": "u16", "i16": "i16", "u8_d16": "u8_d16",
              "u8_d16_hi": "u8_d16_hi", "i8_d16": "i8_d16", "i8_d16_hi": "i8_d16_hi",
              "u16_d16": "u16_d16", "u16_d16_hi": "u16_d16_hi", "b8": "b8", "b16": "b16",
              "b8_d16_hi": "b8_d16_hi", "b16_d16_hi": "b16_d16_hi"}


def canonical(name: str) -> str:
    """The core's (RDNA) mnemonic for a gfx9 one without encoding suffixes."""
    if name in _EXACT:
        return _EXACT[name]
    m = re.match(r"^(s_\w+?)n2(_\w+)$", name)  # s_andn2_b64 -> s_and_not1_b64
    if m and m.group(1) in ("s_and", "s_or"):
        return f"{m.group(1)}_not1{m.group(2)}"
    m = re.match(r"^(global|scratch)_load_lds_(\w+)$", name)  # straight to LDS
    if m and m.group(2) in _MEM_SUFFIX:
        return f"{m.group(1)}_load_lds_{_MEM_SUFFIX[m.group(2)]}"
    m = re.match(r"^(global|flat|scratch|buffer)_(load|store)_(\w+)$", name)
    if m and m.group(3) in _MEM_SUFFIX:
        return f"{m.group(1)}_{m.group(2)}_{_MEM_SUFFIX[m.group(3)]}"
    m = re.match(r"^(global|flat|buffer)_atomic_(\w+)$", name)
    if m and m.group(2) in _ATOMIC:
        return f"{m.group(1)}_atomic_{_ATOMIC[m.group(2)]}"
    m = re.match(r"^(s_load|s_buffer_load)_(\w+)$", name)
    if m and m.group(2) in _SMEM_SUFFIX:
        return f"{m.group(1)}_{_SMEM_SUFFIX[m.group(2)]}"
    m = re.match(r"^ds_(read|write)(2st64|2)?_(\w+)$", name)
    if m and m.group(3) in _DS_SUFFIX:
        op = "load" if m.group(1) == "read" else "store"
        two = {"2": "_2addr", "2st64": "_2addr_stride64"}.get(m.group(2) or "", "")
        return f"ds_{op}{two}_{_DS_SUFFIX[m.group(3)]}"
    return name


# --- gfx9-only semantics -----------------------------------------------------------------------
def _mac(t: str, mode: str) -> Callable[[WaveGroup, AluForm], None]:
    """Unfused multiply-add: mac (D += S0*S1), mad (S0*S1+S2), madmk (S0*K+S1), madak
    (S0*S1+K), legacy (0 * anything = 0)."""
    ft = np.float16 if t == "f16" else f32

    def run(g: WaveGroup, form: AluForm) -> None:
        a = read_src(g, form, 0, t)
        if mode == "madmk":
            b, c = to_type(g.vread(d.LITERAL, form.literal), t), read_src(g, form, 1, t)
        else:
            b = read_src(g, form, 1, t)
            c = (to_type(g.v[form.vdst], t) if mode == "mac" else
                 to_type(g.vread(d.LITERAL, form.literal), t) if mode == "madak" else
                 read_src(g, form, 2, t))
        prod = (np.asarray(a, ft) * np.asarray(b, ft)).astype(ft)
        if mode == "legacy":
            prod = np.where((np.asarray(a) == 0) | (np.asarray(b) == 0), ft(0), prod)
        write_result(g, form, (prod + np.asarray(c, ft)).astype(ft), t)

    return run


def _split64(x) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, u64)
    return (x & u64(0xFFFFFFFF)).astype(u32), (x >> u64(32)).astype(u32)


def _pk_halves(g: WaveGroup, inst: d.Instruction, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) uint32 words of a 64-bit packed-f32 source (a constant fills both)."""
    code = inst.f[f"src{k}"]
    if code >= d.VGPR0 or code < 128:
        return _split64(g.vread(code, inst.literal, "64"))
    c = np.asarray(g.vread(code, inst.literal, "32"), u32)
    return c, c


def _pk_f32(op: str) -> Callable[[d.Instruction], Callable[[WaveGroup], None]]:
    """v_pk_{fma,mul,add}_f32 and v_pk_mov_b32 (fn None)."""
    fns: dict[str, tuple[int, Callable[..., np.ndarray] | None]] = {
        "v_pk_fma_f32": (3, _fma), "v_pk_mul_f32": (2, lambda a, b: a * b),
        "v_pk_add_f32": (2, lambda a, b: a + b), "v_pk_mov_b32": (2, None)}
    nsrc, fn = fns[op]

    def compile_(inst: d.Instruction) -> Callable[[WaveGroup], None]:
        f = inst.f

        def run(g: WaveGroup) -> None:
            srcs = [_pk_halves(g, inst, k) for k in range(nsrc)]
            out = []
            for hi in (0, 1):
                sel = f["opsel_hi"] if hi else f["opsel"]
                neg = f["neg_hi"] if hi else f["neg"]
                if fn is None:
                    # v_pk_mov_b32: lo from src0, hi from src1, each half picked by op_sel
                    # (op_sel[0] for src0, op_sel[1] for src1); op_sel_hi plays no part.
                    # LLVM's SIMergeVGPRCopies swaps a pair as op_sel:[1,0] with the
                    # default op_sel_hi:[1,1]: D.lo = S0.hi, D.hi = S1.lo.
                    out.append(srcs[hi][(f["opsel"] >> hi) & 1])
                    continue
                args = []
                for k in range(nsrc):
                    v = np.asarray(srcs[k][(sel >> k) & 1], u32).view(f32)
                    args.append(-v if (neg >> k) & 1 else v)
                out.append(np.asarray(fn(*args), f32).view(u32))
            lo_word, hi_word = (np.broadcast_to(x, (g.count, g.lanes)) for x in out)
            g.vwrite(f["vdst"], lo_word)
            g.vwrite(f["vdst"] + 1, hi_word)

        return run

    return compile_


def _alu(fn: Callable[[WaveGroup, AluForm], None]) -> Callable:
    return lambda inst: (lambda form: (lambda g: fn(g, form)))(AluForm(inst))


def _mov_b64(g: WaveGroup, form: AluForm) -> None:
    g.vwrite64(form.vdst, np.asarray(g.vread(form.srcs[0], form.literal, "64"), u64))


def _lshl_add_u64(g: WaveGroup, form: AluForm) -> None:
    a = np.asarray(g.vread(form.srcs[0], form.literal, "64"), u64)
    s = np.asarray(g.vread(form.srcs[1], form.literal, "32"), u64) & u64(7)
    c = np.asarray(g.vread(form.srcs[2], form.literal, "64"), u64)
    g.vwrite64(form.vdst, (a << s) + c)


def _fmac_f64(g: WaveGroup, form: AluForm) -> None:
    a, b = read_src(g, form, 0, "f64"), read_src(g, form, 1, "f64")
    c = to_type(g.vread(d.VGPR0 + form.vdst, None, "64"), "f64")
    write_result(g, form, np.asarray(a, f64) * b + c, "f64")


def _dot_int(bits: int, signed: bool, acc_in_dst: bool) -> Callable:
    """gfx9's integer dot products: v_dot4c_i32_i8 / v_dot2c_i32_i16 / v_dot8c_i32_i4
    (VOP2 and e64: D += the signed products of the 8/16/4-bit fields of S0 and S1) and the
    VOP3P v_dot{2,4,8}_{i32,u32}_* (D = S2 + the products, both sources signed or both
    unsigned: gfx9 has no iu8 neg selects). clamp saturates, otherwise the sum wraps."""
    mask, half = (1 << bits) - 1, 1 << (bits - 1)

    def compile_(inst: d.Instruction) -> Callable[[WaveGroup], None]:
        f = inst.f
        src0, src1 = f["src0"], f["src1"] if "src1" in f else f["vsrc1"]
        vdst, clamp = f["vdst"], f.get("clamp", 0)
        # the accumulator: D itself (v_dot*c), else S2
        src2 = d.VGPR0 + vdst if acc_in_dst else f["src2"]

        def run(g: WaveGroup) -> None:
            a, b = (np.asarray(g.vread(s, inst.literal, "32"), u32).astype(np.int64)
                    for s in (src0, src1))
            c = g.vread(src2, inst.literal, "32")
            acc = np.asarray(c, u32).view(np.int32).astype(np.int64) if signed else \
                np.asarray(c, u32).astype(np.int64)
            for k in range(32 // bits):
                x = (a >> (bits * k)) & mask
                y = (b >> (bits * k)) & mask
                if signed:
                    x = np.where(x >= half, x - (1 << bits), x)
                    y = np.where(y >= half, y - (1 << bits), y)
                acc = acc + x * y
            if clamp:
                acc = (np.clip(acc, -(2 ** 31), 2 ** 31 - 1) if signed
                       else np.clip(acc, 0, 2 ** 32 - 1))
            g.vwrite(vdst, np.broadcast_to(acc.astype(u32), (g.count, g.lanes)))

        return run

    return compile_


def _accvgpr(which: str) -> Callable:
    def compile_(inst: d.Instruction) -> Callable[[WaveGroup], None]:
        f = inst.f
        src, dst = f["src0"], f["vdst"]

        def run(g: WaveGroup) -> None:
            if which == "read":  # VGPR <- AGPR
                g.vwrite(dst, g.v[AGPR_ROW + src - d.VGPR0])
            elif which == "write":  # AGPR <- VGPR or constant
                g.vwrite(AGPR_ROW + dst, np.broadcast_to(
                    np.asarray(g.vread(src, inst.literal), u32), (g.count, g.lanes)))
            else:  # AGPR <- AGPR
                g.vwrite(AGPR_ROW + dst, g.v[AGPR_ROW + src - d.VGPR0])

        return run

    return compile_


# --- SDWA --------------------------------------------------------------------------------------
def _select(value: np.ndarray, sel: int, sext: bool) -> np.ndarray:
    value = np.asarray(value, u32)
    if sel == 6:
        return value
    shift, bits = ((sel * 8, 8) if sel < 4 else ((sel - 4) * 16, 16))
    x = (value >> u32(shift)) & u32((1 << bits) - 1)
    if sext:
        x = ((x.astype(np.int64) ^ (1 << (bits - 1))) - (1 << (bits - 1))).astype(u32)
    return x


def compile_sdwa(inst: d.Instruction, inner_compile: Callable) -> Callable | None:
    """Run the instruction on selected bytes/words of its sources: they go into spare rows
    at the end of v[], the plain instruction runs on those, and its result is merged into
    vdst by dst_sel/dst_unused."""
    ext = inst.f["sdwa"]
    f = dict(inst.f)
    del f["sdwa"]
    s0_scalar, s1_scalar = (ext >> 23) & 1, (ext >> 31) & 1
    src0 = (ext & 0xFF) if s0_scalar else d.VGPR0 + (ext & 0xFF)
    if s0_scalar:
        from hsa.virtual.gfx9.decoder import scalar
        src0 = scalar(src0)
    vsrc1 = f.get("vsrc1")
    if vsrc1 is not None and s1_scalar:
        from hsa.virtual.gfx9.decoder import scalar
        vsrc1 = scalar(vsrc1 - d.VGPR0)
    sel0, sext0 = (ext >> 16) & 7, bool((ext >> 19) & 1)
    sel1, sext1 = (ext >> 24) & 7, bool((ext >> 27) & 1)
    neg = ((ext >> 20) & 1) | ((ext >> 28) & 1) << 1
    absb = ((ext >> 21) & 1) | ((ext >> 29) & 1) << 1
    enc = inst.encoding
    vopc = enc == "VOPC"
    dst_sel, dst_unused = (ext >> 8) & 7, (ext >> 11) & 3
    holder: dict[str, Callable] = {}

    def run(g: WaveGroup) -> None:
        t0 = g.v.shape[0] - 3
        if "fn" not in holder:
            g_f = dict(f, src0=d.VGPR0 + t0, abs=absb, neg=neg)
            if vsrc1 is not None:
                g_f["vsrc1"] = d.VGPR0 + t0 + 1
            if vopc:  # VOPC: the result goes to VCC or the extension's sdst
                from hsa.virtual.gfx9.decoder import scalar
                sdst = scalar((ext >> 8) & 0x7F) if (ext >> 15) & 1 else d.VCC_LO
                g_f.update(vdst=sdst, src1=g_f.pop("vsrc1"), src2=0, opsel=0, clamp=0,
                           omod=0)
                new = dataclasses.replace(inst, encoding="VOP3", f=g_f, name=inst.name)
            else:
                g_f.update(vdst=t0 + 2, clamp=(ext >> 13) & 1, omod=(ext >> 14) & 3)
                new = dataclasses.replace(inst, f=g_f)
            holder["fn"] = inner_compile(new)
            if holder["fn"] is None:
                raise NotImplementedError(f"{inst.name} with SDWA")
        v0 = np.broadcast_to(np.asarray(g.vread(src0, inst.literal), u32), (g.count, g.lanes))
        g.v[t0] = _select(v0, sel0, sext0)
        if vsrc1 is not None:
            v1 = np.broadcast_to(np.asarray(g.vread(vsrc1, inst.literal), u32),
                                 (g.count, g.lanes))
            g.v[t0 + 1] = _select(v1, sel1, sext1)
        if not vopc:
            g.v[t0 + 2] = g.v[f["vdst"]]
        holder["fn"](g)
        if vopc:
            return
        result = g.v[t0 + 2]
        if dst_sel == 6:
            g.vwrite(f["vdst"], result)
            return
        shift, bits = ((dst_sel * 8, 8) if dst_sel < 4 else ((dst_sel - 4) * 16, 16))
        field_mask = u32(((1 << bits) - 1) << shift)
        placed = (result << u32(shift)) & field_mask
        old = g.v[f["vdst"]]
        if dst_unused == 2:  # preserve
            out = (old & ~field_mask) | placed
        elif dst_unused == 1:  # sign-extend into the bits above
            top = (result >> u32(bits - 1)) & u32(1)
            above = u32(0xFFFFFFFF) << u32(shift + bits) if shift + bits < 32 else u32(0)
            out = placed | np.where(top.astype(bool), above, u32(0))
        else:
            out = placed
        g.vwrite(f["vdst"], out)

    return run


# --- the family's compile hook ---------------------------------------------------------------
def _smem_time(inst: d.Instruction):
    def run(g: WaveGroup, ctx) -> None:
        g.swrite(inst.f["sdata"], np.broadcast_to(u64(time.monotonic_ns() // 10), (g.count,)),
                 wide=True)
    return run


_GFX9_ALU: dict[str, Callable] = {
    "v_mac_f32": _alu(_mac("f32", "mac")), "v_mad_f32": _alu(_mac("f32", "mad")),
    "v_madmk_f32": _alu(_mac("f32", "madmk")), "v_madak_f32": _alu(_mac("f32", "madak")),
    "v_mac_f16": _alu(_mac("f16", "mac")), "v_mad_f16": _alu(_mac("f16", "mad")),
    "v_madmk_f16": _alu(_mac("f16", "madmk")), "v_madak_f16": _alu(_mac("f16", "madak")),
    "v_mad_legacy_f32": _alu(_mac("f32", "legacy")),
    "v_mov_b64": _alu(_mov_b64), "v_fmac_f64": _alu(_fmac_f64),
    "v_lshl_add_u64": _alu(_lshl_add_u64),
    "v_accvgpr_read_b32": _accvgpr("read"), "v_accvgpr_write_b32": _accvgpr("write"),
    "v_accvgpr_mov_b32": _accvgpr("mov"),
}
for _n, _bits in (("v_dot2c_i32_i16", 16), ("v_dot4c_i32_i8", 8), ("v_dot8c_i32_i4", 4)):
    _GFX9_ALU[_n] = _dot_int(_bits, True, True)
for _n, _bits in (("v_dot2_i32_i16", 16), ("v_dot4_i32_i8", 8), ("v_dot8_i32_i4", 4)):
    _GFX9_ALU[_n] = _dot_int(_bits, True, False)
    _GFX9_ALU[_n.replace("i32_i", "u32_u")] = _dot_int(_bits, False, False)
for _n in ("v_pk_fma_f32", "v_pk_mul_f32", "v_pk_add_f32", "v_pk_mov_b32"):
    _GFX9_ALU[_n] = _pk_f32(_n)


# --- VGPR indexing mode (s_set_gpr_idx_on ... s_set_gpr_idx_off) --------------------------
# The wave's mode lives in WaveGroup.vgpr_msb (zero on gfx9 otherwise): GPR_IDX_ON | the
# mode's operand bits (bit 0 src0, 1 src1, 2 src2, 3 dst relative). The instructions in
# between are compiled under it (Program.cache_for, Family.vgpr_msb = gpr_idx_variant): a
# v_mov_b32 becomes an indexed move, offset by M0[7:0] of each wave.
GPR_IDX_ON = 0x100
_SALU_OR_MEMORY = ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "DS", "FLAT", "GLOBAL",
                   "SCRATCH", "MUBUF", "MTBUF")


def _compile_gpr_idx(inst: d.Instruction, kind: str) -> Callable[[WaveGroup], int]:
    """s_set_gpr_idx_on S0, mode: M0[7:0] = S0[7:0], M0[15:12] = mode, indexing on;
    _idx: M0[7:0] = S0[7:0]; _mode: M0[15:12] = simm16[3:0]; _off: indexing off."""
    nxt = inst.pc + inst.size

    def index(g: WaveGroup) -> np.ndarray:
        value = np.asarray(g.sread(inst.f["ssrc0"], inst.literal), u32)
        return np.broadcast_to(value, (g.count,)) & u32(0xFF)

    def run(g: WaveGroup) -> int:
        m0 = g.s[:, d.M0]
        if kind == "on":
            mode = inst.f["ssrc1"] & 0xF  # the SOPC ssrc1 field holds the mode itself
            g.s[:, d.M0] = (m0 & ~u32(0xF0FF)) | index(g) | u32(mode << 12)
            g.vgpr_msb = GPR_IDX_ON | mode
        elif kind == "idx":
            g.s[:, d.M0] = (m0 & ~u32(0xFF)) | index(g)
        elif kind == "mode":
            mode = inst.f["simm16"] & 0xF
            g.s[:, d.M0] = (m0 & ~u32(0xF000)) | u32(mode << 12)
            if g.vgpr_msb:
                g.vgpr_msb = GPR_IDX_ON | mode
        else:
            g.vgpr_msb = 0
        return nxt

    return run


def gpr_idx_variant(inst: d.Instruction, mode: int) -> d.Instruction | None:
    """`inst` as it runs in VGPR indexing mode: scalar and memory instructions unchanged,
    v_mov_b32 as an indexed move; None (not implemented) for other VALU instructions."""
    if not mode & GPR_IDX_ON:
        return None
    if inst.encoding in _SALU_OR_MEMORY:
        return inst
    if base_name(inst.name) == "v_mov_b32" and "sdwa" not in inst.f and "dpp" not in inst.f:
        return dataclasses.replace(inst, name="v_gpr_idx_mov_b32",
                                   f=dict(inst.f, gpr_idx_mode=mode & 0xF))
    return None


def _gpr_idx_mov(g: WaveGroup, form: AluForm) -> None:
    """v_mov_b32 in indexing mode: the source VGPR (mode bit 0) and the destination (bit
    3) offset by M0[7:0]; indexes past the wave's VGPRs read 0 and write nothing."""
    mode = form.inst.f["gpr_idx_mode"]
    idx = (g.s[:, d.M0] & u32(0xFF)).astype(np.int64)
    nreg = g.v.shape[0]
    src = form.srcs[0]
    for off in np.unique(idx):
        waves = idx == off
        dst = form.vdst + (int(off) if mode & 8 else 0)
        if src >= d.VGPR0:
            reg = src - d.VGPR0 + (int(off) if mode & 1 else 0)
            value = g.v[reg] if 0 <= reg < nreg else np.zeros((g.count, g.lanes), u32)
        else:
            value = np.broadcast_to(read_src(g, form, 0, "u32"), (g.count, g.lanes))
        if 0 <= dst < nreg:
            np.copyto(g.v[dst], np.broadcast_to(value, (g.count, g.lanes)),
                      where=g.exec_mask() & waves[:, None], casting="unsafe")


_GFX9_ALU["v_gpr_idx_mov_b32"] = _alu(_gpr_idx_mov)
_GPR_IDX_OPS = {"s_set_gpr_idx_on": "on", "s_set_gpr_idx_off": "off",
                "s_set_gpr_idx_idx": "idx", "s_set_gpr_idx_mode": "mode"}


def make_compile(
    samples: Callable[[d.Instruction], str], target: str = "gfx942",
) -> Callable[[d.Instruction], core.Compiled]:
    """The Family.compile hook: gfx9-only semantics first, else the core under the
    canonical name. `samples(inst)` gives LLVM's sample text of the opcode (MFMA shapes)."""

    def compile_inst(inst: d.Instruction) -> core.Compiled:
        if inst.encoding == "MIMG" and len(inst.words) == 2:  # images through T# (isa.image)
            named = dataclasses.replace(inst, name=image.mimg_name_gfx9((inst.words[0] >> 18)
                                                                        & 0x7F))
            if target.startswith(("gfx94", "gfx95")):  # LLVM: no image-insts there
                return core.Compiled(named, core.SIMPLE, None, f"{target} has no image "
                                     "instructions (a code object for another target?)")
            fn, why = image.compile_gfx9(named, target)
            if fn is not None:
                return core.Compiled(named, core.MEMORY, fn)
            return core.Compiled(named, core.SIMPLE, None, f"{why}; the virtual GPU runs "
                                 "image_load/image_store and point samples on linear images")
        if inst.name in ("<unknown>", "<outside code>"):
            return core.compile_instruction(inst)
        if inst.name in _GPR_IDX_OPS:  # control ops: the mode selects the compiled code
            run = _compile_gpr_idx(inst, _GPR_IDX_OPS[inst.name])
            return core.Compiled(inst, core.CONTROL, run)
        base = base_name(inst.name)
        canon = canonical(base)
        renamed = dataclasses.replace(inst, name=canon)
        if canon.startswith("ds_cmpstore"):  # gfx9 ds_cmpst: data0 = compare, data1 = new
            renamed.f = dict(inst.f, data0=inst.f["data1"], data1=inst.f["data0"])
        if base in _FROM_FP8:
            fn = _compile_from_fp8(inst, base, target)
            return core.Compiled(inst, core.SIMPLE, fn, None if fn else "not implemented "
                                 "with these modifiers")
        if "sdwa" in inst.f:
            fn = compile_sdwa(renamed, lambda i: _compile_alu(i, samples, target))
            return core.Compiled(inst, core.SIMPLE, fn, None if fn else "not implemented")
        tr = gfx950.compile_memory(inst, base)
        if tr is not None:
            return core.Compiled(inst, core.MEMORY, tr)
        if canon in ("s_memtime", "s_memrealtime"):
            return core.Compiled(inst, core.MEMORY, _smem_time(inst))
        fn = _compile_alu(renamed, samples, target)
        if fn is not None:
            return core.Compiled(inst, core.SIMPLE, fn)
        c = core.compile_instruction(renamed)
        return core.Compiled(inst, c.kind, c.fn, c.error)

    return compile_inst


_FROM_FP8 = ("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")


def _compile_from_fp8(inst: d.Instruction, base: str, target: str) -> Callable | None:
    """gfx942/gfx950's 8-bit float to f32 conversions. The byte (or, packed, the word) comes
    from SDWA's src0_sel (clang: `v_cvt_f32_fp8_sdwa v3, v1 src0_sel:BYTE_1`); an SDWA
    destination select, source modifiers, clamp or omod are not modelled (refused)."""
    f = inst.f
    ocp = target != "gfx942"  # gfx950 converts OCP's E4M3/E5M2, gfx942 the FNUZ forms
    if "sdwa" in f:
        ext = f["sdwa"]
        src0 = (ext & 0xFF) if (ext >> 23) & 1 else d.VGPR0 + (ext & 0xFF)
        if (ext >> 23) & 1:
            from hsa.virtual.gfx9.decoder import scalar
            src0 = scalar(src0)
        sel = (ext >> 16) & 7
        if (ext >> 8) & 7 != 6 or (ext >> 13) & 7 or (ext >> 20) & 3:  # dst_sel, clamp/omod,
            return None  # neg/abs
        shift = sel * 8 if sel < 4 else (16 if sel == 5 else 0)
    else:
        if f.get("opsel") or f.get("clamp") or f.get("omod") or f.get("abs") or f.get("neg"):
            return None
        src0, shift = f["src0"], 0
    from hsa.virtual.isa.vop3p import cvt_from_fp8

    return cvt_from_fp8(base, src0, inst.literal, f["vdst"], shift, ocp)


def _compile_alu(inst: d.Instruction, samples, target: str = "gfx942") -> Callable | None:
    """gfx9-only ALU semantics (inst already renamed), or None."""
    name = inst.name
    if name in _GFX9_ALU:
        return _GFX9_ALU[name](inst)
    if name.startswith("v_mfma_"):
        return compile_mfma(inst, samples(inst), target)
    if name.startswith("v_smfmac_"):
        return compile_smfmac(inst, samples(inst), target)
    if "sdwa" in inst.f or not inst.name.startswith("v_"):
        return None
    fn = gfx950.compile_alu(inst, name)
    if fn is not None:
        return fn
    c = core.compile_instruction(inst)
    return c.fn if c.kind == core.SIMPLE and c.fn is not None else None
