"""Each ch04 checker accepts the reference answer and rejects a wrong one."""
import math

import mindspore as ms
from mindspore import Tensor, ops
from mindspore.train import Callback

from course_lib.callbacks import probe_lr
from course_lib.check import ch04
from judging import judged as _judged


class _Halve(Callback):
    def on_train_step_end(self, run_context):
        opt = run_context.original_args().optimizer
        ops.assign(opt.learning_rate, opt.learning_rate * 0.5)


def test_ex1_reference_measured_with_the_probe(capsys):
    assert ch04.ex1(probe_lr(callbacks=[_Halve()]))
    assert not ch04.ex1([0.1, 0.1, 0.1, 0.1])
    assert "❌" in capsys.readouterr().out


def test_ex2_to_ex4():
    assert ch04.ex2(math.sqrt(2 * 32)) and ch04.ex2(8)   # exp of the mean NLL: geometric mean of 2 and 32
    assert not ch04.ex2((2 + 32) / 2)                    # averaged the two perplexities
    precision, recall = 40 / 50, 40 / 60                # TP=40, FP=10, FN=20, by hand
    assert ch04.ex3(2 * precision * recall / (precision + recall)) and ch04.ex3(0.7272727273)
    assert not ch04.ex3(precision)   # precision, not F1
    assert ch04.ex4(6)
    assert not ch04.ex4(7)


class _MyStop(Callback):
    """A learner's early stopping, written independently of the solutions module."""

    def __init__(self, evaluate, patience=2):
        self.evaluate, self.patience, self.history = evaluate, patience, []

    def on_train_epoch_end(self, run_context):
        self.history.append(self.evaluate())
        best_at = max(range(len(self.history)), key=lambda i: (self.history[i], -i))
        if len(self.history) - 1 - best_at >= self.patience:
            run_context.request_stop()


def test_code_checkers(capsys):
    assert ch04.halve_lr(_Halve)
    assert ch04.early_stopping(_MyStop)
    assert not ch04.halve_lr(Callback)                   # does nothing: the lr stays 0.1
    out = capsys.readouterr().out
    assert "学习率根本没有变" in out


def test_the_judge_sees_the_measured_lr_and_the_stopping_epoch():
    from course_lib.solutions import ch04 as sol
    assert _judged(ch04.halve_lr, _Halve, sol.HalveLR) == "pass"
    assert _judged(ch04.early_stopping, _MyStop, sol.EarlyStop) == "pass"
    assert _judged(ch04.halve_lr, sol.wrong_halve_at_begin, sol.HalveLR) == "fail"
    assert _judged(ch04.early_stopping, sol.wrong_stop_one_late, sol.EarlyStop) == "fail"
