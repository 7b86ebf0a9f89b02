"""How MindSpore's graph compiler treats variable-length inputs, measured.

In GRAPH mode (and for ``@ms.jit`` functions) MindSpore compiles a graph for the *shapes
and dtypes* of the inputs. A batch with a new sequence length is a new key, so a new graph
is built — seconds each time — unless the dynamic dimensions are declared.

Counting compilations
---------------------
``CompileCounter`` watches the caches MindSpore itself consults before compiling: every
Cell keeps ``cell.compile_cache``, the set of graph keys ("phases": class, instance, input
shapes/dtypes) it has compiled, and ``@jit`` functions share
``mindspore.common.api.ms_compile_cache``. A call that adds a key is a call that built a
graph. ``count_compiles_from_ir`` is an independent check: with ``save_graphs`` on,
MindSpore writes one ``*_bootstrap_*.ir`` file (the first pass of its compiler pipeline)
per graph it builds; the test suite checks that both counts agree.

Strategies over a stream of batches (``run_stream``)
----------------------------------------------------
* ``static``   — feed each batch as it is: one graph per distinct length;
* ``bucketed`` — right-pad each batch to the next bucket length (labels of the padding are
  ``IGNORE_INDEX``): one graph per bucket used, some wasted compute on padding;
* ``dynamic``  — ``cell.set_inputs(Tensor(shape=[None, None], dtype=ms.int32), ...)``:
  one graph with unknown batch and length, reused for every batch;
* ``auto``     — MindSpore's automatic dynamic shape (env ``MS_AUTO_DYNAMIC_SHAPE_ENABLE=1``):
  compiles the first shapes statically, then generalises the shape by itself.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import mindspore as ms
from mindspore import Tensor, ops

from ..layers import MASK_VALUE
from ..pipelines import IGNORE_INDEX
from ..runtime import execution_mode, turn_order

STRATEGIES = ("static", "bucketed", "dynamic", "auto")
AUTO_DYNAMIC_ENV = "MS_AUTO_DYNAMIC_SHAPE_ENABLE"


# --------------------------------------------------------------------------------------
# Counting compilations
# --------------------------------------------------------------------------------------
def compiled_graphs() -> int:
    """Graphs compiled so far in this process (Cells in GRAPH mode + ``@jit`` functions)."""
    from mindspore.common import api
    return len(api.ms_compile_cache) + sum(len(s) for s in api.cells_compile_cache.values())


class CompileCounter:
    """``with CompileCounter() as c: ...`` then ``c.count`` = graphs compiled inside."""

    def __enter__(self):
        self.start = compiled_graphs()
        self.stop = None
        return self

    def __exit__(self, *exc):
        self.stop = compiled_graphs()
        return False

    @property
    def count(self) -> int:
        return (self.stop if self.stop is not None else compiled_graphs()) - self.start


@contextmanager
def _stderr_to(path: Path):
    """Point file descriptor 2 at ``path`` for the block (C++ logs included)."""
    import sys
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def count_compiles_from_ir(run: Callable[[], object], directory) -> int:
    """Run ``run()`` with MindSpore's IR dump on and count the graphs it compiled, from the
    ``*_bootstrap_*.ir`` files (one per compiled graph). Slow (writes ~100 files per
    graph): meant for a small cross-check, not for timing.

    While dumping, MindSpore looks up the source file of every Cell; for code typed into a
    Jupyter cell that file does not exist and it logs one ERROR line per lookup (megabytes).
    Written to a Jupyter kernel's stderr, that much output can hang the kernel (a
    hypothesis, not reproduced here: the stderr pipe is drained by a Python thread that
    cannot run while MindSpore holds the GIL, so the pipe fills up). The C-level stderr is
    therefore sent to ``mindspore_stderr.log`` (next to the IR files, in a new ``ir_*``
    folder inside ``directory``) during the dump."""
    import tempfile
    import mindspore as ms
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="ir_", dir=directory))   # fresh: names repeat across runs
    with _stderr_to(run_dir / "mindspore_stderr.log"):
        ms.set_context(save_graphs=1, save_graphs_path=str(run_dir))
        try:
            run()
        finally:
            ms.set_context(save_graphs=0)
    return len(list(run_dir.rglob("*bootstrap*.ir")))


@contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


# --------------------------------------------------------------------------------------
# A stream of variable-length batches
# --------------------------------------------------------------------------------------
def length_stream(token_lists: Sequence[Sequence[int]], batch_size: int, n_batches: int,
                  max_len: int, pad_id: int = 0, seed: int = 0):
    """Batches as a language-model data collator makes them: ``batch_size`` random
    sequences, inputs ``ids[:-1]`` / labels ``ids[1:]``, right-padded to the longest
    sequence *of that batch* (so the length changes from batch to batch).
    Sequences are cut to ``max_len + 1`` tokens. Returns [(inputs, labels)] int32."""
    seqs = [list(s)[: max_len + 1] for s in token_lists if len(s) >= 2]
    if len(seqs) < batch_size:
        raise ValueError(f"Need at least batch_size={batch_size} sequences of >= 2 tokens, "
                         f"got {len(seqs)}.")
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n_batches):
        chosen = [seqs[i] for i in rng.choice(len(seqs), batch_size, replace=False)]
        T = max(len(s) for s in chosen) - 1
        inputs = np.full((batch_size, T), pad_id, np.int32)
        labels = np.full((batch_size, T), IGNORE_INDEX, np.int32)
        for row, s in enumerate(chosen):
            inputs[row, : len(s) - 1] = s[:-1]
            labels[row, : len(s) - 1] = s[1:]
        batches.append((inputs, labels))
    return batches


def bucket_length(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``length``."""
    for b in sorted(buckets):
        if length <= b:
            return b
    raise ValueError(f"Length {length} exceeds the largest bucket {max(buckets)}; add a "
                     "bigger bucket or cut the sequences to max(buckets).")


