"""Checkers for notebook 01 (nn.Cell, parameters, attention blocks)."""
from .common import verdict


def ex1(answer) -> bool:
    """How many parameters does TransformerBlock(embed_dim=32, num_heads=4, ffn_dim=128) have?"""
    from ..blocks import TransformerBlock, count_parameters
    expected = count_parameters(TransformerBlock(32, 4, 128))
    ok = isinstance(answer, (int,)) and not isinstance(answer, bool) and answer == expected
    return verdict(ok, "注意力 4E²+4E，前馈 2EF+F+E，两个 LayerNorm 各 2E；与头数无关。",
                   "ch01.ex1")


def ex2(answer) -> bool:
    """nn.MultiheadAttention(16, 2) with its default batch_first, called as
    mha(x, x, x) with x of shape (4, 10, 16): the shape of the attention *weights*?"""
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    x = ms.Tensor(np.zeros((4, 10, 16), np.float32))
    _, weights = nn.MultiheadAttention(16, 2)(x, x, x)
    expected = tuple(weights.shape)
    ok = (isinstance(answer, (tuple, list)) and all(isinstance(a, int) for a in answer)
          and tuple(answer) == expected)
    return verdict(ok, "batch_first 默认为 False：(4, 10, 16) 被读成 (L=4, N=10, E=16)，"
                       "权重形状是 (N, L, S)。", "ch01.ex2")


def ex3(answer) -> bool:
    """TransformerBlock(32, 4, 128) with every parameter of its ``attn`` sub-cell frozen
    (requires_grad=False): how many parameters are still trainable?"""
    from ..blocks import TransformerBlock, count_parameters
    block = TransformerBlock(32, 4, 128)
    for p in block.attn.get_parameters():
        p.requires_grad = False
    expected = count_parameters(block, trainable_only=True)
    ok = isinstance(answer, int) and not isinstance(answer, bool) and answer == expected
    return verdict(ok, "冻结后用 trainable_params() 计数：总数减去注意力的 4E²+4E。", "ch01.ex3")
