"""ch08 checkers accept the reference answer (computed here independently) and reject
a wrong one; the code checkers accept the reference and reject wrong code with its hint."""
import numpy as np

from course_lib.check import all_exercises, ch08


def test_ch08(capsys, tokenizer):
    # ex1: InternLM-7B = 32 layers, hidden 4096, FFN 11008; r=8 on q, k, v, o (4096 -> 4096),
    # gate, up (4096 -> 11008) and down (11008 -> 4096)
    per_layer = 4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096)
    assert ch08.ex1(32 * 8 * per_layer) and ch08.ex1(np.int64(32 * 8 * per_layer)) \
        and ch08.ex1(19_988_480)
    assert not ch08.ex1(32 * 8 * 7 * 8192)                   # every layer taken as hidden -> hidden
    assert not ch08.ex1(4_194_304)                            # section 9's q/v number
    # ex2: InternLM-tiny with InternLM-7B's vocabulary: embedding + lm_head grow, LoRA does not
    tiny_blocks = 2_451_072 - 2 * 8000 * 128                  # everything but embedding and head
    lora = 2 * 8 * (4 * 256 + 2 * 480 + 480)                  # 39,424, as section 5 reports
    ref = 100 * lora / (2 * 103_168 * 128 + tiny_blocks + lora)
    assert ch08.ex2(ref) and ch08.ex2(round(ref, 3)) and ch08.ex2(0.147)
    assert not ch08.ex2(1.583 * 8000 / 103_168)               # scaled like the vocabulary
    assert not ch08.ex2(100 * lora / (2 * 103_168 * 128))     # only the embeddings in the total
    # ex3: labels kept = tokens of the answer sentence + <|end|>; the page's own example
    # (正面 / 负面, 3) is not the answer
    assert ch08.ex3(len(tokenizer.encode("这是一条正面评论")) + 1)
    assert not ch08.ex3(len(tokenizer.encode("这是一条正面评论")))
    assert not ch08.ex3(len(tokenizer.encode("正面")) + 1)
    # ex4: fp16 weights of every parameter + 16 bytes per adapter parameter
    lora = 32 * 4 * 64 * 8192
    ref = (7_321_948_160 * 2 + 16 * lora) / 2**30
    assert ch08.ex4(ref)
    assert not ch08.ex4(16 * lora / 2**30)                  # forgot the frozen weights
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out


def test_ex1_and_ex2_match_the_library():
    """The closed forms equal what inject_lora adds and what parameter_counts reports."""
    from course_lib import lora, memory
    from course_lib.check.ch08 import _ex1, _ex2
    from course_lib.internlm import InternLMForCausalLM, internlm_7b, tiny
    from course_lib.zoo import LORA_TARGETS
    big = memory.build_lazy(InternLMForCausalLM, internlm_7b())
    assert lora.inject_lora(big, list(LORA_TARGETS), r=8, alpha=16).added == _ex1()
    small = memory.build_lazy(InternLMForCausalLM, tiny(vocab_size=internlm_7b().vocab_size))
    lora.inject_lora(small, list(LORA_TARGETS), r=8, alpha=16)
    counts = lora.parameter_counts(small)
    assert abs(100 * counts.trainable / counts.total - _ex2()) < 1e-9


def test_code_checkers_have_wrong_variants():
    """Each is run against its reference and wrong variants by test_check_self.py."""
    exercises = all_exercises()
    for name in ("ch08.lora_forward", "ch08.replace_layer"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2


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
    assert judge_run(runs["ref"], runs["ref"]).verdict == "pass"
    assert judge_run(runs["root"], runs["ref"]).verdict == "fail"
    assert judge_run(runs["short"], runs["ref"]).verdict == "fail"


def test_an_empty_subclass_does_not_pass_for_the_learners_forward(capsys):
    """`class MyLoRADense(lora.LoRADense): pass` inherits the library's construct, so its outputs
    are the reference's: the checker must see that the class wrote no construct of its own."""
    from course_lib import lora
    from course_lib.solutions import ch08 as sol

    class Empty(lora.LoRADense):
        pass
    assert not ch08.lora_forward(Empty)
    assert "没有自己的 construct" in capsys.readouterr().out
    assert ch08.lora_forward(sol.MyLoRADense)
