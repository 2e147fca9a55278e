// Host control flow: x * y when sum(x) > 0, else y unchanged (an input returned as the
// result on one path, a fresh allocation on the other).
func.func @pick(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {
  %init = tensor.empty() : tensor<f32>
  %z = arith.constant 0.0 : f32
  %zf = linalg.fill ins(%z : f32) outs(%init : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                       iterator_types = ["reduction"]}
      ins(%x : tensor<8xf32>) outs(%zf : tensor<f32>) {
  ^bb0(%i: f32, %o: f32):
    %t = arith.addf %i, %o : f32
    linalg.yield %t : f32
  } -> tensor<f32>
  %sv = tensor.extract %s[] : tensor<f32>
  %c = arith.cmpf ogt, %sv, %z : f32
  %r = scf.if %c -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %m = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                          affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]}
        ins(%x, %y : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %t = arith.mulf %a, %b : f32
      linalg.yield %t : f32
    } -> tensor<8xf32>
    scf.yield %m : tensor<8xf32>
  } else {
    scf.yield %y : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}
