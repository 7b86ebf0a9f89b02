"""Checkers for notebook 01 (nn.Cell, parameters, attention blocks)."""
from .. import solutions  # noqa: F401  (solutions.ch01 is imported lazily by the factories)
from .common import (Mismatch, check_number, compare, copy_parameters, diagnose, exercise,
                     expect_parameters, grads_by_name, hidden_rng, observe, parameter_shapes,
                     run_code_check)

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


@exercise("number", "TransformerBlock(32, 4, 128) 的参数个数", solution=lambda: _block_params(),
          question="`blocks.TransformerBlock(embed_dim=32, num_heads=4, ffn_dim=128)` 有多少个参数？"
                   "先用公式算。")
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
          solution=_mha_weights_shape,
          question="`nn.MultiheadAttention(16, 2)`（默认 `batch_first`）"
                   "以 `mha(x, x, x)` 处理形状 `(4, 10, 16)` 的 `x`，返回的注意力**权重**的形状是什么？"
                   "这是第 6 节那个例子换了一个形状：先按那里的读法推理（哪一维被当成序列长度、"
                   "哪一维被当成 batch），再运行验证。写成元组。")
def ex2(answer) -> bool:
    """nn.MultiheadAttention(16, 2) with its default batch_first, called as
    mha(x, x, x) with x of shape (4, 10, 16): the shape of the attention *weights*?"""
    return check_number(answer, _mha_weights_shape(), integer=True, name="ch01.ex2",
                        hint="batch_first 默认为 False：(4, 10, 16) 被读成 (L=4, N=10, E=16)，"
                             "权重形状是 (N, L, S)。")


@exercise("number", "冻结 attn 之后 TransformerBlock(32, 4, 128) 的可训练参数个数",
          solution=lambda: _block_params(True, True),
          question="把 `TransformerBlock(32, 4, 128)` 的 `attn` 子模块的全部参数设为 `requires_grad=False`，"
                   "还剩多少可训练参数？")
def ex3(answer) -> bool:
    """TransformerBlock(32, 4, 128) with every parameter of its ``attn`` sub-cell frozen
    (requires_grad=False): how many parameters are still trainable?"""
    return check_number(answer, _block_params(True, True), integer=True, name="ch01.ex3",
                        hint="冻结后用 trainable_params() 计数：总数减去注意力的 4E²+4E。")


# --------------------------------------------------------------------------- code
def _inputs(rng, shapes):
    import mindspore as ms
    return [ms.Tensor(rng.normal(size=s).astype("float32")) for s in shapes]


def _hide_weights(cell, seed: int, scale: float = 0.5) -> None:
    """Hidden random values for every parameter of the library's reference ``cell`` (drawn
    in the library's own parameter order, so they do not depend on the learner's code):
    LayerNorm gains near 1, biases not 0, so a bug cannot hide behind an initial value."""
    import mindspore as ms
    import numpy as np
    rng = hidden_rng(seed)
    for _, p in cell.parameters_and_names():
        value = rng.normal(0.0, scale, p.shape) + (1.0 if p.name.endswith(("gamma", "weight")) and
                                                   len(p.shape) == 1 else 0.0)
        p.set_data(ms.Tensor(value.astype(np.float32), p.dtype))


def _check_parameters(learner, expected: dict, bug: str = "") -> None:
    """Observe the learner's parameter names and shapes, then require exactly ``expected``."""
    observe("参数名和形状", parameter_shapes(learner), expected)
    expect_parameters(learner, expected, bug=bug)


def _compare_grads(g_got: dict, g_want: dict, names, to_ref=lambda n: n, bug: str = "",
                   zero_bug=None) -> None:
    """Compare the gradient of every parameter in ``names`` (the library's fixed order, so two
    correct solutions observe alike); ``zero_bug(name)``: the diagnosis of an all-zero one."""
    import numpy as np
    for name in names:
        want, what = g_want[to_ref(name)], f"{name} 的梯度"
        got = g_got.get(name)
        if got is None:
            observe(what, None, want)
            raise Mismatch(f"{name} 没有梯度：这个参数不可训练（requires_grad=False）或没有注册。")
        if zero_bug is not None and not np.any(got) and np.any(want):
            observe(what, got, want, atol=1e-5, rtol=1e-4)
            raise Mismatch(zero_bug(name))
        compare(got, want, what, bug=bug)


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
                 (_sol("wrong_ffn_relu"), "ReLU")),
          targets=("course_lib.blocks.FeedForward",),
          question="**残差前馈 Cell。** 写 `MyResidualFFN(embed_dim, ffn_dim)`："
                   "子模块 `norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)`、"
                   "`fc1 = nn.Dense(embed_dim, ffn_dim)`、`fc2 = nn.Dense(ffn_dim, embed_dim)`，"
                   "激活用精确的 GELU（`nn.GELU(approximate=False)`），"
                   "前向为 `x + fc2(GELU(fc1(norm(x))))`——也就是 pre-norm 块的后半个子层。")
def residual_ffn(cls) -> bool:
    """``cls(embed_dim, ffn_dim)`` with parameters norm.gamma/beta, fc1.*, fc2.*."""
    def body():
        import numpy as np
        from mindspore import nn, ops
        learner, ref = cls(E, F), _ffn_reference()
        expected = {"norm.gamma": (E,), "norm.beta": (E,), "fc1.weight": (F, E),
                    "fc1.bias": (F,), "fc2.weight": (E, F), "fc2.bias": (E,)}
        _check_parameters(learner, expected)
        _hide_weights(ref, seed=1)
        copy_parameters(ref, learner, lambda n: n[len("ffn."):] if n.startswith("ffn.") else n)
        rng = hidden_rng(0)
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
        _compare_grads(g_got, g_want, expected, lambda n: n if n.startswith("norm") else "ffn." + n,
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
                 (_sol("wrong_block_one_norm"), "norm2")),
          targets=("course_lib.blocks.TransformerBlock",),
          question="**组装 pre-norm Transformer 块。** 用 `blocks.SelfAttention(embed_dim, num_heads)`、"
                   "`blocks.FeedForward(embed_dim, ffn_dim)` 和两个 `nn.LayerNorm((embed_dim,), epsilon=1e-5)` 写 `MyPreNormBlock(embed_dim, num_heads, ffn_dim)`，"
                   "属性名为 `attn`、`ffn`、`norm1`、`norm2`；"
                   "`construct(x, key_padding_mask=None, attn_mask=None)` 要把两个掩码都交给注意力。")
def prenorm_block(cls) -> bool:
    """``cls(embed_dim, num_heads, ffn_dim)``; construct(x, key_padding_mask=None, attn_mask=None)."""
    def body():
        import numpy as np
        from ..blocks import TransformerBlock
        learner = cls(E, H, F)
        ref, post = TransformerBlock(E, H, F, norm_first=True), TransformerBlock(E, H, F, norm_first=False)
        expected = parameter_shapes(ref)
        _check_parameters(learner, expected,
                          bug="属性名应为 attn、ffn、norm1、norm2（与 blocks.TransformerBlock 相同）。")
        _hide_weights(ref, seed=2, scale=0.3)
        copy_parameters(ref, learner)
        copy_parameters(ref, post)
        rng = hidden_rng(0)
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
        _compare_grads(g_got, g_want, expected, bug=BLOCK_HINT,
                       zero_bug=lambda name: f"{name} 的梯度全是 0：这个参数没有参与计算。"
                       f"{'第二个子层应使用 norm2。' if name.startswith('norm2') else BLOCK_HINT}")
    return run_code_check("ch01.prenorm_block", BLOCK_HINT, body)
