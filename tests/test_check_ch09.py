"""ch09 checkers accept the reference answer and reject wrong ones."""
import numpy as np

from course_lib.check import all_exercises, ch09
from judging import judged as _judged


def test_fold_lora(capsys):
    assert ch09.fold_lora(lambda W, A, B, alpha, r: W + B @ A * alpha / r)
    assert not ch09.fold_lora(lambda W, A, B, alpha, r: W + B @ A)                 # no scaling
    assert not ch09.fold_lora(lambda W, A, B, alpha, r: 1 / 0)
    out = capsys.readouterr().out
    assert "ZeroDivisionError" in out and "✅" in out and "没有缩放" in out


def test_numbers(capsys):
    # 25 reviews x 2 candidate rows = 50 rows through a (6, 96) graph: 9 calls, 54 - 50 = 4 dummy rows
    assert ch09.ex1([9, 4]) and ch09.ex1((9, 4)) and ch09.ex1(np.array([9, 4]))
    assert not ch09.ex1([5, 5])                       # one row per review
    assert not ch09.ex1([9, 0]) and not ch09.ex1(4) and not ch09.ex1(0)
    # r=16 on q, k, v, o: 2 layers x 4 x 16 x (128 + 128) float32
    assert ch09.ex2(2 * 4 * 16 * 256 * 4) and not ch09.ex2(2 * 2 * 8 * 256 * 4)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out


def test_ex1_is_what_the_pipeline_does(tokenizer):
    """The closed form counts the calls and dummy rows SentimentPipeline really makes."""
    import mindspore as ms
    from course_lib.check.ch09 import SERVING, _serving_calls
    from course_lib.export import SentimentPipeline
    seen = []

    class Graph:                                      # stands in for an exported MINDIR
        input_shape = (SERVING["batch"], 96)

        def __call__(self, ids):
            seen.append(ids.asnumpy().copy())
            return ms.ops.zeros((*ids.shape, tokenizer.vocab_size), ms.float32)

    texts = [f"第 {i} 条评论，质量还可以。" for i in range(SERVING["reviews"])]
    SentimentPipeline(Graph(), tokenizer, use_model_predict=False).scores(texts)
    rows = np.concatenate(seen)
    real = len(np.unique(rows, axis=0))
    assert all(s.shape == Graph.input_shape for s in seen)
    assert [len(seen), len(rows) - 2 * SERVING["reviews"]] == _serving_calls(**SERVING) == [9, 4]
    assert real == 2 * SERVING["reviews"]


def test_code_checkers_have_wrong_variants():
    """Each is run against its reference and wrong variants by test_check_self.py."""
    exercises = all_exercises()
    for name in ("ch09.fold_lora", "ch09.export_for_serving"):
        assert exercises[name].kind == "code" and len(exercises[name].wrong) >= 2


def test_the_judge_reads_the_exported_file(capsys):
    """What is observed is the loaded MINDIR's output, so a float32 fold passes and an export
    in training mode fails in the grader's own process."""
    from course_lib.solutions import ch09 as sol
    as_float32 = lambda W, A, B, alpha, r: sol.fold_lora(W, A, B, alpha, r).astype(np.float32)  # noqa: E731
    assert _judged(ch09.fold_lora, as_float32, sol.fold_lora) == "pass"
    assert _judged(ch09.export_for_serving, sol.wrong_export_training_mode, sol.export_for_serving) == "fail"
