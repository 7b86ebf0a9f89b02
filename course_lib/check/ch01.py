"""Checkers for notebook 01 (nn.Cell, parameters, attention blocks)."""
from .. import solutions  # noqa: F401  (solutions.ch01 is imported lazily by the factories)
from .common import (check_number, compare, copy_parameters, diagnose, exercise, expect_parameters,
                     grads_by_name, hidden_rng, matches, Mismatch, observe, parameter_shapes,
                     recognised, run_code_check)

E, H, F = 16, 4, 40          # hidden sizes of the checks (different from the notebook's)
KV = 12                      # feature size of the decoder block's context (differs from E)


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


def _attention_params() -> int:
    from ..blocks import SelfAttention, count_parameters
    return count_parameters(SelfAttention(32, 4))


@exercise("number", "TransformerBlock(32, 4, 128) 的参数个数", solution=lambda: _block_params(),
          question="`blocks.TransformerBlock(embed_dim=32, num_heads=4, ffn_dim=128)` 有多少个参数？"
                   "先用公式算。")
def ex1(answer) -> bool:
    """How many parameters does TransformerBlock(embed_dim=32, num_heads=4, ffn_dim=128) have?"""
    total, e, f = _block_params(), 32, 128
    hint = recognised(answer, [
        ("差了一项：注意力四个投影的偏置、两个 LayerNorm 的 γ 和 β，是不是漏了其中一项？", total - 4 * e),
        ("注意力四个投影的偏置和两个 LayerNorm 的 γ、β 都要算上（第 5 节）。", total - 8 * e),
        ("只数了权重矩阵：每个 Dense 的偏置和 LayerNorm 的 γ、β 也是参数。", 4 * e * e + 2 * e * f),
    ], "回到第 5 节的逐项计数（注意力的四个投影、前馈的两层、两个 LayerNorm），"
       "每一项的权重和偏置都要算上；头数不改变参数个数。")
    return check_number(answer, total, integer=True, name="ch01.ex1", hint=hint)


def _mha_weights_shape() -> list:
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    q = ms.Tensor(np.zeros((4, 10, 16), np.float32))
    kv = ms.Tensor(np.zeros((6, 10, 16), np.float32))
    return list(nn.MultiheadAttention(16, 2)(q, kv, kv)[1].shape)


@exercise("number", "nn.MultiheadAttention 默认 batch_first 时交叉注意力权重的形状",
          solution=_mha_weights_shape,
          question="`nn.MultiheadAttention(16, 2)`（默认 `batch_first`）做交叉注意力："
                   "`mha(q, kv, kv)`，`q` 的形状是 `(4, 10, 16)`，`kv` 的形状是 `(6, 10, 16)`。"
                   "返回的注意力**权重**的形状是什么？先按第 6 节的读法推理（哪一维被当成序列长度、"
                   "哪一维被当成 batch；query 和 key 的长度可以不同），再运行验证。写成元组。")
def ex2(answer) -> bool:
    """nn.MultiheadAttention(16, 2) with its default batch_first, called as mha(q, kv, kv)
    with q of shape (4, 10, 16) and kv of shape (6, 10, 16): the shape of the attention *weights*?"""
    shape = _mha_weights_shape()
    n, length, source = shape
    hint = recognised(answer, [
        ("这是把输入当成 batch 在前（batch_first=True）读出的形状：默认设置下第 0 维"
         "被当成什么？回到第 6 节的例子。", (length, n, n)),
        ("后两维的顺序反了：权重的每一行属于 query 的一个位置，还是 key 的一个位置？", (n, source, length)),
        ("后两维用了同一个长度：query 和 key 的长度在这里不同，各取自哪个输入？", (n, length, length)),
        ("后两维用了同一个长度：query 和 key 的长度在这里不同，各取自哪个输入？", (n, source, source)),
        ("这是输出的形状，题目问的是返回元组里的注意力权重。", (length, n, 16)),
    ], "回到第 6 节那个例子：默认设置下输入的第 0 维、第 1 维分别被当成什么？"
       "注意力权重的三个维度依次表示什么，各取自 q 还是 kv？")
    return check_number(answer, shape, integer=True, name="ch01.ex2", hint=hint)


