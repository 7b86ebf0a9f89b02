"""Serving a language model: **dynamic (continuous) batching**, the scheduling idea behind inference servers,
built on the prefill / decode-step engine of ``course_lib.generation``:

* requests arrive over time, each with its own prompt length and token budget;
* at every decoding step the server admits the requests that have arrived (up to
  ``max_batch`` rows): their prompts are left-padded and prefilled together, and the new
  rows **join the running batch** (``merge_states`` pads the shorter KV cache on the left);
* one forward pass then produces the next token of *every* row, using the KV cache;
* a row that emits EOS or exhausts its budget **leaves the batch at once**
  (``DecodeState.select_rows``), so its slot is free for the next request.

``serve(model, requests, max_batch=1)`` is the one-at-a-time baseline on the same code
path. Greedy decoding gives exactly the tokens ``generation.generate`` gives for each
prompt alone: the attention mask hides the pads and positions count real tokens only.

The compiled decode step that ``generation.generate`` runs by default (a KV cache of fixed
length inside ``engine.DecodeEngine``, one slot written per token, compiled once) and
its measurements (PyNative vs GRAPH, dispatch modes) are in ``generation`` and
``course_lib.experiments``; this module is the scheduling.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .generation import DecodeState, choose_tokens, decode_step, eos_set, prefill


@dataclass(frozen=True)
class Request:
    id: int
    prompt_ids: tuple
    max_new_tokens: int
    arrival: float = 0.0          # seconds after the server starts

    def __post_init__(self):
        if len(self.prompt_ids) == 0:
            raise ValueError(f"request {self.id}: empty prompt; encode at least one token.")
        if self.max_new_tokens < 1:
            raise ValueError(f"request {self.id}: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.arrival < 0:
            raise ValueError(f"request {self.id}: arrival must be >= 0 s, got {self.arrival}")


@dataclass
class Completion:
    request: Request
    tokens: list
    first_token_at: float         # seconds after the server started
    finished_at: float

    @property
    def latency(self) -> float:
        """Arrival -> last token: what the user waits for (queueing included)."""
        return self.finished_at - self.request.arrival

    @property
    def time_to_first_token(self) -> float:
        """Arrival -> first token (queueing + prefill): how long the user sees nothing."""
        return self.first_token_at - self.request.arrival


@dataclass
class ServeReport:
    max_batch: int
    completions: list             # Completion, ordered by request id
    seconds: float                # first arrival -> last finish
    passes: list = field(default_factory=list)   # ("prefill" | "decode", rows) per forward pass
    pass_seconds: list = field(default_factory=list)   # wall seconds of each pass (the model call)

    @property
    def batch_sizes(self) -> list:
        """Rows in each decoding step (the batch occupancy)."""
        return [rows for kind, rows in self.passes if kind == "decode"]

    @property
    def decode_seconds(self) -> list:
        """Wall seconds of each decoding step's forward pass (prefills and the host's token
        choice, merging and bookkeeping excluded)."""
        return [t for (kind, _), t in zip(self.passes, self.pass_seconds) if kind == "decode"]

    @property
    def tokens(self) -> int:
        return sum(len(c.tokens) for c in self.completions)

    @property
    def throughput(self) -> float:
        """Generated tokens per second of wall time."""
        return self.tokens / self.seconds

    @property
    def latencies(self) -> list:
        return [c.latency for c in self.completions]

    @property
    def times_to_first_token(self) -> list:
        return [c.time_to_first_token for c in self.completions]

    def tokens_by_id(self) -> dict:
        return {c.request.id: c.tokens for c in self.completions}

    def __str__(self) -> str:
        lat = np.asarray(self.latencies)
        return (f"max_batch={self.max_batch}: {len(self.completions)} requests, {self.tokens} tokens "
                f"in {self.seconds:.2f} s -> {self.throughput:.1f} tokens/s; latency mean "
                f"{lat.mean():.2f} s, p90 {np.percentile(lat, 90):.2f} s; time to first token mean "
                f"{np.mean(self.times_to_first_token):.2f} s; "
                f"{len(self.passes)} forward passes, mean decode batch "
                f"{np.mean(self.batch_sizes or [0]):.1f}")


def make_requests(prompts_ids: Sequence[Sequence[int]], max_new_tokens, arrivals=None) -> list:
    """Requests from token-id prompts. ``max_new_tokens``: one int or one per prompt;
    ``arrivals``: seconds per prompt (default: everything at 0)."""
    n = len(prompts_ids)
    budgets = [max_new_tokens] * n if np.isscalar(max_new_tokens) else list(max_new_tokens)
    times = [0.0] * n if arrivals is None else [float(a) for a in arrivals]
    if not len(budgets) == len(times) == n:
        raise ValueError(f"{n} prompts but {len(budgets)} budgets and {len(times)} arrival times.")
    return [Request(i, tuple(int(t) for t in p), int(b), t)
            for i, (p, b, t) in enumerate(zip(prompts_ids, budgets, times))]


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list:
    """Arrival times of ``n`` requests at ``rate`` requests/s on average (the first at 0)."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def _pad_left(state: DecodeState, width: int, pad_id: int):
    """The state's ids/mask/cache widened to ``width`` columns by padding on the left."""
    extra = width - state.input_ids.shape[1]
    ids = np.pad(state.input_ids, ((0, 0), (extra, 0)), constant_values=pad_id)
    mask = np.pad(state.attention_mask, ((0, 0), (extra, 0)), constant_values=0)
    cache = None if state.cache is None else state.cache.pad_left(extra)
    return ids, mask, cache


