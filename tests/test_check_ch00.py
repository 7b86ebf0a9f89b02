import numpy as np

from course_lib.check import ch00


def test_ch00_checkers_accept_reference_and_reject_wrong(tokenizer, capsys):
    assert ch00.ex1(len(tokenizer.encode("人工智能")))
    assert ch00.ex1(np.int64(len(tokenizer.encode("人工智能"))))
    assert not ch00.ex1(len("人工智能") + 7)
    assert ch00.ex2(len("🚀".encode("utf-8")))                  # 4 UTF-8 bytes, no merge learned
    assert not ch00.ex2(1) and not ch00.ex2("4")
    assert ch00.ex3(tokenizer.decode(tokenizer.encode("我爱北京天安门")))
    assert not ch00.ex3("我爱北京")
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out