@exercise("number", "冻结 attn 之后 TransformerBlock(32, 4, 128) 的可训练参数个数",
          solution=lambda: _block_params(True, True),
          question="把 `TransformerBlock(32, 4, 128)` 的 `attn` 子模块的全部参数设为 `requires_grad=False`，"
                   "还剩多少个可训练的数（所有可训练 Parameter 的元素个数之和，不是 Parameter 的个数）？")
def ex3(answer) -> bool:
    """TransformerBlock(32, 4, 128) with every parameter of its ``attn`` sub-cell frozen
    (requires_grad=False): how many parameters are still trainable?"""
    hint = recognised(answer, [
        ("这是整个块的参数个数：requires_grad=False 的参数不再出现在 "
                          "trainable_params() 里（第 3 节）。", _block_params()),
        ("这是被冻结的那一部分：题目问的是还剩多少可训练。", _attention_params()),
    ], "冻结的只有 attn 子模块（第 3 节）：其余子模块的参数都还可训练。逐项计数时别漏了偏置和 "
       "LayerNorm 的参数。")
    return check_number(answer, _block_params(True, True), integer=True, name="ch01.ex3", hint=hint)


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


FFN_HINT = ("回到第 5 节的 pre-norm 子层，对照题目逐步核对：先归一化哪一路、激活函数是哪一个、"
            "最后加回的是什么。")


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


@exercise("code", "写一个残差前馈 Cell（pre-norm 块的前馈子层）",
          solution=_sol("ResidualFFN"),
          wrong=((_sol("wrong_ffn_no_residual"), "没有加回输入"),
                 (_sol("wrong_ffn_post_norm"), "post-norm"),
                 (_sol("wrong_ffn_relu"), "ReLU")),
          targets=("course_lib.blocks.FeedForward",),
          question="**残差前馈 Cell。** 写 `MyResidualFFN(embed_dim, ffn_dim)`："
                   "子模块 `norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)`、"
                   "`fc1 = nn.Dense(embed_dim, ffn_dim)`、`fc2 = nn.Dense(ffn_dim, embed_dim)`，"
                   "激活用精确的 GELU（`nn.GELU(approximate=False)`）。"
                   "前向是 pre-norm 块的前馈子层：输入先经过 `norm`，再依次经过 `fc1`、GELU、`fc2`，"
                   "最后加回原来的输入（残差）。输出形状与输入相同。"
                   "不要用（调用或继承）课程库的 `blocks.FeedForward`：它就是这里要写的前馈部分，成绩册把这样得到的答案记为“借用”。")
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
                "输出里没有加回输入：残差连接漏了（第 5 节）。": lambda: ref.ffn(ref.norm(x)),
                "这是 post-norm：归一化放在了残差相加之后。题目要的是 pre-norm（第 5 节），"
                "只对进入前馈的那一路归一化。": lambda: ref.norm(x + ref.ffn(x)),
                "这是用 ReLU 作激活的结果：题目要的是精确的 GELU。":
                    lambda: x + ref.ffn.fc2(ops.relu(ref.ffn.fc1(ref.norm(x)))),
                "这是 tanh 近似的 GELU 的结果：题目要的是精确的 GELU（看 nn.GELU 的 approximate 参数）。":
                    lambda: x + ref.ffn.fc2(nn.GELU(approximate=True)(ref.ffn.fc1(ref.norm(x)))),
                "前馈的输入没有经过 LayerNorm：pre-norm 子层先归一化再进前馈。": lambda: x + ref.ffn(x),
            })
            compare(got, want, f"输入形状 {tuple(x.shape)} 的输出", bug=bug or FFN_HINT)
        x = _inputs(rng, [(2, 3, E)])[0]
        weight = rng.normal(size=(2, 3, E))
        g_got, g_want = grads_by_name(learner, (x,), weight), grads_by_name(ref, (x,), weight)
        _compare_grads(g_got, g_want, expected, lambda n: n if n.startswith("norm") else "ffn." + n,
                       bug="前向对了、梯度不对：是不是在 construct 里用了 asnumpy() 或 stop_gradient？")
    return run_code_check("ch01.residual_ffn", FFN_HINT, body)


