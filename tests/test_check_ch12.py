import numpy as np
import pytest

from course_lib.check import ch12
from course_lib.check.__main__ import self_test_one
from course_lib.check.common import EXERCISES
from course_lib.solutions import ch12 as sol


@pytest.mark.parametrize("name", ["ch12.merge_batches", "ch12.admit", "ch12.ex2", "ch12.ex3"])
def test_self_test(name):
    assert self_test_one(EXERCISES[name]) == []


def _attend(q, keys, values, mask):
    """One query per row over a (B, H, T, d) cache, masked positions excluded (closed form)."""
    scores = np.einsum("bhd,bhtd->bht", q, keys) / np.sqrt(q.shape[-1])
    scores = np.where(mask[:, None, :] == 1, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("bht,bhtd->bhd", w, values)


def test_merged_rows_attend_exactly_as_alone():
    """Independent of the reference's code: each merged row's attention equals the row alone."""
    rng = np.random.default_rng(0)
    a = ch12._batch(rng, 2, 5, 0)
    b = ch12._batch(rng, 3, 2, 0)
    ids, mask, cache = sol.merge_batches(a, b, 0)
    q = rng.standard_normal((5, ch12.HEADS, ch12.HEAD_DIM))
    for layer in range(ch12.LAYERS):
        merged = _attend(q, *cache[layer], mask)
        alone = np.concatenate([_attend(q[:2], *a[2][layer], a[1]), _attend(q[2:], *b[2][layer], b[1])])
        np.testing.assert_allclose(merged, alone, rtol=1e-6)
    assert (ids[mask == 1] != 0).all() and (ids[mask == 0] == 0).all()


def test_merge_checker_accepts_tensors_and_names_bugs(capsys):
    from mindspore import Tensor

    def as_tensors(a, b, pad_id=0):
        ids, mask, cache = sol.merge_batches(a, b, pad_id)
        return Tensor(ids), Tensor(mask), [(Tensor(k), Tensor(v)) for k, v in cache]
    assert ch12.merge_batches(as_tensors)
    assert not ch12.merge_batches(sol.wrong_right_pad)
    assert "右边" in capsys.readouterr().out


def test_admit_is_fifo_within_free_slots():
    assert sol.admit([(0, 0.0), (1, 0.1), (2, 0.5), (3, 0.2)], 2, 0.3) == [0, 1]
    assert sol.admit([(4, 0.4), (3, 0.4)], 5, 1.0) == [3, 4]
    assert sol.admit([(0, 0.0)], 0, 1.0) == []


def test_numbers(capsys):
    # 4 + 4 + 2 requests; each group: 1 prefill (token 1) + 4 decode steps (tokens 2..5)
    assert ch12.ex1(3 * (1 + 4)) and not ch12.ex1(10 * 5) and not ch12.ex1(3 * 4)
    # 2 (K and V) x 32 layers x 8 x 2048 tokens x 4096 x 2 bytes = 8 GiB
    assert ch12.ex2(2 * 32 * 8 * 2048 * 4096 * 2 / 2**30) and ch12.ex2(np.float32(8.0))
    assert not ch12.ex2(4.0) and not ch12.ex2(16)
    assert ch12.ex3([0, 1, 1]) and ch12.ex3(np.array([0, 1, 1]))
    assert not ch12.ex3([1, 1, 0]) and not ch12.ex3([False, True, True]) and not ch12.ex3([0, 0, 1])


def test_hidden_admit_case_follows_the_grading_salt(monkeypatch):
    fixed = ch12._admit_cases()
    assert fixed[:-1] == ch12.ADMIT_CASES
    monkeypatch.setenv("COURSE_CHECK_SALT", "7")
    salted = ch12._admit_cases()
    assert salted[:-1] == ch12.ADMIT_CASES and salted[-1] != fixed[-1]


def test_every_wrong_variant_shows_in_the_observations():
    """What the grader judges (the observed values), not only what the checker prints."""
    import dataclasses

    from course_lib.check.common import recording
    from course_lib.grade.judge import first_difference
    for name in ("ch12.merge_batches", "ch12.admit"):
        ex = EXERCISES[name]
        with recording() as ref:
            ex.checker(ex.solution())
        for factory, _ in ex.wrong:
            with recording() as got:
                ex.checker(factory())
            assert first_difference(got[-1], dataclasses.replace(ref[-1], provenance=None)) is not None
