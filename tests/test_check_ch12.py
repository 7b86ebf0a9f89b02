import numpy as np

from course_lib.check import ch12
from course_lib.check.common import EXERCISES
from course_lib.solutions import ch12 as sol


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
    assert "填充在右" in capsys.readouterr().out


def test_admit_is_fifo_within_free_slots():
    assert sol.admit([(0, 0.0), (1, 0.1), (2, 0.5), (3, 0.2)], 2, 0.3) == [0, 1]
    assert sol.admit([(4, 0.4), (3, 0.4)], 5, 1.0) == [3, 4]
    assert sol.admit([(0, 0.0)], 0, 1.0) == []


def test_numbers(capsys):
    # 4 + 4 + 2 requests; each group: 1 prefill (token 1) + 4 decode steps (tokens 2..5)
    assert ch12.ex1(3 * (1 + 4)) and not ch12.ex1(10 * 5) and not ch12.ex1(3 * 4)
    # prompt 40 -> left-padded to 64 for the compiled prefill; 64 + 20 -> 128 slots (multiple of 64);
    # K and V x 32 layers x 6 rows x 32 heads x 128 slots x 128 x 2 bytes = 384 MiB
    assert ch12.ex2(2 * 32 * 6 * 32 * 128 * 128 * 2 / 2**20) and ch12.ex2(np.float32(384.0))
    assert not ch12.ex2(2 * 32 * 6 * 4096 * 64 * 2 / 2**20)      # slots from the unpadded 40 + 20
    assert not ch12.ex2(2 * 32 * 6 * 4096 * 84 * 2 / 2**20)      # no rounding to a multiple of 64
    assert not ch12.ex2(32 * 6 * 4096 * 128 * 2 / 2**20)         # keys only
    # running width 3 + 2 steps = 5; [9, 10] padded on the left to 5; one more step appends a 1
    assert ch12.ex3([0, 0, 0, 1, 1, 1]) and ch12.ex3(np.array([0, 0, 0, 1, 1, 1]))
    assert not ch12.ex3([0, 1, 1]) and not ch12.ex3([1, 1, 0, 0, 0, 1]) and not ch12.ex3([0, 0, 0, 1, 1])
    assert not ch12.ex3([False, False, False, True, True, True])
    capsys.readouterr()


def test_ex2_follows_the_engines_own_reservation():
    """The expected MiB is what the library reserves: the prefill width and slots of generate."""
    from course_lib import generation
    assert generation.prefill_width(ch12.EX2_LONGEST, ch12.EX2_NEW, 2048) == 64
    assert generation.cache_bucket(64 + ch12.EX2_NEW, 2048) == 128
    assert ch12._engine_cache_mib() == 384.0


def test_ex3_mask_from_the_library_merge():
    """Independent of the reference: the library's merge_states on DecodeStates gives the row."""
    from course_lib.generation import DecodeState, left_pad
    from course_lib.inference import merge_states
    ids_a, mask_a = left_pad(ch12.EX3_RUNNING)
    grow = ((0, 0), (0, ch12.EX3_STEPS))
    running = DecodeState(np.pad(ids_a, grow, constant_values=1), np.pad(mask_a, grow, constant_values=1),
                          np.zeros((2, 4), np.float32), None, [0, 1])
    ids_b, mask_b = left_pad([ch12.EX3_JOINING])
    joining = DecodeState(ids_b, mask_b, np.zeros((1, 4), np.float32), None, [2])
    merged = merge_states(running, joining)
    assert np.pad(merged.attention_mask, ((0, 0), (0, 1)), constant_values=1)[2].tolist() == ch12._joined_mask()


def test_ex3_hint_does_not_give_the_width_away(capsys):
    """The row's width is half of ex3's reasoning: a list of the wrong length is told so, not
    told the right length."""
    want = ch12._joined_mask()
    assert not ch12.ex3(want[:-1])
    out = capsys.readouterr().out
    assert "个数就不对" in out and f"需要 {len(want)}" not in out


def test_the_demo_call_gives_no_method(capsys):
    """The answers cell's example call (ch12.ex1(0)) prints a pointer, not the count's recipe."""
    assert not ch12.ex1(0)
    out = capsys.readouterr().out
    assert "第 2 节" in out and "15" not in out and "prefill 给出" not in out


def test_admit_hints_name_the_request_not_the_rule(capsys):
    assert not ch12.admit(sol.wrong_newest_first)
    out = capsys.readouterr().out
    assert "请求 0" in out and "排序" not in out and "free_slots 个" not in out
    assert not ch12.merge_batches(sol.wrong_right_pad)
    out = capsys.readouterr().out
    assert "左边" not in out and "np.pad" not in out


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
