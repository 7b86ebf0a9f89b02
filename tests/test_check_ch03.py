import numpy as np

from course_lib.check import ch03
from course_lib.data import news_documents, review_splits


def test_ch03_checkers_accept_reference_and_reject_wrong(tokenizer, capsys):
    assert ch03.ex1(2 * (103 // 8))
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
