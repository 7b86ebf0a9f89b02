from collections import Counter

import numpy as np
from mindspore import nn, ops
from mindspore.train import Metric

from course_lib.check import ch02
from course_lib.data import review_splits
from judging import judged as _judged


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
    assert ch02.ex3(96)                                          # 3 epochs x 32 batches
    assert not ch02.ex3(93)                                      # 3 x floor(1000/32)
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
