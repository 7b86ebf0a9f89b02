"""The folded decode engine: ``generate(engine="folded")``, a declared alternative to the
layers' engine, computing in float32: faster where MindSpore's per-kernel cost dominates
(small models), and on a CPU for half-precision checkpoints too.

``engine.DecodeEngine`` runs the model's own layers. On a CPU, a small model's decode
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

The price is memory: the folded weights are a float32 COPY of the model (``copy_bytes``;
and of the embeddings of a half-precision one), refolded on the host from the live
parameters when a generation starts and they changed (``DecodeWeights.refresh``,
``fingerprint``). ``generate(engine="auto")`` (``generation.engine_kind``) pays it for
every model it can fold, float32 or, on a CPU, half precision: MindSpore 2.7's CPU has no
bfloat16 matmul, and the layers' engine runs a float16 model operator by operator (at
Qwen2.5-0.5B's size about 1/33 of the folded engine's speed at batch 1, 1/13 at batch 8:
benchmarks/RESULTS.md, "Real size"). It takes the layers'
engine when the copy would not fit in the host memory available, for a half-precision
model on an accelerator, and for QK-norm (Qwen3), which is not folded. Equal to the
model's forward: tests/test_engines.py (one equivalence suite over both engines).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from .engine import DecodeEngine

_mm = ops.MatMul()              # x @ W, the folded W stored (in, out): see DecodeWeights
_bmm = ops.BatchMatMul()
_bmm_t = ops.BatchMatMul(transpose_b=True)
_unit_norm = ops.L2Normalize(axis=-1, epsilon=1e-12)


def supports(model) -> str | None:
    """None if the folded engine can run ``model``, else the reason it cannot."""
    if model.config.qk_norm:
        return "QK-norm (Qwen3) normalises each head after the projection: nothing to fold"
    return None


def copy_bytes(model) -> int:
    """Host bytes of the float32 copy this engine makes of ``model`` (``DecodeWeights``):
    every matrix and bias it folds, plus the embeddings when they are not float32."""
    c = model.config
    n, f, (q, kv, _) = c.hidden_size, c.intermediate_size, c.qkv_sizes
    width = q + 2 * kv
    per_layer = (n + 1) * width + q * (n + 1) + (n + 1) * 2 * f + f * (n + 1)
    per_layer += width * c.qkv_bias + (n + 1) * c.o_bias
    half = model.model.embed_tokens.weight.dtype != ms.float32
    return 4 * (c.num_layers * per_layer + (n + 1) * c.vocab_size + half * c.vocab_size * n)


def _host(param) -> np.ndarray:
    """A parameter's values as float32 NumPy (``asnumpy`` shares the CPU tensor's memory;
    only a half-precision one is converted)."""
    return param.asnumpy().astype(np.float32, copy=False)


def _weight(linear) -> np.ndarray:
    """The (out, in) weight a linear layer applies, a LoRA adapter's B·A·alpha/r included."""
    w = _host(linear.weight)
    if hasattr(linear, "lora_A"):                     # lora.LoRADense, not merged
        w = w + (_host(linear.lora_B) @ _host(linear.lora_A)) * np.float32(linear.scaling)
    return w


def _fold_norm(w, gain, n: int) -> np.ndarray:
    """The engine's (n + 1, out) matrix for W (out, n) of the layer after an RMSNorm with
    weight ``gain``, for inputs that are unit vectors of n + 1 features:
    (W·diag(√n·gain))ᵀ with a zero row for the extra feature. Written into one new array."""
    out = np.zeros((n + 1, w.shape[0]), np.float32)
    np.multiply(w.T, (_host(gain) * np.float32(math.sqrt(n)))[:, None], out=out[:n])
    return out


def _extra_row(w) -> np.ndarray:
    """The engine's (in, out + 1) matrix for W (out, in): Wᵀ with a zero column, so that the
    layer adds nothing to the extra feature of the residual stream."""
    out = np.zeros((w.shape[1], w.shape[0] + 1), np.float32)
    out[:, :-1] = w.T
    return out


