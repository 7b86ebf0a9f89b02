"""ch09 checkers accept the reference answer and reject wrong ones."""
import numpy as np

from course_lib.check import all_exercises, ch09
from course_lib.check.__main__ import self_test_one
from judging import judged as _judged


def test_fold_lora(capsys):
    assert ch09.fold_lora(lambda W, A, B, alpha, r: W + B @ A * alpha / r)
    assert not ch09.fold_lora(lambda W, A, B, alpha, r: W + B @ A)                 # no scaling
    assert not ch09.fold_lora(lambda W, A, B, alpha, r: 1 / 0)
    out = capsys.readouterr().out
    assert "ZeroDivisionError" in out and "✅" in out and "alpha / r" in out


def test_numbers(capsys):
    assert ch09.ex2(2) and ch09.ex2(np.int64(2)) and not ch09.ex2(0)
    # r=16 on q, k, v, o: 2 layers x 4 x 16 x (128 + 128) float32
    assert ch09.ex3(2 * 4 * 16 * 256 * 4) and not ch09.ex3(2 * 2 * 8 * 256 * 4)


def test_code_checkers_accept_reference_and_reject_wrong_with_hint():
    exercises = all_exercises()
    for name in ("ch09.fold_lora", "ch09.export_for_serving"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2
        assert self_test_one(exercises[name]) == []


def test_the_judge_reads_the_exported_file(capsys):
    """What is observed is the loaded MINDIR's output, so a float32 fold passes and an export
    in training mode fails in the grader's own process."""
    from course_lib.solutions import ch09 as sol
    as_float32 = lambda W, A, B, alpha, r: sol.fold_lora(W, A, B, alpha, r).astype(np.float32)  # noqa: E731
    assert _judged(ch09.fold_lora, as_float32, sol.fold_lora) == "pass"
    assert _judged(ch09.export_for_serving, sol.wrong_export_training_mode, sol.export_for_serving) == "fail"