BLOCK_HINT = ("逐个子层对照题目：三个子层的顺序、每个子层的归一化和残差、"
              "因果掩码与 context 的填充掩码各交给哪个注意力（第 5 节“掩码”、第 7 节）。")


def _context_mask(batch, src_len):
    """(batch, src_len) bool, True on padding: the last example's context ends in padding."""
    import mindspore as ms
    import numpy as np
    pad = np.zeros((batch, src_len), bool)
    pad[-1, max(1, src_len - 2):] = True
    return ms.Tensor(pad)


def _decode(ref, x, context, context_padding_mask=None, *, causal=True, pass_mask=True,
            post=False, one_norm=False):
    """The decoder block's forward from ``ref``'s sub-cells, and the realistic bugs: no
    causal mask, the context mask not passed on, post-norm, one LayerNorm for all three."""
    from ..blocks import causal_mask
    causal_ = causal_mask(x.shape[1]) if causal else None
    mask = context_padding_mask if pass_mask else None
    norms = (ref.self_norm,) * 3 if one_norm else (ref.self_norm, ref.cross_norm, ref.ffn_norm)
    if post:
        x = norms[0](x + ref.self_attn(x, None, causal_))
        x = norms[1](x + ref.cross_attn(x, context, mask))
        return norms[2](x + ref.ffn(x))
    x = x + ref.self_attn(norms[0](x), None, causal_)
    x = x + ref.cross_attn(norms[1](x), context, mask)
    return x + ref.ffn(norms[2](x))


def _decoder_reference():
    """The check's reference, built from the library's blocks: a pre-norm decoder block
    (causal self-attention, cross-attention to the context, feed-forward)."""
    from mindspore import nn
    from ..blocks import LAYER_NORM_EPS, CrossAttention, FeedForward, SelfAttention

    class Reference(nn.Cell):
        def __init__(self):
            super().__init__()
            self.self_attn = SelfAttention(E, H)
            self.cross_attn = CrossAttention(E, H, KV)
            self.ffn = FeedForward(E, F)
            self.self_norm = nn.LayerNorm((E,), epsilon=LAYER_NORM_EPS)
            self.cross_norm = nn.LayerNorm((E,), epsilon=LAYER_NORM_EPS)
            self.ffn_norm = nn.LayerNorm((E,), epsilon=LAYER_NORM_EPS)

        def construct(self, x, context, context_padding_mask=None):
            return _decode(self, x, context, context_padding_mask)
    return Reference()


