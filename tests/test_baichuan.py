"""Baichuan: exact configurations, parameter counts without allocation, KV cache == full
recompute, graph == pynative, an ALiBi reference forward in torch, and an overfit test."""
import numpy as np
import pytest
import torch
import mindspore as ms
from mindspore import Tensor

from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.internlm import InternLMForCausalLM, tiny as internlm_tiny
from course_lib.hf_weights import state_dict
from course_lib.memory import build_lazy, count_parameters
from torch_baichuan import TorchBaichuan


def test_13b_preset_is_the_published_architecture():
    c = baichuan.baichuan_13b()
    assert (c.hidden_size, c.num_layers, c.num_heads, c.head_dim) == (5120, 40, 40, 128)
    assert (c.intermediate_size, c.vocab_size, c.max_seq_len) == (13696, 64000, 4096)
    assert c.position == "alibi" and c.fused_qkv and not c.qkv_bias and not c.o_bias
    assert c.rms_norm_eps == 1e-6
    assert baichuan.baichuan_7b().position == "rope"


def test_13b_parameter_count_three_ways_without_allocating():
    c = baichuan.baichuan_13b()
    assert c.num_parameters() == 13_264_901_120                      # closed form
    assert sum(int(np.prod(s)) for s in c.parameter_shapes().values()) == 13_264_901_120
    lazy = build_lazy(BaichuanForCausalLM, c)                       # real Cells, no weights
    assert count_parameters(lazy) == 13_264_901_120
    assert all(p.has_init for p in lazy.get_parameters())          # nothing was allocated
    assert {n: tuple(p.shape) for n, p in lazy.parameters_and_names()} == c.parameter_shapes()


def test_7b_parameter_count():
    c = baichuan.baichuan_7b()
    assert c.num_parameters() == 7_000_559_616
    assert count_parameters(build_lazy(BaichuanForCausalLM, c)) == 7_000_559_616


def test_tiny_analytic_equals_instantiated():
    c = baichuan.tiny()
    model = BaichuanForCausalLM(c)
    assert count_parameters(model) == c.num_parameters()
    assert {n: tuple(p.shape) for n, p in model.parameters_and_names()} == c.parameter_shapes()


def test_forward_shapes_and_errors():
    model = BaichuanForCausalLM(baichuan.tiny())
    logits = model(Tensor(np.arange(12, dtype=np.int32).reshape(2, 6)))
    assert logits.shape == (2, 6, 8000) and logits.dtype == ms.float32
    with pytest.raises(ValueError, match="2-D"):
        model(Tensor(np.arange(6, dtype=np.int32)))
    with pytest.raises(ValueError, match="max_seq_len"):
        BaichuanForCausalLM(baichuan.tiny(max_seq_len=4))(Tensor(np.zeros((1, 5), np.int32)))
    with pytest.raises(TypeError, match="BaichuanConfig"):
        BaichuanForCausalLM(internlm_tiny())


def test_causal_future_tokens_do_not_change_past_logits():
    model = BaichuanForCausalLM(baichuan.tiny())
    a = np.array([[5, 6, 7, 8, 9, 10]], np.int32)
    b = a.copy()
    b[0, 4:] = [100, 200]
    la, lb = model(Tensor(a)).asnumpy(), model(Tensor(b)).asnumpy()
    np.testing.assert_allclose(la[:, :4], lb[:, :4], atol=1e-6)
    assert np.abs(la[:, 4:] - lb[:, 4:]).max() > 1e-3


@pytest.mark.parametrize("family", ["alibi", "rope"])
def test_kv_cache_decode_equals_full_recompute(family):
    if family == "alibi":
        model = BaichuanForCausalLM(baichuan.tiny())
    else:
        model = InternLMForCausalLM(internlm_tiny())
    rng = np.random.default_rng(0)
    ids = rng.integers(7, 8000, (2, 11)).astype(np.int32)
    mask = np.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0                  # row 1 left-padded by 3
    full = model(Tensor(ids), attention_mask=Tensor(mask)).asnumpy()
    cache = model.new_cache()
    steps = [model(Tensor(ids[:, :5]), attention_mask=Tensor(mask[:, :5]), cache=cache).asnumpy()]
    for t in range(5, 11):
        steps.append(model(Tensor(ids[:, t:t + 1]), attention_mask=Tensor(mask[:, :t + 1]),
                           cache=cache).asnumpy())
    incremental = np.concatenate(steps, 1)
    real = mask.astype(bool)
    np.testing.assert_allclose(incremental[real], full[real], atol=2e-5)
    assert cache.seq_len == 11


