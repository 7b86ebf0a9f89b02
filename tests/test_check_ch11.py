"""ch11 checkers. mindnlp patches MindSpore process-wide: it is never imported here. The
LoRA-step checker re-runs itself in a fresh subprocess that imports mindnlp; its reference and
wrong variants are proved there by tests/test_check_self.py (``--self-test ch11``)."""
import dataclasses
import sys

import numpy as np
import pytest

from course_lib.check import ch11
from course_lib.check.__main__ import self_test_one
from course_lib.check.common import EXERCISES


@pytest.mark.parametrize("name", ["ch11.llama_kwargs", "ch11.ex1", "ch11.ex2", "ch11.ex3"])
def test_self_test_in_process(name):
    assert self_test_one(EXERCISES[name]) == []
    assert "mindnlp" not in sys.modules


def test_lora_step_defined_in_this_process_is_not_run_here(capsys):
    def mine(loss_fn, params, batch, lr):
        return 0.0
    assert not ch11.lora_sgd_step(mine)
    assert "mindnlp 的内核" in capsys.readouterr().out
    assert "mindnlp" not in sys.modules


def _llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM
    size = dict(vocab_size=8000, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, attention_bias=True)
    return LlamaForCausalLM(LlamaConfig(**{**size, **kw}))


def test_numbers_against_real_transformers_and_peft(capsys):
    import torch
    from peft import LoraConfig, get_peft_model
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # ex2: 2 KV heads: q and o biases 128 wide, k and v 2 x 32 = 64 wide, in 2 layers
    gqa = count(_llama(num_key_value_heads=2)) - count(_llama(num_key_value_heads=2, attention_bias=False))
    assert gqa == 768 and ch11.ex2(gqa) and ch11.ex2(np.int64(768))
    assert not ch11.ex2(1024) and not ch11.ex2("768")                 # 1024: as if 4 KV heads
    # ex1: what print_trainable_parameters prints: 100 * trainable / (base + adapters)
    torch.manual_seed(0)
    model = get_peft_model(_llama(), LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM",
                                                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    trainable, total = model.get_nb_trainable_parameters()
    assert (trainable, total) == (32_768, 2_451_072 + 32_768)
    assert ch11.ex1(round(100 * trainable / total, 4)) and ch11.ex1(np.float32(100 * trainable / total))
    assert not ch11.ex1(round(100 * trainable / 2_451_072, 4))        # the base alone as the total
    # ex3: merge_and_unload adds (lora_alpha / r) B @ A: 8 / 16 * 16 * 0.01 * 0.02 to every element
    model = get_peft_model(_llama(), LoraConfig(r=16, lora_alpha=8, task_type="CAUSAL_LM",
                                                target_modules=["q_proj", "v_proj"]))
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    before = q.base_layer.weight.detach().clone()
    with torch.no_grad():
        q.lora_B["default"].weight.fill_(0.01)
        q.lora_A["default"].weight.fill_(0.02)
    merged = model.merge_and_unload().model.layers[0].self_attn.q_proj.weight.detach()
    delta = (merged - before).numpy()
    assert np.allclose(delta, delta.flat[0]) and ch11.ex3(float(delta.flat[0]))
    assert ch11.ex3(0.0016) and not ch11.ex3(0.0001) and not ch11.ex3(0.0064) and not ch11.ex3(True)
    assert "mindnlp" not in sys.modules


def test_fresh_process_result_is_recorded_here(monkeypatch, capsys):
    """The child's observations and verdict become this process's record of the call."""
    from course_lib.check.common import Observation, Recorded, recording
    from course_lib.grade.judge import encode_record
    from course_lib.solutions import ch11 as sol
    child = Recorded("ch11.lora_sgd_step", False, "第 2 步……", True,
                     (Observation("第 1 步之后的 LoRA 参数", [np.ones((2, 3))], None, 1e-6, 1e-4),
                      Observation("第 1 步返回的损失", 4.1, 4.1, 1e-5, 1e-4)))
    printed = "[ch11.lora_sgd_step] ❌ 还不对。提示：第 2 步……\n"
    monkeypatch.setattr(ch11, "run_isolated", lambda *a, **k: {"ok": False, "printed": printed,
                                                                 "records": [encode_record(child)]})
    with recording() as found:
        assert not ch11.lora_sgd_step(sol.wrong_accumulate)
    assert capsys.readouterr().out == printed
    run = found[-1]
    assert (run.exercise, run.passed, run.hint, run.attempted) == ("ch11.lora_sgd_step", False, "第 2 步……", True)
    assert [o.what for o in run.observations] == ["第 1 步之后的 LoRA 参数", "第 1 步返回的损失"]
    assert run.observations[1].want == 4.1 and np.array_equal(run.observations[0].got[0], np.ones((2, 3)))
    assert run.provenance["module"] == "course_lib.solutions.ch11"      # this process's, not the child's


def test_lora_step_in_a_fresh_process_is_recorded_here():
    """Outside a mindnlp kernel the checker runs in a child; the grader still gets every
    step's parameters and loss (3 steps) as observations, and the verdict."""
    from course_lib.check.common import recording
    from course_lib.grade.judge import judge_run
    from course_lib.solutions import ch11 as sol
    with recording() as found:
        assert ch11.lora_sgd_step(sol.lora_sgd_step)
    run = found[-1]
    assert run.exercise == "ch11.lora_sgd_step" and run.passed
    assert [o.what for o in run.observations] == [f"第 {s} 步{w}" for s in (1, 2, 3)
                                                 for w in ("之后的 LoRA 参数", "返回的损失")]
    run = dataclasses.replace(run, provenance=None)            # the reference is not borrowed
    assert judge_run(run, run).verdict == "pass"
    assert "mindnlp" not in sys.modules


def test_hidden_config_is_drawn_anew_per_grading_session(monkeypatch):
    fixed = ch11._hidden_configs()
    monkeypatch.setenv("COURSE_CHECK_SALT", "7")
    salted = ch11._hidden_configs()
    assert fixed[:2] == salted[:2] and fixed[2] != salted[2]
    assert salted[2].hidden_size % salted[2].num_heads == 0


def test_llama_kwargs_hints_say_which_field_differs_not_its_value(capsys):
    """A hint names the field that differs and what the learner's dict gave; it never states
    the value the reference expects (copying hints would otherwise fill in every field)."""
    from course_lib.families import llama_config_kwargs
    from course_lib.internlm import tiny
    want = llama_config_kwargs(tiny())

    def no_length(config):
        got = llama_config_kwargs(config)
        del got["max_position_embeddings"]                  # LlamaConfig's default (2048) applies
        return got
    assert not ch11.llama_kwargs(no_length)
    out = capsys.readouterr().out
    assert "max_position_embeddings" in out and "默认值" in out
    assert str(want["max_position_embeddings"]) not in out


def test_llama_kwargs_accepts_what_any_transformers_config_takes(capsys):
    """A right answer copied partly from a config.json (``torch_dtype``, ``architectures``,
    ``model_type``) describes the same network: it passes. A name neither LlamaConfig nor
    PretrainedConfig knows still fails with the hint about silently ignored names."""
    from course_lib.solutions import ch11 as sol
    extras = dict(torch_dtype="bfloat16", architectures=["LlamaForCausalLM"], model_type="llama")
    assert ch11.llama_kwargs(lambda config: {**sol.llama_kwargs(config), **extras})
    assert not ch11.llama_kwargs(lambda config: {**sol.llama_kwargs(config), "hidden": 8})
    assert "LlamaConfig 没有参数 ['hidden']" in capsys.readouterr().out


def test_llama_kwargs_takes_swish_for_silu_but_not_another_activation(capsys):
    """transformers maps "swish" and "silu" to the same nn.SiLU: the same network, so it passes;
    "gelu" is another network and fails on hidden_act."""
    from course_lib.solutions import ch11 as sol
    assert ch11.llama_kwargs(lambda config: {**sol.llama_kwargs(config), "hidden_act": "swish"})
    assert not ch11.llama_kwargs(lambda config: {**sol.llama_kwargs(config), "hidden_act": "gelu"})
    assert "hidden_act" in capsys.readouterr().out


def test_llama_kwargs_rejects_another_setting_that_changes_the_network(capsys):
    """LlamaConfig arguments the reference leaves at their defaults are compared too: a wrong
    ``head_dim`` or a ``rope_scaling`` is another network; ``head_dim`` spelled out as hidden /
    heads, or token ids and ``use_cache``, leave it the same."""
    from course_lib.solutions import ch11 as sol
    for extra in ({"head_dim": 3}, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
                  {"attention_dropout": 0.1}):
        assert not ch11.llama_kwargs(lambda config: {**sol.llama_kwargs(config), **extra}), extra
        assert f"还改了 LlamaConfig 的 {sorted(extra)}" in capsys.readouterr().out
    same = lambda config: {**sol.llama_kwargs(config), "use_cache": False, "pad_token_id": 0,
                           "head_dim": config.hidden_size // config.num_heads}
    assert ch11.llama_kwargs(same), capsys.readouterr().out
