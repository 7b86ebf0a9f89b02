"""Encoder-style Transformer building blocks written as plain ``nn.Cell`` subclasses.

Chapter 01 builds these step by step; chapter 02 trains a classifier made of them.

Conventions (the same as ``mindspore.nn.MultiheadAttention`` and PyTorch, so masks can be
passed to either unchanged):

* activations are **batch-first**: ``(batch, seq, features)``;
* a *bool* mask value ``True`` means "do NOT attend here":
  ``key_padding_mask`` is ``(batch, src_len)`` (True on padding tokens),
  ``attn_mask`` is ``(tgt_len, src_len)`` or ``(batch, tgt_len, src_len)``
  (e.g. :func:`causal_mask`).

Every ``construct`` checks ranks and sizes first and raises a ``ValueError`` that says what
shape was expected. The checks use only static shapes, so they also work in GRAPH_MODE.
"""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from .layers import MASK_VALUE

# The decoder layers' value (``layers.MASK_VALUE``, -1e4). Here masked scores are REPLACED by
# it (``ops.masked_fill``): finite, so a fully masked row gives uniform weights instead of NaN,
# and exp() of it is exactly 0 in float32. The mask itself keeps PyTorch's
# ``nn.MultiheadAttention`` convention (bool, True = may NOT attend), which chapter 01 teaches
# for migration. The decoders take Hugging Face's attention_mask (1 = a real token) and ADD
# the same value as a bias (``layers.attention_bias``), as the Hugging Face model code does:
# the same weights whenever a row keeps one visible key; a fully masked row then gets the
# unmasked weights (softmax ignores a constant shift), not uniform ones.
MASK_FILL = MASK_VALUE
LAYER_NORM_EPS = 1e-5  # PyTorch's default; MindSpore's nn.LayerNorm default is 1e-7


def causal_mask(length: int) -> ms.Tensor:
    """``(length, length)`` bool mask, True above the diagonal: position i may only attend
    to positions <= i (what a decoder / language model uses)."""
    if length < 1:
        raise ValueError(f"causal_mask needs length >= 1, got {length}")
    return ms.Tensor(np.triu(np.ones((length, length), dtype=bool), k=1))


def padding_mask(input_ids: ms.Tensor, pad_id: int = 0) -> ms.Tensor:
    """``(batch, seq)`` bool mask, True where ``input_ids == pad_id`` (keys to ignore)."""
    return ops.equal(input_ids, pad_id)


