func.func @pad(%x: tensor<4x4xf32>) -> tensor<6x6xf32> {
  %z = arith.constant 0.0 : f32
  %r = tensor.pad %x low[1, 1] high[1, 1] { ^bb0(%i: index, %j: index): tensor.yield %z : f32 } : tensor<4x4xf32> to tensor<6x6xf32>
  return %r : tensor<6x6xf32>
}
