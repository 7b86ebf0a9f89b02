"""course_lib.memory: byte counts checked against published sizes, measured tensors and
hand arithmetic; layouts checked for the properties the planner promises."""
import numpy as np
import pytest
from mindspore import Tensor

from course_lib import baichuan, internlm
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.memory import (GiB, Layout, activation_bytes, activation_values_per_token_per_layer,
                               devices_needed, kv_cache_bytes, per_device_memory, plan,
                               training_state_bytes, weight_bytes)

B13 = baichuan.baichuan_13b()


def test_13b_fp16_weights_equal_the_published_checkpoint_size():
    # 2 bytes x 13,264,901,120 parameters: the size of the fp16 checkpoint.
    assert weight_bytes(B13, "fp16") == 26_529_802_240
    assert weight_bytes(B13, "fp32") == 2 * 26_529_802_240
    assert weight_bytes(B13, "int8") == 13_264_901_120
    assert weight_bytes(B13, "int4") == 13_264_901_120 // 2
    with pytest.raises(ValueError, match="Unknown dtype"):
        weight_bytes(B13, "fp8")


def test_weight_bytes_equal_the_tiny_models_real_tensors():
    model = BaichuanForCausalLM(baichuan.tiny())
    assert weight_bytes(model.config, "fp32") == sum(p.asnumpy().nbytes for p in model.get_parameters())


def test_kv_cache_bytes_equal_a_real_cache():
    model = BaichuanForCausalLM(baichuan.tiny())
    cache = model.new_cache()
    model(Tensor(np.ones((3, 10), np.int32)), cache=cache)
    assert cache.nbytes() == kv_cache_bytes(model.config, batch=3, seq_len=10, dtype="fp32")


def test_training_state_is_16_bytes_per_parameter():
    mixed = training_state_bytes(1000)
    assert (mixed.weights, mixed.gradients, mixed.master_weights, mixed.optimizer_states) == \
        (2000, 2000, 4000, 8000)
    assert mixed.total == 16_000 and training_state_bytes(1000, precision="fp32").total == 16_000
    # LoRA-style: 10 trainable + 990 frozen parameters
    lora = training_state_bytes(10, frozen=990)
    assert lora.total == 2 * 1000 + 14 * 10


def test_activation_formula_by_hand_for_a_small_config():
    c = baichuan.tiny(hidden_size=8, intermediate_size=12, num_heads=2, num_layers=3,
                      vocab_size=50, max_seq_len=16)
    s = 16
    # saved per token per layer: attention norm-in, qkv-in, q, k, v, context (6h),
    # softmax rows (heads * s), MLP norm-in, mlp-in (2h), gate, up, silu, product (4f)
    per_layer = 6 * 8 + 2 * s + 2 * 8 + 4 * 12
    assert activation_values_per_token_per_layer(c, s) == per_layer
    expected = s * (3 * per_layer * 2 + 4 * 50 + 2 * 2 * 8)     # fp16 values + fp32 logits + head input
    assert activation_bytes(c, 1, s, "fp16") == expected
    assert activation_bytes(c, 2, s, "fp16") == 2 * expected
    flash = activation_bytes(c, 1, s, flash_attention=True)
    recompute = activation_bytes(c, 1, s, recompute=True)
    assert recompute < flash < expected


def test_parallel_layouts_divide_what_they_promise():
    base = per_device_memory(B13, Layout(seq_len=2048))
    tp8 = per_device_memory(B13, Layout(tp=8, seq_len=2048))
    assert tp8.weights == pytest.approx(base.weights / 8)
    assert tp8.activations == pytest.approx(base.activations / 8, rel=1e-6)
    pp4 = per_device_memory(B13, Layout(pp=4, seq_len=2048))
    assert pp4.optimizer_states == pytest.approx(base.optimizer_states / 4)
    assert pp4.activations == base.activations          # 1F1B: first stage holds pp micro-batches
    dp8 = per_device_memory(B13, Layout(dp=8, seq_len=2048))
    assert dp8.total == base.total                      # plain data parallel copies everything
    z1 = per_device_memory(B13, Layout(dp=8, zero=1, seq_len=2048))
    z3 = per_device_memory(B13, Layout(dp=8, zero=3, seq_len=2048))
    assert z1.optimizer_states == pytest.approx(base.optimizer_states / 8)
    assert z1.weights == base.weights and z3.weights == pytest.approx(base.weights / 8)


def test_13b_does_not_fit_one_device_and_the_planner_finds_the_minimum():
    single = plan(B13, 64, Layout(seq_len=4096))
    assert not single.fits and single.memory.total > 200 * GiB
    p = devices_needed(B13, 64, tp=8, zero=1, recompute=True, seq_len=4096)
    assert p.fits and p.devices == p.layout.dp * 8
    if p.layout.dp > 1:                                 # minimal: one fewer replica fails
        smaller = plan(B13, 64, Layout(dp=p.layout.dp - 1, tp=8, zero=1, recompute=True,
                                       seq_len=4096))
        assert not smaller.fits
    with pytest.raises(ValueError, match="without ZeRO"):
        devices_needed(B13, 32, tp=1, zero=0, seq_len=4096)


def test_lora_saves_most_of_the_7b_training_state():
    c = internlm.internlm_7b()
    full = training_state_bytes(c.num_parameters())
    lora = training_state_bytes(4_194_304, frozen=c.num_parameters())
    assert lora.total < 0.2 * full.total


def test_layout_validation():
    with pytest.raises(ValueError, match="zero must be"):
        Layout(zero=4)
    with pytest.raises(ValueError, match="tp must be >= 1"):
        Layout(tp=0)


def test_training_compute_by_hand():
    from course_lib.memory import training_days, training_flops
    assert training_flops(1_000, 2_000) == 12_000_000
    # 6 * 13,264,901,120 * 1.4e12 FLOPs on 1000 devices at 100 TFLOP/s effective
    days = training_days(B13, 1.4e12, devices=1000, device_tflops=100, utilization=1.0)
    assert days == pytest.approx(6 * 13_264_901_120 * 1.4e12 / (1000 * 100e12) / 86400)
    with pytest.raises(ValueError, match="utilization"):
        training_days(B13, 1e9, 1, 100, utilization=0)
