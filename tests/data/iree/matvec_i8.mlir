// i8 x i8 -> i32 matvec into its accumulator (gfx942 lowers the K loop to v_dot4c_i32_i8).
func.func @matvec_i8(%lhs: tensor<5x32xi8>, %rhs: tensor<32xi8>, %acc: tensor<5xi32>) -> tensor<5xi32> {
  %r = linalg.matvec ins(%lhs, %rhs : tensor<5x32xi8>, tensor<32xi8>) outs(%acc : tensor<5xi32>) -> tensor<5xi32>
  return %r : tensor<5xi32>
}
