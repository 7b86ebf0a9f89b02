"""Hugging Face-layout checkpoints: round trips (single file, sharded, bf16, torch .bin)
and bad checkpoints that must fail with errors saying what to do."""
import json

import ml_dtypes
import numpy as np
import pytest
import torch
from mindspore import Tensor

from course_lib import baichuan, internlm
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.families import config_from_hf, hf_config
from course_lib.hf_weights import (CheckpointError, convert_torch_checkpoint, fuse_qkv,
                                   load_state_dict, load_weights, read_safetensors,
                                   split_w_pack, state_dict)
from course_lib.pretrained import from_pretrained, save_pretrained


def load_pretrained(directory):
    """The float32 model of a directory, through the course's one loader."""
    return from_pretrained(directory, dtype="float32", verbose=False)
from course_lib.internlm import InternLMForCausalLM

IDS = Tensor(np.arange(1, 13, dtype=np.int32).reshape(2, 6))


@pytest.fixture(scope="module")
def model():
    return BaichuanForCausalLM(baichuan.tiny(hidden_size=32, num_heads=4))


@pytest.fixture(scope="module")
def ckpt(model, tmp_path_factory):
    return save_pretrained(model, tmp_path_factory.mktemp("ckpt") / "tiny")


def test_save_writes_hf_names_and_config(ckpt, model):
    names = set(read_safetensors(ckpt / "model.safetensors"))
    assert "model.layers.0.self_attn.W_pack.weight" in names and "lm_head.weight" in names
    assert names == set(model.config.parameter_shapes())
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["model_type"] == "baichuan" and cfg["position_embedding"] == "alibi"


def test_round_trip_reproduces_logits(ckpt, model):
    loaded = load_pretrained(ckpt)
    assert loaded.config == model.config
    np.testing.assert_array_equal(loaded(IDS).asnumpy(), model(IDS).asnumpy())


