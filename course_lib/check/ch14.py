"""Checkers for notebook 14 (dynamic shapes and graph compilation).

Expected values come from the same functions the notebook measures with."""
from .common import verdict

STREAM = (12, 20, 12, 33, 20, 8)     # sequence lengths of a stream of batches
BUCKETS = (16, 32, 64)


def ex1(answer) -> bool:
    """GRAPH mode, static shapes: how many graphs does the stream STREAM compile?"""
    expected = len(set(STREAM))
    ok = isinstance(answer, int) and not isinstance(answer, bool) and answer == expected
    return verdict(ok, "静态形状下，每个“没见过的”长度编译一次；重复出现的长度复用已编译的图。", "ch14.ex1")


def ex2(answer) -> bool:
    """Bucketed padding with BUCKETS: how many graphs for the same stream?"""
    from ..migration.compile_stats import bucket_length
    expected = len({bucket_length(n, BUCKETS) for n in STREAM})
    ok = isinstance(answer, int) and not isinstance(answer, bool) and answer == expected
    return verdict(ok, "先把每个长度补齐到不小于它的最小桶，再数用到了几个不同的桶。", "ch14.ex2")


def ex3(answer) -> bool:
    """The argument of ``cell.set_inputs`` that declares an int32 (batch, seq_len) input
    whose batch size AND length may both vary."""
    import mindspore as ms
    from mindspore import Tensor
    ok = (isinstance(answer, Tensor) and answer.dtype == ms.int32
          and tuple(answer.shape) == (-1, -1))
    return verdict(ok, "Tensor(shape=[None, None], dtype=ms.int32)：None 表示该维是动态的；"
                   "dtype 要与真实输入一致。", "ch14.ex3")
