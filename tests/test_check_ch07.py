"""Notebook 07 checkers accept the reference answers and reject wrong ones."""
import math

from course_lib.check import ch07


def test_ex1_perplexity():
    assert ch07.ex1(math.exp(3.2))
    assert not ch07.ex1(2 ** 3.2)              # bits instead of nats


def test_ex2_top_p_by_hand():
    # cumulative 0.42, 0.67, 0.82 >= 0.8 -> the first three are kept
    assert ch07.ex2([0, 1, 2])
    assert not ch07.ex2([0, 1])                # stopped before reaching p
    assert not ch07.ex2([0, 1, 2, 3])


def test_ex3_repetition_penalty():
    assert ch07.ex3([1.6, -1.25])
    assert not ch07.ex3([1.6, -0.8])           # divided the negative logit too


def test_ex4_kv_cache_bytes():
    layers, hidden = 2, 128                     # baichuan.tiny()
    assert ch07.ex4(2 * layers * 256 * hidden * 4)
    assert not ch07.ex4(layers * 256 * hidden * 4)    # forgot V
