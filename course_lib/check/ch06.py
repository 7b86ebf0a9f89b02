"""Checkers for notebook 06 (building Baichuan-13B).

Code exercises compare the learner's piece with the LIBRARY's own implementation
(``course_lib.layers``) on hidden random inputs; number exercises are computed here."""
from __future__ import annotations

import numpy as np

from .common import Mismatch, check_number, compare, exercise, hidden_rng, observe, run_code_check


def _solutions():
    from ..solutions import ch06
    return ch06


# ====================================================================== code exercises
@exercise("code", "写一个 RMSNorm Cell（不减均值、没有偏置，参数名 weight）",
          solution=lambda: _solutions().RMSNorm,
          wrong=((lambda: _solutions().wrong_rms_norm_mean, "减去了均值"),
                 (lambda: _solutions().wrong_rms_norm_no_weight, "没有乘 weight"),
                 (lambda: _solutions().wrong_rms_norm_axis, "轴")),
          targets=("course_lib.layers.RMSNorm",),
          question="在第 3 节“练习 1（写代码）：RMSNorm”的脚手架里写 `MyRMSNorm(hidden_size, eps=1e-6)`："
                   "不减均值、没有偏置，只有一个形状 (hidden_size,)、初始为 1 的权重，"
                   "参数名必须是 `weight`（它就是 Hugging Face 检查点里的 `input_layernorm.weight`）；"
                   "`construct` 对最后一维归一化。")
def rms_norm(cls) -> bool:
    """``cls(hidden_size, eps)`` must compute what ``layers.RMSNorm`` computes."""
    def body():
        import mindspore as ms
        from mindspore import Tensor
        from ..layers import RMSNorm
        from .cellcheck import compare_grads, copy_weights, randomize, same_parameters

        hidden = 12
        ref, mine = RMSNorm(hidden, 1e-6), cls(hidden, 1e-6)
        same_parameters(mine, ref)
        randomize(ref, seed=3)
        copy_weights(ref, mine)
        rng = hidden_rng(6)
        for shape in ((1, 5, hidden), (3, 7, hidden), (2, 1, hidden)):
            x = rng.standard_normal(shape).astype(np.float32) * rng.uniform(0.5, 3, (shape[0], 1, 1))
            want = ref(Tensor(x)).asnumpy()
            got = mine(Tensor(x)).asnumpy()
            _diagnose_rms(got, want, x, ref.weight.asnumpy(), shape)
        x16 = Tensor(rng.standard_normal((2, 3, hidden)).astype(np.float16))
        compare(mine(x16).astype(ms.float32), ref(x16).astype(ms.float32), "float16 输入的输出",
                atol=2e-2, rtol=2e-2, bug="float16 下先转成 float32 再求均方根，最后转回输入的类型。")
        compare_grads(mine, ref, [Tensor(rng.standard_normal((2, 4, hidden)).astype(np.float32))])
    return run_code_check("ch06.rms_norm", "y = x / sqrt(mean(x², 最后一维) + eps) * weight。", body)


def _diagnose_rms(got, want, x, weight, shape) -> None:
    observe(f"输入 {shape} 时的输出", got, want, atol=1e-4, rtol=1e-4)
    if got.shape != want.shape:
        raise Mismatch(f"输入 {shape} 时输出形状是 {got.shape}，应为 {want.shape}：keep_dims=True 了吗？")
    if np.allclose(got, want, atol=1e-4, rtol=1e-4):
        return
    rms = lambda v, axis: np.sqrt((v * v).mean(axis, keepdims=True) + 1e-6)   # noqa: E731
    centred = x - x.mean(-1, keepdims=True)
    probes = {
        "减去了均值：那是 LayerNorm，RMSNorm 不减均值（也没有偏置）。": weight * centred / rms(centred, -1),
        "没有乘 weight：归一化之后还要乘可学习的逐维权重。": x / rms(x, -1),
        "归一化的轴不对：均方根只在最后一维（特征）上求。": weight * x / rms(x, 1),
        "eps 加在了根号外面：应为 rsqrt(mean(x²) + eps)。": weight * x / (np.sqrt((x * x).mean(-1, keepdims=True)) + 1e-6),
    }
    for bug, value in probes.items():
        if np.allclose(got, value, atol=1e-4, rtol=1e-4):
            compare(got, want, f"输入 {shape} 时的输出", atol=1e-4, rtol=1e-4, bug=bug)
    compare(got, want, f"输入 {shape} 时的输出", atol=1e-4, rtol=1e-4,
            bug="对照公式 x * rsqrt(mean(x*x, -1, keep_dims=True) + eps) * weight 逐项检查。")


