"""Notebook 06 checkers: number answers computed here independently; code checkers accept the
reference and reject realistic wrong solutions with their hint (python -m course_lib.check)."""
import numpy as np

from course_lib.check import all_exercises, ch06
from course_lib.check.__main__ import self_test_one
from judging import judged as _judged


def test_ex1_alibi_slopes_for_24_heads(capsys):
    # by hand: 16 heads -> 2^(-0.5 (i+1)); then every other slope of 32 heads, 2^(-0.25 (2k+1))
    ref = [2 ** (-(i + 1) / 2) for i in range(16)] + [2 ** (-(2 * k + 1) / 4) for k in range(8)]
    assert ch06.ex1(ref) and ch06.ex1(np.array(ref))
    assert not ch06.ex1([2 ** (-8 * (i + 1) / 24) for i in range(24)])   # naive n=24 formula
    assert not ch06.ex1(ref[:16] + [2 ** (-(2 * k + 2) / 4) for k in range(8)])   # odd indices
    assert not ch06.ex1(sorted(ref, reverse=True))                           # interleaved order lost
    assert not ch06.ex1("0.5") and not ch06.ex1(None)
    capsys.readouterr()
    ch06.ex1(None)                  # the notebook's example call: a hint that gives nothing away
    out = capsys.readouterr().out
    assert "❌" in out and "0.7071" not in out and "16" not in out


def test_ex2_one_internlm_7b_layer_with_biases():
    h, f = 4096, 11008                                      # InternLM-7B
    assert ch06.ex2(4 * h * h + 4 * h + 3 * h * f + 2 * h)
    assert ch06.ex2(np.int64(4 * h * h + 4 * h + 3 * h * f + 2 * h))
    assert not ch06.ex2(4 * h * h + 3 * h * f + 2 * h)      # forgot the q/k/v/o biases: Baichuan-7B's layer
    assert not ch06.ex2(4 * h * h + 4 * h + 3 * h * f)      # forgot the norms
    assert not ch06.ex2(float(4 * h * h + 4 * h + 3 * h * f + 2 * h) + 1)


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


def test_the_judge_accepts_another_correct_bias(capsys):
    """-inf instead of -1e4, float64, one (1, 1, T, S) mask when there is no padding and no
    ALiBi: the observed attention weights are the reference's, so the grader passes it."""
    from course_lib.layers import attention_bias
    from course_lib.solutions import ch06 as sol

    def other_bias(query_len, key_len, attention_mask=None, slopes=None):
        bias = np.asarray(attention_bias(query_len, key_len, attention_mask, slopes).asnumpy(), np.float64)
        return np.where(bias <= -1e3, -np.inf, bias)
    assert _judged(ch06.attention_bias, other_bias, sol.attention_bias) == "pass"
    assert _judged(ch06.attention_bias, sol.wrong_bias_no_padding, sol.attention_bias) == "fail"
