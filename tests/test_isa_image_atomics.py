"""Image atomics of compute kernels on gfx90a, gfx1100 and gfx1201 (issue 32): LLVM's
llvm.amdgcn.image.atomic.* intrinsics (no OpenCL builtin reaches them), compiled by clang 22
into image_atomic_swap/cmpswap/add/sub/smin/umin/smax/umax/and/or/xor/inc/dec (gfx12:
..._uint/_int names, add_flt) through the T#s image_descriptors.tsharp writes as ROCr's image
managers do. The reference is numpy applying each lane's operation in lane order to one
texel (the ISA guides' image atomic: a read-modify-write of the texel the unnormalised
coordinates name, the pre-op value returned when GLC / TH_ATOMIC_RETURN is set; inc wraps
to 0 at the data, dec to the data at 0 or above it), with lanes past the image's right edge
doing nothing and getting 0."""

from __future__ import annotations

import numpy as np
import pytest
from image_descriptors import tsharp
from toolchains import require_clang

pytestmark = pytest.mark.hsa_virtual

TARGETS = ["gfx90a", "gfx1100", "gfx1201"]
OPS = ["swap", "add", "sub", "smin", "umin", "smax", "umax", "and", "or", "xor", "inc", "dec"]
U32, S32, F32, U32X2 = 20, 21, 22, 48  # unified formats 32_UINT, 32_SINT, 32_FLOAT, 32_32_UINT
W, H, N = 5, 3, 128  # x = i % (W + 1): the last column is outside

_DECLARE = "declare {ty} @llvm.amdgcn.image.atomic.{op}.{dim}.{ty}.i32({args})\n"
_KERNEL = """
define amdgpu_kernel void @{name}(ptr addrspace(1) %out, ptr addrspace(4) %t,
                                  ptr addrspace(1) %data, ptr addrspace(1) %cmp) {{
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %grp = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %grp, 64
  %i = add i32 %base, %tid
  %x = urem i32 %i, {w1}
  %row = udiv i32 %i, {w1}
  %y = urem i32 %row, {h}
  %z = udiv i32 %row, {h}
  %rsrc = load <8 x i32>, ptr addrspace(4) %t
  %pv = getelementptr {ty}, ptr addrspace(1) %data, i32 %i
  %v = load {ty}, ptr addrspace(1) %pv
  %pc = getelementptr {ty}, ptr addrspace(1) %cmp, i32 %i
  %c = load {ty}, ptr addrspace(1) %pc
  %old = call {ty} @llvm.amdgcn.image.atomic.{op}.{dim}.{ty}.i32({call})
  {store}
  ret void
}}
"""


def _kernel(name: str, op: str, ty: str = "i32", dim: str = "2d", returns: bool = True) -> str:
    coords = {"2d": ["x", "y"], "3d": ["x", "y", "z"], "1darray": ["x", "y"]}[dim]
    data = [f"{ty} %v"] + ([f"{ty} %c"] if op == "cmpswap" else [])
    call = ", ".join(data + [f"i32 %{c}" for c in coords] + ["<8 x i32> %rsrc", "i32 0",
                                                             "i32 0"])
    args = ", ".join([ty] * len(data) + ["i32"] * len(coords) + ["<8 x i32>", "i32", "i32"])
    store = (f"%po = getelementptr {ty}, ptr addrspace(1) %out, i32 %i\n"
             f"  store {ty} %old, ptr addrspace(1) %po") if returns else ""
    return (_DECLARE.format(op=op, ty=ty, dim=dim, args=args)
            + _KERNEL.format(name=name, op=op, ty=ty, dim=dim, call=call, store=store, w1=W + 1,
                             h=H))


_CODE: dict[str, bytes] = {}