def pad_batch(inputs: np.ndarray, labels: np.ndarray, length: int, pad_id: int = 0):
    """Right-pad a batch to ``length``: inputs with ``pad_id``, labels with IGNORE_INDEX.
    With a causal model, right padding changes neither the real tokens' logits nor a loss
    that skips IGNORE_INDEX."""
    extra = length - inputs.shape[1]
    if extra < 0:
        raise ValueError(f"Cannot pad a batch of length {inputs.shape[1]} down to {length}.")
    return (np.pad(inputs, ((0, 0), (0, extra)), constant_values=pad_id),
            np.pad(labels, ((0, 0), (0, extra)), constant_values=IGNORE_INDEX))


# --------------------------------------------------------------------------------------
# Running a stream under one strategy
# --------------------------------------------------------------------------------------
@dataclass
class CallRecord:
    length: int          # longest real sequence of the batch
    run_length: int      # length actually fed to the graph (after bucketing)
    seconds: float
    compiled: int        # graphs built by this call
    outputs: tuple = ()


@dataclass
class StreamResult:
    strategy: str
    records: list = field(default_factory=list)
    real_tokens: int = 0       # non-padding input positions
    given_tokens: int = 0      # positions of the batches as the collator made them
    computed_tokens: int = 0   # positions the model actually processed (after bucketing)
    replay_seconds: list = field(default_factory=list)   # the same calls again, warm
    replay_compiles: int = 0   # graphs built during the replays (0 expected)
    cell: object = field(default=None, repr=False)         # the warm Cell, for more replays
    calls: list = field(default_factory=list, repr=False)  # its calls' Tensor arguments

    @property
    def compiles(self) -> int:
        return sum(r.compiled for r in self.records)

    @property
    def total_seconds(self) -> float:
        return sum(r.seconds for r in self.records)

    @property
    def compile_call_seconds(self) -> float:
        """Wall time of the calls that compiled (compile + that one run)."""
        return sum(r.seconds for r in self.records if r.compiled)

    @property
    def steady_seconds(self) -> float:
        """Median time per call of the replays: every batch of the stream once more per
        replay, on the warm Cell, so each strategy's median is over the same calls (nan
        without a replay)."""
        return float(np.median(self.replay_seconds)) if self.replay_seconds else float("nan")

    @property
    def distinct_run_lengths(self) -> int:
        return len({r.run_length for r in self.records})

    @property
    def padding_share(self) -> float:
        """Share of processed positions that were padding (collator's + strategy's)."""
        return 1.0 - self.real_tokens / self.computed_tokens if self.computed_tokens else 0.0

    @property
    def extra_compute(self) -> float:
        """Positions processed / positions in the batches as given, minus 1: the work the
        strategy's own padding adds (0 for static and dynamic)."""
        return self.computed_tokens / self.given_tokens - 1.0 if self.given_tokens else 0.0


