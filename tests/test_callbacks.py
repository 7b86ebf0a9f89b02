"""Callbacks under Model.train and LLMTrainer: lr methods really change the lr used,
early stopping, checkpoint + exact resume, progress bar, live plot (headless)."""
import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model

from course_lib.callbacks import (AssignLR, CheckpointSaver, EarlyStopping, History,
                                  LiveLossPlot, ProgressBar, probe_lr, restore_checkpoint)
from course_lib.metrics import BinaryF1
from course_lib.pipelines import BlockSource, make_dataset
from course_lib.trainer import LLMTrainer
from tiny_lm import TinyLM

WANTED = [0.1, 0.05, 0.033333, 0.025]   # 0.1 / (i + 1), rounded as probe_lr rounds


# --- learning rate ------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("method", ["assign", "scheduler", "dynamic_list"])
def test_correct_lr_methods_change_the_lr_really_used(method, mode):
    assert probe_lr(method, mode) == pytest.approx(WANTED, abs=1e-6)


def test_probe_sees_a_constant_lr_without_a_method():
    assert probe_lr("constant") == pytest.approx([0.1] * 4, abs=1e-6)


def test_assigning_a_float_to_optimizer_learning_rate_raises():
    result = probe_lr("attr_float", "pynative")
    assert isinstance(result, str) and result.startswith("TypeError")


def test_assigning_a_tensor_breaks_the_update_in_pynative():
    # in its own process: the compiled optimizer then reads stale memory
    result = probe_lr("attr_tensor", "pynative", isolated=True)
    assert isinstance(result, list) and len(result) == 4, result
    assert result[0] == pytest.approx(0.1, abs=1e-6)      # step 1 runs before the callback
    # then zero or garbage updates: never the lr the callback meant
    assert all(r != pytest.approx(w, abs=1e-6) for r, w in zip(result[1:], WANTED[1:]))


class _RaisesWithoutMessage(Callback):
    def on_train_step_begin(self, run_context):
        raise ValueError()


def test_probe_reports_an_error_without_a_message():
    assert probe_lr(callbacks=[_RaisesWithoutMessage()]) == "ValueError: "


def test_assign_lr_refuses_an_optimizer_with_a_schedule():
    blocks = np.random.default_rng(0).integers(0, 64, (8, 9)).astype(np.int32)
    trainer = LLMTrainer(TinyLM(), make_dataset(BlockSource(blocks), 4), steps=2,
                         callbacks=[AssignLR(lambda i: 0.1)])
    with pytest.raises(ValueError, match="dynamic lr"):
        trainer.train()


# --- a small Model task -------------------------------------------------------------------
def _xy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


def _data(shuffle=False):
    x, y = _xy()
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=shuffle).batch(8)   # 5 steps/epoch


def _build(seed=0, steps=40):
    ms.set_seed(seed)
    net = nn.Dense(6, 2)
    opt = nn.Adam(net.trainable_params(), learning_rate=[0.05 * 0.95 ** i for i in range(steps)])
    model = Model(net, nn.CrossEntropyLoss(), opt, metrics={"f1": BinaryF1(), "acc": nn.Accuracy()})
    return net, opt, model


def test_model_checkpoint_resume_reproduces_the_loss_curve(tmp_path):
    net, opt, model = _build()
    straight, saver = History(), CheckpointSaver(tmp_path, prefix="m")
    model.train(4, _data(), callbacks=[straight, saver], dataset_sink_mode=False)
    assert [p.name for p in saver.saved] == [f"m-step{s:06d}.ckpt" for s in (5, 10, 15, 20)]

    net2, opt2, model2 = _build(seed=7)                   # other initial weights
    meta = restore_checkpoint(saver.saved[1], net2, opt2)
    assert meta == {"step": 10, "epoch": 2}
    resumed = History()
    model2.train(4, _data(), callbacks=[resumed], dataset_sink_mode=False,
                 initial_epoch=meta["epoch"])
    assert resumed.history["loss"] == straight.history["loss"][10:]
    assert resumed.history["lr"] == straight.history["lr"][10:]
    assert np.array_equal(net.weight.asnumpy(), net2.weight.asnumpy())


def test_restore_checkpoint_names_mismatched_parameters(tmp_path):
    net, opt, model = _build()
    saver = CheckpointSaver(tmp_path)
    model.train(1, _data(), callbacks=[saver], dataset_sink_mode=False)
    with pytest.raises(ValueError, match=r"weight: checkpoint \(2, 6\) vs model \(2, 5\)"):
        restore_checkpoint(saver.latest, nn.Dense(5, 2))
    with pytest.raises(FileNotFoundError):
        restore_checkpoint(tmp_path / "nope.ckpt", net)


