"""The half-precision decode engine (``engine="half"``; what ``"auto"`` takes for a float16
model on a CPU where its kernel builds: ``generation.engine_kind``): a float16 model decoded
in float32 arithmetic from its OWN float16 parameters, with no float32 copy of any weight.

MindSpore 2.7's CPU has no fast way to multiply float16 weights (its float16 MatMul and its
float16 -> float32 cast both cost ~5x a float32 MatMul: benchmarks/RESULTS.md, "Real size"),
which is why the folded engine keeps a float32 copy. This engine multiplies through a kernel
of its own (``half_matmul.cc``, run by ``ops.Custom(func_type="aot")``): each float16 weight
is converted in registers as it is loaded, and the products are float32. It is compiled with
g++ into the course cache on first use, on x86-64 CPUs with AVX2, FMA and F16C.

Everything else is computed on float32 activations: the RMSNorms (gain cast in the graph),
q/k/v from the model's own projections put in the folded engine's chunk order (``qkv``),
then FoldedEngine's own ``heads`` (one rotating ``BatchMatMul``) and ``attend``, the MLP
and the (tied or untied) head. Equal to the float32 forward of the same float16 weights:
tests/test_engines.py.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import mindspore as ms
from mindspore import ops

from .folded import FoldedEngine, _qkv_parts
from .lora import lora_layers
from .runtime import cache_dir

_SOURCE = Path(__file__).with_name("half_matmul.cc")
_KERNEL: dict = {}


def cpu_flags() -> set:
    """The extensions /proc/cpuinfo lists for this CPU (empty where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((l.split(":", 1)[1].split() for l in text.splitlines()
                     if l.startswith("flags")), []))


def kernel():
    """``(op, None)``: the compiled kernel as an ``ops.Custom``; or ``(None, reason)``."""
    if "op" in _KERNEL or "why" in _KERNEL:
        return _KERNEL.get("op"), _KERNEL.get("why")
    missing = {"avx2", "fma", "f16c"} - cpu_flags()
    if ms.get_context("device_target") != "CPU" or missing:
        _KERNEL["why"] = f"needs a CPU with AVX2, FMA and F16C (missing: {sorted(missing)})"
    elif shutil.which("g++") is None:
        _KERNEL["why"] = "needs g++ to compile its kernel (course_lib/half_matmul.cc)"
    else:
        digest = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:12]
        lib = cache_dir("kernels") / f"half_matmul-{digest}.so"
        if not lib.exists():
            with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
                out = Path(tmp) / lib.name
                subprocess.run(["g++", "-O3", "-mavx2", "-mfma", "-mf16c", "-pthread", "-shared",
                                "-fPIC", "-o", str(out), str(_SOURCE)], check=True,
                               capture_output=True)
                os.replace(out, lib)                               # atomic: never half a file
        _KERNEL["op"] = ops.Custom(f"{lib}:HalfMatMul", out_shape=lambda x, w: [x[0], w[0]],
                                   out_dtype=lambda x, w: ms.float32, func_type="aot")
    return _KERNEL.get("op"), _KERNEL.get("why")


def supports(model) -> str | None:
    """None if the half engine can run ``model``, else the reason it cannot."""
    c = model.config
    if model.model.embed_tokens.weight.dtype != ms.float16:
        return "it runs float16 models only"
    if c.qk_norm or c.norm_head:
        return "QK-norm and Baichuan2's NormHead are not implemented in it"
    if lora_layers(model):
        return "unmerged LoRA adapters are not implemented in it (merge them first)"
    return kernel()[1]


PREFILL_FLOOR = 16      # rows a prefill call may always take


