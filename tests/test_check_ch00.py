import numpy as np

from course_lib.check import ch00


def test_ch00_checkers_accept_reference_and_reject_wrong(tokenizer, capsys):
    assert ch00.ex1(len(tokenizer.encode("深度学习")))
    assert ch00.ex1(np.int64(len(tokenizer.encode("深度学习"))))
    assert not ch00.ex1(len("深度学习") + 7)
    assert not ch00.ex1(len("深度学习"))                  # the character count is not the id count
    assert "这是字数" in capsys.readouterr().out
    assert ch00.ex2(len("🚀".encode("utf-8")))                  # 4 UTF-8 bytes, no merge learned
    assert not ch00.ex2(1) and not ch00.ex2("4")
    n_tokens, n_chars = ch00._de_counts()
    assert ch00.ex3(n_tokens) and not ch00.ex3(n_chars) and not ch00.ex3(None)
    assert n_tokens < n_chars                              # most '的' are merged into longer tokens
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out


def test_ex3_counts_tokens_not_characters(tokenizer):
    from course_lib import data
    val = data.news_splits().validation
    de = tokenizer.encode("的")
    assert len(de) == 1
    assert ch00._de_counts()[0] == sum(ids.count(de[0]) for ids in tokenizer.encode_batch(val))


def test_hints_point_to_the_section_not_the_call(capsys):
    assert not ch00.ex1(0) and not ch00.ex2(1) and not ch00.ex3(ch00._de_counts()[1])
    out = capsys.readouterr().out
    assert "第 4 节" in out and "出现的次数" in out
    for call in ("tok.encode(", ".encode('utf-8')", "tok.decode", "encode_batch"):
        assert call not in out
