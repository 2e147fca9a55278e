// i1 in IREE's packed storage (8 per byte): a comparison stored as bits and an xor of two
// bit vectors, read back as the bytes that hold them.
func.func @i1_packed(%a: tensor<16xi8>, %x: tensor<2xi8>, %y: tensor<2xi8>)
    -> (tensor<2xi8>, tensor<2xi8>) {
  %zero = arith.constant 0 : i8
  %e = tensor.empty() : tensor<16xi1, #iree_encoding.packed_storage>
  %c = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
       ins(%a : tensor<16xi8>) outs(%e : tensor<16xi1, #iree_encoding.packed_storage>) {
  ^bb0(%in: i8, %out: i1):
    %gt = arith.cmpi sgt, %in, %zero : i8
    linalg.yield %gt : i1
  } -> tensor<16xi1, #iree_encoding.packed_storage>
  %cb = flow.tensor.bitcast %c : tensor<16xi1, #iree_encoding.packed_storage> -> tensor<2xi8>
  %xb = flow.tensor.bitcast %x : tensor<2xi8> -> tensor<16xi1, #iree_encoding.packed_storage>
  %yb = flow.tensor.bitcast %y : tensor<2xi8> -> tensor<16xi1, #iree_encoding.packed_storage>
  %e2 = tensor.empty() : tensor<16xi1, #iree_encoding.packed_storage>
  %z = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                        affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
       ins(%xb, %yb : tensor<16xi1, #iree_encoding.packed_storage>,
                      tensor<16xi1, #iree_encoding.packed_storage>)
       outs(%e2 : tensor<16xi1, #iree_encoding.packed_storage>) {
  ^bb0(%p: i1, %q: i1, %out: i1):
    %r = arith.xori %p, %q : i1
    linalg.yield %r : i1
  } -> tensor<16xi1, #iree_encoding.packed_storage>
  %zb = flow.tensor.bitcast %z : tensor<16xi1, #iree_encoding.packed_storage> -> tensor<2xi8>
  return %cb, %zb : tensor<2xi8>, tensor<2xi8>
}
