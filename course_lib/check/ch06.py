"""Checkers for notebook 06 (building Baichuan-13B).

Code exercises compare the learner's piece with the LIBRARY's own implementation
(``course_lib.layers``) on hidden random inputs; number exercises are computed here."""
from __future__ import annotations

import numpy as np

from .common import (as_number, BadAnswer, check_number, close, compare, exercise, hidden_rng,
                     Mismatch, observe, recognised, run_code_check)


def _solutions():
    from ..solutions import ch06
    return ch06


# ====================================================================== code exercises
@exercise("code", "写一个 RMSNorm Cell（不减均值、没有偏置，参数名 weight）",
          solution=lambda: _solutions().RMSNorm,
          wrong=((lambda: _solutions().wrong_rms_norm_mean, "减去了均值"),
                 (lambda: _solutions().wrong_rms_norm_no_weight, "没有乘 weight"),
                 (lambda: _solutions().wrong_rms_norm_axis, "轴"),
                 (lambda: _solutions().wrong_rms_norm_float16, "65504")),
          targets=("course_lib.layers.RMSNorm",),
          question="在第 3 节“写代码：RMSNorm”的脚手架里写 `MyRMSNorm(hidden_size, eps=1e-6)`："
                   "不减均值、没有偏置，只有一个形状 (hidden_size,)、初始为 1 的权重，"
                   "参数名必须是 `weight`（它就是 Hugging Face 检查点里的 `input_layernorm.weight`）；"
                   "`construct` 对最后一维归一化。输入也可能是 float16：在 float32 里归一化，输出转回输入的 dtype。"
                   "检查器先把参考实现的随机权重复制给你的层（所以权重的初值不计分），在 batch 1、2、3 的 float32 输入"
                   "（容差 1e-4）和 batch 2 的 float16 输入（数值大到几百，像大模型里常见的激活；容差 2e-2）上比较参数名、输出和梯度。")
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
        x16 = Tensor((rng.standard_normal((2, 3, hidden)) * 300).astype(np.float16))   # some |x| > 256
        got16 = mine(x16)
        observe("float16 输入时输出的 dtype", str(got16.dtype), "Float16")
        if got16.dtype != ms.float16:
            raise Mismatch(f"float16 的输入，你的输出是 {got16.dtype}：题目要求在 float32 里归一化，"
                           "输出再转回输入的 dtype（第 3 节开头）。")
        compare(got16.astype(ms.float32), ref(x16).astype(ms.float32), "float16 输入的输出",
                atol=2e-2, rtol=2e-2, bug="float32 输入都对，float16 输入不对：这些输入有的大到几百，"
                                          "它的平方超出了 float16 能表示的最大值 65504。题目要求在 float32 里归一化、"
                                          "输出转回输入的 dtype（第 3 节开头）。")
        compare_grads(mine, ref, [Tensor(rng.standard_normal((2, 4, hidden)).astype(np.float32))])
    return run_code_check("ch06.rms_norm", "对照第 3 节 RMSNorm 的公式逐项检查：在哪一维求均方根、"
                          "eps 加在哪里、weight 乘在哪里。", body)


