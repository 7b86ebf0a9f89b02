"""Notebook 06 checkers: number answers computed here independently; code checkers accept the
reference and reject realistic wrong solutions with their hint (python -m course_lib.check)."""
import numpy as np

from course_lib.check import all_exercises, ch06
from judging import judged as _judged


def test_ex1_alibi_slopes_of_112_heads(capsys):
    # by hand: c = 64 -> heads 0..63 are 2^(-8(h+1)/64); heads 64..111 are every other slope of
    # 128 heads from index 0, 2^(-8(2k+1)/128)
    ref = [2 ** -(1 / 8), 2 ** -8, 2 ** -(1 / 16), 2 ** -(8 * 95 / 128)]
    assert ch06.ex1(ref) and ch06.ex1(np.array(ref))
    assert ch06.ex1([0.9170, 0.003906, 0.9576, 0.01632])            # 4 significant digits
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    bloom = build_alibi_tensor(torch.ones(1, 2), 112, torch.float32).reshape(112, 2)[:, 1].numpy()
    assert ch06.ex1([float(bloom[h]) for h in (0, 63, 64, 111)])     # BLOOM's own implementation
    assert not ch06.ex1([2 ** (-8 * (h + 1) / 112) for h in (0, 63, 64, 111)])   # naive n=112 formula
    assert not ch06.ex1(ref[:2] + [2 ** -(8 * 2 / 128), 2 ** -(8 * 96 / 128)])    # odd indices
    assert not ch06.ex1("0.5") and not ch06.ex1(None)
    capsys.readouterr()
    ch06.ex1(0)                     # the notebook's example call: a hint that gives nothing away
    out = capsys.readouterr().out
    assert "❌" in out and "0.917" not in out and "64" not in out


def test_ex2_internlm_7b_minus_baichuan_7b():
    h, f, L = 4096, 11008, 32                               # the same in both
    v_internlm, v_baichuan = 103168, 64000
    tables = 2 * (v_internlm - v_baichuan) * h              # embed_tokens + untied lm_head
    layers = L * 4 * h                                      # the q/k/v/o biases
    assert ch06.ex2([tables, layers]) and ch06.ex2(np.array([tables, layers]))
    assert not ch06.ex2([tables, 0])                        # forgot the biases
    assert not ch06.ex2([tables // 2, layers])              # one vocabulary table only
    assert not ch06.ex2([tables, 4 * h])                    # one layer only
    assert not ch06.ex2(tables + layers)                    # one number, not the split


def test_ex3_kv_tokens_beside_int8_weights():
    params, L, h = 13_264_901_120, 40, 5120                 # Baichuan-13B, printed in section 6
    free = 24 * 2 ** 30 - params * 1                        # int8: 1 byte per parameter
    per_token = 2 * L * h * 2                               # K and V, every layer, float16
    assert ch06.ex3(free // per_token) and ch06.ex3(np.int64(free // per_token))
    assert not ch06.ex3(free // (per_token * 2))            # float32 cache
    assert not ch06.ex3((24 * 10 ** 9 - params) // per_token)   # GB instead of GiB
    assert not ch06.ex3(24 * 2 ** 30 // per_token)          # forgot the weights


def test_ex3_names_the_answer_backed_out_of_the_rounded_table(capsys):
    """Section 7's table prints 24.71 GiB (fp16 weights) and 3.12 GiB (4096 tokens of KV):
    (24 - 24.71 / 2) * 4096 / 3.12 is 0.2 % off, outside the 0.1 % the question allows."""
    from_table = int((24 - 24.71 / 2) * 4096 / 3.12)
    assert not ch06.ex3(from_table)
    assert "两位小数的 GiB" in capsys.readouterr().out


def test_ex4_devices():
    # by hand: per device 2+2 bytes/param / 8 (weights, grads) + 12 bytes/param / (8 dp)
    # + activations <= 0.9 * 16 GiB; dp = 2 needs 16.0 GiB, dp = 3 needs 12.9 -> 24 devices
    assert ch06.ex4(24) and ch06.ex4(np.int32(24))
    assert not ch06.ex4(8) and not ch06.ex4(16)


def test_code_checkers_have_wrong_variants():
    """Each is run against its reference and wrong variants by test_check_self.py."""
    exercises = all_exercises()
    for name in ("ch06.rms_norm", "ch06.alibi_slopes", "ch06.attention_bias", "ch06.decoder_layer"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2


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
