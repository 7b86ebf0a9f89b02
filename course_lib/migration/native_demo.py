"""``torch_demo.TinyGPT`` translated to native MindSpore, line by line, using the mapping
table (Dense, LayerNorm with epsilon=1e-5, exact GELU, masked_fill, swapaxes...)."""
from __future__ import annotations

import math

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from .demo_data import DemoConfig
from .mapping import builtin_param_name


# --------------------------------------------------------------------------------------
# The native MindSpore model
# --------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Cell):
    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Dense(hidden, 3 * hidden)
        self.proj = nn.Dense(hidden, hidden)
        self.future = Tensor(np.triu(np.ones((max_len, max_len), bool), k=1))

    def construct(self, x):
        B, T, C = x.shape
        q, k, v = ops.split(self.qkv(x), C, -1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).swapaxes(1, 2) for t in (q, k, v))
        scores = ops.matmul(q, k.swapaxes(-2, -1)) / math.sqrt(C // self.heads)
        scores = ops.masked_fill(scores, self.future[:T, :T], float("-inf"))
        out = ops.matmul(ops.softmax(scores, axis=-1), v)
        return self.proj(out.swapaxes(1, 2).reshape(B, T, C))


class Block(nn.Cell):
    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm((hidden,), epsilon=1e-5)       # PyTorch's default eps
        self.attn = CausalSelfAttention(hidden, heads, max_len)
        self.ln2 = nn.LayerNorm((hidden,), epsilon=1e-5)
        self.fc = nn.Dense(hidden, 4 * hidden)
        self.out = nn.Dense(4 * hidden, hidden)
        self.gelu = nn.GELU(approximate=False)                 # PyTorch's exact GELU

    def construct(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Cell):
    def __init__(self, vocab_size: int, hidden: int, heads: int, layers: int, max_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, hidden)
        self.pos = nn.Embedding(max_len, hidden)
        self.blocks = nn.CellList([Block(hidden, heads, max_len) for _ in range(layers)])
        self.ln_f = nn.LayerNorm((hidden,), epsilon=1e-5)
        self.head = nn.Dense(hidden, vocab_size, has_bias=False)

    def construct(self, ids):
        positions = ops.arange(ids.shape[1], dtype=ms.int32)
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(cfg: DemoConfig) -> TinyGPT:
    return TinyGPT(cfg.vocab_size, cfg.hidden, cfg.heads, cfg.layers, cfg.max_len)


def load_torch_named(cell: nn.Cell, weights: dict[str, np.ndarray]) -> None:
    """Set a Cell's parameters from PyTorch-named arrays (LayerNorm weight -> gamma...).
    Strict: every parameter of the Cell must be set, every array must be used."""
    types = {name: type(c).__name__ for name, c in cell.cells_and_names()}
    params = {p.name: p for p in cell.get_parameters()}
    used = set()
    for name, value in weights.items():
        owner, _, suffix = name.rpartition(".")
        ms_name = f"{owner}.{builtin_param_name(types.get(owner, ''), suffix)}"
        if ms_name not in params:
            raise KeyError(f"{name!r} -> {ms_name!r} is not a parameter of {type(cell).__name__}")
        if tuple(params[ms_name].shape) != value.shape:
            raise ValueError(f"{ms_name}: shape {tuple(params[ms_name].shape)} vs {value.shape}")
        params[ms_name].set_data(Tensor(value))
        used.add(ms_name)
    missing = sorted(set(params) - used)
    if missing:
        raise KeyError(f"parameters not set from the weights: {missing}")


def lm_loss(model, inputs, labels):
    logits = model(inputs)
    return ops.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                             ignore_index=-100)


def train_sgd(model, batches, lr: float) -> list[float]:
    """The same hand-written SGD as ``torch_demo.train_sgd``, the MindSpore way: gradients
    from ``ms.value_and_grad``, then ``p -= lr * g`` in place (``ops.assign_sub``), and the
    loss read every step. ``batches``: (inputs, labels) int32 Tensors."""
    params = model.trainable_params()
    grad_fn = ms.value_and_grad(lambda i, l: lm_loss(model, i, l), None, params)
    losses = []
    for inputs, labels in batches:
        loss, grads = grad_fn(inputs, labels)
        for p, g in zip(params, grads):
            ops.assign_sub(p, lr * g)
        losses.append(float(loss.asnumpy()))
    return losses
