"""Which network a model directory holds: ``config.json`` -> the course config and family.

Layer 2 of the checkpoint code: ``hf_weights`` reads and writes the files, this module
decides the architecture from the directory's own evidence, ``pretrained`` loads. Each
family's rule names the fields of its real ``config.json`` and modeling file it follows:

==============  ==================================================================================
family          evidence -> layout
==============  ==================================================================================
qwen2           ``model_type: qwen2`` (Qwen2, Qwen2.5, DeepSeek-R1-Distill-Qwen): GQA
                (``num_key_value_heads``), q/k/v bias and no o bias (``Qwen2Attention``),
                ``tie_word_embeddings`` (true for the 0.5B-3B sizes), ``rope_theta``
qwen3           ``model_type: qwen3``: GQA, explicit ``head_dim``, ``attention_bias``,
                QK-RMSNorm (``q_norm``/``k_norm`` over each head), tied small sizes
llama2/llama3   ``model_type: llama``: GQA, ``attention_bias``, ``tie_word_embeddings``
                (Llama-3.2-1B/3B), ``rope_scaling`` (``llama3``); Llama-3 by its
                ``bos_token_id`` 128000 (``<|begin_of_text|>``)
internlm2       ``model_type: internlm2``: GQA, ``bias``, one ``wqkv`` laid out per kv group,
                other key names (``tok_embeddings``, ``attention.wo``, ``feed_forward.w1/w3/w2``,
                ``attention_norm``, ``ffn_norm``, ``output``: ``KEY_RENAMES``),
                ``rope_scaling`` dynamic
baichuan2-*     ``model_type: baichuan`` with ``vocab_size`` 125696 or ``z_loss_weight``:
                NormHead; 7B has ``max_position_embeddings`` (RoPE), 13B only
                ``model_max_length`` (ALiBi) — both name their class ``BaichuanForCausalLM``
==============  ==================================================================================

The first-generation families (Baichuan-13B/-7B, InternLM-7B) follow
``first_generation_config`` (and ``baichuan_position``). ``hf_config`` writes a course
config back as a ``config.json``; ``llama_config_kwargs`` describes one for transformers.
"""
from __future__ import annotations

import re
from typing import Mapping

from .hf_weights import CheckpointError
from .layers import DecoderConfig

NEW_TYPES = ("qwen2", "qwen3", "llama", "internlm2")
KNOWN_TYPES = NEW_TYPES + ("baichuan", "internlm")
LLAMA3_BOS = 128000

# InternLM2 checkpoint key -> the course's (= Llama's) name. Pure renames: no tensor changes
# (``wqkv`` keeps its grouped layout, which the course's Attention reads as it is).
KEY_RENAMES = {"internlm2": (
    (r"^model\.tok_embeddings\.", "model.embed_tokens."),
    (r"\.attention\.wqkv\.", ".self_attn.wqkv."),
    (r"\.attention\.wo\.", ".self_attn.o_proj."),
    (r"\.feed_forward\.w1\.", ".mlp.gate_proj."),
    (r"\.feed_forward\.w3\.", ".mlp.up_proj."),
    (r"\.feed_forward\.w2\.", ".mlp.down_proj."),
    (r"\.attention_norm\.", ".input_layernorm."),
    (r"\.ffn_norm\.", ".post_attention_layernorm."),
    (r"^output\.", "lm_head."),
)}


def is_baichuan2(d: Mapping) -> bool:
    return d.get("model_type") == "baichuan" and (d.get("vocab_size") == 125696
                                                   or "z_loss_weight" in d)


def family_of(d: Mapping, config=None) -> str:
    """The family string (chat format, stop ids, LoRA targets) of a ``config.json``."""
    kind = d.get("model_type")
    if is_baichuan2(d):
        return "baichuan2-7b" if "max_position_embeddings" in d else "baichuan2-13b"
    if kind == "baichuan":
        return "baichuan-13b" if baichuan_position(d) == "alibi" else "baichuan-7b"
    if kind == "llama":      # Llama-3's <|begin_of_text|>, its rope_theta, or its rope_scaling
        scaling = d.get("rope_scaling") or {}
        llama3 = (d.get("bos_token_id") == LLAMA3_BOS or d.get("rope_theta") == 500000.0
                  or scaling.get("rope_type") == "llama3")
        return "llama3" if llama3 else "llama2"
    return kind


def renamer(family: str):
    """A function checkpoint key -> model key for ``family`` (identity for most)."""
    rules = [(re.compile(a), b) for a, b in KEY_RENAMES.get(family, ())]

    def rename(key: str) -> str:
        for pattern, new in rules:
            key = pattern.sub(new, key)
        return key
    return rename


def _common(d: Mapping, kind: str) -> dict:
    try:
        return dict(vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
                    num_layers=d["num_hidden_layers"], num_heads=d["num_attention_heads"],
                    intermediate_size=d["intermediate_size"],
                    rms_norm_eps=d.get("rms_norm_eps", 1e-6),
                    init_std=d.get("initializer_range", 0.02), name=d.get("course_name", kind),
                    max_seq_len=d.get("max_position_embeddings") or d.get("model_max_length") or 4096,
                    rope_base=float(d.get("rope_theta", 10000.0)),
                    num_kv_heads=d.get("num_key_value_heads") or None)
    except KeyError as e:
        raise CheckpointError(f"config.json lacks {e}; it is not a complete model config.") from None


