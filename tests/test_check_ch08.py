"""ch08 checkers accept the reference answer (computed here independently) and reject
a wrong one; the code checkers accept the reference and reject wrong code with its hint."""
import numpy as np

from course_lib.check import all_exercises, ch08
from course_lib.check.__main__ import self_test_one


def test_ch08(capsys, tokenizer):
    # ex1: InternLM-tiny = 2 layers, hidden 128, FFN 352; r=3 on q, k, v, o (128 -> 128),
    # gate, up (128 -> 352) and down (352 -> 128); r=3 is not a rank the notebook's sweep prints
    per_layer = 4 * 256 + 2 * 480 + 480
    assert ch08.ex1(2 * 3 * per_layer) and ch08.ex1(np.int64(2 * 3 * per_layer)) \
        and ch08.ex1(14_784)
    assert not ch08.ex1(2 * 4 * per_layer)                    # r=4 (the sweep's row), not r=3
    assert not ch08.ex1(2 * 3 * 4 * 256)                      # attention projections only
    # ex2: 32 layers x 4 x 16 x 8192 over 7,321,948,160 (the model-facts number)
    ref = 100 * 32 * 4 * 16 * 8192 / 7_321_948_160
    assert ch08.ex2(ref) and ch08.ex2(round(ref, 4))
    assert not ch08.ex2(ref / 100)
    # ex3: labels kept = tokens of 负面 + <|end|>
    assert ch08.ex3(len(tokenizer.encode("负面")) + 1)
    assert not ch08.ex3(len(tokenizer.encode("负面")))
    # ex4: fp16 weights of every parameter + 16 bytes per adapter parameter
    lora = 32 * 4 * 64 * 8192
    ref = (7_321_948_160 * 2 + 16 * lora) / 2**30
    assert ch08.ex4(ref)
    assert not ch08.ex4(16 * lora / 2**30)                  # forgot the frozen weights
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out


def test_code_checkers_accept_reference_and_reject_wrong_with_hint():
    exercises = all_exercises()
    for name in ("ch08.lora_forward", "ch08.replace_layer"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2
        assert self_test_one(exercises[name]) == []


def test_the_seeds_setattr_is_diagnosed(capsys):
    assert not ch08.replace_layer(lambda model, name, new: setattr(model, name, new))
    assert "带点的名字" in capsys.readouterr().out


def test_the_judge_sees_the_replaced_tree(capsys):
    """The observed Cell tree and parameter names make a wrong replacement fail in the
    grader's own process, not only in the printed verdict."""
    import dataclasses
    from course_lib.check.common import recording
    from course_lib.grade.judge import judge_run
    from course_lib.solutions import ch08 as sol
    runs = {}
    for key, func in (("ref", sol.replace_layer), ("root", sol.wrong_replace_on_root),
                      ("short", sol.wrong_replace_keeps_short_names)):
        with recording() as found:
            ch08.replace_layer(func)
        runs[key] = dataclasses.replace(found[-1], provenance=None)
    assert judge_run(runs["ref"], runs["ref"]).result.verdict == "pass"
    assert judge_run(runs["root"], runs["ref"]).result.verdict == "fail"
    assert judge_run(runs["short"], runs["ref"]).result.verdict == "fail"
