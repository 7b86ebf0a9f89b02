"""Supervised fine-tuning (SFT) data from the review corpus, and a classifier by scoring.

Every labelled review becomes one chat exchange in the course template::

    <bos><|user|>指令：判断下面评论的情感（正面/负面）。\\n评论：<review><|end|><|assistant|>正面<|end|>

* The loss is computed on the answer only (``正面<|end|>``): labels of the prompt tokens are
  ``IGNORE_INDEX``, so the model is not trained to *write reviews*, only to answer.
* Long reviews are cut (from the end) so that the whole exchange fits ``max_len + 1`` tokens;
  short ones are right-padded with ``<pad>`` whose labels are also ignored. One fixed shape
  means one compiled graph.
* ``predict_label`` asks the model which answer it finds more likely after the prompt:
  it compares log P(正面<|end|> | prompt) with log P(负面<|end|> | prompt). No sampling, no
  parsing of free text — a deterministic zero-shot / fine-tuned classifier.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from .blocks import count_parameters
from .data import LABELS
from .lora import inject_lora, lora_parameters, parameter_counts
from .measure import StepTimer
from .pipelines import IGNORE_INDEX, PairSource, make_dataset
from .runtime import eval_mode, execution_mode, seed_everything
from .trainer import LLMTrainer

INSTRUCTION = "指令：判断下面评论的情感（正面/负面）。\n评论："


def instruction(review: str) -> str:
    """The user turn for one review."""
    return INSTRUCTION + review


def _chat(tokenizer, review: str, answer: str):
    ids, mask = tokenizer.encode_chat(instruction(review), answer)
    return ids, mask


def fit_review(tokenizer, review: str, max_len: int, answer_len: int | None = None) -> str:
    """The longest prefix of ``review`` whose exchange (with the longest answer) fits in
    ``max_len + 1`` tokens (the +1: inputs and shifted labels are both ``max_len`` long)."""
    if not isinstance(review, str):
        raise TypeError(f"A review must be a str, got {type(review).__name__}.")
    longest = max(LABELS, key=lambda a: len(tokenizer.encode(a)))
    budget = max_len + 1

    def length(n_chars):
        return len(_chat(tokenizer, review[:n_chars], longest)[0])

    if length(0) > budget:
        raise ValueError(f"max_len={max_len} cannot even hold the prompt and answer "
                         f"({length(0)} tokens with an empty review); use max_len >= {length(0)}.")
    if length(len(review)) <= budget:
        return review
    lo, hi = 0, len(review)            # length(lo) fits, length(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if length(mid) <= budget else (lo, mid)
    return review[:lo]


def encode_example(tokenizer, review: str, label: int, max_len: int):
    """One example -> ``(input_ids, labels)`` int32 arrays of length ``max_len``, already
    shifted (``labels[t]`` is the token after ``input_ids[t]``); prompt and padding
    positions are ``IGNORE_INDEX``."""
    if label not in (0, 1):
        raise ValueError(f"label must be 0 ({LABELS[0]}) or 1 ({LABELS[1]}), got {label!r}.")
    ids, mask = _chat(tokenizer, fit_review(tokenizer, review, max_len), LABELS[label])
    return pack_example(tokenizer, ids, mask, max_len)


def pack_example(tokenizer, ids, mask, max_len: int):
    """One encoded exchange (``ids`` and its learned-token ``mask``, at most ``max_len + 1``
    long) -> ``(input_ids, labels)`` of length ``max_len``: padded, labels shifted by one,
    ``IGNORE_INDEX`` wherever the mask is 0 and on the padding."""
    row = np.full(max_len + 1, tokenizer.pad_id, np.int32)
    target = np.full(max_len + 1, IGNORE_INDEX, np.int32)
    row[: len(ids)] = ids
    target[: len(ids)] = np.where(np.asarray(mask) == 1, ids, IGNORE_INDEX)
    return row[:-1], target[1:]


def build_sft_arrays(tokenizer, examples: Sequence[tuple[str, int]], max_len: int):
    """All examples -> ``(inputs, labels)`` int32 arrays of shape (N, max_len)."""
    if not examples:
        raise ValueError("No examples: pass a non-empty list of (review, label) pairs.")
    pairs = [encode_example(tokenizer, text, label, max_len) for text, label in examples]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def sft_dataset(tokenizer, examples: Sequence[tuple[str, int]], max_len: int, batch_size: int,
                shuffle: bool = True, seed: int = 0, **shard):
    """A batched ``GeneratorDataset`` (columns input_ids, labels) for the trainer."""
    inputs, labels = build_sft_arrays(tokenizer, examples, max_len)
    return make_dataset(PairSource(inputs, labels), batch_size, shuffle=shuffle, seed=seed,
                        **shard)


# --------------------------------------------------------------------------------------
# Classification by scoring the two answers
# --------------------------------------------------------------------------------------
def candidate_arrays(tokenizer, texts: Sequence[str], max_len: int):
    """For every text and every label answer: padded token row (max_len + 1,) and a mask
    marking the answer tokens. Shapes (N, 2, max_len + 1)."""
    rows = np.full((len(texts), len(LABELS), max_len + 1), tokenizer.pad_id, np.int32)
    answer = np.zeros(rows.shape, bool)
    for i, text in enumerate(texts):
        review = fit_review(tokenizer, text, max_len)
        for j, label_text in enumerate(LABELS):
            ids, mask = _chat(tokenizer, review, label_text)
            rows[i, j, : len(ids)] = ids
            answer[i, j, : len(ids)] = np.asarray(mask, bool)
    return rows, answer


def answer_logprobs(model, tokenizer, texts: Sequence[str], max_len: int = 128,
                    batch_size: int = 16, fixed_batch: bool | None = None,
                    mode: str = "graph") -> np.ndarray:
    """(N, 2) array: log P(answer | prompt) for answers ``LABELS`` = (负面, 正面).

    ``model`` is a causal LM Cell (or any callable int32 (b, max_len) -> logits). The two
    candidates of a text share the prompt; right padding never changes the logits of
    earlier positions of a causal model, so a fixed padded shape is exact. With
    ``fixed_batch`` (default: on in GRAPH mode) the last batch is padded with dummy rows
    too: every call then has the shape (batch_size, max_len), so a graph compiles once —
    and an exported MINDIR, which accepts only its export shape, can be used.
    ``mode="graph"`` compiles the forward pass (many times faster than eager on CPU)."""
    if fixed_batch is None:
        fixed_batch = mode == "graph"
    with execution_mode(mode):
        return _answer_logprobs(model, tokenizer, texts, max_len, batch_size, fixed_batch)


def _answer_logprobs(model, tokenizer, texts, max_len, batch_size, fixed_batch):
    if isinstance(texts, str):
        raise TypeError("texts must be a list of str; wrap a single review as [text].")
    if len(texts) == 0:
        return np.zeros((0, len(LABELS)), np.float64)
    rows, answer = candidate_arrays(tokenizer, texts, max_len)
    flat_rows = rows.reshape(-1, max_len + 1)
    flat_answer = answer.reshape(-1, max_len + 1)
    scores = np.zeros(len(flat_rows), np.float64)
    with eval_mode(model):
        for start in range(0, len(flat_rows), batch_size):
            chunk = flat_rows[start:start + batch_size]
            n = len(chunk)
            if fixed_batch and n < batch_size:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch_size - n, 0)])
            # the logits at position t predict token t+1: keep only answer-token positions
            row, pos = np.nonzero(flat_answer[start:start + n, 1:])
            pairs = Tensor(np.stack([row, pos], -1).astype(np.int32))
            logits = _logits_at(model, Tensor(chunk[:, :-1], ms.int32), pairs)     # (k, V)
            logp = ops.log_softmax(logits.astype(ms.float32), -1)
            tokens = Tensor(chunk[row, pos + 1][:, None].astype(np.int32))
            picked = ops.gather_elements(logp, 1, tokens)[:, 0].asnumpy().astype(np.float64)
            np.add.at(scores, start + row, picked)
    return scores.reshape(len(texts), len(LABELS))


def _logits_at(model, input_ids, pairs):
    """Logits at the (row, position) ``pairs`` only. For a course ``CausalLM`` (``.model``
    body + ``.lm_head``) the head — by far the largest matmul of a tiny model with an 8000-
    word vocabulary — is applied to those few positions instead of all of them."""
    body, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if isinstance(body, nn.Cell) and isinstance(head, nn.Cell):
        return head(ops.gather_nd(body(input_ids), pairs))
    return ops.gather_nd(model(input_ids), pairs)


def predict_label(model, tokenizer, texts: Sequence[str], max_len: int = 128,
                  batch_size: int = 16, fixed_batch: bool | None = None,
                  mode: str = "graph") -> np.ndarray:
    """0 (负面) or 1 (正面) per text: the answer with the higher log-probability."""
    return answer_logprobs(model, tokenizer, texts, max_len, batch_size, fixed_batch,
                           mode).argmax(-1)


def accuracy(model, tokenizer, examples: Sequence[tuple[str, int]], max_len: int = 128,
             batch_size: int = 16, fixed_batch: bool | None = None, mode: str = "graph") -> float:
    """Fraction of (review, label) pairs classified correctly by ``predict_label``."""
    if not examples:
        raise ValueError("No examples to evaluate.")
    texts = [t for t, _ in examples]
    labels = np.asarray([label for _, label in examples])
    predictions = predict_label(model, tokenizer, texts, max_len, batch_size, fixed_batch, mode)
    return float((predictions == labels).mean())


# --------------------------------------------------------------------------------------
# One fine-tuning run, measured (LoRA or full), as the chapter compares them
# --------------------------------------------------------------------------------------
@dataclass
class FinetuneRun:
    """What a fine-tuning run trained and what it cost.

    ``optimizer_state_bytes`` is measured on the optimizer's own state Parameters (AdamW's
    first and second moments); ``step_seconds`` is the mean wall time of the steps after the
    first one (the first includes graph compilation)."""

    method: str
    r: int | None
    trainable: int
    total: int
    optimizer_state_bytes: int
    step_seconds: float
    compile_seconds: float
    history: dict
    model: object = field(repr=False, default=None)
    trainer: object = field(repr=False, default=None)
    report: object = field(repr=False, default=None)

    @property
    def fraction(self) -> float:
        return self.trainable / self.total

    @property
    def gradient_bytes(self) -> int:
        return 4 * self.trainable        # one float32 gradient per trainable parameter


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of the optimizer's per-parameter state (Adam/AdamW: the m and v moments)."""
    state = [*getattr(optimizer, "moments1", ()), *getattr(optimizer, "moments2", ()),
             *getattr(optimizer, "moments", ())]
    return int(sum(p.nbytes for p in state))


