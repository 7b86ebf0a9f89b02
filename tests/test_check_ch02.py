from collections import Counter

import numpy as np
from mindspore import nn, ops
from mindspore.train import Metric

from course_lib.check import ch02
from course_lib.data import review_splits
from judging import judged as _judged, salt_misses


def test_ch02_number_checkers(capsys):
    splits = review_splits()
    majority = Counter(y for _, y in splits.train).most_common(1)[0][0]
    test = [y for _, y in splits.test]
    baseline = test.count(majority) / len(test)
    assert ch02.ex1(round(baseline, 3)) and ch02.ex1(np.float32(baseline))
    assert not ch02.ex1(round(1 - baseline, 3))                  # the minority class
    val = [y for _, y in splits.validation]
    if abs(val.count(majority) / len(val) - baseline) > 1e-3:
        assert not ch02.ex1(val.count(majority) / len(val))      # the validation split
    assert ch02.ex2(3 * 2 + 1)                                   # 2 per pre-norm block + the final norm
    assert not ch02.ex2(3 * 2) and not ch02.ex2("O2")            # forgot the final LayerNorm
    assert ch02.ex3(138)                                         # 3 epochs x 46 batches
    assert not ch02.ex3(135)                                     # 3 x floor(1000/22)
    assert not ch02.ex3(96) and not ch02.ex3(189)                # the chapter's BATCH, 32 or 16
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out


class _MySmoothCE(nn.Cell):
    """Written independently: smoothing as a mix of the one-hot loss and the uniform loss."""

    def __init__(self, smoothing):
        super().__init__()
        self.s = smoothing

    def construct(self, logits, labels):
        log_p = ops.log_softmax(logits.astype("float32"), -1)
        nll = -ops.gather_elements(log_p, 1, labels.reshape(-1, 1).astype("int32")).squeeze(1)
        return ((1 - self.s) * nll - self.s * log_p.mean(-1)).mean()


class _MyF1(Metric):
    def clear(self):
        self.pred, self.true = [], []

    def update(self, logits, labels):
        self.pred += list(logits.asnumpy().argmax(-1))
        self.true += list(labels.asnumpy())

    def eval(self):
        p, t = np.array(self.pred), np.array(self.true)
        tp = ((p == 1) & (t == 1)).sum()
        return 0.0 if tp == 0 else 2 * tp / (2 * tp + ((p == 1) & (t == 0)).sum() + ((p == 0) & (t == 1)).sum())


def test_code_checkers_accept_independent_code(capsys):
    assert ch02.label_smoothing_loss(_MySmoothCE)
    assert ch02.f1_metric(_MyF1)


class _MySmoothCEVector(_MySmoothCE):
    """Correct too: returns the mean loss as a 1-element vector."""

    def construct(self, logits, labels):
        return super().construct(logits, labels).reshape((1,))


def test_the_judge_passes_independent_code_and_fails_wrong_code():
    from course_lib.solutions import ch02 as sol
    assert _judged(ch02.label_smoothing_loss, _MySmoothCE, sol.LabelSmoothingCE) == "pass"
    assert _judged(ch02.label_smoothing_loss, _MySmoothCEVector, sol.LabelSmoothingCE) == "pass"
    assert _judged(ch02.f1_metric, _MyF1, sol.F1) == "pass"
    assert _judged(ch02.label_smoothing_loss, sol.wrong_loss_sum, sol.LabelSmoothingCE) == "fail"
    assert _judged(ch02.f1_metric, sol.wrong_f1_no_clear, sol.F1) == "fail"


class _LiteralF1(_MyF1):
    """The formula of the question without its 0/0 rule."""

    def eval(self):
        p, t = np.array(self.pred), np.array(self.true)
        tp = int(((p == 1) & (t == 1)).sum())
        return 2 * tp / (2 * tp + int(((p == 1) & (t == 0)).sum()) + int(((p == 0) & (t == 1)).sum()))


def test_f1_checker_always_draws_the_zero_over_zero_case(capsys):
    from course_lib.solutions import ch02 as sol
    assert not ch02.f1_metric(_LiteralF1)
    assert "分母为 0" in capsys.readouterr().out
    assert _judged(ch02.f1_metric, _LiteralF1, sol.F1) == "fail"


class _AllFloat16CE(nn.Cell):
    """Keeps the float16 logits' dtype throughout (the question asks for float32)."""

    def __init__(self, smoothing):
        super().__init__()
        self.s = smoothing

    def construct(self, logits, labels):
        import mindspore as ms
        k = logits.shape[-1]
        one_hot = ops.one_hot(labels, k, ms.Tensor(1.0, logits.dtype), ms.Tensor(0.0, logits.dtype))
        target = (1 - self.s) * one_hot + self.s / k
        return -(target * ops.log_softmax(logits, axis=-1)).sum(-1).mean()


def test_a_float16_loss_is_told_to_compute_in_float32_on_every_draw(monkeypatch, capsys):
    """The question says the whole loss is computed in float32; a loss kept in float16 fails on
    every draw of the hidden inputs (before, only on draws where its error passed 1e-3: salt 0
    let it through)."""
    for salt in ("0", "1", "4"):
        monkeypatch.setenv("COURSE_CHECK_SALT", salt)
        assert not ch02.label_smoothing_loss(_AllFloat16CE)
        assert "float32 下计算" in capsys.readouterr().out
        assert ch02.label_smoothing_loss(_MySmoothCE)


def test_f1_wrong_answers_fail_with_their_hint_whatever_the_salt(monkeypatch, capsys):
    """The grader draws new hidden inputs per session (a random salt). On a few draws the last
    batch's F1 equalled the whole evaluation's, and a metric that overwrites its counts was
    graded pass (a CI run on 2026-12-07 hit one). The checker now redraws until every named
    wrong answer differs."""
    from course_lib.solutions import ch02 as sol
    wrongs = ((sol.wrong_f1_last_batch, "而不是覆盖"), (sol.wrong_f1_no_clear, "clear"),
              (sol.wrong_f1_precision, "精确率"))
    assert not salt_misses(ch02.f1_metric, wrongs, range(60), monkeypatch, capsys)
    for salt in range(0, 60, 7):
        monkeypatch.setenv("COURSE_CHECK_SALT", str(salt))
        assert ch02.f1_metric(_MyF1), salt


def test_number_hints_name_the_wrong_path_not_the_method(capsys):
    splits = review_splits()
    val = [y for _, y in splits.validation]
    majority = Counter(y for _, y in splits.train).most_common(1)[0][0]
    assert not ch02.ex1(round(val.count(majority) / len(val), 3))
    assert not ch02.ex2(3 * 2) and not ch02.ex3(46)
    out = capsys.readouterr().out
    assert "验证集上的基线" in out and "编码器里不只有块" in out and "一轮（epoch）的步数" in out
    for method in ("ceil(", "splits.test）里这一类", "2TP /"):
        assert method not in out
