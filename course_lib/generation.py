"""One text-generation loop for every course model (Baichuan, InternLM, tiny twins).

    ids = generate(model, [prompt_ids, ...], max_new_tokens=50, do_sample=True,
                   temperature=0.8, top_k=50, top_p=0.9, repetition_penalty=1.1,
                   eos_id=tok.eos_id, seed=0)
    texts = generate_text(model, tok, ["人民日报", "经济"], max_new_tokens=50)

How it works
* Batched prompts are LEFT-padded: every row's last token sits in the last column, so one
  forward pass yields every row's next-token logits. ``attention_mask`` (1 = real token)
  hides the pads, and positions count real tokens only, so RoPE angles and ALiBi distances
  of a padded row equal those of the same prompt alone.
* ``prefill`` runs the prompts once and fills the KV cache; ``decode_step`` feeds one new
  token per row and attends to the cache (``use_cache=False`` recomputes everything — the
  baseline for the speed-up measurement).
* ``generate`` decodes with a compiled engine (``engine.DecodeEngine``, GRAPH mode): the KV cache
  lives inside it as Parameters of a fixed length (a multiple of 64, the "bucket") and
  each step writes one slot, so every step has the same shapes and the engine compiles
  once per batch size and bucket. The engine runs the model's own layers
  (``DecoderLayer.heads`` -> cache write -> ``DecoderLayer.finish``) on its live
  parameters, in their storage dtype: one forward for training, the PyNative path and
  the compiled one, whatever the family (GQA, QK-norm, tied or normalised heads, LoRA).
  ``engine="auto"`` usually takes the declared alternative, ``folded.FoldedEngine``: the
  same function in float32 with half the kernels (``engine_kind`` says when). A
  prompt of >= 8 tokens goes through the engine in one call (a graph per power-of-two
  width), a shorter one column by column. Greedy decoding picks the next id on the
  device (argmax) and feeds it straight back; the host only sends the step's small
  inputs (``StepInputs``: attention bias, RoPE cos/sin, slot index) and reads the chosen
  ids. Sampling and the repetition penalty bring each step's logits to the host instead.
* Rows that produced EOS leave the batch (``DecodeState.select_rows``), the building block
  of dynamic batching in an inference server.
* Logits processing happens in NumPy on (B, V) rows, in Hugging Face's order: repetition
  penalty -> temperature -> top-k -> top-p -> sample (or argmax when ``do_sample=False``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import mindspore as ms
from mindspore import Tensor

from . import folded, half
from .engine import DecodeEngine, cache_dtype, engine_mode
from .layers import MASK_VALUE, KVCache, attention_bias, positions_from_mask
from .memory import host_available_bytes
from .runtime import execution_mode, graph_repeater

from .validate import check_generate_args


# --------------------------------------------------------------------------------------
# Logits processors (pure NumPy, one row per sequence)
# --------------------------------------------------------------------------------------
def apply_repetition_penalty(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """CTRL-style penalty (Keskar et al. 2019) on tokens already in the sequence, with the sign
    rule of transformers' ``RepetitionPenaltyLogitsProcessor``: positive logits are divided
    by ``penalty``, negative ones multiplied by it (the paper divides every one)."""
    if penalty == 1.0:
        return logits
    penalised = np.where(logits < 0, logits * penalty, logits / penalty)
    return np.where(seen, penalised, logits)


def apply_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the k largest logits per row (ties with the k-th are kept), -inf elsewhere."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = np.partition(logits, -k, axis=-1)[..., -k, None]
    return np.where(logits < kth, -np.inf, logits)


def apply_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probabilities
    add up to at least ``p`` (always at least one token), -inf elsewhere."""
    if p >= 1.0:
        return logits
    order = np.argsort(-logits, axis=-1, kind="stable")
    sorted_logits = np.take_along_axis(logits, order, -1)
    probs = softmax(sorted_logits)
    mass_before = np.cumsum(probs, -1) - probs        # probability of the better tokens
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, -1)
    return np.where(drop, -np.inf, logits)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - np.max(logits, -1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def next_token_scores(logits, seen, *, temperature=1.0, top_k=0, top_p=1.0,
                      repetition_penalty=1.0) -> np.ndarray:
    """The processed scores sampling draws from (HF order: penalty, temperature, top-k, top-p)."""
    scores = apply_repetition_penalty(np.asarray(logits, np.float64), seen, repetition_penalty)
    scores = scores / temperature
    scores = apply_top_k(scores, top_k)
    return apply_top_p(scores, top_p)


def choose_tokens(logits, seen, rngs, *, do_sample=False, temperature=1.0, top_k=0, top_p=1.0,
                  repetition_penalty=1.0) -> list[int]:
    """The next token of every row (``generate`` and ``inference.serve`` both use this):
    argmax of the penalised logits, or a draw from row i's generator ``rngs[i]``."""
    if not do_sample:
        return [int(t) for t in np.argmax(apply_repetition_penalty(logits, seen, repetition_penalty), -1)]
    probs = softmax(next_token_scores(logits, seen, temperature=temperature, top_k=top_k,
                                      top_p=top_p, repetition_penalty=repetition_penalty))
    return [int(rng.choice(probs.shape[-1], p=p)) for rng, p in zip(rngs, probs)]


# --------------------------------------------------------------------------------------
# Prefill / decode step: the engine, usable on its own (e.g. an inference-server chapter)
# --------------------------------------------------------------------------------------
@dataclass
class DecodeState:
    """A batch of sequences being continued. Row i of every array is sequence ``rows[i]``."""

    input_ids: np.ndarray          # (B, S) int32: left pads + prompt + generated tokens
    attention_mask: np.ndarray     # (B, S) int32: 1 = real token
    logits: np.ndarray             # (B, V) float32: next-token logits of every row
    cache: object = None           # layers.KVCache, or None (recompute everything)
    rows: list = field(default_factory=list)
    compiled: bool = False         # cache reserved at a fixed length, steps run compiled

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    def select_rows(self, keep: Sequence[int]) -> "DecodeState":
        """Keep only the rows at positions ``keep`` (finished sequences leave the batch)."""
        if self.compiled:
            raise ValueError("A compiled decode state keeps its rows (fixed shapes); prefill "
                             "without reserve() to let rows leave.")
        keep = list(keep)
        self.input_ids = self.input_ids[keep]
        self.attention_mask = self.attention_mask[keep]
        self.logits = self.logits[keep]
        self.rows = [self.rows[i] for i in keep]
        if self.cache is not None:
            self.cache.select_rows(keep)
        # Columns that are padding in every remaining row carry no information: drop them.
        first_real = int(np.argmax(self.attention_mask.any(0)))
        if first_real:
            self.input_ids = self.input_ids[:, first_real:]
            self.attention_mask = self.attention_mask[:, first_real:]
            if self.cache is not None:
                self.cache.drop_left(first_real)
        return self

    def reserve(self, model, slots: int, engine: str = "auto") -> "DecodeState":
        """Move the cache into the model's compiled engine for ``slots`` positions: later
        ``decode_step``s run the compiled step (``DecodeEngine``)."""
        if self.cache is None:
            raise ValueError("Only a KV-cache state can be compiled: prefill with use_cache=True.")
        engine = decode_engine(model, self.batch_size, slots, engine)
        self.cache.reserve(slots)
        for buffers, grown in ((engine.keys, self.cache.keys), (engine.values, self.cache.values)):
            for buffer, tensor in zip(buffers, grown):
                buffer.set_data(tensor)
        self.cache = _engine_cache(engine)
        self.compiled = True
        return self


def as_prompt_lists(prompts_ids) -> list[list[int]]:
    """Validate prompts: a non-empty list of non-empty token-id lists."""
    if isinstance(prompts_ids, np.ndarray):
        prompts_ids = prompts_ids.tolist()
    if (not isinstance(prompts_ids, (list, tuple)) or not prompts_ids
            or not all(isinstance(p, (list, tuple, np.ndarray)) for p in prompts_ids)):
        raise ValueError("prompts_ids must be a non-empty list of token-id lists, e.g. "
                         "[tok.encode('人民日报')]; wrap a single prompt in a list.")
    prompts = [[int(t) for t in p] for p in prompts_ids]
    if min(len(p) for p in prompts) == 0:
        raise ValueError("Every prompt needs at least one token; encode it with add_bos=True "
                         "to start from nothing.")
    return prompts


def left_pad(prompts_ids: Sequence[Sequence[int]], pad_id: int = 0):
    """Lists of ids -> (ids, mask) int32 arrays of shape (B, longest), pads on the left."""
    prompts = as_prompt_lists(prompts_ids)
    longest = max(len(p) for p in prompts)
    ids = np.full((len(prompts), longest), pad_id, np.int32)
    mask = np.zeros((len(prompts), longest), np.int32)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p):] = p
        mask[i, longest - len(p):] = 1
    return ids, mask


