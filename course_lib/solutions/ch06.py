"""Reference solutions of chapter 06's code exercises (building Baichuan-13B), and the
realistic wrong versions the self-test feeds to the checkers.

Load one after trying: ``from course_lib.check import show_solution; show_solution("ch06.rms_norm")``.
"""
from __future__ import annotations

import math

import numpy as np
import mindspore as ms
from mindspore import Parameter, nn, ops

from course_lib import layers


# ------------------------------------------------------------------ 1. RMSNorm
class RMSNorm(nn.Cell):
    """x / sqrt(mean(x²) + eps) * weight — no mean subtraction, no bias."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(ops.ones(hidden_size, ms.float32), name="weight")

    def construct(self, x):
        dtype = x.dtype
        x = x.astype(ms.float32)                                   # normalise in float32
        variance = (x * x).mean(-1, keep_dims=True)                 # over the features only
        return (self.weight * (x * ops.rsqrt(variance + self.eps))).astype(dtype)


class wrong_rms_norm_mean(RMSNorm):
    """LayerNorm habit: subtracts the mean first."""

    def construct(self, x):
        x = x - x.mean(-1, keep_dims=True)
        return self.weight * x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + self.eps)


class wrong_rms_norm_no_weight(RMSNorm):
    """Forgets to multiply by the learned weight."""

    def construct(self, x):
        return x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + self.eps)


class wrong_rms_norm_float16(RMSNorm):
    """Normalises in the input's dtype: x * x overflows float16 once |x| passes 256."""

    def construct(self, x):
        variance = (x * x).mean(-1, keep_dims=True)
        return self.weight.astype(x.dtype) * (x * ops.rsqrt(variance + self.eps))


class wrong_rms_norm_axis(RMSNorm):
    """Averages over the sequence axis instead of the features."""

    def construct(self, x):
        return self.weight * x * ops.rsqrt((x * x).mean(1, keep_dims=True) + self.eps)


# ------------------------------------------------------------------ 2. ALiBi slopes
def alibi_slopes(num_heads: int) -> list[float]:
    """Baichuan's ``_get_interleave``: a geometric sequence for a power of two; otherwise the
    closest power of two c's slopes plus every other slope of the 2c-head sequence."""
    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_two(num_heads)
    c = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_two(c) + alibi_slopes(2 * c)[0::2][: num_heads - c]


def wrong_alibi_naive(num_heads: int) -> list[float]:
    """The power-of-two formula used for every head count."""
    return [2.0 ** (-8.0 * (i + 1) / num_heads) for i in range(num_heads)]


def wrong_alibi_from_zero(num_heads: int) -> list[float]:
    """Exponents counted from 0: the first head gets slope 1."""
    return [s / 2.0 ** (-8.0 / num_heads) for s in alibi_slopes(num_heads)]


def wrong_alibi_even_powers(num_heads: int) -> list[float]:
    """Fills the gap with the 2c-sequence's odd positions (1, 3, 5, ...) instead of 0, 2, 4."""
    if num_heads & (num_heads - 1) == 0:
        return alibi_slopes(num_heads)
    c = 2 ** int(math.floor(math.log2(num_heads)))
    return alibi_slopes(c) + alibi_slopes(2 * c)[1::2][: num_heads - c]


# ------------------------------------------------------------------ 3. attention bias
def attention_bias(query_len, key_len, attention_mask=None, slopes=None):
    """(B|1, H|1, T, S) float32: 0 = allowed, -1e4 = forbidden (future key or padding),
    plus slope_h * (pos_key - pos_query) with ALiBi. The T queries are the LAST T of the S
    tokens (with a KV cache, S - T tokens came before); positions count real tokens only."""
    past = key_len - query_len
    causal = np.arange(key_len)[None, :] <= np.arange(query_len)[:, None] + past      # (T, S)
    real = (np.ones((1, key_len), bool) if attention_mask is None                     # (B|1, S)
            else np.asarray(attention_mask).astype(bool))
    allowed = causal[None, None] & real[:, None, None, :]                            # (B|1, 1, T, S)
    positions = np.maximum(np.cumsum(real, -1) - 1, 0)                               # real tokens only
    bias = np.where(allowed, 0.0, -1e4)
    if slopes is not None:
        slopes = np.asarray(slopes, np.float64)[None, :, None, None]                # (1, H, 1, 1)
        distance = positions[:, None, None, :] - positions[:, past:][:, None, :, None]
        bias = bias + slopes * distance
    return bias.astype(np.float32)