def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
    """softmax(q k^T / sqrt(d)) v for ``(batch, heads, len, head_dim)`` tensors, the scores
    where the bool ``mask`` is True replaced by MASK_FILL (-1e4) before the softmax.

    Returns ``(output, weights)``. Scores and softmax run in float32 even when the
    projections run in float16 (mixed precision), because softmax over float16 scores
    overflows easily.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = ops.matmul(q, k.swapaxes(-1, -2)).astype(ms.float32) * scale
    if mask is not None:
        scores = ops.masked_fill(scores, mask, ms.Tensor(MASK_FILL, ms.float32))
    weights = ops.softmax(scores, axis=-1)
    if dropout is not None:
        weights = dropout(weights)
    return ops.matmul(weights.astype(v.dtype), v), weights


def _check_features(x, name, features):
    """Raise a helpful ValueError unless ``x`` is ``(batch, seq, features)``."""
    if x.ndim != 3:
        raise ValueError(f"{name} must have shape (batch, seq, {features}) (batch-first), "
                         f"got rank {x.ndim} shape {x.shape}. Add a batch axis with "
                         f"x.expand_dims(0) for a single sequence.")
    if x.shape[-1] != features:
        raise ValueError(f"{name} has {x.shape[-1]} features in its last axis, but this "
                         f"layer was built for {features}: got shape {x.shape}.")


def _check_masks(key_padding_mask, attn_mask, batch, tgt_len, src_len):
    if key_padding_mask is not None:
        if key_padding_mask.dtype != ms.bool_:
            raise TypeError(f"key_padding_mask must be a bool Tensor (True = ignore that key), "
                            f"got dtype {key_padding_mask.dtype}. Build it with "
                            f"padding_mask(input_ids) or (ids == pad_id).")
        if key_padding_mask.shape != (batch, src_len):
            raise ValueError(f"key_padding_mask must have shape (batch, src_len) = "
                             f"{(batch, src_len)}, got {key_padding_mask.shape}.")
    if attn_mask is not None:
        if attn_mask.dtype != ms.bool_:
            raise TypeError(f"attn_mask must be a bool Tensor (True = may not attend), "
                            f"got dtype {attn_mask.dtype}.")
        if attn_mask.shape != (tgt_len, src_len) and attn_mask.shape != (batch, tgt_len, src_len):
            raise ValueError(f"attn_mask must have shape (tgt_len, src_len) = "
                             f"{(tgt_len, src_len)} or (batch, tgt_len, src_len), "
                             f"got {attn_mask.shape}.")


class _MultiHeadBase(nn.Cell):
    """Projections + head split/merge shared by self- and cross-attention."""

    def __init__(self, embed_dim: int, num_heads: int, kv_dim: int | None = None,
                 dropout: float = 0.0, has_bias: bool = True):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got {embed_dim}, {num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}: "
                             "every head gets embed_dim // num_heads features.")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kv_dim = embed_dim if kv_dim is None else kv_dim
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Dense(embed_dim, embed_dim, has_bias=has_bias)
        self.k_proj = nn.Dense(self.kv_dim, embed_dim, has_bias=has_bias)
        self.v_proj = nn.Dense(self.kv_dim, embed_dim, has_bias=has_bias)
        self.out_proj = nn.Dense(embed_dim, embed_dim, has_bias=has_bias)
        self.attn_dropout = nn.Dropout(p=dropout) if dropout > 0 else None

    def _split_heads(self, x):
        b, t, _ = x.shape
        return x.reshape(b, t, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)

    def _attend(self, query, context, key_padding_mask, attn_mask):
        _check_features(query, "query", self.embed_dim)
        _check_features(context, "key/value input", self.kv_dim)
        b, t, _ = query.shape
        if context.shape[0] != b:
            raise ValueError(f"query has batch size {b} but key/value input has "
                             f"{context.shape[0]}: they must describe the same examples.")
        s = context.shape[1]
        _check_masks(key_padding_mask, attn_mask, b, t, s)
        mask = None
        if key_padding_mask is not None:
            mask = key_padding_mask.reshape(b, 1, 1, s)          # same for every head/query
        if attn_mask is not None:
            am = attn_mask.reshape(1, 1, t, s) if attn_mask.ndim == 2 else attn_mask.reshape(b, 1, t, s)
            mask = am if mask is None else ops.logical_or(mask, am)
        q = self._split_heads(self.q_proj(query))
        k = self._split_heads(self.k_proj(context))
        v = self._split_heads(self.v_proj(context))
        out, _ = scaled_dot_product_attention(q, k, v, mask, self.attn_dropout)
        out = out.transpose(0, 2, 1, 3).reshape(b, t, self.embed_dim)   # merge heads
        return self.out_proj(out)


class CrossAttention(_MultiHeadBase):
    """Multi-head attention whose queries come from one sequence and keys/values from
    another (decoder -> encoder, text -> image features, ...).

    ``construct(query, context, key_padding_mask=None, attn_mask=None)``:
    ``query`` ``(B, T, embed_dim)``, ``context`` ``(B, S, kv_dim)`` -> ``(B, T, embed_dim)``.
    ``key_padding_mask`` ``(B, S)`` marks padded *context* positions.
    """

    def construct(self, query, context, key_padding_mask=None, attn_mask=None):
        return self._attend(query, context, key_padding_mask, attn_mask)


class SelfAttention(_MultiHeadBase):
    """Multi-head self-attention: queries, keys and values all come from ``x``.

    ``construct(x, key_padding_mask=None, attn_mask=None)``: ``(B, T, E) -> (B, T, E)``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, has_bias: bool = True):
        super().__init__(embed_dim, num_heads, None, dropout, has_bias)

    def construct(self, x, key_padding_mask=None, attn_mask=None):
        return self._attend(x, x, key_padding_mask, attn_mask)