def _qkv_rows(attn, w) -> np.ndarray:
    """Rows of the q/k/v weight (or bias) as [Q | K | V], q's scaled by 1/sqrt(d) and its
    heads in "chunk" order: chunk g holds query head g of every kv group (heads kv·G + g),
    so that q, k and v come out of ONE equal ``Split`` (``FoldedEngine.heads``)."""
    q, kv, _ = attn.sizes
    if attn.grouped_qkv:       # InternLM2: per kv group [G q heads | k | v] -> [Q | K | V]
        g = w.reshape((attn.num_kv_heads, attn.groups + 2, attn.head_dim) + w.shape[1:])
        qs, ks, vs = np.split(g, [attn.groups, attn.groups + 1], 1)
        w = np.concatenate([t.reshape((-1,) + w.shape[1:]) for t in (qs, ks, vs)], 0)
    heads = w[:q].reshape((attn.num_kv_heads, attn.groups, attn.head_dim) + w.shape[1:])
    perm = (1, 0) + tuple(range(2, heads.ndim))
    chunks = heads.transpose(perm).reshape((q,) + w.shape[1:])
    return np.concatenate((chunks * np.float32(attn.scale), w[q:]), 0)


def _qkv_parts(attn):
    if attn.grouped_qkv:
        return (attn.wqkv,)
    return (attn.W_pack,) if attn.fused_qkv else (attn.q_proj, attn.k_proj, attn.v_proj)


def _head_weight(lm, embeddings) -> np.ndarray:
    """The (V, n) float32 head before the fold; ``embeddings`` is the float32 table the
    engine gathers from (a tied head is that table: no second conversion)."""
    if lm.tied:
        return _host(embeddings)
    w = _weight(lm.lm_head)
    if lm.config.norm_head:                 # Baichuan2's NormHead: unit rows
        w = w / np.sqrt(np.maximum((w * w).sum(-1, keepdims=True), np.float32(1e-24)))
    return w


def fingerprint(lm) -> np.ndarray:
    """Numbers that tell whether any parameter of ``lm`` changed: each row's sum of its
    raw bytes read as 64-bit words (modulo 2**64), so that a change of any one element
    changes its row's number; a vector is one row. Read from host views of the
    parameters (no copy, no cast; NumPy's sums release the GIL, so two threads share the
    work). A permutation of one row's elements is not seen (nothing the course does to
    weights permutes a row)."""
    def row_sums(param):
        a = np.ascontiguousarray(param.asnumpy())
        rows = a.view(np.uint8).reshape(a.shape[0] if a.ndim == 2 else 1, -1)
        words = rows.view(np.uint64) if rows.shape[1] % 8 == 0 else rows.astype(np.uint64)
        return words.sum(1, dtype=np.uint64)
    with ThreadPoolExecutor(2) as pool:
        return np.concatenate(list(pool.map(row_sums, lm.get_parameters())))


