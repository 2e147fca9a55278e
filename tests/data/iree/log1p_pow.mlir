// log1p and pow on f32 (stablehlo's log_plus_one and pow e2e programs): on gfx942 LLVM's
// expansions move register pairs with v_pk_mov_b32 op_sel:[1,0] (a swap of halves), which
// the executor read with op_sel_hi; log1p(0.5) came out 0.98 and pow off by 125.
func.func @log1p_pow(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %l = "stablehlo.log_plus_one"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %p = "stablehlo.power"(%x, %y) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %p : tensor<8xf32>, tensor<8xf32>
}