class FeedForward(nn.Cell):
    """Position-wise MLP: Dense(E->F) -> GELU -> Dense(F->E), applied to every token."""

    def __init__(self, embed_dim: int, ffn_dim: int, dropout: float = 0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.fc1 = nn.Dense(embed_dim, ffn_dim)
        self.act = nn.GELU(approximate=False)  # exact erf GELU, like torch's default
        self.fc2 = nn.Dense(ffn_dim, embed_dim)
        self.dropout = nn.Dropout(p=dropout) if dropout > 0 else None

    def construct(self, x):
        _check_features(x, "FeedForward input", self.embed_dim)
        h = self.act(self.fc1(x))
        if self.dropout is not None:
            h = self.dropout(h)
        return self.fc2(h)


class TransformerBlock(nn.Cell):
    """One encoder layer: self-attention and feed-forward, each wrapped in a residual
    connection and a LayerNorm.

    ``norm_first=True`` (pre-norm, what modern LLMs use: ``x + f(norm(x))``) trains stably
    without warm-up tricks; ``False`` is the original 2017 post-norm ``norm(x + f(x))``.
    Numerically equal to ``torch.nn.TransformerEncoderLayer(..., activation="gelu",
    batch_first=True, norm_first=...)`` with the same weights (tested).
    """

    def __init__(self, embed_dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.0,
                 norm_first: bool = True):
        super().__init__()
        self.norm_first, self.embed_dim = norm_first, embed_dim
        self.attn = SelfAttention(embed_dim, num_heads, dropout)
        self.ffn = FeedForward(embed_dim, ffn_dim, dropout)
        self.norm1 = nn.LayerNorm((embed_dim,), epsilon=LAYER_NORM_EPS)
        self.norm2 = nn.LayerNorm((embed_dim,), epsilon=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(p=dropout) if dropout > 0 else None

    def _drop(self, x):
        return x if self.dropout is None else self.dropout(x)

    def construct(self, x, key_padding_mask=None, attn_mask=None):
        _check_features(x, "TransformerBlock input", self.embed_dim)
        if self.norm_first:
            x = x + self._drop(self.attn(self.norm1(x), key_padding_mask, attn_mask))
            x = x + self._drop(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self._drop(self.attn(x, key_padding_mask, attn_mask)))
            x = self.norm2(x + self._drop(self.ffn(x)))
        return x


class TransformerEncoder(nn.Cell):
    """A stack of ``num_layers`` :class:`TransformerBlock` (plus a final LayerNorm when the
    blocks are pre-norm, since their output is otherwise never normalised)."""

    def __init__(self, num_layers: int, embed_dim: int, num_heads: int, ffn_dim: int,
                 dropout: float = 0.0, norm_first: bool = True):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.layers = nn.CellList([TransformerBlock(embed_dim, num_heads, ffn_dim, dropout, norm_first)
                                   for _ in range(num_layers)])
        self.final_norm = nn.LayerNorm((embed_dim,), epsilon=LAYER_NORM_EPS) if norm_first else None

    def construct(self, x, key_padding_mask=None, attn_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask, attn_mask)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x


# --- parameter counting ---------------------------------------------------------------

def count_parameters(cell_or_params, trainable_only: bool = False) -> int:
    """Number of scalar weights in a Cell (only those with ``requires_grad`` if asked) or in
    a list of Parameters. Reads shapes only, so it works on lazily built models too."""
    if isinstance(cell_or_params, nn.Cell):
        params = (cell_or_params.trainable_params() if trainable_only
                  else cell_or_params.get_parameters())
    else:
        params = [p for p in cell_or_params if p.requires_grad or not trainable_only]
    return int(sum(int(np.prod(p.shape)) for p in params))


def attention_param_count(embed_dim: int, kv_dim: int | None = None, has_bias: bool = True) -> int:
    """Closed form for :class:`SelfAttention` / :class:`CrossAttention`:
    q and out projections E*E (+E), k and v projections kv_dim*E (+E)."""
    kv = embed_dim if kv_dim is None else kv_dim
    weights = 2 * embed_dim * embed_dim + 2 * kv * embed_dim
    return weights + (4 * embed_dim if has_bias else 0)


def transformer_block_param_count(embed_dim: int, ffn_dim: int) -> int:
    """Closed form for :class:`TransformerBlock`: attention 4E^2+4E, feed-forward
    2EF+F+E, two LayerNorms 2*2E. Independent of the number of heads."""
    e, f = embed_dim, ffn_dim
    return attention_param_count(e) + (2 * e * f + f + e) + 4 * e
