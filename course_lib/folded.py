"""The folded decode engine: ``generate(engine="folded")``, a declared alternative to the
default engine for float32 models, faster where MindSpore's per-kernel cost dominates.

``generation.DecodeEngine`` runs the model's own layers. On a CPU, a small model's decode
step spends more time between kernels than in them (benchmarks/RESULTS.md, "profile"), so
this engine computes the same function with about half the kernels, the way inference
engines fold weights:

* the residual stream gets one extra feature, the constant c = sqrt(n·eps); then
  RMSNorm(h)·g = sqrt(n)·g·u[:n] with u = h'/|h'| the unit vector of h' = [h, c]
  (|h'|² = Σh² + n·eps): ONE ``L2Normalize`` kernel per norm, √n·g folded into the next
  layer's weight (``_fold_norm``), the extra feature given zero weight;
* q, k, v in one matmul (q's rows pre-scaled by 1/sqrt(d); InternLM2's per-group
  ``wqkv`` rows reordered to [Q | K | V]; q's heads in G chunks of H_kv heads), gate and
  up in one;
* RoPE as one rotation matrix per token (``rotation_matrices``): the G + 2 chunks of
  H_kv heads (q's, k, v) rotated by one ``BatchMatMul`` (v's "rotation" the identity),
  then separated by one equal ``Split`` — no strided slices, 6-35 us each on this CPU;
* o_proj and down_proj with a zero row for the extra feature (``_extra_row``); the head
  (untied, tied to the embeddings, or Baichuan2's normalised rows) folded with the final
  norm; LoRA adapters added in (``_weight``).

The price is memory: the folded weights are a float32 COPY of the model, refolded from
the live parameters when a generation starts and they changed (``DecodeWeights.refresh``,
``Fingerprint``). That is why
``generate(engine="auto")`` uses this engine only for float32 models (the course's small
ones) and the layers' engine for half-precision checkpoints (``supports`` refuses
them). QK-norm (Qwen3) is not folded: such models always use the layers' engine. Equal to
the model's forward: tests/test_engines.py (one equivalence suite over both engines).
"""
from __future__ import annotations

import math

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from .generation import DecodeEngine
from .runtime import execution_mode

_mm = ops.MatMul()              # x @ W, the folded W stored (in, out): see DecodeWeights
_bmm = ops.BatchMatMul()
_bmm_t = ops.BatchMatMul(transpose_b=True)
_unit_norm = ops.L2Normalize(axis=-1, epsilon=1e-12)
_unit_rows = ops.L2Normalize(axis=-1, epsilon=1e-24)


def supports(model) -> str | None:
    """None if the folded engine can run ``model``, else the reason it cannot."""
    if model.config.qk_norm:
        return "QK-norm (Qwen3) normalises each head after the projection: nothing to fold"
    if model.model.embed_tokens.weight.dtype != ms.float32:
        return ("its weights are not float32: the folded weights are a float32 copy, which "
                "would double a half-precision model's memory")
    return None


def _weight(linear):
    """The (out, in) weight a linear layer applies, a LoRA adapter's B·A·alpha/r included."""
    w = linear.weight.astype(ms.float32)
    if hasattr(linear, "lora_A"):                     # lora.LoRADense, not merged
        w = w + ops.matmul(linear.lora_B, linear.lora_A).astype(ms.float32) * linear.scaling
    return w


def _fold_norm(w, gain, n: int):
    """W (out, n) of the layer after an RMSNorm with weight ``gain``, for inputs that are
    unit vectors of n + 1 features: W·diag(√n·gain), then a zero column for the extra one."""
    w = w * (gain.astype(ms.float32) * math.sqrt(n))
    return ops.concat((w, ops.zeros((w.shape[0], 1), ms.float32)), 1)


def _extra_row(w):
    """A zero output row: the layer adds nothing to the extra feature of the residual stream."""
    return ops.concat((w, ops.zeros((1,) + w.shape[1:], ms.float32)), 0)


def _qkv_rows(attn, w):
    """Rows of the q/k/v weight (or bias) as [Q | K | V], q's scaled by 1/sqrt(d) and its
    heads in "chunk" order: chunk g holds query head g of every kv group (heads kv·G + g),
    so that q, k and v come out of ONE equal ``Split`` (``FoldedEngine.heads``)."""
    q, kv, _ = attn.sizes
    if attn.grouped_qkv:       # InternLM2: per kv group [G q heads | k | v] -> [Q | K | V]
        g = w.reshape((attn.num_kv_heads, attn.groups + 2, attn.head_dim) + w.shape[1:])
        qs, ks, vs = ops.split(g, [attn.groups, 1, 1], 1)
        w = ops.concat([t.reshape((-1,) + w.shape[1:]) for t in (qs, ks, vs)], 0)
    heads = w[:q].reshape((attn.num_kv_heads, attn.groups, attn.head_dim) + w.shape[1:])
    perm = (1, 0) + tuple(range(2, heads.ndim))
    chunks = heads.transpose(perm).reshape((q,) + w.shape[1:])
    return ops.concat((chunks * attn.scale, w[q:]), 0)


