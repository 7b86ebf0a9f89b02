"""Building blocks of the course's decoder-only language models (Baichuan, InternLM).

One concept per Cell, nanoGPT-style:

* ``RMSNorm``            — x / rms(x) * weight (no mean subtraction, no bias)
* ``SwiGLU``             — down(silu(gate(x)) * up(x)), the LLaMA-family MLP
* ``RotaryEmbedding``    — RoPE, Hugging Face Llama ``rotate_half`` convention
* ``alibi_slopes``       — ALiBi's per-head slopes, Baichuan's exact ``_get_interleave`` rule
* ``attention_bias``     — causal mask + padding mask (+ ALiBi) as one additive tensor
* ``attention_weights``  — softmax(q·kᵀ·scale + bias) over the keys, in float32
* ``Attention``          — multi-head attention, fused ``W_pack`` [Q|K|V] or separate q/k/v
* ``KVCache``            — keys/values of past tokens for incremental decoding
* ``DecoderLayer``       — pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))
* ``DecoderModel``/``CausalLM`` — embeddings -> N layers -> final norm -> lm_head

Parameter names are exactly the Hugging Face ones (``model.layers.0.self_attn.W_pack.weight``,
``lm_head.weight``...), so checkpoints map one to one (see ``course_lib.hf_weights``).

Conventions: ``input_ids`` int32 (B, T); ``attention_mask`` (B, S) with 1 = real token,
0 = padding, covering *all* tokens seen so far (past + current, S = past + T); logits
float32 (B, T, V). The mask is read on the host: a Tensor mask is converted to NumPy once,
where it enters (``host_mask``), and the bias and positions are built from it with NumPy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import Normal, initializer

from . import validate

# Added to forbidden attention scores: exp() of it underflows to exactly 0 in float32, and
# it survives a cast to float16 (minimum -65504) — mixed precision casts the bias at Cell
# boundaries, and -inf there would turn fully masked (padding) rows into NaN.
MASK_VALUE = -1e4
POSITION_SCHEMES = ("alibi", "rope")


# --------------------------------------------------------------------------------------
# Configuration shared by every decoder-only model of the course
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecoderConfig:
    """Everything that fixes the architecture (and therefore every parameter shape)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int          # SwiGLU inner width (FFN)
    max_seq_len: int
    position: str = "alibi"         # "alibi" (Baichuan-13B) or "rope" (Baichuan-7B, InternLM)
    rope_base: float = 10000.0
    rms_norm_eps: float = 1e-6
    fused_qkv: bool = True          # Baichuan's W_pack; False = separate q_proj/k_proj/v_proj
    qkv_bias: bool = False          # InternLM-7B, Qwen2: True
    o_bias: bool = False            # InternLM-7B: True (Qwen2: False)
    init_std: float = 0.02
    name: str = "custom"
    # --- what the newer families add (defaults = the first-generation models above) ----
    num_kv_heads: int | None = None  # GQA: heads sharing one K/V head in groups (None = MHA)
    head_size: int | None = None     # an explicit head_dim (Qwen3: 128 for hidden 1024, 16 heads)
    qk_norm: bool = False            # Qwen3: RMSNorm over each q and k head before RoPE
    grouped_qkv: bool = False        # InternLM2's wqkv: per kv group [q heads of the group | k | v]
    tie_embeddings: bool = False     # small Qwens: the output head IS the embedding table
    norm_head: bool = False          # Baichuan2: logits against L2-normalised lm_head rows
    rope_scaling: tuple = ()         # ((key, value), ...) of config.json's rope_scaling

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                  "max_seq_len"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{f} must be a positive int, got {v!r}")
        if self.head_size is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads "
                             f"{self.num_heads}: every head needs the same width (or give "
                             "head_size explicitly, as Qwen3's head_dim).")
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads "
                             f"{self.kv_heads}: GQA shares each K/V head with an equal group "
                             "of query heads.")
        if self.grouped_qkv and not self.fused_qkv:
            raise ValueError("grouped_qkv (InternLM2's wqkv) is a fused projection: set "
                             "fused_qkv=True too.")
        if self.tie_embeddings and self.norm_head:
            raise ValueError("tie_embeddings and norm_head exclude each other: a tied head is "
                             "the embedding table, a NormHead has its own normalised rows.")
        rope_scaling_factors(self.rope_scaling)       # an unknown kind is refused here
        if self.position not in POSITION_SCHEMES:
            raise ValueError(f"Unknown position scheme {self.position!r}; use one of "
                             f"{POSITION_SCHEMES}.")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of features: head_dim {self.head_dim} must be even.")
        validate.check_decoder_config(self)

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_size // self.num_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``num_kv_heads`` (GQA/MQA), else one per query head (MHA)."""
        return self.num_kv_heads or self.num_heads

    @property
    def qkv_sizes(self) -> tuple[int, int, int]:
        """Output widths of the q, k and v projections."""
        kv = self.kv_heads * self.head_dim
        return self.num_heads * self.head_dim, kv, kv

    @property
    def qkv_name(self) -> str:
        """The fused projection's name in the checkpoint (Baichuan ``W_pack``, InternLM2 ``wqkv``)."""
        return "wqkv" if self.grouped_qkv else "W_pack"

    def replace(self, **changes) -> "DecoderConfig":
        """A copy with some fields changed (the config itself is immutable)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"Unknown config field(s) {unknown}; known fields: {sorted(known)}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # --- counting without building anything ------------------------------------------
    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's Hugging Face name and shape: a shape-only walk of the model."""
        h, f, V = self.hidden_size, self.intermediate_size, self.vocab_size
        q, kv, _ = self.qkv_sizes
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, h)}
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            projections = ({self.qkv_name: q + 2 * kv} if self.fused_qkv
                           else {"q_proj": q, "k_proj": kv, "v_proj": kv})
            for proj, width in projections.items():
                shapes[p + f"self_attn.{proj}.weight"] = (width, h)
                if self.qkv_bias:
                    shapes[p + f"self_attn.{proj}.bias"] = (width,)
            shapes[p + "self_attn.o_proj.weight"] = (h, q)
            if self.o_bias:
                shapes[p + "self_attn.o_proj.bias"] = (h,)
            if self.qk_norm:
                shapes[p + "self_attn.q_norm.weight"] = (self.head_dim,)
                shapes[p + "self_attn.k_norm.weight"] = (self.head_dim,)
            shapes[p + "mlp.gate_proj.weight"] = (f, h)
            shapes[p + "mlp.up_proj.weight"] = (f, h)
            shapes[p + "mlp.down_proj.weight"] = (h, f)
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes["model.norm.weight"] = (h,)
        if not self.tie_embeddings:
            shapes["lm_head.weight"] = (V, h)
        return shapes

    def num_parameters(self) -> int:
        """Closed form: V·h per embedding table (one when tied) + h (final norm)
        + L·(attention h·(q + 2kv) + q·h, 3hf SwiGLU, 2h norms, biases, QK-norms);
        for MHA (q = kv = h) the attention is the familiar 4h²."""
        h, f, V, L = self.hidden_size, self.intermediate_size, self.vocab_size, self.num_layers
        q, kv, _ = self.qkv_sizes
        biases = (q + 2 * kv) * self.qkv_bias + h * self.o_bias + 2 * self.head_dim * self.qk_norm
        tables = 1 if self.tie_embeddings else 2
        return tables * V * h + h + L * (h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h + biases)


