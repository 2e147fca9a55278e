// linalg.pack with padding and both permutations, then linalg.unpack back: IREE's SPIR-V
// code generation cannot tile these to invocations; the Vulkan target decomposes them first.
func.func @pack_pad(%a: tensor<7x9xf32>) -> (tensor<3x2x4x4xf32>, tensor<7x9xf32>) {
  %pad = arith.constant -1.0 : f32
  %e = tensor.empty() : tensor<3x2x4x4xf32>
  %p = linalg.pack %a padding_value(%pad : f32) outer_dims_perm = [1, 0]
       inner_dims_pos = [1, 0] inner_tiles = [4, 4] into %e
       : tensor<7x9xf32> -> tensor<3x2x4x4xf32>
  %b = tensor.empty() : tensor<7x9xf32>
  %u = linalg.unpack %p outer_dims_perm = [1, 0] inner_dims_pos = [1, 0] inner_tiles = [4, 4]
       into %b : tensor<3x2x4x4xf32> -> tensor<7x9xf32>
  return %p, %u : tensor<3x2x4x4xf32>, tensor<7x9xf32>
}
