"""Checkers for notebook 02 (Model: train / eval / predict, modes, mixed precision)."""
import math

from .common import close, verdict


def ex1(answer) -> bool:
    """Majority-class baseline accuracy on the *validation* reviews (majority taken from the
    training labels), to 3 decimals."""
    from ..data import review_splits
    splits = review_splits()
    train = [y for _, y in splits.train]
    majority = max((0, 1), key=lambda c: (train.count(c), -c))
    val = [y for _, y in splits.validation]
    expected = sum(y == majority for y in val) / len(val)
    return verdict(close(answer, expected, rel=0, abs_=1e-3),
                   "用训练集标签找出多数类，再计算验证集里该类所占比例。", "ch02.ex1")


def ex2(answer) -> bool:
    """Which amp_level casts the network to float16 but keeps the normalisation layers
    (BatchNorm, LayerNorm) in float32 (the usual choice for training on Ascend)?"""
    ok = isinstance(answer, str) and answer.strip().upper() == "O2"
    return verdict(ok, "O0 全 float32，O1 只转白名单算子，O3 全部 float16；中间那个是？",
                   "ch02.ex2")


def ex3(answer) -> bool:
    """model.train(3, data) where data = review_dataset(<1000 examples>, ..., batch_size=32)
    (drop_remainder=False): how many optimizer steps run?"""
    expected = 3 * math.ceil(1000 / 32)
    ok = isinstance(answer, int) and not isinstance(answer, bool) and answer == expected
    return verdict(ok, "每个 epoch 的步数 = ceil(样本数 / batch_size)（不丢最后一个小批次）。",
                   "ch02.ex3")