def run_stream(make_cell: Callable[[], object], batches, strategy: str,
               buckets: Sequence[int] = (16, 32, 64, 128), pad_id: int = 0,
               replay: bool = True) -> StreamResult:
    """Feed ``batches`` [(inputs, labels)] to a fresh ``make_cell()`` in GRAPH mode under
    ``strategy`` and record, per call, the length, wall time and graphs compiled. With
    ``replay``, the same calls then run once more on the warm Cell (``replay_once``): the
    steady time per batch, over the same batches for every strategy (``run_streams``
    replays the strategies in turns instead).

    ``make_cell`` must return a NEW Cell each time (e.g. ``lambda: EvalCell(model)``):
    compiled graphs are cached per Cell instance, so a reused Cell would start warm."""
    import mindspore as ms
    from mindspore import Tensor
    if strategy not in STRATEGIES:
        raise ValueError(f"Unknown strategy {strategy!r}; choose one of {STRATEGIES}.")
    if strategy == "bucketed" and not buckets:
        raise ValueError("strategy 'bucketed' needs bucket lengths, e.g. buckets=(16, 32, 64).")
    result = StreamResult(strategy)
    with execution_mode("graph"), _env(AUTO_DYNAMIC_ENV, "1" if strategy == "auto" else None):
        cell = make_cell()
        if strategy == "dynamic":
            cell.set_inputs(*[Tensor(shape=[None, None], dtype=ms.int32) for _ in batches[0]])
        calls = []
        for inputs, labels in batches:
            length = int(inputs.shape[1])
            result.given_tokens += int(inputs.size)
            if strategy == "bucketed":
                inputs, labels = pad_batch(inputs, labels, bucket_length(length, buckets), pad_id)
            calls.append((Tensor(inputs), Tensor(labels)))
            seconds, compiled, out = _timed_call(cell, calls[-1])
            result.records.append(CallRecord(length, int(inputs.shape[1]), seconds, compiled, out))
            result.real_tokens += int((labels != IGNORE_INDEX).sum())
            result.computed_tokens += int(inputs.size)
    result.cell, result.calls = cell, calls
    if replay:
        replay_once(result)
    return result


def replay_once(result: StreamResult) -> None:
    """Every call of ``result``'s stream once more on its warm Cell, under its strategy's
    settings: the times go to ``replay_seconds``, graphs built to ``replay_compiles``."""
    with execution_mode("graph"), _env(AUTO_DYNAMIC_ENV, "1" if result.strategy == "auto" else None):
        for args in result.calls:
            seconds, compiled, _ = _timed_call(result.cell, args)
            result.replay_seconds.append(seconds)
            result.replay_compiles += compiled


