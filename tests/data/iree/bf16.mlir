func.func @addbf(%x: tensor<64xbf16>, %y: tensor<64xbf16>) -> tensor<64xbf16> {
  %e = tensor.empty() : tensor<64xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %y : tensor<64xbf16>, tensor<64xbf16>) outs(%e : tensor<64xbf16>) {
 ^bb0(%a: bf16, %b: bf16, %o: bf16):
 %s = arith.addf %a, %b : bf16
 linalg.yield %s : bf16
 } -> tensor<64xbf16>
  return %r : tensor<64xbf16>
}
