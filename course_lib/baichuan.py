"""Baichuan: the exact Baichuan-13B configuration, its RoPE sibling Baichuan-7B, and a tiny
twin that trains on a CPU — one code base (``course_lib.layers``) for all three.

Baichuan-13B is **ALiBi + plain multi-head attention** (40 query heads, 40 key/value heads),
not RoPE and not grouped-query attention; Baichuan-7B is the RoPE one. Sources:
baichuan-inc/Baichuan-13B README and its Hugging Face ``config.json``/``modeling_baichuan.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .layers import CausalLM, DecoderConfig, DecoderModel


@dataclass(frozen=True)
class BaichuanConfig(DecoderConfig):
    """Baichuan family: fused ``W_pack`` [Q|K|V], no biases, untied ``lm_head``."""

    fused_qkv: bool = True
    qkv_bias: bool = False
    o_bias: bool = False


def baichuan_13b(**overrides) -> BaichuanConfig:
    """Baichuan-13B: hidden 5120, 40 layers x 40 heads (head_dim 128), SwiGLU FFN 13696,
    vocab 64000, RMSNorm eps 1e-6, context 4096, ALiBi. 13,264,901,120 parameters."""
    cfg = BaichuanConfig(vocab_size=64000, hidden_size=5120, num_layers=40, num_heads=40,
                         intermediate_size=13696, max_seq_len=4096, position="alibi",
                         rms_norm_eps=1e-6, name="baichuan-13b")
    return cfg.replace(**overrides) if overrides else cfg


def baichuan_7b(**overrides) -> BaichuanConfig:
    """Baichuan-7B: hidden 4096, 32 layers x 32 heads, FFN 11008, vocab 64000, RoPE
    (base 10000), context 4096. 7,000,559,616 parameters."""
    cfg = BaichuanConfig(vocab_size=64000, hidden_size=4096, num_layers=32, num_heads=32,
                         intermediate_size=11008, max_seq_len=4096, position="rope",
                         rope_base=10000.0, rms_norm_eps=1e-6, name="baichuan-7b")
    return cfg.replace(**overrides) if overrides else cfg


def tiny(**overrides) -> BaichuanConfig:
    """The 13B's tiny twin: same code paths (ALiBi, W_pack, SwiGLU, RMSNorm, untied head),
    sized for the course tokenizer (vocab 8000) and a 2-core CPU."""
    cfg = BaichuanConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=4,
                         intermediate_size=352, max_seq_len=512, position="alibi",
                         rms_norm_eps=1e-6, name="baichuan-tiny")
    return cfg.replace(**overrides) if overrides else cfg


class BaichuanModel(DecoderModel):
    """Embeddings -> decoder layers -> final norm (the ``model.`` prefix of the checkpoint)."""


class BaichuanForCausalLM(CausalLM):
    """``BaichuanModel`` + untied ``lm_head``. ``model(input_ids) -> logits`` (B, T, V)."""

    config_class = BaichuanConfig
    model_class = BaichuanModel
