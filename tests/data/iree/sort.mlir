func.func @sort(%x: tensor<16xi32>) -> tensor<16xi32> {
  %r = iree_linalg_ext.sort dimension(0) outs(%x : tensor<16xi32>) {
  ^bb0(%a: i32, %b: i32):
    %c = arith.cmpi slt, %a, %b : i32
    iree_linalg_ext.yield %c : i1
  } -> tensor<16xi32>
  return %r : tensor<16xi32>
}
