from collections import Counter

from course_lib.check import ch02
from course_lib.data import review_splits


def test_ch02_checkers_accept_reference_and_reject_wrong(capsys):
    splits = review_splits()
    majority = Counter(y for _, y in splits.train).most_common(1)[0][0]
    val = [y for _, y in splits.validation]
    baseline = val.count(majority) / len(val)
    assert ch02.ex1(round(baseline, 3))
    assert not ch02.ex1(round(1 - baseline, 3))                  # the minority class
    assert not ch02.ex1(0.5)
    assert ch02.ex2("O2") and ch02.ex2(" o2 ")
    assert not ch02.ex2("O3") and not ch02.ex2(2)
    assert ch02.ex3(96)                                          # 3 epochs x 32 batches
    assert not ch02.ex3(93)                                      # 3 x floor(1000/32)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out
