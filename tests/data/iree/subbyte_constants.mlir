// Constants of element types numpy lacks, kept by IREE as host constants: i4 and i2
// (packed below a byte), bf16 (with a NaN, printed by MLIR as a bit pattern) and f8E4M3FN.
#map = affine_map<(d0) -> (d0)>
func.func @subbyte_constants(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %c4 = util.unfoldable_constant dense<[0, 1, -2, 3, -4, 5, -6, 7]> : tensor<8xi4>
  %c2 = util.unfoldable_constant dense<[0, 1, -2, -1, 1, 0, -1, -2]> : tensor<8xi2>
  %cb = util.unfoldable_constant dense<[1.5, -2.0, 0x7FC0, 3.25, 0.0, -0.5, 8.0, 1.0e+02]> : tensor<8xbf16>
  %c8 = util.unfoldable_constant dense<[1.0, -2.0, 0.5, 3.0, 448.0, -0.25, 8.0, 2.0]> : tensor<8xf8E4M3FN>
  %e = tensor.empty() : tensor<8xf32>
  %r:2 = linalg.generic {indexing_maps = [#map, #map, #map, #map, #map, #map, #map],
                         iterator_types = ["parallel"]}
      ins(%x, %c4, %c2, %cb, %c8 : tensor<8xf32>, tensor<8xi4>, tensor<8xi2>, tensor<8xbf16>, tensor<8xf8E4M3FN>)
      outs(%e, %e : tensor<8xf32>, tensor<8xf32>) {
  ^bb0(%a: f32, %i4: i4, %i2: i2, %b: bf16, %f8: f8E4M3FN, %o: f32, %o2: f32):
    %w4 = arith.sitofp %i4 : i4 to f32
    %w2 = arith.sitofp %i2 : i2 to f32
    %s = arith.addf %w4, %w2 : f32
    %t = arith.addf %a, %s : f32
    %bf = arith.extf %b : bf16 to f32
    %ff = arith.extf %f8 : f8E4M3FN to f32
    %u = arith.mulf %bf, %ff : f32
    linalg.yield %t, %u : f32, f32
  } -> (tensor<8xf32>, tensor<8xf32>)
  return %r#0, %r#1 : tensor<8xf32>, tensor<8xf32>
}
