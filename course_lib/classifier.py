"""Sentiment classification of the review corpus with ``mindspore.train.Model`` (chapter 02).

* :func:`encode_reviews` / :func:`review_dataset`: (text, label) pairs -> fixed-length,
  padded token ids -> a batched ``mindspore.dataset`` with columns ``input_ids``, ``label``.
* :class:`SentimentClassifier`: token + position embeddings -> Transformer encoder
  (:mod:`course_lib.blocks`) -> mean over the non-padding tokens -> Dense -> 2 logits.
* :func:`build_model`: ``Model(net, loss_fn, optimizer, metrics)`` with metric names checked
  and a loss-scale manager that is valid on the current device (CPU refuses the default one
  under ``amp_level="O2"``).
* :func:`majority_baseline`: the accuracy any classifier must beat.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn, ops
from mindspore.amp import DynamicLossScaleManager
from mindspore.common.initializer import Normal, initializer
from mindspore.train import Model

from .blocks import TransformerEncoder
from .metrics import make_metrics
from .training import AMP_LEVELS

# --- data ------------------------------------------------------------------------------


def _require_examples(examples, what="examples"):
    if len(examples) == 0:
        raise ValueError(f"No {what} given: the dataset would be empty. Pass a non-empty "
                         "list of (text, label) pairs, e.g. course_lib.data.review_splits().train.")


def encode_reviews(examples: Sequence[tuple[str, int]], tokenizer, max_len: int,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``[(text, label), ...]`` -> ``ids`` int32 ``(N, max_len)`` and ``labels`` int32 ``(N,)``.

    Reviews longer than ``max_len`` tokens are truncated (the opening of a review usually
    carries its verdict); shorter ones are right-padded with ``tokenizer.pad_id``. An empty
    text becomes all padding, which the classifier handles (its pooled vector is zero).
    """
    _require_examples(examples)
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    texts = [t for t, _ in examples]
    labels = np.asarray([int(y) for _, y in examples], dtype=np.int32)
    ids = np.full((len(texts), max_len), tokenizer.pad_id, dtype=np.int32)
    for row, seq in enumerate(tokenizer.encode_batch(texts)):
        seq = seq[:max_len]
        ids[row, :len(seq)] = seq
    return ids, labels


