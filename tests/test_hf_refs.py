"""Tests of the test material for the newer families: the look-alike directories
(``course_lib.lookalike`` NEW_FAMILIES) and their independent PyTorch references
(``tests/hf_refs.py``). Expected key names, config facts and InternLM2's attention are
written out here from the published files / modeling code, not taken from lookalike."""
import json
import math

import pytest
import torch

from course_lib import lookalike

import hf_refs

FAMILIES = lookalike.NEW_FAMILIES
CASES = ([(f, "safetensors", "bfloat16") for f in FAMILIES]
         + [(f, "bin", "float16") for f in FAMILIES])

# Layer-0 keys of the real checkpoints (from the published model.safetensors index /
# modeling files), plus the keys that must be absent.
LAYER0 = {
    "qwen2": ["self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias",
              "self_attn.v_proj.bias", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
              "input_layernorm.weight", "post_attention_layernorm.weight"],
    "qwen3": ["self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.q_proj.weight",
              "mlp.up_proj.weight"],
    "llama2": ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.down_proj.weight"],
    "llama3": ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.down_proj.weight"],
    "internlm2": ["attention.wqkv.weight", "attention.wo.weight", "feed_forward.w1.weight",
                  "feed_forward.w3.weight", "feed_forward.w2.weight", "attention_norm.weight",
                  "ffn_norm.weight"],
    "baichuan2-7b": ["self_attn.W_pack.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight"],
    "baichuan2-13b": ["self_attn.W_pack.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight"],
}
ABSENT = {"qwen2": ["lm_head.weight", "model.layers.0.self_attn.o_proj.bias"],
          "qwen3": ["lm_head.weight", "model.layers.0.self_attn.q_proj.bias"],
          "llama3": ["lm_head.weight"], "llama2": ["model.layers.0.self_attn.q_proj.bias"],
          "internlm2": ["lm_head.weight", "model.embed_tokens.weight",
                        "model.layers.0.attention.wqkv.bias"],
          "baichuan2-7b": ["model.layers.0.self_attn.q_proj.weight"],
          "baichuan2-13b": ["model.layers.0.self_attn.q_proj.weight"]}
HEAD = {"qwen2": None, "qwen3": None, "llama3": None, "llama2": "lm_head.weight",
        "internlm2": "output.weight", "baichuan2-7b": "lm_head.weight",
        "baichuan2-13b": "lm_head.weight"}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """One trained tokenizer per family, reused by every directory of that family."""
    root = tmp_path_factory.mktemp("toks")
    return {f: lookalike.train_tokenizer(root / f, f) for f in FAMILIES}


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def case(request, tokenizers, tmp_path_factory):
    family, fmt, dtype = request.param
    d = lookalike.write_lookalike(tmp_path_factory.mktemp(family) / "model", family,
                                  dtype=dtype, fmt=fmt, shards=3,
                                  tokenizer_model=tokenizers[family])
    return family, fmt, d, hf_refs.reference_model(d)


def _ids(cfg, n=11):
    return torch.randint(3, 2500, (2, n), generator=torch.Generator().manual_seed(0))


def test_the_reference_loads_and_gives_finite_logits_of_the_right_shape(case):
    family, fmt, d, model = case
    cfg = hf_refs.read_config(d)
    assert hf_refs.detect_family(cfg) == family
    logits = model(_ids(cfg))
    assert logits.dtype == torch.float32 and logits.shape == (2, 11, cfg["vocab_size"])
    assert torch.isfinite(logits).all() and logits.std() > 1e-3
    greedy = hf_refs.reference_greedy(model, _ids(cfg), 3)
    assert len(greedy) == 2 and all(len(g) == 3 for g in greedy)
    assert greedy[0][0] == int(logits[0, -1].argmax())        # step 1 = argmax of the forward


def test_checkpoint_keys_and_files_are_the_real_ones(case):
    family, fmt, d, _ = case
    index = d / ("model.safetensors.index.json" if fmt == "safetensors"
                 else "pytorch_model.bin.index.json")
    keys = set(json.loads(index.read_text())["weight_map"])
    assert len(set(json.loads(index.read_text())["weight_map"].values())) == 3
    assert {"model.layers.0." + k for k in LAYER0[family]} <= keys
    assert not keys & set(ABSENT[family])
    assert HEAD[family] is None or HEAD[family] in keys
    tok = "tokenizer.json" if family in ("qwen2", "qwen3", "llama3") else "tokenizer.model"
    assert (d / tok).exists() and (d / "generation_config.json").exists()
    assert "chat_template" not in json.loads((d / "tokenizer_config.json").read_text())