def finetune_trainer(model, tokenizer, examples: Sequence[tuple[str, int]], *,
                     method: str = "lora", r: int = 8, alpha: float = 16.0,
                     targets: Sequence[str] = ("q_proj", "v_proj"), steps: int = 100,
                     lr: float = 2e-3, batch_size: int = 8, max_len: int = 64,
                     warmup_steps: int = 10, weight_decay: float = 0.0, seed: int = 0,
                     callbacks: Sequence = (), mode: str = "graph"):
    """``(trainer, trainable, report)``: the ``LLMTrainer`` that ``finetune`` runs, built but
    not trained (LoRA injected into ``model`` for ``method="lora"``; ``report`` is None for
    ``"full"``). Timing LoRA against full fine-tuning step by step starts from two of these."""
    if method not in ("lora", "full"):
        raise ValueError(f"method must be 'lora' or 'full', got {method!r}.")
    seed_everything(seed)
    report = None
    if method == "lora":
        report = inject_lora(model, list(targets), r=r, alpha=alpha)
        trainable = lora_parameters(model)
    else:
        trainable = list(model.trainable_params())
    data = sft_dataset(tokenizer, examples, max_len, batch_size, seed=seed)
    trainer = LLMTrainer(model, data, lr=lr, steps=steps, warmup_steps=warmup_steps,
                         weight_decay=weight_decay, clip=1.0, trainable=trainable,
                         callbacks=list(callbacks), mode=mode, data_seed=seed)
    return trainer, trainable, report


