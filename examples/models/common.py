"""What the export scripts of examples/models share: iree-turbine's export of a module on
fixed inputs, with PyTorch's own outputs saved beside the MLIR as the reference.

    export_program(model, inputs, OUT/NAME.mlir, NAME)
      -> OUT/NAME.mlir               (torch dialect, weights inlined as dense resources)
         OUT/NAME.npz                (in0, in1, ... and out0, out1, ...: PyTorch's eager run)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def export_program(model: torch.nn.Module, inputs: tuple, mlir: Path, function: str) -> None:
    from iree.turbine import aot

    mlir.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        want = model(*inputs)
    outs = want if isinstance(want, (tuple, list)) else (want,)
    exported = aot.export(model, *inputs, function_name=function)
    tmp = mlir.with_suffix(".tmp")
    exported.save_mlir(str(tmp)) if hasattr(exported, "save_mlir") else tmp.write_text(
        str(exported.mlir_module))
    arrays = {f"in{i}": t.detach().numpy() for i, t in enumerate(inputs)}
    arrays.update({f"out{i}": t.detach().numpy() for i, t in enumerate(outs)})
    np.savez(mlir.with_suffix(".npz"), **arrays)
    tmp.replace(mlir)  # last: a present .mlir means a complete export