def _diagnose_rms(got, want, x, weight, shape) -> None:
    observe(f"输入 {shape} 时的输出", got, want, atol=1e-4, rtol=1e-4)
    if got.shape != want.shape:
        raise Mismatch(f"输入 {shape} 时输出形状是 {got.shape}，应为 {want.shape}："
                       "RMSNorm 的输出与输入形状相同（求均方根时消掉的那一维要能和 x 对齐）。")
    if np.allclose(got, want, atol=1e-4, rtol=1e-4):
        return
    rms = lambda v, axis: np.sqrt((v * v).mean(axis, keepdims=True) + 1e-6)   # noqa: E731
    centred = x - x.mean(-1, keepdims=True)
    probes = {
        "减去了均值：那是 LayerNorm，RMSNorm 不减均值（也没有偏置）。": weight * centred / rms(centred, -1),
        "没有乘 weight：归一化之后还要乘可学习的逐维权重。": x / rms(x, -1),
        "归一化的轴不对：均方根只在最后一维（特征）上求。": weight * x / rms(x, 1),
        "eps 加在了根号外面：对照第 3 节的公式，eps 在哪里？": weight * x / (np.sqrt((x * x).mean(-1, keepdims=True)) + 1e-6),
    }
    for bug, value in probes.items():
        if np.allclose(got, value, atol=1e-4, rtol=1e-4):
            compare(got, want, f"输入 {shape} 时的输出", atol=1e-4, rtol=1e-4, bug=bug)
    compare(got, want, f"输入 {shape} 时的输出", atol=1e-4, rtol=1e-4,
            bug="对照第 3 节的公式逐项检查（均方根、eps、weight）。")


# Where else the slopes are one call away: transformers' BLOOM and Falcon build the ALiBi
# tensor (slopes x positions) with the same rule (transformers 4.56.2,
# models/bloom/modeling_bloom.py:56, models/falcon/modeling_falcon.py:139). MPT's
# ``build_mpt_alibi_tensor`` uses another rule for other head counts, so it is not listed.
ALIBI_ELSEWHERE = ("transformers.models.bloom.modeling_bloom.build_alibi_tensor",
                   "transformers.models.bloom.modeling_bloom.BloomModel.build_alibi_tensor",
                   "transformers.BloomModel.build_alibi_tensor",
                   "transformers.models.falcon.modeling_falcon.build_alibi_tensor")


@exercise("code", "写 alibi_slopes(num_heads)：ALiBi 各头的斜率（含非 2 的幂的插值规则）",
          solution=lambda: _solutions().alibi_slopes,
          wrong=((lambda: _solutions().wrong_alibi_naive, "不是 2 的幂"),
                 (lambda: _solutions().wrong_alibi_from_zero, "第一个斜率"),
                 (lambda: _solutions().wrong_alibi_even_powers, "隔一个取一个")),
          targets=("course_lib.layers.alibi_slopes", *ALIBI_ELSEWHERE),
          question="在第 4 节“写代码：ALiBi 斜率”的脚手架里按第 4 节的规则写 `my_alibi_slopes(num_heads)`，"
                   "返回长度为 `num_heads` 的斜率列表（头数是 2 的幂和不是 2 的幂都要对）。"
                   "请按规则自己写。直接调用课程的 `layers.alibi_slopes`，或第 4 节拿来核对的 BLOOM 的 `build_alibi_tensor`"
                   "（Falcon 的同名函数也一样），笔记本里的检查和成绩册都把这样的答案记为“借用”。")
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
                raise Mismatch(f"{n} 个头：第一个斜率是 {got[0]:g}，应为 {want[0]:g}，"
                               "之后的每个斜率也都错开了一位：第 4 节的公式里，第一个头（h = 0）的指数是多少？")
            if not power and np.allclose(got, [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)], rtol=1e-6):
                raise Mismatch(f"2 的幂的头数都对，但 {n} 个头（不是 2 的幂）时第 {_first_diff(got, want)} "
                               f"个斜率是 {got[_first_diff(got, want)]:.6g}，应为 {want[_first_diff(got, want)]:.6g}："
                               "你把 n 直接代进了 2 的幂的公式；回到第 4 节，头数不是 2 的幂时的规则。")
            i = _first_diff(got, want)
            where = "前 c 个斜率" if i < 2 ** int(np.floor(np.log2(n))) else "补上的那几个斜率"
            raise Mismatch(f"{n} 个头时第 {i} 个斜率是 {got[i]:.6g}，应为 {want[i]:.6g}（{where}）。"
                           + ("" if power else "补上的斜率取自 2c 个头的序列，隔一个取一个：从哪一个开始？"
                                               "（第 4 节；“写代码：ALiBi 斜率”后面那一格打印的指数可以对照。）"))
    return run_code_check("ch06.alibi_slopes", "对照第 4 节的斜率规则：头数是 2 的幂、不是 2 的幂两种情形。", body)


