"""The base that ships in data/base/: provenance, integrity, the loader's errors, and its
perplexity measured independently by transformers' LlamaForCausalLM on torch."""
import json
import re
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from course_lib import zoo
from course_lib.families import config_from_hf, llama_config_kwargs
from course_lib.hf_weights import read_config
from course_lib.internlm import tiny
from course_lib.scale import at_scale

README = Path(__file__).resolve().parents[1] / "data" / "README.md"
PROVENANCE = zoo.shipped_provenance()


def readme_figures() -> tuple[str, float]:
    """(SHA-256, validation perplexity) as data/README.md states them."""
    text = README.read_text(encoding="utf-8")
    sha = re.search(r"SHA-256[^`]*`([0-9a-f]{64})`", text)
    ppl = re.search(r"validation perplexity[^0-9]*([0-9]+\.[0-9]+)", text)
    assert sha and ppl, "data/README.md must state the base's SHA-256 and validation perplexity"
    return sha.group(1), float(ppl.group(1))


def test_the_weights_are_the_ones_data_readme_describes():
    sha, _ = readme_figures()
    assert zoo.sha256_of(zoo.SHIPPED_DIR / zoo.SHIPPED_WEIGHTS) == sha == PROVENANCE["sha256"]
    total = sum(f.stat().st_size for f in zoo.SHIPPED_DIR.iterdir())
    assert total <= 16 * 2**20, f"data/base/ is {total / 2**20:.1f} MiB; the limit is 16 MiB"
    shipped_tok = (zoo.SHIPPED_DIR / "tokenizer.json").read_bytes()
    assert shipped_tok == (zoo.SHIPPED_DIR.parent / "tokenizer.json").read_bytes()


def test_config_is_the_zoo_base_config_and_recipe_the_full_one():
    with at_scale("full"):
        recipe = zoo.pretrain_recipe()
    loaded = config_from_hf(read_config(zoo.SHIPPED_DIR))
    expected = zoo.base_config(recipe)
    for field in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size",
                  "position", "qkv_bias", "o_bias", "fused_qkv", "rms_norm_eps", "rope_base"):
        assert getattr(loaded, field) == getattr(expected, field), field
    assert PROVENANCE["recipe"] == json.loads(json.dumps(asdict(recipe), default=list))
    assert len(PROVENANCE["history"]["loss"]) == recipe.steps
    assert json.loads((zoo.SHIPPED_DIR / "config.json").read_text())["torch_dtype"] == "float16"


def test_shipped_base_loads_without_training_and_its_perplexity_matches_readme(tokenizer):
    model, tok, info = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer)
    assert not info.trained_now and info.key.startswith("shipped-") and "data/base" in str(info)
    _, readme_ppl = readme_figures()
    ppl = zoo.validation_perplexity(model, tok)["perplexity"]
    print(f"shipped base validation perplexity {ppl:.2f} (README {readme_ppl})")
    assert abs(ppl / readme_ppl - 1) < 0.01