def _forward_last(model, ids: np.ndarray, mask: np.ndarray, cache) -> np.ndarray:
    # The mask goes in as a NumPy array: the model then builds the attention bias and the
    # positions on the host, in one transfer, instead of a dozen tiny device ops per step.
    logits = model(Tensor(ids), attention_mask=None if mask.all() else mask, cache=cache,
                   last_only=True)
    return logits[:, -1].asnumpy()


def prefill(model, prompts_ids, pad_id: int = 0, use_cache: bool = True) -> DecodeState:
    """Run the (left-padded) prompts once; with ``use_cache`` keep their keys/values."""
    ids, mask = left_pad(prompts_ids, pad_id)
    cache = model.new_cache() if use_cache else None
    with execution_mode("pynative"):    # a Python KV-cache object goes into the model
        logits = _forward_last(model, ids, mask, cache)
    return DecodeState(ids, mask, logits, cache, list(range(len(ids))))


def decode_step(model, state: DecodeState, next_tokens, mode: str = "graph") -> DecodeState:
    """Append one token per row and compute the next logits (from the cache if present).
    A ``compiled`` state runs its ``DecodeEngine`` in ``mode`` ("graph"; "pynative" to
    check that compiling changes nothing)."""
    next_tokens = np.asarray(next_tokens, np.int32).reshape(-1, 1)
    if len(next_tokens) != state.batch_size:
        raise ValueError(f"Got {len(next_tokens)} tokens for a batch of {state.batch_size} rows.")
    state.input_ids = np.concatenate([state.input_ids, next_tokens], 1)
    state.attention_mask = np.concatenate(
        [state.attention_mask, np.ones_like(next_tokens)], 1)
    if state.compiled:
        state.logits = _compiled_step(model, state, next_tokens, mode)
        return state
    with execution_mode("pynative"):
        if state.cache is not None:
            state.logits = _forward_last(model, next_tokens, state.attention_mask, state.cache)
        else:
            state.logits = _forward_last(model, state.input_ids, state.attention_mask, None)
    return state