def test_graph_mode_equals_pynative():
    model = BaichuanForCausalLM(baichuan.tiny())
    ids = Tensor(np.arange(20, dtype=np.int32).reshape(2, 10))
    eager = model(ids).asnumpy()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        graph = model(ids).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_allclose(graph, eager, atol=1e-5)


def _torch_baichuan13b_forward(sd, cfg, ids):
    """The shared independent reference (tests/torch_baichuan.py, written after Hugging Face
    Baichuan-13B's modeling code: ALiBi as slope * ABSOLUTE key position + -inf mask)."""
    with torch.no_grad():
        return TorchBaichuan.from_state_dict(sd, cfg)(torch.from_numpy(ids).long()).numpy()


def test_alibi_model_matches_independent_torch_reference():
    cfg = baichuan.tiny(num_heads=8, hidden_size=96 + 32, num_layers=2)
    model = BaichuanForCausalLM(cfg)
    ids = np.random.default_rng(3).integers(0, 8000, (1, 13)).astype(np.int32)
    ours = model(Tensor(ids)).asnumpy()
    ref = _torch_baichuan13b_forward(state_dict(model), cfg, ids)
    diff = float(np.abs(ours - ref).max())
    print(f"Baichuan (ALiBi) vs torch reference: max |diff| = {diff:.2e}")
    assert diff < 1e-4


def test_twelve_head_alibi_model_matches_reference():
    # 12 heads: not a power of two, exercises the interleave branch inside a full model.
    cfg = baichuan.tiny(num_heads=12, hidden_size=96, num_layers=1)
    model = BaichuanForCausalLM(cfg)
    ids = np.random.default_rng(4).integers(0, 8000, (1, 9)).astype(np.int32)
    np.testing.assert_allclose(model(Tensor(ids)).asnumpy(),
                               _torch_baichuan13b_forward(state_dict(model), cfg, ids), atol=1e-4)


def test_training_steps_lower_the_loss_on_a_fixed_batch():
    from course_lib.training import AdamW, LossCell, TrainStep
    model = BaichuanForCausalLM(baichuan.tiny(vocab_size=512, hidden_size=64))
    rng = np.random.default_rng(0)
    batch = rng.integers(7, 512, (4, 17)).astype(np.int32)
    x, y = Tensor(batch[:, :-1]), Tensor(batch[:, 1:])
    step = TrainStep(LossCell(model), AdamW(model.trainable_params(), 3e-3), clip=1.0)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        losses = [float(step(x, y)[0].asnumpy()) for _ in range(25)]
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert abs(losses[0] - np.log(512)) < 0.5          # starts near uniform
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
def test_float16_o2_training_stays_finite_and_close_to_float32(mode):
    # Under O2, PyNative casts every op inside a float16 Cell to float16; RMSNorm and the
    # masked softmax must stay float32 islands or the gradients overflow to NaN.
    from course_lib.training import AdamW, LossCell, TrainStep, apply_amp
    rng = np.random.default_rng(0)
    batch = rng.integers(7, 512, (4, 17)).astype(np.int32)
    x, y = Tensor(batch[:, :-1]), Tensor(batch[:, 1:])
    losses = {}
    ms.set_context(mode=mode)
    try:
        for level in ("O0", "O2"):
            import course_lib as cl
            cl.seed_everything(0)
            model = apply_amp(BaichuanForCausalLM(baichuan.tiny(vocab_size=512, hidden_size=64)), level)
            step = TrainStep(LossCell(model), AdamW(model.trainable_params(), 1e-3), clip=1.0)
            out = [step(x, y) for _ in range(2)]
            losses[level] = [float(o[0].asnumpy()) for o in out]
            assert all(np.isfinite(float(o[1].asnumpy())) for o in out), f"{level}: grad norm not finite"
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_allclose(losses["O2"], losses["O0"], atol=0.02)
    assert model.model.norm.mixed_precision_type != model.model.layers[0].mlp.gate_proj.mixed_precision_type


def test_float16_model_with_left_padding_matches_float32_logits():
    import course_lib as cl
    from course_lib.generation import prefill
    from course_lib.training import apply_amp
    cl.seed_everything(0)
    model = BaichuanForCausalLM(baichuan.tiny(hidden_size=64))
    model.set_train(False)
    rows = [[5, 6, 7, 8, 9], [10, 11]]                        # row 1 gets 3 left pads
    want = prefill(model, rows).logits                         # float32 (O0)
    alone = model(Tensor([rows[1]], ms.int32)).asnumpy()[0, -1]
    np.testing.assert_allclose(want[1], alone, atol=1e-5)     # pads change nothing in fp32
    got = prefill(apply_amp(model, "O2"), rows).logits        # same weights, float16
    assert np.isfinite(got).all()
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, atol=0.02 * scale)
    assert (got.argmax(-1) == want.argmax(-1)).all()
