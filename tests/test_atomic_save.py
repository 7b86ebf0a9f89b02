"""Crash-safe saves and self-healing caches.

* A process SIGKILLed while it overwrites a checkpoint leaves the previous good checkpoint
  (or the complete new one), never a missing or torn file.
* A successful save leaves no temporary file behind; a failed one leaves the old file.
* A cache file that is torn, not UTF-8 or of the wrong content is rebuilt, and the rebuild
  names the file.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from course_lib import data, safeio, zoo

ROOT = Path(__file__).resolve().parents[1]

OVERWRITER = """
import sys
import numpy as np
import course_lib as cl
from course_lib.internlm import InternLMForCausalLM, tiny
from course_lib.pipelines import BlockSource, make_dataset
from course_lib.trainer import LLMTrainer
cl.setup(device="CPU", seed=0, quiet=True)
cfg = tiny(vocab_size=8000, hidden_size=256, intermediate_size=704, num_heads=4, num_layers=2)
blocks = np.random.default_rng(0).integers(0, 8000, (16, 9)).astype(np.int32)
trainer = LLMTrainer(InternLMForCausalLM(cfg), make_dataset(BlockSource(blocks), 4), steps=10**6)
path = sys.argv[1]
trainer.save(path)
print("GOOD", flush=True)
i = 0
while True:                      # overwrite the same file again and again, like a notebook
    i += 1
    trainer.step = i             # the saved metadata tells the versions apart
    trainer.save(path)
