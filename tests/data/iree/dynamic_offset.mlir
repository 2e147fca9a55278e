// A push constant computed on the host: the window's offset is read from a device tensor
// (clamped to 0..12), so IREE records this command buffer at run time (hal.device.queue.execute).
func.func @window(%x: tensor<16xf32>, %idx: tensor<i32>) -> tensor<4xf32> {
  %i = tensor.extract %idx[] : tensor<i32>
  %lo = arith.constant 0 : i32
  %hi = arith.constant 12 : i32
  %i0 = arith.maxsi %i, %lo : i32
  %i1 = arith.minsi %i0, %hi : i32
  %ii = arith.index_cast %i1 : i32 to index
  %s = tensor.extract_slice %x[%ii] [4] [1] : tensor<16xf32> to tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%s : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = arith.mulf %a, %a : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  return %m : tensor<4xf32>
}