def test_config_facts_of_each_family(tmp_path, tokenizers):
    c = {f: json.loads((lookalike.write_lookalike(tmp_path / f, f, fmt="safetensors",
                                                  tokenizer_model=tokenizers[f])
                        / "config.json").read_text()) for f in FAMILIES}
    assert c["qwen2"]["tie_word_embeddings"] and "attention_bias" not in c["qwen2"]
    assert c["qwen2"]["vocab_size"] % 128 == 0 and c["qwen2"]["rope_theta"] == 1e6
    q3 = c["qwen3"]
    assert q3["head_dim"] != q3["hidden_size"] // q3["num_attention_heads"]
    assert q3["attention_bias"] is False and q3["rope_scaling"] is None
    assert c["llama3"]["rope_scaling"]["rope_type"] == "llama3" and c["llama3"]["tie_word_embeddings"]
    assert len(c["llama3"]["eos_token_id"]) == 3 and c["llama3"]["rope_theta"] == 500000.0
    assert c["llama2"]["num_key_value_heads"] == c["llama2"]["num_attention_heads"]
    assert c["internlm2"]["rope_scaling"] == {"type": "dynamic", "factor": 2.0}
    assert c["internlm2"]["bias"] is False and "auto_map" in c["internlm2"]
    assert "max_position_embeddings" in c["baichuan2-7b"]
    assert "max_position_embeddings" not in c["baichuan2-13b"]
    for f in ("qwen2", "qwen3", "llama3", "internlm2"):
        assert c[f]["num_attention_heads"] > c[f]["num_key_value_heads"]        # GQA kept


def test_json_tokenizers_load_in_transformers_with_the_config_ids(tokenizers, tmp_path):
    from transformers import AutoTokenizer
    for family, marker in (("qwen2", "<|im_end|>"), ("qwen3", "<|im_end|>"),
                           ("llama3", "<|eot_id|>")):
        d = lookalike.write_lookalike(tmp_path / family, family, tokenizer_model=tokenizers[family])
        tok = AutoTokenizer.from_pretrained(str(d))
        cfg = hf_refs.read_config(d)
        eos = cfg["eos_token_id"]
        assert tok.convert_tokens_to_ids(marker) in (eos if isinstance(eos, list) else [eos])
        assert tok.encode(marker + "你好", add_special_tokens=False)[0] == tok.convert_tokens_to_ids(marker)
        assert tok.decode(tok.encode("人民日报", add_special_tokens=False)) == "人民日报"
        assert len(tok) <= cfg["vocab_size"] <= len(tok) + 127


def test_sentencepiece_specials_sit_where_the_configs_say(tokenizers):
    import sentencepiece as spm
    b2 = spm.SentencePieceProcessor(model_file=str(tokenizers["baichuan2-7b"]))
    assert b2.piece_to_id("<reserved_106>") == 195 and b2.piece_to_id("<reserved_107>") == 196
    il = spm.SentencePieceProcessor(model_file=str(tokenizers["internlm2"]))
    n = il.get_piece_size()
    assert il.piece_to_id("<|im_start|>") == n - 1 and il.piece_to_id("<|im_end|>") == n - 2
    assert il.encode("<|im_end|>")[0] == n - 2
    assert spm.SentencePieceProcessor(model_file=str(tokenizers["llama2"])).piece_to_id("</s>") == 2


def test_small_tied_models_ship_one_file_without_lm_head(tmp_path, tokenizers):
    d = lookalike.write_lookalike(tmp_path / "q", "qwen2", dtype="float32", fmt="safetensors",
                                  shards=1, tokenizer_model=tokenizers["qwen2"])
    assert (d / "model.safetensors").exists() and not list(d.glob("*.index.json"))
    assert "lm_head.weight" not in hf_refs.read_checkpoint(d)
    model = hf_refs.reference_model(d)
    emb = model.hf.model.embed_tokens.weight
    assert model.hf.lm_head.weight.data_ptr() == emb.data_ptr()           # tied, not random


# --- InternLM2: the wqkv unpacking against a direct implementation of its attention -------

