// IREE 3.13 (iree-compile 3.13.0rc20261016) crashes compiling this for gfx950 (SIGFPE in
// getXorShuffleParamsForTunedChipset), not for gfx942: the one op of gpt2-decode-f16's
// prefill dispatch 22 (its MLP down projection, 8 tokens x 256 -> 64). It compiles with
// --iree-llvmgpu-use-direct-load=false, which compiler/iree.py adds when it sees that crash.
func.func @skinny(%a: tensor<8x256xf16>, %b: tensor<256x64xf16>) -> tensor<8x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<8x64xf32>) -> tensor<8x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x256xf16>, tensor<256x64xf16>) outs(%acc : tensor<8x64xf32>) -> tensor<8x64xf32>
  return %r : tensor<8x64xf32>
}
