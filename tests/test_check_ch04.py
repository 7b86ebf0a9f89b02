"""Each ch04 checker accepts the reference answer and rejects a wrong one."""
from mindspore import Tensor, ops
from mindspore.train import Callback

from course_lib.callbacks import probe_lr
from course_lib.check import ch04


class _Halve(Callback):
    def on_train_step_end(self, run_context):
        opt = run_context.original_args().optimizer
        ops.assign(opt.learning_rate, opt.learning_rate * 0.5)


def test_ex1_reference_measured_with_the_probe(capsys):
    assert ch04.ex1(probe_lr(callbacks=[_Halve()]))
    assert not ch04.ex1([0.1, 0.1, 0.1, 0.1])
    assert "❌" in capsys.readouterr().out


def test_ex2(tokenizer):
    assert ch04.ex2(tokenizer.vocab_size)
    assert not ch04.ex2(1.0)


def test_ex3():
    assert ch04.ex3(0.6666666667)
    assert not ch04.ex3(0.75)        # precision, not F1


def test_ex4():
    assert ch04.ex4(6)
    assert not ch04.ex4(7)
