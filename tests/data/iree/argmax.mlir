func.func @argmax(%x: tensor<4x16xf32>) -> (tensor<4xf32>, tensor<4xi32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %z = arith.constant 0 : i32
  %e0 = tensor.empty() : tensor<4xf32>
  %e1 = tensor.empty() : tensor<4xi32>
  %v0 = linalg.fill ins(%ninf : f32) outs(%e0 : tensor<4xf32>) -> tensor<4xf32>
  %i0 = linalg.fill ins(%z : i32) outs(%e1 : tensor<4xi32>) -> tensor<4xi32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x16xf32>) outs(%v0, %i0 : tensor<4xf32>, tensor<4xi32>) {
  ^bb0(%a: f32, %m: f32, %mi: i32):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i32
    %gt = arith.cmpf ogt, %a, %m : f32
    %nm = arith.select %gt, %a, %m : f32
    %ni = arith.select %gt, %ji, %mi : i32
    linalg.yield %nm, %ni : f32, i32
  } -> (tensor<4xf32>, tensor<4xi32>)
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xi32>
}
