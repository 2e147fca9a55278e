// The one op of gpt2-decode-f16's prefill dispatch 22 (its MLP down projection, 8 tokens x
// 256 -> 64) on which IREE 3.13 (iree-compile 3.13.0rc20261016) fails where it gives the
// matmul its VDMFMA (sparse MFMA) intrinsic: for gfx950 it crashes (SIGFPE in
// getXorShuffleParamsForTunedChipset), for gfx90a it refuses its own 'amdgpu.sparse_mfma'
// op; gfx942 compiles it. compiler/iree.py compiles again with the flag that avoids each
// (_IREE_WORKAROUNDS): --iree-llvmgpu-use-direct-load=false (gfx950) and
// --iree-codegen-llvmgpu-use-tile-and-fuse-matmul=false (gfx90a).
func.func @skinny(%a: tensor<8x256xf16>, %b: tensor<256x64xf16>) -> tensor<8x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<8x64xf32>) -> tensor<8x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x256xf16>, tensor<256x64xf16>) outs(%acc : tensor<8x64xf32>) -> tensor<8x64xf32>
  return %r : tensor<8x64xf32>
}
