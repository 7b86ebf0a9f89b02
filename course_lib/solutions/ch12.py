"""Reference solutions for chapter 12 (continuous batching)."""
from __future__ import annotations

import numpy as np


def merge_batches(a, b, pad_id: int = 0):
    """Rows of decode batch ``b`` join running batch ``a``. Each batch is ``(ids, mask,
    cache)``: ids/mask (B, T) and cache a list over layers of (keys, values), each
    (B, heads, T, head_dim). The narrower batch is padded on the left, then rows are stacked
    (a's rows first). Returns ``(ids, mask, cache)`` in the same layout."""
    def widen(ids, mask, cache, width):
        """Pad on the LEFT to ``width`` columns: ids with pad_id, mask with 0, and the time
        axis (axis 2) of every layer's keys/values with zeros (masked out anyway)."""
        ids, mask = np.asarray(ids), np.asarray(mask)
        extra = width - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (extra, 0)), constant_values=pad_id)
        mask = np.pad(mask, ((0, 0), (extra, 0)), constant_values=0)
        cache = [tuple(np.pad(np.asarray(t), ((0, 0), (0, 0), (extra, 0), (0, 0))) for t in kv) for kv in cache]
        return ids, mask, cache

    width = max(np.shape(a[0])[1], np.shape(b[0])[1])
    ids_a, mask_a, cache_a = widen(*a, width)
    ids_b, mask_b, cache_b = widen(*b, width)
    cache = [(np.concatenate([ka, kb]), np.concatenate([va, vb]))
             for (ka, va), (kb, vb) in zip(cache_a, cache_b)]
    return np.concatenate([ids_a, ids_b]), np.concatenate([mask_a, mask_b]), cache


def admit(waiting, free_slots: int, now: float) -> list:
    """Which waiting requests join the batch at time ``now``: those that have arrived
    (arrival <= now), first come first served (ties by id), at most ``free_slots``.
    ``waiting`` is a list of ``(request_id, arrival_seconds)`` in any order."""
    arrived = sorted((arrival, rid) for rid, arrival in waiting if arrival <= now)
    return [rid for _, rid in arrived[:max(free_slots, 0)]]


# ---- realistic wrong solutions ----------------------------------------------------------
def wrong_right_pad(a, b, pad_id=0):
    """Pads the narrower batch on the RIGHT."""
    width = max(np.asarray(a[0]).shape[1], np.asarray(b[0]).shape[1])

    def widen(ids, mask, cache):
        extra = width - np.asarray(ids).shape[1]
        return (np.pad(ids, ((0, 0), (0, extra)), constant_values=pad_id),
                np.pad(mask, ((0, 0), (0, extra))),
                [tuple(np.pad(t, ((0, 0), (0, 0), (0, extra), (0, 0))) for t in kv) for kv in cache])
    (ia, ma, ca), (ib, mb, cb) = widen(*a), widen(*b)
    return (np.concatenate([ia, ib]), np.concatenate([ma, mb]),
            [(np.concatenate([x[0], y[0]]), np.concatenate([x[1], y[1]])) for x, y in zip(ca, cb)])


def wrong_mask_ones(a, b, pad_id=0):
    """Pads correctly but marks the padded columns as real tokens (mask 1)."""
    ids, mask, cache = merge_batches(a, b, pad_id)
    width = ids.shape[1]
    for row, m in enumerate([*np.asarray(a[1]), *np.asarray(b[1])]):
        mask[row, : width - len(m)] = 1
    return ids, mask, cache


def wrong_cache_not_padded(a, b, pad_id=0):
    """Pads ids and mask but stacks the caches as they are (time axes differ)."""
    ids, mask, _ = merge_batches(a, b, pad_id)
    return ids, mask, [(np.concatenate([ka, kb]) if ka.shape == kb.shape else ka,
                        np.concatenate([va, vb]) if va.shape == vb.shape else va)
                       for (ka, va), (kb, vb) in zip(a[2], b[2])]


def wrong_ignores_arrival(waiting, free_slots, now):
    """Admits requests that have not arrived yet."""
    return [rid for _, rid in sorted((t, r) for r, t in waiting)][:free_slots]


def wrong_ignores_limit(waiting, free_slots, now):
    """Admits every arrived request, however full the batch is."""
    return [rid for _, rid in sorted((t, r) for r, t in waiting if t <= now)]


def wrong_newest_first(waiting, free_slots, now):
    """Serves the most recent arrivals first (LIFO)."""
    return [rid for _, rid in sorted(((t, r) for r, t in waiting if t <= now), reverse=True)][:free_slots]
