RIGHT = {
    "ch02.label_smoothing_loss": '''from mindspore import ops
from course_lib.check import ch02, show_solution


class MyLabelSmoothingCE(nn.Cell):
    def __init__(self, smoothing=0.1):
        super().__init__()
        self.smoothing = smoothing

    def construct(self, logits, labels):
        logits = logits.astype(ms.float32)
        k = logits.shape[-1]
        one_hot = ops.one_hot(labels, k, ms.Tensor(1.0, ms.float32), ms.Tensor(0.0, ms.float32))
        target = (1 - self.smoothing) * one_hot + self.smoothing / k
        log_probs = ops.log_softmax(logits, axis=-1)
        return -(target * log_probs).sum(axis=-1).mean()


ch02.label_smoothing_loss(MyLabelSmoothingCE)
''',
    "ch02.f1_metric": '''from mindspore.train import Metric


class MyF1(Metric):
    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self.tp, self.fp, self.fn = 0, 0, 0

    def update(self, logits, labels):
        pred = self._convert_data(logits).argmax(-1).reshape(-1)
        y = self._convert_data(labels).reshape(-1)
        self.tp += int(((pred == 1) & (y == 1)).sum())
        self.fp += int(((pred == 1) & (y != 1)).sum())
        self.fn += int(((pred != 1) & (y == 1)).sum())

    def eval(self):
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else 0.0


ch02.f1_metric(MyF1)
''',
    ("ch02.ex1", "ch02.ex2", "ch02.ex3"): '''test_labels = [y for _, y in splits.test]
_, test_baseline = classifier.majority_baseline(train_labels, test_labels)
ch02.ex1(round(test_baseline, 3))
ch02.ex2(3 * 2 + 1)
ch02.ex3(3 * int(np.ceil(1000 / 22)))   # the last, smaller batch is a step too
''',
}

WRONG = {
    "ch02.label_smoothing_loss": ('''from mindspore import ops
from course_lib.check import ch02, show_solution


class MyLabelSmoothingCE(nn.Cell):
    def __init__(self, smoothing=0.1):
        super().__init__()
        self.smoothing = smoothing

    def construct(self, logits, labels):
        logits = logits.astype(ms.float32)
        k = logits.shape[-1]
        one_hot = ops.one_hot(labels, k, ms.Tensor(1.0, ms.float32), ms.Tensor(0.0, ms.float32))
        target = (1 - self.smoothing) * one_hot + self.smoothing / (k - 1) * (1 - one_hot)
        log_probs = ops.log_softmax(logits, axis=-1)
        return -(target * log_probs).sum(axis=-1).mean()


ch02.label_smoothing_loss(MyLabelSmoothingCE)
''', {"ch02.label_smoothing_loss": "错误类别"}),
    "ch02.f1_metric": ('''from mindspore.train import Metric


class MyF1(Metric):
    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self.tp, self.fp, self.fn = 0, 0, 0

    def update(self, logits, labels):
        pred = self._convert_data(logits).argmax(-1).reshape(-1)
        y = self._convert_data(labels).reshape(-1)
        self.tp = int(((pred == 1) & (y == 1)).sum())
        self.fp = int(((pred == 1) & (y != 1)).sum())
        self.fn = int(((pred != 1) & (y == 1)).sum())

    def eval(self):
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else 0.0


ch02.f1_metric(MyF1)
''', {"ch02.f1_metric": "而不是覆盖"}),
    ("ch02.ex1", "ch02.ex2", "ch02.ex3"): ('''test_labels = [y for _, y in splits.test]
_, test_baseline = classifier.majority_baseline(train_labels, test_labels)
ch02.ex1(round(test_baseline, 3))
ch02.ex2(3 * 2)
ch02.ex3(3 * int(np.ceil(1000 / BATCH)))
''', {"ch02.ex2": "编码器里不只有块", "ch02.ex3": "题目的 batch_size 是 22"}),
}
