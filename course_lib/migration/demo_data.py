"""What every backend of the demo shares: configuration, initial weights, batches.

NumPy only (no torch, no MindSpore), so the mindtorch process, the PyTorch process and the
native MindSpore process start from exactly the same numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DemoConfig:
    vocab_size: int = 8000
    hidden: int = 64
    heads: int = 4
    layers: int = 1
    max_len: int = 32
    batch_size: int = 8


def initial_weights(cfg: DemoConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2 style initialisation, keyed by the PyTorch ``state_dict`` names, so every
    backend starts from exactly the same numbers."""
    rng = np.random.default_rng(seed)
    h, V = cfg.hidden, cfg.vocab_size

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w = {"tok.weight": normal(V, h), "pos.weight": normal(cfg.max_len, h)}
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        w |= {p + "ln1.weight": np.ones(h, np.float32), p + "ln1.bias": np.zeros(h, np.float32),
              p + "attn.qkv.weight": normal(3 * h, h), p + "attn.qkv.bias": np.zeros(3 * h, np.float32),
              p + "attn.proj.weight": normal(h, h), p + "attn.proj.bias": np.zeros(h, np.float32),
              p + "ln2.weight": np.ones(h, np.float32), p + "ln2.bias": np.zeros(h, np.float32),
              p + "fc.weight": normal(4 * h, h), p + "fc.bias": np.zeros(4 * h, np.float32),
              p + "out.weight": normal(h, 4 * h), p + "out.bias": np.zeros(h, np.float32)}
    w |= {"ln_f.weight": np.ones(h, np.float32), "ln_f.bias": np.zeros(h, np.float32),
          "head.weight": normal(V, h)}
    return w


def training_batches(cfg: DemoConfig, steps: int, num_docs: int = 400):
    """``steps`` batches of (inputs, labels) int64 arrays from the course's news corpus."""
    from ..data import news_documents
    from ..pipelines import pack_blocks
    from ..tokenizer import load_tokenizer
    tok = load_tokenizer()
    blocks = pack_blocks(tok.encode_batch(news_documents()[:num_docs]), cfg.max_len, tok.eos_id)
    need = steps * cfg.batch_size
    if len(blocks) < need:
        blocks = np.concatenate([blocks] * math.ceil(need / len(blocks)))
    blocks = blocks[:need].astype(np.int64).reshape(steps, cfg.batch_size, cfg.max_len + 1)
    return [(b[:, :-1], b[:, 1:]) for b in blocks]