def finetune(model, tokenizer, examples: Sequence[tuple[str, int]], *, method: str = "lora",
             r: int = 8, alpha: float = 16.0, targets: Sequence[str] = ("q_proj", "v_proj"),
             steps: int = 100, lr: float = 2e-3, batch_size: int = 8, max_len: int = 64,
             warmup_steps: int = 10, weight_decay: float = 0.0, seed: int = 0,
             callbacks: Sequence = (), mode: str = "graph") -> FinetuneRun:
    """Fine-tune ``model`` in place on ``examples`` (SFT chat data, loss on the answer).

    ``method="lora"``: inject LoRA (``r``, ``alpha``, ``targets``) and give the optimizer the
    adapter parameters only. ``method="full"``: every parameter is trained. Everything else
    (data, order, schedule, clipping, step count) is identical (``finetune_trainer``).
    ``step_seconds`` is this run's own clock: two runs timed one after the other meet
    different loads, so compare step times with ``measure.alternate_train_steps`` instead.
    """
    if method not in ("lora", "full"):
        raise ValueError(f"method must be 'lora' or 'full', got {method!r}.")
    if steps < 2:
        raise ValueError("steps must be >= 2 (the first step compiles; the rest are timed).")
    trainer, trainable, report = finetune_trainer(
        model, tokenizer, examples, method=method, r=r, alpha=alpha, targets=targets,
        steps=steps, lr=lr, batch_size=batch_size, max_len=max_len, warmup_steps=warmup_steps,
        weight_decay=weight_decay, seed=seed, callbacks=callbacks, mode=mode)
    clock = StepTimer()
    trainer.callbacks.insert(0, clock)           # one train() call: one progress bar per run
    trainer.train()
    trainer.callbacks.remove(clock)
    compile_seconds, step_seconds = clock.first_step_seconds, clock.mean_step_seconds
    model.set_train(False)
    count = parameter_counts(model)
    return FinetuneRun(method, r if method == "lora" else None,
                       count_parameters(trainable), count.total,
                       optimizer_state_bytes(trainer.optimizer), step_seconds, compile_seconds,
                       {k: list(v) for k, v in trainer.history.items()}, model, trainer, report)