def merge_states(running: DecodeState, joining: DecodeState, pad_id: int = 0) -> DecodeState:
    """New rows join a running batch: pad the narrower side on the left (ids, mask and the
    KV cache of every layer), then stack the rows. Padded columns are masked out and
    positions count real tokens only, so every row continues exactly as if it were alone."""
    if (running.cache is None) != (joining.cache is None):
        raise ValueError("Both states must use the KV cache, or neither.")
    width = max(running.input_ids.shape[1], joining.input_ids.shape[1])
    ids_a, mask_a, cache_a = _pad_left(running, width, pad_id)
    ids_b, mask_b, cache_b = _pad_left(joining, width, pad_id)
    cache = None if cache_a is None else cache_a.concat(cache_b)
    return DecodeState(np.concatenate([ids_a, ids_b]), np.concatenate([mask_a, mask_b]),
                       np.concatenate([running.logits, joining.logits]), cache,
                       list(running.rows) + list(joining.rows))


def _check_requests(requests, max_batch: int, limit: int) -> None:
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if not requests:
        raise ValueError("No requests to serve.")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("Request ids must be unique.")
    for r in requests:
        if len(r.prompt_ids) + r.max_new_tokens > limit:
            raise ValueError(f"request {r.id}: prompt ({len(r.prompt_ids)}) + max_new_tokens "
                             f"({r.max_new_tokens}) exceeds max_seq_len={limit}.")


def _admit(waiting: deque, room: int, now: float) -> list:
    """Pop the requests that have arrived by ``now``, first come first served, at most ``room``."""
    admitted = []
    while waiting and len(admitted) < room and waiting[0].arrival <= now:
        admitted.append(waiting.popleft())
    return admitted


def _choose(state: DecodeState, seen: dict, rngs: dict, sampling: dict) -> list:
    """The next token of every row (``generation.choose_tokens``, as ``generate`` uses)."""
    seen_rows = np.zeros(state.logits.shape, bool)
    for i, rid in enumerate(state.rows):
        seen_rows[i, list(seen[rid])] = True
    return choose_tokens(state.logits, seen_rows, [rngs[rid] for rid in state.rows], **sampling)


def _timed(seconds: list, forward, *args):
    """``forward(*args)``, appending its wall seconds to ``seconds``. Both forward passes
    return the logits on the host (``asnumpy``), so the work is done when they return."""
    t0 = time.perf_counter()
    out = forward(*args)
    seconds.append(time.perf_counter() - t0)
    return out


def serve(model, requests: Sequence[Request], max_batch: int = 8, *, eos_id=None, pad_id: int = 0,
          do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
          repetition_penalty: float = 1.0, seed: int = 0, progress=None) -> ServeReport:
    """Serve ``requests`` (arriving at ``request.arrival`` s of real time), at most ``max_batch``
    in flight (1 = one at a time). Request r samples from ``default_rng(seed + r.id)``, whoever
    shares its batch. ``progress``: tqdm-like, ``update(n)`` per n finished requests."""
    _check_requests(requests, max_batch, model.config.max_seq_len)
    eos = eos_set(eos_id)
    by_id = {r.id: r for r in requests}
    waiting = deque(sorted(requests, key=lambda r: (r.arrival, r.id)))
    outputs = {r.id: [] for r in requests}
    seen = {r.id: set(r.prompt_ids) for r in requests}
    rngs = {r.id: np.random.default_rng(seed + r.id) for r in requests}
    sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
                    repetition_penalty=repetition_penalty)
    first_token, finished, passes, pass_seconds, state = {}, {}, [], [], None
    start = time.perf_counter()
    now = lambda: time.perf_counter() - start     # noqa: E731
    while waiting or state is not None:
        # 1. Admit every request that has arrived, while there is room.
        admitted = _admit(waiting, max_batch - (state.batch_size if state is not None else 0), now())
        if state is None and not admitted:          # idle: wait for the next arrival
            time.sleep(max(0.0, waiting[0].arrival - now()))
            continue
        if admitted:
            joining = _timed(pass_seconds, prefill, model, [list(r.prompt_ids) for r in admitted], pad_id)
            joining.rows = [r.id for r in admitted]
            passes.append(("prefill", len(admitted)))
            state = joining if state is None else merge_states(state, joining, pad_id)

        # 2. Choose the next token of every row (the routine generation.generate uses).
        chosen = _choose(state, seen, rngs, sampling)

        # 3. Record; finished rows leave the batch.
        t = now()
        keep = []
        for i, (rid, tok) in enumerate(zip(state.rows, chosen)):
            outputs[rid].append(tok)
            seen[rid].add(tok)
            first_token.setdefault(rid, t)
            if tok in eos or len(outputs[rid]) >= by_id[rid].max_new_tokens:
                finished[rid] = t
            else:
                keep.append(i)
        if progress is not None and len(keep) < state.batch_size:
            progress.update(state.batch_size - len(keep))
        if not keep:
            state = None
            continue
        if len(keep) < state.batch_size:
            state.select_rows(keep)
            chosen = [chosen[i] for i in keep]
        # 4. One forward pass for the whole batch, from the KV cache.
        passes.append(("decode", state.batch_size))
        _timed(pass_seconds, decode_step, model, state, chosen)

    completions = [Completion(by_id[i], outputs[i], first_token[i], finished[i]) for i in sorted(by_id)]
    seconds = max(finished.values()) - min(r.arrival for r in requests)
    return ServeReport(max_batch, completions, seconds, passes, pass_seconds)