@exercise("code", "写 alibi_slopes(num_heads)：ALiBi 各头的斜率（含非 2 的幂的插值规则）",
          solution=lambda: _solutions().alibi_slopes,
          wrong=((lambda: _solutions().wrong_alibi_naive, "不是 2 的幂"),
                 (lambda: _solutions().wrong_alibi_from_zero, "第一个斜率"),
                 (lambda: _solutions().wrong_alibi_even_powers, "隔一个取一个")),
          targets=("course_lib.layers.alibi_slopes",),
          question="在第 4 节“练习 3（写代码）：ALiBi 斜率”的脚手架里按第 4 节的规则写 `my_alibi_slopes(num_heads)`，"
                   "返回长度为 `num_heads` 的斜率列表（头数是 2 的幂和不是 2 的幂都要对）。")
def alibi_slopes(func) -> bool:
    """``func(n)`` must equal ``layers.alibi_slopes(n)`` for every head count 1..64."""
    def body():
        from ..layers import alibi_slopes as reference
        for n in (8, 1, 2, 4, 16, 32, 64, 12, 40, 6, 20, 3, 5, 48, 7):
            got = np.asarray(func(n), np.float64).ravel()
            want = np.asarray(reference(n), np.float64)
            observe(f"{n} 个头的斜率", got, want, atol=1e-8, rtol=1e-6)
            if got.shape != want.shape:
                raise Mismatch(f"{n} 个头时返回了 {got.size} 个斜率，应为 {n} 个。")
            if np.allclose(got, want, rtol=1e-6):
                continue
            power = n & (n - 1) == 0
            if power and np.allclose(got, want / want[0], rtol=1e-6):
                raise Mismatch(f"{n} 个头：第一个斜率是 {got[0]:g}，应为 2^(-8/{n}) = {want[0]:g}："
                               "指数从 1 数起（m_h = 2^(-8(h+1)/n)，h 从 0 开始）。")
            if not power and np.allclose(got, [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)], rtol=1e-6):
                raise Mismatch(f"2 的幂的头数都对，但 {n} 个头（不是 2 的幂）时第 {_first_diff(got, want)} "
                               f"个斜率是 {got[_first_diff(got, want)]:.6g}，应为 {want[_first_diff(got, want)]:.6g}："
                               "不是 2 的幂时不能直接套公式，要先取最近的 2 的幂 c 的 c 个斜率，"
                               "再从 2c 个头的斜率里隔一个取一个补足。")
            i = _first_diff(got, want)
            where = "前 c 个斜率" if i < 2 ** int(np.floor(np.log2(n))) else "补上的那几个斜率"
            raise Mismatch(f"{n} 个头时第 {i} 个斜率是 {got[i]:.6g}，应为 {want[i]:.6g}（{where}）。"
                           + ("" if power else "从 2c 个头的斜率序列里隔一个取一个，要从下标 0 开始（0, 2, 4, ...）。"))
    return run_code_check("ch06.alibi_slopes", "n 为 2 的幂：start = 2^(-8/n)，斜率 start^1 … start^n；"
                          "否则取最近的 2 的幂 c，再从 2c 个头的斜率里隔一个取一个补足 n - c 个。", body)


def _first_diff(got, want) -> int:
    return int(np.flatnonzero(~np.isclose(got, want, rtol=1e-6))[0])


@exercise("code", "写 attention_bias(query_len, key_len, attention_mask, slopes)：因果 + 填充 + ALiBi",
          solution=lambda: _solutions().attention_bias,
          wrong=((lambda: _solutions().wrong_bias_no_causal, "因果掩码"),
                 (lambda: _solutions().wrong_bias_no_padding, "填充"),
                 (lambda: _solutions().wrong_bias_alibi_sign, "符号"),
                 (lambda: _solutions().wrong_bias_no_past, "KV cache")),
          targets=("course_lib.layers.attention_bias",),
          question="在第 4 节“练习 4（写代码）：注意力偏置”的脚手架里写 `my_attention_bias(query_len, key_len, attention_mask=None, slopes=None)`："
                   "返回加在注意力打分上的 float32 数组，形状能广播到 (batch, heads, T, S)；"
                   "**未来的键**和**填充的键**加一个很大的负数，"
                   "给了 `slopes` 时再加 ALiBi 项（有 KV cache 时 T < S；左填充时位置只数真实 token）。")