def wrong_bias_no_causal(query_len, key_len, attention_mask=None, slopes=None):
    """Forgets the causal mask: every query also sees the tokens after it."""
    bias = attention_bias(query_len, key_len, attention_mask, slopes)
    future = np.arange(key_len)[None, :] > np.arange(query_len)[:, None] + key_len - query_len
    return np.where(future[None, None] & (bias <= -1e3), bias + 1e4, bias).astype(np.float32)


def wrong_bias_no_padding(query_len, key_len, attention_mask=None, slopes=None):
    """Ignores the padding mask."""
    return attention_bias(query_len, key_len, None, slopes)


def wrong_bias_alibi_sign(query_len, key_len, attention_mask=None, slopes=None):
    """ALiBi with the sign flipped: far tokens get a bonus instead of a penalty."""
    flipped = None if slopes is None else [-s for s in slopes]
    return attention_bias(query_len, key_len, attention_mask, flipped)


def wrong_bias_no_past(query_len, key_len, attention_mask=None, slopes=None):
    """Treats query i as token i (forgets that with a cache the queries are the LAST ones)."""
    allowed = np.arange(key_len)[None, :] <= np.arange(query_len)[:, None]
    full = attention_bias(key_len, key_len, attention_mask, slopes)[:, :, :query_len]
    return np.where(allowed[None, None], full, -1e4).astype(np.float32)


# ------------------------------------------------------------------ 4. decoder layer
class DecoderLayer(nn.Cell):
    """Pre-norm block from the course's Cells: x + attn(norm1(x)); then x + mlp(norm2(x))."""

    def __init__(self, config):
        super().__init__()
        c = config
        self.self_attn = layers.Attention(c.hidden_size, c.num_heads, fused_qkv=c.fused_qkv,
                                          qkv_bias=c.qkv_bias, o_bias=c.o_bias, std=c.init_std)
        self.mlp = layers.SwiGLU(c.hidden_size, c.intermediate_size, bias=False, std=c.init_std)
        self.input_layernorm = layers.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = layers.RMSNorm(c.hidden_size, c.rms_norm_eps)

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = x + self.self_attn(self.input_layernorm(x), bias, cos, sin, cache, layer_idx)
        return x + self.mlp(self.post_attention_layernorm(x))


class wrong_layer_post_norm(DecoderLayer):
    """The original Transformer's post-norm: normalise AFTER adding the residual."""

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = self.input_layernorm(x + self.self_attn(x, bias, cos, sin, cache, layer_idx))
        return self.post_attention_layernorm(x + self.mlp(x))


class wrong_layer_parallel(DecoderLayer):
    """Both branches read the layer input (GPT-J style), not the attention's output."""

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        attn = self.self_attn(self.input_layernorm(x), bias, cos, sin, cache, layer_idx)
        return x + attn + self.mlp(self.post_attention_layernorm(x))


class wrong_layer_no_residual(DecoderLayer):
    """Forgets the residual around the MLP."""

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = x + self.self_attn(self.input_layernorm(x), bias, cos, sin, cache, layer_idx)
        return self.mlp(self.post_attention_layernorm(x))


class wrong_layer_drops_cache(DecoderLayer):
    """Never hands the KV cache to the attention: right without a cache, wrong when decoding."""

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = x + self.self_attn(self.input_layernorm(x), bias, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class wrong_layer_first_cache_layer(DecoderLayer):
    """Hands the cache over but always as layer 0: every layer would share one cache entry."""

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = x + self.self_attn(self.input_layernorm(x), bias, cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class wrong_layer_fixed_projection(DecoderLayer):
    """Builds Baichuan's attention for every model: fused W_pack, no biases, whatever the config."""

    def __init__(self, config):
        super().__init__(config)
        c = config
        self.self_attn = layers.Attention(c.hidden_size, c.num_heads, std=c.init_std)
