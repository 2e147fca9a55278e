// top-k of each row (topk_v2), in place in its outputs: IREE runs it in one workgroup of two
// waves (gfx1100 wave32: 64 lanes; gfx942 wave64: 128) that both update the same outputs.
// The waves split where lane 0 alone initialises the outputs and must run together again
// where that block falls through.
func.func @topk_rows(%x: tensor<2x6xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>) {
  %e = tensor.empty() : tensor<2x3xf32>
  %ei = tensor.empty() : tensor<2x3xi32>
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i32
  %fv = linalg.fill ins(%ninf : f32) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
  %fi = linalg.fill ins(%c0 : i32) outs(%ei : tensor<2x3xi32>) -> tensor<2x3xi32>
  %r:2 = iree_linalg_ext.topk_v2 dimension(1) is_sorted ins(%x : tensor<2x6xf32>)
      outs(%fv, %fi : tensor<2x3xf32>, tensor<2x3xi32>) {
  ^bb0(%a: f32, %b: f32):
    %c = arith.cmpf ogt, %a, %b : f32
    iree_linalg_ext.yield %c : i1
  } -> tensor<2x3xf32>, tensor<2x3xi32>
  return %r#0, %r#1 : tensor<2x3xf32>, tensor<2x3xi32>
}