def _first_diff(got, want) -> int:
    return int(np.flatnonzero(~np.isclose(got, want, rtol=1e-6))[0])


@exercise("code", "写 attention_bias(query_len, key_len, attention_mask, slopes)：因果 + 填充 + ALiBi",
          solution=lambda: _solutions().attention_bias,
          wrong=((lambda: _solutions().wrong_bias_no_causal, "因果掩码"),
                 (lambda: _solutions().wrong_bias_no_padding, "填充"),
                 (lambda: _solutions().wrong_bias_alibi_sign, "符号"),
                 (lambda: _solutions().wrong_bias_no_past, "KV cache")),
          targets=("course_lib.layers.attention_bias",),
          question="在第 4 节“写代码：注意力偏置”的脚手架里写 `my_attention_bias(query_len, key_len, attention_mask=None, slopes=None)`："
                   "返回加在注意力打分上的 float32 数组，形状能广播到 (batch, heads, T, S)；"
                   "**未来的键**和**填充的键**加一个很大的负数，"
                   "给了 `slopes` 时再加 ALiBi 项（有 KV cache 时 T < S；左填充的行里，真实 token 之间的距离与没有填充时相同）。")
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
    return run_code_check("ch06.attention_bias", "对照“写代码：注意力偏置”上面列出的规则逐条检查：因果掩码、填充掩码、"
                          "ALiBi 项，以及带 KV cache 和左填充时的两个细节。", body)


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
        seen = (as_first > -1e3).any(-1)[..., None]     # rows where query i as token i sees a key
        if np.abs((_softmax(scores + as_first) - p_got) * seen).max() < 1e-4:
            raise Mismatch(f"{what}：你的偏置把查询 i 当成了第 i 个 token。带 KV cache 时（T={t} < S={s}）"
                           "这 T 个查询是 S 个 token 里的哪几个？（“写代码：注意力偏置”上面的第一个细节；"
                           "它决定每个查询能看到哪些键，也决定 ALiBi 的距离。）")
    allowed = want > -1e3
    leak = np.where(~allowed & live[..., None], p_got, 0.0)
    if leak.max() > 1e-3:
        b, h, i, j = np.unravel_index(int(leak.argmax()), leak.shape)
        past = s - t
        if mask is not None and mask[b, j] == 0:
            bug = "这个键是填充（attention_mask 为 0），却没有挡住。"
        elif j <= i + past + 0 and j > i:
            bug = ("带 KV cache 时（T < S）查询看到了它之后的键：这 T 个查询是 S 个 token 里的哪几个？"
                   "（“写代码：注意力偏置”上面的第一个细节）")
        else:
            bug = "这个键在查询之后：因果掩码缺失或方向反了。"
        raise Mismatch(f"{what}：batch {b} 头 {h} 的查询 {i} 在不该看到的键 {j} 上得到注意力权重 "
                       f"{p_got[b, h, i, j]:.2f}。{bug}")
    blocked = np.where(allowed & live[..., None], p_got < 1e-6, False) & (p_want > 1e-4)
    if blocked.any():
        b, h, i, j = np.argwhere(blocked)[0]
        bug = ("带 KV cache 时被挡住的这个键其实在查询之前：这 T 个查询是 S 个 token 里的哪几个？"
               "（“写代码：注意力偏置”上面的第一个细节）"
               if t < s else "允许的位置被挡住了：查询能看到它自己和它之前的所有真实 token。")
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
                bug = "ALiBi 的符号反了：远处的键得到的权重反而更大（第 4 节开头：越远扣得越多）。"
            elif mask is not None:
                bug = ("有左填充的批次里 ALiBi 项不对：填充是否改变了真实 token 之间的距离？"
                       "（“写代码：注意力偏置”上面的第二个细节；也检查斜率与头的对应关系）")
            else:
                bug = "ALiBi 项与参考不同：检查每个头用的斜率，以及键与查询之间的距离（第 4 节开头）。"
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
                 (lambda: _solutions().wrong_layer_no_residual, "残差"),
                 (lambda: _solutions().wrong_layer_fixed_projection, "按 config"),
                 (lambda: _solutions().wrong_layer_drops_cache, "cache 没有交给"),
                 (lambda: _solutions().wrong_layer_first_cache_layer, "layer_idx 没有原样")),
          targets=("course_lib.layers.DecoderLayer",),
          taught=("def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):",),
          question="在第 3 节“写代码：用积木组装一个解码层”的脚手架里写 `MyDecoderLayer(config)`："
                   "用 `layers.Attention`、`layers.SwiGLU`、`layers.RMSNorm` 组装 pre-norm 解码层，"
                   "子 Cell 的属性名与 Hugging Face 的一样（`self_attn`、`mlp`、`input_layernorm`、"
                   "`post_attention_layernorm`）；"
                   "`construct(x, bias, cos=None, sin=None, cache=None, layer_idx=0)` 把位置信息（ALiBi 的 `bias` 或 RoPE 的 `cos/sin`）"
                   "和 KV cache 原样交给 `self_attn`。各子 Cell 的尺寸和选项从 `config` 取：注意力的投影随模型而变"
                   "（Baichuan 是融合的 `W_pack`、没有偏置；InternLM 是分开的 q/k/v/o、带偏置，第 5 节末尾），"
                   "`help(layers.Attention)` 列出它的参数。检查器在 Baichuan（ALiBi）和 InternLM（RoPE）两种配置上，"
                   "用复制的随机权重比较参数名、输出和梯度，再带着 KV cache 解码一步（`layer_idx=1`），"
                   "比较这一步的输出。")
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
            try:
                same_parameters(mine, ref)
            except Mismatch as m:
                extra = ("注意力的投影和偏置要按 config 建（第 5 节末尾：Baichuan 与 InternLM 的区别）。"
                         if "self_attn" in str(m) else "")
                raise Mismatch(f"{cfg.name}（{cfg.position}）配置：{m}{extra}") from None
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
            _check_cached_step(cfg, layers, mine, ref, rng)
        _ = Tensor
    return run_code_check("ch06.decoder_layer", "对照第 3 节 pre-norm 的两行公式：先归一化、再进子层、最后加残差；"
                          "位置信息和 KV cache 要原样交给 self_attn。", body)


