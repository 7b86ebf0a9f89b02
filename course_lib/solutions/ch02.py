"""Chapter 02 reference solutions: a label-smoothing loss Cell and an F1 metric for Model."""
from mindspore import nn, ops
from mindspore.train import Metric


class LabelSmoothingCE(nn.Cell):
    """Mean cross-entropy against (1 - s)·one_hot + s/K: every class, the true one included,
    gets s/K of the probability mass (the convention of nn.CrossEntropyLoss(label_smoothing=s))."""

    def __init__(self, smoothing=0.1):
        super().__init__()
        self.smoothing = smoothing

    def construct(self, logits, labels):
        num_classes = logits.shape[-1]
        log_probs = ops.log_softmax(logits.astype("float32"), axis=-1)
        one_hot = ops.one_hot(labels, num_classes, 1.0, 0.0)
        target = (1.0 - self.smoothing) * one_hot + self.smoothing / num_classes
        return -(target * log_probs).sum(-1).mean()


class F1(Metric):
    """F1 of the positive class (label 1) over every batch since clear(); update(logits, labels)."""

    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self.tp = self.fp = self.fn = 0

    def update(self, logits, labels):
        pred = self._convert_data(logits).argmax(axis=-1)
        labels = self._convert_data(labels).reshape(-1)
        self.tp += int(((pred == 1) & (labels == 1)).sum())
        self.fp += int(((pred == 1) & (labels == 0)).sum())
        self.fn += int(((pred == 0) & (labels == 1)).sum())

    def eval(self):
        return 2 * self.tp / max(2 * self.tp + self.fp + self.fn, 1)


# ---------------------------------------------------------------- realistic wrong solutions
class wrong_loss_sum(LabelSmoothingCE):
    def construct(self, logits, labels):
        num_classes = logits.shape[-1]
        log_probs = ops.log_softmax(logits.astype("float32"), axis=-1)
        target = (1.0 - self.smoothing) * ops.one_hot(labels, num_classes, 1.0, 0.0) + self.smoothing / num_classes
        return -(target * log_probs).sum()


class wrong_loss_k_minus_1(LabelSmoothingCE):
    def construct(self, logits, labels):
        num_classes = logits.shape[-1]
        log_probs = ops.log_softmax(logits.astype("float32"), axis=-1)
        one_hot = ops.one_hot(labels, num_classes, 1.0, 0.0)
        target = (1.0 - self.smoothing) * one_hot + (1.0 - one_hot) * self.smoothing / (num_classes - 1)
        return -(target * log_probs).sum(-1).mean()


class wrong_loss_no_smoothing(LabelSmoothingCE):
    def construct(self, logits, labels):
        log_probs = ops.log_softmax(logits.astype("float32"), axis=-1)
        return -(ops.one_hot(labels, logits.shape[-1], 1.0, 0.0) * log_probs).sum(-1).mean()


class wrong_f1_last_batch(F1):
    def update(self, logits, labels):
        self.clear()
        super().update(logits, labels)


class wrong_f1_no_clear(F1):
    def __init__(self):
        super().__init__()
        self.tp = self.fp = self.fn = 0

    def clear(self):
        pass


class wrong_f1_precision(F1):
    def eval(self):
        return self.tp / max(self.tp + self.fp, 1)
