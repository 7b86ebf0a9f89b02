"""Measurements that notebooks plot and benchmarks print (kept out of the teaching modules).

* ``decode_ms_by_position`` — milliseconds per generated token at each position, with the
  KV cache (the compiled decode step ``generate`` uses: flat) or without it (the whole
  sequence recomputed every step: grows with the position) — notebook 07's plot.

Timings depend on the machine and its load: compare curves measured in the same run, never
assert on them in tests.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from .generation import cache_bucket, compiled_prefill, decode_step, prefill


@dataclass
class DecodeTimes:
    use_cache: bool
    positions: np.ndarray          # sequence length after each timed step
    ms: np.ndarray                 # milliseconds of that step
    tokens: list                   # the generated ids (greedy), for the same-output check
    load_average: tuple            # 1/5/15-minute load average before the run

    @property
    def total_seconds(self) -> float:
        return float(self.ms.sum()) / 1000


def decode_ms_by_position(model, prompt_ids, new_tokens: int, use_cache: bool = True,
                          warmup: bool = True) -> DecodeTimes:
    """Greedy-decode ``new_tokens`` after ``prompt_ids`` (one sequence) and time every step.

    With the cache the step is ``generate``'s compiled one (``warmup`` first runs it once
    so compilation is not on the curve); without it every step recomputes the whole
    sequence in PyNative mode, like ``generate(..., use_cache=False)``."""
    prompt = [int(t) for t in prompt_ids]
    total = len(prompt) + new_tokens
    if new_tokens < 2 or total > model.config.max_seq_len:
        raise ValueError(f"need 2 <= new_tokens and prompt + new_tokens <= max_seq_len="
                         f"{model.config.max_seq_len}, got {len(prompt)} + {new_tokens}")
    load = os.getloadavg()
    if use_cache:
        slots = cache_bucket(total, model.config.max_seq_len)
        if warmup:
            compiled_prefill(model, [prompt], slots)
        state = compiled_prefill(model, [prompt], slots)
    else:
        state = prefill(model, [prompt], use_cache=False)
    tokens, positions, ms = [], [], []
    for _ in range(new_tokens - 1):
        tokens.append(int(np.argmax(state.logits[0])))
        start = time.perf_counter()
        decode_step(model, state, [tokens[-1]])
        ms.append(1000 * (time.perf_counter() - start))
        positions.append(state.input_ids.shape[1])
    tokens.append(int(np.argmax(state.logits[0])))
    return DecodeTimes(use_cache, np.asarray(positions), np.asarray(ms), tokens, load)
