"""Look-alike model directories: the exact file layout of the real Baichuan-13B / Baichuan-7B /
InternLM-7B downloads, at tiny shapes, so that everything chapter 15 does with the real
weights can run (and be tested) on a laptop without downloading anything.

What is real here (the field names and file names; sources in ``hf_weights``/``pretrained``/
``chat`` docstrings):

* ``config.json`` with the published keys — Baichuan-13B: ``architectures:
  ["BaichuanForCausalLM"]``, ``model_type: baichuan``, ``model_max_length`` (no
  ``max_position_embeddings``, no course ``position_embedding`` key); Baichuan-7B:
  ``["BaiChuanForCausalLM"]`` + ``max_position_embeddings``; InternLM-7B:
  ``["InternLMForCausalLM"]``, ``model_type: internlm``, ``bias: true``.
* weights as ``pytorch_model-0000i-of-0000n.bin`` + ``pytorch_model.bin.index.json`` (what
  both real repos ship) or ``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``,
  in bfloat16 / float16, written by the real ``torch.save``; InternLM shards also carry
  ``rotary_emb.inv_freq`` buffers, as Llama-style checkpoints saved with a persistent
  buffer do; a ``training_args.bin`` lies in the folder, as in fine-tuned exports.
* ``tokenizer.model``: a SentencePiece model (trained here on the course's news corpus) with
  the real special-token ids that matter: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2; Baichuan's
  ``<reserved_102>`` = 195 (user) and ``<reserved_103>`` = 196 (assistant); InternLM's
  ``<eoh>``/``<eoa>`` as user-defined pieces (103027/103028 in the real 103168-piece
  vocabulary; the last two ids here). Byte fallback on and no text normalisation, so
  ``"\n"`` is the byte piece ``<0x0A>`` = 13 as in InternLM's real ids (lmdeploy's
  InternLM adapter spells ``<eoh>\n<|Bot|>:`` as ``103027, 13, ...``); no dummy prefix
  (the same adapter's ``<|User|>:`` starts with ``<`` = 333, not ``▁<``).
* ``generation_config.json`` / ``tokenizer_config.json`` with the published keys.

What is not real: the sizes and the weight values (random, seeded).

Newer families (``NEW_FAMILIES``: qwen2, qwen3, llama2, llama3, internlm2, baichuan2-7b,
baichuan2-13b) are written by ``write_new_lookalike`` (``write_lookalike`` dispatches to it);
their sources, layouts and what stays tiny are listed at the section that defines them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OLD_FAMILIES = ("baichuan-13b", "baichuan-7b", "internlm")
NEW_FAMILIES = ("qwen2", "qwen3", "llama2", "llama3", "internlm2", "baichuan2-7b", "baichuan2-13b")
FAMILIES = OLD_FAMILIES + NEW_FAMILIES
BAICHUAN_USER, BAICHUAN_ASSISTANT = 195, 196


def real_config(family: str, *, vocab_size: int, hidden_size: int = 64, num_layers: int = 2,
                num_heads: int | None = None, intermediate_size: int = 172,
                dtype: str = "bfloat16", **new) -> dict:
    """``config.json`` with the real repos' keys for ``family`` (tiny shapes). For the
    newer families (``NEW_FAMILIES``) see ``new_config``; ``new`` takes its extra knobs
    (``num_kv_heads``, ``head_dim``)."""
    if family in NEW_FAMILIES:
        return new_config(family, vocab_size=vocab_size, hidden_size=hidden_size,
                          num_layers=num_layers, num_heads=num_heads,
                          intermediate_size=intermediate_size, dtype=dtype, **new)
    if new:
        raise TypeError(f"{family!r} takes no {sorted(new)} (only the newer families do)")
    num_heads = 4 if num_heads is None else num_heads
    base = {"hidden_act": "silu", "hidden_size": hidden_size, "initializer_range": 0.02,
            "intermediate_size": intermediate_size, "num_attention_heads": num_heads,
            "num_hidden_layers": num_layers, "rms_norm_eps": 1e-06, "vocab_size": vocab_size,
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
            "tie_word_embeddings": False, "torch_dtype": dtype, "use_cache": True,
            "transformers_version": "4.29.2"}
    if family == "baichuan-13b":
        return {"architectures": ["BaichuanForCausalLM"], "model_type": "baichuan",
                "auto_map": {"AutoConfig": "configuration_baichuan.BaichuanConfig",
                             "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM"},
                "model_max_length": 4096, "gradient_checkpointing": [False], **base}
    if family == "baichuan-7b":
        return {"architectures": ["BaiChuanForCausalLM"], "model_type": "baichuan",
                "auto_map": {"AutoConfig": "configuration_baichuan.BaiChuanConfig",
                             "AutoModelForCausalLM": "modeling_baichuan.BaiChuanForCausalLM"},
                "max_position_embeddings": 4096, **base}
    if family == "internlm":
        return {"architectures": ["InternLMForCausalLM"], "model_type": "internlm",
                "auto_map": {"AutoConfig": "configuration_internlm.InternLMConfig",
                             "AutoModelForCausalLM": "modeling_internlm.InternLMForCausalLM"},
                "bias": True, "max_position_embeddings": 2048, **base}
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")


def train_tokenizer(directory, family: str, vocab_size: int = 3000, n_docs: int = 2000) -> Path:
    """A SentencePiece ``tokenizer.model`` trained on the news corpus with ``family``'s
    special-token layout (see the module docstring). Takes a few seconds. Newer families:
    ``train_bpe_tokenizer`` (tokenizer.json) or ``train_sp_tokenizer``."""
    if family in TOKENIZER_JSON_FAMILIES:
        return train_bpe_tokenizer(directory, family, vocab_size, n_docs)
    if family in NEW_FAMILIES:
        return train_sp_tokenizer(directory, family, vocab_size, n_docs)
    import sentencepiece as spm
    from .data import news_documents
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # Baichuan: user-defined pieces fill ids 3..196 so that <reserved_102>/<reserved_103>
    # land on 195/196 (the other names are placeholders).
    symbols = ([f"<reserved_{i}>" for i in range(-90, 104)] if family.startswith("baichuan") else [])
    prefix = directory / "tokenizer"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(news_documents()[:n_docs]), model_prefix=str(prefix),
        vocab_size=vocab_size, model_type="bpe", character_coverage=0.98, byte_fallback=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=symbols,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, split_digits=True, num_threads=1, minloglevel=2)
    if family == "internlm":                       # <eoh>, <eoa> appended as whole pieces
        with open(prefix.with_suffix(".model"), "ab") as f:
            f.write(_piece_record("<eoh>") + _piece_record("<eoa>"))
    prefix.with_suffix(".vocab").unlink(missing_ok=True)
    return prefix.with_suffix(".model")


def _piece_record(piece: str) -> bytes:
    """One more entry of ``ModelProto.pieces`` (field 1) in protobuf wire format: a
    ``SentencePiece{piece=1, score=2, type=3: USER_DEFINED=4}``. Repeated fields append in
    the order they appear, so writing it at the end of tokenizer.model adds the LAST id."""
    import struct
    name = piece.encode()
    body = b"\x0a" + bytes([len(name)]) + name + b"\x15" + struct.pack("<f", 0.0) + b"\x18\x04"
    return b"\x0a" + bytes([len(body)]) + body


def _tokenizer_files(directory: Path, family: str) -> None:
    if family.startswith("baichuan"):
        tok = {"auto_map": {"AutoTokenizer": ["tokenization_baichuan.BaichuanTokenizer", None]},
               "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>",
               "clean_up_tokenization_spaces": False, "model_max_length": 4096,
               "tokenizer_class": "BaichuanTokenizer"}
        gen = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
               "user_token_id": BAICHUAN_USER, "assistant_token_id": BAICHUAN_ASSISTANT,
               "max_new_tokens": 2048, "temperature": 0.3, "top_k": 5, "top_p": 0.85,
               "repetition_penalty": 1.1, "do_sample": True, "transformers_version": "4.29.2"}
    else:
        tok = {"auto_map": {"AutoTokenizer": ["tokenization_internlm.InternLMTokenizer", None]},
               "bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>",
               "clean_up_tokenization_spaces": False, "tokenizer_class": "InternLMTokenizer"}
        gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
               "transformers_version": "4.29.2"}
    (directory / "tokenizer_config.json").write_text(json.dumps(tok, indent=2))
    if family != "baichuan-7b":
        (directory / "generation_config.json").write_text(json.dumps(gen, indent=2))


def random_state(config, seed: int = 0) -> dict:
    """Seeded float32 torch tensors for every parameter of ``config`` (HF names), with
    non-trivial norms and biases so that a mix-up shows in the logits."""
    import torch
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in config.parameter_shapes().items():
        t = torch.randn(shape, generator=g)
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * t
        elif name.endswith(".bias"):
            t = 0.1 * t
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            t = 0.01 * t        # logits of O(0.3): fp16 resolves them to ~2e-4
        else:
            t = t / np.sqrt(shape[-1])   # strong attention/MLP signals: mix-ups show
        state[name] = t
    return state


def write_weights(directory, state: dict, dtype: str = "bfloat16", fmt: str = "bin",
                  shards: int = 3, buffers: dict | None = None) -> list[Path]:
    """``state`` as ``shards`` files + index in the real naming (``fmt``: bin/safetensors)."""
    import torch
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tdtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    names = list(state) + list(buffers or {})
    groups = np.array_split(np.arange(len(names)), shards)
    weight_map, total, paths = {}, 0, []
    for i, idx in enumerate(groups, 1):
        part = {}
        for j in idx:
            n = names[j]
            part[n] = (buffers[n] if n in (buffers or {}) else state[n].to(tdtype)).contiguous()
        if fmt == "bin":
            fname = f"pytorch_model-{i:05d}-of-{shards:05d}.bin"
            torch.save(part, directory / fname)
        else:
            from safetensors.torch import save_file
            fname = f"model-{i:05d}-of-{shards:05d}.safetensors"
            save_file(part, str(directory / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
        total += sum(v.numel() * v.element_size() for v in part.values())
        paths.append(directory / fname)
    index = "pytorch_model.bin.index.json" if fmt == "bin" else "model.safetensors.index.json"
    (directory / index).write_text(json.dumps({"metadata": {"total_size": total},
                                               "weight_map": weight_map}, indent=2))
    return paths


def write_lookalike(directory, family: str, *, dtype: str = "bfloat16", fmt: str = "bin",
                    shards: int = 3, tokenizer_model=None, seed: int = 0, **shape) -> Path:
    """A complete look-alike of ``family``'s download in ``directory``: config.json,
    weights (+ index), tokenizer.model + tokenizer_config.json, generation_config.json and
    a stray ``training_args.bin``. ``tokenizer_model``: reuse an already trained one (its
    vocabulary size becomes ``vocab_size``). Newer families: see ``write_new_lookalike``."""
    if family in NEW_FAMILIES:
        return write_new_lookalike(directory, family, dtype=dtype, fmt=fmt, shards=shards,
                                   tokenizer=tokenizer_model, seed=seed, **shape)
    import shutil
    import sentencepiece as spm
    import torch
    from .families import config_from_hf
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if tokenizer_model is None:
        tokenizer_model = train_tokenizer(directory, family)
    elif Path(tokenizer_model) != directory / "tokenizer.model":
        shutil.copy(tokenizer_model, directory / "tokenizer.model")
    vocab = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model")).get_piece_size()
    cfg = real_config(family, vocab_size=vocab, dtype=dtype, **shape)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
    config = config_from_hf(cfg)
    buffers = None
    if family == "internlm":
        inv = 1.0 / (10000 ** (torch.arange(0, config.head_dim, 2).float() / config.head_dim))
        buffers = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": inv.clone()
                   for i in range(config.num_layers)}
    write_weights(directory, random_state(config, seed), dtype, fmt, shards, buffers)
    _tokenizer_files(directory, family)
    torch.save({"learning_rate": torch.tensor(1e-4)}, directory / "training_args.bin")
    return directory


# ---------------------------------------------------------------------------------------------
# Newer families: Qwen2/2.5, Qwen3, Llama-2, Llama-3.x, InternLM2/2.5, Baichuan2-7B/13B.
#
# Field names and values of config.json / generation_config.json / tokenizer_config.json are
# those of the published files (sizes and token ids replaced by tiny ones). Sources read:
#
# * qwen2  -> Qwen/Qwen2.5-0.5B-Instruct config.json (quoted verbatim in public test fixtures,
#   e.g. a Rust model-config test "Minimal JSON that matches exactly what Qwen2.5-0.5B-Instruct
#   ships" and DongfuJiang's chunking README): Qwen2ForCausalLM, 14 q / 2 kv heads,
#   tie_word_embeddings true (the checkpoint has NO lm_head.weight), rope_theta 1e6,
#   max_window_layers 21, sliding_window 32768, use_sliding_window false, no attention_bias
#   key (Qwen2 always has q/k/v biases, never o_proj bias), bos 151643 <|endoftext|>,
#   eos 151645 <|im_end|>, vocab 151936 > the 151665 tokens of the tokenizer (padded rows).
# * qwen3  -> Qwen/Qwen3-0.6B config.json (quoted in public code): Qwen3ForCausalLM,
#   head_dim 128 != 1024/16, 16 q / 8 kv, attention_bias false, q_norm/k_norm per head,
#   rope_scaling null, rope_theta 1000000, tie true, sliding_window null, max_window_layers 28.
#   tokenizer_config added_tokens_decoder: <tool_call>.. <think> </think> are special=false.
# * llama2 -> meta-llama/Llama-2-7b-chat-hf config.json (current revision: rms_norm_eps 1e-05,
#   first revision had 1e-06), 32 heads = 32 kv heads, rope_scaling null, untied lm_head.
# * llama3 -> meta-llama/Llama-3.2-1B-Instruct config.json: head_dim 64, 32 q / 8 kv,
#   rope_theta 500000, rope_scaling {factor 32, low 1, high 4, original 8192, rope_type llama3},
#   tie true, eos [128001, 128008, 128009]; 256 special tokens from 128000.
# * internlm2 -> internlm/internlm2_5-1_8b-chat config.json (the same keys as
#   internlm2-chat-1_8b / -7b): InternLM2ForCausalLM, auto_map with AutoModel, bias false,
#   16 q / 8 kv (7b: 32 / 8), rope_scaling {type dynamic, factor 2.0}, rope_theta 1000000,
#   pad 2, attn_implementation eager. Weights: tok_embeddings, attention.wqkv in the per-kv-group
#   layout of modeling_internlm2.py ('b q (h gs d)', gs = q-heads-per-group + 2: the group's
#   q heads, then its k head, then its v head), attention.wo, feed_forward.w1/w3/w2,
#   attention_norm, ffn_norm, output.
# * baichuan2-7b / -13b -> baichuan-inc/Baichuan2-7B-Chat / -13B-Chat config.json:
#   BaichuanForCausalLM, tokenizer_class, z_loss_weight 0, _from_model_config; 7B has
#   max_position_embeddings + model_max_length 4096 (RoPE), 13B only model_max_length (ALiBi).
#   lm_head is NormHead: the stored weight is NOT normalised; modeling_baichuan.py divides each
#   row by its L2 norm at inference. Chat roles <reserved_106> = 195, <reserved_107> = 196.
#
# Not real: sizes, token ids (the tiny vocabularies put the special tokens at their end), the
# weight values (seeded random), and the vocabularies (trained here on the course's corpus).
# ---------------------------------------------------------------------------------------------

_T, _F = True, False
QWEN2_SPECIALS = [("<|endoftext|>", _T), ("<|im_start|>", _T), ("<|im_end|>", _T),
                  ("<|object_ref_start|>", _T), ("<|object_ref_end|>", _T), ("<|box_start|>", _T),
                  ("<|box_end|>", _T), ("<|quad_start|>", _T), ("<|quad_end|>", _T),
                  ("<|vision_start|>", _T), ("<|vision_end|>", _T), ("<|vision_pad|>", _T),
                  ("<|image_pad|>", _T), ("<|video_pad|>", _T), ("<tool_call>", _F),
                  ("</tool_call>", _F), ("<|fim_prefix|>", _F), ("<|fim_middle|>", _F),
                  ("<|fim_suffix|>", _F), ("<|fim_pad|>", _F), ("<|repo_name|>", _F),
                  ("<|file_sep|>", _F)]
QWEN3_SPECIALS = QWEN2_SPECIALS + [("<tool_response>", _F), ("</tool_response>", _F),
                                   ("<think>", _F), ("</think>", _F)]
LLAMA3_SPECIALS = ([("<|begin_of_text|>", _T), ("<|end_of_text|>", _T),
                    ("<|reserved_special_token_0|>", _T), ("<|reserved_special_token_1|>", _T),
                    ("<|finetune_right_pad_id|>", _T), ("<|reserved_special_token_2|>", _T),
                    ("<|start_header_id|>", _T), ("<|end_header_id|>", _T), ("<|eom_id|>", _T),
                    ("<|eot_id|>", _T), ("<|python_tag|>", _T)]
                   + [(f"<|reserved_special_token_{i}|>", _T) for i in range(3, 248)])
INTERNLM2_SPECIALS = ["<|plugin|>", "<|interpreter|>", "<|action_end|>", "<|action_start|>",
                      "<|im_end|>", "<|im_start|>"]          # ids 92538..92543 in the real vocab
BAICHUAN2_USER, BAICHUAN2_ASSISTANT = 195, 196                   # <reserved_106>, <reserved_107>
# The pre-tokenizer regexes of the real tokenizer.json files (Qwen2: single digits;
# Llama-3: up to three digits per piece).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Tiny shapes that keep each family's layout features: GQA ratio (the real one where it is
# small: Qwen2.5-0.5B is 7:1, kept as 2:1 here; Qwen3 2:1; Llama-3.2 4:1; InternLM2.5 2:1),
# Qwen3's explicit head_dim != hidden / heads, Llama-3's explicit head_dim.
TINY_SHAPES = {
    "qwen2": dict(hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=None),
    "qwen3": dict(hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=32),
    "llama2": dict(hidden_size=64, num_heads=4, num_kv_heads=4, head_dim=None),
    "llama3": dict(hidden_size=64, num_heads=8, num_kv_heads=2, head_dim=8),
    "internlm2": dict(hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=None),
    "baichuan2-7b": dict(hidden_size=64, num_heads=4, num_kv_heads=4, head_dim=None),
    "baichuan2-13b": dict(hidden_size=64, num_heads=4, num_kv_heads=4, head_dim=None),
}
TOKENIZER_JSON_FAMILIES = ("qwen2", "qwen3", "llama3")


def _require_new(family: str) -> None:
    if family not in NEW_FAMILIES:
        raise ValueError(f"family must be one of {NEW_FAMILIES}, got {family!r}")


def specials_of(family: str) -> list[tuple[str, bool]]:
    """(content, special) of the tokens added at the END of the tiny vocabulary, in id order."""
    _require_new(family)
    return {"qwen2": QWEN2_SPECIALS, "qwen3": QWEN3_SPECIALS, "llama3": LLAMA3_SPECIALS,
            "internlm2": [(s, _T) for s in INTERNLM2_SPECIALS]}.get(family, [])


def special_ids(family: str, n_tokens: int) -> dict[str, int]:
    """Token -> id for ``family``'s special tokens in a vocabulary of ``n_tokens`` tokens
    (tokenizer.json families and InternLM2: the specials are its last ids)."""
    _require_new(family)
    if family in ("llama2",) or family.startswith("baichuan2"):
        ids = {"<unk>": 0, "<s>": 1, "</s>": 2}
        if family.startswith("baichuan2"):
            ids.update({"<reserved_106>": BAICHUAN2_USER, "<reserved_107>": BAICHUAN2_ASSISTANT})
        return ids
    specials = specials_of(family)
    first = n_tokens - len(specials)
    ids = {name: first + i for i, (name, _) in enumerate(specials)}
    if family == "internlm2":
        ids.update({"<unk>": 0, "<s>": 1, "</s>": 2})
    return ids


def config_vocab_size(family: str, n_tokens: int) -> int:
    """Rows of the embedding for a tokenizer of ``n_tokens``: the small Qwens pad the matrix
    (151936 rows for 151665 tokens) to a multiple of 128; the others use the exact size."""
    return -(-n_tokens // 128) * 128 if family in ("qwen2", "qwen3") else n_tokens


def _shape(family: str, hidden_size, num_layers, num_heads, intermediate_size, num_kv_heads,
           head_dim) -> dict:
    tiny = TINY_SHAPES[family]
    heads = tiny["num_heads"] if num_heads is None else num_heads
    kv = tiny["num_kv_heads"] if num_kv_heads is None else num_kv_heads
    hd = tiny["head_dim"] if head_dim is None else head_dim
    if heads % kv:
        raise ValueError(f"num_heads ({heads}) must be a multiple of num_kv_heads ({kv})")
    if family not in ("qwen3", "llama3") and hd not in (None, hidden_size // heads):
        raise ValueError(f"{family} has no head_dim field: head_dim is hidden/heads there")
    if hd is None and hidden_size % heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {heads}")
    if family.startswith("baichuan2") and kv != heads:
        raise ValueError("Baichuan2 has no GQA: num_kv_heads must equal num_heads")
    return {"hidden_size": hidden_size, "intermediate_size": intermediate_size,
            "num_attention_heads": heads, "num_hidden_layers": num_layers,
            "num_key_value_heads": kv, "head_dim": hd or hidden_size // heads}


def _qwen_config(family: str, s: dict, vocab: int, ids: dict, dtype: str) -> dict:
    cfg = {"architectures": ["Qwen2ForCausalLM" if family == "qwen2" else "Qwen3ForCausalLM"],
           "attention_dropout": 0.0, "bos_token_id": ids["<|endoftext|>"],
           "eos_token_id": ids["<|im_end|>"], "hidden_act": "silu",
           "hidden_size": s["hidden_size"], "initializer_range": 0.02,
           "intermediate_size": s["intermediate_size"], "model_type": family,
           "num_attention_heads": s["num_attention_heads"],
           "num_hidden_layers": s["num_hidden_layers"],
           "num_key_value_heads": s["num_key_value_heads"], "rms_norm_eps": 1e-06,
           "tie_word_embeddings": True, "torch_dtype": dtype, "use_cache": True,
           "use_sliding_window": False, "vocab_size": vocab}
    if family == "qwen2":
        cfg.update({"max_position_embeddings": 32768, "max_window_layers": 21,
                    "rope_theta": 1000000.0, "sliding_window": 32768,
                    "transformers_version": "4.43.1"})
    else:
        cfg.update({"attention_bias": False, "head_dim": s["head_dim"],
                    "max_position_embeddings": 40960, "max_window_layers": 28,
                    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
                    "transformers_version": "4.51.0"})
    return dict(sorted(cfg.items()))


def _llama_config(family: str, s: dict, vocab: int, ids: dict, dtype: str) -> dict:
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
           "hidden_size": s["hidden_size"], "initializer_range": 0.02,
           "intermediate_size": s["intermediate_size"], "model_type": "llama",
           "num_attention_heads": s["num_attention_heads"],
           "num_hidden_layers": s["num_hidden_layers"],
           "num_key_value_heads": s["num_key_value_heads"], "pretraining_tp": 1,
           "rms_norm_eps": 1e-05, "torch_dtype": dtype, "use_cache": True, "vocab_size": vocab}
    if family == "llama2":
        cfg.update({"_name_or_path": "meta-llama/Llama-2-7b-chat-hf", "bos_token_id": 1,
                    "eos_token_id": 2, "max_position_embeddings": 4096, "rope_scaling": None,
                    "tie_word_embeddings": False, "transformers_version": "4.32.0.dev0"})
    else:
        cfg.update({"attention_bias": False, "attention_dropout": 0.0,
                    "bos_token_id": ids["<|begin_of_text|>"],
                    "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]],
                    "head_dim": s["head_dim"], "max_position_embeddings": 131072,
                    "mlp_bias": False, "rope_theta": 500000.0, "tie_word_embeddings": True,
                    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                                     "low_freq_factor": 1.0,
                                     "original_max_position_embeddings": 8192,
                                     "rope_type": "llama3"},
                    "transformers_version": "4.45.0.dev0"})
    return dict(sorted(cfg.items()))


def _internlm2_config(s: dict, vocab: int, dtype: str) -> dict:
    return {"architectures": ["InternLM2ForCausalLM"], "attn_implementation": "eager",
            "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                         "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM",
                         "AutoModel": "modeling_internlm2.InternLM2ForCausalLM"},
            "bias": False, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": s["hidden_size"], "initializer_range": 0.02,
            "intermediate_size": s["intermediate_size"], "max_position_embeddings": 32768,
            "model_type": "internlm2", "num_attention_heads": s["num_attention_heads"],
            "num_hidden_layers": s["num_hidden_layers"],
            "num_key_value_heads": s["num_key_value_heads"], "pad_token_id": 2,
            "rms_norm_eps": 1e-05, "rope_scaling": {"type": "dynamic", "factor": 2.0},
            "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": dtype,
            "transformers_version": "4.41.0", "use_cache": True, "vocab_size": vocab,
            "pretraining_tp": 1}


def _baichuan2_config(family: str, s: dict, vocab: int, dtype: str) -> dict:
    cfg = {"_from_model_config": True, "architectures": ["BaichuanForCausalLM"],
           "auto_map": {"AutoConfig": "configuration_baichuan.BaichuanConfig",
                        "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM"},
           "tokenizer_class": "BaichuanTokenizer", "bos_token_id": 1, "eos_token_id": 2,
           "hidden_act": "silu", "hidden_size": s["hidden_size"], "initializer_range": 0.02,
           "intermediate_size": s["intermediate_size"], "model_max_length": 4096,
           "model_type": "baichuan", "num_attention_heads": s["num_attention_heads"],
           "num_hidden_layers": s["num_hidden_layers"], "pad_token_id": 0,
           "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "torch_dtype": dtype,
           "transformers_version": "4.29.2", "use_cache": True, "vocab_size": vocab,
           "z_loss_weight": 0}
    if family == "baichuan2-7b":
        cfg["max_position_embeddings"] = 4096
    else:
        cfg["gradient_checkpointing"] = False
    return cfg


def new_config(family: str, *, vocab_size: int, hidden_size: int = 64, num_layers: int = 2,
               num_heads: int | None = None, intermediate_size: int = 172,
               dtype: str = "bfloat16", num_kv_heads: int | None = None,
               head_dim: int | None = None) -> dict:
    """``config.json`` of a newer family. ``vocab_size`` is the number of TOKENS of the
    tokenizer (special tokens at its end); the config's ``vocab_size`` is padded for Qwen
    (``config_vocab_size``). Shapes default to ``TINY_SHAPES[family]``."""
    _require_new(family)
    if dtype not in ("bfloat16", "float16", "float32"):
        raise ValueError(f"dtype must be bfloat16/float16/float32, got {dtype!r}")
    s = _shape(family, hidden_size, num_layers, num_heads, intermediate_size, num_kv_heads,
               head_dim)
    ids, vocab = special_ids(family, vocab_size), config_vocab_size(family, vocab_size)
    if family in ("qwen2", "qwen3"):
        return _qwen_config(family, s, vocab, ids, dtype)
    if family in ("llama2", "llama3"):
        return _llama_config(family, s, vocab, ids, dtype)
    if family == "internlm2":
        return _internlm2_config(s, vocab, dtype)
    return _baichuan2_config(family, s, vocab, dtype)


def _head_dims(cfg: dict) -> tuple[int, int, int, int]:
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    return h, nh, nkv, cfg.get("head_dim") or h // nh


def _layer_shapes(family: str, cfg: dict, p: str) -> dict:
    h, nh, nkv, hd = _head_dims(cfg)
    f = cfg["intermediate_size"]
    if family == "internlm2":
        out = {p + "attention.wqkv.weight": (nkv * (nh // nkv + 2) * hd, h),
               p + "attention.wo.weight": (h, nh * hd),
               p + "feed_forward.w1.weight": (f, h), p + "feed_forward.w3.weight": (f, h),
               p + "feed_forward.w2.weight": (h, f),
               p + "attention_norm.weight": (h,), p + "ffn_norm.weight": (h,)}
        if cfg.get("bias"):
            out.update({p + "attention.wqkv.bias": (nkv * (nh // nkv + 2) * hd,),
                        p + "attention.wo.bias": (h,)})
        return out
    a = p + "self_attn."
    if family.startswith("baichuan2"):
        out = {a + "W_pack.weight": (3 * h, h)}
    else:
        out = {a + "q_proj.weight": (nh * hd, h), a + "k_proj.weight": (nkv * hd, h),
               a + "v_proj.weight": (nkv * hd, h)}
        if family == "qwen2" or cfg.get("attention_bias"):
            out.update({a + "q_proj.bias": (nh * hd,), a + "k_proj.bias": (nkv * hd,),
                        a + "v_proj.bias": (nkv * hd,)})
        if family == "qwen3":
            out.update({a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)})
    out[a + "o_proj.weight"] = (h, nh * hd)
    out.update({p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,)})
    return out


def parameter_shapes(family: str, cfg: dict) -> dict:
    """Checkpoint key -> shape of ``family``'s real checkpoint, computed from ``cfg`` (the
    config.json dict). Tied families (small Qwens, Llama-3.2) have no ``lm_head.weight``."""
    _require_new(family)
    h, V = cfg["hidden_size"], cfg["vocab_size"]
    emb, head = (("model.tok_embeddings.weight", "output.weight") if family == "internlm2"
                 else ("model.embed_tokens.weight", "lm_head.weight"))
    shapes = {emb: (V, h)}
    for i in range(cfg["num_hidden_layers"]):
        shapes.update(_layer_shapes(family, cfg, f"model.layers.{i}."))
    shapes["model.norm.weight"] = (h,)
    if not cfg.get("tie_word_embeddings", False):
        shapes[head] = (V, h)
    return shapes


_VOCAB_MATRICES = ("model.embed_tokens.weight", "lm_head.weight", "model.tok_embeddings.weight",
                   "output.weight")


def new_random_state(family: str, cfg: dict, seed: int = 0) -> dict:
    """Seeded float32 torch tensors for ``parameter_shapes``: norms near 1, small biases,
    embedding / head rows of unequal norms (so that Baichuan2's row normalisation changes the
    ranking of the logits, not only their scale), other matrices ~ 1/sqrt(fan_in)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in parameter_shapes(family, cfg).items():
        t = torch.randn(shape, generator=g)
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * t
        elif name.endswith(".bias"):
            t = 0.1 * t
        elif name in _VOCAB_MATRICES:
            t = 0.01 * t * (0.5 + torch.rand((shape[0], 1), generator=g))
        else:
            t = t / np.sqrt(shape[-1])
        state[name] = t
    return state


