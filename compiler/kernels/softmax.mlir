// softmax: along the last dimension of a 16x256 matrix.
func.func @softmax(%x: tensor<16x256xf32>) -> tensor<16x256xf32> {
  %empty = tensor.empty() : tensor<16x256xf32>
  %r = linalg.softmax dimension(1) ins(%x : tensor<16x256xf32>) outs(%empty : tensor<16x256xf32>) -> tensor<16x256xf32>
  return %r : tensor<16x256xf32>
}
