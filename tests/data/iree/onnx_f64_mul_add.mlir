// ONNX Mul then Add on DOUBLE tensors, as IREE's ONNX importer writes them: the sum needs
// f64 (1 + 1e-12 is 1.0 in f32).
module {
  func.func @test_f64_mul_add(%arg0: !torch.vtensor<[8],f64>, %arg1: !torch.vtensor<[8],f64>) -> !torch.vtensor<[8],f64> attributes {torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 19 : si64, torch.onnx_meta.producer_name = "backend-test", torch.onnx_meta.producer_version = ""} {
    %none = torch.constant.none
    %0 = torch.operator "onnx.Mul"(%arg0, %arg1) : (!torch.vtensor<[8],f64>, !torch.vtensor<[8],f64>) -> !torch.vtensor<[8],f64>
    %1 = torch.operator "onnx.Add"(%0, %arg0) : (!torch.vtensor<[8],f64>, !torch.vtensor<[8],f64>) -> !torch.vtensor<[8],f64>
    return %1 : !torch.vtensor<[8],f64>
  }
}
