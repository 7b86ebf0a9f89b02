"""The newer families through ONE ``from_pretrained`` call per directory, against references
that share no code with the course (tests/hf_refs.py: transformers' Qwen2/Qwen3/Llama;
InternLM2's wqkv unpacked into Llama; Baichuan2's NormHead as normalised rows), and
everything the course does with a model (LoRA, merge, adapters, MINDIR export, generate,
chat, the finetune CLI) over the family matrix."""
import json

import numpy as np
import pytest
import torch

import course_lib as cl
from mindspore import Tensor
from course_lib import families, generation, lookalike, pretrained
from course_lib.hf_weights import CheckpointError

import hf_refs

FAMILIES = lookalike.NEW_FAMILIES
BIN_FAMILIES = ("qwen2", "internlm2", "baichuan2-13b")   # bf16 .bin shards: one per key layout
CLI_FAMILIES = ("qwen2", "llama3", "internlm2", "baichuan2-7b")   # each LoRA target and end of turn
LAYOUT = {   # what each look-alike must exercise (read from the built model, below)
    "qwen2": dict(gqa=True, qkv_bias=True, o_bias=False, tied=True),
    "qwen3": dict(gqa=True, qk_norm=True, explicit_head_dim=True, tied=True),
    "llama2": dict(gqa=False, tied=False),
    "llama3": dict(gqa=True, tied=True, rope_scaling="llama3"),
    "internlm2": dict(gqa=True, grouped_qkv=True, rope_scaling="dynamic"),
    "baichuan2-7b": dict(norm_head=True, position="rope", fused=True),
    "baichuan2-13b": dict(norm_head=True, position="alibi", fused=True),
}


@pytest.fixture(scope="module")
def lookalikes(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    dirs = {}
    for fam in FAMILIES:
        dirs[fam, "safetensors"] = lookalike.write_lookalike(
            root / f"{fam}-st", fam, dtype="float32", fmt="safetensors")
    for fam in BIN_FAMILIES:
        dirs[fam, "bin"] = lookalike.write_lookalike(root / f"{fam}-bin", fam, dtype="bfloat16",
                                                     fmt="bin")
    return {k: __import__("pathlib").Path(v) for k, v in dirs.items()}


def _dir(lookalikes, fam, fmt="safetensors"):
    return lookalikes[fam, fmt]


def _ids(seed=0, shape=(2, 11)):
    return np.random.default_rng(seed).integers(3, 500, shape).astype(np.int32)


def _reference_logits(ref, ids):
    with torch.no_grad():
        out = ref(torch.from_numpy(ids.astype(np.int64)))
    return (out.logits if hasattr(out, "logits") else out).float().numpy()


def _layout(model) -> dict:
    c = model.config
    return dict(gqa=c.kv_heads < c.num_heads, qkv_bias=c.qkv_bias, o_bias=c.o_bias,
                tied=c.tie_embeddings, qk_norm=c.qk_norm,
                explicit_head_dim=c.head_dim != c.hidden_size // c.num_heads,
                grouped_qkv=c.grouped_qkv, norm_head=c.norm_head, position=c.position,
                fused=c.fused_qkv, rope_scaling=dict(c.rope_scaling).get(
                    "rope_type", dict(c.rope_scaling).get("type")))


@pytest.mark.parametrize("fam, fmt", [(f, "safetensors") for f in FAMILIES]
                         + [(f, "bin") for f in BIN_FAMILIES])
def test_family_matches_its_independent_reference(lookalikes, fam, fmt):
    d = _dir(lookalikes, fam, fmt)
    model = cl.from_pretrained(d, dtype="float32" if fmt == "safetensors" else "bfloat16",
                               verbose=False)
    assert model.family == fam
    layout = _layout(model)
    for key, want in LAYOUT[fam].items():
        assert layout[key] == want, (fam, key, layout[key])
    ref = hf_refs.reference_model(d)
    ids = _ids()
    ours = model(Tensor(ids)).asnumpy()
    diff = float(np.abs(ours - _reference_logits(ref, ids)).max())
    print(f"{fam} {fmt}: max |Δlogits| {diff:.2e}")
    assert diff <= 1e-4
    want = np.asarray(hf_refs.reference_greedy(ref, ids[:1], 6)).ravel()[-6:].tolist()
    for engine in ("auto", "layers"):
        assert generation.generate(model, [ids[0].tolist()], 6, engine=engine)[0] == want


def test_a_planted_layout_break_is_caught(lookalikes, monkeypatch):
    """InternLM2's wqkv read as [k | v | q heads] per group instead of [q heads | k | v]:
    the model still runs, and the reference comparison fails."""
    d = _dir(lookalikes, "internlm2")
    ids = _ids()
    ref = _reference_logits(hf_refs.reference_model(d), ids)
    from course_lib import layers
    original = layers.Attention.project_qkv

    def swapped(self, x):
        q, k, v = original(self, x)
        return (q, v, k) if self.grouped_qkv else (q, k, v)
    monkeypatch.setattr(layers.Attention, "project_qkv", swapped)
    model = cl.from_pretrained(d, dtype="float32", verbose=False)
    assert np.abs(model(Tensor(ids)).asnumpy() - ref).max() > 1e-3


@pytest.mark.parametrize("change, message", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
    ({"use_sliding_window": True}, "sliding window"),
    ({"num_experts": 8}, "mixture-of-experts"),
    ({"mlp_bias": True}, "SwiGLU has no biases"),
    ({"num_key_value_heads": 3}, "multiple of num_kv_heads"),
])
def test_what_the_layers_cannot_compute_is_refused_with_the_reason(lookalikes, change, message):
    cfg = json.loads((_dir(lookalikes, "qwen2") / "config.json").read_text())
    with pytest.raises(CheckpointError, match=message):
        families.config_from_hf(dict(cfg, **change))


