"""`gpt2-decode`: a GPT-2-style decoder with a KV cache: prefill, then N decode steps.

    .venv/bin/python examples/models/gpt2_decode.py OUT_DIR [--steps 4] [--dtype f16|bf16]

The model is `transformers`' own GPT2LMHeadModel built from a GPT2Config (2 layers, 4 heads,
width 64, vocabulary 256, 64 positions) with seeded weights (torch.manual_seed(0)): nothing
is downloaded. Two programs are exported with iree-turbine, over the model's own modules
(its layer norms, Conv1D projections, MLPs, embeddings and LM head):

- prefill(ids[1,T]) -> (logits[1,T,V], k[L,1,H,S,D], v[L,1,H,S,D]): the prompt, causal
  attention, the cache filled at positions 0..T-1 (S = 32 slots);
- decode(ids[1,1], pos[1], k, v) -> (logits[1,1,V], k, v): one token at position `pos`, its
  key and value written into slot `pos` (a one-hot blend: no scatter), attention over the
  slots 0..pos.

The cache the driver carries between calls stays in device buffers. The reference is
transformers' own forward with its own cache (past_key_values): prefill logits, then each
decode step on the greedy token PyTorch chose. With --dtype f16/bf16 the seeded model is
converted to that type (weights, cache, arithmetic) and the reference is transformers' own
forward in that type on the CPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DTYPES, export_program, to_numpy  # noqa: E402

LAYERS, HEADS, WIDTH, VOCAB, POSITIONS = 2, 4, 64, 256, 64
SLOTS, PROMPT = 32, 8


def hf_model(dtype: torch.dtype = torch.float32) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=WIDTH, n_layer=LAYERS,
                        n_head=HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval().to(dtype)


def _hidden(dtype: torch.dtype) -> float:
    """The score of a masked position: -1e9, or f16's lowest (-65504: no -1e9 in f16)."""
    return max(-1e9, torch.finfo(dtype).min)


class _Cached(nn.Module):
    """The HF model's modules, run with a fixed-size cache."""

    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.hf = hf
        self.dh = WIDTH // HEADS

    def _heads(self, t: torch.Tensor) -> torch.Tensor:  # [1, T, W] -> [1, H, T, D]
        return t.reshape(1, t.shape[1], HEADS, self.dh).transpose(1, 2)

    def _block(self, i: int, x: torch.Tensor, attend) -> tuple[torch.Tensor, ...]:
        block = self.hf.transformer.h[i]
        q, k, v = block.attn.c_attn(block.ln_1(x)).split(WIDTH, dim=-1)
        y, kc, vc = attend(self._heads(q), self._heads(k), self._heads(v))
        y = y.transpose(1, 2).reshape(1, x.shape[1], WIDTH)
        x = x + block.attn.c_proj(y)
        return x + block.mlp(block.ln_2(x)), kc, vc

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.hf.lm_head(self.hf.transformer.ln_f(x))


class Prefill(_Cached):
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t = ids.shape[1]
        on = ids.device  # CPU for the export, CUDA for the benchmark's eager run
        x = self.hf.transformer.wte(ids) + self.hf.transformer.wpe(torch.arange(t, device=on))
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=on))
        pad = torch.zeros(1, HEADS, SLOTS - t, self.dh, device=on, dtype=x.dtype)
        ks, vs = [], []

        def attend(q, k, v):
            s = (q @ k.transpose(-2, -1)) / math.sqrt(self.dh)
            s = torch.where(causal, s, torch.full_like(s, _hidden(s.dtype)))
            return torch.softmax(s, -1) @ v, torch.cat([k, pad], 2), torch.cat([v, pad], 2)

        for i in range(LAYERS):
            x, kc, vc = self._block(i, x, attend)
            ks.append(kc)
            vs.append(vc)
        return self._logits(x), torch.stack(ks), torch.stack(vs)


class Decode(_Cached):
    def forward(self, ids, pos, k_cache, v_cache) -> tuple[torch.Tensor, ...]:
        x = self.hf.transformer.wte(ids) + self.hf.transformer.wpe(pos).unsqueeze(0)
        slots = torch.arange(SLOTS, device=ids.device)
        write = (slots == pos).to(x.dtype).reshape(1, 1, SLOTS, 1)
        seen = (slots <= pos).reshape(1, 1, 1, SLOTS)
        ks, vs = [], []
        for i in range(LAYERS):
            def attend(q, k, v, i=i):
                kc = k_cache[i] * (1 - write) + k * write
                vc = v_cache[i] * (1 - write) + v * write
                s = (q @ kc.transpose(-2, -1)) / math.sqrt(self.dh)
                s = torch.where(seen, s, torch.full_like(s, _hidden(s.dtype)))
                return torch.softmax(s, -1) @ vc, kc, vc

            x, kc, vc = self._block(i, x, attend)
            ks.append(kc)
            vs.append(vc)
        return self._logits(x), torch.stack(ks), torch.stack(vs)


def reference(hf: nn.Module, prompt: torch.Tensor, steps: int) -> dict:
    """transformers' own forward and cache: prefill logits, then greedy decode steps."""
    with torch.no_grad():
        out = hf(prompt, use_cache=True)
        logits, past = [to_numpy(out.logits)], out.past_key_values
        tokens = []
        for _ in range(steps):
            token = out.logits[:, -1:].argmax(-1)
            tokens.append(int(token))
            out = hf(token, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits.append(to_numpy(out.logits))
    return {"tokens": np.array(tokens, np.int64), "logits": logits}


def main() -> None:
    ap = argparse.ArgumentParser(description="export a GPT-2-style decoder with a KV cache")
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                    help="f16/bf16: weights, cache and arithmetic in that type")
    args = ap.parse_args()
    if PROMPT + args.steps > SLOTS:
        raise SystemExit(f"--steps {args.steps}: the cache holds {SLOTS} positions; use at "
                         f"most {SLOTS - PROMPT}")
    hf = hf_model(DTYPES[args.dtype])
    prompt = torch.from_numpy(np.random.default_rng(0).integers(0, VOCAB, (1, PROMPT)))
    ref = reference(hf, prompt, args.steps)
    prefill, decode = Prefill(hf).eval(), Decode(hf).eval()
    export_program(prefill, (prompt,), args.out / "gpt2_prefill.mlir", "prefill")
    with torch.no_grad():
        _, k, v = prefill(prompt)
    token = torch.tensor([[int(ref["tokens"][0]) if args.steps else 0]])
    export_program(decode, (token, torch.tensor([PROMPT]), k, v),
                   args.out / "gpt2_decode.mlir", "decode")
    # Ours against transformers' own cache, before anything is exported for the driver
    # (f16/bf16: within a few units of the type's last place, as the driver is checked).
    def off(logits: torch.Tensor, want: np.ndarray) -> float:
        return float(np.abs(logits.float().numpy() - want.astype(np.float32)).max())

    with torch.no_grad():
        err = off(prefill(prompt)[0], ref["logits"][0])
        for step, tok in enumerate(ref["tokens"]):
            logits, k, v = decode(torch.tensor([[int(tok)]]), torch.tensor([PROMPT + step]), k, v)
            err = max(err, off(logits, ref["logits"][step + 1]))
    if err > {"f32": 1e-4, "f16": 2e-2, "bf16": 6e-2}[args.dtype]:
        raise SystemExit(f"the cached decoder differs from transformers' own by {err}")
    np.savez(args.out / "gpt2_reference.npz", prompt=prompt.numpy(), tokens=ref["tokens"],
             **{f"logits{i}": a for i, a in enumerate(ref["logits"])})


if __name__ == "__main__":
    main()
