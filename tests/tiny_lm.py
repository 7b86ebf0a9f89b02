"""A causal LM small enough for unit tests, independent of the model chapters:
embedding -> (causal mixing via a cumulative mean) -> Dense -> logits (B, T, V)."""
from dataclasses import dataclass

import numpy as np
from mindspore import nn, ops


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 64
    hidden_size: int = 16
    num_layers: int = 1
    num_heads: int = 1
    max_seq_len: int = 32


class TinyLM(nn.Cell):
    def __init__(self, config: TinyConfig = TinyConfig()):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm((config.hidden_size,))
        self.mix = nn.Dense(config.hidden_size, config.hidden_size)
        self.head = nn.Dense(config.hidden_size, config.vocab_size)

    def construct(self, input_ids):
        h = self.embed(input_ids)
        # causal: position t sees the mean of positions <= t
        steps = ops.arange(1, h.shape[1] + 1).astype(h.dtype).reshape(1, -1, 1)
        h = h + ops.tanh(self.mix(ops.cumsum(h, 1) / steps))
        return self.head(self.norm(h)).astype(np.float32)
