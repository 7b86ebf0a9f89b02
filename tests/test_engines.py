"""One equivalence suite over both compiled decode engines ("layers": the model's own
layers; "folded": the float32 fast path) and the layouts every family needs: ALiBi/RoPE x
MHA/GQA x fused/separate/grouped q/k/v x biases x QK-norm x tied/NormHead x rope_scaling x
float32/float16 x LoRA. The reference is the model's own PyNative forward, recomputing
every token (no cache, no engine)."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

import course_lib as cl
from course_lib import engine as engines, generation, lora
from course_lib.layers import CausalLM, DecoderConfig

BASE = dict(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
            max_seq_len=128, init_std=0.2)
LAYOUTS = {
    "alibi-mha-w_pack": dict(position="alibi"),
    "rope-mha-separate-bias": dict(position="rope", fused_qkv=False, qkv_bias=True, o_bias=True),
    "rope-gqa-qkv_bias-tied": dict(position="rope", fused_qkv=False, qkv_bias=True,
                                   num_kv_heads=2, tie_embeddings=True, rope_base=1e6),
    "rope-gqa-qk_norm-head_dim": dict(position="rope", fused_qkv=False, num_kv_heads=2,
                                      head_size=12, qk_norm=True, tie_embeddings=True),
    "rope-gqa-grouped_wqkv-dynamic": dict(position="rope", grouped_qkv=True, num_kv_heads=2,
                                          rope_scaling=(("factor", 2.0), ("type", "dynamic"))),
    "rope-mqa-llama3_scaling": dict(position="rope", fused_qkv=False, num_kv_heads=1,
                                    rope_scaling=(("factor", 8.0), ("high_freq_factor", 4.0),
                                                  ("low_freq_factor", 1.0),
                                                  ("original_max_position_embeddings", 16),
                                                  ("rope_type", "llama3"))),
    "alibi-norm_head": dict(position="alibi", norm_head=True),
    "rope-w_pack-norm_head": dict(position="rope", norm_head=True),
}
PROMPTS = [[5, 17, 42, 8, 99, 3, 250, 61, 7, 12], [33, 2, 71]]   # 10 (compiled prefill), 3 tokens


def build(layout: str, dtype=ms.float32, with_lora: bool = False):
    cl.setup(device="CPU", seed=0, quiet=True)
    model = CausalLM(DecoderConfig(**BASE, **LAYOUTS[layout]))
    if with_lora:
        c = model.config
        target = ["q_proj", "v_proj"] if not c.fused_qkv else [c.qkv_name]
        lora.inject_lora(model, target, r=2, alpha=4.0)
        for p in lora.lora_parameters(model):
            p.set_data(Tensor(np.random.default_rng(1).normal(0, 0.3, p.shape).astype(np.float32)))
    if dtype != ms.float32:
        for p in model.get_parameters():
            p.set_dtype(dtype)
        model.to_float(dtype)
    model.set_train(False)
    return model


def engines_for(model):
    reason = __import__("course_lib.folded", fromlist=["supports"]).supports(model)
    return ["layers"] if reason else ["layers", "folded"]


def recompute_logits(model, ids):
    """Logits of the last token after each prefix: the PyNative forward on the whole
    sequence, whose row t sees tokens 0..t only (a causal model; no layout here depends on the
    sequence's length: ``dynamic`` RoPE changes nothing within ``max_seq_len``). A mask that
    let a row see later tokens would make this reference differ from the engines, not agree."""
    with cl.runtime.execution_mode("pynative"):
        return model(Tensor(np.asarray([ids], np.int32)))[0].asnumpy()


def engine_logits(model, prompts, new, engine):
    """(B, new + 1, V): the logits the engine produces for each (left-padded) prompt and
    for each of ``new`` forced tokens, with the prefill width and cache ``generate`` picks
    for 6 new tokens (so the same compiled graphs serve ``generate`` below)."""
    limit = model.config.max_seq_len
    width = generation.prefill_width(max(map(len, prompts)), 6, limit)
    state = generation.compiled_prefill(model, prompts, generation.cache_bucket(width + 6, limit),
                                        width=width, engine=engine)
    out = [state.logits]
    for tok in range(new):
        generation.decode_step(model, state, [[10 + tok]] * len(prompts))
        out.append(state.logits)
    return np.stack(out, 1)


def recompute_rows(model, prompts, new):
    return np.stack([recompute_logits(model, p + [10 + t for t in range(new)])[len(p) - 1:]
                     for p in prompts])


CASES = [(layout, False) for layout in sorted(LAYOUTS)] + [
    (layout, True) for layout in ("alibi-mha-w_pack", "rope-gqa-grouped_wqkv-dynamic")]  # unmerged LoRA


@pytest.mark.parametrize("layout, with_lora", CASES)
def test_both_engines_equal_recompute_float32(layout, with_lora):
    model = build(layout, with_lora=with_lora)
    new = 4
    want = recompute_rows(model, PROMPTS, new)             # a padded row and a full one
    one_by_one = [generation.generate(model, [p], 6, use_cache=False)[0] for p in PROMPTS]
    for engine in engines_for(model):
        got = engine_logits(model, PROMPTS, new, engine)
        assert np.abs(got - want).max() < 1e-4, (layout, engine, np.abs(got - want).max())
        assert generation.generate(model, PROMPTS, 6, engine=engine) == one_by_one, (layout, engine)


@pytest.mark.parametrize("layout", ["rope-gqa-qkv_bias-tied", "rope-gqa-qk_norm-head_dim",
                                    "rope-gqa-grouped_wqkv-dynamic", "alibi-norm_head"])
def test_layers_engine_keeps_float16_and_equals_the_float16_forward(layout):
    model = build(layout, dtype=ms.float16)
    engine = generation.decode_engine(model, 1, 64, "layers")
    assert all(b.dtype == ms.float16 for b in engine.keys)            # the cache too
    new = 3
    want = recompute_rows(model, PROMPTS[:1], new)
    got = engine_logits(model, PROMPTS[:1], new, "layers")
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 2e-3 * scale, (layout, np.abs(got - want).max(), scale)


def rounded_through(model, dtype):
    """Every parameter of the float32 ``model`` rounded to ``dtype`` and back: the float32
    model whose forward the folded engine computes for a ``dtype`` checkpoint."""
    for p in model.get_parameters():
        p.set_data(p.astype(dtype).astype(ms.float32))
    return model


@pytest.mark.parametrize("dtype", [ms.float16, ms.bfloat16])
@pytest.mark.parametrize("layout", ["rope-gqa-qkv_bias-tied", "rope-gqa-grouped_wqkv-dynamic",
                                    "alibi-norm_head", "rope-mha-separate-bias"])
def test_folded_engine_computes_a_half_precision_model_in_float32(layout, dtype):
    """The folded engine computes a float16/bfloat16 model in float32 (the layers' engine
    would run it operator by operator on a CPU): its logits are the float32 forward of the
    same rounded weights, and its cache is float32."""
    want = recompute_rows(rounded_through(build(layout), dtype), PROMPTS, 4)
    model = build(layout, dtype=dtype)
    got = engine_logits(model, PROMPTS, 4, "folded")
    engine = generation.decode_engine(model, len(PROMPTS), 64, "folded")
    assert engine.mode == "graph" and all(b.dtype == ms.float32 for b in engine.keys)
    assert np.abs(got - want).max() < 1e-4, (layout, dtype, np.abs(got - want).max())
    folded_ = [p for p in engine.w.get_parameters()                   # the filled copies
               if p.name.startswith("decode_") and p.size > 1]
    assert all(p.dtype == ms.float32 for p in folded_)
    copy = __import__("course_lib.folded", fromlist=["copy_bytes"]).copy_bytes(model)
    assert copy == sum(p.size * 4 for p in folded_)          # what "auto" checks it against


def test_folded_engine_refuses_what_it_cannot_fold(monkeypatch):
    with pytest.raises(ValueError, match="QK-norm"):
        generation.engine_kind(build("rope-gqa-qk_norm-head_dim"), "folded")
    assert generation.engine_kind(build("rope-gqa-qk_norm-head_dim", dtype=ms.float16)) == "layers"
    model = build("rope-gqa-qkv_bias-tied", dtype=ms.bfloat16)
    copy = __import__("course_lib.folded", fromlist=["copy_bytes"]).copy_bytes(model)
    monkeypatch.setattr(generation, "host_available_bytes", lambda: copy - 1)
    assert generation.engine_kind(model) == "layers"           # the copy would not fit
    monkeypatch.setattr(generation, "host_available_bytes", lambda: copy + 1)
    assert generation.engine_kind(model) == "folded"


@pytest.mark.parametrize("engine", ["layers", "folded"])
def test_a_planted_cache_write_break_is_caught(engine, monkeypatch):
    """Keys written one slot too far: the suite's comparison must fail."""
    model = build("rope-gqa-qkv_bias-tied")
    new = 3
    want = recompute_rows(model, PROMPTS[:1], new)
    original = engines.DecodeEngine._write_cache

    def shifted(self, buffer, where, new_values):
        return original(self, buffer, ms.ops.minimum(where + Tensor([0, 0, 1], ms.int32),
                                                      self.slots - 1), new_values)
    monkeypatch.setattr(engines.DecodeEngine, "_write_cache", shifted)
    model.__dict__.pop("_decode_engines", None)
    got = engine_logits(model, PROMPTS[:1], new, engine)
    assert np.abs(got - want).max() > 1e-3


def test_auto_gives_a_float16_model_the_half_engine_where_it_runs(monkeypatch):
    """On a CPU "auto" decodes a float16 model from its own weights ("half": no float32
    copy), a bfloat16 one with the folded engine, and a float16 one with the folded engine
    where the half engine cannot run (here: its kernel refused)."""
    from course_lib import half
    if half.kernel()[0] is None:
        pytest.skip(half.kernel()[1])
    model = build("rope-gqa-qkv_bias-tied", dtype=ms.float16)
    assert generation.engine_kind(model) == "half"
    assert generation.engine_kind(build("rope-gqa-qkv_bias-tied", dtype=ms.bfloat16)) == "folded"
    assert generation.engine_kind(build("rope-gqa-qk_norm-head_dim", dtype=ms.float16)) == "layers"
    with_lora = build("rope-gqa-qkv_bias-tied", dtype=ms.float16, with_lora=True)
    assert generation.engine_kind(with_lora) == "folded"
    with pytest.raises(ValueError, match="unmerged LoRA"):
        generation.engine_kind(with_lora, "half")
    monkeypatch.setattr(half, "kernel", lambda: (None, "no kernel on this machine"))
    assert generation.engine_kind(model) == "folded"
    with pytest.raises(ValueError, match="no kernel on this machine"):
        generation.engine_kind(model, "half")


def test_half_kernel_multiplies_every_shape():
    """half_matmul.cc against NumPy in float64 on the same float16 weights: row counts that
    use the 4-row tiles, the single-row tail and both, weight-row counts that leave a partial
    tile, and inner sizes that leave a tail after the 8-wide vectors."""
    from course_lib import half
    mm, why = half.kernel()
    if mm is None:
        pytest.skip(why)
    rng = np.random.default_rng(0)
    for rows, inner, out in [(1, 896, 64), (3, 37, 11), (4, 64, 9), (9, 13, 17), (130, 40, 25)]:
        x = rng.standard_normal((rows, inner)).astype(np.float32)
        w = rng.standard_normal((out, inner)).astype(np.float16)
        want = x.astype(np.float64) @ w.astype(np.float64).T
        got = mm(Tensor(x), Tensor(w)).asnumpy()
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-4 * np.sqrt(inner), \
            (rows, inner, out, np.abs(got - want).max())


@pytest.mark.parametrize("layout", ["rope-gqa-qkv_bias-tied", "rope-gqa-grouped_wqkv-dynamic",
                                    "alibi-mha-w_pack", "rope-mha-separate-bias",
                                    "rope-mqa-llama3_scaling", "rope-gqa-qk_norm-head_dim"])
def test_half_engine_computes_a_float16_model_from_its_own_weights(layout):
    """engine="half": the float32 forward of the float16 weights, multiplied from the
    model's own float16 Parameters (no weight copied); the cache float32."""
    from course_lib import half
    model = build(layout, dtype=ms.float16)
    if model.config.qk_norm:
        with pytest.raises(ValueError, match="QK-norm"):
            generation.engine_kind(model, "half")
        return
    if half.kernel()[0] is None:
        pytest.skip(half.kernel()[1])
    reference = rounded_through(build(layout), ms.float16)
    want = recompute_rows(reference, PROMPTS, 4)
    got = engine_logits(model, PROMPTS, 4, "half")
    assert np.abs(got - want).max() < 1e-4, (layout, np.abs(got - want).max())
    engine = generation.decode_engine(model, len(PROMPTS), 64, "half")
    assert engine.mode == "graph" and all(b.dtype == ms.float32 for b in engine.keys)
    own = {id(p) for p in model.get_parameters()}
    assert all(id(p) in own or p.name.startswith("cache_") for p in engine.get_parameters())
    one_by_one = [generation.generate(reference, [p], 6, use_cache=False)[0] for p in PROMPTS]
    assert generation.generate(model, PROMPTS, 6, engine="half") == one_by_one
