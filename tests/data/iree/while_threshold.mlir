// Host control flow: doubles x until sum(|x|) crosses 100. IREE reads the sum back to the
// host each iteration (hal.buffer.load) and branches on it (cf.cond_br).
func.func @grow(%x: tensor<4xf32>) -> tensor<4xf32> {
  %lim = arith.constant 100.0 : f32
  %z = arith.constant 0.0 : f32
  %r = scf.while (%a = %x) : (tensor<4xf32>) -> tensor<4xf32> {
    %init = tensor.empty() : tensor<f32>
    %zf = linalg.fill ins(%z : f32) outs(%init : tensor<f32>) -> tensor<f32>
    %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                         iterator_types = ["reduction"]}
        ins(%a : tensor<4xf32>) outs(%zf : tensor<f32>) {
    ^bb0(%i: f32, %o: f32):
      %m = math.absf %i : f32
      %t = arith.addf %m, %o : f32
      linalg.yield %t : f32
    } -> tensor<f32>
    %sv = tensor.extract %s[] : tensor<f32>
    %c = arith.cmpf olt, %sv, %lim : f32
    scf.condition(%c) %a : tensor<4xf32>
  } do {
  ^bb0(%a: tensor<4xf32>):
    %init = tensor.empty() : tensor<4xf32>
    %d = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]}
        ins(%a : tensor<4xf32>) outs(%init : tensor<4xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = arith.addf %i, %i : f32
      linalg.yield %t : f32
    } -> tensor<4xf32>
    scf.yield %d : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