_ENGINES_PER_MODEL = 4          # compiled engines (and their cache buffers) kept per model
ENGINES = ("auto", "layers", "folded", "half")


def engine_kind(model, engine: str = "auto") -> str:
    """Which engine decodes ``model``: "layers" (``DecodeEngine``: the model's own layers,
    no copy of any weight), "folded" (``folded.FoldedEngine``: about half the kernels per
    token, computing in float32 from a float32 copy of the weights) or "half"
    (``half.HalfEngine``: the folded engine's computation from the model's own float16
    weights, no copy). "auto" takes, on a CPU:

    * "half" for a float16 model the half engine can run (``half.supports``);
    * "folded" for any other model it can fold, unless the copy (``folded.copy_bytes``)
      would not fit in the host memory available now;
    * "layers" otherwise (a half-precision model then runs operator by operator,
      ``engine_mode``: at Qwen2.5-0.5B's size about 1/33 of the folded engine's speed at batch 1,
      1/13 at batch 8: benchmarks/RESULTS.md,
      "Real size").

    On an accelerator a half-precision model takes "layers" (its own kernels compute in
    that dtype)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}.")
    reason = folded.supports(model)
    if engine == "folded" and reason:
        raise ValueError(f"engine='folded' cannot run this model: {reason}. Use engine='layers'.")
    why_not_half = half.supports(model) if engine in ("half", "auto") else None
    if engine == "half" and why_not_half:
        raise ValueError(f"engine='half' cannot run this model: {why_not_half}.")
    if engine != "auto":
        return engine
    if ms.get_context("device_target") == "CPU" and \
            model.model.embed_tokens.weight.dtype == ms.float16 and not why_not_half:
        return "half"
    if reason or (engine_mode(model) == "graph" and cache_dtype(model) != ms.float32):
        return "layers"
    fits = "_decode_weights" in model.__dict__ or folded.copy_bytes(model) < host_available_bytes()
    return "folded" if fits else "layers"


def decode_engine(model, batch: int, slots: int, engine: str = "auto") -> DecodeEngine:
    """The model's engine of kind ``engine`` (``engine_kind``) for ``batch`` rows and
    ``slots`` cache slots. Engines are compiled on first use, then reused (the least
    recently used beyond ``_ENGINES_PER_MODEL`` is dropped), and all dropped when the
    model's layers or Parameter objects are replaced (``inject_lora``, ``merge_lora``, a
    new Dense: a graph compiled for the old layout would silently keep computing the old
    model). The folded engine's weights are refolded here, at the start of a generation,
    when the live parameters changed since the last fold (``folded.fingerprint``). Kept in
    the model's ``__dict__`` (not child Cells: no extra parameters in checkpoints), so they
    go away with the model."""
    kind, layout = engine_kind(model, engine), _layout(model)
    if model.__dict__.get("_decode_layout") != layout:
        model.__dict__["_decode_layout"] = layout
        model.__dict__["_decode_engines"] = {}
        model.__dict__.pop("_decode_weights", None)
    engines = model.__dict__.setdefault("_decode_engines", {})
    key = (kind, batch, slots)
    engine_ = engines.pop(key, None)
    if kind == "folded":
        weights = model.__dict__.get("_decode_weights")
        if weights is None:
            weights = model.__dict__["_decode_weights"] = folded.DecodeWeights(model)
        weights.refresh()
        engine_ = engine_ or folded.FoldedEngine(model, batch, slots, weights)
    if kind == "half":
        engine_ = engine_ or half.HalfEngine(model, batch, slots)
    engine_ = engine_ or DecodeEngine(model, batch, slots)
    engines[key] = engine_                               # most recently used last
    while len(engines) > _ENGINES_PER_MODEL:
        engines.pop(next(iter(engines)))
    return engine_


def _layout(model) -> tuple:
    """Which Cell and which Parameter objects the model is made of (not their values)."""
    return (tuple((name, id(cell)) for name, cell in model.cells_and_names()),
            tuple(id(p) for p in model.get_parameters()))


def cache_bucket(length: int, limit: int) -> int:
    """Slots to reserve for ``length`` tokens: the next multiple of 64, at most ``limit``
    (few distinct shapes -> few compilations). Multiples of 64 rather than powers of two:
    every step attends over every slot (and small buffers are copied at every write:
    ``DecodeEngine._write_cache``), so 272 tokens take 320 slots instead of 512
    (benchmarks/RESULTS.md)."""
    return min(limit, max(64, -(-int(length) // 64) * 64))


class StepInputs:
    """The host-side inputs of the engine calls of one batch, built with the model's own
    ``attention_bias`` and rotary embedding: a query in slot j attends to the real tokens
    in slots <= j. One decode step's inputs come from a ``block`` of steps built in one
    NumPy call; ``span`` builds those of several consecutive slots at once (a prefill).
    ``engine`` is the engine instance they are for (its ``host_inputs`` shapes them)."""

    def __init__(self, model, mask: np.ndarray, slots: int, block: int = 32, *, engine):
        self.body, self.mask, self.slots, self.block = model.model, mask, slots, block
        self.engine, self.start = engine, None

    def _build(self, start: int, stop: int):
        """The engine's ``host_inputs`` for slots start..stop-1, from bias (B, H|1, T, slots)
        and cos, sin (B, 1, T, d) (None for ALiBi)."""
        part = attention_bias(stop - start, stop, self.mask[:, :stop], self.body.slopes).asnumpy()
        bias = np.full(part.shape[:3] + (self.slots,), MASK_VALUE, np.float32)
        bias[..., :stop] = part                                # empty slots masked
        if self.body.slopes is not None:
            return self.engine.host_inputs(bias, None, None)
        positions = positions_from_mask(self.mask)[:, start:stop]
        # construct() on NumPy positions is NumPy code: calling the Cell inside a GRAPH
        # block would compile a graph with the positions baked in, once per block
        cos, sin = (t.asnumpy() for t in self.body.rotary.construct(positions))
        return self.engine.host_inputs(bias, cos, sin)

    def __call__(self, j: int):
        """The engine's input Tensors ((bias, cos, sin, where) for ``DecodeEngine``) of the
        step whose token goes into slot ``j``. A block's Tensors are all made when it
        starts: between two engine calls the host only picks them (NumPy work there
        competes with the running step for the cores: 0.2-0.3 ms a step measured)."""
        if self.start is None or not self.start <= j < self.start + len(self.steps):
            self.start, stop = j, min(j + self.block, self.mask.shape[1])
            parts, where = self._build(j, stop), self.where(j, stop)
            self.steps = [self._tensors(parts + (where,), i, i + 1) for i in range(stop - j)]
        return self.steps[j - self.start]

    def span(self, start: int, stop: int):
        """The engine's input Tensors of one call that writes slots start..stop-1."""
        return self._tensors(self._build(start, stop) + (self.where(start, stop),), 0, stop - start)

    @staticmethod
    def _tensors(parts, start: int, stop: int):
        """Tokens start..stop-1 of a block's inputs (the token axis is axis 2 of each)."""
        return tuple(None if p is None else Tensor(np.ascontiguousarray(p[:, :, start:stop]))
                     for p in parts)

    def where(self, start: int, stop: int) -> np.ndarray:
        """(B, H_kv, T, 3) [row, head, slot] indices: where the keys/values of slots
        start..stop-1 go."""
        b, h, t = self.mask.shape[0], self.body.config.kv_heads, stop - start
        rows, heads, slots = np.meshgrid(np.arange(b), np.arange(h), np.arange(start, stop),
                                         indexing="ij")
        return np.stack([rows, heads, slots], -1).astype(np.int32).reshape(b, h, t, 3)


