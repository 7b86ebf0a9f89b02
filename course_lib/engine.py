"""The compiled decode step of ``generate``: ``DecodeEngine``, the layers' engine.

It runs the model's own layers (``DecoderLayer.heads`` -> cache write ->
``DecoderLayer.finish``) on the live parameters, with a KV cache of fixed length inside
it, so every decode step has the same shapes and GRAPH mode compiles it once.
``folded.FoldedEngine`` (folded.py) is its declared alternative: the same inputs, outputs
and cache, computed from a folded float32 copy of the weights. ``generation.engine_kind``
chooses between them and ``generation.decode_engine`` builds and keeps them; both engines
are equal to the model's forward (tests/test_engines.py).
"""
from __future__ import annotations

import numpy as np
import mindspore as ms
from mindspore import nn, ops


ADD_IN_PLACE_BYTES = 256 * 1024   # cache buffers from this size on are written in place


def cache_dtype(model):
    """The dtype the model's attention produces keys/values in: its storage dtype, except
    bfloat16 on CPU, which computes in float32 (``pretrained.compute_dtype_for``)."""
    dtype = model.model.embed_tokens.weight.dtype
    if dtype == ms.bfloat16 and ms.get_context("device_target") == "CPU":
        return ms.float32
    return dtype


def engine_mode(model) -> str:
    """How the layers' engine runs (``DecodeEngine``; the folded one always compiles):
    compiled ("graph"), except for a half-precision model on CPU, which runs it operator
    by operator ("pynative"). In GRAPH mode on CPU a float16 model's generate peaked at
    3.128x its weights + KV cache in host memory, PyNative at 1.016x (16 new tokens; 3.12x
    and 1.023x with 48; our hypothesis: the graph computes float16 weights through float32
    copies kept in its memory pool;
    benchmarks/RESULTS.md, "Host memory of float16 generation": a 4-layer model,
    the runtime's fixed ~180 MB taken out by a warm-up); tests/test_generation_memory.py
    asserts PyNative <= 1.2x and GRAPH mode > 1.2x."""
    half = model.model.embed_tokens.weight.dtype in (ms.float16, ms.bfloat16)
    return "pynative" if half and ms.get_context("device_target") == "CPU" else "graph"


class DecodeEngine(nn.Cell):
    """The compiled decode step of a ``CausalLM``: the model's OWN layers (``DecoderLayer
    .heads`` and ``.finish``, the final norm, ``CausalLM.head``) with a KV cache of ``slots``
    fixed slots in between that lives inside the engine — one (B, H_kv, slots, d)
    ``Parameter`` per layer for keys and for values, in the dtype the model computes in.
    No weight is copied: the engine runs the model's live parameters (trained, loaded,
    merged or with LoRA adapters: the layers' own code applies them).

    Inputs for T new tokens per row (T = 1 while decoding, T = the padded prompt width
    for a compiled prefill): ``token`` (B, T) int32; ``bias`` (B, H|1, T, slots) —
    ``attention_bias`` of the tokens against every slot (empty slots, pads and later
    tokens masked); ``cos``, ``sin`` (B, 1, T, d) — RoPE angles of the tokens, or None
    (ALiBi); ``where`` (B, H_kv, T, 3) int32: the [row, head, slot] index of every new
    key/value, written into the cache by ``_write_cache``. Returns the greedy choice
    (B, 1) int32 — it can stay on the device as the next call's ``token`` — and the
    logits (B, V) of the last token. Same shapes at every step: GRAPH mode compiles the
    step once per engine (batch size x slots), and a prefill once per prompt width.
    Equal to the model's own forward: tests/test_generation.py."""

    def __init__(self, lm, batch: int, slots: int, dtype=None, mode: str | None = None):
        super().__init__(auto_prefix=False)
        c = lm.config
        self.lm, self.slots, self.config = lm, slots, c
        shape, dtype = (batch, c.kv_heads, slots, c.head_dim), dtype or cache_dtype(lm)
        buffers = lambda kind: ms.ParameterTuple(                                  # noqa: E731
            ms.Parameter(ops.zeros(shape, dtype), f"cache_{kind}{i}", requires_grad=False)
            for i in range(c.num_layers))
        self.keys, self.values = buffers("k"), buffers("v")
        self.mode = mode or engine_mode(lm)
        itemsize = 2 if dtype in (ms.float16, ms.bfloat16) else 4
        self.add_in_place = itemsize * int(np.prod(shape)) >= ADD_IN_PLACE_BYTES

    @staticmethod
    def host_inputs(bias, cos, sin):
        """The engine's inputs from the layers' (bias, cos, sin) NumPy arrays of a block of
        tokens (the token axis is axis 2 of every array: ``StepInputs`` slices it)."""
        return bias, cos, sin

    def clear(self) -> None:
        """Zero every cache slot (a new generation starts: slots are then added into)."""
        for buffer in (*self.keys, *self.values):
            buffer.set_data(ops.zeros(buffer.shape, buffer.dtype))

    def _write_cache(self, buffer, where, new):
        """The new keys (or values) into their slots. A block of T > 1 tokens is a prefill:
        it fills slots 0..T-1 and empties the rest (the whole buffer assigned at once: a new
        generation starts). Single tokens go to the slots ``where`` says: ``ops.scatter_nd_
        update``'s CPU kernel copies the whole buffer to its output at every call;
        ``ops.scatter_nd_add`` works in place but has a fixed cost even for one slot
        (benchmarks/probe_cache_write.py; figures in benchmarks/RESULTS.md): the add for
        buffers of ``ADD_IN_PLACE_BYTES`` and more, into slots that are still zero (emptied
        by the prefill, or ``clear()``; every slot is written once after it)."""
        if new.dtype != buffer.dtype:
            new = new.astype(buffer.dtype)
        length = new.shape[2]
        if length > 1:
            if length < self.slots:
                empty = new.shape[:2] + (self.slots - length,) + new.shape[3:]
                new = ops.concat((new, ops.zeros(empty, buffer.dtype)), 2)
            return ops.assign(buffer, new)
        if self.add_in_place:
            return ops.scatter_nd_add(buffer, where, new)
        return ops.scatter_nd_update(buffer, where, new)

    def construct(self, token, bias, cos, sin, where):
        body = self.lm.model
        h = body.embed_tokens(token)
        for i, layer in enumerate(body.layers):
            q, k, v = layer.heads(h, cos, sin)
            keys = self._write_cache(self.keys[i], where, k)
            values = self._write_cache(self.values[i], where, v)
            h = layer.finish(h, q, keys, values, bias)
        if token.shape[1] > 1:      # a whole prompt (prefill): only its last column's logits
            h = h[:, -1:]
        logits = self.lm.head(body.norm(h))[:, 0]                            # (B, V)
        return ops.argmax(logits, -1).astype(ms.int32).reshape(-1, 1), logits