def attention_bias(func) -> bool:
    """The learner's bias gives the same attention weights as ``layers.attention_bias``
    (masked scores may be -1e4, -1e9 or -inf; a constant per row is allowed: softmax ignores it)."""
    def body():
        from ..layers import alibi_slopes as slopes_of
        from ..layers import attention_bias as reference
        rng = hidden_rng(11)
        mask = np.array([[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]], np.int32)
        cases = [("没有填充、没有 ALiBi", 5, 5, None, None),
                 ("因果 + ALiBi（4 个头）", 6, 6, None, slopes_of(4)),
                 ("左填充（batch 3）", 7, 7, mask, None),
                 ("左填充 + ALiBi（6 个头）", 7, 7, mask, slopes_of(6)),
                 ("KV cache：3 个新 token、共 7 个", 3, 7, mask, slopes_of(6)),
                 ("KV cache：1 个新 token", 1, 7, mask, slopes_of(4))]
        for what, t, s, m, sl in cases:
            got = _as_array(func(t, s, None if m is None else m.copy(), None if sl is None else list(sl)))
            want = reference(t, s, m, sl).asnumpy()
            _compare_bias(got, want, what, t, s, m, sl, rng)
    return run_code_check("ch06.attention_bias", "允许的位置加 0，未来的键和填充的键加一个很大的负数；"
                          "ALiBi 再加 slope_h × (键位置 − 查询位置)，位置只数真实 token；"
                          "有 KV cache 时 T 个查询是 S 个 token 里的最后 T 个。", body)


def _as_array(value) -> np.ndarray:
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    return np.asarray(value, np.float64)


def _softmax(z):
    z = np.where(np.isneginf(z), -1e30, z)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _compare_bias(got, want, what, t, s, mask, slopes, rng) -> None:
    batch = 1 if mask is None else mask.shape[0]
    heads = 1 if slopes is None else len(slopes)
    want = np.broadcast_to(want, (batch, heads, t, s))
    scores = rng.standard_normal((batch, heads, t, s))
    p_want = _softmax(scores + want)
    live = (want > -1e3).any(-1)                     # rows with at least one allowed key
    # What is graded: the attention weights of the rows with an allowed key (the bias itself
    # may differ between correct solutions: -1e4 / -inf, a constant per row).
    weights = f"{what}：注意力权重（有可见键的行）"
    try:
        got = np.broadcast_to(got, (batch, heads, t, s))
    except ValueError:
        observe(weights, None, p_want * live[..., None], atol=1e-4)
        raise Mismatch(f"{what}：偏置的形状 {got.shape} 不能广播到 (batch, heads, T, S) = "
                       f"({batch}, {heads}, {t}, {s})。") from None
    p_got = _softmax(scores + got)
    observe(weights, p_got * live[..., None], p_want * live[..., None], atol=1e-4)
    if np.isnan(got).any():
        raise Mismatch(f"{what}：偏置里有 NaN（-inf 乘以 0 或 -inf + inf？）。")
    if t < s and np.abs(p_got - p_want).max() > 1e-4:
        from ..layers import attention_bias as reference
        as_first = np.broadcast_to(reference(s, s, mask, slopes).asnumpy()[:, :, :t], got.shape)
        if np.abs(_softmax(scores + as_first) - p_got).max() < 1e-4:
            raise Mismatch(f"{what}：查询 i 被当成了第 i 个 token。带 KV cache 时（T={t} < S={s}）"
                           "这 T 个查询是 S 个 token 里的最后 T 个：查询 i 是第 S−T+i 个 token，"
                           "能看到键 0..S−T+i，ALiBi 距离也要从那里算。")
    allowed = want > -1e3
    leak = np.where(~allowed & live[..., None], p_got, 0.0)
    if leak.max() > 1e-3:
        b, h, i, j = np.unravel_index(int(leak.argmax()), leak.shape)
        past = s - t
        if mask is not None and mask[b, j] == 0:
            bug = "填充的键没有挡住：attention_mask 为 0 的位置要加很大的负数。"
        elif j <= i + past + 0 and j > i:
            bug = ("带 KV cache 时（T < S）第 i 个查询是第 S−T+i 个 token，它能看到键 0..S−T+i："
                   "因果掩码要错开 S − T 位。")
        else:
            bug = "因果掩码缺失或方向反了：查询 i 不能看到它之后的键。"
        raise Mismatch(f"{what}：batch {b} 头 {h} 的查询 {i} 在不该看到的键 {j} 上得到注意力权重 "
                       f"{p_got[b, h, i, j]:.2f}。{bug}")
    blocked = np.where(allowed & live[..., None], p_got < 1e-6, False) & (p_want > 1e-4)
    if blocked.any():
        b, h, i, j = np.argwhere(blocked)[0]
        bug = ("带 KV cache 时查询 i 是第 S−T+i 个 token：它能看到键 0..S−T+i。"
               if t < s else "允许的位置被挡住了：查询 i 可以看到键 0..i（包括自己）。")
        raise Mismatch(f"{what}：batch {b} 头 {h} 的查询 {i} 看不到键 {j}，但它应该看得到。{bug}")
    _compare_weights(p_got, p_want, live, what, scores, want, t, s, mask, slopes)