# --------------------------------------------------------------------------------------
# Small Cells
# --------------------------------------------------------------------------------------
def _dense(in_features: int, out_features: int, bias: bool, std: float) -> nn.Dense:
    # Hugging Face init (normal(0, std) weights, zero bias). Created through `initializer`,
    # so `mindspore.nn.utils.no_init_parameters()` can defer the allocation.
    return nn.Dense(in_features, out_features, weight_init=Normal(std), bias_init="zeros",
                    has_bias=bias)


class TokenEmbedding(nn.Cell):
    """Token id -> vector. The table is called ``weight`` (the Hugging Face name)."""
    __call__ = validate.checked_token_call(nn.Cell.__call__)   # clear errors for bad ids

    def __init__(self, vocab_size: int, hidden_size: int, std: float = 0.02):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = Parameter(initializer(Normal(std), (vocab_size, hidden_size), ms.float32),
                                name="weight")

    def construct(self, input_ids):
        input_ids = validate.guard_token_ids(input_ids, self.vocab_size)
        return ops.gather(self.weight, input_ids, 0)


class Float32Cell(nn.Cell):
    """A Cell that mixed precision leaves in float32, as MindSpore's O2 does for its own
    norm layers (``nn.LayerNorm`` is on the O2 black list).

    ``to_float(float16)`` (what ``auto_mixed_precision`` O2/O3 calls on the whole network)
    reaches every sub-Cell through ``add_flags``; in PyNative it then casts the inputs of
    EVERY operator inside the Cell to float16 — explicit ``astype(float32)`` included. A
    normalisation computed in float16 overflows in backward (d rsqrt(u)/du = -u^-1.5/2
    exceeds 65504 for a small variance u) and the gradients become NaN. So this Cell turns
    a float16/bfloat16 request into float32."""

    def add_flags(self, **flags):
        if flags.get("fp16") or flags.get("bf16"):
            flags = dict(flags, fp16=False, bf16=False, fp32=True)
        return super().add_flags(**flags)


