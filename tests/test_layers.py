"""course_lib.layers against independent references (closed-form math, HF/torch code)."""
import math

import numpy as np
import pytest
import torch
from mindspore import Tensor

from course_lib.layers import (MASK_VALUE, Attention, DecoderConfig, RMSNorm, RotaryEmbedding,
                               SwiGLU, alibi_slopes, apply_rotary, attention_bias,
                               attention_weights, causal_allowed, swiglu_width)
from course_lib.baichuan import tiny as baichuan_tiny


# ---------------------------------------------------------------- ALiBi
@pytest.mark.parametrize("heads", [8, 12, 40])
def test_alibi_slopes_equal_bloom_build_alibi_tensor(heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    # BLOOM's tensor is slope_h * position; at position 1 it is the slope itself.
    alibi = build_alibi_tensor(torch.ones(1, 4), heads, torch.float32).reshape(heads, 4)
    ref = alibi[:, 1].double().numpy()
    ours = np.asarray(alibi_slopes(heads))
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    np.testing.assert_allclose(alibi[:, 3].numpy(), 3 * ours, rtol=1e-6)


def test_alibi_slopes_40_heads_closed_form():
    # Baichuan-13B: 32 slopes 2^(-(i+1)/4), then 2^(-1/8), 2^(-3/8), ..., 2^(-15/8)
    expected = [2 ** (-(i + 1) / 4) for i in range(32)] + [2 ** (-(2 * k + 1) / 8) for k in range(8)]
    assert len(alibi_slopes(40)) == 40
    np.testing.assert_allclose(alibi_slopes(40), expected, rtol=1e-12)
    np.testing.assert_allclose(alibi_slopes(8), [2 ** -(i + 1) for i in range(8)], rtol=1e-12)


def test_alibi_slopes_bad_input():
    with pytest.raises(ValueError, match="positive int"):
        alibi_slopes(0)


def test_alibi_bias_is_slope_times_relative_distance():
    slopes = np.asarray(alibi_slopes(4), np.float32)
    bias = attention_bias(5, 5, None, slopes).asnumpy()[0]   # (H, T, S)
    i, j = np.meshgrid(np.arange(5), np.arange(5), indexing="ij")
    for h in range(4):
        allowed = j <= i
        np.testing.assert_allclose(bias[h][allowed], (slopes[h] * (j - i))[allowed], atol=1e-6)
        assert np.all(bias[h][~allowed] < MASK_VALUE / 2)


def test_alibi_bias_softmax_equals_baichuan_absolute_form():
    # Baichuan-13B adds slope*key_position (absolute); ours adds slope*(key - query).
    # Under softmax the rows must be identical.
    slopes = np.asarray(alibi_slopes(40), np.float32)
    T = 7
    scores = np.random.default_rng(0).normal(size=(40, T, T)).astype(np.float32)
    ours = attention_bias(T, T, None, slopes).asnumpy()[0]
    absolute = slopes[:, None, None] * np.arange(T)[None, None, :] + np.triu(np.full((T, T), -np.inf), 1)

    def sm(x):
        x = x - x.max(-1, keepdims=True)
        e = np.exp(x)
        return e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(sm(scores + ours), sm(scores + absolute), atol=1e-6)


# ---------------------------------------------------------------- masks
def test_causal_mask_blocks_the_future_and_handles_a_past():
    m = causal_allowed(3, 3)
    np.testing.assert_array_equal(m, np.tril(np.ones((3, 3), bool)))
    # 2 new queries after 3 cached keys: query 0 is slot 3, sees keys 0..3
    m = causal_allowed(2, 5)
    np.testing.assert_array_equal(m, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


def _torch_masked_alibi_attention(q, k, mask, slopes, scale):
    """Independent reference: -inf masking (causal + padding) with masked_fill, ALiBi as
    slope * (key position - query position) over real-token positions, torch softmax."""
    T = q.shape[2]
    pos = np.maximum(np.cumsum(mask, -1) - 1, 0).astype(np.float32)          # (B, T)
    distance = torch.from_numpy(pos[:, None, :] - pos[:, :, None])[:, None]   # (B, 1, T, T)
    scores = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) * scale
    scores = scores + torch.tensor(slopes, dtype=torch.float32)[None, :, None, None] * distance
    allowed = np.tril(np.ones((T, T), bool))[None] & mask.astype(bool)[:, None, :]
    forbidden = torch.from_numpy(~allowed)[:, None]
    return torch.softmax(scores.masked_fill(forbidden, float("-inf")), -1).numpy()


def test_masked_attention_matches_torch_and_ignores_future_and_pads():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 4, 6, 8)).astype(np.float32)
    k = rng.normal(size=(2, 4, 6, 8)).astype(np.float32)
    mask = np.ones((2, 6), np.int32)
    mask[1, :2] = 0                                   # row 1 is left-padded by 2
    slopes = alibi_slopes(4)
    scale = 1 / math.sqrt(8)
    ref = _torch_masked_alibi_attention(q, k, mask, slopes, scale)
    for m in (mask, Tensor(mask), mask.tolist()):     # every form goes through one NumPy path
        p = attention_weights(Tensor(q), Tensor(k), attention_bias(6, 6, m, slopes), scale).asnumpy()
        np.testing.assert_allclose(p[0], ref[0], atol=1e-6)
        # row 1's first two queries are pads (every key masked, output never used)
        np.testing.assert_allclose(p[1, :, 2:], ref[1, :, 2:], atol=1e-6)
        assert p[1, :, 2:, :2].max() == 0.0           # real tokens never attend to pads