def _compare_weights(p_got, p_want, live, what, scores, want, t, s, mask, slopes) -> None:
    """No future/padding leak and nothing blocked: the weights differ only in ALiBi."""
    diff = np.abs(p_got - p_want) * live[..., None]
    if diff.max() > 1e-4:
        b, h, i, j = np.unravel_index(int(diff.argmax()), diff.shape)
        if slopes is None:
            bug = "没有 ALiBi 时允许的位置应该只加 0。"
        else:
            flipped = _softmax(scores + _flip_alibi(want, slopes, mask, t, s))
            if np.abs(flipped - p_got).max() < 1e-4:
                bug = "ALiBi 的符号反了：应加 slope × (键位置 − 查询位置) ≤ 0，越远惩罚越大。"
            elif mask is not None:
                bug = ("ALiBi 的距离要按真实 token 数：左填充的行里位置从第一个真实 token 数起"
                       "（或检查斜率与头的对应关系）。")
            else:
                bug = "ALiBi 项不对：第 h 个头加 slopes[h] × (j − i)。"
        raise Mismatch(f"{what}：batch {b} 头 {h} 查询 {i} 对键 {j} 的注意力权重是 {p_got[b, h, i, j]:.4f}，"
                       f"应为 {p_want[b, h, i, j]:.4f}。{bug}")


def _flip_alibi(want, slopes, mask, t, s):
    """The reference bias with the ALiBi term's sign flipped (to recognise that bug)."""
    from ..layers import attention_bias as reference
    plain = reference(t, s, mask, None).asnumpy()
    return plain - (want - plain)


@exercise("code", "用课程的积木（Attention、SwiGLU、RMSNorm）组装一个 pre-norm 解码层",
          solution=lambda: _solutions().DecoderLayer,
          wrong=((lambda: _solutions().wrong_layer_post_norm, "post-norm"),
                 (lambda: _solutions().wrong_layer_parallel, "并行"),
                 (lambda: _solutions().wrong_layer_no_residual, "残差")),
          targets=("course_lib.layers.DecoderLayer",),
          question="在第 3 节“练习 2（写代码）：用积木组装一个解码层”的脚手架里写 `MyDecoderLayer(config)`："
                   "用 `layers.Attention`、`layers.SwiGLU`、`layers.RMSNorm` 组装 pre-norm 解码层，"
                   "子 Cell 的属性名与 Hugging Face 的一样（`self_attn`、`mlp`、`input_layernorm`、"
                   "`post_attention_layernorm`）；"
                   "`construct(x, bias, cos=None, sin=None, cache=None, layer_idx=0)` 把位置信息（ALiBi 的 `bias` 或 RoPE 的 `cos/sin`）"
                   "和 KV cache 原样交给 `self_attn`。")
