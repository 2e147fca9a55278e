"""`cnn`: a small convolutional net on an image tensor, exported with iree-turbine.

    .venv/bin/python examples/models/cnn.py OUT_DIR [--dtype f16|bf16]   # OUT_DIR/cnn.mlir, .npz

Conv(3->8, 3x3) + BatchNorm + ReLU, max-pool 2x2, Conv(8->16, 3x3) + BatchNorm + ReLU,
global average pool, Linear(16->10). Weights and batch-norm statistics are seeded
(torch.manual_seed(0)); the batch norms are folded into the convolutions before export
(torch.ao's fuse_conv_bn_eval), as an inference export does. Input: 2 images 3x16x16.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DTYPES, export_program  # noqa: E402

BATCH, SIZE = 2, 16


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def build() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    model = SmallCNN()
    for bn in (model.bn1, model.bn2):  # statistics as a trained net has them
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.2, 0.2)
    model.eval()
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    model.conv1 = fuse_conv_bn_eval(model.conv1, model.bn1)
    model.conv2 = fuse_conv_bn_eval(model.conv2, model.bn2)
    model.bn1, model.bn2 = nn.Identity(), nn.Identity()
    image = torch.from_numpy(
        np.random.default_rng(0).standard_normal((BATCH, 3, SIZE, SIZE)).astype(np.float32))
    return model, (image,)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="export the small CNN with iree-turbine")
    ap.add_argument("out", type=Path)
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                    help="f16/bf16: weights, image and arithmetic in that precision")
    args = ap.parse_args()
    model, inputs = build()
    if args.dtype != "f32":  # folded first (in f32), then converted, as a deployment does
        dtype = DTYPES[args.dtype]
        model, inputs = model.to(dtype), tuple(t.to(dtype) for t in inputs)
    export_program(model, inputs, args.out / "cnn.mlir", "cnn")


if __name__ == "__main__":
    main()
