"""InternLM-7B (first generation), built from the SAME layers as Baichuan.

Differences from Baichuan-7B are configuration only: separate q/k/v projections with bias
(``q_proj``/``k_proj``/``v_proj``/``o_proj`` all have bias; the MLP has none), vocab
103168. In Hugging Face terms it is ``LlamaForCausalLM`` with ``attention_bias=True``.
Source: InternLM/InternLM ``tools/transformers`` (configuration/modeling_internlm.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .layers import CausalLM, DecoderConfig, DecoderModel


@dataclass(frozen=True)
class InternLMConfig(DecoderConfig):
    """InternLM family: RoPE, separate q/k/v/o projections with bias, untied head."""

    position: str = "rope"
    fused_qkv: bool = False
    qkv_bias: bool = True
    o_bias: bool = True


def internlm_7b(**overrides) -> InternLMConfig:
    """InternLM-7B: hidden 4096, 32 layers x 32 heads, FFN 11008, vocab 103168, RMSNorm
    eps 1e-6, RoPE base 10000, context 2048. 7,321,948,160 parameters."""
    cfg = InternLMConfig(vocab_size=103168, hidden_size=4096, num_layers=32, num_heads=32,
                         intermediate_size=11008, max_seq_len=2048, rope_base=10000.0,
                         rms_norm_eps=1e-6, name="internlm-7b")
    return cfg.replace(**overrides) if overrides else cfg


def tiny(**overrides) -> InternLMConfig:
    """A CPU-sized InternLM for the course tokenizer (vocab 8000)."""
    cfg = InternLMConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=4,
                         intermediate_size=352, max_seq_len=512, rope_base=10000.0,
                         rms_norm_eps=1e-6, name="internlm-tiny")
    return cfg.replace(**overrides) if overrides else cfg


class InternLMModel(DecoderModel):
    """Embeddings -> decoder layers -> final norm (the ``model.`` prefix of the checkpoint)."""


class InternLMForCausalLM(CausalLM):
    """``InternLMModel`` + untied ``lm_head``, parameter names as in the Hugging Face checkpoint."""

    config_class = InternLMConfig
    model_class = InternLMModel
