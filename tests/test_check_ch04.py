"""Each ch04 checker accepts the reference answer and rejects a wrong one."""
import math

from mindspore import ops
from mindspore.train import Callback

from course_lib.callbacks import probe_lr
from course_lib.check import ch04
from judging import judged as _judged


class _Halve(Callback):
    """A learner's HalveLR, written independently: its own step counter."""

    def __init__(self, every=1):
        self.every, self.done = every, 0

    def on_train_step_end(self, run_context):
        self.done += 1
        if self.done % self.every == 0:
            opt = run_context.original_args().optimizer
            ops.assign(opt.learning_rate, opt.learning_rate * 0.5)


def test_halved_is_what_the_probe_measures_for_a_callback_written_apart():
    """The checker's closed form (step s halved (s - 1) // every times), and its "one step
    early" variant, against the probe driving callbacks written here."""
    class AtBegin(_Halve):
        def on_train_step_begin(self, run_context):
            _Halve.on_train_step_end(self, run_context)

        def on_train_step_end(self, run_context):
            pass
    for every in (1, 2, 3):
        assert probe_lr(callbacks=[_Halve(every)]) == [round(x, 6) for x in ch04.halved(every)]
        early = probe_lr(mode="graph", callbacks=[AtBegin(every)])
        assert early == [round(x, 6) for x in ch04.halved(every, early=True)], (every, early)
    assert ch04.halved(2) == [0.1, 0.1, 0.05, 0.05]


def _every_second_step(lr, step):                     # the fn of the question, typed again
    return lr * 0.1 if step % 2 == 0 else lr


def test_ex1_expected_value_is_what_the_probe_measures(capsys):
    """The checker's closed form of LearningRateScheduler (fn at the end of step
    cur_step_num, counted from 1) is what MindSpore really does, in both modes."""
    from mindspore.train import LearningRateScheduler
    for mode in ("pynative", "graph"):
        measured = probe_lr(mode=mode, callbacks=[LearningRateScheduler(_every_second_step)])
        assert ch04.ex1(measured), (mode, measured)
    assert not ch04.ex1(probe_lr(callbacks=[_Halve()]))          # the halve_lr exercise's rates
    assert not ch04.ex1([0.1, 0.1, 0.1, 0.1])
    assert not ch04.ex1([0.1, 0.01, 0.01, 0.001])                # fn applied one step early
    out = capsys.readouterr().out
    assert "❌" in out and "早一步" in out and "每步减半" in out


def test_ex2_to_ex4():
    assert ch04.ex2(math.sqrt(2 * 32)) and ch04.ex2(8)   # exp of the mean NLL: geometric mean of 2 and 32
    assert not ch04.ex2((2 + 32) / 2)                    # averaged the two perplexities
    precision, recall = 40 / 50, 40 / 60                # TP=40, FP=10, FN=20, by hand
    assert ch04.ex3(2 * precision * recall / (precision + recall)) and ch04.ex3(0.7272727273)
    assert not ch04.ex3(precision)   # precision, not F1
    assert not ch04.ex3((170) / 200)  # accuracy: TN = 200 - 40 - 10 - 20
    assert ch04.ex4(6)
    assert not ch04.ex4(7) and not ch04.ex4(5)


def test_number_hints_name_the_wrong_path_not_the_formula(capsys):
    assert not ch04.ex2(17) and not ch04.ex3(0.8) and not ch04.ex4(5) and not ch04.ex1(0)
    out = capsys.readouterr().out
    assert "算术平均" in out and "精确率" in out and "清零" in out
    for formula in ("2PR", "exp(", "TP/(TP+FP)", "0.727", "[0.1, 0.1"):
        assert formula not in out


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
    class Nothing(Callback):                             # does nothing: the lr stays 0.1
        def __init__(self, every=1):
            self.every = every
    assert not ch04.halve_lr(Nothing)
    assert not ch04.halve_lr(Callback)                   # takes no `every`
    out = capsys.readouterr().out
    assert "学习率根本没有变" in out and "构造时接收 every" in out


def test_the_judge_sees_the_measured_lr_and_the_stopping_epoch():
    from course_lib.solutions import ch04 as sol
    assert _judged(ch04.halve_lr, _Halve, sol.HalveLR) == "pass"
    assert _judged(ch04.early_stopping, _MyStop, sol.EarlyStop) == "pass"
    assert _judged(ch04.halve_lr, sol.wrong_halve_at_begin, sol.HalveLR) == "fail"
    assert _judged(ch04.early_stopping, sol.wrong_stop_one_late, sol.EarlyStop) == "fail"


def test_early_stopping_hints_never_state_ex4s_answer(capsys):
    """ch04.ex4 asks where EarlyStopping(patience=2) stops on SCORES: the code exercise just
    before it must not run that case (its mismatch hint would print the answer), and its
    realistic wrong callbacks are still caught on the other cases."""
    from course_lib.solutions import ch04 as sol
    assert (ch04.SCORES, 2) not in ch04.STOP_CASES
    for wrong in (sol.wrong_stop_no_reset, sol.wrong_stop_ties_improve, sol.wrong_stop_one_late):
        assert not ch04.early_stopping(wrong)
    out = capsys.readouterr().out
    assert f"{list(ch04.SCORES)}、patience=2" not in out
    assert "清零" in out and "持平" in out and "多等了一次" in out
