"""python -m course_lib.finetune: LoRA (chapter 08's) on an InternLM-7B look-alike on CPU, and
the per-device plan for the real model."""
import json
import subprocess
import sys

import numpy as np
from mindspore import Tensor

from course_lib import finetune, from_pretrained, lookalike, memory
from course_lib.internlm import internlm_7b
from course_lib.lora import load_adapter


def test_lora_on_a_lookalike_learns_and_its_adapter_loads_back(tmp_path):
    d = lookalike.write_lookalike(tmp_path / "internlm-chat-7b", "internlm", dtype="float16")
    rows = [{"messages": [{"role": "user", "content": "今天天气怎么样？"},
                          {"role": "assistant", "content": "今天是晴天。"}]}] * 4
    (tmp_path / "chats.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    out = finetune.run(d, tmp_path / "chats.jsonl", steps=12, lr=2e-2, batch_size=2, max_len=48,
                       out=tmp_path / "adapter.safetensors", verbose=False)
    assert out["loss"][-1] < out["loss"][0] - 0.2        # 7.98 -> 7.60 measured
    base = from_pretrained(d, "float32", verbose=False)
    ids = Tensor(np.arange(3, 15, dtype=np.int32)[None])
    before = base(ids).asnumpy()
    report = load_adapter(base, out["adapter"])
    assert sorted(l.name for l in report.replaced)[:1] == ["model.layers.0.self_attn.q_proj"]
    assert np.abs(base(ids).asnumpy() - before).max() > 1e-4


def test_plan_for_the_real_internlm_7b_on_one_64gb_device():
    cfg = internlm_7b()
    plan, fits = finetune.lora_plan(cfg, ("q_proj", "v_proj"), r=8, device_gib=64, seq_len=2048)
    trainable = 32 * 8 * 2 * (2 * 4096)                 # r x (in + out) per q/v layer
    assert plan.weights == 2 * (cfg.num_parameters() + trainable) and fits
    assert plan.optimizer_states == 8 * trainable and plan.master_weights == 4 * trainable
    assert not finetune.lora_plan(cfg, ("q_proj", "v_proj"), 8, device_gib=12, seq_len=2048)[1]
    cli = subprocess.run([sys.executable, "-m", "course_lib.finetune", "--plan-only",
                          "internlm-7b", "--max-len", "2048"], capture_output=True, text=True,
                         timeout=300)
    assert cli.returncode == 0 and "'weights': 13.65" in cli.stdout and "fits" in cli.stdout
    assert round(memory.weight_bytes(cfg, "bf16") / memory.GiB, 2) == 13.64


def test_the_plan_counts_activations_as_the_training_loop_keeps_them():
    """``run`` trains without recomputation, so the plan it prints and checks must not assume
    it: Baichuan-13B LoRA at 2 x 2048 fits one 64 GiB device only with full recomputation."""
    from course_lib.baichuan import baichuan_13b
    cfg = baichuan_13b()
    kept, fits = finetune.lora_plan(cfg, ("W_pack",), 8, device_gib=64, seq_len=2048, micro_batch=2)
    assert kept.activations == memory.activation_bytes(cfg, 2, 2048, "bf16", recompute=False) and not fits
    assert finetune.lora_plan(cfg, ("W_pack",), 8, 64, 2048, 2, recompute=True)[1]
    cli = subprocess.run([sys.executable, "-m", "course_lib.finetune", "--plan-only", "baichuan-13b",
                          "--max-len", "2048"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and "no recomputation" in cli.stdout and "DOES NOT FIT" in cli.stdout


def test_cli_reports_a_directory_without_weights_clearly(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "no messages"}\n')
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(lookalike.real_config("internlm", vocab_size=100)))
    cli = subprocess.run([sys.executable, "-m", "course_lib.finetune", "--model-dir", str(d),
                          "--data", str(tmp_path / "bad.jsonl"), "--steps", "2"],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 2 and "it is not a model directory" in cli.stderr
