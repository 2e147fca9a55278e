// mlp: two layers of relu(x @ w + b): x 16x64, w1 64x128, b1 128, w2 128x32, b2 32 -> 16x32.
#row = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
func.func @mlp(%x: tensor<16x64xf32>, %w1: tensor<64x128xf32>, %b1: tensor<128xf32>,
               %w2: tensor<128x32xf32>, %b2: tensor<32xf32>) -> tensor<16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<16x128xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<16x128xf32>) -> tensor<16x128xf32>
  %m1 = linalg.matmul ins(%x, %w1 : tensor<16x64xf32>, tensor<64x128xf32>) outs(%i1 : tensor<16x128xf32>) -> tensor<16x128xf32>
  %h1 = linalg.generic {indexing_maps = [#row, #bias, #row], iterator_types = ["parallel", "parallel"]}
      ins(%m1, %b1 : tensor<16x128xf32>, tensor<128xf32>) outs(%e1 : tensor<16x128xf32>) {
  ^bb0(%v: f32, %b: f32, %o: f32):
    %s = arith.addf %v, %b : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<16x128xf32>
  %e2 = tensor.empty() : tensor<16x32xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %m2 = linalg.matmul ins(%h1, %w2 : tensor<16x128xf32>, tensor<128x32xf32>) outs(%i2 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %h2 = linalg.generic {indexing_maps = [#row, #bias, #row], iterator_types = ["parallel", "parallel"]}
      ins(%m2, %b2 : tensor<16x32xf32>, tensor<32xf32>) outs(%e2 : tensor<16x32xf32>) {
  ^bb0(%v: f32, %b: f32, %o: f32):
    %s = arith.addf %v, %b : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<16x32xf32>
  return %h2 : tensor<16x32xf32>
}