def _check_cached_step(cfg, layers, mine, ref, rng):
    """Prefill 4 tokens into a KV cache at layer 1 of 2, then decode one token with it: the
    learner's layer must hand ``cache`` and ``layer_idx`` to ``self_attn`` unchanged."""
    where = f"{cfg.position} 配置、带 KV cache（layer_idx=1）"
    caches = {"mine": layers.KVCache(2), "ref": layers.KVCache(2)}
    mask = np.ones((1, 5), np.int32)
    prefix, step = _layer_inputs(cfg, layers, mask[:, :4], rng), _layer_inputs(cfg, layers, mask, rng)
    step = (step[0][:, 4:], step[1][:, :, -1:], *(t[:, :, 4:] for t in step[2:]))   # the 5th token's query
    for name, layer in (("mine", mine), ("ref", ref)):
        layer(*prefix, cache=caches[name], layer_idx=1)
    filled = [k is not None for k in caches["mine"].keys]
    observe(f"{where}预填充 4 个 token 后，缓存里有内容的层", filled, [False, True])
    if not filled[1]:
        raise Mismatch(f"{where}预填充 4 个 token 后，第 1 层的缓存是空的" +
                       ("，写进了第 0 层：layer_idx 没有原样交给 self_attn。" if filled[0]
                        else "：cache 没有交给 self_attn。"))
    compare(mine(*step, cache=caches["mine"], layer_idx=1), ref(*step, cache=caches["ref"], layer_idx=1),
            f"{where}解码一步的输出", bug="construct 要把 cache 和 layer_idx 原样交给 self_attn。")


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
        "MLP 子层的输出没有加回它的输入（少了残差）：对照第 3 节的第二行公式。":
            mlp(n2(x + attn(n1(x), *rest))),
        "注意力子层的输出没有加回它的输入（少了残差）：对照第 3 节的第一行公式。":
            (lambda h: h + mlp(n2(h)))(attn(n1(x), *rest)),
        "两个 RMSNorm 用反了：看它们的名字，哪一个在注意力之前？":
            (lambda h: h + mlp(n1(h)))(x + attn(n2(x), *rest)),
    }
    for bug, value in probes.items():
        if value.shape == got.shape and np.allclose(g, value.asnumpy(), atol=1e-4, rtol=1e-3):
            compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-3, bug=bug)
    compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-3,
            bug="对照第 3 节 pre-norm 的两行公式逐项检查；bias、cos、sin、cache、layer_idx 要原样交给 self_attn。")