@exercise("code", "用 SelfAttention、CrossAttention、FeedForward 和三个 LayerNorm 组装 pre-norm 解码器块",
          solution=_sol("DecoderBlock"),
          wrong=((_sol("wrong_decoder_not_causal"), "因果掩码"),
                 (_sol("wrong_decoder_mask_dropped"), "填充掩码没有交到交叉注意力"),
                 (_sol("wrong_decoder_post_norm"), "post-norm"),
                 (_sol("wrong_decoder_one_norm"), "同一个 LayerNorm")),
          targets=("course_lib.blocks.TransformerBlock",),
          question="**组装 pre-norm 解码器块。** 第 5 节的 `TransformerBlock` 是编码器块；这里写一个带交叉注意力的"
                   "解码器块 `MyDecoderBlock(embed_dim, num_heads, ffn_dim, kv_dim)`。它依次有三个 pre-norm 子层，"
                   "每个子层都是“输入 + 子层(LayerNorm(输入))”："
                   "（1）因果自注意力 `self_attn = blocks.SelfAttention(embed_dim, num_heads)`，位置 i 只能看 0..i；"
                   "（2）交叉注意力 `cross_attn = blocks.CrossAttention(embed_dim, num_heads, kv_dim)`，"
                   "query 来自上一个子层的结果，key/value 来自 `context`（`context` 不做归一化），"
                   "`context_padding_mask` 遮住 `context` 的填充位置；"
                   "（3）前馈 `ffn = blocks.FeedForward(embed_dim, ffn_dim)`。"
                   "三个子层的 LayerNorm 依次叫 `self_norm`、`cross_norm`、`ffn_norm`"
                   "（都是 `nn.LayerNorm((embed_dim,), epsilon=1e-5)`）。"
                   "`construct(x, context, context_padding_mask=None)`：`x` 形状 `(B, T, embed_dim)`，"
                   "`context` 形状 `(B, S, kv_dim)`，掩码形状 `(B, S)`、bool（`True` = 填充）或 `None`；"
                   "返回形状 `(B, T, embed_dim)`。检查器的隐藏输入包括 T = 1 与 T > 1。"
                   "三个子层可以用上面点名的 `blocks` 子模块，但不要继承第 5 节的 `TransformerBlock`：成绩册把这样得到的答案记为“借用”。")
def prenorm_block(cls) -> bool:
    """``cls(embed_dim, num_heads, ffn_dim, kv_dim)``; construct(x, context,
    context_padding_mask=None): a pre-norm decoder block (causal self-attention,
    cross-attention to ``context``, feed-forward), compared with a reference built from
    the library's SelfAttention / CrossAttention / FeedForward."""
    def body():
        learner, ref = cls(E, H, F, KV), _decoder_reference()
        expected = parameter_shapes(ref)
        _check_parameters(learner, expected,
                          bug="子模块的属性名应为 self_attn、cross_attn、ffn、self_norm、cross_norm、ffn_norm。")
        _hide_weights(ref, seed=2, scale=0.3)
        copy_parameters(ref, learner)
        rng = hidden_rng(0)
        for batch, length, src_len in ((1, 1, 3), (3, 5, 4), (2, 7, 6)):
            x, context = _inputs(rng, [(batch, length, E), (batch, src_len, KV)])
            pad = _context_mask(batch, src_len)
            for what, masks in (("不带掩码", ()), ("带 context_padding_mask", (pad,))):
                got, want = learner(x, context, *masks), ref(x, context, *masks)
                bug = ""
                if not matches(got, want):
                    bug = diagnose(got, {
                        "位置 i 看到了它后面的 token：解码器的自注意力需要因果掩码（第 5 节“掩码”）。":
                            lambda: _decode(ref, x, context, *masks, causal=False),
                        "带 context_padding_mask 时不同、不带时相同：context 的填充掩码没有交到交叉注意力"
                        "（第 7 节）。": lambda: _decode(ref, x, context, *masks, pass_mask=False),
                        "这是 post-norm：归一化放在了残差相加之后。题目要 pre-norm，"
                        "只对进入子层的那一路归一化（第 5 节）。":
                            lambda: _decode(ref, x, context, *masks, post=True),
                        "三个子层用了同一个 LayerNorm：每个子层有自己的归一化层。":
                            lambda: _decode(ref, x, context, *masks, one_norm=True),
                    })
                compare(got, want, f"batch={batch}、T={length}、S={src_len}、{what}时的输出",
                        bug=bug or BLOCK_HINT)
        x, context = _inputs(rng, [(2, 5, E), (2, 4, KV)])
        pad = _context_mask(2, 4)
        weight = rng.normal(size=(2, 5, E))
        g_got = grads_by_name(learner, (x, context, pad), weight)
        g_want = grads_by_name(ref, (x, context, pad), weight)
        _compare_grads(g_got, g_want, expected, bug=BLOCK_HINT,
                       zero_bug=lambda name: f"{name} 的梯度全是 0：这个参数没有参与计算。"
                       "三个子层各用自己的 LayerNorm 了吗？")
    return run_code_check("ch01.prenorm_block", BLOCK_HINT, body)
