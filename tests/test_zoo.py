"""course_lib.zoo: train once, cache by key, reload identically; deterministic training."""
import numpy as np
import pytest

from course_lib import zoo
from course_lib.lora import lora_layers

SMALL = dict(steps=3, batch_size=2, block_size=16, max_docs=40, warmup_steps=1,
             config=dict(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
SMALL_LORA = dict(steps=3, batch_size=2, max_len=48, train_examples=8, warmup_steps=1, r=2)


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    """A private cache directory for this module (the news corpus cache stays shared)."""
    root = tmp_path_factory.mktemp("cache")

    def private(*parts):
        path = root.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zoo, "cache_dir", private)
        mp.setenv("COURSE_BASE", "own")      # these tests train their own small bases
        yield root / "zoo"


def weights(model):
    return {p.name: p.asnumpy().copy() for p in model.get_parameters()}


def test_base_is_trained_once_cached_and_reloaded_identically(zoo_dir, tokenizer):
    model, tok, info = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer, progress=False,
                                         **SMALL)
    assert info.trained_now and info.path.is_file() and info.path.parent == zoo_dir
    assert len(info.history["loss"]) == 3 and np.isfinite(info.metrics["val_loss"])
    assert model.config.hidden_size == 32 and not model.training
    first = weights(model)
    again, _, info2 = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer, **SMALL)
    assert not info2.trained_now and info2.key == info.key
    assert info2.history == info.history
    second = weights(again)
    assert all(np.array_equal(first[k], second[k]) for k in first)
    # retraining from scratch reproduces the cached weights (seeded, deterministic)
    retrained, _, info3 = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer,
                                            retrain=True, progress=False, **SMALL)
    assert info3.trained_now
    third = weights(retrained)
    assert all(np.array_equal(first[k], third[k]) for k in first)
    # any change of the recipe is a different entry
    other = zoo.cache_key(zoo.BASE, zoo.pretrain_recipe(**{**SMALL, "steps": 4}), tokenizer)
    assert other != info.key


def test_a_corrupt_cache_entry_is_rebuilt(zoo_dir, tokenizer, capsys, monkeypatch):
    calls = []

    def fake_pretrain(recipe, tokenizer, progress):      # the cache logic, not training again
        calls.append(recipe)
        return zoo.new_base(recipe), {"loss": [1.0], "lr": [0.1]}, None, 0.0
    monkeypatch.setattr(zoo, "_pretrain", fake_pretrain)
    monkeypatch.setattr(zoo, "_metrics", lambda trainer, history: {"val_loss": 1.0})
    recipe = {**SMALL, "seed": 5}
    _, _, info = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer, **recipe)
    assert info.trained_now and len(calls) == 1
    info.path.chmod(0o644)
    info.path.write_bytes(b"not a checkpoint")
    _, _, again = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer, **recipe)
    assert again.trained_now and len(calls) == 2 and "unreadable" in capsys.readouterr().out
    _, _, third = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer, **recipe)
    assert not third.trained_now and len(calls) == 2


def test_sentiment_lora_entry_keeps_the_base_and_caches_only_the_adapter(zoo_dir, tokenizer):
    base, _, base_info = zoo.load_or_train("internlm-tiny", tokenizer=tokenizer,
                                           progress=False, **SMALL)
    model, _, info = zoo.load_or_train("internlm-tiny-sentiment-lora", tokenizer=tokenizer,
                                       progress=False, base_overrides=SMALL, **SMALL_LORA)
    assert info.trained_now and info.path.suffix == ".safetensors"
    # the default targets: every linear layer of the decoder layer (attention and MLP)
    assert sorted(name.rsplit(".", 1)[1] for name in lora_layers(model)) == sorted(zoo.LORA_TARGETS)
    assert info.path.stat().st_size < base_info.path.stat().st_size / 20
    base_w, lora_w = weights(base), weights(model)
    assert all(np.array_equal(base_w[k], lora_w[k]) for k in base_w)   # base untouched
    assert any(np.abs(lora_w[k]).sum() > 0 for k in lora_w if k.endswith("lora_B"))
    again, _, info2 = zoo.load_or_train("internlm-tiny-sentiment-lora", tokenizer=tokenizer,
                                        base_overrides=SMALL, **SMALL_LORA)
    assert not info2.trained_now
    w2 = weights(again)
    assert all(np.array_equal(lora_w[k], w2[k]) for k in lora_w)


def test_unknown_name():
    with pytest.raises(ValueError, match="Unknown zoo model 'gpt-5'.*internlm-tiny"):
        zoo.load_or_train("gpt-5")


def test_pretraining_texts_put_a_seeded_share_of_news_in_the_chat_template(tokenizer):
    from course_lib.data import news_splits
    docs = news_splits().train[:400]
    texts = zoo.pretraining_texts(docs, tokenizer, chat_fraction=0.3, seed=0)
    assert texts == zoo.pretraining_texts(docs, tokenizer, chat_fraction=0.3, seed=0)
    from course_lib.data import split_sentences
    chat = [(d, t) for d, t in zip(docs, texts) if t != d]
    eligible = [d for d in docs if len(split_sentences(d)) >= 2]   # something to continue
    assert all(d in eligible for d, _ in chat)
    assert 0.2 * len(eligible) < len(chat) < 0.4 * len(eligible)
    prefix = "<|user|>" + zoo.CONTINUE_PROMPT
    for doc, text in chat:
        assert text.startswith(prefix) and text.endswith("<|end|>")
        user, assistant = text[len(prefix):-len("<|end|>")].split("<|end|><|assistant|>")
        assert user + assistant == doc                 # nothing added, nothing lost
    ids = tokenizer.encode(chat[0][1])
    assert ids[0] == tokenizer.user_id and ids[-1] == tokenizer.end_id
    assert tokenizer.assistant_id in ids
    assert zoo.pretraining_texts(docs, tokenizer, chat_fraction=0.0) == docs
