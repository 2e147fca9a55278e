func.func @addi8(%x: tensor<64xi8>, %y: tensor<64xi8>) -> tensor<64xi8> {
  %e = tensor.empty() : tensor<64xi8>
  %m = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %y : tensor<64xi8>, tensor<64xi8>) outs(%e : tensor<64xi8>) {
  ^bb0(%a: i8, %b: i8, %o: i8):
    %t = arith.addi %a, %b : i8
    linalg.yield %t : i8
  } -> tensor<64xi8>
  return %m : tensor<64xi8>
}