def test_lora_merge_adapter_and_export_over_the_family_matrix(lookalikes, tmp_path):
    from course_lib import export, finetune, lora
    ids = _ids(1, (1, 16))
    for fam in FAMILIES:
        model = cl.from_pretrained(_dir(lookalikes, fam), dtype="float32", verbose=False)
        lora.inject_lora(model, list(finetune.TARGETS[fam]), r=4, alpha=8.0)
        for p in lora.lora_parameters(model):          # a non-zero adapter: B starts at 0
            p.set_data(Tensor(np.random.default_rng(2).normal(0, 0.05, p.shape).astype(np.float32)))
        unmerged = model(Tensor(ids)).asnumpy()
        greedy = generation.generate(model, [ids[0].tolist()], 5)   # both engines: test_engines
        path = lora.save_adapter(model, tmp_path / f"{fam}.safetensors")
        fresh = cl.from_pretrained(_dir(lookalikes, fam), dtype="float32", verbose=False)
        lora.inject_lora(fresh, list(finetune.TARGETS[fam]), r=4, alpha=8.0)
        lora.load_adapter(fresh, path)
        assert np.abs(fresh(Tensor(ids)).asnumpy() - unmerged).max() < 1e-5, fam
        lora.merge_lora(model)
        assert np.abs(model(Tensor(ids)).asnumpy() - unmerged).max() < 1e-4, fam
        assert generation.generate(model, [ids[0].tolist()], 5) == greedy, fam
        exported = export.load_mindir(export.export_mindir(model, (1, 16), tmp_path / fam).path)
        assert export.max_abs_diff(model, exported, Tensor(ids)) < 1e-4, fam