# ====================================================================== number exercises
ALIBI_HEADS = 112                    # BLOOM-176B: ALiBi with 112 heads
ALIBI_ASKED = (0, 63, 64, 111)       # the heads asked for (0-based)


def _asked_slopes(slopes) -> list:
    return [float(slopes[h]) for h in ALIBI_ASKED]


def _bloom_slopes() -> list:
    from ..layers import alibi_slopes
    return _asked_slopes(alibi_slopes(ALIBI_HEADS))


@exercise("number", "112 个头（BLOOM-176B）的 ALiBi：第 0、63、64、111 个头的斜率", solution=_bloom_slopes,
          question="BLOOM-176B 也用 ALiBi，它有 **112** 个头（不是 2 的幂；[BLOOM 的 config.json](https://huggingface.co/bigscience/bloom/blob/main/config.json) 的 `n_head`）。先不运行代码，按第 4 节的规则手算"
                   "第 0、63、64、111 个头（从 0 数，顺序与 `alibi_slopes` 相同）的斜率，给出 4 个数的列表 "
                   "`[m_0, m_63, m_64, m_111]`：先写成 $2^{-x}$ 再换成小数，每个保留 4 位有效数字"
                   "（相对误差 1e-3 以内算对）。算完可以用你的 `my_alibi_slopes(112)` 核对；"
                   "不要调用课程的 `alibi_slopes`，也不要调用第 4 节拿来核对的 BLOOM 的 `build_alibi_tensor`（transformers 里 Falcon 的同名函数也一样）：成绩册把用它们得到的答案记为“借用”。",
          targets=("course_lib.layers.alibi_slopes", *ALIBI_ELSEWHERE))