class RMSNorm(Float32Cell):
    """Root-mean-square norm: x / sqrt(mean(x²) + eps) * weight. Always computed in float32
    (also under float16 mixed precision), like the reference Baichuan/Llama code; the output
    keeps the input's dtype."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(initializer("ones", (hidden_size,), ms.float32), name="weight")

    def construct(self, x):
        dtype = x.dtype
        if dtype != ms.float32:          # casts only under mixed precision (each op costs)
            x = x.astype(ms.float32)
        variance = (x * x).mean(-1, keep_dims=True)
        x = x * ops.rsqrt(variance + self.eps)
        weight = self.weight if self.weight.dtype == ms.float32 else self.weight.astype(ms.float32)
        x = weight * x
        return x if dtype == ms.float32 else x.astype(dtype)


class SwiGLU(nn.Cell):
    """The gated MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden_size: int, intermediate_size: int, *, bias: bool = False,
                 std: float = 0.02):
        super().__init__()
        self.gate_proj = _dense(hidden_size, intermediate_size, bias, std)
        self.up_proj = _dense(hidden_size, intermediate_size, bias, std)
        self.down_proj = _dense(intermediate_size, hidden_size, bias, std)

    def construct(self, x):
        return self.down_proj(ops.silu(self.gate_proj(x)) * self.up_proj(x))


