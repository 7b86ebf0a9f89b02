"""LLMTrainer: exact resume, fine-tuning subset, evaluation math, callbacks, bad inputs."""
import re
import math

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore.train import Callback

from course_lib.pipelines import BlockSource, PairSource, make_dataset
from course_lib.trainer import LLMTrainer
from tiny_lm import TinyConfig, TinyLM

HPARAMS = dict(lr=1e-2, steps=10, warmup_steps=2, weight_decay=0.1, clip=1.0)


def _blocks(n=22, seed=0, vocab=64, block=9):
    return np.random.default_rng(seed).integers(0, vocab, (n, block)).astype(np.int32)


def _data(seed=1, n=22, batch=4):
    # 22 rows / batch 4 = 5 batches per epoch: 10 steps cross an epoch boundary (re-shuffle)
    return make_dataset(BlockSource(_blocks(n)), batch, seed=seed)


def _model(seed=0):
    ms.set_seed(seed)
    return TinyLM()


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path, mode):
    straight = LLMTrainer(_model(), _data(), mode=mode, **HPARAMS)
    straight.train(5)
    straight.save(tmp_path / "half.ckpt")     # saving changes no state: this run goes on
    straight.train()                           # ... uninterrupted to step 10
    full = straight.history
    assert len(full["loss"]) == 10 and full["loss"][-1] < full["loss"][0]

    # fresh model (other random init), fresh dataset object, other global seeds in between
    ms.set_seed(123)
    np.random.seed(7)
    resumed = LLMTrainer(_model(seed=99), _data(), mode=mode, **HPARAMS)
    resumed.load(tmp_path / "half.ckpt")
    assert resumed.step == 5
    second = resumed.train()
    assert second["step"] == list(range(6, 11))
    assert full["loss"][5:] == second["loss"]               # bit-identical losses
    assert resumed.history["loss"] == full["loss"]          # whole curve restored
    for a, b in zip(straight.model.get_parameters(), resumed.model.get_parameters()):
        assert np.array_equal(a.asnumpy(), b.asnumpy()), a.name


def test_training_lowers_the_loss_and_follows_the_schedule():
    trainer = LLMTrainer(_model(), _data(), **HPARAMS)
    hist = trainer.train()
    assert hist["lr"] == trainer.lr_schedule
    assert np.mean(hist["loss"][-3:]) < np.mean(hist["loss"][:3])
    with pytest.raises(ValueError, match="scheduled steps are done"):
        trainer.train()


def test_evaluate_is_the_token_weighted_perplexity():
    blocks = _blocks(8, seed=3)
    labels = blocks[:, 1:].copy()
    labels[:4, :5] = -100                                    # uneven target counts per batch
    data = make_dataset(PairSource(blocks[:, :-1], labels), 4, shuffle=False)
    trainer = LLMTrainer(_model(), _data(), data, **HPARAMS)
    result = trainer.evaluate()
    # reference: NumPy log-softmax over the model's logits, all kept tokens pooled
    logits = trainer.predict(blocks[:, :-1]).astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    keep = labels != -100
    nll = -np.take_along_axis(logp, np.where(keep, labels, 0)[..., None], -1)[..., 0]
    ref = nll[keep].mean()
    assert result["loss"] == pytest.approx(ref, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(ref), rel=1e-5)


def test_finetune_trains_only_the_selected_parameters():
    trainer = LLMTrainer(_model(), _data(), **HPARAMS)
    trainer.train(3)
    before = {p.name: p.asnumpy().copy() for p in trainer.model.get_parameters()}
    rec, new_eval = _Recorder(), _data(seed=6)
    hist = trainer.finetune(_data(seed=5), trainable=lambda n: n.startswith("head."), steps=4,
                            lr=1e-2, eval_data=new_eval, callbacks=[rec])
    assert hist["step"] == [1, 2, 3, 4] and [s for s, _ in rec.steps] == [1, 2, 3, 4]
    assert trainer.eval_data is new_eval and trainer.callbacks == [rec]
    assert trainer.num_trainable == 64 * 16 + 64
    for p in trainer.model.get_parameters():
        changed = not np.array_equal(p.asnumpy(), before[p.name])
        assert changed == p.name.startswith("head."), p.name