def run_streams(make_cell: Callable[[], object], batches, strategies: Sequence[str] = STRATEGIES,
                rounds: int = 3, **options) -> dict:
    """{strategy: StreamResult}: each strategy's stream from a fresh Cell (``run_stream``,
    one strategy after another: the compiling calls), then ``rounds`` replays in which the
    strategies take turns, the order reversed every other round, so that a change in the
    machine's load falls on every strategy's steady time. ``options``: ``buckets``, ``pad_id``."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    results = {s: run_stream(make_cell, batches, s, replay=False, **options) for s in strategies}
    for r in range(rounds):
        for s in turn_order(results, r):
            replay_once(results[s])
    return results


def _timed_call(cell, args):
    """(wall seconds, graphs compiled, outputs as NumPy) of one call."""
    with CompileCounter() as counter:
        start = time.perf_counter()
        out = cell(*args)
        out = tuple(o.asnumpy() for o in (out if isinstance(out, tuple) else (out,)))
        seconds = time.perf_counter() - start
    return seconds, counter.count, out


def summary_table(results: Sequence[StreamResult]) -> list[dict]:
    """Rows for a table: strategy, compiles, seconds... (timings are machine-dependent)."""
    return [{"strategy": r.strategy, "batches": len(r.records), "compiles": r.compiles,
             "distinct lengths fed": r.distinct_run_lengths,
             "total s": round(r.total_seconds, 2), "compiling calls s": round(r.compile_call_seconds, 2),
             "steady ms/batch": round(1000 * r.steady_seconds, 1),
             "extra compute %": round(100 * r.extra_compute, 1),
             "padding %": round(100 * r.padding_share, 1)} for r in results]


def same_outputs(a: StreamResult, b: StreamResult, rtol: float = 1e-5) -> bool:
    """Did two strategies compute the same per-batch outputs (e.g. summed NLL, token count)?"""
    if len(a.records) != len(b.records):
        return False
    return all(np.allclose(x, y, rtol=rtol, atol=1e-5)
               for ra, rb in zip(a.records, b.records) for x, y in zip(ra.outputs, rb.outputs))


# --------------------------------------------------------------------------------------
# One change for chapter 14's section 2.1: the attention bias built by graph operators
# --------------------------------------------------------------------------------------
def graph_attention_bias(query_len, key_len, attention_mask=None, slopes=None):
    """``layers.attention_bias`` without an attention mask, built by MindSpore operators
    from the lengths (which a declared dynamic shape leaves unknown until run time) instead
    of by NumPy on the host: 0 where a query may see the key (the key is not after it),
    ``layers.MASK_VALUE`` where it may not, plus ALiBi's ``slope_h * (pos_key - pos_query)``
    everywhere — the same numbers as ``layers.attention_bias``. (Its names are imported at
    module level: the graph compiler parses this function and reads its globals.)"""
    if attention_mask is not None:
        raise ValueError("graph_attention_bias covers calls without an attention_mask only.")
    positions = ops.arange(key_len).astype(ms.float32)                     # keys: 0..S-1
    queries = positions[key_len - query_len:]                              # the last T of them
    distance = positions.reshape(1, -1) - queries.reshape(-1, 1)           # (T, S) key - query
    bias = ops.where(distance <= 0, ops.zeros_like(distance), ops.full_like(distance, MASK_VALUE))
    bias = bias.reshape(1, 1, query_len, key_len)
    if slopes is not None:
        bias = bias + (Tensor(np.asarray(slopes, np.float32)).reshape(1, -1, 1, 1)
                       * distance.reshape(1, 1, query_len, key_len))
    return bias


@contextmanager
def bias_from_graph_ops():
    """Inside the block the course's decoders (``layers.DecoderModel``) build their
    attention bias with ``graph_attention_bias``; everything else stays as it is. An
    experiment, not a feature: it covers ALiBi models (Baichuan-13B's family) called without
    an attention mask — RoPE models also build their cos/sin tables on the host."""
    from .. import layers
    saved = layers.attention_bias
    layers.attention_bias = graph_attention_bias
    try:
        yield
    finally:
        layers.attention_bias = saved
