from course_lib.check import ch01


def test_ch01_checkers_accept_reference_and_reject_wrong(capsys):
    E, F = 32, 128
    attention = 4 * E * E + 4 * E
    total = attention + (2 * E * F + F + E) + 2 * 2 * E           # closed form, by hand
    assert ch01.ex1(total)
    assert not ch01.ex1(total - 4 * E)                           # forgot the LayerNorms
    assert not ch01.ex1(float(total))
    assert ch01.ex2((10, 4, 4)) and ch01.ex2([10, 4, 4])         # (N, L, S) with L=4, N=10
    assert not ch01.ex2((4, 10, 10))                             # the batch-first reading
    assert not ch01.ex2("(10, 4, 4)")
    assert ch01.ex3(total - attention)
    assert not ch01.ex3(total)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out
