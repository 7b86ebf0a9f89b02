"""PyTorch/HF checkpoints <-> MindSpore .ckpt, checked against Hugging Face transformers
running on the real PyTorch (an independent implementation of the same network)."""
import json
import os
import pickle

import numpy as np
import pytest
import torch
from mindspore import Tensor

from course_lib import families, hf_weights, internlm
from course_lib.internlm import InternLMForCausalLM
from course_lib.migration import convert
from course_lib.migration.convert import CheckpointError, UnsafeCheckpointError

CFG = internlm.tiny(vocab_size=320, hidden_size=64, num_layers=2, num_heads=4,
                    intermediate_size=172, max_seq_len=64)
IDS = np.random.default_rng(0).integers(0, CFG.vocab_size, (2, 12))


@pytest.fixture(scope="module")
def hf_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**families.llama_config_kwargs(CFG))).eval()
    with torch.no_grad():   # non-trivial norm weights and biases, so a mix-up would show
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.fixture(scope="module")
def hf_dir(hf_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    hf_model.save_pretrained(d, safe_serialization=True)
    return d


def torch_logits(model):
    with torch.no_grad():
        return model(torch.tensor(IDS)).logits.numpy()


def course_logits(model):
    return model(Tensor(IDS.astype(np.int32))).asnumpy()


def test_hf_safetensors_to_ckpt_gives_transformers_logits(hf_model, hf_dir, tmp_path):
    report = convert.torch_to_mindspore(hf_dir, tmp_path / "m.ckpt")   # config.json: llama
    n_params = sum(p.numel() for p in hf_model.parameters())
    assert report.tensors == len(hf_model.state_dict()) and report.parameters == n_params
    assert report.cast == [] and not report.missing and not report.unexpected
    model = InternLMForCausalLM(CFG)
    assert convert.load_mindspore_checkpoint(model, tmp_path / "m.ckpt")["loaded"] == report.tensors
    np.testing.assert_allclose(course_logits(model), torch_logits(hf_model), atol=2e-5, rtol=0)


def test_bin_and_safetensors_convert_to_identical_ckpt(hf_model, hf_dir, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torch.save(hf_model.state_dict(), bin_dir / "pytorch_model.bin")
    convert.torch_to_mindspore(bin_dir / "pytorch_model.bin", tmp_path / "a.ckpt", config=CFG)
    convert.torch_to_mindspore(hf_dir, tmp_path / "b.ckpt")
    a = convert.read_mindspore_checkpoint(tmp_path / "a.ckpt")
    b = convert.read_mindspore_checkpoint(tmp_path / "b.ckpt")
    assert convert.max_state_diff(a, b) == 0.0


def test_round_trip_is_bit_exact_and_loads_back_into_torch(hf_model, hf_dir, tmp_path):
    convert.torch_to_mindspore(hf_dir, tmp_path / "m.ckpt")
    report = convert.mindspore_to_torch(tmp_path / "m.ckpt", tmp_path / "back", CFG)
    back = hf_weights.load_state_dict(tmp_path / "back")
    original = {k: v.numpy() for k, v in hf_model.state_dict().items()}
    assert convert.max_state_diff(original, back) == 0.0 and report.skipped == []
    assert json.loads((tmp_path / "back" / "config.json").read_text())["model_type"] == "internlm"
    from transformers import LlamaConfig, LlamaForCausalLM
    fresh = LlamaForCausalLM(LlamaConfig(**families.llama_config_kwargs(CFG))).eval()
    fresh.load_state_dict({k: torch.tensor(np.array(v)) for k, v in back.items()}, strict=True)
    np.testing.assert_array_equal(torch_logits(fresh), torch_logits(hf_model))


def test_fp16_file_is_cast_and_reported(hf_model, tmp_path):
    half = {k: v.half().numpy() for k, v in hf_model.state_dict().items()}
    hf_weights.save_state_dict(half, tmp_path / "h")
    report = convert.torch_to_mindspore(tmp_path / "h", tmp_path / "h.ckpt", config=CFG)
    assert report.source_dtypes == {"float16": len(half)}
    assert report.target_dtypes == {"float32": len(half)} and len(report.cast) == len(half)
    got = convert.read_mindspore_checkpoint(tmp_path / "h.ckpt")
    assert convert.max_state_diff(got, {k: v.astype(np.float32) for k, v in half.items()}) == 0.0


class _Exploit:
    """What a malicious checkpoint does: run code while being unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_refuses_pickle_that_would_run_code(tmp_path):
    marker = str(tmp_path / "pwned")
    path = tmp_path / "evil.bin"
    with open(path, "wb") as f:
        pickle.dump({"model.norm.weight": _Exploit(marker)}, f, protocol=2)
    with pytest.raises(UnsafeCheckpointError, match="not a plain tensor checkpoint.*refused"):
        convert.load_torch_bin(path)
    assert not os.path.exists(marker)           # nothing was executed
    torch.save({"w": torch.ones(2), "note": "hi"}, tmp_path / "mixed.bin")
    with pytest.raises(UnsafeCheckpointError, match="non-tensor entries.*note"):
        convert.load_torch_bin(tmp_path / "mixed.bin")


def test_strict_name_and_shape_errors(hf_model, tmp_path):
    state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
    dropped = dict(state)
    dropped.pop("model.norm.weight")
    hf_weights.save_state_dict(dropped, tmp_path / "miss")
    with pytest.raises(CheckpointError, match=r"missing in checkpoint \(1\).*model.norm.weight"):
        convert.torch_to_mindspore(tmp_path / "miss", tmp_path / "x.ckpt", config=CFG)
    hf_weights.save_state_dict(state, tmp_path / "full")
    with pytest.raises(CheckpointError, match="shape mismatch"):
        convert.torch_to_mindspore(tmp_path / "full", tmp_path / "x.ckpt",
                                   config=CFG.replace(intermediate_size=180))
    (tmp_path / "w.npz").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="Unknown checkpoint type '.npz'"):
        convert.torch_to_mindspore(tmp_path / "w.npz", tmp_path / "x.ckpt", config=CFG)
    with pytest.raises(FileNotFoundError, match="pass the course config"):
        convert.torch_to_mindspore(tmp_path / "miss", tmp_path / "x.ckpt")


def test_training_checkpoint_skips_optimizer_state(hf_dir, tmp_path):
    import mindspore as ms
    convert.torch_to_mindspore(hf_dir, tmp_path / "m.ckpt")
    weights = ms.load_checkpoint(str(tmp_path / "m.ckpt"))
    extra = [{"name": "adam_m.lm_head.weight", "data": Tensor(weights["lm_head.weight"].asnumpy())},
             {"name": "global_step", "data": Tensor(np.array([7], np.int32))}]
    ms.save_checkpoint([{"name": k, "data": v} for k, v in weights.items()] + extra,
                       str(tmp_path / "train.ckpt"))
    report = convert.mindspore_to_torch(tmp_path / "train.ckpt", tmp_path / "out", CFG)
    assert report.skipped == ["adam_m.lm_head.weight", "global_step"]
    assert report.tensors == len(weights)


def test_corrupt_ckpt_is_a_clear_error(tmp_path):
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable MindSpore checkpoint"):
        convert.mindspore_to_torch(tmp_path / "bad.ckpt", tmp_path / "o", CFG)
