"""InternLM-7B configuration and parity of the course models with Hugging Face's
LlamaForCausalLM on real torch (same weights, moved through course_lib.hf_weights)."""
import numpy as np
import pytest
import torch
from mindspore import Tensor

from course_lib import baichuan, internlm
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.families import llama_config_kwargs
from course_lib.hf_weights import load_state_dict, split_w_pack
from course_lib.pretrained import save_pretrained
from course_lib.internlm import InternLMForCausalLM
from course_lib.memory import build_lazy, count_parameters


def test_internlm_7b_preset_and_count():
    c = internlm.internlm_7b()
    assert (c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size) == (4096, 32, 32, 11008)
    assert (c.vocab_size, c.rms_norm_eps, c.rope_base) == (103168, 1e-6, 10000.0)
    assert c.position == "rope" and c.qkv_bias and c.o_bias and not c.fused_qkv
    # 2*V*h + h + L*(4h^2 + 3hf + 2h + 4h biases), spelled out independently of the code:
    h, f, V, L = 4096, 11008, 103168, 32
    assert 2 * V * h + h + L * (4 * h * h + 4 * h + 3 * h * f + 2 * h) == 7_321_948_160
    assert c.num_parameters() == 7_321_948_160
    assert count_parameters(build_lazy(InternLMForCausalLM, c)) == 7_321_948_160


def test_internlm_shares_the_baichuan_building_blocks():
    from course_lib import layers
    m = InternLMForCausalLM(internlm.tiny())
    attn = m.model.layers[0].self_attn
    assert type(attn) is layers.Attention and type(m.model.layers[0].mlp) is layers.SwiGLU
    assert type(m.model.norm) is layers.RMSNorm
    b = BaichuanForCausalLM(baichuan.tiny())
    assert isinstance(m, layers.CausalLM) and isinstance(b, layers.CausalLM)
    assert type(b.model) is baichuan.BaichuanModel and type(m.model) is internlm.InternLMModel
    assert isinstance(b.model, layers.DecoderModel) and isinstance(m.model, layers.DecoderModel)


def _hf_llama_logits(directory, config, ids, convert=None):
    from transformers import LlamaConfig, LlamaForCausalLM
    hf = LlamaForCausalLM(LlamaConfig(**llama_config_kwargs(config))).eval()
    state = load_state_dict(directory)
    if convert:
        state = convert(state)
    missing, unexpected = hf.load_state_dict(
        {k: torch.from_numpy(np.array(v)) for k, v in state.items()}, strict=True)
    assert not missing and not unexpected
    with torch.no_grad():
        return hf(torch.from_numpy(ids).long()).logits.numpy()


def test_internlm_matches_hf_llama_with_attention_bias(tmp_path):
    cfg = internlm.tiny()
    model = InternLMForCausalLM(cfg)
    # Biases start at zero; give them values so the test can see a wrong bias path.
    for name, p in model.parameters_and_names():
        if name.endswith(".bias"):
            p.set_data(Tensor(np.random.default_rng(len(name)).normal(0, 0.05, p.shape).astype(np.float32)))
    save_pretrained(model, tmp_path / "ckpt")
    ids = np.random.default_rng(0).integers(0, 8000, (2, 16)).astype(np.int32)
    ours = model(Tensor(ids)).asnumpy()
    ref = _hf_llama_logits(tmp_path / "ckpt", cfg, ids)
    diff = float(np.abs(ours - ref).max())
    print(f"InternLM vs HF LlamaForCausalLM(attention_bias=True): max |diff| = {diff:.2e}")
    assert diff < 1e-4


def test_baichuan7b_style_rope_w_pack_matches_hf_llama_after_split(tmp_path):
    cfg = baichuan.tiny(position="rope", name="baichuan-7b-tiny")
    model = BaichuanForCausalLM(cfg)
    save_pretrained(model, tmp_path / "ckpt")
    ids = np.random.default_rng(1).integers(0, 8000, (1, 20)).astype(np.int32)
    ours = model(Tensor(ids)).asnumpy()
    ref = _hf_llama_logits(tmp_path / "ckpt", cfg, ids, convert=split_w_pack)
    diff = float(np.abs(ours - ref).max())
    print(f"Baichuan-7B-style (RoPE + W_pack) vs HF Llama: max |diff| = {diff:.2e}")
    assert diff < 1e-4


def test_llama_config_refuses_alibi():
    with pytest.raises(ValueError, match="ALiBi"):
        llama_config_kwargs(baichuan.tiny())