def _write_single(directory: Path, state: dict, dtype: str, fmt: str) -> list[Path]:
    """One ``model.safetensors`` / ``pytorch_model.bin`` and no index: how the real small
    checkpoints (Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B) ship."""
    import torch
    tdtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    part = {k: v.to(tdtype).contiguous() for k, v in state.items()}
    if fmt == "bin":
        torch.save(part, directory / "pytorch_model.bin")
        return [directory / "pytorch_model.bin"]
    from safetensors.torch import save_file
    save_file(part, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return [directory / "model.safetensors"]


def _added_token(content: str, special: bool):
    from tokenizers import AddedToken
    return AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False,
                      single_word=False)


def train_bpe_tokenizer(directory, family: str, vocab_size: int = 3000,
                        n_docs: int = 2000) -> Path:
    """``tokenizer.json``: a byte-level BPE (the ``tokenizers`` library) trained on the news
    corpus, with the family's real pre-tokenizer regex and its special tokens as the LAST
    ``len(specials_of(family))`` ids of ``vocab_size`` tokens. Takes about a second."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    from .data import news_documents
    if family not in TOKENIZER_JSON_FAMILIES:
        raise ValueError(f"tokenizer.json families are {TOKENIZER_JSON_FAMILIES}, got {family!r}")
    specials = specials_of(family)
    tok = Tokenizer(models.BPE(byte_fallback=False))
    if family != "llama3":
        tok.normalizer = normalizers.NFC()
    split = LLAMA3_SPLIT if family == "llama3" else QWEN_SPLIT
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(news_documents()[:n_docs], trainer)
    if tok.get_vocab_size() != vocab_size - len(specials):
        raise RuntimeError(f"BPE learned {tok.get_vocab_size()} tokens, wanted "
                           f"{vocab_size - len(specials)}: use a smaller vocab_size or more docs")
    for content, special in specials:             # one at a time: ids follow the list order
        (tok.add_special_tokens if special else tok.add_tokens)([_added_token(content, special)])
    if family == "llama3":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))])
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory / "tokenizer.json"


def train_sp_tokenizer(directory, family: str, vocab_size: int = 3000,
                       n_docs: int = 2000) -> Path:
    """``tokenizer.model`` for llama2 / internlm2 / baichuan2-*: SentencePiece BPE as
    ``train_tokenizer`` trains it (byte fallback, <unk> 0, <s> 1, </s> 2), with Llama-2's
    dummy prefix, Baichuan2's chat roles at 195/196 and InternLM2's six chat tokens as the
    last ids."""
    import sentencepiece as spm
    from .data import news_documents
    if family not in ("llama2", "internlm2", "baichuan2-7b", "baichuan2-13b"):
        raise ValueError(f"tokenizer.model families are llama2/internlm2/baichuan2-*, got {family!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    symbols = ([f"<baichuan2_filler_{i}>" for i in range(3, BAICHUAN2_USER)]
               + ["<reserved_106>", "<reserved_107>"] if family.startswith("baichuan2") else [])
    appended = INTERNLM2_SPECIALS if family == "internlm2" else []
    prefix = directory / "tokenizer"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(news_documents()[:n_docs]), model_prefix=str(prefix),
        vocab_size=vocab_size - len(appended), model_type="bpe", character_coverage=0.98,
        byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        user_defined_symbols=symbols, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=(family == "llama2"),
        split_digits=True, num_threads=1, minloglevel=2)
    with open(prefix.with_suffix(".model"), "ab") as f:
        for piece in appended:
            f.write(_piece_record(piece))
    prefix.with_suffix(".vocab").unlink(missing_ok=True)
    return prefix.with_suffix(".model")


def _decoder_entry(content: str, special: bool = True) -> dict:
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}


def _added_token_dict(content: str) -> dict:
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False}


def _json_tokenizer_config(family: str, ids: dict) -> dict:
    decoder = {str(ids[c]): _decoder_entry(c, sp) for c, sp in specials_of(family)}
    if family == "llama3":
        return {"added_tokens_decoder": decoder, "bos_token": "<|begin_of_text|>",
                "clean_up_tokenization_spaces": True, "eos_token": "<|eot_id|>",
                "model_input_names": ["input_ids", "attention_mask"],
                "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    extra = [c for c, _ in QWEN2_SPECIALS[1:14]]                   # <|im_start|> .. <|video_pad|>
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
            "additional_special_tokens": extra, "bos_token": None,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
            "model_max_length": 131072, "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


def _sp_tokenizer_config(family: str, ids: dict) -> dict:
    if family == "llama2":
        return {"add_bos_token": True, "add_eos_token": False,
                "bos_token": _added_token_dict("<s>"), "clean_up_tokenization_spaces": False,
                "eos_token": _added_token_dict("</s>"), "legacy": False,
                "model_max_length": 1000000000000000019884624838656, "pad_token": None,
                "padding_side": "right", "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
                "unk_token": _added_token_dict("<unk>")}
    if family == "internlm2":
        names = ["<unk>", "<s>", "</s>"] + INTERNLM2_SPECIALS
        return {"auto_map": {"AutoTokenizer": ["tokenization_internlm2.InternLM2Tokenizer",
                                               "tokenization_internlm2_fast.InternLM2TokenizerFast"]},
                "added_tokens_decoder": {str(ids[c]): _decoder_entry(c) for c in names},
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|action_start|>",
                                              "<|action_end|>", "<|interpreter|>", "<|plugin|>"],
                "bos_token": "<s>", "clean_up_tokenization_spaces": False, "eos_token": "</s>",
                "model_max_length": 1000000000000000019884624838656, "pad_token": "</s>",
                "tokenizer_class": "InternLM2Tokenizer", "unk_token": "<unk>"}
    return {"add_bos_token": False, "add_eos_token": False,
            "auto_map": {"AutoTokenizer": ["tokenization_baichuan.BaichuanTokenizer", None]},
            "bos_token": _added_token_dict("<s>"), "clean_up_tokenization_spaces": False,
            "eos_token": _added_token_dict("</s>"), "model_max_length": 4096,
            "pad_token": _added_token_dict("<unk>"), "sp_model_kwargs": {},
            "tokenizer_class": "BaichuanTokenizer", "unk_token": _added_token_dict("<unk>"),
            "use_fast": False}


def _generation_config(family: str, ids: dict) -> dict:
    if family in ("qwen2", "qwen3"):
        eot, im_end = ids["<|endoftext|>"], ids["<|im_end|>"]
        sampling = ({"repetition_penalty": 1.1, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
                     "transformers_version": "4.37.0"} if family == "qwen2" else
                    {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})
        return {"bos_token_id": eot, "pad_token_id": eot, "do_sample": True,
                "eos_token_id": [im_end, eot], **sampling}
    if family == "llama3":
        return {"bos_token_id": ids["<|begin_of_text|>"], "do_sample": True,
                "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]],
                "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.45.0.dev0"}
    if family == "llama2":
        return {"bos_token_id": 1, "do_sample": True, "eos_token_id": 2, "max_length": 4096,
                "pad_token_id": 0, "temperature": 0.6, "top_p": 0.9,
                "transformers_version": "4.32.0.dev0"}
    if family == "internlm2":
        return {"bos_token_id": 1, "eos_token_id": [2, ids["<|im_end|>"]], "pad_token_id": 2,
                "transformers_version": "4.41.0"}
    return {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
            "user_token_id": BAICHUAN2_USER, "assistant_token_id": BAICHUAN2_ASSISTANT,
            "max_new_tokens": 2048, "temperature": 0.3, "top_k": 5, "top_p": 0.85,
            "repetition_penalty": 1.05, "do_sample": True, "transformers_version": "4.29.2"}


def _place_tokenizer(directory: Path, family: str, tokenizer) -> int:
    """Train (``tokenizer`` None) or copy the family's tokenizer file into ``directory``;
    returns its number of tokens. Qwen folders also get vocab.json + merges.txt, as shipped."""
    import shutil
    name = "tokenizer.json" if family in TOKENIZER_JSON_FAMILIES else "tokenizer.model"
    if tokenizer is None:
        (train_bpe_tokenizer if name == "tokenizer.json" else train_sp_tokenizer)(directory, family)
    else:
        if Path(tokenizer).name != name:
            raise ValueError(f"{family} ships a {name}; got {tokenizer}")
        if Path(tokenizer).resolve() != (directory / name).resolve():
            shutil.copy(tokenizer, directory / name)
    if name == "tokenizer.model":
        import sentencepiece as spm
        return spm.SentencePieceProcessor(model_file=str(directory / name)).get_piece_size()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(directory / name))
    if family in ("qwen2", "qwen3"):
        tok.model.save(str(directory))                 # vocab.json + merges.txt (no added tokens)
    return tok.get_vocab_size(with_added_tokens=True)


def write_new_lookalike(directory, family: str, *, dtype: str = "bfloat16",
                        fmt: str = "safetensors", shards: int = 3, tokenizer=None,
                        seed: int = 0, **shape) -> Path:
    """A look-alike of ``family``'s download (``NEW_FAMILIES``): config.json, weights with the
    real key names (``shards`` files + index, or one file without index when ``shards == 1``),
    tokenizer (tokenizer.json or tokenizer.model, trained unless ``tokenizer`` names one to
    reuse), tokenizer_config.json (no chat_template) and generation_config.json."""
    _require_new(family)
    if fmt not in ("bin", "safetensors"):
        raise ValueError(f"fmt must be 'bin' or 'safetensors', got {fmt!r}")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n_tokens = _place_tokenizer(directory, family, tokenizer)
    cfg = new_config(family, vocab_size=n_tokens, dtype=dtype, **shape)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
    state = new_random_state(family, cfg, seed)
    if shards == 1:
        _write_single(directory, state, dtype, fmt)
    else:
        write_weights(directory, state, dtype, fmt, shards)
    ids = special_ids(family, n_tokens)
    tok_cfg = (_json_tokenizer_config if family in TOKENIZER_JSON_FAMILIES
               else _sp_tokenizer_config)(family, ids)
    (directory / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
    (directory / "generation_config.json").write_text(
        json.dumps(_generation_config(family, ids), indent=2))
    return directory
