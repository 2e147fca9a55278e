"""Export the transformer block of `transformer_block.mlir` (run this to make it again).

    python3 -m venv /work/turbine-venv && /work/turbine-venv/bin/pip install iree-turbine torch
    /work/turbine-venv/bin/python examples/model/export_transformer.py

A pre-norm transformer block in PyTorch: layer norm, 4-head self-attention (q/k/v/out
projections, softmax(q k^T / sqrt(d)) v), residual, layer norm, a GELU MLP (32 -> 128 -> 32),
residual. Weights are random (torch.manual_seed(0)); nothing is downloaded. iree-turbine's
`aot.export` turns it into MLIR (torch dialect, the weights inlined as constants), which
`amdgpu-run examples/model/transformer_block.mlir` compiles with IREE and runs on any
device, checked against IREE's CPU runtime.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from iree.turbine import aot
from torch import nn

D_MODEL, HEADS, SEQ, HIDDEN = 32, 4, 8, 128


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.out = nn.Linear(D_MODEL, D_MODEL)
        self.norm2 = nn.LayerNorm(D_MODEL)
        self.up = nn.Linear(D_MODEL, HIDDEN)
        self.down = nn.Linear(HIDDEN, D_MODEL)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, s, HEADS, d // HEADS).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // HEADS)
        y = torch.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


def main() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    example = torch.randn(1, SEQ, D_MODEL)
    exported = aot.export(model, example, function_name="transformer_block")
    out = Path(__file__).with_name("transformer_block.mlir")
    out.write_text(str(exported.mlir_module))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