def internlm2_attention(x, wqkv, wo, cfg):
    """InternLM2Attention.forward (modeling_internlm2.py, eager, no cache) in plain torch:
    rearrange 'b q (h gs d) -> b q h gs d' with gs = groups + 2; q = [..., :groups, :],
    k = [..., -2, :], v = [..., -1, :]; rotate_half RoPE (DynamicNTK base beyond
    max_position_embeddings); repeat_kv; causal softmax; wo."""
    B, T, _ = x.shape
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    g, hd = nh // nkv, cfg["hidden_size"] // nh
    qkv = (x @ wqkv.T).view(B, T, nkv, g + 2, hd)
    q = qkv[..., :g, :].reshape(B, T, nh, hd).transpose(1, 2)
    k, v = qkv[..., -2, :].transpose(1, 2), qkv[..., -1, :].transpose(1, 2)
    base, f, L = float(cfg["rope_theta"]), cfg["rope_scaling"]["factor"], cfg["max_position_embeddings"]
    if T > L:
        base = base * ((f * T / L) - (f - 1)) ** (hd / (hd - 2))
    inv = 1.0 / base ** (torch.arange(0, hd, 2).float() / hd)
    emb = torch.cat([torch.outer(torch.arange(T).float(), inv)] * 2, dim=-1)
    rot = lambda t: torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], -1)  # noqa: E731
    q, k = (t * emb.cos() + rot(t) * emb.sin() for t in (q, k))
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    att = q @ k.transpose(-1, -2) / math.sqrt(hd) + torch.triu(torch.full((T, T), -math.inf), 1)
    return (torch.softmax(att, -1) @ v).transpose(1, 2).reshape(B, T, nh * hd) @ wo.T


def _layer0_attention(model, ids):
    """(normed input, attention output) of layer 0 of a Llama-based reference."""
    seen = {}
    layer = model.hf.model.layers[0]
    h1 = layer.input_layernorm.register_forward_hook(lambda m, a, out: seen.update(x=out))
    h2 = layer.self_attn.register_forward_hook(lambda m, a, out: seen.update(y=out[0]))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        h1.remove(), h2.remove()
    return seen["x"], seen["y"]


def _wrong_group_order(w, nh, nkv, hd):
    """A planted break: reads wqkv as plain [all q | all k | all v] blocks."""
    return w.split([nh * hd, nkv * hd, nkv * hd], dim=0)


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_internlm2_unpacking_equals_the_direct_attention(tmp_path, tokenizers, fmt):
    d = lookalike.write_lookalike(tmp_path / "il", "internlm2", dtype="bfloat16", fmt=fmt,
                                  tokenizer_model=tokenizers["internlm2"])
    cfg, state = hf_refs.read_config(d), hf_refs.read_checkpoint(d)
    w = (state["model.layers.0.attention.wqkv.weight"], state["model.layers.0.attention.wo.weight"])
    x, y = _layer0_attention(hf_refs.reference_model(d), _ids(cfg, 13))
    direct = internlm2_attention(x, *w, cfg)
    assert (direct - y).abs().max() <= 1e-5 * max(1.0, float(y.abs().max()))
    wrong = hf_refs.reference_model(d, unpack=_wrong_group_order)
    xw, yw = _layer0_attention(wrong, _ids(cfg, 13))
    assert torch.equal(xw, x)                                      # same input to the layer ...
    assert (internlm2_attention(xw, *w, cfg) - yw).abs().max() > 1e-3   # ... the break shows


# --- Baichuan2: NormHead ------------------------------------------------------------------

@pytest.mark.parametrize("family", ["baichuan2-7b", "baichuan2-13b"])
def test_baichuan2_head_rows_are_normalised_and_it_matters(tmp_path, tokenizers, family):
    d = lookalike.write_lookalike(tmp_path / family, family, dtype="bfloat16", fmt="safetensors",
                                  tokenizer_model=tokenizers[family])
    stored = hf_refs.read_checkpoint(d)["lm_head.weight"]
    assert not torch.allclose(stored.norm(dim=1), torch.ones(stored.shape[0]), atol=1e-2)
    rows = hf_refs.normalised_rows(stored)
    assert torch.allclose(rows.norm(dim=1), torch.ones(rows.shape[0]), atol=1e-5)
    ids = _ids(hf_refs.read_config(d))
    good = hf_refs.reference_model(d)(ids)
    raw = hf_refs.reference_model(d, normalise=False)(ids)
    assert (good - raw).abs().max() > 0.1
    assert (good.argmax(-1) != raw.argmax(-1)).any()               # the ranking changes too


def test_unknown_family_and_bad_arguments_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="family must be one of"):
        lookalike.new_config("qwen4", vocab_size=100)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        lookalike.new_config("qwen2", vocab_size=100, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="no head_dim field"):
        lookalike.new_config("llama2", vocab_size=100, head_dim=32)
    with pytest.raises(FileNotFoundError, match="no weights"):
        hf_refs.read_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="no reference"):
        hf_refs.detect_family({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