class DecodeWeights(ms.nn.Cell):
    """The folded float32 weights of ``lm`` (see the module docstring), and a float32 copy
    of its embeddings when they are stored in half precision (MindSpore 2.7's CPU
    ``Gather`` has no bfloat16 kernel). ``refresh`` refolds them from the model's LIVE
    parameters when those changed since the last fold (``fingerprint``). Each is stored
    (in, out), not as ``nn.Dense`` stores its weight: with 8 rows MindSpore 2.7's CPU
    MatMul with ``transpose_b`` took 1.2-1.4x as long for the layers' shapes and 1.8x for
    the 257 -> 8000 head (734 vs 415 us), with one row about as long (0.9-1.1x; kernel
    times in benchmarks/RESULTS.md), and the transpose is paid once per fold, not per token."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        c = lm.config
        self.lm, self.n = lm, c.hidden_size
        self.constant = math.sqrt(c.hidden_size * c.rms_norm_eps)
        per_layer = lambda name: ms.ParameterTuple(                                # noqa: E731
            _empty(f"decode_{name}{i}") for i in range(c.num_layers))
        # after the fold, with n = hidden, q + 2kv = sum(qkv_sizes), f = intermediate:
        # qkv (n+1, q+2kv), qkv_bias (q+2kv,), o (q, n+1), o_bias (n+1,),
        # gate_up (n+1, 2f), down (f, n+1), lm_head (n+1, V), embed (V, n)
        self.qkv, self.qkv_bias = per_layer("qkv"), per_layer("qkv_bias")
        self.o, self.o_bias = per_layer("o"), per_layer("o_bias")
        self.gate_up, self.down = per_layer("gate_up"), per_layer("down")
        self.lm_head = _empty("decode_lm_head")
        half = lm.model.embed_tokens.weight.dtype != ms.float32
        self.embed = _empty("decode_embed") if half else None
        self.folded_from = None

    def embeddings(self):
        """The (V, n) float32 embeddings the engine gathers from: the model's own, or the copy."""
        return self.lm.model.embed_tokens.weight if self.embed is None else self.embed

    def refresh(self) -> None:
        """Refold unless the parameters are those last folded."""
        seen = fingerprint(self.lm)
        if self.folded_from is None or not np.array_equal(seen, self.folded_from):
            self.fold()
            self.folded_from = seen

    def fold(self) -> None:
        """Recompute every folded weight from the live parameters, in NumPy on the host,
        one layer at a time: at most one layer's float32 intermediates are alive at once,
        and each result becomes its Parameter's data without a copy. (A Parameter set
        from MindSpore ops' outputs is copied again by a graph that reads it; folding in one
        graph over all layers peaked at 15.9 GB for Qwen2.5-0.5B's 2 GB of float32 weights,
        4.5 GB this way: benchmarks/RESULTS.md, "Real size".)"""
        body, n, c = self.lm.model, self.n, self.lm.config
        put = lambda param, value: param.set_data(                                 # noqa: E731
            Tensor.from_numpy(np.ascontiguousarray(value, np.float32)))
        for i, layer in enumerate(body.layers):
            a, mlp = layer.self_attn, layer.mlp
            parts = _qkv_parts(a)
            w = _qkv_rows(a, np.concatenate([_weight(x) for x in parts], 0))
            put(self.qkv[i], _fold_norm(w, layer.input_layernorm.weight, n))
            if c.qkv_bias:
                put(self.qkv_bias[i], _qkv_rows(a, np.concatenate([_host(x.bias) for x in parts])))
            put(self.o[i], _extra_row(_weight(a.o_proj)))
            if c.o_bias:
                put(self.o_bias[i], np.append(_host(a.o_proj.bias), np.float32(0)))
            gate_up = np.concatenate((_weight(mlp.gate_proj), _weight(mlp.up_proj)), 0)
            put(self.gate_up[i], _fold_norm(gate_up, layer.post_attention_layernorm.weight, n))
            put(self.down[i], _extra_row(_weight(mlp.down_proj)))
        if self.embed is not None:
            put(self.embed, _host(body.embed_tokens.weight))
        head = _head_weight(self.lm, self.embeddings())
        put(self.lm_head, _fold_norm(head, body.norm.weight, n))


def _empty(name: str):
    """A float32 Parameter that ``DecodeWeights.fold`` fills; one element until then (a
    Parameter of zeros of the real shape would hold its memory twice during the fold)."""
    return ms.Parameter(Tensor(np.zeros(1, np.float32)), name, requires_grad=False)


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
        super().__init__(lm, batch, slots, dtype=ms.float32, mode="graph")   # all float32
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

    def qkv(self, i: int, u, rows: int):
        """(rows, G+2, H_kv, d): layer i's projection of the unit-norm inputs in its G + 2
        chunks of H_kv heads (``_qkv_rows``), bias added."""
        p = _mm(u, self.w.qkv[i])
        if self.config.qkv_bias:
            p = p + self.w.qkv_bias[i]
        return p.reshape(rows, self.groups + 2, self.heads_kv, self.d)

    def heads(self, i: int, u, rotation, batch: int, length: int):
        """Unit-norm inputs (B·T, n+1) -> q (B, H_kv, G·T, d) (a group's query heads stacked
        along the query axis, as ``attend`` takes them), k, v (B, H_kv, T, d). The
        projection's G + 2 chunks of H_kv heads (``_qkv_rows``) are rotated by ONE batched
        matmul and separated by ONE ``Split``: no strided slices."""
        g, hk, d = self.groups, self.heads_kv, self.d
        p = self.qkv(i, u, batch * length)
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
        return self.project_out(i, out.reshape(batch * length, self.heads_q * self.d))

    def project_out(self, i: int, out):
        """Layer i's output projection of the merged heads (B·T, H·d)."""
        out = _mm(out, self.w.o[i])
        return out + self.w.o_bias[i] if self.config.o_bias else out

    def construct(self, token, bias, rotation, where):
        batch, length = token.shape
        h = ops.gather(self.w.embeddings(), token.reshape(-1), 0)
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