def ex1(answer) -> bool:
    """Slopes of heads 0, 63, 64 and 111 of a 112-head ALiBi model (BLOOM-176B; 112 is not a
    power of two, and its closest power of two, 64, is used by no row the notebook prints)."""
    from ..layers import alibi_slopes
    from ..solutions.ch06 import wrong_alibi_even_powers, wrong_alibi_from_zero, wrong_alibi_naive
    n = ALIBI_HEADS
    hint = recognised(answer, (
        ("你把 112 直接代进了 2 的幂的公式：112 不是 2 的幂（第 4 节的规则分两种情形）。",
         _asked_slopes(wrong_alibi_naive(n))),
        ("第 64、111 个头取错了位置：补上的斜率取自 2c 个头的序列、隔一个取一个，从哪一个开始？（第 4 节）",
         _asked_slopes(wrong_alibi_even_powers(n))),
        ("每个斜率都错开了一位：第 4 节的公式里，第一个头（h = 0）的指数是多少？",
         _asked_slopes(wrong_alibi_from_zero(n))),
        ("c 取大了：c 是小于头数的最大的 2 的幂，前 c 个头用 c 个头的公式（第 4 节）。",
         _asked_slopes(alibi_slopes(128))),
    ), "", rel=1e-3)
    if not hint:
        want = _bloom_slopes()
        try:
            got = [float(v) for v in answer]
        except (TypeError, ValueError):
            got = []
        if len(got) == len(want) and all(np.isfinite(got)):
            ok = [close(g, w, 1e-3) for g, w in zip(got, want)]
            if ok[:2] == [True, True] and not all(ok[2:]):
                hint = ("前 c 个头（第 0、63 个）对了，插值补上的（第 64、111 个）不对："
                        "回到第 4 节，补上的斜率取自哪个序列、取哪几个。")
            elif ok[2:] == [True, True] and not all(ok[:2]):
                hint = "插值补上的两个对了，前 c 个头（第 0、63 个）不对：c 是多少？那 c 个斜率怎么算？（第 4 节）"
        hint = hint or ("按第 4 节走一遍：112 不是 2 的幂，先确定 c，再分别算前 c 个头和补上的头；"
                        "每个斜率先写成 2 的负 x 次方。")
    return check_number(answer, _bloom_slopes(), name="ch06.ex1", rel=1e-3, hint=hint)


def _tables_and_layers(config) -> tuple:
    """(parameters of embed_tokens + lm_head, parameters of all decoder layers): the shape walk."""
    shapes = config.parameter_shapes()
    size = lambda keep: sum(int(np.prod(s)) for n, s in shapes.items() if keep(n))   # noqa: E731
    return (size(lambda n: n in ("model.embed_tokens.weight", "lm_head.weight")),
            size(lambda n: n.startswith("model.layers.")))


def _internlm_extra() -> list:
    """How many parameters InternLM-7B has more than Baichuan-7B: [in the two vocabulary
    tables, in all decoder layers together]."""
    from ..baichuan import baichuan_7b
    from ..internlm import internlm_7b
    return [i - b for i, b in zip(_tables_and_layers(internlm_7b()), _tables_and_layers(baichuan_7b()))]


@exercise("number", "InternLM-7B 比 Baichuan-7B 多出的参数：词嵌入与 lm_head 里、所有解码层里",
          solution=_internlm_extra,
          question="InternLM-7B（`internlm.internlm_7b()`）比 Baichuan-7B 的参数多。它的注意力没有 `W_pack`，"
                   "而是四个分开的投影 `q_proj/k_proj/v_proj/o_proj`，**每个都带偏置**（第 5 节末尾）。"
                   "查出 InternLM-7B 的尺寸，按第 6 节的公式和 Baichuan-7B 逐项比较，给出两个整数的列表 "
                   "`[词嵌入和 lm_head 两张表一共多出的参数, 全部解码层一共多出的参数]`（精确到个位；"
                   "哪一部分没有多出就写 0）。")
