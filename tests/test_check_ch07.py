"""Notebook 07 checkers accept the reference answers and reject wrong ones."""
import math
import os

import numpy as np

from course_lib.check import all_exercises, ch07
from judging import judged as _judged, salt_misses


def test_ex1_perplexity_is_a_geometric_mean():
    # 3/4 of the positions cost ln 2 nats, 1/4 cost ln 64: mean 2.25 ln 2 -> perplexity 2^2.25
    assert ch07.ex1(2 ** 2.25) and ch07.ex1(np.float32(2 ** 2.25)) and ch07.ex1(4.76)
    assert not ch07.ex1(0.75 * 2 + 0.25 * 64)                   # arithmetic mean of 1/p
    assert not ch07.ex1(1 / (0.75 / 2 + 0.25 / 64))             # 1 / mean probability
    assert not ch07.ex1(2.25 * math.log(2))                     # the cross-entropy itself


def test_ex2_top_p_by_hand(capsys):
    # cumulative 0.42, 0.67, 0.82 >= 0.8 -> the first three are kept
    assert ch07.ex2([0, 1, 2]) and ch07.ex2(np.array([0, 1, 2])) and ch07.ex2({0, 1, 2})
    assert ch07.ex2(np.nonzero(np.array([1, 1, 1, 0, 0, 0, 0, 0])))   # the tuple np.nonzero returns
    assert not ch07.ex2([0, 1])                # stopped before reaching p
    assert not ch07.ex2([0, 1, 2, 3])
    assert not ch07.ex2([0, 1, 7])             # no such word
    assert not ch07.ex2(["a"])                 # never raises
    assert not ch07.ex2([0.9, 1.5, 2.7])       # not indices
    capsys.readouterr()
    ch07.ex2([0, 1])
    assert "需要" not in capsys.readouterr().out  # a wrong answer is not told how many indices are due


def test_ex3_probability_after_penalty():
    z = np.exp([2.0 / 1.25, 1.0, -1.0 * 1.25])                  # seen: words 0 and 2
    assert ch07.ex3(z[1] / z.sum()) and ch07.ex3(round(z[1] / z.sum(), 3))
    wrong = np.exp([2.0 / 1.25, 1.0, -1.0 / 1.25])              # divided the negative logit too
    assert not ch07.ex3(wrong[1] / wrong.sum())
    before = np.exp([2.0, 1.0, -1.0])
    assert not ch07.ex3(before[1] / before.sum())               # no penalty


def test_ex4_kv_cache_bytes():
    layers, hidden = 3, 128                     # baichuan.tiny(num_layers=3)
    assert ch07.ex4(2 * layers * 256 * hidden * 4)
    assert not ch07.ex4(layers * 256 * hidden * 4)    # forgot V
    # The chapter's trained model (its `cfg`) at either scale is another model: the notebook's
    # verdict (full scale) and the gradebook's (ci scale) must both reject an answer that used it.
    for cfg_layers, cfg_hidden in ((2, 128), (4, 256)):  # notebook 07's cfg at ci and at full scale
        assert not ch07.ex4(2 * cfg_layers * 256 * cfg_hidden * 4)


def test_code_checkers_have_wrong_variants():
    """Each is run against its reference and wrong variants by test_check_self.py."""
    exercises = all_exercises()
    for name in ("ch07.top_p", "ch07.repetition_penalty", "ch07.append_kv"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2


def test_an_error_stays_in_the_check_that_caused_it(capsys):
    """A learner's failing operator must fail *its* check, not the next one: with asynchronous
    dispatch a discarded bad concat raised nothing here and surfaced inside a later check
    (CI saw ch07.append_kv's 'new first' variant blamed for the previous variant's concat)."""
    from mindspore import Tensor, ops
    from course_lib.check.common import run_code_check

    (Tensor(np.ones(2, np.float32)) + 1).asnumpy()      # a learner's kernel has run ops before

    def bad():
        ops.cat((Tensor(np.ones((1, 2, 3, 4), np.float32)), Tensor(np.ones((1, 2, 1, 4), np.float32))), 1)

    def good():
        assert ops.cat((Tensor(np.ones((1, 2), np.float32)),) * 2, 0).shape == (2, 2)

    assert run_code_check("demo.bad", "hint", bad) is False
    assert run_code_check("demo.good", "hint", good) is True
    assert "Concat" in capsys.readouterr().out


def test_a_failed_check_leaves_no_error_behind(capsys):
    """A wrong answer that fails on its first Tensor may already have dispatched a second failing
    operator (wrong_append_heads_axis concatenates keys, then values): its error must not
    surface in whatever the kernel runs next (CI saw it raised inside test_measure)."""
    from mindspore import Tensor, ops
    from mindspore.common.api import _pynative_executor
    from course_lib.check.common import Mismatch, run_code_check

    def fails_with_a_bad_op_unread():
        ops.cat((Tensor(np.ones((1, 2, 3, 4), np.float32)), Tensor(np.ones((1, 2, 1, 4), np.float32))), 1)
        raise Mismatch("keys differ")

    assert run_code_check("demo.bad", "hint", fails_with_a_bad_op_unread) is False
    assert "keys differ" in capsys.readouterr().out
    _pynative_executor.sync()                            # raises if the bad concat is still pending
    assert (Tensor(np.ones(2, np.float32)) + 1).asnumpy().tolist() == [2.0, 2.0]


def test_the_judge_sees_what_the_checker_sees(capsys):
    from course_lib.solutions import ch07 as sol
    as_float32 = lambda logits, p: sol.top_p_filter(logits, p).astype(np.float32)   # noqa: E731
    assert _judged(ch07.top_p, as_float32, sol.top_p_filter) == "pass"
    assert _judged(ch07.top_p, sol.wrong_top_p_stops_early, sol.top_p_filter) == "fail"

    def crashes_on_concat(past_k, past_v, k, v):          # a failing step is observed, not skipped
        return sol.wrong_append_heads_axis(past_k, past_v, k, v)
    assert _judged(ch07.append_kv, crashes_on_concat, sol.append_kv) == "fail"


def test_top_p_wrong_answers_get_their_hint_whatever_the_salt(monkeypatch, capsys):
    """The grader draws new hidden logits per session. On some draws a mask left in sorted
    order was told it kept the least probable token, and stopping one token early (which keeps
    nothing when the best token alone reaches p) was not told it falls short of p."""
    from course_lib.solutions import ch07 as sol
    wrongs = ((sol.wrong_top_p_stops_early, "不到 p"), (sol.wrong_top_p_ascending, "哪一端"),
              (sol.wrong_top_p_not_unsorted, "原来词表"))
    assert not salt_misses(ch07.top_p, wrongs, range(200), monkeypatch, capsys)


def test_salts_repeat_the_self_test_under_each_grading_salt(capsys, monkeypatch):
    """``--salts K``: the gradebook draws a random salt per session, so the self-test runs again
    under salts 1..K; ch07.top_p's hidden logits change with the salt (it was salt-dependent:
    salts 1 and 2 gave wrong variants the wrong hint before 2026-12-07). In-process: top_p
    imports NumPy only, and the salt is put back afterwards."""
    from course_lib.check.__main__ import main
    monkeypatch.delenv("COURSE_CHECK_SALT", raising=False)
    assert main(["--self-test", "--salts", "2", "ch07.top_p"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("ok")]
    assert lines == ["ok   ch07.top_p"] + [f"ok   salt {s}: ch07.top_p" for s in (1, 2)]
    assert "as expected under 3 salts" in out and "COURSE_CHECK_SALT" not in os.environ