"""


def _load_step(path: Path) -> int:
    import mindspore as ms
    saved = ms.load_checkpoint(str(path))
    assert "model.embed_tokens.weight" in saved and "adam_m.model.embed_tokens.weight" in saved
    return int(np.asarray(saved["step"].asnumpy()))


def test_killed_overwrite_keeps_a_complete_checkpoint(tmp_path):
    script = tmp_path / "overwrite.py"
    script.write_text(OVERWRITER)
    target = tmp_path / "ckpt" / "half.ckpt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOG_v="3")
    caught_mid_write = rounds = 0
    for delay in (0.3, 0.7, 1.1, 1.5, 0.5, 0.9):
        proc = subprocess.Popen([sys.executable, str(script), str(target)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout.readline().strip() == "GOOD"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        rounds += 1
        stale = safeio.stale_temp_files(target.parent)
        caught_mid_write += bool(stale)
        step = _load_step(target)            # loads: the previous good file survived
        assert step >= 0
        for f in stale:                      # what a killed writer leaves: only its temp
            assert f.name.startswith(f".tmp-{proc.pid}-half."), f.name
        if caught_mid_write >= 2:
            break
    print(f"SIGKILL rounds {rounds}, inside a save {caught_mid_write}, checkpoint loadable "
          f"after every round")
    assert caught_mid_write >= 1, "no kill landed inside a save; the test proved nothing"
    # the next successful save removes what the killed writers left behind
    assert safeio.remove_stale_temps(target) or not safeio.stale_temp_files(target.parent)
    safeio.write_text_atomic(target.with_name("other.json"), "{}")
    safeio.atomic_write(target, lambda tmp: tmp.write_bytes(target.read_bytes()))
    assert sorted(p.name for p in target.parent.iterdir()) == ["half.ckpt", "other.json"]


def test_successful_saves_leave_no_temporary_files(tmp_path):
    from course_lib.callbacks import CheckpointSaver
    from course_lib.internlm import InternLMForCausalLM, tiny
    from course_lib.lora import inject_lora, save_adapter
    from course_lib.pipelines import BlockSource, make_dataset
    from course_lib.trainer import LLMTrainer

    cfg = tiny(vocab_size=64, hidden_size=16, intermediate_size=32, num_heads=2, max_seq_len=32)
    blocks = np.random.default_rng(0).integers(0, 64, (8, 9)).astype(np.int32)
    saver = CheckpointSaver(tmp_path / "cb", every_n_steps=1, keep=2)
    trainer = LLMTrainer(InternLMForCausalLM(cfg), make_dataset(BlockSource(blocks), 4),
                         steps=3, mode="pynative", callbacks=[saver])
    trainer.train()
    for _ in range(2):                       # overwrite the same name
        trainer.save(tmp_path / "t" / "half.ckpt")
    assert trainer.load(tmp_path / "t" / "half.ckpt").step == 3
    inject_lora(trainer.model, ["q_proj"], r=2)
    save_adapter(trainer.model, tmp_path / "a" / "adapter.safetensors")
    safeio.write_text_atomic(tmp_path / "j" / "x.json", "{}")
    for sub, names in (("cb", ["ckpt-step000002.ckpt", "ckpt-step000003.ckpt"]),
                       ("t", ["half.ckpt"]), ("a", ["adapter.safetensors"]), ("j", ["x.json"])):
        assert sorted(p.name for p in (tmp_path / sub).iterdir()) == names


def test_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path):
    target = tmp_path / "x.json"
    safeio.write_text_atomic(target, '{"good": 1}')

    def torn(tmp):
        tmp.write_text('{"half', encoding="utf-8")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        safeio.atomic_write(target, torn)
    assert json.loads(target.read_text()) == {"good": 1}
    assert list(tmp_path.iterdir()) == [target]


def test_plain_mindspore_save_is_not_atomic(tmp_path):
    """Why safeio exists: ms.save_checkpoint removes the target before writing it."""
    import mindspore as ms
    from mindspore import nn
    path = tmp_path / "m.ckpt"
    net = nn.Dense(4, 4)
    ms.save_checkpoint(net, str(path))
    seen = []
    original = os.remove if hasattr(os, "remove") else None

    def spy(p, *a, **k):
        seen.append((Path(p).name, Path(p).exists()))
        return original(p, *a, **k)

    os.remove = spy
    try:
        ms.save_checkpoint(net, str(path))
    finally:
        os.remove = original
    assert ("m.ckpt", True) in seen          # the good file was deleted first
    seen.clear()
    os.remove = spy
    try:
        safeio.save_checkpoint_atomic(net, path)
    finally:
        os.remove = original
    assert ("m.ckpt", True) not in seen      # ours only ever deletes its own temporary


# ------------------------------------------------------------------ self-healing caches
CORRUPTIONS = {
    "torn json": b'["\xe4\xba\xba\xe6\xb0\x91", "abc',
    "torn inside a Chinese character": '["人民日报'.encode("utf-8")[:-1],
    "not utf-8": b"\xff\xfe\x00garbage",
    "wrong content (an object)": b'{"a": 1}',
    "wrong content (1 document)": '["只有一篇"]'.encode("utf-8"),
    "wrong content (numbers)": b"[1, 2, 3]",
    "empty file": b"",
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corpus_cache_rebuilds_on_any_bad_content(corruption, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    first = data.news_documents()
    files = list((tmp_path / "corpora").glob("news-*.json"))
    assert len(files) == 1
    files[0].write_bytes(CORRUPTIONS[corruption])
    capsys.readouterr()
    assert data.news_documents() == first
    out = capsys.readouterr().out
    assert files[0].name in out and "rebuilding" in out
    assert data.news_documents() == first     # the rebuilt file is good again
    assert safeio.stale_temp_files(tmp_path / "corpora") == []


def test_review_cache_rebuilds_wrong_labels(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    first = data.review_examples()
    (f,) = (tmp_path / "corpora").glob("reviews-*.json")
    f.write_text(json.dumps([["好", 2]] * 2000), encoding="utf-8")
    assert data.review_examples() == first
    assert "rebuilding" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"\xff\xfe", b'{"recipe": {}}', b"[]",
                                     b'{"recipe": {}, "history": [], "metrics": {}, '
                                     b'"train_seconds": 1}'])
def test_zoo_metadata_validated(content, tmp_path, capsys):
    meta = tmp_path / "internlm-tiny-abc.json"
    meta.write_bytes(content)
    assert zoo._read_info(meta) is None
    assert str(meta) in capsys.readouterr().out
    good = {"recipe": {}, "history": {"loss": [1.0]}, "metrics": {}, "train_seconds": 1.5}
    meta.write_text(json.dumps(good))
    assert zoo._read_info(meta) == good


def test_corrupt_cached_tokenizer_is_rebuilt(tmp_path, monkeypatch, capsys):
    from course_lib import tokenizer as tk
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tk, "SHIPPED_PATH", tmp_path / "absent.json")
    shipped = tk.load_tokenizer(ROOT / "data" / "tokenizer.json")
    monkeypatch.setattr(tk, "train_course_tokenizer", lambda: shipped)
    cached = tmp_path / "tokenizer" / "tokenizer.json"
    cached.parent.mkdir()
    cached.write_bytes(b'{"version": "1.0", "trunc')
    tok = tk.load_tokenizer()
    assert tok.encode("人民日报") == shipped.encode("人民日报")
    assert str(cached) in capsys.readouterr().out
    assert tk.load_tokenizer().vocab_size == shipped.vocab_size


def test_failed_mindir_export_keeps_the_previous_export(tmp_path, monkeypatch):
    """``export_mindir`` over an existing export: an export that dies half-way (here: writes
    part of the file, then raises) leaves the previous ``.mindir`` byte-identical and loadable."""
    import mindspore as ms
    from course_lib import export
    from course_lib.internlm import InternLMForCausalLM, tiny

    model = InternLMForCausalLM(tiny(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    info = export.export_mindir(model, (1, 8), tmp_path / "lm")
    before = info.path.read_bytes()

    def dies_half_way(net, *inputs, file_name, file_format):
        with open(file_name + ".mindir", "wb") as f:
            f.write(before[: len(before) // 2])
        raise RuntimeError("killed during export")

    monkeypatch.setattr(ms, "export", dies_half_way)
    with pytest.raises(RuntimeError, match="killed during export"):
        export.export_mindir(model, (1, 8), tmp_path / "lm")
    assert info.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm.json", "lm.mindir"]
    monkeypatch.undo()
    assert export.load_mindir(info.path).input_shape == (1, 8)