def test_sharded_checkpoint_with_index(model, tmp_path):
    paths = save_pretrained(model, tmp_path / "sh", max_shard_bytes=200_000)
    index = json.loads((tmp_path / "sh" / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and paths == tmp_path / "sh"
    fresh = BaichuanForCausalLM(model.config)
    load_weights(fresh, tmp_path / "sh")
    np.testing.assert_array_equal(fresh(IDS).asnumpy(), model(IDS).asnumpy())
    (tmp_path / "sh" / sorted(shards)[-1]).unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_state_dict(tmp_path / "sh")


def test_bf16_and_fp16_files_are_read_exactly(tmp_path):
    from safetensors.torch import save_file
    t = torch.randn(5, 7)
    save_file({"a": t.to(torch.bfloat16), "b": t.half()}, str(tmp_path / "x.safetensors"))
    got = read_safetensors(tmp_path / "x.safetensors")
    assert got["a"].dtype == ml_dtypes.bfloat16 and got["b"].dtype == np.float16   # not widened
    np.testing.assert_array_equal(got["a"].astype(np.float32), t.to(torch.bfloat16).float().numpy())
    np.testing.assert_array_equal(got["b"], t.half().numpy())


def test_torch_bin_conversion(model, tmp_path):
    src = tmp_path / "bin"
    src.mkdir()
    sd = state_dict(model)
    names = sorted(sd)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:]), 1):   # two .bin shards, bf16
        fname = f"pytorch_model-0000{i}-of-00002.bin"
        torch.save({k: torch.from_numpy(sd[k]).to(torch.bfloat16) for k in part}, src / fname)
        weight_map.update({k: fname for k in part})
    (src / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (src / "config.json").write_text(json.dumps(hf_config(model.config)))
    # a fine-tuning export's training_args.bin is a pickled Python object: never read
    (src / "training_args.bin").write_bytes(b"\x80\x04\x95not weights")
    ref = {k: torch.from_numpy(v).to(torch.bfloat16).float().numpy() for k, v in sd.items()}
    direct = load_pretrained(src)                       # .bin loads directly, through the index
    dst = convert_torch_checkpoint(src, tmp_path / "st")  # and converts losslessly
    for loaded in (direct, load_pretrained(dst)):
        for k, v in state_dict(loaded).items():
            np.testing.assert_array_equal(v, ref[k])


def test_fuse_and_split_are_inverse(model):
    sd = state_dict(model)
    split = split_w_pack(sd)
    assert "model.layers.0.self_attn.q_proj.weight" in split and not any("W_pack" in k for k in split)
    back = fuse_qkv(split)
    assert set(back) == set(sd)
    for k in sd:
        np.testing.assert_array_equal(back[k], sd[k])


# ------------------------------------------------------------------ bad checkpoints
def test_missing_key(model):
    sd = state_dict(model)
    del sd["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(CheckpointError, match=r"missing in checkpoint \(1\).*up_proj"):
        load_weights(BaichuanForCausalLM(model.config), sd)


def test_extra_key(model):
    sd = state_dict(model)
    sd["model.layers.9.mlp.up_proj.weight"] = sd["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(CheckpointError, match=r"extra layers in checkpoint \(1\).*layers\.9.*more layers"):
        load_weights(BaichuanForCausalLM(model.config), sd)


def test_wrong_shape(model):
    other = BaichuanForCausalLM(baichuan.tiny(hidden_size=64, num_heads=4))
    with pytest.raises(CheckpointError, match=r"shape mismatch.*another configuration"):
        load_weights(other, state_dict(model))


def test_wrong_family_both_ways(model):
    intern = InternLMForCausalLM(internlm.tiny(hidden_size=32, num_heads=4))
    with pytest.raises(CheckpointError, match=r"Baichuan-format.*BaichuanForCausalLM \(the model's q/k/v/o biases") as e:
        load_weights(intern, state_dict(model))
    message = str(e.value)
    assert message.count("Baichuan-format") == 1          # one cause for both lists, said once
    missing = next(line for line in message.splitlines() if "missing in checkpoint" in line)
    count = int(missing.split("(")[1].split(")")[0])
    assert count > 4 and f"and {count - 4} more" in missing  # a cut list says how much was cut
    with pytest.raises(CheckpointError, match=r"InternLM/Llama format.*InternLMForCausalLM \(the checkpoint's q/k/v/o biases"):
        load_weights(BaichuanForCausalLM(model.config), state_dict(intern))


def test_a_qkv_conversion_is_offered_only_where_no_bias_is_in_the_way(model):
    """fuse_qkv / split_w_pack move no bias: offered for a bias-free checkpoint only (before
    2026-12-07 the message offered fuse_qkv for an InternLM checkpoint, whose biases it keeps)."""
    intern = InternLMForCausalLM(internlm.tiny(hidden_size=32, num_heads=4))
    no_bias = {k: v for k, v in state_dict(intern).items() if not k.endswith("_proj.bias")}
    with pytest.raises(CheckpointError, match=r"InternLM/Llama format.*or convert the state dict with fuse_qkv"):
        load_weights(BaichuanForCausalLM(model.config), no_bias)
    with pytest.raises(CheckpointError) as err:
        load_weights(BaichuanForCausalLM(model.config), state_dict(intern))
    assert "fuse_qkv(state)" not in str(err.value)


def test_integer_tensor_rejected(model):
    sd = state_dict(model)
    sd["model.norm.weight"] = sd["model.norm.weight"].astype(np.int64)
    with pytest.raises(CheckpointError, match="not floating point"):
        load_weights(BaichuanForCausalLM(model.config), sd)


def test_truncated_and_garbage_files(ckpt, tmp_path):
    data = (ckpt / "model.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        read_safetensors(tmp_path / "cut.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00hello")
    with pytest.raises(CheckpointError, match="unreadable header"):
        read_safetensors(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        load_state_dict(tmp_path / "nowhere")


def test_failed_load_leaves_the_model_untouched(model):
    target = BaichuanForCausalLM(model.config)
    before = state_dict(target)
    sd = state_dict(model)
    sd["lm_head.weight"] = sd["lm_head.weight"][:, :5]
    with pytest.raises(CheckpointError):
        load_weights(target, sd)
    for k, v in state_dict(target).items():
        np.testing.assert_array_equal(v, before[k])


# ------------------------------------------------------------------ configs
def test_config_from_real_style_config_json():
    b13 = {"model_type": "baichuan", "hidden_size": 5120, "intermediate_size": 13696,
           "num_attention_heads": 40, "num_hidden_layers": 40, "vocab_size": 64000,
           "model_max_length": 4096, "rms_norm_eps": 1e-6}
    assert config_from_hf(b13).num_parameters() == 13_264_901_120
    assert config_from_hf(b13).position == "alibi"
    b7 = {"model_type": "baichuan", "hidden_size": 4096, "intermediate_size": 11008,
          "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 64000,
          "max_position_embeddings": 4096, "rms_norm_eps": 1e-6}
    assert config_from_hf(b7).position == "rope"
    assert config_from_hf(b7).num_parameters() == 7_000_559_616
    gqa = dict(b7, model_type="llama", num_key_value_heads=8)      # Llama with GQA now loads
    assert (config_from_hf(gqa).kv_heads, config_from_hf(gqa).num_heads) == (8, 32)
    with pytest.raises(CheckpointError, match="Unknown model_type"):
        config_from_hf(dict(b7, model_type="gpt2"))


def test_config_json_round_trip_for_both_families():
    for cfg in (baichuan.tiny(), baichuan.baichuan_7b(), internlm.internlm_7b(), internlm.tiny()):
        assert config_from_hf(hf_config(cfg)) == cfg


# ------------------------------------------------------------------ diagnoses
def test_key_inside_an_existing_layer_is_not_called_an_extra_layer(model):
    sd = state_dict(model)
    sd["model.layers.0.self_attn.o_proj.bias"] = np.zeros(32, np.float32)
    with pytest.raises(CheckpointError, match=r"unexpected inside existing layers \(1\).*o_proj\.bias.*config flag") as e:
        load_weights(BaichuanForCausalLM(model.config), sd)
    assert "more layers" not in str(e.value)


def test_rotary_buffers_are_skipped_and_listed(model):
    sd = state_dict(model)
    sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(4, np.float32)
    report = load_weights(BaichuanForCausalLM(model.config), sd)
    assert report["skipped"] == ["model.layers.0.self_attn.rotary_emb.inv_freq"]


def test_bin_file_given_as_safetensors_says_pickle(tmp_path):
    torch.save({"w": torch.ones(3)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="PyTorch pickle"):
        read_safetensors(tmp_path / "pytorch_model.bin")


def test_missing_directory_and_file_instead_of_directory(tmp_path, ckpt):
    with pytest.raises(FileNotFoundError, match="No directory"):
        load_pretrained(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="is a file; pass the model DIRECTORY"):
        load_pretrained(ckpt / "model.safetensors")


def test_bad_bin_shards_get_their_diagnosis(model, tmp_path):
    from course_lib.migration.convert import UnsafeCheckpointError
    sd = state_dict(model)
    src = tmp_path / "bad"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(hf_config(model.config)))
    (src / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"weight_map": {k: "pytorch_model.bin" for k in sd}}))
    torch.save({**{k: torch.from_numpy(v) for k, v in sd.items()}, "step": 3}, src / "pytorch_model.bin")
    with pytest.raises(UnsafeCheckpointError, match="non-tensor entries.*step"):
        load_pretrained(src)
    torch.save({k: torch.from_numpy(v) for k, v in sd.items()}, src / "pytorch_model.bin")
    data = (src / "pytorch_model.bin").read_bytes()
    (src / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_pretrained(src)
    (src / "pytorch_model.bin").unlink()
    with pytest.raises(CheckpointError, match=r"lists shard\(s\) \['pytorch_model.bin'\] that are missing"):
        load_pretrained(src)


def test_baichuan_position_comes_from_evidence_not_width():
    base = {"model_type": "baichuan", "hidden_size": 256, "intermediate_size": 688,
            "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000}
    assert config_from_hf(dict(base, architectures=["BaichuanForCausalLM"],
                               model_max_length=4096)).position == "alibi"   # 13B layout, any width
    assert config_from_hf(dict(base, architectures=["BaiChuanForCausalLM"],
                               max_position_embeddings=4096)).position == "rope"
    assert config_from_hf(dict(base, model_max_length=4096)).position == "alibi"
    for unclear in (base, dict(base, model_max_length=8, max_position_embeddings=8),
                    dict(base, architectures=["BaichuanForCausalLM"], max_position_embeddings=8)):
        with pytest.raises(CheckpointError, match='add "position_embedding"'):
            config_from_hf(unclear)
    # Baichuan2 names both sizes BaichuanForCausalLM: 7B alone has max_position_embeddings
    b2 = dict(base, vocab_size=125696, architectures=["BaichuanForCausalLM"], model_max_length=4096)
    assert (config_from_hf(b2).position, config_from_hf(b2).norm_head) == ("alibi", True)
    assert config_from_hf(dict(b2, max_position_embeddings=4096)).position == "rope"
    assert config_from_hf(dict(base, model_type="internlm2")).grouped_qkv
