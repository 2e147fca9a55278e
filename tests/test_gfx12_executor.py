"""The gfx12 executor (gfx1201 RDNA4, gfx1250 CDNA5) against what nobody here wrote:
llvm-objdump-19's gfx1201 disassembly of real compiler output, clang 22's gfx1250
assembler, and numpy/IREE-CPU references of every amdgpu-run workload."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import compiler
from amdgpu.cli import main
from hsa.virtual.gfx12 import decoder
from hsa.virtual.gfx12.gen_gfx1250 import assemble

pytestmark = pytest.mark.hsa_virtual


def _text_section(data: bytes) -> tuple[bytes, int]:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, strndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names = secs[strndx][4]
    for s in secs:
        name = data[names + s[0]: data.index(b"\0", names + s[0])]
        if name == b".text":
            return data[s[4]: s[4] + s[5]], s[3]
    raise AssertionError("no .text")


@pytest.mark.parametrize("kernel", ["fill", "copy", "saxpy_hidden", "lds_reduce"])
def test_gfx1201_decoder_names_every_instruction_as_llvm_objdump_does(kernel, tmp_path):
    if shutil.which("llvm-objdump-19") is None:
        pytest.skip("llvm-objdump-19 is not installed (scripts/setup.sh installs llvm-19)")
    data = compiler.compile(kernel, targets=["gfx1201"]).variants[0].data
    path = tmp_path / "k.hsaco"
    path.write_bytes(data)
    listing = subprocess.run(["llvm-objdump-19", "-d", "--mcpu=gfx1201", str(path)],
                             capture_output=True, text=True, check=True).stdout
    want = {}
    for line in listing.splitlines():
        m = re.match(r"\s+(\S+).*// ([0-9A-F]{12}):", line)
        if m:
            want[int(m.group(2), 16)] = m.group(1)
    code, base = _text_section(data)
    insts = decoder.decode_all(code, base, "gfx1201")
    checked = 0
    for inst in insts:
        if inst.pc not in want:
            continue
        expect = decoder.core_name(want[inst.pc])
        got = inst.name.split(" :: ")[0]  # objdump's first token of a VOPD pair
        assert got == expect, (hex(inst.pc), want[inst.pc], inst.name)
        checked += 1
    assert checked == len(want) > 10


def test_gfx1250_tables_decode_what_clang_assembles():
    """Every sample of the gfx1250 tables, assembled again by clang 22 (the default and the
    real-true16 mode), decodes to its mnemonic and size; VOPD and VOPD3 samples are pairs
    and decode to both halves' names."""
    tables = json.loads(decoder.Path(decoder.__file__).with_name(
        "opcodes_gfx1250.json").read_text())
    lines = sorted({info["sample"] for t in tables.values() for info in t.values()})
    got = assemble(lines) + assemble(lines, true16=True)
    assert len(got) > 1200
    kinds = set()
    for text, words in got:
        inst = decoder.decode_one(words + [0, 0, 0, 0], 0, 0, "gfx1250")
        if "::" in text:
            want = " :: ".join(decoder.core_name(p.split()[0]) for p in text.split("::"))
        else:
            want = decoder.core_name(text.split()[0])
        assert inst.name == want, (text, inst.name)
        assert inst.size == 4 * len(words), text
        kinds.add(inst.encoding)
    assert {"VOPD", "VOPD3", "VOP3P", "SOP2"} <= kinds


def test_gfx1250_has_instructions_gfx1201_lacks():
    g1201 = {i["name"] for t in decoder.opcode_tables("gfx1201").values() for i in t.values()}
    g1250 = {i["name"] for t in decoder.opcode_tables("gfx1250").values() for i in t.values()}
    assert {"v_mad_nc_u64_u32", "s_wait_xcnt", "v_wmma_f32_16x16x4_f32",
            "v_pk_add_f32", "global_prefetch_b8"} <= g1250 - g1201


# Every amdgpu-run workload: IREE's (gfx1201: WMMA in gfx12's layout; gfx1250: VOPD3, packed
# fp32, 64-bit literals, gfx1250's buffer descriptors and WMMA) and the OpenCL C ones.
WORKLOADS = ["saxpy", "chain-4", "reduction", "softmax", "matmul-f32", "matmul-f16", "mlp",
             "fill", "copy", "saxpy-hidden", "lds-reduce"]


@pytest.mark.parametrize("target, workload", [(t, w) for t in ("gfx1201", "gfx1250")
                                              for w in WORKLOADS])
