"""ch11 checkers. mindnlp patches MindSpore process-wide: it is never imported here. The
LoRA-step checker re-runs itself in a fresh subprocess that imports mindnlp; its reference and
wrong variants are proved there by tests/test_check_self.py (``--self-test ch11``)."""
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


def test_numbers_against_real_transformers(capsys):
    from transformers import LlamaConfig, LlamaForCausalLM
    kw = dict(vocab_size=100, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=4)
    count = lambda bias: sum(p.numel() for p in LlamaForCausalLM(LlamaConfig(**kw, attention_bias=bias)).parameters())  # noqa: E731
    assert ch11.ex2(count(True) - count(False)) and ch11.ex2(np.int64(1024))
    assert not ch11.ex2(2 * 3 * 128) and not ch11.ex2("1024")
    # reference: LoRA r=8 on q_proj and v_proj, hidden 128, 2 layers (A: r x h, B: h x r)
    assert ch11.ex1(2 * 2 * (8 * 128 + 128 * 8)) and not ch11.ex1(2 * 2 * 8 * 128)
    assert ch11.ex3(0.5) and ch11.ex3(np.float32(0.5)) and not ch11.ex3(2.0) and not ch11.ex3(True)
    assert "mindnlp" not in sys.modules
