"""ch09 checkers accept the reference answer and reject wrong ones."""
from course_lib.check import ch09


def test_ch09(capsys):
    assert ch09.ex1(lambda W, A, B, alpha, r: W + B @ A * alpha / r)
    assert not ch09.ex1(lambda W, A, B, alpha, r: W + A.T @ B.T * alpha / r)   # wrong shape
    assert not ch09.ex1(lambda W, A, B, alpha, r: W + B @ A)                   # no scaling
    assert not ch09.ex1(lambda W, A, B, alpha, r: 1 / 0)
    assert ch09.ex2(2) and not ch09.ex2(0)
    assert ch09.ex3(2 * 2 * 2 * 8 * 128 * 4) and not ch09.ex3(2 * 2 * 8 * 128 * 4)
    out = capsys.readouterr().out
    assert "调用出错" in out and "✅" in out and "❌" in out
