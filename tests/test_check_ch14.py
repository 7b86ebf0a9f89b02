"""ch14 checkers accept the reference answers and reject wrong ones."""
import mindspore as ms
from mindspore import Tensor

from course_lib.check import ch14


def test_ex1_static_compiles():
    assert ch14.ex1(4)                     # 12, 20, 33, 8
    assert not ch14.ex1(6) and not ch14.ex1(True)


def test_ex2_bucketed_compiles():
    assert ch14.ex2(3)                     # 16 (12, 8), 32 (20), 64 (33)
    assert not ch14.ex2(4)


def test_ex3_dynamic_declaration():
    assert ch14.ex3(Tensor(shape=[None, None], dtype=ms.int32))
    assert not ch14.ex3(Tensor(shape=[4, None], dtype=ms.int32))      # batch fixed
    assert not ch14.ex3(Tensor(shape=[None, None], dtype=ms.float32))
    assert not ch14.ex3("Tensor(shape=[None, None])")