def test_transformers_llama_measures_the_same_perplexity(tokenizer):
    """Independent reference: HF LlamaForCausalLM(attention_bias=True) on torch reads the
    shipped safetensors and scores the same held-out blocks."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = config_from_hf(read_config(zoo.SHIPPED_DIR))
    hf = LlamaForCausalLM.from_pretrained(zoo.SHIPPED_DIR, torch_dtype=torch.float32,
                                          config=LlamaConfig(**llama_config_kwargs(config)))
    with at_scale("full"):
        val = zoo.validation_dataset(zoo.pretrain_recipe(), tokenizer)
    total, count = 0.0, 0
    for i, (ids, labels) in enumerate(val.create_tuple_iterator(num_epochs=1, output_numpy=True)):
        if i == zoo.EVAL_BATCHES:
            break
        with torch.no_grad():
            logits = hf(torch.from_numpy(ids.astype(np.int64))).logits
        nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                torch.from_numpy(labels.astype(np.int64)).flatten(),
                                                ignore_index=-100, reduction="sum")
        total, count = total + float(nll), count + int((labels != -100).sum())
    _, readme_ppl = readme_figures()
    assert abs(np.exp(total / count) / readme_ppl - 1) < 0.01


def test_an_empty_cache_needs_no_pretraining(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(zoo, "_pretrain", lambda *a, **k: pytest.fail("the shipped base trained"))
    for scale in ("ci", "full"):
        with at_scale(scale):
            _, _, info = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer)
        assert info.path == zoo.SHIPPED_DIR / zoo.SHIPPED_WEIGHTS
    assert not list(tmp_path.glob("zoo/*")), "loading the shipped base wrote to the zoo cache"


@pytest.fixture()
def shipped_copy(tmp_path):
    copy = tmp_path / "base"
    shutil.copytree(zoo.SHIPPED_DIR, copy)
    return copy


def test_a_damaged_copy_is_refused_with_what_to_do(shipped_copy, tokenizer):
    weights = shipped_copy / zoo.SHIPPED_WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not the shipped base.*git checkout -- data/base"):
        zoo.load_shipped_base(tokenizer, shipped_copy)
    weights.unlink()
    with pytest.raises(FileNotFoundError, match="make base"):
        zoo.load_shipped_base(tokenizer, shipped_copy)
    (shipped_copy / zoo.PROVENANCE).write_text("{not json")
    with pytest.raises(FileNotFoundError, match="incomplete"):
        zoo.load_shipped_base(tokenizer, shipped_copy)


def test_source_switch_and_its_errors(tokenizer, monkeypatch):
    monkeypatch.setenv("COURSE_BASE", "mine")
    with pytest.raises(ValueError, match="COURSE_BASE='mine'.*shipped.*own"):
        zoo.load_or_train("internlm-tiny", tokenizer=tokenizer)
    monkeypatch.setenv("COURSE_BASE", "own")
    assert zoo.base_source() == "own" and zoo.base_source("shipped") == "shipped"
    with pytest.raises(ValueError, match="source='own'"):
        zoo.load_base(tokenizer, source="shipped", steps=3)


def test_a_wrong_tokenizer_is_refused(shipped_copy, tokenizer, monkeypatch):
    monkeypatch.setitem(PROVENANCE, "tokenizer", "0" * 12)
    (shipped_copy / zoo.PROVENANCE).write_text(json.dumps(PROVENANCE))
    with pytest.raises(ValueError, match="not the one the shipped base was trained with"):
        zoo.load_shipped_base(tokenizer, shipped_copy)


def test_build_base_is_deterministic_and_replaces_the_directory(tmp_path, monkeypatch):
    """The build command end to end on a tiny recipe: two builds, the same bytes."""
    small = dict(steps=3, batch_size=2, block_size=16, max_docs=40, warmup_steps=1)
    real = zoo.pretrain_recipe
    monkeypatch.setattr(zoo, "pretrain_recipe", lambda **o: replace(real(**o), **small))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "base"
    first = zoo.build_base(out, progress=False)
    (out / "stale.txt").write_text("left from an older build")
    second = zoo.build_base(out, progress=False)
    assert first["sha256"] == second["sha256"] == zoo.sha256_of(out / zoo.SHIPPED_WEIGHTS)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.json", zoo.SHIPPED_WEIGHTS, "tokenizer.json", zoo.PROVENANCE])
    assert not list(tmp_path.glob(".tmp-*")) and not list(tmp_path.glob(".old-*"))
    ppl = second["metrics"]["val_perplexity_float16"]
    assert abs(ppl / second["metrics"]["val_perplexity"] - 1) < 0.01


def test_the_sentiment_adapter_on_the_shipped_base_is_keyed_by_its_hash(tokenizer, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    small = dict(steps=2, batch_size=2, max_len=48, train_examples=4, warmup_steps=1, r=2)
    model, _, info = zoo.load_or_train("internlm-tiny-sentiment-lora", tokenizer=tokenizer,
                                       progress=False, **small)
    assert info.trained_now and info.path.parent == tmp_path / "zoo"
    shipped_key = "shipped-" + PROVENANCE["sha256"][:12]
    recipe = zoo.lora_recipe(**small)
    assert info.key == zoo.cache_key(zoo.SENTIMENT_LORA, recipe, tokenizer, parent_key=shipped_key)
    _, _, again = zoo.load_or_train("internlm-tiny-sentiment-lora", tokenizer=tokenizer, **small)
    assert not again.trained_now and again.key == info.key