def test_early_stopping_stops_after_patience_and_restores_the_best_weights():
    net, opt, model = _build()
    scripted = iter([0.5, 0.7, 0.6, 0.65, 0.9, 0.9])     # best at the 2nd evaluation
    snapshots = []

    def evaluate():
        snapshots.append(net.weight.asnumpy().copy())
        return {"f1": next(scripted), "acc": 0.0}

    stop = EarlyStopping("f1", evaluate=evaluate, patience=2)
    history = History()   # placed BEFORE the evaluating callback: still sees every evaluation
    model.train(10, _data(), callbacks=[history, stop], dataset_sink_mode=False)
    assert stop.scores == [(5, 0.5), (10, 0.7), (15, 0.6), (20, 0.65)]
    assert [(s, r["f1"]) for s, r in history.evals] == stop.scores
    assert (stop.best, stop.best_step, stop.stopped_step) == (0.7, 10, 20)
    assert np.array_equal(net.weight.asnumpy(), snapshots[1])


def test_early_stopping_with_a_real_model_eval_and_unknown_metric_name():
    net, opt, model = _build()
    stop = EarlyStopping("f1", evaluate=lambda: model.eval(_data()), patience=1, every_n_steps=5)
    history = History()
    model.train(3, _data(), callbacks=[stop, history], dataset_sink_mode=False)
    assert [s for s, _ in stop.scores] == [5, 10, 15][:len(stop.scores)]
    assert [s for s, _ in history.evals] == [s for s, _ in stop.scores]
    assert all(0.0 <= v <= 1.0 for _, v in stop.scores)

    wrong = EarlyStopping("accuracy", evaluate=lambda: model.eval(_data()))
    with pytest.raises(KeyError, match=r"returned only \['acc', 'f1'\]"):
        model.train(1, _data(), callbacks=[wrong], dataset_sink_mode=False)
    with pytest.raises(ValueError, match="evaluate="):
        model.train(1, _data(), callbacks=[EarlyStopping("f1")], dataset_sink_mode=False)
    with pytest.raises(ValueError, match="mode"):
        EarlyStopping("f1", mode="best")


def test_early_stopping_uses_the_trainer_evaluate_by_default():
    blocks = np.random.default_rng(0).integers(0, 64, (16, 9)).astype(np.int32)
    data = make_dataset(BlockSource(blocks), 4)
    stop = EarlyStopping("perplexity", patience=50, every_n_steps=2)
    plot = LiveLossPlot(metrics=("loss", "perplexity"), live=False)
    trainer = LLMTrainer(TinyLM(), data, data, lr=1e-2, steps=6, callbacks=[stop, plot])
    trainer.train()
    assert [s for s, _ in stop.scores] == [2, 4, 6]
    assert stop.minimize and stop.best == min(v for _, v in stop.scores)
    assert len(plot.plot.data["loss"][1]) == 6
    assert plot.plot.data["val_perplexity"][0] == [2, 4, 6]
    fig = plot.plot.figure()
    assert [ax.get_title() for ax in fig.axes] == ["loss / val_loss", "val_perplexity"]


def test_live_loss_plot_follows_model_train_too():
    net, opt, model = _build()
    plot = LiveLossPlot(metrics=("loss",), live=False)
    model.train(2, _data(), callbacks=[plot], dataset_sink_mode=False)
    steps, losses = plot.plot.data["loss"]
    assert list(steps) == list(range(1, 11))            # 2 epochs x 5 batches
    assert np.all(np.isfinite(losses)) and len(set(losses)) > 1


def test_progress_bar_counts_the_steps_of_both_loops():
    net, opt, model = _build()
    bar = ProgressBar()
    model.train(2, _data(), callbacks=[bar], dataset_sink_mode=False)
    assert (bar.bar.n, bar.bar.total) == (10, 10)
    blocks = np.random.default_rng(0).integers(0, 64, (8, 9)).astype(np.int32)
    bar = ProgressBar()
    LLMTrainer(TinyLM(), make_dataset(BlockSource(blocks), 4), steps=3, callbacks=[bar]).train()
    assert (bar.bar.n, bar.bar.total) == (3, 3)


def test_eval_every_publishes_results_for_history_and_plot():
    from course_lib.callbacks import EvalEvery
    blocks = np.random.default_rng(0).integers(0, 64, (16, 9)).astype(np.int32)
    data = make_dataset(BlockSource(blocks), 4)
    every, history = EvalEvery(2), History()
    trainer = LLMTrainer(TinyLM(), data, data, lr=1e-2, steps=5, callbacks=[every, history])
    trainer.train()
    assert [s for s, _ in every.results] == [2, 4, 5]            # every 2 steps + the end
    assert [s for s, _ in history.evals] == [2, 4, 5]
    assert set(every.results[0][1]) == {"loss", "perplexity"}
    net, opt, model = _build()
    with pytest.raises(ValueError, match="evaluate="):
        model.train(1, _data(), callbacks=[EvalEvery(1)], dataset_sink_mode=False)
