// Row sums and row maxima: with subgroup operations in the Vulkan target IREE lowers these
// to GroupNonUniformFAdd / FMax over the device's subgroup size.
func.func @subgroup_reduce(%a: tensor<16x1000xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %zero = arith.constant 0.0 : f32
  %low = arith.constant -3.0e38 : f32
  %e = tensor.empty() : tensor<16xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %fm = linalg.fill ins(%low : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
       ins(%a : tensor<16x1000xf32>) outs(%fs : tensor<16xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %r = arith.addf %x, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
       ins(%a : tensor<16x1000xf32>) outs(%fm : tensor<16xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %r = arith.maximumf %x, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  return %s, %m : tensor<16xf32>, tensor<16xf32>
}