def test_padding_does_not_shift_alibi_positions():
    slopes = alibi_slopes(4)
    mask = np.array([[0, 0, 1, 1, 1]], np.int32)
    alone = attention_bias(3, 3, None, slopes).asnumpy()[0]
    for m in (mask, Tensor(mask)):
        padded = attention_bias(5, 5, m, slopes).asnumpy()[0, :, 2:, 2:]
        np.testing.assert_allclose(padded, alone, atol=1e-6)


# ---------------------------------------------------------------- RMSNorm, SwiGLU, RoPE
def test_rmsnorm_matches_formula():
    x = np.random.default_rng(2).normal(size=(2, 3, 16)).astype(np.float32)
    norm = RMSNorm(16, eps=1e-6)
    w = np.linspace(0.5, 1.5, 16).astype(np.float32)
    norm.weight.set_data(Tensor(w))
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(norm(Tensor(x)).asnumpy(), ref, rtol=1e-5, atol=1e-6)


def test_swiglu_matches_formula():
    mlp = SwiGLU(8, 12)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype(np.float32)
    g, u, d = (mlp.gate_proj.weight.asnumpy(), mlp.up_proj.weight.asnumpy(),
               mlp.down_proj.weight.asnumpy())
    a = x @ g.T
    ref = ((a / (1 + np.exp(-a))) * (x @ u.T)) @ d.T
    np.testing.assert_allclose(mlp(Tensor(x)).asnumpy(), ref, rtol=1e-4, atol=1e-6)


def test_rope_matches_hugging_face_llama():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    head_dim, heads, T = 16, 2, 9
    cfg = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, rope_theta=10000.0,
                      max_position_embeddings=64)
    rng = np.random.default_rng(4)
    q, k = (rng.normal(size=(1, heads, T, head_dim)).astype(np.float32) for _ in range(2))
    pos = np.arange(3, 3 + T)[None]
    cos_t, sin_t = LlamaRotaryEmbedding(cfg)(torch.from_numpy(q), torch.from_numpy(pos))
    q_ref, k_ref = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k), cos_t, sin_t)
    for p in (pos, Tensor(pos.astype(np.int32))):
        cos, sin = RotaryEmbedding(head_dim, 10000.0)(p)
        q_ms, k_ms = apply_rotary(Tensor(q), Tensor(k), cos, sin)
        np.testing.assert_allclose(q_ms.asnumpy(), q_ref.numpy(), atol=1e-5)
        np.testing.assert_allclose(k_ms.asnumpy(), k_ref.numpy(), atol=1e-5)


def test_w_pack_is_split_into_contiguous_q_k_v_blocks():
    att = Attention(8, 2, fused_qkv=True)
    x = np.random.default_rng(5).normal(size=(1, 3, 8)).astype(np.float32)
    w = att.W_pack.weight.asnumpy()
    q, k, v = (t.asnumpy() for t in att.project_qkv(Tensor(x)))
    np.testing.assert_allclose(q, x @ w[:8].T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k, x @ w[8:16].T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, x @ w[16:].T, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- config
def test_config_validation_messages():
    base = dict(vocab_size=10, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                max_seq_len=8)
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        DecoderConfig(**{**base, "num_heads": 3})
    with pytest.raises(ValueError, match="Unknown position scheme"):
        DecoderConfig(**base, position="learned")
    with pytest.raises(ValueError, match="positive int"):
        DecoderConfig(**{**base, "vocab_size": 0})
    with pytest.raises(TypeError, match="Unknown config field"):
        DecoderConfig(**base).replace(hiden_size=4)


def test_swiglu_width_is_llamas_rule():
    assert swiglu_width(4096, multiple_of=256) == 11008      # LLaMA-7B's published width
    assert swiglu_width(5120, multiple_of=256) == 13824      # LLaMA-13B
    assert swiglu_width(128) == 352 == baichuan_tiny().intermediate_size