def decoder_layer(cls) -> bool:
    """``cls(config)`` has DecoderLayer's parameter names and computes what it computes
    (ALiBi and RoPE configs; outputs and gradients with copied random weights)."""
    def body():
        from mindspore import Tensor
        from .. import baichuan, internlm, layers
        from .cellcheck import compare_grads, copy_weights, randomize, same_parameters

        rng = hidden_rng(5)
        for cfg in (baichuan.tiny(hidden_size=16, num_heads=4, intermediate_size=24, num_layers=1),
                    internlm.tiny(hidden_size=16, num_heads=2, intermediate_size=24, num_layers=1)):
            ref, mine = layers.DecoderLayer(cfg), cls(cfg)
            same_parameters(mine, ref)
            randomize(ref, seed=7)
            copy_weights(ref, mine)
            for batch, length in ((1, 5), (3, 4)):
                mask = np.ones((batch, length), np.int32)
                mask[1:, :1] = 0                                        # left padding in rows 1..
                args = _layer_inputs(cfg, layers, mask, rng)
                got, want = mine(*args), ref(*args)
                _diagnose_layer(ref, args, got, want, f"{cfg.position} 配置、输入 {batch}×{length}")
            compare_grads(mine, ref, args, bug="输出对了但梯度不同：是不是在 construct 里用了 "
                                             "stop_gradient 或 asnumpy()？")
        _ = Tensor
    return run_code_check("ch06.decoder_layer", "pre-norm：x = x + self_attn(input_layernorm(x), bias, cos, sin, "
                          "cache, layer_idx)；return x + mlp(post_attention_layernorm(x))。", body)


def _layer_inputs(cfg, layers, mask, rng):
    from mindspore import Tensor
    batch, length = mask.shape
    x = Tensor(rng.standard_normal((batch, length, cfg.hidden_size)).astype(np.float32))
    if cfg.position == "alibi":
        return x, layers.attention_bias(length, length, mask, layers.alibi_slopes(cfg.num_heads))
    cos, sin = layers.RotaryEmbedding(cfg.head_dim, cfg.rope_base)(layers.positions_from_mask(mask))
    return x, layers.attention_bias(length, length, mask, None), cos, sin


def _diagnose_layer(ref, args, got, want, what) -> None:
    g, w = got.asnumpy(), want.asnumpy()
    observe(f"{what}的输出", g, w, atol=1e-4, rtol=1e-3)
    if g.shape == w.shape and np.allclose(g, w, atol=1e-4, rtol=1e-3):
        return
    x, rest = args[0], args[1:]
    attn = ref.self_attn
    n1, n2, mlp = ref.input_layernorm, ref.post_attention_layernorm, ref.mlp
    h_post = n1(x + attn(x, *rest))
    probes = {
        "这是 post-norm（先加残差再归一化）；LLaMA/Baichuan 用 pre-norm：先归一化、算子层，再加残差。":
            n2(h_post + mlp(h_post)),
        "两个分支都读了层的输入 x（并行结构）：MLP 要读加过注意力残差之后的 x。":
            x + attn(n1(x), *rest) + mlp(n2(x)),
        "MLP 外面少了残差：return x + mlp(post_attention_layernorm(x))。":
            mlp(n2(x + attn(n1(x), *rest))),
        "注意力外面少了残差：x = x + self_attn(...)。":
            (lambda h: h + mlp(n2(h)))(attn(n1(x), *rest)),
        "两个 RMSNorm 用反了：注意力前用 input_layernorm，MLP 前用 post_attention_layernorm。":
            (lambda h: h + mlp(n1(h)))(x + attn(n2(x), *rest)),
    }
    for bug, value in probes.items():
        if value.shape == got.shape and np.allclose(g, value.asnumpy(), atol=1e-4, rtol=1e-3):
            compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-3, bug=bug)
    compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-3,
            bug="对照 pre-norm 的两行公式逐项检查；bias、cos、sin、cache、layer_idx 要原样传给 self_attn。")


# ====================================================================== number exercises
@exercise("number", "24 个头的 ALiBi 斜率（长度 24 的列表）",
          solution=lambda: __import__("course_lib.layers", fromlist=["x"]).alibi_slopes(24),
          question="不运行代码，按第 4 节的规则手算 **24** 个头的 ALiBi 斜率（一个长度为 24 的列表，"
                   "顺序与 `alibi_slopes` 相同；先写成 $2^{-x}$ 再换成小数，每个保留 4 位有效数字）。24 不是 2 的幂，"
                   "第 4 节也没有打印它；这里检验你能不能不靠代码走完一遍插值规则，"
                   "算完可以用你的 `my_alibi_slopes(24)` 核对。")