def _qkv_parts(attn):
    if attn.grouped_qkv:
        return (attn.wqkv,)
    return (attn.W_pack,) if attn.fused_qkv else (attn.q_proj, attn.k_proj, attn.v_proj)


def _head_weight(lm):
    if lm.tied:
        return lm.model.embed_tokens.weight.astype(ms.float32)
    w = _weight(lm.lm_head)
    return _unit_rows(w) if lm.config.norm_head else w


class Fingerprint(ms.nn.Cell):
    """One compiled pass over the model's parameters that tells whether any changed: for a
    matrix W (out, in), rᵀ·W with a fixed random r (out,) — any change of W that does not
    vanish in float32 rounding changes some of these ``in`` numbers —, vectors as they are.
    It reads every parameter once and writes almost nothing: ~3 ms for the benchmark's 7M
    model against ~8-13 ms for refolding (benchmarks/RESULTS.md), so ``DecodeWeights.
    refresh`` refolds only when this changed (an optimizer's in-place step, ``set_data``,
    a checkpoint load, a LoRA adapter's update)."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.params = list(lm.get_parameters())
        rng = np.random.default_rng(0)
        self.probes = [Tensor(rng.standard_normal((1, p.shape[0])).astype(np.float32))
                       if len(p.shape) == 2 else None for p in self.params]

    def construct(self):
        seen = []
        for p, r in zip(self.params, self.probes):
            p = p.astype(ms.float32)
            seen.append(p.reshape(1, -1) if r is None else ops.matmul(r, p))
        return ops.concat(seen, 1)


class DecodeWeights(ms.nn.Cell):
    """The folded float32 weights of ``lm`` (see the module docstring); calling it (one
    compiled graph) recomputes them all from the model's LIVE parameters; ``refresh``
    does so only if they changed since the last time (``Fingerprint``). Each is stored
    (in, out), not as ``nn.Dense`` stores its weight: with 8 rows MindSpore 2.7's CPU
    MatMul with ``transpose_b`` took 1.2-1.4x as long for the layers' shapes and 1.8x for
    the 257 -> 8000 head (734 vs 415 us), with one row about as long (0.9-1.1x; kernel
    times in benchmarks/RESULTS.md), and the transpose is paid once per fold, not per token."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        c = lm.config
        n, f, layers = c.hidden_size, c.intermediate_size, c.num_layers
        width = sum(c.qkv_sizes)
        self.lm, self.n = lm, n
        self.constant = math.sqrt(n * c.rms_norm_eps)
        zeros = lambda shape, name: ms.ParameterTuple(                             # noqa: E731
            ms.Parameter(Tensor(np.zeros(shape, np.float32)), f"decode_{name}{i}",
                         requires_grad=False) for i in range(layers))
        self.qkv, self.qkv_bias = zeros((n + 1, width), "qkv"), zeros((width,), "qkv_bias")
        self.o, self.o_bias = zeros((c.qkv_sizes[0], n + 1), "o"), zeros((n + 1,), "o_bias")
        self.gate_up, self.down = zeros((n + 1, 2 * f), "gate_up"), zeros((f, n + 1), "down")
        self.lm_head = ms.Parameter(Tensor(np.zeros((n + 1, c.vocab_size), np.float32)),
                                    "decode_lm_head", requires_grad=False)
        self.fingerprint, self.folded_from = Fingerprint(lm), None

    def refresh(self) -> None:
        """Refold (one compiled call) unless the parameters are those last folded."""
        with execution_mode("graph"):
            seen = self.fingerprint().asnumpy()
            if self.folded_from is None or not np.array_equal(seen, self.folded_from):
                self()
                self.folded_from = seen

    def construct(self):
        body, n, c = self.lm.model, self.n, self.lm.config
        for i, layer in enumerate(body.layers):
            a, mlp = layer.self_attn, layer.mlp
            parts = _qkv_parts(a)
            w = _qkv_rows(a, ops.concat([_weight(x) for x in parts], 0))
            ops.assign(self.qkv[i], _fold_norm(w, layer.input_layernorm.weight, n).T)
            if c.qkv_bias:
                b = ops.concat([x.bias.astype(ms.float32) for x in parts], 0)
                ops.assign(self.qkv_bias[i], _qkv_rows(a, b))
            ops.assign(self.o[i], _extra_row(_weight(a.o_proj)).T)
            if c.o_bias:
                ops.assign(self.o_bias[i], _extra_row(a.o_proj.bias.astype(ms.float32)))
            gate_up = ops.concat((_weight(mlp.gate_proj), _weight(mlp.up_proj)), 0)
            gate_up = _fold_norm(gate_up, layer.post_attention_layernorm.weight, n)
            ops.assign(self.gate_up[i], gate_up.T)
            ops.assign(self.down[i], _extra_row(_weight(mlp.down_proj)).T)
        return ops.assign(self.lm_head, _fold_norm(_head_weight(self.lm), body.norm.weight, n).T)


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