class _Recorder(Callback):
    def __init__(self, stop_at=None):
        self.events, self.steps, self.stop_at = [], [], stop_at

    def on_train_begin(self, rc):
        self.events.append("begin")

    def on_train_epoch_end(self, rc):
        self.events.append(f"epoch_end{rc.original_args().cur_epoch_num}")

    def on_train_step_end(self, rc):
        cb = rc.original_args()
        # the fields Model.train fills, so Model callbacks work unchanged
        assert cb.optimizer is not None and cb.train_network is not None
        self.steps.append((cb.cur_step_num, float(cb.net_outputs.asnumpy())))
        if self.stop_at and cb.cur_step_num == self.stop_at:
            rc.request_stop()

    def on_train_end(self, rc):
        self.events.append("end")


def test_callbacks_see_model_train_fields_and_can_stop():
    rec = _Recorder(stop_at=7)
    trainer = LLMTrainer(_model(), _data(), callbacks=[rec], **HPARAMS)
    hist = trainer.train()
    assert trainer.stopped_early and trainer.step == 7
    assert rec.events == ["begin", "epoch_end1", "end"]       # 5 batches per epoch
    assert [s for s, _ in rec.steps] == list(range(1, 8))
    assert [loss for _, loss in rec.steps] == hist["loss"]


# --- bad inputs ---------------------------------------------------------------------------
def test_bad_inputs_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="steps must be a positive int"):
        LLMTrainer(_model(), _data(), lr=1e-3, steps=0)
    with pytest.raises(ValueError, match="train_data is None"):
        LLMTrainer(_model(), None, steps=5)
    # 3 rows, batches of 4 with drop_remainder: a dataset that yields nothing
    empty = ds.GeneratorDataset(BlockSource(_blocks(3)), ["input_ids", "labels"]).batch(4, True)
    with pytest.raises(ValueError, match="empty"):
        LLMTrainer(_model(), empty, steps=5)
    trainer = LLMTrainer(_model(), _data(), **HPARAMS)
    with pytest.raises(ValueError, match="No evaluation data"):
        trainer.evaluate()
    with pytest.raises(ValueError, match="exceed the schedule"):
        trainer.train(11)
    with pytest.raises(ValueError, match="selection is empty"):
        LLMTrainer(_model(), _data(), trainable=lambda n: "lora" in n, **HPARAMS)
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        trainer.load(tmp_path / "missing.ckpt")
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ValueError, match="corrupt"):
        trainer.load(corrupt)


def test_checkpoint_from_a_different_model_names_the_mismatch(tmp_path):
    big = LLMTrainer(TinyLM(TinyConfig(hidden_size=24)), _data(), **HPARAMS)
    big.save(tmp_path / "big.ckpt")
    trainer = LLMTrainer(_model(), _data(), **HPARAMS)
    with pytest.raises(ValueError, match=r"shape mismatch.*mix\.weight: checkpoint \(24, 24\) vs model \(16, 16\)") as err:
        trainer.load(tmp_path / "big.ckpt")
    # the model's own parameters come first (not the optimizer moments), and the advice fits
    # a trainer checkpoint (it has no config.json to build from)
    assert re.search(r"shape mismatch \(\d+\): \['(?!adam_|moment)", str(err.value)), str(err.value)
    assert "config it was saved with" in str(err.value) and "from_pretrained" not in str(err.value)
    with pytest.raises(ValueError, match="embed.embedding_table"):
        trainer.load(tmp_path / "big.ckpt", weights_only=True)
    same = LLMTrainer(_model(), _data(), **HPARAMS)
    same.save(tmp_path / "same.ckpt")
    longer = LLMTrainer(_model(), _data(), lr=1e-2, steps=20)
    with pytest.raises(ValueError, match="another learning-rate schedule"):
        longer.load(tmp_path / "same.ckpt")
    head_only = LLMTrainer(_model(), _data(), trainable=lambda n: n.startswith("head."), **HPARAMS)
    with pytest.raises(ValueError, match="only the optimizer state differs"):
        head_only.load(tmp_path / "same.ckpt")
    head_only.load(tmp_path / "same.ckpt", weights_only=True)


def test_weights_only_load_keeps_optimizer_fresh(tmp_path):
    a = LLMTrainer(_model(), _data(), **HPARAMS)
    a.train(4)
    a.save(tmp_path / "a.ckpt")
    b = LLMTrainer(_model(seed=5), _data(), lr=1e-3, steps=3)
    b.load(tmp_path / "a.ckpt", weights_only=True)
    assert b.step == 0
    for x, y in zip(a.model.get_parameters(), b.model.get_parameters()):
        assert np.array_equal(x.asnumpy(), y.asnumpy())
