"""Notebook 06 checkers: number answers computed here independently; code checkers accept the
reference and reject realistic wrong solutions with their hint (python -m course_lib.check)."""
import numpy as np

from course_lib.check import all_exercises, ch06
from course_lib.check.__main__ import self_test_one


def test_ex1_alibi_slopes_for_12_heads(capsys):
    ref = [2 ** -(i + 1) for i in range(8)] + [2 ** (-(2 * k + 1) / 2) for k in range(4)]
    assert ch06.ex1(ref) and ch06.ex1(np.array(ref))
    assert not ch06.ex1([2 ** (-8 * (i + 1) / 12) for i in range(12)])   # naive n=12 formula
    assert not ch06.ex1("0.5") and not ch06.ex1(None)


def test_ex2_one_layer_parameters():
    h, f = 5120, 13696
    assert ch06.ex2(3 * h * h + h * h + 3 * h * f + 2 * h)
    assert ch06.ex2(np.int64(3 * h * h + h * h + 3 * h * f + 2 * h))
    assert not ch06.ex2(3 * h * h + h * h + 3 * h * f)        # forgot the norms
    assert not ch06.ex2(float(3 * h * h + h * h + 3 * h * f + 2 * h) + 1)


def test_ex3_int8_gib():
    assert ch06.ex3(7_000_559_616 / 2 ** 30)                    # Baichuan-7B, 1 byte each
    assert not ch06.ex3(7.0)                                    # GB (1e9), not GiB


def test_ex4_devices():
    # by hand: per device 2+2 bytes/param / 8 (weights, grads) + 12 bytes/param / (8 dp)
    # + activations; the planner needs dp = 3 -> 24 devices
    assert ch06.ex4(24) and ch06.ex4(np.int32(24))
    assert not ch06.ex4(8) and not ch06.ex4(16)


def test_code_checkers_accept_reference_and_reject_wrong_with_hint():
    exercises = all_exercises()
    for name in ("ch06.rms_norm", "ch06.alibi_slopes", "ch06.attention_bias", "ch06.decoder_layer"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2
        assert self_test_one(exercises[name]) == []


def test_scaffold_says_not_implemented(capsys):
    def scaffold(num_heads):
        raise NotImplementedError
    assert not ch06.alibi_slopes(scaffold)
    assert "还没有实现" in capsys.readouterr().out
