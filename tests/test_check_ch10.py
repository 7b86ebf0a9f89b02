from course_lib.check import ch10


def test_ch10_checkers_accept_reference_and_reject_wrong(capsys):
    assert ch10.ex1(8 * 4 * 2)
    assert not ch10.ex1(8 * 4) and not ch10.ex1(64.0) and not ch10.ex1(True)
    # 40 heads alone would allow 10, but the FFN width 13696 is not divisible by 5 or 10
    assert ch10.ex2(8)
    assert not ch10.ex2(10) and not ch10.ex2(16)
    out = capsys.readouterr().out
    assert out.count("✅") == 2 and "提示" in out


def test_ch10_ex3_uses_the_memory_calculator():
    from course_lib.baichuan import baichuan_13b
    from course_lib.memory import GiB, Layout, plan
    big = baichuan_13b()
    # independent search: the first dp whose ZeRO-3 + recompute layout fits 32 GiB
    n = next(dp for dp in range(1, 64)
             if plan(big, 32, Layout(dp=dp, zero=3, recompute=True)).memory.total <= 32 * GiB)
    assert ch10.ex3(n)
    assert not ch10.ex3(n - 1) and not ch10.ex3(n + 1)
