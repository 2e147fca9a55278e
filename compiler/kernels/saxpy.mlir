// saxpy: y = a * x + y over 1024 floats; `a` is a 0-d tensor input (a device buffer).
#scalar = affine_map<(d0) -> ()>
#id = affine_map<(d0) -> (d0)>
func.func @saxpy(%a: tensor<f32>, %x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {
  %init = tensor.empty() : tensor<1024xf32>
  %r = linalg.generic {indexing_maps = [#scalar, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%a, %x, %y : tensor<f32>, tensor<1024xf32>, tensor<1024xf32>)
      outs(%init : tensor<1024xf32>) {
  ^bb0(%s: f32, %xi: f32, %yi: f32, %out: f32):
    %m = arith.mulf %s, %xi : f32
    %v = arith.addf %m, %yi : f32
    linalg.yield %v : f32
  } -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}
