"""Serving a language model: dynamic batching, and a decode step that compiles.

Part 1 — **dynamic (continuous) batching**, the scheduling idea behind inference servers,
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

Part 2 — **a static-shape decode step** (``StaticDecodeStep``): a growing Python KV cache
is fine for PyNative but not for graph compilation. Inference engines preallocate the
cache and *write* each new key/value into its slot, so every step has the same shapes and
GRAPH mode compiles the step once. ``generation.generate`` decodes this way by default;
``static_generate`` runs the step after an ordinary prefill, in PyNative or GRAPH mode,
and must give the same tokens.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .generation import DecodeState, StaticDecodeStep, choose_tokens, decode_step, prefill


# ======================================================================================
# Part 1: dynamic batching
# ======================================================================================
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
        return self.first_token_at - self.request.arrival


@dataclass
class ServeReport:
    max_batch: int
    completions: list             # Completion, ordered by request id
    seconds: float                # first arrival -> last finish
    passes: list = field(default_factory=list)   # ("prefill" | "decode", rows) per forward pass

    @property
    def batch_sizes(self) -> list:
        """Rows in each decoding step (the batch occupancy)."""
        return [rows for kind, rows in self.passes if kind == "decode"]

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

    def tokens_by_id(self) -> dict:
        return {c.request.id: c.tokens for c in self.completions}

    def __str__(self) -> str:
        lat = np.asarray(self.latencies)
        return (f"max_batch={self.max_batch}: {len(self.completions)} requests, {self.tokens} tokens "
                f"in {self.seconds:.2f} s -> {self.throughput:.1f} tokens/s; latency mean "
                f"{lat.mean():.2f} s, p90 {np.percentile(lat, 90):.2f} s; "
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


def serve(model, requests: Sequence[Request], max_batch: int = 8, *, eos_id=None, pad_id: int = 0,
          do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
          repetition_penalty: float = 1.0, seed: int = 0, progress=None) -> ServeReport:
    """Run a server loop over ``requests`` (arriving at ``request.arrival`` seconds of real
    time) with at most ``max_batch`` sequences in flight. ``max_batch=1`` = one at a time.

    Sampling uses ``numpy.random.default_rng(seed + request.id)`` per request, so results do
    not depend on which other requests share the batch. ``progress``: a tqdm-like object
    whose ``update(n)`` is called with the number of finished requests."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if not requests:
        raise ValueError("No requests to serve.")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("Request ids must be unique.")
    limit = model.config.max_seq_len
    for r in requests:
        if len(r.prompt_ids) + r.max_new_tokens > limit:
            raise ValueError(f"request {r.id}: prompt ({len(r.prompt_ids)}) + max_new_tokens "
                             f"({r.max_new_tokens}) exceeds max_seq_len={limit}.")
    eos = set() if eos_id is None else ({int(eos_id)} if np.isscalar(eos_id) else set(map(int, eos_id)))
    by_id = {r.id: r for r in requests}
    waiting = deque(sorted(requests, key=lambda r: (r.arrival, r.id)))
    outputs = {r.id: [] for r in requests}
    seen = {r.id: set(r.prompt_ids) for r in requests}
    rngs = {r.id: np.random.default_rng(seed + r.id) for r in requests}
    first_token, finished, passes = {}, {}, []
    state = None
    start = time.perf_counter()
    now = lambda: time.perf_counter() - start     # noqa: E731

    while waiting or state is not None:
        # 1. Admit every request that has arrived, while there is room.
        room = max_batch - (state.batch_size if state is not None else 0)
        admitted = []
        while waiting and room > 0 and waiting[0].arrival <= now():
            admitted.append(waiting.popleft())
            room -= 1
        if state is None and not admitted:          # idle: wait for the next arrival
            time.sleep(max(0.0, waiting[0].arrival - now()))
            continue
        if admitted:
            joining = prefill(model, [list(r.prompt_ids) for r in admitted], pad_id)
            joining.rows = [r.id for r in admitted]
            passes.append(("prefill", len(admitted)))
            state = joining if state is None else merge_states(state, joining, pad_id)

        # 2. Choose the next token of every row (the routine generation.generate uses).
        seen_rows = np.zeros(state.logits.shape, bool)
        for i, rid in enumerate(state.rows):
            seen_rows[i, list(seen[rid])] = True
        chosen = choose_tokens(state.logits, seen_rows, [rngs[rid] for rid in state.rows],
                               do_sample=do_sample, temperature=temperature, top_k=top_k,
                               top_p=top_p, repetition_penalty=repetition_penalty)

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
        decode_step(model, state, chosen)

    first_arrival = min(r.arrival for r in requests)
    completions = [Completion(by_id[i], outputs[i], first_token[i], finished[i]) for i in sorted(by_id)]
    return ServeReport(max_batch, completions, max(finished.values()) - first_arrival, passes)


