func.func @reshape(%x: tensor<4x8xf32>) -> (tensor<32xf32>, tensor<4x8xf32>) {
  %r = tensor.collapse_shape %x [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
  return %r, %x : tensor<32xf32>, tensor<4x8xf32>
}
