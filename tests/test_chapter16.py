"""course_lib.own_model: the helpers chapter 16 uses, on a tiny Qwen2.5 look-alike."""
import json

import numpy as np
import pytest
from mindspore import Tensor

import course_lib as cl
from course_lib import finetune, lora, own_model, pipelines
from course_lib.trainer import LLMTrainer

TINY = dict(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return own_model.model_directory(None, tmp_path_factory.mktemp("ch16"), TINY)


def test_the_lookalike_is_written_once_and_reused(folder):
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    again = own_model.model_directory(None, folder.parent, TINY)
    assert again == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    cfg = json.loads((folder / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_key_value_heads"], cfg["tie_word_embeddings"]) == ("qwen2", 2, True)


def test_a_changed_size_writes_another_folder(folder):
    other = own_model.model_directory(None, folder.parent, dict(TINY, num_layers=2))
    assert other != folder and json.loads((other / "config.json").read_text())["num_hidden_layers"] == 2


def test_model_dir_is_used_as_given_and_a_wrong_one_is_refused(folder, tmp_path):
    assert own_model.model_directory(str(folder), tmp_path, TINY) == folder
    with pytest.raises(FileNotFoundError, match="config.json"):
        own_model.model_directory(str(tmp_path / "typo"), tmp_path, TINY)


def test_layout_reads_the_loaded_model_and_its_files(folder):
    model = cl.from_pretrained(folder, dtype="float32", verbose=False)
    shape = own_model.layout(model, folder)
    assert shape["gqa_ratio"] == 2 and shape["tied_head"] and shape["vocab_matrices_on_disk"] == 1
    assert shape["parameters"] == sum(p.size for p in model.get_parameters())
    assert own_model.attention_biases(model) == (True, False)      # Qwen2: q/k/v bias, no o bias


def test_token_pieces_join_split_characters_and_keep_specials(folder):
    tok = cl.load_hf_tokenizer(folder)
    ids = tok.encode("<|im_start|>你好<|im_end|>", add_special_tokens=False)
    pieces = own_model.token_pieces(tok, ids)
    assert "".join(pieces) == "<|im_start|>你好<|im_end|>"
    assert pieces[0] == "<|im_start|>" and pieces[-1] == "<|im_end|>"
    assert not any("\ufffd" in p for p in pieces)


def test_write_chats_is_what_finetune_reads(folder, tmp_path):
    model = cl.from_pretrained(folder, dtype="float32", verbose=False)
    tok = cl.load_hf_tokenizer(folder)
    path = own_model.write_chats(tmp_path / "qa.jsonl", [("问", "答。"), ("再问", "再答。")], system="助教")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    inputs, labels = finetune.read_examples(path, tok, model, max_len=48)
    assert inputs.shape == (2, 48)
    with pytest.raises(ValueError, match="empty"):
        own_model.write_chats(tmp_path / "bad.jsonl", [("问", " ")])
    with pytest.raises(ValueError, match="no"):
        own_model.write_chats(tmp_path / "none.jsonl", [])


def test_step_timer_times_every_step(folder, tmp_path):
    model = cl.from_pretrained(folder, dtype="float32", verbose=False)
    tok = cl.load_hf_tokenizer(folder)
    path = own_model.write_chats(tmp_path / "qa.jsonl", [("问", "答。")] * 4)
    inputs, labels = finetune.read_examples(path, tok, model, max_len=32)
    lora.inject_lora(model, ["q_proj", "v_proj"], r=2, alpha=4)
    timer = own_model.StepTimer()
    LLMTrainer(model, pipelines.make_dataset(pipelines.PairSource(inputs, labels), 2), steps=3,
               trainable=lora.lora_parameters(model), mode="pynative", callbacks=[timer]).train()
    assert len(timer.seconds) == 3 and all(s > 0 for s in timer.seconds)
    assert timer.steady() == sorted(timer.seconds[1:])[0] / 2 + sorted(timer.seconds[1:])[1] / 2
    with pytest.raises(ValueError, match="no step"):
        own_model.StepTimer().steady()


def test_cast_parameters_halves_the_weights_and_keeps_the_logits_close(folder):
    model = cl.from_pretrained(folder, dtype="float32", verbose=False)
    ids = Tensor(np.arange(3, 19, dtype=np.int32)[None])
    before = model(ids).asnumpy()
    own_model.cast_parameters(model, "float16")
    assert {str(p.dtype) for p in model.get_parameters()} == {"Float16"}
    assert np.abs(model(ids).asnumpy() - before).max() < 1e-2
    with pytest.raises(ValueError, match="dtype"):
        own_model.cast_parameters(model, "int8")


def test_layout_of_a_model_without_gqa(monkeypatch):
    """Baichuan2 (and any MHA family) has num_kv_heads None: one K/V head per query head
    (before 2026-12-07 layout divided by None, so chapter 16 stopped on a Baichuan2 directory)."""
    import types
    from course_lib import baichuan
    cfg = baichuan.tiny()
    assert cfg.num_kv_heads is None
    monkeypatch.setattr(own_model.hf_weights, "checkpoint_signature", lambda directory: {})
    shape = own_model.layout(types.SimpleNamespace(config=cfg, family="baichuan"), "unused")
    assert shape["kv_heads"] == shape["q_heads"] == cfg.num_heads and shape["gqa_ratio"] == 1
