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
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FAMILIES = ("baichuan-13b", "baichuan-7b", "internlm")
BAICHUAN_USER, BAICHUAN_ASSISTANT = 195, 196


def real_config(family: str, *, vocab_size: int, hidden_size: int = 64, num_layers: int = 2,
                num_heads: int = 4, intermediate_size: int = 172, dtype: str = "bfloat16") -> dict:
    """``config.json`` with the real repos' keys for ``family`` (tiny shapes)."""
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
    special-token layout (see the module docstring). Takes a few seconds."""
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
    vocabulary size becomes ``vocab_size``)."""
    import shutil
    import sentencepiece as spm
    import torch
    from .hf_weights import config_from_hf
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