def ex1(answer) -> bool:
    """The 24 ALiBi slopes of a 24-head model (Baichuan's _get_interleave rule; 24 is not a
    power of two, and the notebook prints the slopes of 8, 20 and 40 heads only)."""
    from ..layers import alibi_slopes
    return check_number(answer, alibi_slopes(24), name="ch06.ex1", rel=1e-3,
                        hint="24 不是 2 的幂：先取最近的 2 的幂 16 个头的 16 个斜率（等比数列，"
                             "公比 2^(-8/16)），再从 32 个头的斜率序列里隔一个取一个（下标 0, 2, 4, …），"
                             "补足 8 个；顺序是先 16 个、后 8 个。")


def _layer_params() -> int:
    from ..internlm import internlm_7b
    shapes = internlm_7b().parameter_shapes()
    return sum(int(np.prod(s)) for n, s in shapes.items() if n.startswith("model.layers.0."))


@exercise("number", "InternLM-7B 一个解码层的参数量（q/k/v/o 投影都带偏置）", solution=_layer_params,
          question="InternLM-7B 的解码层没有 `W_pack`，而是四个分开的投影 `q_proj/k_proj/v_proj/o_proj`，"
                   "**每个都带偏置**（第 5 节末尾）；MLP 和两个 RMSNorm 与 Baichuan 的一样。"
                   "用 `internlm.internlm_7b()` 查出它的 hidden 和 FFN 尺寸，手算**一个**解码层有多少参数，"
                   "给出整数。第 6 节的表只有 Baichuan 的逐层数字，没有这一行。")
def ex2(answer) -> bool:
    """Parameters of ONE InternLM-7B decoder layer: q/k/v/o projections WITH biases, SwiGLU MLP
    and two RMSNorms (notebook 06 prints Baichuan's per-layer parts, not this layer)."""
    return check_number(answer, _layer_params(), name="ch06.ex2", integer=True, rel=0,
                        hint="q_proj/k_proj/v_proj/o_proj 各是 h×h 的权重加长度 h 的偏置，gate/up/down "
                             "三个 h×f 矩阵（没有偏置），两个 RMSNorm 各 h 个；h、f 用 "
                             "internlm.internlm_7b() 的 hidden_size 和 intermediate_size。")


def _int8_gib() -> float:
    from ..baichuan import baichuan_7b
    from ..memory import GiB, weight_bytes
    return weight_bytes(baichuan_7b(), "int8") / GiB


@exercise("number", "Baichuan-7B 的权重用 int8 存放时占多少 GiB", solution=_int8_gib,
          question="Baichuan-**7B** 的权重以 int8 存储要多少 GiB？")
def ex3(answer) -> bool:
    """Memory (GiB, 2**30 bytes) of Baichuan-7B's weights in int8."""
    return check_number(answer, _int8_gib(), name="ch06.ex3", rel=5e-3,
                        hint="int8 每个参数 1 字节；参数量（第 6 节数到个位）/ 2**30（GiB 不是 10**9 字节）。")


def _devices() -> int:
    from ..baichuan import baichuan_13b
    from ..memory import devices_needed
    return devices_needed(baichuan_13b(), 16, tp=8, zero=1, recompute=True, seq_len=4096).devices


@exercise("number", "16 GiB 的卡、tp=8 + ZeRO-1 + 重计算训练 Baichuan-13B 最少要几张卡", solution=_devices,
          question="用 16 GiB 的卡训练 Baichuan-13B（序列 4096、每卡 1 条），tp=8、ZeRO-1、全量重计算，"
                   "最少要几张卡？（每张卡上哪些部分随 dp 变小、哪些不变？dp 至少要多大？）")
def ex4(answer) -> bool:
    """Fewest 16 GiB devices to train Baichuan-13B (seq 4096, micro-batch 1) with tensor
    parallel 8, ZeRO-1 and full recomputation."""
    return check_number(answer, _devices(), name="ch06.ex4", integer=True, rel=0,
                        hint="每张卡 = tp 切开的 16 位权重和梯度（4N/8 字节）+ 被 tp 和 dp 一起切开的 "
                             "float32 主权重与 Adam 状态（12N/(8·dp)，ZeRO-1）+ 重计算后剩下的激活。"
                             "dp 从 1 往上试（memory.plan(cfg, 16, Layout(dp=d, tp=8, zero=1, "
                             "recompute=True, seq_len=4096)) 的 .fits），第一个放得下的 dp 乘以 tp 就是卡数。")