def _refuse(d: Mapping) -> None:
    """What the course's layers do not compute, refused with the reason."""
    if d.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"hidden_act={d['hidden_act']!r}: the course's MLP is SwiGLU (silu).")
    if d.get("mlp_bias"):
        raise CheckpointError("mlp_bias=true: the course's SwiGLU has no biases.")
    if d.get("use_sliding_window"):
        raise CheckpointError("use_sliding_window=true: the course's attention sees every "
                              "earlier token (no sliding window).")
    if d.get("num_experts") or d.get("num_local_experts"):
        raise CheckpointError("A mixture-of-experts checkpoint: the course builds dense decoders.")


def _rope_scaling(d: Mapping) -> tuple:
    scaling = d.get("rope_scaling") or {}
    if not isinstance(scaling, Mapping):
        raise CheckpointError(f"rope_scaling must be an object, got {scaling!r}.")
    return tuple(sorted(scaling.items()))


def config_from_hf(d: Mapping):
    """The course config for a ``config.json`` of any family the course loads; anything
    it cannot compute is refused with the reason (``CheckpointError``)."""
    kind = d.get("model_type")
    if is_baichuan2(d):
        return _baichuan2(d)
    if kind not in NEW_TYPES:
        return first_generation_config(d)
    _refuse(d)
    # A missing key means untied, as in transformers' Qwen2/Qwen3/LlamaConfig (default False).
    c = dict(_common(d, kind), rope_scaling=_rope_scaling(d), position="rope",
             tie_embeddings=bool(d.get("tie_word_embeddings", False)))
    if kind == "qwen2":
        c.update(fused_qkv=False, qkv_bias=True, o_bias=False)
    elif kind == "qwen3":
        bias = bool(d.get("attention_bias", False))
        c.update(fused_qkv=False, qkv_bias=bias, o_bias=bias, qk_norm=True,
                 head_size=d.get("head_dim"))
    elif kind == "llama":
        bias = bool(d.get("attention_bias", False))
        head = d.get("head_dim")
        c.update(fused_qkv=False, qkv_bias=bias, o_bias=bias,
                 head_size=head if head and head != d["hidden_size"] // d["num_attention_heads"] else None)
    else:                                                   # internlm2
        bias = bool(d.get("bias", False))
        c.update(fused_qkv=True, grouped_qkv=True, qkv_bias=bias, o_bias=bias)
    try:
        return DecoderConfig(**c)
    except ValueError as e:
        raise CheckpointError(f"config.json describes a model the course cannot build: {e}") from None


def _baichuan2(d: Mapping):
    """Baichuan2-7B (RoPE, ``max_position_embeddings``) or -13B (ALiBi): W_pack, NormHead."""
    from .baichuan import BaichuanConfig
    _refuse(d)
    c = _common(d, "baichuan2")
    c.pop("num_kv_heads")
    rope = "max_position_embeddings" in d
    c["max_seq_len"] = d.get("model_max_length") or c["max_seq_len"]
    return BaichuanConfig(**c, position="rope" if rope else "alibi", norm_head=True)


# --------------------------------------------------------------------------------------
# The first generation (Baichuan-13B/-7B, InternLM-7B) and config.json written back
# --------------------------------------------------------------------------------------
def hf_config(config) -> dict:
    """A Hugging Face style ``config.json`` for a course config, with the real repos'
    evidence keys (``architectures``, ``model_max_length`` vs ``max_position_embeddings``)
    plus one course key, ``position_embedding``, so ALiBi vs RoPE is explicit."""
    c = config
    d = {"hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
         "num_attention_heads": c.num_heads, "num_hidden_layers": c.num_layers,
         "vocab_size": c.vocab_size, "rms_norm_eps": c.rms_norm_eps, "hidden_act": "silu",
         "tie_word_embeddings": False, "initializer_range": c.init_std,
         "position_embedding": c.position, "course_name": c.name}
    if c.fused_qkv:
        arch = "BaichuanForCausalLM" if c.position == "alibi" else "BaiChuanForCausalLM"
        d.update(architectures=[arch], model_type="baichuan")
    else:
        d.update(architectures=["InternLMForCausalLM"], model_type="internlm",
                 bias=bool(c.qkv_bias and c.o_bias))
    if c.position == "alibi":
        d["model_max_length"] = c.max_seq_len
    else:
        d.update(max_position_embeddings=c.max_seq_len, rope_theta=c.rope_base)
    return d


def baichuan_position(d: Mapping) -> str:
    """ALiBi or RoPE for a Baichuan ``config.json``, from the file's own evidence — never
    from the width. The two published families differ in three places:

    * Baichuan-13B (baichuan-inc/Baichuan-13B-Base, -Chat): ``"architectures":
      ["BaichuanForCausalLM"]`` and ``model_max_length`` (its ``configuration_baichuan.py``
      has no ``max_position_embeddings``); ``modeling_baichuan.py`` builds the ALiBi mask
      (``_get_interleave``/``_gen_alibi_mask``).
    * Baichuan-7B (baichuan-inc/Baichuan-7B): ``["BaiChuanForCausalLM"]`` (capital C) and
      ``max_position_embeddings``; RoPE.
    Baichuan2 (vocab 125696, ``z_loss_weight``) names both sizes ``BaichuanForCausalLM``:
    its own rule is in ``_baichuan2``. The course's own key ``position_embedding`` wins
    when present."""
    if d.get("position_embedding") in ("alibi", "rope"):
        return d["position_embedding"]
    archs = set(d.get("architectures") or [])
    votes = set()
    if "BaichuanForCausalLM" in archs:
        votes.add("alibi")
    if "BaiChuanForCausalLM" in archs:
        votes.add("rope")
    has_mml, has_mpe = "model_max_length" in d, "max_position_embeddings" in d
    if has_mml != has_mpe:
        votes.add("alibi" if has_mml else "rope")
    if len(votes) != 1:
        raise CheckpointError(
            f"Cannot tell ALiBi (Baichuan-13B) from RoPE (Baichuan-7B) from this config.json "
            f"(architectures={sorted(archs)}, model_max_length={has_mml}, "
            f"max_position_embeddings={has_mpe}): add \"position_embedding\": \"alibi\" or "
            "\"rope\" to config.json.")
    return votes.pop()


def first_generation_config(d: Mapping):
    """Course config from a ``config.json`` of Baichuan-13B/-7B or InternLM(-chat)-7B.
    InternLM-7B's config (internlm/internlm-7b, ``configuration_internlm.py`` in
    InternLM/InternLM tools/transformers): ``model_type: internlm``, ``bias: true`` (q/k/v/o
    biases), ``max_position_embeddings: 2048``, vocab 103168."""
    from .baichuan import BaichuanConfig
    from .internlm import InternLMConfig
    kind = d.get("model_type")
    if kind not in ("baichuan", "internlm"):
        raise CheckpointError(f"Unknown model_type {kind!r} in config.json; the course loads "
                              f"{sorted(KNOWN_TYPES)}.")
    try:
        common = dict(vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
                      num_layers=d["num_hidden_layers"], num_heads=d["num_attention_heads"],
                      intermediate_size=d["intermediate_size"],
                      rms_norm_eps=d.get("rms_norm_eps", 1e-6),
                      init_std=d.get("initializer_range", 0.02),
                      name=d.get("course_name", kind))
    except KeyError as e:
        raise CheckpointError(f"config.json lacks {e}; it is not a complete model config.") from None
    max_len = d.get("model_max_length") or d.get("max_position_embeddings") or 4096
    if kind == "baichuan":
        return BaichuanConfig(**common, max_seq_len=max_len, position=baichuan_position(d),
                              rope_base=d.get("rope_theta", 10000.0))
    bias = bool(d.get("bias", d.get("attention_bias", kind == "internlm")))
    return InternLMConfig(**common, max_seq_len=max_len, rope_base=d.get("rope_theta", 10000.0),
                          qkv_bias=bias, o_bias=bias)


def llama_config_kwargs(config) -> dict:
    """Arguments for ``transformers.LlamaConfig`` describing the same network (InternLM,
    or Baichuan-7B after ``split_w_pack``). ALiBi models have no Llama equivalent."""
    if config.position != "rope":
        raise ValueError("Only RoPE models have a Llama equivalent; Baichuan-13B uses ALiBi.")
    if config.qkv_bias != config.o_bias:
        raise ValueError("Llama's attention_bias switches q/k/v and o biases together.")
    return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
                num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
                max_position_embeddings=config.max_seq_len, rms_norm_eps=config.rms_norm_eps,
                rope_theta=config.rope_base, attention_bias=bool(config.qkv_bias),
                mlp_bias=False, tie_word_embeddings=False, hidden_act="silu")


def unpack_wqkv(w, num_heads: int, num_kv_heads: int, head_dim: int):
    """InternLM2's packed ``wqkv`` rows (one block per kv group: the group's
    num_heads/num_kv_heads query heads, then its k head, then its v head) -> the q, k, v
    weights in Llama's layout (``q_proj`` rows head by head, then ``k_proj``, ``v_proj``).
    NumPy in, NumPy out; what converting an InternLM2 checkpoint to Llama's keys needs."""
    import numpy as np
    w = np.asarray(w)
    groups = num_heads // num_kv_heads
    blocks = w.reshape((num_kv_heads, groups + 2, head_dim) + w.shape[1:])
    q = blocks[:, :groups].reshape((num_heads * head_dim,) + w.shape[1:])
    k = blocks[:, groups].reshape((num_kv_heads * head_dim,) + w.shape[1:])
    v = blocks[:, groups + 1].reshape((num_kv_heads * head_dim,) + w.shape[1:])
    return q, k, v
