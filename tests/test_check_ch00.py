import numpy as np

from course_lib.check import ch00
from judging import judged as _judged


def test_ch00_checkers_accept_reference_and_reject_wrong(tokenizer, capsys):
    assert ch00.ex1(len(tokenizer.encode("人工智能")))
    assert ch00.ex1(np.int64(len(tokenizer.encode("人工智能"))))
    assert not ch00.ex1(len("人工智能") + 7)
    assert ch00.ex2(len("🚀".encode("utf-8")))                  # 4 UTF-8 bytes, no merge learned
    assert not ch00.ex2(1) and not ch00.ex2("4")
    assert ch00.ex3(tokenizer.decode(list(ch00.EX3_IDS)))
    assert ch00.ex3("昇思学习课程")                        # the decoding, typed by hand
    assert not ch00.ex3("思学习课程")                       # the two byte tokens dropped
    assert not ch00.ex3("".join(tokenizer.decode([i]) for i in ch00.EX3_IDS))   # token by token: "��思学习课程"
    assert not ch00.ex3(list(ch00.EX3_IDS)) and not ch00.ex3(None)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out


def test_ex3_is_judged_from_the_observed_answer(tokenizer):
    reference = tokenizer.decode(list(ch00.EX3_IDS))
    assert _judged(ch00.ex3, tokenizer.decode([290, 236, 838, 1476, 1916, 679]), reference) == "pass"
    assert _judged(ch00.ex3, "思学习课程", reference) == "fail"
    assert _judged(ch00.ex3, None, reference) == "fail"


def test_ex3_ids_hold_a_character_split_into_bytes(tokenizer):
    """The first id alone is half a character (U+FFFD): only the whole list decodes cleanly."""
    assert tokenizer.decode(list(ch00.EX3_IDS)) == "昇思学习课程"
    assert "\ufffd" in tokenizer.decode([ch00.EX3_IDS[0]])


def test_hints_point_to_the_section_not_the_call(capsys):
    assert not ch00.ex1(0) and not ch00.ex2(1) and not ch00.ex3("思学习课程")
    out = capsys.readouterr().out
    assert "第 4 节" in out and "少了字" in out
    for call in ("tok.encode(", ".encode('utf-8')", "tok.decode"):
        assert call not in out
