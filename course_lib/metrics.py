"""Custom ``mindspore.train.Metric`` classes: usable in ``Model(..., metrics={...})`` and
on their own (``clear`` -> ``update(...)`` per batch -> ``eval()``).

* :class:`Perplexity` — exp(mean negative log-likelihood per target token) for language
  models; labels equal to ``ignore_index`` are skipped. Uniform logits over V tokens give
  exactly V: the model is "as unsure as a V-sided die".
* :class:`BinaryF1` — F1 of the positive class (2PR / (P + R)) from logits ``(N, 2)``,
  scores ``(N,)`` or predicted labels; also exposes ``precision`` and ``recall``.
"""
from __future__ import annotations

import math

from typing import Sequence

import numpy as np
from mindspore import nn
from mindspore.train import Metric

from .pipelines import IGNORE_INDEX


def _numpy(x) -> np.ndarray:
    return x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)


class Perplexity(Metric):
    """``update(logits, labels)``: logits ``(B, T, V)`` (or ``(N, V)``), labels ``(B, T)``
    (or ``(N,)``), already aligned (the label at t is the token after position t)."""

    def __init__(self, ignore_index: int = IGNORE_INDEX):
        super().__init__()
        self.ignore_index = ignore_index
        self.clear()

    def clear(self):
        self.nll_sum = 0.0
        self.tokens = 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"Perplexity.update needs (logits, labels), got {len(inputs)} inputs.")
        logits = _numpy(inputs[0]).astype(np.float64)
        labels = _numpy(inputs[1]).astype(np.int64)
        if logits.shape[:-1] != labels.shape:
            raise ValueError(f"logits {logits.shape} and labels {labels.shape} do not line up: "
                             "labels must have the logits' shape without the vocab axis.")
        logits = logits.reshape(-1, logits.shape[-1])
        labels = labels.reshape(-1)
        keep = labels != self.ignore_index
        if np.any((labels[keep] < 0) | (labels[keep] >= logits.shape[-1])):
            raise ValueError(f"labels must be token ids in [0, {logits.shape[-1]}) or "
                             f"{self.ignore_index}.")
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        picked = log_probs[np.nonzero(keep)[0], labels[keep]]
        self.nll_sum += float(-picked.sum())
        self.tokens += int(keep.sum())

    def eval(self) -> float:
        if self.tokens == 0:
            raise RuntimeError("Perplexity has seen no target tokens: call update(logits, "
                               "labels) with some labels that are not ignore_index first.")
        return math.exp(self.nll_sum / self.tokens)


class BinaryF1(Metric):
    """F1 of class ``positive``. ``update(y_pred, y)``: y_pred is logits/probabilities
    ``(N, 2)`` (argmax), scores ``(N,)`` (>= ``threshold``) or int labels ``(N,)``."""

    def __init__(self, positive: int = 1, threshold: float = 0.5):
        super().__init__()
        if positive not in (0, 1):
            raise ValueError(f"positive must be 0 or 1, got {positive}")
        self.positive, self.threshold = positive, threshold
        self.clear()

    def clear(self):
        self.tp = self.fp = self.fn = 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"BinaryF1.update needs (y_pred, y), got {len(inputs)} inputs.")
        y_pred, y = _numpy(inputs[0]), _numpy(inputs[1]).reshape(-1).astype(np.int64)
        if y_pred.ndim == 2:
            if y_pred.shape[1] != 2:
                raise ValueError(f"BinaryF1 expects 2 classes, got logits of shape {y_pred.shape}.")
            pred = y_pred.argmax(-1)
        elif np.issubdtype(y_pred.dtype, np.floating):
            pred = (y_pred >= self.threshold).astype(np.int64)
        else:
            pred = y_pred.astype(np.int64)
        pred = pred.reshape(-1)
        if pred.shape != y.shape:
            raise ValueError(f"{pred.shape[0]} predictions for {y.shape[0]} labels.")
        if not np.isin(y, (0, 1)).all():
            raise ValueError("BinaryF1 labels must be 0 or 1.")
        pos_pred, pos_true = pred == self.positive, y == self.positive
        self.tp += int(np.sum(pos_pred & pos_true))
        self.fp += int(np.sum(pos_pred & ~pos_true))
        self.fn += int(np.sum(~pos_pred & pos_true))

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    def eval(self) -> float:
        """2PR / (P + R) = 2TP / (2TP + FP + FN); 0.0 when there is no positive at all."""
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else 0.0


# name -> metric class: the course's own plus MindSpore's (classification = argmax of logits)
METRICS = {
    "accuracy": lambda: nn.Accuracy("classification"),
    "precision": lambda: nn.Precision("classification"),
    "recall": lambda: nn.Recall("classification"),
    "f1": BinaryF1,
    "perplexity": Perplexity,
    "loss": nn.Loss,
}


def make_metric(name: str, **kwargs) -> Metric:
    """``make_metric("f1")`` -> a fresh metric; unknown names get the list of known ones."""
    if name not in METRICS:
        raise ValueError(f"Unknown metric {name!r}; choose from {sorted(METRICS)}.")
    return METRICS[name](**kwargs)


def make_metrics(names: Sequence[str]) -> dict:
    """``("accuracy", "f1")`` -> ``{"accuracy": nn.Accuracy(...), "f1": BinaryF1()}`` for
    ``Model(metrics=...)``, with a clear error for a name that does not exist (MindSpore's
    own message lists internal names)."""
    if isinstance(names, str):
        names = (names,)
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"Unknown metric name(s) {unknown}; choose from {sorted(METRICS)}.")
    return {n: make_metric(n) for n in names}
