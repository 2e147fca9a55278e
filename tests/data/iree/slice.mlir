func.func @slice(%x: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %r = tensor.extract_slice %x[3, 0] [2, 16] [1, 1] : tensor<8x16xf32> to tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}