PREFILL_MIN = 8     # prompts at least this wide go through the engine in ONE call


def prefill_width(length: int, new_tokens: int, limit: int) -> int:
    """Columns a prompt of ``length`` tokens is left-padded to for the compiled prefill:
    the next power of two (a few widths -> a few compiled prefill graphs), if that still
    leaves room for ``new_tokens`` within ``limit``; prompts shorter than ``PREFILL_MIN``
    go in column by column through the decode step (no prefill graph to compile)."""
    if length < PREFILL_MIN:
        return length
    width = 1 << (int(length) - 1).bit_length()
    return width if width + new_tokens <= limit else length


def compiled_prefill(model, prompts_ids, slots: int, pad_id: int = 0,
                     width: int | None = None, engine: str = "auto") -> DecodeState:
    """``prefill`` with the compiled engine, into a cache of ``slots`` fixed slots. The
    prompts are left-padded to ``width`` columns (default: the longest prompt; a pad's key
    is masked for everyone). From ``PREFILL_MIN`` columns on they go through the engine in
    ONE call (a graph compiled per width; the half engine: in chunks of columns of at most
    ``engine.prefill_rows`` rows, a power of two columns each), shorter ones one column per
    call (the decode step's graph). The engine and its cache are shared by every state of
    the same batch size and slots: continue one at a time."""
    ids, mask = left_pad(prompts_ids, pad_id)
    if width is not None and width > ids.shape[1]:
        grow = width - ids.shape[1]
        ids, mask = np.pad(ids, ((0, 0), (grow, 0)), constant_values=pad_id), np.pad(mask, ((0, 0), (grow, 0)))
    if ids.shape[1] > slots:
        raise ValueError(f"A prompt of {ids.shape[1]} tokens does not fit in {slots} slots.")
    engine = decode_engine(model, len(ids), slots, engine)
    inputs = StepInputs(model, mask, slots, engine=engine)
    rows = getattr(engine, "prefill_rows", None)
    with execution_mode(engine.mode):
        if ids.shape[1] >= PREFILL_MIN and rows is not None:       # in chunks of columns
            engine.clear()
            step = 1 << (max(1, rows // len(ids))).bit_length() - 1
            for start in range(0, ids.shape[1], step):
                stop = min(start + step, ids.shape[1])
                _, logits = engine(Tensor(ids[:, start:stop]), *inputs.span(start, stop))
        elif ids.shape[1] >= PREFILL_MIN:  # fills slots 0..width-1, empties the rest
            _, logits = engine(Tensor(ids), *inputs.span(0, ids.shape[1]))
        else:
            engine.clear()           # what an earlier generation left in the slots goes
            for j in range(ids.shape[1]):
                _, logits = engine(Tensor(ids[:, j:j + 1]), *inputs(j))
    return DecodeState(ids, mask, logits.asnumpy(), _engine_cache(engine),
                       list(range(len(ids))), compiled=True)


def prefill_for(model, prompts_ids, max_new_tokens: int, pad_id: int = 0,
                engine: str = "auto") -> DecodeState:
    """``compiled_prefill`` with the shapes ``generate`` uses for ``max_new_tokens`` more
    tokens: the prompts padded to ``prefill_width``, a ``cache_bucket`` of slots."""
    limit = model.config.max_seq_len
    width = prefill_width(max(len(p) for p in prompts_ids), max_new_tokens, limit)
    return compiled_prefill(model, prompts_ids, cache_bucket(width + max_new_tokens, limit),
                            pad_id, width, engine)


def _engine_cache(engine: DecodeEngine) -> KVCache:
    """A ``KVCache`` view of the engine's buffers (what ``DecodeState.cache`` holds)."""
    cache = KVCache(len(engine.keys))
    cache.keys, cache.values = list(engine.keys), list(engine.values)
    cache.engine = engine
    return cache


def _compiled_step(model, state: DecodeState, tokens, mode: str = "graph") -> np.ndarray:
    """The last column of ``state.input_ids`` (``tokens``) through the state's engine."""
    width, slots = state.attention_mask.shape[1], state.cache.seq_len
    if width > slots:
        raise ValueError(f"The reserved cache ({slots} slots) is full; reserve more slots.")
    inputs = StepInputs(model, state.attention_mask, slots, block=1,
                        engine=state.cache.engine)(width - 1)
    with execution_mode(mode):
        _, logits = state.cache.engine(Tensor(np.asarray(tokens, np.int32)), *inputs)
    return logits.asnumpy()


READ_EVERY = 16     # greedy ids are read back in blocks: no host wait after every step


def greedy_decode(model, state: DecodeState, first, steps: int, eos=frozenset()) -> np.ndarray:
    """``steps`` greedy tokens per row after ``first`` (B,) with the compiled engine, the
    choice made on the device (argmax) and fed straight into the next step: the host only
    builds the step inputs and reads the chosen ids, ``READ_EVERY`` steps at a time (to
    stop once every row has hit EOS: up to READ_EVERY - 1 steps past it are computed and
    returned; ``generate`` cuts each row after its EOS).
    Returns (B, <= steps + 1) ids: ``first`` and the new ones (``state.logits`` is left as
    it was: the logits never leave the device)."""
    engine, width = state.cache.engine, state.attention_mask.shape[1]
    total = width + steps
    if total > state.cache.seq_len:
        raise ValueError(f"The reserved cache ({state.cache.seq_len} slots) is too short for "
                         f"{steps} more tokens; reserve more slots.")
    mask = np.ones((state.batch_size, total), np.int32)
    mask[:, :width] = state.attention_mask
    inputs = StepInputs(model, mask, state.cache.seq_len, engine=engine)
    chosen = [np.asarray(first, np.int32).reshape(-1, 1)]
    done = np.isin(chosen[0][:, 0], list(eos))
    token, pending, step = Tensor(chosen[0]), [], None
    with execution_mode(engine.mode):
        for j in range(width, total):
            if step is None:                 # the first step finds the graph, the rest reuse it
                (token, _), step = graph_repeater(engine, token, *inputs(j))
            else:
                token, _ = step(token, *inputs(j))
            pending.append(token)
            if len(pending) == READ_EVERY or j == total - 1:   # read a block of ids at once
                chosen += [t.asnumpy() for t in pending]
                pending = []
                done |= np.isin(np.concatenate(chosen, 1), list(eos)).any(1)
                if done.all():
                    break
    ids = np.concatenate(chosen, 1)
    state.input_ids = np.concatenate([state.input_ids, ids[:, :-1]], 1)
    state.attention_mask = mask[:, :state.input_ids.shape[1]]
    return ids


# --------------------------------------------------------------------------------------
# The generation loop
# --------------------------------------------------------------------------------------
def _check_sampling(max_new_tokens, temperature, top_k, top_p, repetition_penalty):
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use do_sample=False for greedy), got {temperature}")
    if not (isinstance(top_k, (int, np.integer)) and top_k >= 0):
        raise ValueError(f"top_k must be an int >= 0 (0 = off), got {top_k!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")
    if not repetition_penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0 (1 = off), got {repetition_penalty}")


def eos_set(eos_id) -> set:
    """``eos_id`` (None, an int or a list of ids) as a set of ints."""
    if eos_id is None:
        return set()
    return {int(eos_id)} if np.isscalar(eos_id) else set(map(int, eos_id))


def generate(model, prompts_ids, max_new_tokens: int = 32, *, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0,
             eos_id=None, pad_id: int = 0, do_sample: bool = False, seed: int = 0,
             use_cache: bool = True, engine: str = "auto") -> list[list[int]]:
    """Continue every prompt by up to ``max_new_tokens`` tokens; return the NEW ids per
    prompt. A sequence stops after it emits ``eos_id`` (an int or a list of ids; the EOS
    token is the last id returned). ``do_sample=False`` is greedy decoding. With sampling,
    prompt i draws from ``numpy.random.default_rng(seed + i)``: reproducible and independent
    of the other rows. ``engine`` picks the compiled decode step (``engine_kind``:
    "layers", "folded" or "auto")."""
    check_generate_args(model, prompts_ids, temperature=temperature, do_sample=do_sample)
    _check_sampling(max_new_tokens, temperature, top_k, top_p, repetition_penalty)
    eos = eos_set(eos_id)
    prompts_ids = as_prompt_lists(prompts_ids)
    longest = max(len(p) for p in prompts_ids)
    limit = model.config.max_seq_len
    if longest + max_new_tokens > limit:
        raise ValueError(f"prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"the model's max_seq_len={limit}; shorten one of them.")
    outputs: list[list[int]] = [[] for _ in prompts_ids]
    if max_new_tokens == 0:
        return outputs

    if use_cache:                   # fixed shapes: the compiled engine, prompt and new tokens
        state = prefill_for(model, prompts_ids, max_new_tokens, pad_id, engine)
    else:
        state = prefill(model, prompts_ids, pad_id, use_cache=False)
    if use_cache and not do_sample and repetition_penalty == 1.0:     # greedy on the device
        ids = greedy_decode(model, state, np.argmax(state.logits, -1), max_new_tokens - 1, eos)
        return [_cut_after_eos(row, eos) for row in ids.tolist()]
    return _host_loop(model, state, prompts_ids, outputs, max_new_tokens, eos,
                      dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
                           repetition_penalty=repetition_penalty), seed)


def _cut_after_eos(row: list, eos) -> list:
    for i, tok in enumerate(row):
        if tok in eos:
            return row[:i + 1]
    return row


def _host_loop(model, state, prompts_ids, outputs, max_new_tokens, eos, sampling, seed):
    """Sampling (or a repetition penalty, or no cache): every step's logits come to the
    host, ``choose_tokens`` picks the ids (per-row NumPy generators)."""
    seen = np.zeros((len(prompts_ids), state.logits.shape[-1]), bool)   # repetition penalty
    for i, p in enumerate(prompts_ids):
        seen[i, p] = True
    rngs = [np.random.default_rng(seed + i) for i in range(len(prompts_ids))]
    done = [False] * len(prompts_ids)
    for step in range(max_new_tokens):
        rows = state.rows
        chosen = choose_tokens(state.logits, seen[rows], [rngs[r] for r in rows], **sampling)
        keep = []
        for i, (r, tok) in enumerate(zip(rows, chosen)):
            if done[r]:                 # a compiled batch keeps finished rows: ignore them
                continue
            outputs[r].append(tok)
            seen[r, tok] = True
            done[r] = tok in eos
            if not done[r]:
                keep.append(i)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(rows) and not state.compiled:
            state.select_rows(keep)
            chosen = [chosen[i] for i in keep]
        decode_step(model, state, chosen)
    return outputs


def generate_text(model, tokenizer, prompts, max_new_tokens: int = 32, *,
                  include_prompt: bool = True, add_bos: bool = False, **sampling) -> list[str]:
    """Strings in, strings out: encode, ``generate``, decode (special tokens skipped).

    ``prompts`` is a str or a list of str; ``eos_id``/``pad_id`` default to the tokenizer's.
    Returns prompt + continuation (``include_prompt=False``: the continuation only)."""
    if isinstance(prompts, str):
        prompts = [prompts]
    sampling.setdefault("eos_id", tokenizer.eos_id)
    sampling.setdefault("pad_id", tokenizer.pad_id)
    ids = [tokenizer.encode(p, add_bos=add_bos) for p in prompts]
    new = generate(model, ids, max_new_tokens, **sampling)
    texts = [tokenizer.decode(n) for n in new]
    return [p + t for p, t in zip(prompts, texts)] if include_prompt else texts
