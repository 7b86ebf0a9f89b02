"""ch14 checkers: references accepted, wrong variants rejected with their hint, numbers."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor

from course_lib.check import ch14
from course_lib.solutions import ch14 as sol


def test_bucket_padding_keeps_the_loss_of_a_causal_model():
    """Independent of the course code: a causal (prefix-sum) 'model' and a masked mean loss
    give the same value before and after pad_to_bucket."""
    rng = np.random.default_rng(0)
    inputs = rng.integers(1, 9, (3, 5)).astype(np.int32)
    labels = rng.integers(1, 9, (3, 5)).astype(np.int32)

    def loss(i, l_):
        logits = np.cumsum(i, axis=1).astype(np.float64)          # position t sees tokens <= t
        keep = l_ != -100
        return float(((logits - l_) ** 2)[keep].mean())
    pi, pl = sol.pad_to_bucket(inputs, labels, (4, 8, 16), pad_id=0)
    assert pi.shape == (3, 8) and loss(pi, pl) == loss(inputs, labels)
    li, ll = sol.wrong_left_pad(inputs, labels, (4, 8, 16), 5)   # pads precede real tokens
    assert loss(li, ll) != loss(inputs, labels)
    with pytest.raises(ValueError, match="bigger bucket"):
        sol.pad_to_bucket(np.zeros((1, 17)), np.zeros((1, 17)), (4, 8, 16))


def test_numbers():
    # (12, .7) (20, .7) (12, 1.0) (33, .7) [(20, .7) again] (8, 1.0): 5 distinct keys
    assert ch14.ex1(5) and ch14.ex1(np.int64(5))
    assert not ch14.ex1(4) and not ch14.ex1(6) and not ch14.ex1(2) and not ch14.ex1(True)
    assert ch14.ex2(3) and not ch14.ex2(4)              # 16 (12, 8), 32 (20), 64 (33)


def test_ex1_counts_what_mindspore_compiles():
    """The closed form of ex1 is what MindSpore does: the section-3 Cell, the same calls, the
    compilations counted from the compile cache."""
    import importlib.util
    import sys
    import tempfile
    from pathlib import Path

    from course_lib.migration.compile_stats import CompileCounter
    from course_lib.runtime import execution_mode
    source = ("from mindspore import nn, ops\n\n\nclass Scale(nn.Cell):\n"
              "    def construct(self, x, t):\n        return ops.softmax(x / t, -1)\n")
    with tempfile.TemporaryDirectory() as tmp:          # GRAPH mode parses the Cell's source file
        path = Path(tmp) / "scale_cell.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("scale_cell", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["scale_cell"] = module
        spec.loader.exec_module(module)
        with execution_mode("graph"):
            scale = module.Scale()
            with CompileCounter() as counter:
                for length, t in zip(ch14.STREAM, ch14.TEMPERATURES):
                    scale(Tensor(np.ones((2, length), np.float32)), t)
        del sys.modules["scale_cell"]
    assert counter.count == ch14._graphs_with_scalars() == 5


def test_the_demo_call_gives_no_method(capsys):
    assert not ch14.ex1(0)
    out = capsys.readouterr().out
    assert "第 3 节" in out and "5" not in out.replace("[ch14.ex1]", "")


def test_ex3_dynamic_declaration():
    assert ch14.ex3(Tensor(shape=[1, None, 64], dtype=ms.float16))
    assert not ch14.ex3(Tensor(shape=[None, None, None], dtype=ms.float16))
    assert not ch14.ex3(Tensor(shape=[None, None, 64], dtype=ms.float16))
    assert not ch14.ex3(Tensor(shape=[1, None, 64], dtype=ms.float32))
    assert not ch14.ex3("Tensor(shape=[1, None, 64])")


def test_hints_do_not_give_the_answer_away(capsys):
    ch14.ex3(None)
    assert "[1, None, 64]" not in capsys.readouterr().out


def test_ex3_observes_dtype_and_shape():
    from course_lib.check.common import recording
    with recording() as found:
        ch14.ex3(Tensor(shape=[1, None, 64], dtype=ms.float16))
        ch14.ex3(Tensor(shape=[None, None, 64], dtype=ms.float16))
    assert found[0].observations[0].got == ["Float16", [1, -1, 64]]
    assert found[1].observations[0].got == ["Float16", [-1, -1, 64]]
    assert found[0].observations[0].want == ["Float16", [1, -1, 64]]


def test_pad_to_bucket_inputs_follow_the_grading_salt(monkeypatch):
    from course_lib.check.common import recording
    runs = []
    for salt in ("", "7"):
        monkeypatch.setenv("COURSE_CHECK_SALT", salt)
        with recording() as found:
            assert ch14.pad_to_bucket(sol.pad_to_bucket)
        runs.append(found[-1].observations)
    assert not np.array_equal(runs[0][1].got, runs[1][1].got)      # the first padded inputs