@pytest.mark.parametrize("fam", FAMILIES)
def test_chat_in_the_family_format_and_the_finetune_cli(lookalikes, fam, tmp_path):
    from course_lib.conversation import chat, chat_format
    from course_lib.hf_tokenizer import load_hf_tokenizer
    from course_lib import finetune
    d = _dir(lookalikes, fam)
    model = cl.from_pretrained(d, dtype="float32", verbose=False)
    tok = load_hf_tokenizer(d)
    messages = [{"role": "user", "content": "你好，介绍一下北京。"}]
    prompt, stop = chat_format(model, tok, messages)
    assert stop and prompt
    reply = chat(model, tok, messages, max_new_tokens=6, on_text=None)
    assert model.__dict__.get("_decode_engines"), "chat did not run the compiled engine"
    ids = generation.generate(model, [prompt], 6, eos_id=stop, use_cache=False)[0]  # recompute
    decoder = tok.stream()
    assert reply == "".join(decoder.put(t) or "" for t in ids if t not in stop), fam
    if fam not in CLI_FAMILIES:
        return
    data = tmp_path / "sft.jsonl"
    data.write_text("\n".join(json.dumps({"messages": [
        {"role": "user", "content": q}, {"role": "assistant", "content": a}]}, ensure_ascii=False)
        for q, a in [("北京在哪里？", "北京在中国北方。"), ("一加一等于几？", "等于二。")] * 2))
    adapter = tmp_path / "adapter.safetensors"                 # the CLI, as a learner runs it
    assert finetune.main(["--model-dir", str(d), "--data", str(data), "--steps", "4", "--r", "4",
                          "--lr", "1e-2", "--batch-size", "2", "--max-len", "48",
                          "--out", str(adapter)]) == 0
    tensors, meta = __import__("course_lib.lora", fromlist=["x"]).read_adapter(adapter)
    assert tensors and all(np.isfinite(np.asarray(t, np.float32)).all() for t in tensors.values())


def test_qwen2_5_0_5b_parameter_count_closed_form_equals_the_built_model():
    """Qwen2.5-0.5B's config.json sizes (hidden 896, 24 layers, 14 q / 2 kv heads, FFN 4864,
    vocab 151936, tied): the closed form and a shape-only build agree, 494,032,768 — the
    "0.49B" of its model card."""
    from course_lib.layers import CausalLM
    from course_lib.memory import build_lazy, count_parameters
    cfg = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
           "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
           "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 32768,
           "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
    config = families.config_from_hf(cfg)
    assert config.num_parameters() == count_parameters(build_lazy(CausalLM, config)) == 494_032_768


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama"])
def test_a_missing_tie_word_embeddings_follows_transformers(kind):
    """A config.json without ``tie_word_embeddings`` is read as transformers reads it: its
    config classes default to untied (checked against the classes, not a constant here)."""
    from transformers import AutoConfig
    cfg = {"model_type": kind, "hidden_size": 64, "num_hidden_layers": 2, "head_dim": 16,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0}
    expected = AutoConfig.for_model(kind).tie_word_embeddings
    assert families.config_from_hf(cfg).tie_embeddings is expected
    assert families.config_from_hf(dict(cfg, tie_word_embeddings=True)).tie_embeddings is True


def test_checkpoint_code_is_layered_without_an_import_circle():
    """hf_weights (files) imports no course module but safeio (atomic writes, itself a leaf);
    families (which network) imports only hf_weights and layers; pretrained (the one loader)
    builds on both; chapter 13's migration depends on them, never the reverse."""
    from pathlib import Path
    from test_course_map import course_imports as resolved_imports
    root = Path(cl.__file__).parent

    def course_imports(relpath):                 # function-level imports count too
        return {name.split(".")[1] for name in resolved_imports(root / relpath, root)}
    assert course_imports("hf_weights.py") == {"safeio"} and course_imports("safeio.py") == set()
    assert course_imports("families.py") <= {"hf_weights", "layers", "baichuan", "internlm"}
    assert "migration" not in course_imports("pretrained.py")
    assert not hasattr(__import__("course_lib.hf_weights", fromlist=["x"]), "load_pretrained")
