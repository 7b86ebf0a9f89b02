"""ch15 checkers accept the reference answers and reject wrong ones (with their hint)."""
from course_lib.check import ch15


def test_peak_number(capsys):
    assert ch15.peak_gib(ch15._peak_gib()) and ch15.peak_gib(15.54)    # 14.38 GiB of weights + 1.16
    capsys.readouterr()
    assert not ch15.peak_gib(14.38)                       # weights only: forgot the tensor in flight
    assert "这个数只是全部权重" in capsys.readouterr().out
    assert not ch15.peak_gib(17.5) and not ch15.peak_gib("lots")
    assert "这个数只是全部权重" not in capsys.readouterr().out
    for original in (14.43, 14.44):        # InternLM-7B as it is; section 7's printed 13.65 + 0.79
        assert not ch15.peak_gib(original)
        assert "词表 103,168" in capsys.readouterr().out
    assert not ch15.peak_gib(15.17)        # the new weights + the old vocabulary's largest tensor
    assert "它也变了" in capsys.readouterr().out


def test_hidden_chat_follows_the_grading_salt(monkeypatch):
    fixed = ch15._hidden_chats()
    assert fixed[:-1] == ch15.HIDDEN_CHATS and fixed[-1][-1]["role"] == "user"
    monkeypatch.setenv("COURSE_CHECK_SALT", "7")
    salted = ch15._hidden_chats()
    assert salted[-1] != fixed[-1] and salted[-1][-1]["role"] == "user"


def test_prompt_hints_say_what_differs_not_the_template(capsys):
    """A wrong prompt gets the first differing position and what kind of slip it is; the
    template itself (section 5) is never printed by the checker."""
    assert not ch15.internlm_prompt(ch15._no_bos)
    out = capsys.readouterr().out
    assert "少了最前面的 <s>" in out and "<|Bot|>" not in out and "encode(" not in out
    assert not ch15.internlm_prompt(ch15._no_newline)
    out = capsys.readouterr().out
    assert "换行符" in out and "<eoh>" not in out
    assert "与模板不同" in out and "应为" not in out       # the learner's ids, never the expected ones
    assert not ch15.peak_gib(0)
    out = capsys.readouterr().out
    assert "103168" not in out and "2 字节" not in out


def test_borrowing_the_pages_demo_is_refused(capsys):
    """Section 5's demo ``conversation.chat_format(imodel, ...)`` returns the right ids for any
    messages: a function that calls it (or the library's internlm_prompt) is not accepted, and
    the library's functions are restored afterwards."""
    from course_lib import conversation
    before = (conversation.chat_format, conversation.internlm_prompt)
    assert not ch15.internlm_prompt(lambda t, m: conversation.chat_format(None, t, m)[0])
    assert "conversation.chat_format" in capsys.readouterr().out
    assert not ch15.internlm_prompt(lambda t, m: conversation.internlm_prompt(t, m))
    assert (conversation.chat_format, conversation.internlm_prompt) == before
    assert ch15.internlm_prompt(ch15._reference())