def _harness(target: str, tmp_path_factory):
    from hsa.virtual.gfx11.testing import Harness

    if target not in _CODE:
        require_clang()
        from compiler import clang

        kernels = [_kernel(f"atomic_{op}", op) for op in OPS + ["cmpswap"]]
        kernels += [_kernel("atomic_add_noret", "add", returns=False),
                    _kernel("atomic_umax_i64", "umax", "i64"),
                    _kernel("atomic_add_3d", "add", dim="3d"),
                    _kernel("atomic_add_1darray", "add", dim="1darray")]
        if target.startswith("gfx12"):
            kernels.append(_kernel("atomic_add_flt", "add.flt", "float"))
        src = tmp_path_factory.mktemp("ir") / f"image_atomics_{target}.ll"
        src.write_text('target triple = "amdgcn-amd-amdhsa"\n'
                       "declare i32 @llvm.amdgcn.workitem.id.x()\n"
                       "declare i32 @llvm.amdgcn.workgroup.id.x()\n"
                       + "".join(dict.fromkeys(k.split("\n", 1)[0] + "\n" for k in kernels))
                       + "".join(k.split("\n", 1)[1] for k in kernels))
        _CODE[target] = clang.compile_llvm_ir(src, target)
    h = Harness(target)
    return h, h.load(_CODE[target])