def ex2(answer) -> bool:
    """InternLM-7B minus Baichuan-7B parameters: [embedding + lm_head, all decoder layers]
    (the vocabulary differs; q/k/v/o carry biases)."""
    from ..internlm import internlm_7b
    tables, layers_extra = _internlm_extra()
    cfg = internlm_7b()
    per_layer = layers_extra // cfg.num_layers
    hint = "按第 6 节的公式逐项比较两个模型：先查清 InternLM-7B 的每个尺寸（不要假定与 Baichuan-7B 相同），再看哪些项不同。"
    try:
        got = [int(v) for v in answer] if not isinstance(answer, (str, bytes)) else []
    except (TypeError, ValueError, OverflowError):
        got = []
    if len(got) == 2:
        if got[0] == 0:
            hint = "词嵌入和 lm_head 这两项也不同：两个模型的词表一样大吗？（`internlm.internlm_7b()` 的 vocab_size）"
        elif got[0] == tables // 2:
            hint = "只算了一张表：词嵌入和 lm_head 不共享，两张表都随词表变（第 6 节的公式）。"
        elif got[1] == 0:
            hint = "解码层里也多出了参数：第 5 节末尾说 InternLM 的四个投影还带什么？"
        elif got[1] == per_layer:
            hint = "这是一个解码层多出的参数：题目问全部解码层一共多出多少。"
        elif got[1] == layers_extra * 3 // 4:
            hint = "只算了 q/k/v 的偏置：o_proj 也带偏置（第 5 节末尾）。"
        elif got[1] != layers_extra and got[0] == tables:
            hint = ("词表那一项对了；解码层那一项不对：把一个 InternLM 解码层和一个 Baichuan 解码层"
                    "按第 6 节公式的每一项逐项比较，再乘以层数。")
    return check_number(answer, _internlm_extra(), name="ch06.ex2", integer=True, rel=0, hint=hint)


KV_DEVICE_GIB = 24


