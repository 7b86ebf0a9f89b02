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
* ``generate`` decodes with a compiled engine (``DecodeEngine``, GRAPH mode): the KV cache
  lives inside it as Parameters of a fixed length (a multiple of 64, the "bucket") and
  each step writes one slot, so every step has the same shapes and the engine compiles
  once per batch size and bucket. It runs the model with its weights folded the way
  inference engines do (``DecodeWeights``: norm gains and the attention scale folded into
  the next matmul, q/k/v and gate/up in one matmul each): far fewer kernels per token
  (counted by benchmarks/profile_decode.py; figures in benchmarks/RESULTS.md), recomputed
  from the live parameters at the start of every generation. A
  prompt of >= 8 tokens goes through the engine in one call (a graph per power-of-two
  width), a shorter one column by column. Greedy decoding picks the next id on the
  device (argmax) and feeds it straight back; the host only sends the step's small
  inputs (``StepInputs``: attention bias, RoPE rotation, slot index) and reads the chosen
  ids. Sampling and the repetition penalty bring each step's logits to the host instead.
* Rows that produced EOS leave the batch (``DecodeState.select_rows``), the building block
  of dynamic batching in an inference server.
* Logits processing happens in NumPy on (B, V) rows, in Hugging Face's order: repetition
  penalty -> temperature -> top-k -> top-p -> sample (or argmax when ``do_sample=False``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from .layers import MASK_VALUE, KVCache, attention_bias, positions_from_mask
from .runtime import execution_mode

from .validate import check_generate_args


# --------------------------------------------------------------------------------------
# Logits processors (pure NumPy, one row per sequence)
# --------------------------------------------------------------------------------------
def apply_repetition_penalty(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """CTRL-style penalty (Keskar et al. 2019) on tokens already in the sequence:
    positive logits are divided by ``penalty``, negative ones multiplied by it."""
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

    def reserve(self, model, slots: int) -> "DecodeState":
        """Move the cache into the model's compiled engine for ``slots`` positions: later
        ``decode_step``s run the compiled step (``DecodeEngine``)."""
        if self.cache is None:
            raise ValueError("Only a KV-cache state can be compiled: prefill with use_cache=True.")
        engine = decode_engine(model, self.batch_size, slots)
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


_mm_t = ops.MatMul(transpose_b=True)           # x @ Wᵀ with W stored (out, in), as nn.Dense
_bmm = ops.BatchMatMul()
_bmm_t = ops.BatchMatMul(transpose_b=True)
_unit_norm = ops.L2Normalize(axis=-1, epsilon=1e-12)


def _weight(linear):
    """The (out, in) weight a linear layer applies, a LoRA adapter's B·A·alpha/r included."""
    w = linear.weight.astype(ms.float32)
    if hasattr(linear, "lora_A"):                     # lora.LoRADense, not merged
        w = w + ops.matmul(linear.lora_B, linear.lora_A).astype(ms.float32) * linear.scaling
    return w


def _bias(linear):
    return linear.bias.astype(ms.float32)


def _fold_norm(w, gain, n: int):
    """W (out, n) of the layer after an RMSNorm with weight ``gain``, for inputs that are
    unit vectors of n + 1 features (see ``DecodeWeights``): W·diag(√n·gain), then a zero
    column for the extra feature."""
    w = w * (gain.astype(ms.float32) * math.sqrt(n))
    return ops.concat((w, ops.zeros((w.shape[0], 1), ms.float32)), 1)


def _extra_row(w):
    """A zero output row: the layer adds nothing to the extra feature of the residual stream."""
    return ops.concat((w, ops.zeros((1,) + w.shape[1:], ms.float32)), 0)


class DecodeWeights(nn.Cell):
    """The model's weights rearranged for decoding, the way inference engines fold them:

    * the residual stream gets one extra feature, the constant c = sqrt(n·eps); then
      RMSNorm(h)·g = sqrt(n)·g·u[:n] with u = h'/|h'| the unit vector of h' = [h, c]
      (|h'|² = Σh² + n·eps): ONE ``L2Normalize`` kernel per norm, √n·g folded into the
      next layer's weight (``_fold_norm``), the extra feature given zero weight;
    * q, k, v in one matmul (q's rows pre-scaled by 1/sqrt(d)), gate and up in one;
    * o_proj and down_proj with a zero row for the extra feature (``_extra_row``);
    * LoRA adapters added in (``_weight``).

    Calling it (one compiled graph) recomputes every folded weight from the model's LIVE
    parameters: ``decode_engine`` does so at the start of every generation, so training,
    ``load_checkpoint`` or a merge between two calls is always seen."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        c = lm.config
        n, f, layers = c.hidden_size, c.intermediate_size, c.num_layers
        self.lm, self.n = lm, n
        self.constant = math.sqrt(n * c.rms_norm_eps)
        zeros = lambda shape, name: ms.ParameterTuple(                             # noqa: E731
            ms.Parameter(Tensor(np.zeros(shape, np.float32)), f"decode_{name}{i}",
                         requires_grad=False) for i in range(layers))
        self.qkv, self.qkv_bias = zeros((3 * n, n + 1), "qkv"), zeros((3 * n,), "qkv_bias")
        self.o, self.o_bias = zeros((n + 1, n), "o"), zeros((n + 1,), "o_bias")
        self.gate_up, self.down = zeros((2 * f, n + 1), "gate_up"), zeros((n + 1, f), "down")
        self.lm_head = ms.Parameter(Tensor(np.zeros((c.vocab_size, n + 1), np.float32)),
                                    "decode_lm_head", requires_grad=False)

    def construct(self):
        body, n, c = self.lm.model, self.n, self.lm.config
        for i, layer in enumerate(body.layers):
            a, mlp = layer.self_attn, layer.mlp
            parts = (a.W_pack,) if a.fused_qkv else (a.q_proj, a.k_proj, a.v_proj)
            w = ops.concat([_weight(x) for x in parts], 0)                    # (3n, n)
            w = ops.concat((w[:n] * a.scale, w[n:]), 0)
            ops.assign(self.qkv[i], _fold_norm(w, layer.input_layernorm.weight, n))
            if c.qkv_bias:
                b = ops.concat([_bias(x) for x in parts], 0)
                ops.assign(self.qkv_bias[i], ops.concat((b[:n] * a.scale, b[n:]), 0))
            ops.assign(self.o[i], _extra_row(_weight(a.o_proj)))
            if c.o_bias:
                ops.assign(self.o_bias[i], _extra_row(_bias(a.o_proj)))
            gate_up = ops.concat((_weight(mlp.gate_proj), _weight(mlp.up_proj)), 0)
            ops.assign(self.gate_up[i], _fold_norm(gate_up, layer.post_attention_layernorm.weight, n))
            ops.assign(self.down[i], _extra_row(_weight(mlp.down_proj)))
        return ops.assign(self.lm_head, _fold_norm(_weight(self.lm.lm_head), body.norm.weight, n))


ADD_IN_PLACE_BYTES = 256 * 1024   # cache buffers from this size on are written in place


class DecodeEngine(nn.Cell):
    """The compiled decode step of a ``CausalLM``: the model's computation with the
    ``DecodeWeights`` folding (fewer, larger kernels: MindSpore's runtime pays per kernel),
    against a KV cache of ``slots`` fixed slots that lives inside the engine — one
    (B, H, slots, d) ``Parameter`` per layer for keys and for values.

    Inputs for T new tokens per row (T = 1 while decoding, T = the padded prompt width
    for a compiled prefill): ``token`` (B, T) int32; ``bias`` (B, H|1, T, slots) —
    ``attention_bias`` of the tokens against every slot (empty slots, pads and later
    tokens masked); ``rotation`` (B·T·3, d, d) — RoPE as a rotation matrix per token for
    its q, k (identity for v), or None (ALiBi); ``where`` (B, H, T, 3) int32: the [row,
    head, slot] index of every new key/value, written into the cache by ``_write_cache``.
    Returns the greedy choice (B, 1) int32 — it can stay on the device as the
    next call's ``token`` — and the logits (B, V) of the last token. Same shapes at every
    step: GRAPH mode compiles the step once per engine (batch size x slots), and a
    prefill once per prompt width. Equal to the model's own forward: tests/test_generation.py."""

    def __init__(self, weights: DecodeWeights, batch: int, slots: int):
        super().__init__(auto_prefix=False)
        c = weights.lm.config
        self.w, self.slots, self.config = weights, slots, c
        shape = (batch, c.num_heads, slots, c.head_dim)
        buffers = lambda kind: ms.ParameterTuple(                                  # noqa: E731
            ms.Parameter(Tensor(np.zeros(shape, np.float32)), f"cache_{kind}{i}", requires_grad=False)
            for i in range(c.num_layers))
        self.keys, self.values = buffers("k"), buffers("v")
        self.add_in_place = 4 * int(np.prod(shape)) >= ADD_IN_PLACE_BYTES

    def clear(self) -> None:
        """Zero every cache slot (a new generation starts: slots are then added into)."""
        for buffer in (*self.keys, *self.values):
            buffer.set_data(ops.zeros(buffer.shape, buffer.dtype))

    def heads(self, i: int, u, rotation, batch: int, length: int):
        """Unit-norm inputs (B·T, n+1) -> q, k, v (B, H, T, d), q and k rotated (RoPE)."""
        c = self.config
        p = _mm_t(u, self.w.qkv[i])
        if c.qkv_bias:
            p = p + self.w.qkv_bias[i]
        if rotation is not None:                          # (B·T·3, H, d) @ (B·T·3, d, d)
            p = _bmm(p.reshape(-1, c.num_heads, c.head_dim), rotation)
        if length == 1:       # moving a unit axis is a free reshape, not a Transpose kernel
            p = p.reshape(batch, 3, c.num_heads, 1, c.head_dim)
        else:
            p = p.reshape(batch, length, 3, c.num_heads, c.head_dim).transpose(0, 2, 3, 1, 4)
        return ops.unstack(p, 1)

    def attend(self, i: int, q, keys, values, bias, batch: int, length: int):
        """softmax(q·kᵀ + bias)·v (the scale is folded into q), merged and projected."""
        c = self.config
        out = _bmm(ops.softmax(_bmm_t(q, keys) + bias, -1), values)        # (B, H, T, d)
        if length > 1:
            out = out.transpose(0, 2, 1, 3)
        out = _mm_t(out.reshape(batch * length, c.hidden_size), self.w.o[i])
        return out + self.w.o_bias[i] if c.o_bias else out

    def _write_cache(self, buffer, where, new):
        """The new keys (or values) into their slots. ``ops.scatter_nd_update``'s CPU kernel
        copies the whole buffer to its output at every call; ``ops.scatter_nd_add`` works
        in place but has a fixed cost even for one slot (benchmarks/probe_cache_write.py;
        figures in benchmarks/RESULTS.md): the add for buffers of ``ADD_IN_PLACE_BYTES`` and
        more, into slots that are still zero (``clear()`` when a generation starts; every
        slot is written once after it)."""
        if self.add_in_place:
            return ops.scatter_nd_add(buffer, where, new)
        return ops.scatter_nd_update(buffer, where, new)

    def construct(self, token, bias, rotation, where):
        batch, length = token.shape
        h = ops.gather(self.w.lm.model.embed_tokens.weight, token.reshape(-1), 0)
        h = ops.concat((h.astype(ms.float32),
                        ops.full((batch * length, 1), self.w.constant, dtype=ms.float32)), 1)
        for i in range(self.config.num_layers):
            q, k, v = self.heads(i, _unit_norm(h), rotation, batch, length)
            keys = self._write_cache(self.keys[i], where, k)
            values = self._write_cache(self.values[i], where, v)
            h = h + self.attend(i, q, keys, values, bias, batch, length)
            gate, up = ops.split(_mm_t(_unit_norm(h), self.w.gate_up[i]),
                                 self.config.intermediate_size, -1)
            h = h + _mm_t(ops.silu(gate) * up, self.w.down[i])
        if length > 1:              # a whole prompt (prefill): only its last column's logits
            h = h.reshape(batch, length, -1)[:, -1]
        logits = _mm_t(_unit_norm(h), self.w.lm_head)                       # (B, V)
        return ops.argmax(logits, -1).astype(ms.int32).reshape(-1, 1), logits


_ENGINES_PER_MODEL = 4          # compiled engines (and their cache buffers) kept per model


def decode_engine(model, batch: int, slots: int) -> DecodeEngine:
    """The model's engine for ``batch`` rows and ``slots`` cache slots, its folded weights
    just recomputed from the model's parameters (``DecodeWeights``, one compiled call).
    Engines are compiled on first use, then reused (the least recently used beyond
    ``_ENGINES_PER_MODEL`` is dropped); they share one ``DecodeWeights``, rebuilt (and the
    engines dropped) when the model's layers or Parameter objects are replaced. Kept in the
    model's ``__dict__`` (not child Cells: no extra parameters in checkpoints), so they go
    away with the model."""
    weights, layout = model.__dict__.get("_decode_weights"), _layout(model)
    if weights is None or weights.layout != layout:
        # first use, or layers/parameters replaced (inject_lora, merge_lora, a new Dense):
        # a graph compiled for the old layout would silently keep computing the old model
        weights = model.__dict__["_decode_weights"] = DecodeWeights(model)
        weights.layout = layout
        model.__dict__["_decode_engines"] = {}
    with execution_mode("graph"):
        weights()
    engines = model.__dict__.setdefault("_decode_engines", {})
    engine = engines.pop((batch, slots), None) or DecodeEngine(weights, batch, slots)
    engines[(batch, slots)] = engine                     # most recently used last
    while len(engines) > _ENGINES_PER_MODEL:
        engines.pop(next(iter(engines)))
    return engine


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


def rotation_matrices(cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE as matrices: x·cos + rotate_half(x)·sin == x @ R for a row vector x, with
    rotate_half([x1, x2]) = [-x2, x1] (Hugging Face's layout). cos, sin (..., d) -> R
    (..., d, d): R[j, j] = cos_j; R[j + d/2, j] = -sin_j and R[j, j + d/2] = sin_(j+d/2)."""
    d = cos.shape[-1]
    half, j = d // 2, np.arange(d // 2)
    r = np.zeros(cos.shape + (d,), np.float32)
    r[..., np.arange(d), np.arange(d)] = cos
    r[..., j + half, j] = -sin[..., :half]
    r[..., j, j + half] = sin[..., half:]
    return r


class StepInputs:
    """The host-side inputs of the engine calls of one batch, built with the model's own
    ``attention_bias`` and rotary embedding: a query in slot j attends to the real tokens
    in slots <= j. One decode step's inputs come from a ``block`` of steps built in one
    NumPy call; ``span`` builds those of several consecutive slots at once (a prefill)."""

    def __init__(self, model, mask: np.ndarray, slots: int, block: int = 32):
        self.body, self.mask, self.slots, self.block = model.model, mask, slots, block
        self.start = None

    def _build(self, start: int, stop: int):
        """bias (B, H|1, T, slots) and rotation (B, T, 3, d, d) (or None) of slots
        start..stop-1 (the third axis: q, k rotated by the token's angles, v unrotated)."""
        part = attention_bias(stop - start, stop, self.mask[:, :stop], self.body.slopes).asnumpy()
        bias = np.full(part.shape[:3] + (self.slots,), MASK_VALUE, np.float32)
        bias[..., :stop] = part                                # empty slots masked
        if self.body.slopes is not None:
            return bias, None
        positions = positions_from_mask(self.mask)[:, start:stop]
        # construct() on NumPy positions is NumPy code: calling the Cell inside a GRAPH
        # block would compile a graph with the positions baked in, once per block
        cos, sin = (t.asnumpy()[:, 0] for t in self.body.rotary.construct(positions))
        rotation = rotation_matrices(cos, sin)[:, :, None].repeat(3, 2)       # (B, T, 3, d, d)
        rotation[:, :, 2] = np.eye(cos.shape[-1], dtype=np.float32)
        return bias, rotation

    def __call__(self, j: int):
        """(bias, rotation, where) Tensors of the step whose token goes into slot ``j``."""
        if self.start is None or not self.start <= j < self.start + self.block:
            self.start = j
            self.bias, self.rotation = self._build(j, min(j + self.block, self.mask.shape[1]))
        i = j - self.start
        return Tensor(self.bias[:, :, i:i + 1]), self._flat(self.rotation, i, i + 1), \
            Tensor(self.where(j, j + 1))

    def span(self, start: int, stop: int):
        """(bias, rotation, where) Tensors of one call that writes slots start..stop-1."""
        bias, rotation = self._build(start, stop)
        return Tensor(bias), self._flat(rotation, 0, stop - start), Tensor(self.where(start, stop))

    @staticmethod
    def _flat(rotation, start: int, stop: int):
        if rotation is None:
            return None
        part = rotation[:, start:stop]
        return Tensor(np.ascontiguousarray(part).reshape((-1,) + part.shape[-2:]))

    def where(self, start: int, stop: int) -> np.ndarray:
        """(B, H, T, 3) [row, head, slot] indices: where the keys/values of slots
        start..stop-1 go."""
        b, h, t = self.mask.shape[0], self.body.config.num_heads, stop - start
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
                     width: int | None = None) -> DecodeState:
    """``prefill`` with the compiled engine, into a cache of ``slots`` fixed slots. The
    prompts are left-padded to ``width`` columns (default: the longest prompt; a pad's key
    is masked for everyone). From ``PREFILL_MIN`` columns on they go through the engine in
    ONE call (a graph compiled per width), shorter ones one column per call (the decode
    step's graph). The engine and its cache are shared by every state of the same batch
    size and slots: continue one at a time."""
    ids, mask = left_pad(prompts_ids, pad_id)
    if width is not None and width > ids.shape[1]:
        grow = width - ids.shape[1]
        ids, mask = np.pad(ids, ((0, 0), (grow, 0)), constant_values=pad_id), np.pad(mask, ((0, 0), (grow, 0)))
    if ids.shape[1] > slots:
        raise ValueError(f"A prompt of {ids.shape[1]} tokens does not fit in {slots} slots.")
    engine = decode_engine(model, len(ids), slots)
    engine.clear()                   # what an earlier generation left in the slots goes
    inputs = StepInputs(model, mask, slots)
    with execution_mode("graph"):
        if ids.shape[1] >= PREFILL_MIN:
            _, logits = engine(Tensor(ids), *inputs.span(0, ids.shape[1]))
        else:
            for j in range(ids.shape[1]):
                _, logits = engine(Tensor(ids[:, j:j + 1]), *inputs(j))
    return DecodeState(ids, mask, logits.asnumpy(), _engine_cache(engine),
                       list(range(len(ids))), compiled=True)


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
    inputs = StepInputs(model, state.attention_mask, slots, block=1)(width - 1)
    with execution_mode(mode):
        _, logits = state.cache.engine(Tensor(np.asarray(tokens, np.int32)), *inputs)
    return logits.asnumpy()


def greedy_decode(model, state: DecodeState, first, steps: int, eos=frozenset()) -> np.ndarray:
    """``steps`` greedy tokens per row after ``first`` (B,) with the compiled engine, the
    choice made on the device (argmax) and fed straight into the next step: the host only
    builds the step inputs and reads the chosen ids (to stop when every row has hit EOS).
    Returns (B, <= steps + 1) ids: ``first`` and the new ones (``state.logits`` is left as
    it was: the logits never leave the device)."""
    engine, width = state.cache.engine, state.attention_mask.shape[1]
    total = width + steps
    if total > state.cache.seq_len:
        raise ValueError(f"The reserved cache ({state.cache.seq_len} slots) is too short for "
                         f"{steps} more tokens; reserve more slots.")
    mask = np.ones((state.batch_size, total), np.int32)
    mask[:, :width] = state.attention_mask
    inputs = StepInputs(model, mask, state.cache.seq_len)
    chosen = [np.asarray(first, np.int32).reshape(-1, 1)]
    done = np.isin(chosen[0][:, 0], list(eos))
    token = Tensor(chosen[0])
    with execution_mode("graph"):
        for j in range(width, total):
            token, _ = engine(token, *inputs(j))
            chosen.append(token.asnumpy())
            done |= np.isin(chosen[-1][:, 0], list(eos))
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
             use_cache: bool = True) -> list[list[int]]:
    """Continue every prompt by up to ``max_new_tokens`` tokens; return the NEW ids per
    prompt. A sequence stops after it emits ``eos_id`` (an int or a list of ids; the EOS
    token is the last id returned). ``do_sample=False`` is greedy decoding. With sampling,
    prompt i draws from ``numpy.random.default_rng(seed + i)``: reproducible and independent
    of the other rows."""
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
        width = prefill_width(longest, max_new_tokens, limit)
        state = compiled_prefill(model, prompts_ids, cache_bucket(width + max_new_tokens, limit),
                                 pad_id, width)
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