def swiglu_width(hidden_size: int, multiple_of: int = 32) -> int:
    """The usual SwiGLU width for a hidden size: 2/3 of 4*hidden (three matrices cost what
    the classic 4x MLP's two do), rounded up to a multiple of ``multiple_of``."""
    return -(-(8 * hidden_size // 3) // multiple_of) * multiple_of


# --------------------------------------------------------------------------------------
# Positions: RoPE and ALiBi
# --------------------------------------------------------------------------------------
def rope_inverse_frequencies(head_dim: int, base: float = 10000.0, scaling=()) -> np.ndarray:
    """θ_i = base^(-2i/d) for i = 0 .. d/2-1 (float32, as in Hugging Face Llama), adjusted
    by ``scaling`` (config.json's ``rope_scaling``, see ``rope_scaling_factors``)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim
    inv_freq = (1.0 / (np.float32(base) ** exponents)).astype(np.float32)
    return (inv_freq * rope_scaling_factors(scaling, inv_freq)).astype(np.float32)


ROPE_SCALINGS = ("default", "linear", "dynamic", "llama3")


def rope_scaling_factors(scaling, inv_freq: np.ndarray | None = None):
    """What ``rope_scaling`` does to each inverse frequency (1 where it does nothing).

    * none / ``default``: nothing.
    * ``linear`` (position interpolation): every θ_i divided by ``factor``.
    * ``dynamic`` (NTK, InternLM2.5): the base grows only once a sequence is longer than
      ``max_position_embeddings`` — which is the course model's ``max_seq_len``, so within
      what the model accepts it changes nothing (and nothing longer is accepted).
    * ``llama3`` (Llama-3.1/3.2): long wavelengths (> original context / low_freq_factor)
      divided by ``factor``, short ones (< original context / high_freq_factor) kept, a
      linear blend between (Hugging Face ``_compute_llama3_parameters``).
    Other kinds (``yarn``, ``longrope``...) are refused with the reason. ``inv_freq=None``
    only validates."""
    d = dict(scaling or ())
    kind = d.get("rope_type", d.get("type", "default"))
    if kind not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling type {kind!r} is not implemented by the course's "
                         f"RotaryEmbedding (it knows {ROPE_SCALINGS}); drop rope_scaling from "
                         "config.json to run within the original context length.")
    if inv_freq is None or kind in ("default", "dynamic"):
        return 1.0
    factor = float(d["factor"])
    if kind == "linear":
        return np.float32(1.0 / factor)
    low, high = float(d["low_freq_factor"]), float(d["high_freq_factor"])
    context = float(d["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = np.clip((context / wavelen - low) / (high - low), 0.0, 1.0)
    scale = (1 - smooth) / factor + smooth        # 1/factor (long) .. 1 (short wavelengths)
    return scale.astype(np.float32)


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] on the last axis (Hugging Face's layout: the two halves of the
    head are the pairs, not interleaved even/odd features).

    One ``Split`` kernel instead of two slices ``x[..., half:]``, ``x[..., :half]``: on CPU
    MindSpore's StridedSlice kernel has a fixed cost even for a (8, 8, 1, 32) tensor (measured
    by ``benchmarks/profile_decode.py``; figures in benchmarks/RESULTS.md), and every decode
    step rotates 2 tensors per layer."""
    x1, x2 = ops.split(x, x.shape[-1] // 2, -1)
    return ops.cat((-x2, x1), -1)


def apply_rotary(q, k, cos, sin):
    """Rotate queries and keys by their positions' angles: x·cos + rotate_half(x)·sin."""
    if cos.dtype != q.dtype:
        cos, sin = cos.astype(q.dtype), sin.astype(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class RotaryEmbedding(nn.Cell):
    """Positions (B, T), known on the host -> cos, sin of shape (B, 1, T, head_dim),
    broadcast over heads: constant tables built with NumPy (one transfer each)."""

    def __init__(self, head_dim: int, base: float = 10000.0, scaling=()):
        super().__init__()
        self.inv_freq = rope_inverse_frequencies(head_dim, base, scaling)

    def construct(self, positions):
        freqs = host_mask(positions).astype(np.float32)[..., None] * self.inv_freq  # (B, T, d/2)
        angles = np.concatenate((freqs, freqs), -1)[:, None]                      # (B, 1, T, d)
        return Tensor(np.cos(angles)), Tensor(np.sin(angles))


def alibi_slopes(num_heads: int) -> list[float]:
    """ALiBi head slopes with the exact rule of Baichuan-13B's ``_get_interleave``.

    For n a power of two the slopes are the geometric sequence start, start², ..., startⁿ
    with start = 2^(-8/n). Otherwise take the slopes for the closest power of two c < n and
    append every other slope of the 2c-head sequence (the odd powers) until n are there.
    """
    if not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")

    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_two(num_heads)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


def causal_allowed(query_len: int, key_len: int) -> np.ndarray:
    """Bool NumPy (T, S): query i (the token at slot S-T+i) may see key j iff j <= S-T+i."""
    past = key_len - query_len
    return np.arange(key_len)[None, :] <= np.arange(query_len)[:, None] + past


def host_mask(mask) -> np.ndarray:
    """A mask (or positions) as a NumPy array: a Tensor is read to the host once, here."""
    return mask.asnumpy() if isinstance(mask, Tensor) else np.asarray(mask)


def positions_from_mask(attention_mask) -> np.ndarray:
    """Position of each token counting only real tokens: left padding does not shift
    the positions (pads get position 0, they are masked anyway)."""
    mask = host_mask(attention_mask)
    return np.maximum(np.cumsum(mask.astype(np.int64), -1) - 1, 0)


def attention_bias(query_len: int, key_len: int, attention_mask=None, slopes=None):
    """One additive float32 bias (B|1, H|1, T, S) for the attention scores:
    0 where attention is allowed, MASK_VALUE (-1e4) where it is not (future tokens,
    padding), plus, with ALiBi ``slopes``, ``slope_h * (pos_key - pos_query)`` (<= 0:
    farther = more penalised).

    Baichuan-13B's code adds ``slope_h * pos_key``; the two differ by a constant per query
    row, which softmax ignores, so the attention weights are the same.

    Built with NumPy on the host (a Tensor mask is read once) and returned as ONE tensor:
    in GRAPH mode a compile-time constant; in PyNative one transfer instead of a dozen
    small device ops.
    """
    allowed = causal_allowed(query_len, key_len)[None, None]                   # (1, 1, T, S)
    if attention_mask is None:
        positions = np.arange(key_len)[None]                                    # (1, S)
    else:
        mask = host_mask(attention_mask)
        allowed = allowed & mask.astype(bool)[:, None, None, :]
        positions = positions_from_mask(mask)                                   # (B, S)
    bias = np.where(allowed, 0.0, MASK_VALUE).astype(np.float32)
    if slopes is not None:
        past = key_len - query_len
        distance = positions[:, None, None, :] - positions[:, past:][:, None, :, None]
        bias = bias + np.asarray(slopes, np.float32)[None, :, None, None] * distance
    return Tensor(bias.astype(np.float32))


_matmul_transpose_b = ops.BatchMatMul(transpose_b=True)   # q @ kᵀ without materialising kᵀ
_batch_matmul = ops.BatchMatMul()   # probs @ v: its gradient uses transpose flags, where
                                    # ops.matmul's adds Transpose kernels (slower fwd+bwd:
                                    # benchmarks/RESULTS.md, train step)


def _softmax_float32(scores, bias, scale: float):
    if scores.dtype != ms.float32:
        scores = scores.astype(ms.float32)
    return ops.softmax(scores * scale + bias, -1)


def attention_weights(q, k, bias, scale: float):
    """softmax(q·kᵀ·scale + bias) over the keys, in float32. q (B,H,T,d), k (B,H,S,d)."""
    return _softmax_float32(_matmul_transpose_b(q, k), bias, scale)


class AttentionWeights(Float32Cell):
    """The float32 half of :func:`attention_weights` as a Cell that mixed precision leaves
    in float32: ``construct(scores, bias)`` takes q·kᵀ (which may come from a float16
    matmul, as in the reference code) and returns softmax(scores·scale + bias), with
    ``bias`` holding MASK_VALUE = -1e4 for masked keys (plus ALiBi)."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def construct(self, scores, bias):
        return _softmax_float32(scores, bias, self.scale)


# --------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------
class KVCache:
    """Keys and values of every token processed so far, per layer, shape (B, H, S, d).

    Decoding token t then costs one row of attention instead of recomputing all t rows.
    Everything that changes the cache is one of its operations: ``append`` (a growing
    cache, PyNative), ``pad_left`` / ``concat`` / ``select_rows`` / ``drop_left`` (rows
    joining and leaving a batch: dynamic batching), ``reserve`` (fixed-length
    buffers; the compiled decode step, ``engine.DecodeEngine``, writes them in place)."""

    def __init__(self, num_layers: int):
        self.keys: list = [None] * num_layers
        self.values: list = [None] * num_layers

    @property
    def seq_len(self) -> int:
        return 0 if self.keys[0] is None else int(self.keys[0].shape[2])

    @property
    def batch_size(self) -> int:
        return 0 if self.keys[0] is None else int(self.keys[0].shape[0])

    def append(self, layer: int, k, v):
        """Append this step's keys/values for ``layer``; return all of them."""
        if self.keys[layer] is not None:
            k = ops.cat((self.keys[layer], k), 2)
            v = ops.cat((self.values[layer], v), 2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def _map(self, fn) -> "KVCache":
        self.keys = [None if t is None else fn(t) for t in self.keys]
        self.values = [None if t is None else fn(t) for t in self.values]
        return self

    def select_rows(self, rows) -> "KVCache":
        """Keep only batch rows ``rows`` (in that order), e.g. after some sequences ended."""
        idx = Tensor(np.asarray(rows, dtype=np.int32))
        return self._map(lambda t: ops.gather(t, idx, 0))

    def drop_left(self, n: int) -> "KVCache":
        """Forget the first ``n`` slots (columns that are padding in every row)."""
        return self._map(lambda t: t[:, :, n:]) if n else self

    def pad_left(self, n: int) -> "KVCache":
        """``n`` empty slots in front (the attention mask must hide them)."""
        def widen(t):
            b, h, _, d = t.shape
            return ops.cat((ops.zeros((b, h, n, d), t.dtype), t), 2)
        return self._map(widen) if n else self

    def concat(self, other: "KVCache") -> "KVCache":
        """Stack ``other``'s rows under this cache's (both must have the same length)."""
        if other.seq_len != self.seq_len:
            raise ValueError(f"Cannot stack caches of {self.seq_len} and {other.seq_len} slots; "
                             "pad_left the shorter one first.")
        self.keys = [ops.cat((a, b), 0) for a, b in zip(self.keys, other.keys)]
        self.values = [ops.cat((a, b), 0) for a, b in zip(self.values, other.values)]
        return self

    def reserve(self, length: int) -> "KVCache":
        """Empty slots on the right up to ``length`` (fixed-size buffers)."""
        def grow(t):
            b, h, s, d = t.shape
            return ops.cat((t, ops.zeros((b, h, length - s, d), t.dtype)), 2)
        return self._map(grow) if length > self.seq_len else self

    def nbytes(self) -> int:
        return sum(int(t.nbytes) for t in self.keys + self.values if t is not None)


# --------------------------------------------------------------------------------------
# Attention, decoder layer, model
# --------------------------------------------------------------------------------------
class Attention(nn.Cell):
    """Multi-head self-attention; with ``num_kv_heads`` < ``num_heads``, grouped-query
    attention (GQA: query heads ``g·G .. g·G+G-1`` share K/V head ``g``; MQA when 1).

    The q/k/v projection is one of three layouts (the names are the checkpoints'):
    separate ``q_proj``/``k_proj``/``v_proj`` (Llama, Qwen, InternLM-7B); Baichuan's fused
    ``W_pack`` whose output is the blocks [Q | K | V]; InternLM2's fused ``wqkv`` whose
    output is one block per kv group, [the group's G query heads | its k head | its v head].
    ``qk_norm`` (Qwen3) RMS-normalises every q and k head before RoPE.
    Positions enter either through ``cos``/``sin`` (RoPE, rotating q and k) or through the
    ALiBi term already inside ``bias`` — the Cell does not need to know which.
    """

    def __init__(self, hidden_size: int, num_heads: int, *, fused_qkv: bool = True,
                 qkv_bias: bool = False, o_bias: bool = False, std: float = 0.02,
                 num_kv_heads: int | None = None, head_dim: int | None = None,
                 grouped_qkv: bool = False, qk_norm: bool = False, eps: float = 1e-6):
        super().__init__()
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.groups = num_heads // self.num_kv_heads
        self.head_dim = head_dim or hidden_size // num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.fused_qkv, self.grouped_qkv, self.qk_norm = fused_qkv, grouped_qkv, qk_norm
        q, kv = num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.sizes = [q, kv, kv]
        if grouped_qkv:
            self.wqkv = _dense(hidden_size, q + 2 * kv, qkv_bias, std)
        elif fused_qkv:
            self.W_pack = _dense(hidden_size, q + 2 * kv, qkv_bias, std)
        else:
            self.q_proj = _dense(hidden_size, q, qkv_bias, std)
            self.k_proj = _dense(hidden_size, kv, qkv_bias, std)
            self.v_proj = _dense(hidden_size, kv, qkv_bias, std)
        self.o_proj = _dense(q, hidden_size, o_bias, std)
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps)
            self.k_norm = RMSNorm(self.head_dim, eps)
        self.attention_weights = AttentionWeights(self.scale)

    def project_qkv(self, x):
        """x (B, T, hidden) -> q (B, T, H·d), k and v (B, T, H_kv·d)."""
        if self.grouped_qkv:       # (B, T, H_kv, G + 2, d): per group G q heads, k, v
            batch, length, _ = x.shape
            qkv = self.wqkv(x).reshape(batch, length, self.num_kv_heads, self.groups + 2,
                                       self.head_dim)
            q, k, v = ops.split(qkv, [self.groups, 1, 1], 3)
            return tuple(t.reshape(batch, length, -1) for t in (q, k, v))
        if self.fused_qkv:
            return ops.split(self.W_pack(x), self.sizes, -1)         # [Q | K | V]
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def heads(self, x, cos=None, sin=None):
        """x (B, T, hidden) -> q (B, H, T, d), k, v (B, H_kv, T, d); q and k normalised
        (QK-norm) and rotated (RoPE) when the model uses them."""
        batch, length, _ = x.shape
        q, k, v = self.project_qkv(x)
        q = q.reshape(batch, length, self.num_heads, self.head_dim)
        k, v = (t.reshape(batch, length, self.num_kv_heads, self.head_dim) for t in (k, v))
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if length == 1:       # one new token (decoding): moving a unit axis is a free reshape
            q, k, v = (t.reshape(batch, t.shape[2], 1, self.head_dim) for t in (q, k, v))
        else:
            q, k, v = (ops.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
        if cos is not None:
            q, k = apply_rotary(q, k, cos, sin)
        return q, k, v

    def attend(self, q, k, v, bias):
        """softmax(q·kᵀ·scale + bias)·v for every head, merged and projected: (B, T, hidden).
        GQA without copying K/V: the G query heads of a group are stacked along the query
        axis, (B, H, T, d) -> (B, H_kv, G·T, d), one matmul per kv head."""
        batch, _, length, _ = q.shape
        if self.groups > 1:
            q = q.reshape(batch, self.num_kv_heads, self.groups * length, self.head_dim)
        scores = _matmul_transpose_b(q, k)                             # (B, H_kv, G·T, S)
        if self.groups > 1:
            scores = scores.reshape(batch, self.num_kv_heads, self.groups, length, -1)
            b, h = bias.shape[0], bias.shape[1]
            bias = bias.reshape(b, 1, 1, length, -1) if h == 1 else \
                bias.reshape(b, self.num_kv_heads, self.groups, length, -1)
        probs = self.attention_weights(scores, bias)
        if self.groups > 1:
            probs = probs.reshape(batch, self.num_kv_heads, self.groups * length, -1)
        if v.dtype != ms.float32:
            probs = probs.astype(v.dtype)
        out = _batch_matmul(probs, v).reshape(batch, self.num_heads, length, self.head_dim)
        if length > 1:
            out = ops.transpose(out, (0, 2, 1, 3))
        return self.o_proj(out.reshape(batch, length, self.num_heads * self.head_dim))

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        q, k, v = self.heads(x, cos, sin)                             # (B, H|H_kv, T, d)
        if cache is not None:
            k, v = cache.append(layer_idx, k, v)                      # (B, H_kv, S, d)
        return self.attend(q, k, v, bias)


class DecoderLayer(nn.Cell):
    """Pre-norm transformer block: x + attn(norm(x)); then x + mlp(norm(x)).

    Split in two at the KV cache: ``heads`` (norm, q/k/v, RoPE) and ``finish`` (attention
    over all keys, the MLP), so that the compiled decode engine (``engine.DecodeEngine``)
    runs these same two methods with its fixed-size cache in between."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        c = config
        self.self_attn = Attention(c.hidden_size, c.num_heads, fused_qkv=c.fused_qkv,
                                   qkv_bias=c.qkv_bias, o_bias=c.o_bias, std=c.init_std,
                                   num_kv_heads=c.num_kv_heads, head_dim=c.head_size,
                                   grouped_qkv=c.grouped_qkv, qk_norm=c.qk_norm,
                                   eps=c.rms_norm_eps)
        self.mlp = SwiGLU(c.hidden_size, c.intermediate_size, bias=False, std=c.init_std)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def heads(self, x, cos=None, sin=None):
        return self.self_attn.heads(self.input_layernorm(x), cos, sin)

    def finish(self, x, q, k, v, bias):
        x = x + self.self_attn.attend(q, k, v, bias)
        return x + self.mlp(self.post_attention_layernorm(x))

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        q, k, v = self.heads(x, cos, sin)
        if cache is not None:
            k, v = cache.append(layer_idx, k, v)
        return self.finish(x, q, k, v, bias)


class DecoderModel(nn.Cell):
    """Token embeddings -> ``num_layers`` decoder layers -> final RMSNorm (hidden states)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = TokenEmbedding(config.vocab_size, config.hidden_size, config.init_std)
        self.layers = nn.CellList([DecoderLayer(config) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.position == "alibi":
            self.slopes = np.asarray(alibi_slopes(config.num_heads), np.float32)
        else:
            self.slopes = None
            self.rotary = RotaryEmbedding(config.head_dim, config.rope_base, config.rope_scaling)

    def construct(self, input_ids, attention_mask=None, cache=None):
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be 2-D (batch, seq_len), got shape {input_ids.shape}. "
                             "Wrap a single sequence as [ids].")
        batch, length = input_ids.shape
        past = 0 if cache is None else cache.seq_len
        total = past + length
        if total > self.config.max_seq_len:
            raise ValueError(f"{total} tokens exceed max_seq_len={self.config.max_seq_len}; "
                             "shorten the input or build the model with a larger max_seq_len.")
        if attention_mask is not None:
            attention_mask = host_mask(attention_mask)          # read once, used twice
            if attention_mask.shape != (batch, total):
                raise ValueError(f"attention_mask must have shape (batch, past + seq_len) = "
                                 f"({batch}, {total}), got {attention_mask.shape}.")
        bias = attention_bias(length, total, attention_mask, self.slopes)
        cos, sin = None, None
        if self.slopes is None:
            if attention_mask is None:
                positions = np.arange(past, total)[None]
            else:
                positions = positions_from_mask(attention_mask)[:, past:]
            cos, sin = self.rotary(positions)
        h = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            h = layer(h, bias, cos, sin, cache, i)
        return self.norm(h)


class NormHead(nn.Cell):
    """Baichuan2's output head: logits against the L2-normalised rows of ``weight``
    (``modeling_baichuan.NormHead``: ``F.linear(h, F.normalize(weight))``), computed as
    (h·Wᵀ) / |W_row| — the same numbers without a normalised copy of the (V, h) table.
    Normalising in every call keeps training and inference equal (Baichuan2 normalises
    once, in place, in eval); the checkpoint stores the raw rows."""

    def __init__(self, hidden_size: int, vocab_size: int, std: float = 0.02):
        super().__init__()
        self.weight = Parameter(initializer(Normal(std), (vocab_size, hidden_size), ms.float32),
                                name="weight")
        self.row_norm = ops.LpNorm(axis=1, p=2)

    def construct(self, h):
        norms = ops.maximum(self.row_norm(self.weight).astype(ms.float32), 1e-12)  # F.normalize's eps
        return linear_rows(h, self.weight).astype(ms.float32) / norms


_matmul_t = ops.MatMul(transpose_b=True)


def linear_rows(h, weight):
    """h (..., n) against the rows of ``weight`` (V, n): h·weightᵀ without a transposed copy."""
    if weight.dtype != h.dtype:
        weight = weight.astype(h.dtype)
    return _matmul_t(h.reshape(-1, h.shape[-1]), weight).reshape(h.shape[:-1] + (-1,))


class CausalLM(nn.Cell):
    """Decoder + output head: ``model(input_ids) -> logits`` float32 (B, T, V).

    The head is an untied ``lm_head`` (Baichuan, InternLM, Llama), the embedding table
    itself (``tie_embeddings``: small Qwens; no ``lm_head`` parameter) or a ``NormHead``
    (Baichuan2). ``model(input_ids, attention_mask=mask, cache=cache)`` continues from the
    tokens already in ``cache`` (see ``course_lib.generation``); ``last_only=True``
    computes the logits of the last position only (all that decoding needs).
    """

    config_class = DecoderConfig
    model_class = DecoderModel
    __call__ = validate.checked_token_call(nn.Cell.__call__)   # clear errors for bad ids

    def __init__(self, config: DecoderConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, "
                            f"got {type(config).__name__}.")
        self.config = config
        self.model = self.model_class(config)
        self.tied = config.tie_embeddings
        if config.norm_head:
            self.lm_head = NormHead(config.hidden_size, config.vocab_size, config.init_std)
        elif not self.tied:
            self.lm_head = _dense(config.hidden_size, config.vocab_size, bias=False,
                                  std=config.init_std)

    def new_cache(self) -> KVCache:
        return KVCache(self.config.num_layers)

    def head(self, h):
        """Final hidden states (B, T, hidden) -> logits float32 (B, T, V)."""
        if self.tied:
            return linear_rows(h, self.model.embed_tokens.weight).astype(ms.float32)
        return self.lm_head(h).astype(ms.float32)

    def construct(self, input_ids, attention_mask=None, cache=None, last_only=False):
        h = self.model(input_ids, attention_mask, cache)
        if last_only:
            h = h[:, -1:]
        return self.head(h)