def prefill_rows(lm) -> int:
    """Rows (prompts x columns) one prefill call of ``HalfEngine`` takes at most. A compiled
    call on a CPU kept the intermediates of every row of every layer until it ended (at
    Qwen2.5-0.5B's size 0.45 GB more for 128 rows than for 16: benchmarks/RESULTS.md, "Real
    size"), so a long prefill goes in chunks whose intermediates, estimated at
    layers x (10 h + 6 f) float32 values a row, stay under a tenth of the weights' bytes
    (at least ``PREFILL_FLOOR`` rows)."""
    c = lm.config
    per_row = c.num_layers * (10 * c.hidden_size + 6 * c.intermediate_size) * 4
    weights = sum(p.nbytes for p in lm.get_parameters())
    return max(PREFILL_FLOOR, weights // 10 // per_row)


class HalfEngine(FoldedEngine):
    """``FoldedEngine``'s inputs, outputs, cache and rotation; the products from the model's
    own float16 parameters through ``kernel()``."""

    def __init__(self, lm, batch: int, slots: int):
        super().__init__(lm, batch, slots, weights=None)
        self.mm, _ = kernel()
        self.eps = lm.config.rms_norm_eps
        self.prefill_rows = prefill_rows(lm)

    def _write_cache(self, buffer, where, new):
        """Blocks of T > 1 tokens are chunks of a prefill into a cleared cache
        (``generation.compiled_prefill``): scattered into their slots like single tokens."""
        if new.shape[2] > 1:
            return ops.scatter_nd_update(buffer, where, new)
        return super()._write_cache(buffer, where, new)

    def _linear(self, x, dense):
        y = self.mm(x, dense.weight)
        return y + dense.bias.astype(ms.float32) if dense.has_bias else y

    def _norm(self, h, norm):
        h = h * ops.rsqrt((h * h).mean(-1, keep_dims=True) + self.eps)
        return h * norm.weight.astype(ms.float32)

    def qkv(self, i: int, u, rows: int):
        """(rows, G+2, H_kv, d): the G query chunks (scaled by 1/sqrt(d)), k and v, from the
        model's own projections of the normed inputs, in the folded engine's chunk order."""
        attn = self.lm.model.layers[i].self_attn
        g, hk, d = self.groups, self.heads_kv, self.d
        if attn.grouped_qkv:               # InternLM2: per kv group [G q heads | k | v]
            p = self._linear(u, attn.wqkv).reshape(rows, hk, g + 2, d).transpose(0, 2, 1, 3)
            q, k, v = ops.split(p, [g, 1, 1], 1)                          # q in chunk order
        else:
            if attn.fused_qkv:
                q, k, v = ops.split(self._linear(u, attn.W_pack), attn.sizes, -1)
            else:
                q, k, v = (self._linear(u, x) for x in _qkv_parts(attn))
            q = q.reshape(rows, hk, g, d).transpose(0, 2, 1, 3)          # chunk g: head kv·G + g
            k, v = k.reshape(rows, 1, hk, d), v.reshape(rows, 1, hk, d)
        return ops.concat((q * attn.scale, k, v), 1)

    def project_out(self, i: int, out):
        return self._linear(out, self.lm.model.layers[i].self_attn.o_proj)

    def construct(self, token, bias, rotation, where):
        batch, length = token.shape
        body = self.lm.model
        h = ops.gather(body.embed_tokens.weight, token.reshape(-1), 0).astype(ms.float32)
        for i, layer in enumerate(body.layers):
            q, k, v = self.heads(i, self._norm(h, layer.input_layernorm), rotation, batch, length)
            keys = self._write_cache(self.keys[i], where, k)
            values = self._write_cache(self.values[i], where, v)
            h = h + self.attend(i, q, keys, values, bias, batch, length)
            u, mlp = self._norm(h, layer.post_attention_layernorm), layer.mlp
            gate, up = self._linear(u, mlp.gate_proj), self._linear(u, mlp.up_proj)
            h = h + self._linear(ops.silu(gate) * up, mlp.down_proj)
        if length > 1:
            h = h.reshape(batch, length, -1)[:, -1]
        u = self._norm(h, body.norm)
        logits = self.mm(u, body.embed_tokens.weight) if self.lm.tied else \
            self._linear(u, self.lm.lm_head)
        return ops.argmax(logits, -1).astype(ms.int32).reshape(-1, 1), logits