def _kv_tokens() -> int:
    """Tokens of float16 KV cache that fit on a 24 GiB device next to Baichuan-13B's int8
    weights (memory.weight_bytes / memory.kv_cache_bytes, nothing else counted)."""
    from ..baichuan import baichuan_13b
    from ..memory import GiB, kv_cache_bytes, weight_bytes
    cfg = baichuan_13b()
    return int((KV_DEVICE_GIB * GiB - weight_bytes(cfg, "int8")) // kv_cache_bytes(cfg, 1, 1, "fp16"))


def _kv_tokens_from_printed_table(cfg) -> float:
    """ex3 backed out of section 7's table, whose GiB are printed to two decimals: int8 weights
    as half the fp16 row, the KV cache per token from the 4096-token row."""
    from ..memory import GiB, kv_cache_bytes, weight_bytes
    fp16 = round(weight_bytes(cfg, "fp16") / GiB, 2)
    kv_4096 = round(kv_cache_bytes(cfg, 1, 4096) / GiB, 2)
    return (KV_DEVICE_GIB - fp16 / 2) * 4096 / kv_4096


@exercise("number", "24 GiB 的卡、int8 权重的 Baichuan-13B：剩下的显存能装多少个 token 的 float16 KV cache",
          solution=_kv_tokens,
          question="用一张 24 GiB 的卡部署 Baichuan-13B 做推理：权重以 int8 存放（每个参数 1 字节，"
                   "忽略量化的缩放系数），KV cache 用 float16。放下权重之后，剩下的显存最多能装下多少个 token 的 "
                   "KV cache（所有请求合计；不计激活和框架的开销）？给出整数（向下取整；相对误差 0.1% 以内算对）。"
                   "参数量和层数、宽度可以从配置取；字节数按第 7 节的公式自己算，不要调用 "
                   "`memory.weight_bytes` 或 `memory.kv_cache_bytes`：成绩册把用它们得到的答案记为“借用”。",
          targets=("course_lib.memory.weight_bytes", "course_lib.memory.kv_cache_bytes"))
def ex3(answer) -> bool:
    """Tokens of float16 KV cache that fit on a 24 GiB device beside Baichuan-13B's int8 weights."""
    from ..baichuan import baichuan_13b
    from ..memory import GiB, kv_cache_bytes, weight_bytes
    cfg = baichuan_13b()
    free = KV_DEVICE_GIB * GiB - weight_bytes(cfg, "int8")
    per_token = kv_cache_bytes(cfg, 1, 1, "fp16")
    hint = recognised(answer, (
        ("每个 token 占的字节数算得不对：每个 token 每层存几样东西、每个数几字节？（第 7 节 KV cache 那一行的公式）",
         free / per_token / 2),
        ("每个 token 占的字节数算得不对：每层存几样东西、cache 是哪种 dtype？（第 7 节）", free / per_token * 2),
        ("只算了一层的 KV cache：每一层都要存自己的 K、V（第 7 节的公式里有 L）。", free / per_token * cfg.num_layers),
        ("24 GiB 按 10^9 字节算了：GiB 是 2^30 字节（第 7 节开头）。",
         (KV_DEVICE_GIB * 10 ** 9 - weight_bytes(cfg, "int8")) / per_token),
        ("这是整张卡都给 KV cache 的结果：先要放下 int8 的权重。", KV_DEVICE_GIB * GiB / per_token),
        ("差了约 0.2%：像是从第 7 节打印的表里（两位小数的 GiB）反推的。舍入误差在这里超过了允许的 0.1%："
         "按公式从参数量、层数和宽度算出字节数。", _kv_tokens_from_printed_table(cfg)),
    ), "分两步：int8 权重占多少字节（参数量见第 6 节），每个 token 的 float16 KV cache 占多少字节（第 7 节）；"
       "GiB 是 2^30 字节。", rel=1e-3)
    if _negative(answer):
        hint = "剩下的显存是负的：权重要按 int8（每个参数 1 字节）算，不是 16 位。"
    return check_number(answer, _kv_tokens(), name="ch06.ex3", integer=True, rel=1e-3, hint=hint)


def _negative(answer) -> bool:
    try:
        return float(answer) < 0
    except (TypeError, ValueError):
        return False


def _devices() -> int:
    from ..baichuan import baichuan_13b
    from ..memory import devices_needed
    return devices_needed(baichuan_13b(), DEVICE_GIB * USABLE, tp=8, zero=1, recompute=True,
                          seq_len=4096).devices


DEVICE_GIB, USABLE = 16, 0.9        # a 16 GiB card, of which the plan may use 90 % (10 % headroom)


@exercise("number", "16 GiB 的卡（留 10% 余量）、tp=8 + ZeRO-1 + 重计算训练 Baichuan-13B 最少要几张卡",
          solution=_devices,
          question="用 16 GiB 的卡训练 Baichuan-13B（序列 4096、每卡 1 条），tp=8、不做流水线并行（pp=1）、ZeRO-1、全量重计算。"
                   "计算器的激活只是估计，所以每张卡按账本最多只用到 90%（留 10% 余量）。"
                   "最少要几张卡？数据并行的份数 dp 可以是任意正整数（不必是 2 的幂）。"
                   "（每张卡上哪些部分随 dp 变小、哪些不变？dp 至少要多大？）"
                   "可以用第 7 节的 `memory.plan` 看某个 dp 的逐项账本；不要调用 `memory.devices_needed`："
                   "它替你把 dp 逐个试过去，成绩册把用它得到的答案记为“借用”。",
          targets=("course_lib.memory.devices_needed",))
def ex4(answer) -> bool:
    """Fewest 16 GiB devices to train Baichuan-13B (seq 4096, micro-batch 1) with tensor
    parallel 8, ZeRO-1 and full recomputation."""
    hint = "回到第 7 节的逐项账本：每张卡上哪些项随 dp 变小、哪些不变；再找让每张卡不超过 16 GiB 的 90% 的最小 dp。"
    try:
        got = as_number(answer, integer=True)
    except BadAnswer:
        got = None
    if got is not None and got > 0 and got % 8:
        hint = "tp=8 时卡数是 dp × tp，一定是 8 的倍数。" + hint
    elif got == 8:
        hint = ("8 张卡就是 dp=1：第 7 节的表里 tp=8 + 重计算每张卡要多少 GiB？ZeRO-1 在 dp=1 时什么也切不了。"
                "再看 dp 增大时哪些项变小。")
    elif got == 16:
        hint = "dp=2 时每张卡放得下吗？把随 dp 变小的那几项按 dp=2 重新算一遍，和 16 GiB 的 90% 比一比。"
    return check_number(answer, _devices(), name="ch06.ex4", integer=True, rel=0, hint=hint)
