import numpy as np

from course_lib.check import ch03
from course_lib.data import news_documents, news_splits, review_splits
from judging import judged as _judged


def test_ch03_number_checkers(tokenizer, capsys):
    assert ch03.ex1(2 * (103 // 8)) and ch03.ex1(np.int32(24))
    assert not ch03.ex1(2 * -(-103 // 8))                        # kept the last partial batch
    tokens = sum(len(tokenizer.encode(d)) + 1 for d in news_documents()[:100])
    assert ch03.ex2(tokens // 65)
    assert not ch03.ex2(tokens // 64)                            # forgot the +1 (shifted target)
    lengths = np.sort([len(tokenizer.encode(t)) for t, _ in review_splits().validation])
    p95 = int(lengths[int(np.ceil(0.95 * len(lengths))) - 1])    # nearest rank, by hand
    assert ch03.ex3(p95)
    assert not ch03.ex3(int(lengths[-1]))
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out


def _my_shift(row):                       # a learner's version, not from course_lib.solutions
    return np.array(row[:len(row) - 1], np.int32), np.array(row[1:], np.int32)


def _my_pad(ids, max_len=16, pad_id=0):
    ids = list(ids)[:max_len]
    mask = [False] * len(ids) + [True] * (max_len - len(ids))
    return np.array(ids + [pad_id] * (max_len - len(ids)), np.int32), np.array(mask)


def _scaffold(*args, **kwargs):
    raise NotImplementedError


def test_code_checkers_run_the_transform_through_dataset_map(capsys):
    assert ch03.shift_for_lm(_my_shift) and ch03.truncate_pad(_my_pad)
    assert not ch03.truncate_pad(lambda ids, max_len=16, pad_id=0: _my_pad(ids, max_len, pad_id)[::-1])
    assert not ch03.shift_for_lm(_scaffold) and not ch03.truncate_pad(_scaffold)
    assert capsys.readouterr().out.count("还没有实现") == 2


def _pad_int64(ids, max_len=16, pad_id=0):       # right values, wrong dtype
    ids, mask = _my_pad(ids, max_len, pad_id)
    return ids.astype(np.int64), mask


def test_the_judge_sees_values_and_dtypes():
    from course_lib.solutions import ch03 as sol
    assert _judged(ch03.shift_for_lm, _my_shift, sol.shift_for_lm) == "pass"
    assert _judged(ch03.truncate_pad, _my_pad, sol.truncate_pad) == "pass"
    assert _judged(ch03.truncate_pad, _pad_int64, sol.truncate_pad) == "fail"
    assert _judged(ch03.shift_for_lm, sol.wrong_shift_reversed, sol.shift_for_lm) == "fail"


def test_hidden_inputs_change_with_the_grading_salt(monkeypatch):
    from course_lib.check.common import recording
    from course_lib.solutions import ch03 as sol

    def observed():
        with recording() as runs:
            ch03.shift_for_lm(sol.shift_for_lm)
        return [o.got for o in runs[-1].observations if "input_ids" in o.what]
    plain = observed()
    monkeypatch.setenv("COURSE_CHECK_SALT", "7")
    salted = observed()
    assert len(plain) == len(salted)
    assert any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(plain, salted))


def test_number_hints_name_the_wrong_path_not_the_method(tokenizer, capsys):
    assert not ch03.ex1(2 * -(-103 // 8))                        # kept the last partial batch
    assert not ch03.ex1(103 // 8)                                # one pass only
    assert not ch03.ex1(0)                                       # the notebook's example call
    tokens = sum(len(tokenizer.encode(d)) for d in news_documents()[:100])
    assert not ch03.ex2(tokens // 65)                            # forgot the <eos> of each document
    shuffled = sum(len(tokenizer.encode(d)) + 1 for d in news_splits().train[:100])
    assert not ch03.ex2(shuffled // 65)              # the chapter's docs[:100]: the shuffled split
    train = np.sort([len(tokenizer.encode(t)) for t, _ in review_splits().train])
    assert not ch03.ex3(int(train[int(np.ceil(0.95 * len(train))) - 1]))
    out = capsys.readouterr().out
    assert "保留最后那个不满的批" in out and "一遍的批数" in out and "<eos>" in out and "训练集" in out
    assert "打乱了顺序" in out
    for method in ("翻倍", "整除", "//", "length_stats(", "row[:-1]"):
        assert method not in out


def test_code_hints_show_no_slicing(capsys):
    from course_lib.solutions import ch03 as sol
    for wrong in (sol.wrong_shift_none, sol.wrong_shift_reversed, sol.wrong_shift_full_input):
        assert not ch03.shift_for_lm(wrong)
    assert not ch03.truncate_pad(sol.wrong_pad_keeps_end)
    out = capsys.readouterr().out
    assert "[:-1]" not in out and "[1:]" not in out and "[:max_len]" not in out