def _reference(op: str, image: np.ndarray, texel: np.ndarray, data: np.ndarray,
               cmp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each lane's pre-op value, the image after) applying the lanes in order; texel -1:
    outside (nothing happens, 0 comes back)."""
    img, old = image.copy(), np.zeros_like(data)
    signed = np.dtype(f"int{img.dtype.itemsize * 8}")
    for lane, k in enumerate(texel):
        if k < 0:
            continue
        a, v = img[k], data[lane]
        with np.errstate(over="ignore"):  # the integers wrap
            sa, sv = a.view(signed), v.view(signed)
            img[k] = {"swap": v, "cmpswap": v if a == cmp[lane] else a, "add": a + v,
                      "sub": a - v, "smin": a if sa <= sv else v, "umin": min(a, v),
                      "smax": a if sa >= sv else v, "umax": max(a, v), "and": a & v,
                      "or": a | v, "xor": a ^ v, "inc": 0 if a >= v else a + 1,
                      "dec": v if a == 0 or a > v else a - 1}[op]
        old[lane] = a
    return old, img


def _run(h, code, kernel: str, fmt: int, dtype, rng, target: str, kind: str = "2D",
         slices: int = 1, pitch: int = W, small: bool = False):
    """Dispatch `kernel` over N lanes on an image of `slices` x H x `pitch` texels (W of
    each row in view); (image, data, compare values, each lane's texel or -1, out address,
    image address)."""
    height = 1 if kind == "1D_ARRAY" else H
    shape = (slices, height, pitch)
    hi = 8 if small else np.iinfo(dtype).max
    image = rng.integers(0, hi, shape, dtype=np.uint64).astype(dtype).ravel()
    data = rng.integers(0, hi, N, dtype=np.uint64).astype(dtype)
    cmp = np.where(rng.random(N) < 0.5, image[rng.integers(0, image.size, N)], data)
    img_addr = h.buffer(image)
    t = h.buffer(tsharp(img_addr, fmt, W, height, kind, slices=slices, pitch=pitch,
                        target=target))
    out = h.alloc(N * image.itemsize)
    h.dispatch(code, kernel, (N,), (64,), [out, t, h.buffer(data), h.buffer(cmp.astype(dtype))])
    lane = np.arange(N)
    x, row = lane % (W + 1), lane // (W + 1)  # the kernels' x, and y + H * z (2D: y = row % H)
    if kind == "1D_ARRAY":  # coordinates (x, layer = row % H)
        y, z = np.zeros_like(row), row % H
    elif kind == "3D":
        y, z = row % H, row // H
    else:
        y, z = row % H, np.zeros_like(row)
    texel = np.where((x < W) & (z < slices), (z * height + y) * pitch + x, -1)
    return image, data, cmp, texel, out, img_addr


@pytest.mark.parametrize("target", TARGETS)
def test_image_atomics_32bit_2d(target, tmp_path_factory):
    """Every integer image atomic on a 32_UINT (32_SINT for smin/smax) 2D image; lanes
    collide (128 lanes on 15 texels) and each gets the value it saw; inc/dec with small data
    so they wrap."""
    h, code = _harness(target, tmp_path_factory)
    for op in OPS + ["cmpswap"]:
        rng = np.random.default_rng(OPS.index(op) if op in OPS else 99)
        fmt = S32 if op in ("smin", "smax") else U32
        image, data, cmp, texel, out, img_addr = _run(
            h, code, f"atomic_{op}", fmt, np.uint32, rng, target, small=op in ("inc", "dec"))
        old, after = _reference(op, image, texel, data, cmp)
        np.testing.assert_array_equal(h.read(out, np.uint32, N), old, op)
        np.testing.assert_array_equal(h.read(img_addr, np.uint32, image.size), after, op)


@pytest.mark.parametrize("target", TARGETS)
def test_image_atomics_noret_64bit_3d_array(target, tmp_path_factory):
    """An add whose result is unused (no GLC / TH_ATOMIC_RETURN: the out buffer stays
    untouched), a 64-bit umax on 32_32_UINT (DMASK 0x3), an add on a 3D image and on a 1D
    array (rows of 64 texels: 256 bytes, gfx10+'s linear pitch for both; slices past the
    last one are outside)."""
    h, code = _harness(target, tmp_path_factory)
    rng = np.random.default_rng(7)
    image, data, cmp, texel, out, img_addr = _run(h, code, "atomic_add_noret", U32, np.uint32,
                                                  rng, target)
    _, after = _reference("add", image, texel, data, cmp)
    np.testing.assert_array_equal(h.read(img_addr, np.uint32, image.size), after)
    assert not h.read(out, np.uint32, N).any()
    cases = [("atomic_umax_i64", "umax", U32X2, np.uint64, "2D", 1, W),
             ("atomic_add_3d", "add", U32, np.uint32, "3D", 4, 64),
             ("atomic_add_1darray", "add", U32, np.uint32, "1D_ARRAY", 2, 64)]
    if target.startswith("gfx12"):
        cases.append(("atomic_add_flt", "add", F32, np.uint32, "2D", 1, W))
    for kernel, op, fmt, dtype, kind, slices, pitch in cases:
        image, data, cmp, texel, out, img_addr = _run(h, code, kernel, fmt, dtype, rng, target,
                                                      kind, slices, pitch)
        if kernel == "atomic_add_flt":  # small floats: every partial sum exact in f32
            image = (rng.integers(-64, 64, image.size) / 4).astype(np.float32)
            data = (rng.integers(-64, 64, N) / 4).astype(np.float32)
            img_addr = h.buffer(image)
            t = h.buffer(tsharp(img_addr, fmt, W, H, kind, target=target))
            h.dispatch(code, kernel, (N,), (64,), [out, t, h.buffer(data), h.buffer(data)])
            old, after = np.zeros(N, np.float32), image.copy()
            for lane, k in enumerate(texel):
                if k >= 0:
                    old[lane], after[k] = after[k], after[k] + data[lane]
            np.testing.assert_array_equal(h.read(out, np.float32, N), old)
            np.testing.assert_array_equal(h.read(img_addr, np.float32, image.size), after)
            continue
        old, after = _reference(op, image, texel, data, cmp)
        np.testing.assert_array_equal(h.read(out, dtype, N), old, kernel)
        np.testing.assert_array_equal(h.read(img_addr, dtype, image.size), after, kernel)


@pytest.mark.parametrize("target", TARGETS)
def test_atomic_on_a_float_image_is_one_line(target, tmp_path_factory):
    """An integer atomic through a 32_FLOAT T# (no integer texels to add to): the queue stops
    with one line naming the instruction, the format and the code-object offset."""
    from codeobjects import load_kernel

    import amdgpu
    from amdgpu.errors import QueueError

    _harness(target, tmp_path_factory)
    dev = amdgpu.open(f"amdgpu:virtual:{target}")
    try:
        k = load_kernel(dev, _CODE[target], "atomic_add")
        img = dev.buffer(np.zeros(W * H, np.float32))
        with pytest.raises(QueueError) as err:
            dev.dispatch(k, 64, 64, (dev.buffer(np.zeros(N, np.uint32)),
                                     dev.buffer(tsharp(img.address, F32, W, H, target=target)),
                                     dev.buffer(np.zeros(N, np.uint32)),
                                     dev.buffer(np.zeros(N, np.uint32)))).wait(60)
    finally:
        dev.close()
    text = str(err.value)
    name = "image_atomic_add_uint" if target.startswith("gfx12") else "image_atomic_add"
    assert f"{name}: a BUF_FMT_32_FLOAT T# for a 32-bit atomic is not modelled" in text, text
    assert "code-object offset 0x" in text and "\n" not in text
