"""Perplexity and BinaryF1 against closed forms, hand counts and torch."""
import math

import numpy as np
import pytest
import torch
from mindspore import Tensor, nn

from course_lib.metrics import BinaryF1, Perplexity, make_metric


def test_uniform_logits_have_perplexity_equal_to_the_vocabulary_size():
    metric = Perplexity()
    metric.update(np.zeros((2, 5, 37), np.float32), np.ones((2, 5), np.int32))
    assert metric.eval() == pytest.approx(37.0, rel=1e-9)


def test_perplexity_matches_torch_cross_entropy_over_batches():
    rng = np.random.default_rng(0)
    metric = Perplexity()
    all_logits, all_labels = [], []
    for _ in range(3):
        logits = rng.normal(size=(2, 6, 13)).astype(np.float32) * 2
        labels = rng.integers(0, 13, (2, 6)).astype(np.int32)
        labels[rng.random((2, 6)) < 0.3] = -100
        metric.update(Tensor(logits), Tensor(labels))
        all_logits.append(logits.reshape(-1, 13))
        all_labels.append(labels.reshape(-1))
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(np.concatenate(all_logits)),
                                            torch.from_numpy(np.concatenate(all_labels)).long(),
                                            ignore_index=-100)
    assert metric.eval() == pytest.approx(math.exp(ref.item()), rel=1e-5)
    metric.clear()
    with pytest.raises(RuntimeError, match="no target tokens"):
        metric.eval()


def test_perplexity_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match="do not line up"):
        Perplexity().update(np.zeros((2, 5, 7)), np.zeros((2, 4), np.int32))
    with pytest.raises(ValueError, match="token ids"):
        Perplexity().update(np.zeros((1, 2, 7)), np.array([[1, 9]]))


def test_binary_f1_hand_counted():
    metric = BinaryF1()
    # predictions 1 1 1 0 0 ; truth 1 1 0 1 0  -> tp 2, fp 1, fn 1
    metric.update(np.array([1, 1, 1, 0, 0]), np.array([1, 1, 0, 1, 0]))
    assert (metric.tp, metric.fp, metric.fn) == (2, 1, 1)
    assert metric.precision == pytest.approx(2 / 3) and metric.recall == pytest.approx(2 / 3)
    assert metric.eval() == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))


def test_binary_f1_from_logits_agrees_with_mindspore_f1_over_batches():
    rng = np.random.default_rng(1)
    ours, theirs = BinaryF1(), nn.F1()
    for _ in range(4):
        logits = rng.normal(size=(16, 2)).astype(np.float32)
        y = rng.integers(0, 2, 16).astype(np.int32)
        ours.update(Tensor(logits), Tensor(y))
        theirs.update(Tensor(logits), Tensor(y))
    assert ours.eval() == pytest.approx(float(theirs.eval()[1]), rel=1e-6)


def test_binary_f1_scores_threshold_and_edge_cases():
    metric = BinaryF1(threshold=0.5)
    metric.update(np.array([0.9, 0.2, 0.6]), np.array([1, 0, 0]))
    assert (metric.tp, metric.fp, metric.fn) == (1, 1, 0)
    empty = BinaryF1()
    empty.update(np.array([0, 0]), np.array([0, 0]))
    assert empty.eval() == 0.0                      # no positives anywhere: defined as 0
    with pytest.raises(ValueError, match="2 classes"):
        BinaryF1().update(np.zeros((3, 3)), np.array([0, 1, 0]))
    with pytest.raises(ValueError, match="0 or 1"):
        BinaryF1().update(np.array([0, 1]), np.array([0, 2]))


def test_make_metric_names():
    assert isinstance(make_metric("f1"), BinaryF1)
    assert isinstance(make_metric("perplexity"), Perplexity)
    with pytest.raises(ValueError, match=r"Unknown metric 'bleu'.*'f1'.*'perplexity'"):
        make_metric("bleu")
