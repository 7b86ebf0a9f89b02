from course_lib.check import ch12


def test_ch12_checkers_accept_reference_and_reject_wrong(capsys):
    # 4 + 4 + 2 requests; each group: 1 prefill (token 1) + 4 decode steps (tokens 2..5)
    assert ch12.ex1(3 * (1 + 4))
    assert not ch12.ex1(10 * 5) and not ch12.ex1(3 * 4) and not ch12.ex1(15.0)
    # 2 (K and V) x 32 layers x 8 x 2048 tokens x 4096 x 2 bytes = 8 GiB
    assert ch12.ex2(2 * 32 * 8 * 2048 * 4096 * 2 / 2**30) and ch12.ex2(8.0)
    assert not ch12.ex2(4.0) and not ch12.ex2(16)
    assert ch12.ex3([0, 0, 1]) and ch12.ex3((0, 0, 1))
    assert not ch12.ex3([1, 0, 0]) and not ch12.ex3([False, False, True])
    out = capsys.readouterr().out
    assert out.count("✅") == 5 and "提示" in out