def test_every_workload_matches_its_reference_immediate_and_replayed(target, workload,
                                                                     capsys):
    rc = main([workload, "--device", f"amdgpu:virtual:{target}", "--replay", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    result = json.loads(out[-1])
    assert result["target"] == target and result["correct"] is True, result


def test_cluster_ids_reach_a_gfx1250_kernel():
    """fill's workgroup ids through TTMP9 on gfx1250, with and without clusters: a kernel
    compiled without cluster dims reads TTMP9 as its workgroup id, which is the dispatch
    the extended packet's cluster size 1 gives."""
    import amdgpu

    b = compiler.compile("fill", targets=["gfx1250"])
    with amdgpu.open("amdgpu:virtual:gfx1250") as dev:
        k = dev.load(b).kernel("fill")
        out = dev.buffer(np.zeros(4096, np.float32))
        dev.dispatch(k, 4096, 64, (out, np.float32(7), np.uint32(4096)))
        dev.synchronize()
        assert (out.to_numpy(np.float32) == 7).all()
    assert sys.modules["hsa.virtual.gfx12"].FAMILIES["gfx1250"].init_sgprs is not None


# --- Triton 3.9 for gfx1201 and gfx1250 (fixtures from tests/data/codeobjects/make_fixtures.py)
def _triton(dev, name: str, programs: tuple[int, ...], args: tuple) -> None:
    from codeobjects import DATA, TRITON, load_kernel

    facts = TRITON[name]
    assert facts["arch"] == dev.target and facts["warp_size"] == 32
    kernel = load_kernel(dev, (DATA / name).read_bytes(), facts["kernel"])
    block = facts["num_warps"] * 32
    grid = (programs[0] * block, *programs[1:])
    dev.dispatch(kernel, grid if len(programs) > 1 else grid[0],
                 (block,) + (1,) * (len(programs) - 1) if len(programs) > 1 else block,
                 (*args, 0, 0), dynamic_lds=facts["shared"]).wait(60)


@pytest.fixture(params=["gfx1201", "gfx1250"])
def dev12(request):
    import amdgpu

    d = amdgpu.open(f"amdgpu:virtual:{request.param}")
    yield d
    d.close()


def test_triton_add_row_sum_softmax(dev12):
    dev, rng, arch = dev12, np.random.default_rng(12), dev12.target
    n = 1000
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    out = dev.buffer(np.full(n + 64, 7, np.float32))
    _triton(dev, f"triton_add_{arch}.hsaco", (-(-n // 256),),
            (dev.buffer(x), dev.buffer(y), out, np.int32(n)))
    got = out.to_numpy(np.float32)
    np.testing.assert_array_equal(got[:n], x + y)
    assert (got[n:] == 7).all()
    rows, cols, stride = 6, 100, 128
    a = rng.standard_normal((rows, stride)).astype(np.float32)
    sums = dev.buffer(rows * 4)
    _triton(dev, f"triton_row_sum_{arch}.hsaco", (rows,),
            (dev.buffer(a), sums, np.int32(cols), np.int32(stride)))
    np.testing.assert_allclose(sums.to_numpy(np.float32), a[:, :cols].sum(1), rtol=1e-5,
                               atol=1e-5)
    rows, cols, stride = 5, 50, 64
    s = rng.standard_normal((rows, stride)).astype(np.float32)
    sm = dev.buffer(np.zeros_like(s))
    _triton(dev, f"triton_softmax_{arch}.hsaco", (rows,),
            (dev.buffer(s), sm, np.int32(cols), np.int32(stride)))
    e = np.exp(s[:, :cols] - s[:, :cols].max(1, keepdims=True))
    np.testing.assert_allclose(sm.to_numpy(np.float32).reshape(rows, stride)[:, :cols],
                               e / e.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("arch", ["gfx1201", "gfx1250"])
def test_triton_matmul_wmma(arch):
    """Triton's f16 matmul (gfx12 WMMA), masks on every edge of the 32 x 32 tiles, against
    numpy. gfx1250's build reads its B tiles with ds_load_tr16_b128 (DS opcode 252), the
    transposing LDS load: without it the kernel stops there with a clean queue error."""
    from codeobjects import TRITON

    import amdgpu

    dev12 = amdgpu.open(f"amdgpu:virtual:{arch}")
    facts = TRITON[f"triton_matmul_{arch}.hsaco"]["constexprs"]
    m, n, k = 40, 48, 40
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev12.buffer(m * n * 4)
    try:
        _triton(dev12, f"triton_matmul_{arch}.hsaco",
                (-(-m // facts["BM"]), -(-n // facts["BN"])),
                (dev12.buffer(a), dev12.buffer(b), c, np.int32(m), np.int32(n), np.int32(k)))
        got = c.to_numpy(np.float32).reshape(m, n)
    finally:
        dev12.close()
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_gfx1250_triton_matmul_reads_b_with_ds_load_tr16_b128():
    """The fixture really uses the transposing load (so the test above exercises it)."""
    from codeobjects import DATA

    code, base = _text_section((DATA / "triton_matmul_gfx1250.hsaco").read_bytes())
    names = [i.name for i in decoder.decode_all(code, base, "gfx1250")]
    assert names.count("ds_load_tr16_b128") == 2 and "<unknown>" not in names


def test_gfx12_agents_report_the_real_parts():
    """gfx1201 as a Radeon RX 9070 XT (64 CUs), gfx1250 with the default count (no MI455X
    CU count is published in the sources used here); both wave32, with the LDS sizes clang
    enforces (64 KiB, 320 KiB) and their ISA names."""
    from hsa.virtual.provider import VirtualProvider

    p = VirtualProvider(gpus=("gfx1201", "gfx1250"))
    try:
        gpus = {a.name: a for a in p.gpu_agents()}
        assert {n: (a.compute_units, a.wavefront_size, a.isa) for n, a in gpus.items()} == {
            "gfx1201": (64, 32, "gfx1201"), "gfx1250": (48, 32, "gfx1250")}
        lds = {a.info.name: a.lds_size for a in p._agents.values() if a.info.name in gpus}
        assert lds == {"gfx1201": 64 << 10, "gfx1250": 320 << 10}
    finally:
        p.shut_down()


MATMUL_F16_256 = """
func.func @matmul_f16(%a: tensor<256x256xf16>, %b: tensor<256x256xf16>) -> tensor<256x256xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %r = linalg.matmul ins(%a, %b : tensor<256x256xf16>, tensor<256x256xf16>)
                     outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %r : tensor<256x256xf32>
}
"""


@pytest.mark.parametrize("target", ["gfx1201", "gfx1250"])
def test_iree_256_matmul_f16_uses_true16_moves_and_matches(target, tmp_path):
    """IREE's 256^3 f16 matmul built for the target alone (no driver ABI, as
    bench_executor.py builds it): for gfx1250 it emits `v_mov_b16_e64 vN.h, vM.l`, a true16
    VOP3 form LLVM 19 cannot decode (its table entry comes from clang 22); it runs and
    matches numpy on both targets."""
    from hsa.virtual.gfx11.testing import Harness, run_program

    path = tmp_path / "matmul_f16_256.mlir"
    path.write_text(MATMUL_F16_256)
    bundle = compiler.compile(path, targets=[target], abi=())
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((256, 256)).astype(np.float16) for _ in range(2))
    (got,) = run_program(Harness(target), bundle, [a, b])
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(np.asarray(got).reshape(256, 256), want, rtol=1e-3, atol=1e-2)


HIGH_VGPRS_CL = """
#define N 400
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) __attribute__((amdgpu_waves_per_eu(1, 1)))
void big(__global const float* in, __global float* out) {
  int l = get_global_id(0);
  float r[N];
  #pragma unroll
  for (int i = 0; i < N; i++) r[i] = in[i * 32 + l];
  #pragma unroll
  for (int i = 0; i < N; i++) out[i * 32 + l] = r[i] * 3.0f + r[N - 1 - i];
}
"""


def test_gfx1250_kernel_with_400_live_vgprs_uses_s_set_vgpr_msb_and_matches(tmp_path):
    """clang 22 keeps 400 floats in VGPRs on gfx1250 (1024 VGPRs a lane) and reaches
    v256-v1023 with s_set_vgpr_msb (its AMDGPULowerVGPREncoding pass), in VOPD fmac/fmamk
    pairs, global loads and stores: the result matches numpy bit for bit (the fma rounds
    once)."""
    import amdgpu

    src = tmp_path / "big.cl"
    src.write_text(HIGH_VGPRS_CL)
    b = compiler.compile(src, targets=["gfx1250"])
    code, base = _text_section(b.variants[0].data)
    modes = {i.f["simm16"] & 0xFF for i in decoder.decode_all(code, base, "gfx1250")
             if i.name == "s_set_vgpr_msb"}
    assert any(m >> 2 * k & 3 for m in modes for k in range(4)), modes
    n = 400
    x = np.random.default_rng(1).standard_normal(n * 32).astype(np.float32)
    with amdgpu.open("amdgpu:virtual:gfx1250") as dev:
        out = dev.buffer(np.zeros(n * 32, np.float32))
        dev.dispatch(dev.load(b).kernel("big"), 32, 32, (dev.buffer(x), out))
        dev.synchronize()
        got = out.to_numpy(np.float32).reshape(n, 32)
    r = x.reshape(n, 32)
    np.testing.assert_array_equal(got, (r.astype(np.float64) * 3 + r[::-1]).astype(np.float32))