class FoldedEngine(DecodeEngine):
    """``DecodeEngine``'s inputs, outputs and cache, computed with ``DecodeWeights``.
    ``rotation`` replaces cos/sin: (B, 1, T, d, d), one matrix per token, built on the host
    by ``host_inputs``; None for ALiBi."""

    def __init__(self, lm, batch: int, slots: int, weights: DecodeWeights):
        super().__init__(lm, batch, slots)
        self.w = weights
        c = lm.config
        self.heads_q, self.heads_kv, self.d = c.num_heads, c.kv_heads, c.head_dim
        self.groups = c.num_heads // c.kv_heads

    def host_inputs(self, bias, cos, sin):
        """(bias, rotation) from the layers' (bias, cos, sin) of T tokens: rotation
        (B, 1, T, G+2, d, d), the token axis third as in every step input: the token's RoPE
        matrix for the G query chunks and the keys, the identity for the values; None for
        ALiBi."""
        if cos is None:
            return bias, None
        r = rotation_matrices(cos, sin)[:, :, :, None]
        eye = np.broadcast_to(np.eye(self.d, dtype=np.float32), r.shape)
        return bias, np.concatenate([r] * (self.groups + 1) + [eye], 3)

    def heads(self, i: int, u, rotation, batch: int, length: int):
        """Unit-norm inputs (B·T, n+1) -> q (B, H_kv, G·T, d) (a group's query heads stacked
        along the query axis, as ``attend`` takes them), k, v (B, H_kv, T, d). The
        projection's G + 2 chunks of H_kv heads (``_qkv_rows``) are rotated by ONE batched
        matmul and separated by ONE ``Split``: no strided slices."""
        g, hk, d = self.groups, self.heads_kv, self.d
        p = _mm(u, self.w.qkv[i])
        if self.config.qkv_bias:
            p = p + self.w.qkv_bias[i]
        p = p.reshape(batch * length, g + 2, hk, d)
        if rotation is not None:                # (B·T, G+2, H_kv, d) @ (B·T, G+2, d, d)
            p = _bmm(p, rotation.reshape(batch * length, g + 2, d, d))
        *qs, k, v = ops.split(p, 1, 1)
        if length == 1:       # moving a unit axis is a free reshape, not a Transpose kernel
            q = qs[0] if g == 1 else ops.concat(qs, -1)      # (B, 1, H_kv, G·d)
            return (q.reshape(batch, hk, g, d), k.reshape(batch, hk, 1, d),
                    v.reshape(batch, hk, 1, d))
        q = ops.stack(qs, 0).reshape(g, batch, length, hk, d).transpose(1, 3, 0, 2, 4)
        return (q.reshape(batch, hk, g * length, d),
                *(t.reshape(batch, length, hk, d).transpose(0, 2, 1, 3) for t in (k, v)))

    def attend(self, i: int, q, keys, values, bias, batch: int, length: int):
        """softmax(q·kᵀ + bias)·v (the scale is folded into q), merged and projected."""
        g, hk = self.groups, self.heads_kv
        if g > 1:             # GQA: a group's query heads stacked along the query axis
            b, h = bias.shape[0], bias.shape[1]
            bias = bias.reshape(b, 1, 1, length, -1) if h == 1 else bias.reshape(b, hk, g, length, -1)
            scores = _bmm_t(q, keys).reshape(batch, hk, g, length, -1) + bias
            probs = ops.softmax(scores, -1).reshape(batch, hk, g * length, -1)
        else:
            probs = ops.softmax(_bmm_t(q, keys) + bias, -1)
        out = _bmm(probs, values).reshape(batch, self.heads_q, length, self.d)
        if length > 1:
            out = out.transpose(0, 2, 1, 3)
        out = _mm(out.reshape(batch * length, self.heads_q * self.d), self.w.o[i])
        return out + self.w.o_bias[i] if self.config.o_bias else out

    def construct(self, token, bias, rotation, where):
        batch, length = token.shape
        h = ops.gather(self.lm.model.embed_tokens.weight, token.reshape(-1), 0)
        h = ops.concat((h.astype(ms.float32),
                        ops.full((batch * length, 1), self.w.constant, dtype=ms.float32)), 1)
        for i in range(self.config.num_layers):
            q, k, v = self.heads(i, _unit_norm(h), rotation, batch, length)
            keys = self._write_cache(self.keys[i], where, k)
            values = self._write_cache(self.values[i], where, v)
            h = h + self.attend(i, q, keys, values, bias, batch, length)
            gate, up = ops.split(_mm(_unit_norm(h), self.w.gate_up[i]),
                                 self.config.intermediate_size, -1)
            h = h + _mm(ops.silu(gate) * up, self.w.down[i])
        if length > 1:              # a whole prompt (prefill): only its last column's logits
            h = h.reshape(batch, length, -1)[:, -1]
        logits = _mm(_unit_norm(h), self.w.lm_head)                         # (B, V)
        return ops.argmax(logits, -1).astype(ms.int32).reshape(-1, 1), logits
