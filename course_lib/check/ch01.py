"""Checkers for notebook 01 (nn.Cell, parameters, attention blocks)."""
from .. import solutions  # noqa: F401  (solutions.ch01 is imported lazily by the factories)
from .common import (Mismatch, check_number, compare, copy_parameters, diagnose, exercise,
                     expect_parameters, grads_by_name, randomize_parameters, run_code_check)

E, H, F = 16, 4, 40          # hidden sizes of the checks (different from the notebook's)


def _sol(name):
    def factory():
        from ..solutions import ch01
        return getattr(ch01, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
def _block_params(trainable_only=False, freeze_attn=False) -> int:
    from ..blocks import TransformerBlock, count_parameters
    block = TransformerBlock(32, 4, 128)
    if freeze_attn:
        for p in block.attn.get_parameters():
            p.requires_grad = False
    return count_parameters(block, trainable_only=trainable_only)


@exercise("number", "TransformerBlock(32, 4, 128) 的参数个数", solution=lambda: _block_params())
def ex1(answer) -> bool:
    """How many parameters does TransformerBlock(embed_dim=32, num_heads=4, ffn_dim=128) have?"""
    return check_number(answer, _block_params(), integer=True, name="ch01.ex1",
                        hint="注意力 4E²+4E，前馈 2EF+F+E，两个 LayerNorm 各 2E；与头数无关。")


def _mha_weights_shape() -> list:
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    x = ms.Tensor(np.zeros((4, 10, 16), np.float32))
    return list(nn.MultiheadAttention(16, 2)(x, x, x)[1].shape)


@exercise("number", "nn.MultiheadAttention 默认 batch_first 时注意力权重的形状",
          solution=_mha_weights_shape)
def ex2(answer) -> bool:
    """nn.MultiheadAttention(16, 2) with its default batch_first, called as
    mha(x, x, x) with x of shape (4, 10, 16): the shape of the attention *weights*?"""
    return check_number(answer, _mha_weights_shape(), integer=True, name="ch01.ex2",
                        hint="batch_first 默认为 False：(4, 10, 16) 被读成 (L=4, N=10, E=16)，"
                             "权重形状是 (N, L, S)。")


@exercise("number", "冻结 attn 之后 TransformerBlock(32, 4, 128) 的可训练参数个数",
          solution=lambda: _block_params(True, True))
def ex3(answer) -> bool:
    """TransformerBlock(32, 4, 128) with every parameter of its ``attn`` sub-cell frozen
    (requires_grad=False): how many parameters are still trainable?"""
    return check_number(answer, _block_params(True, True), integer=True, name="ch01.ex3",
                        hint="冻结后用 trainable_params() 计数：总数减去注意力的 4E²+4E。")


# --------------------------------------------------------------------------- code
def _inputs(rng, shapes):
    import mindspore as ms
    return [ms.Tensor(rng.normal(size=s).astype("float32")) for s in shapes]


FFN_HINT = "x + fc2(GELU(fc1(norm(x))))：先 LayerNorm，再前馈，最后加回输入 x。"


def _ffn_reference():
    """The library's FeedForward behind a LayerNorm, with a residual: the check's reference."""
    from mindspore import nn
    from ..blocks import LAYER_NORM_EPS, FeedForward

    class Reference(nn.Cell):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm((E,), epsilon=LAYER_NORM_EPS)
            self.ffn = FeedForward(E, F)

        def construct(self, x):
            return x + self.ffn(self.norm(x))
    return Reference()


@exercise("code", "写一个残差前馈 Cell：x + fc2(GELU(fc1(LayerNorm(x))))",
          solution=_sol("ResidualFFN"),
          wrong=((_sol("wrong_ffn_no_residual"), "没有加回输入"),
                 (_sol("wrong_ffn_post_norm"), "post-norm"),
                 (_sol("wrong_ffn_relu"), "ReLU")))
def residual_ffn(cls) -> bool:
    """``cls(embed_dim, ffn_dim)`` with parameters norm.gamma/beta, fc1.*, fc2.*."""
    def body():
        import numpy as np
        from mindspore import nn, ops
        learner, ref = cls(E, F), _ffn_reference()
        expect_parameters(learner, {"norm.gamma": (E,), "norm.beta": (E,), "fc1.weight": (F, E),
                                    "fc1.bias": (F,), "fc2.weight": (E, F), "fc2.bias": (E,)})
        randomize_parameters(learner, seed=1)
        copy_parameters(learner, ref, lambda n: n if n.startswith("norm") else "ffn." + n)
        rng = np.random.default_rng(0)
        for x in _inputs(rng, [(1, 1, E), (3, 5, E), (2, 7, E)]):
            got, want = learner(x), ref(x)
            bug = diagnose(got, {
                "输出里没有加回输入 x：残差连接漏了（应为 x + f(x)）。": lambda: ref.ffn(ref.norm(x)),
                "这是 post-norm（norm(x + f(x))）：题目要的是 pre-norm，先 norm 再前馈、最后加 x。":
                    lambda: ref.norm(x + ref.ffn(x)),
                "激活函数用成了 ReLU：前馈里应是 GELU（nn.GELU(approximate=False)）。":
                    lambda: x + ref.ffn.fc2(ops.relu(ref.ffn.fc1(ref.norm(x)))),
                "GELU 用了 tanh 近似：写 nn.GELU(approximate=False)。":
                    lambda: x + ref.ffn.fc2(nn.GELU(approximate=True)(ref.ffn.fc1(ref.norm(x)))),
                "没有做 LayerNorm：前馈的输入应是 norm(x)。": lambda: x + ref.ffn(x),
            })
            compare(got, want, f"输入形状 {tuple(x.shape)} 的输出", bug=bug or FFN_HINT)
        x = _inputs(rng, [(2, 3, E)])[0]
        weight = rng.normal(size=(2, 3, E))
        g_got, g_want = grads_by_name(learner, (x,), weight), grads_by_name(ref, (x,), weight)
        for name, g in g_got.items():
            compare(g, g_want[name if name.startswith("norm") else "ffn." + name], f"{name} 的梯度",
                    bug="前向对了、梯度不对：是不是在 construct 里用了 asnumpy() 或 stop_gradient？")
    return run_code_check("ch01.residual_ffn", FFN_HINT, body)


BLOCK_HINT = ("x = x + attn(norm1(x), key_padding_mask, attn_mask)；x = x + ffn(norm2(x))。"
              "子模块用 blocks.SelfAttention、blocks.FeedForward 和两个 nn.LayerNorm。")


def _masks(rng, batch, length):
    import mindspore as ms
    import numpy as np
    from ..blocks import causal_mask
    pad = np.zeros((batch, length), bool)
    pad[-1, max(1, length - 2):] = True              # the last example ends in padding
    return ms.Tensor(pad), causal_mask(length)


def _one_norm(ref, x, masks):
    h = x + ref.attn(ref.norm1(x), *masks)
    return h + ref.ffn(ref.norm1(h))


@exercise("code", "用 SelfAttention、FeedForward 和两个 LayerNorm 组装 pre-norm Transformer 块",
          solution=_sol("PreNormBlock"),
          wrong=((_sol("wrong_block_post_norm"), "post-norm"),
                 (_sol("wrong_block_mask_dropped"), "掩码"),
                 (_sol("wrong_block_one_norm"), "norm2")))
def prenorm_block(cls) -> bool:
    """``cls(embed_dim, num_heads, ffn_dim)``; construct(x, key_padding_mask=None, attn_mask=None)."""
    def body():
        import numpy as np
        from ..blocks import TransformerBlock
        learner = cls(E, H, F)
        ref, post = TransformerBlock(E, H, F, norm_first=True), TransformerBlock(E, H, F, norm_first=False)
        expect_parameters(learner, {n: s for n, s in
                                    ((n, tuple(p.shape)) for n, p in ref.parameters_and_names())},
                          bug="属性名应为 attn、ffn、norm1、norm2（与 blocks.TransformerBlock 相同）。")
        randomize_parameters(learner, seed=2, scale=0.3)
        copy_parameters(learner, ref)
        copy_parameters(learner, post)
        rng = np.random.default_rng(0)
        for batch, length in ((1, 1), (3, 5), (2, 7)):
            x = _inputs(rng, [(batch, length, E)])[0]
            pad, causal = _masks(rng, batch, length)
            for what, masks in (("不带掩码", ()), ("带 key_padding_mask", (pad,)),
                                ("带 padding 与因果掩码", (pad, causal))):
                got, want = learner(x, *masks), ref(x, *masks)
                bug = diagnose(got, {
                    "这是 post-norm（norm(x + f(x))）：题目要的是 pre-norm，x + f(norm(x))。":
                        lambda: post(x, *masks),
                    "掩码没有传给注意力：attn(norm1(x), key_padding_mask, attn_mask)。":
                        lambda: ref(x),
                    "第二个子层也用了 norm1：前馈前应使用 norm2。": lambda: _one_norm(ref, x, masks),
                })
                compare(got, want, f"batch={batch}、长度={length}、{what}时的输出", bug=bug or BLOCK_HINT)
        x = _inputs(rng, [(2, 5, E)])[0]
        pad, causal = _masks(rng, 2, 5)
        weight = rng.normal(size=(2, 5, E))
        g_got, g_want = grads_by_name(learner, (x, pad, causal), weight), grads_by_name(ref, (x, pad, causal), weight)
        for name, g in g_got.items():
            if not np.any(g) and np.any(g_want[name]):
                raise Mismatch(f"{name} 的梯度全是 0：这个参数没有参与计算。"
                               f"{'第二个子层应使用 norm2。' if name.startswith('norm2') else BLOCK_HINT}")
            compare(g, g_want[name], f"{name} 的梯度", bug=BLOCK_HINT)
    return run_code_check("ch01.prenorm_block", BLOCK_HINT, body)
