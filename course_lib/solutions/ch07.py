"""Reference solutions of chapter 07's code exercises (sampling and the KV cache), and the
realistic wrong versions the self-test feeds to the checkers.

Load one after trying: ``from course_lib.check import show_solution; show_solution("ch07.top_p")``.
"""
from __future__ import annotations

import numpy as np
from mindspore import ops


# ------------------------------------------------------------------ 1. top-p (nucleus)
def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep, per row, the most likely tokens until their probabilities add up to >= p
    (always at least one); every other logit becomes -inf."""
    order = np.argsort(-logits, axis=-1, kind="stable")             # best first
    sorted_logits = np.take_along_axis(logits, order, -1)
    z = np.exp(sorted_logits - sorted_logits.max(-1, keepdims=True))
    probs = z / z.sum(-1, keepdims=True)
    mass_before = np.cumsum(probs, -1) - probs                       # mass of the better tokens
    drop_sorted = mass_before >= p                                   # p already reached before it
    drop_sorted[..., 0] = False                                      # the best token always stays
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, -1)                 # back to vocabulary order
    return np.where(drop, -np.inf, logits)


def wrong_top_p_stops_early(logits, p):
    """Keeps only tokens whose running total stays below p: drops the token that crosses p."""
    order = np.argsort(-logits, axis=-1, kind="stable")
    z = np.exp(np.take_along_axis(logits, order, -1))
    cum = np.cumsum(z / z.sum(-1, keepdims=True), -1)
    drop = np.zeros(logits.shape, bool)
    np.put_along_axis(drop, order, cum > p, -1)
    return np.where(drop, -np.inf, logits)


def wrong_top_p_ascending(logits, p):
    """Sorts from the least likely token up."""
    return _keep_sorted(logits, p, np.argsort(logits, -1, kind="stable"))


def wrong_top_p_not_unsorted(logits, p):
    """Computes the mask in sorted order and applies it to the unsorted logits."""
    order = np.argsort(-logits, axis=-1, kind="stable")
    probs = np.exp(np.take_along_axis(logits, order, -1))
    probs = probs / probs.sum(-1, keepdims=True)
    drop = (np.cumsum(probs, -1) - probs) >= p
    return np.where(drop, -np.inf, logits)


def _keep_sorted(logits, p, order):
    probs = np.exp(np.take_along_axis(logits, order, -1))
    probs = probs / probs.sum(-1, keepdims=True)
    drop_sorted = (np.cumsum(probs, -1) - probs) >= p
    drop_sorted[..., 0] = False
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, -1)
    return np.where(drop, -np.inf, logits)


# ------------------------------------------------------------------ 2. repetition penalty
def repetition_penalty(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """The repetition penalty on tokens already in the text (``seen`` True), with the sign
    rule of transformers' ``RepetitionPenaltyLogitsProcessor``: a positive logit is divided by
    ``penalty``, a negative one multiplied — both make the token less likely (CTRL's paper
    divides every one)."""
    penalised = np.where(logits < 0, logits * penalty, logits / penalty)
    return np.where(seen, penalised, logits)


def wrong_penalty_divide_all(logits, seen, penalty):
    """Divides every seen logit: a negative logit moves towards 0, i.e. gets MORE likely."""
    return np.where(seen, logits / penalty, logits)


def wrong_penalty_every_token(logits, seen, penalty):
    """Penalises the whole vocabulary, not just the tokens already generated."""
    return np.where(logits < 0, logits * penalty, logits / penalty)


def wrong_penalty_subtract(logits, seen, penalty):
    """Subtracts the penalty (that is a frequency/presence penalty, not CTRL's)."""
    return np.where(seen, logits - penalty, logits)


# ------------------------------------------------------------------ 3. KV-cache append
def append_kv(past_k, past_v, k, v):
    """Append this step's keys/values (B, H, T, d) to the cached ones (B, H, S, d) along the
    sequence axis; with no cache yet (None) they are the cache."""
    if past_k is None:
        return k, v
    return ops.cat((past_k, k), 2), ops.cat((past_v, v), 2)


def wrong_append_heads_axis(past_k, past_v, k, v):
    """Concatenates along the heads axis."""
    if past_k is None:
        return k, v
    return ops.cat((past_k, k), 1), ops.cat((past_v, v), 1)


def wrong_append_new_first(past_k, past_v, k, v):
    """Puts the new token before the past ones."""
    if past_k is None:
        return k, v
    return ops.cat((k, past_k), 2), ops.cat((v, past_v), 2)


def wrong_append_forgets_past(past_k, past_v, k, v):
    """Returns only this step's keys/values."""
    return k, v