# ======================================================================================
# Part 2: a decode step with static shapes (compiles in GRAPH mode)
# ======================================================================================
# The step itself is ``generation.StaticDecodeStep`` (what ``generate`` runs by default): the
# model's own ``DecoderLayer.step`` against fixed-size ``KVCache`` buffers.
_static_step_cell = StaticDecodeStep


@dataclass
class StaticRun:
    tokens: list                   # new ids per prompt (cut after EOS)
    mode: str
    compile_seconds: float         # the first decode call (includes graph compilation)
    step_seconds: list             # every later decode call

    @property
    def median_step(self) -> float:
        return float(np.median(self.step_seconds)) if self.step_seconds else float("nan")


def static_generate(model, prompts_ids, max_new_tokens: int, *, mode: str = "graph",
                    eos_id=None, pad_id: int = 0) -> StaticRun:
    """Greedy decoding with ``StaticDecodeStep``: prefill with the ordinary model
    (PyNative), copy its KV cache into buffers of length prompt + ``max_new_tokens``, then
    decode with fixed shapes in ``mode`` ("graph" compiles the step once). Rows that finish
    keep computing (static batch) but their later tokens are discarded."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    eos = set() if eos_id is None else ({int(eos_id)} if np.isscalar(eos_id) else set(map(int, eos_id)))
    state = prefill(model, prompts_ids, pad_id)
    width = state.input_ids.shape[1]
    if width + max_new_tokens > model.config.max_seq_len:
        raise ValueError(f"prompt ({width}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len={model.config.max_seq_len}.")
    state.reserve(model, width + max_new_tokens)
    outputs = [[] for _ in range(state.batch_size)]
    done = [False] * state.batch_size
    compile_s, times = 0.0, []
    for t in range(max_new_tokens):
        chosen = np.argmax(state.logits, -1).astype(np.int32)
        for i, tok in enumerate(chosen):
            if not done[i]:
                outputs[i].append(int(tok))
                done[i] = int(tok) in eos
        if all(done) or t == max_new_tokens - 1:
            break
        t0 = time.perf_counter()
        decode_step(model, state, chosen, mode=mode)
        elapsed = time.perf_counter() - t0
        if t == 0:
            compile_s = elapsed
        else:
            times.append(elapsed)
    return StaticRun(outputs, mode, compile_s, times)


def pynative_step_seconds(model, prompts_ids, max_new_tokens: int, pad_id: int = 0) -> list:
    """Seconds per ``generation.decode_step`` (PyNative, growing cache) on the same batch."""
    state = prefill(model, prompts_ids, pad_id)
    times = []
    for _ in range(max_new_tokens - 1):
        chosen = np.argmax(state.logits, -1)
        t0 = time.perf_counter()
        decode_step(model, state, chosen)
        times.append(time.perf_counter() - t0)
    return times


# ======================================================================================
# Part 3: PyNative's operator dispatch — asynchronous (default) or blocking
# ======================================================================================
def _time_decode(steps: int, batch: int) -> float:
    """Median seconds of ``decode_step`` on a random InternLM-tiny (runs in this process)."""
    import course_lib as cl
    from .internlm import InternLMForCausalLM, tiny
    cl.setup(device="CPU", seed=0, quiet=True)
    model = InternLMForCausalLM(tiny())
    model.set_train(False)
    return float(np.median(pynative_step_seconds(model, [[5, 6, 7, 8, 9, 10]] * batch, steps + 1)))


def pynative_dispatch_ms(blocking: bool, steps: int = 6, batch: int = 8, timeout: float = 300) -> float:
    """Median milliseconds per PyNative ``decode_step`` in a FRESH process, with MindSpore's
    default asynchronous operator dispatch or with ``ms.runtime.launch_blocking()`` (which
    can be switched on only once per process — hence the subprocess)."""
    cmd = [sys.executable, "-m", "course_lib.inference", "--time-decode", str(steps), str(batch)]
    if blocking:
        cmd.append("--blocking")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, GLOG_v="3"))
    for line in proc.stdout.splitlines():
        if line.startswith("DECODE_MS "):
            return float(line.split()[1])
    raise RuntimeError(f"timing subprocess failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--time-decode":
        if "--blocking" in sys.argv:
            import mindspore as ms
            ms.runtime.launch_blocking()
        print(f"DECODE_MS {1000 * _time_decode(int(sys.argv[2]), int(sys.argv[3])):.3f}", flush=True)
    else:
        sys.exit("usage: python -m course_lib.inference --time-decode STEPS BATCH [--blocking]")
