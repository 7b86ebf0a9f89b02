"""An ordinary PyTorch model and training loop — the code a learner brings along.

Nothing in this file knows about MindSpore. ``run_torch_demo`` imports it either on the
real PyTorch or after ``import mindtorch`` (mindnlp's torch API over MindSpore), in which
case ``import torch`` below silently resolves to mindtorch. Only ``train_workaround`` has
one mindtorch-specific line, the documented workaround for CPU.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.register_buffer("future", torch.triu(torch.ones(max_len, max_len), diagonal=1).bool(),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, max_len)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.out = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """nanoGPT in miniature: token + position embeddings, pre-LN blocks, LM head."""

    def __init__(self, vocab_size: int, hidden: int, heads: int, layers: int, max_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, hidden)
        self.pos = nn.Embedding(max_len, hidden)
        self.blocks = nn.ModuleList([Block(hidden, heads, max_len) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab_size, bias=False)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1])
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(model, inputs, labels):
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)


def train_textbook(model, batches, lr: float = 1e-3):
    """The loop in every PyTorch tutorial: zero_grad, backward, AdamW step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for inputs, labels in batches:
        opt.zero_grad()
        loss = lm_loss(model, inputs, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_sgd(model, batches, lr: float):
    """Plain SGD written by hand: backward, then p -= lr * p.grad under no_grad."""
    params = list(model.parameters())
    losses = []
    for inputs, labels in batches:
        for p in params:
            p.grad = None
        loss = lm_loss(model, inputs, labels)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
        losses.append(loss.item())
    return losses


def train_workaround(model, batches, lr: float):
    """``train_sgd`` with the one change mindtorch needs on CPU: gradients come from
    ``torch.autograd.value_and_grad`` (mindtorch-only API) instead of ``loss.backward()``."""
    params = list(model.parameters())
    step = torch.autograd.value_and_grad(lambda i, l: lm_loss(model, i, l), params)
    losses = []
    for inputs, labels in batches:
        for p in params:
            p.grad = None
        loss = step(inputs, labels)          # attaches p.grad for every p in params
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
        losses.append(loss.item())
    return losses
