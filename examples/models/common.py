"""What the export scripts of examples/models share: iree-turbine's export of a module on
fixed inputs, with PyTorch's own outputs saved beside the MLIR as the reference.

    export_program(model, inputs, OUT/NAME.mlir, NAME)
      -> OUT/NAME.mlir               (torch dialect, weights inlined as dense resources)
         OUT/NAME.npz                (in0, in1, ... and out0, out1, ...: PyTorch's eager run)

numpy has no bf16: bf16 tensors are saved as ml_dtypes' bfloat16, which an .npz keeps as
2-byte void ('|V2'); amdgpu.model_zoo reads those back as bfloat16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as numpy; bf16 as ml_dtypes.bfloat16 (exact: bf16 values are f32 values)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


class _BitsOfBf16:
    """numpy for iree-turbine's ir_utils, whose inline weights go through np.array(tensor),
    which has no bf16 (TypeError: Got unsupported ScalarType BFloat16): a bf16 tensor is
    given as its 16-bit patterns, which the dense resource then holds under the bf16 type."""

    def __getattr__(self, name: str):
        return getattr(np, name)

    @staticmethod
    def array(obj, *args, **kwargs):
        if isinstance(obj, torch.Tensor) and obj.dtype == torch.bfloat16:
            obj = obj.view(torch.int16)
        return np.array(obj, *args, **kwargs)


def export_program(model: torch.nn.Module, inputs: tuple, mlir: Path, function: str) -> None:
    from iree.turbine import aot
    from iree.turbine.aot.support import ir_utils

    ir_utils.np = _BitsOfBf16()  # type: ignore[assignment]

    mlir.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        want = model(*inputs)
    outs = want if isinstance(want, (tuple, list)) else (want,)
    exported = aot.export(model, *inputs, function_name=function)
    tmp = mlir.with_suffix(".tmp")
    exported.save_mlir(str(tmp)) if hasattr(exported, "save_mlir") else tmp.write_text(
        str(exported.mlir_module))
    arrays = {f"in{i}": to_numpy(t) for i, t in enumerate(inputs)}
    arrays.update({f"out{i}": to_numpy(t) for i, t in enumerate(outs)})
    np.savez(mlir.with_suffix(".npz"), **arrays)
    tmp.replace(mlir)  # last: a present .mlir means a complete export