def review_dataset(examples: Sequence[tuple[str, int]], tokenizer, max_len: int,
                   batch_size: int, shuffle: bool = True, seed: int = 0,
                   drop_remainder: bool = False):
    """A batched ``NumpySlicesDataset`` with columns ``input_ids`` (B, max_len) and
    ``label`` (B,), in the column order ``Model(net, loss_fn)`` expects: data, then label."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids, labels = encode_reviews(examples, tokenizer, max_len)
    if drop_remainder and len(ids) < batch_size:
        raise ValueError(f"{len(ids)} examples make no full batch of {batch_size}; "
                         "lower batch_size or use drop_remainder=False.")
    if shuffle:
        ds.config.set_seed(seed)  # the shuffle order is drawn from the dataset seed
    data = ds.NumpySlicesDataset({"input_ids": ids, "label": labels},
                                 column_names=["input_ids", "label"], shuffle=shuffle)
    return data.batch(batch_size, drop_remainder=drop_remainder)


def majority_baseline(train_labels: Sequence[int], eval_labels: Sequence[int]) -> tuple[int, float]:
    """The class most frequent in *training* labels and the accuracy of always predicting
    it on ``eval_labels``: a model is only useful if it clearly beats this number."""
    if len(train_labels) == 0 or len(eval_labels) == 0:
        raise ValueError("majority_baseline needs non-empty train and eval labels.")
    counts = Counter(int(y) for y in train_labels)
    majority = min(counts, key=lambda c: (-counts[c], c))  # ties -> smaller label
    acc = float(np.mean(np.asarray(eval_labels) == majority))
    return majority, acc


# --- model -----------------------------------------------------------------------------


class SentimentClassifier(nn.Cell):
    """Embedding + Transformer encoder + masked mean pooling + linear head.

    ``construct(input_ids)``: int32 ``(B, T)`` with ``T <= max_len`` -> float32 logits
    ``(B, num_classes)``. Padding tokens (``pad_id``) are masked out of attention and of the
    pooling, so the prediction does not depend on how much padding a batch carries.
    """

    def __init__(self, vocab_size: int, max_len: int, embed_dim: int = 64, num_heads: int = 4,
                 ffn_dim: int = 128, num_layers: int = 1, num_classes: int = 2,
                 pad_id: int = 0, dropout: float = 0.1):
        super().__init__()
        if vocab_size < 1 or max_len < 1 or num_classes < 2:
            raise ValueError(f"need vocab_size >= 1, max_len >= 1, num_classes >= 2; got "
                             f"{vocab_size}, {max_len}, {num_classes}")
        self.vocab_size, self.max_len, self.pad_id = vocab_size, max_len, pad_id
        self.embed_dim, self.num_classes = embed_dim, num_classes
        self.tok_emb = nn.Embedding(vocab_size, embed_dim)
        # Learned absolute positions: one vector per slot, sliced to the batch's length.
        self.pos_emb = ms.Parameter(initializer(Normal(0.02), (1, max_len, embed_dim), ms.float32),
                                    name="pos_emb")
        self.encoder = TransformerEncoder(num_layers, embed_dim, num_heads, ffn_dim, dropout)
        self.dropout = nn.Dropout(p=dropout) if dropout > 0 else None
        self.head = nn.Dense(embed_dim, num_classes)

    def construct(self, input_ids):
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must have shape (batch, seq), got rank {input_ids.ndim} "
                             f"shape {input_ids.shape}. For one review use ids.reshape(1, -1).")
        if input_ids.shape[1] > self.max_len:
            raise ValueError(f"input_ids has {input_ids.shape[1]} tokens per row but the model "
                             f"was built with max_len={self.max_len}: truncate the inputs.")
        t = input_ids.shape[1]
        pad = ops.equal(input_ids, self.pad_id)                      # (B, T) True on padding
        x = self.tok_emb(input_ids) + self.pos_emb[:, :t, :]
        h = self.encoder(x, pad)
        keep = ops.logical_not(pad).astype(h.dtype).expand_dims(-1)  # (B, T, 1)
        pooled = (h * keep).sum(axis=1) / ops.maximum(keep.sum(axis=1), 1.0)
        if self.dropout is not None:
            pooled = self.dropout(pooled)
        return self.head(pooled)


# --- Model ------------------------------------------------------------------------------

def loss_scale_manager_for(device: str, amp_level: str):
    """The loss-scale manager that works for ``amp_level`` on ``device``.

    * O0 (all float32): no loss scaling needed -> ``None``.
    * CPU: only ``None`` or ``FixedLossScaleManager(drop_overflow_update=False)`` are accepted
      ("Only loss_scale_manager=None or FixedLossScaleManager(...) are supported on device
      CPU"), so -> ``None``.
    * Ascend / GPU: float16 gradients can underflow to zero; a ``DynamicLossScaleManager``
      multiplies the loss by a large scale, skips steps whose gradients overflow and lowers
      the scale then. This is the documented path for O2/O3 on Ascend.
    """
    if amp_level not in AMP_LEVELS:
        raise ValueError(f"Unknown amp_level {amp_level!r}; use one of {AMP_LEVELS}.")
    if amp_level == "O0" or device == "CPU":
        return None
    return DynamicLossScaleManager(init_loss_scale=2 ** 16, scale_factor=2, scale_window=1000)


def build_model(net: nn.Cell, lr: float = 1e-3, weight_decay: float = 0.0,
                metrics: Sequence[str] = ("accuracy",), amp_level: str = "O0",
                device: str | None = None):
    """``Model(net, CrossEntropyLoss, AdamW, metrics, amp_level, loss_scale_manager)`` ready for
    ``train`` / ``eval`` / ``predict`` on the current (or given) device."""
    if amp_level == "O1":
        raise ValueError("amp_level='O1' is not supported here: MindSpore 2.7 implements O1 by "
                         "rewriting the network's Python source into ./rewritten_network and "
                         "importing that file, which cannot resolve course_lib's relative imports "
                         "when the folder holding course_lib is not on sys.path (the course's "
                         "editable install; chapter 02 shows the ImportError). Use 'O2' "
                         "(normalisation layers stay float32) or 'O3'.")
    device = device or ms.get_context("device_target")
    optimizer = nn.AdamWeightDecay(net.trainable_params(), learning_rate=lr, weight_decay=weight_decay)
    return Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
                 metrics=make_metrics(metrics), amp_level=amp_level,
                 loss_scale_manager=loss_scale_manager_for(device, amp_level))


def predict_labels(model, input_ids: np.ndarray) -> np.ndarray:
    """``Model.predict`` on int32 ids ``(B, T)`` -> predicted class per row."""
    logits = model.predict(ms.Tensor(np.asarray(input_ids, dtype=np.int32)))
    return logits.asnumpy().argmax(axis=-1)
