import sys

from course_lib.check import ch11


def test_ch11_checkers_accept_reference_and_reject_wrong(capsys):
    # reference: LoRA r=8 on q_proj and v_proj, hidden 128, 2 layers (A: r x h, B: h x r)
    assert ch11.ex1(2 * 2 * (8 * 128 + 128 * 8))
    assert not ch11.ex1(2 * 2 * 8 * 128) and not ch11.ex1(8192.0)
    assert ch11.ex2("attention_bias") and ch11.ex2("attention_bias = True")
    assert not ch11.ex2("mlp_bias") and not ch11.ex2(True)
    assert ch11.ex3(2.0) and ch11.ex3(2)
    assert not ch11.ex3(0.5) and not ch11.ex3(True)
    out = capsys.readouterr().out
    assert out.count("✅") == 5 and "提示" in out


def test_ch11_checkers_do_not_import_mindnlp():
    assert "mindnlp" not in sys.modules
