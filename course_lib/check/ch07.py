"""Checkers for notebook 07 (pre-training the tiny Baichuan (same architecture) and generating text).

Code exercises compare the learner's function with the library's own
(``course_lib.generation``) on hidden random logits; the KV-cache append is compared with a
plain NumPy concatenation (and must reproduce a full recompute when used step by step)."""
from __future__ import annotations

import math

import numpy as np

from .common import Mismatch, check_number, compare, exercise, hidden_rng, observe, run_code_check


def _solutions():
    from ..solutions import ch07
    return ch07


def _logits(rng, batch, vocab):
    return (rng.standard_normal((batch, vocab)) * rng.uniform(0.5, 3.0, (batch, 1))).astype(np.float64)


# ====================================================================== code exercises
@exercise("code", "写 top_p_filter(logits, p)：核采样（nucleus）的过滤，保留的词 logit 不变，其余 -inf",
          solution=lambda: _solutions().top_p_filter,
          wrong=((lambda: _solutions().wrong_top_p_stops_early, "越过 p"),
                 (lambda: _solutions().wrong_top_p_ascending, "从大到小"),
                 (lambda: _solutions().wrong_top_p_not_unsorted, "放回")),
          targets=("course_lib.generation.apply_top_p", "course_lib.generation.next_token_scores"),
          question="在第 6 节“top-p 过滤与重复惩罚”的脚手架里写 `my_top_p(logits, p)`（NumPy，"
                   "`logits` 形状 (batch, vocab)，每行一个序列）：每行按概率从大到小排序、累加，"
                   "保留到累计概率**第一次 ≥ p** 的那个词为止（至少保留一个），其余设为 `-inf`，"
                   "保留的 logit 不变。", cell="sampling")
def top_p(func) -> bool:
    def body():
        from ..generation import apply_top_p
        rng = hidden_rng(21)
        cases = [(1, 11, 0.8), (3, 37, 0.9), (2, 8, 0.5), (4, 50, 0.95), (2, 9, 1e-3)]
        for batch, vocab, p in cases:
            x = _logits(rng, batch, vocab)
            got = np.asarray(_np(func(x.copy(), p)), np.float64)
            want = apply_top_p(x, p)
            _diagnose_top_p(got, want, x, p, f"batch {batch}、词表 {vocab}、p={p}")
    return run_code_check("ch07.top_p", "按概率从大到小排序、累加；累计概率第一次 ≥ p 的那个词也保留"
                          "（至少保留一个），再把掩码放回原来的词表顺序。", body)


def _np(value):
    return value.asnumpy() if hasattr(value, "asnumpy") else value


def _diagnose_top_p(got, want, x, p, what) -> None:
    observe(what, got, want, atol=1e-8, rtol=1e-5)   # kept logits unchanged, -inf where dropped
    if got.shape != want.shape:
        raise Mismatch(f"{what}：输出形状 {got.shape}，应为 {want.shape}（每行一个序列，形状不变）。")
    kept_g, kept_w = np.isfinite(got), np.isfinite(want)
    if np.any(kept_g & kept_w) and not np.allclose(got[kept_g & kept_w], x[kept_g & kept_w]):
        raise Mismatch(f"{what}：保留下来的 logit 被改了：过滤只把丢掉的词设为 -inf，"
                       "保留的词返回原来的 logit（不要返回概率或重新归一化）。")
    for row in range(len(x)):
        if not kept_g[row].any():
            raise Mismatch(f"{what}：第 {row} 行一个词都没留下：至少要保留概率最大的那个词。")
        if np.array_equal(kept_g[row], kept_w[row]):
            continue
        order = np.argsort(-x[row], kind="stable")
        rank_g = sorted(np.flatnonzero(kept_g[row][order]).tolist())
        n_want = int(kept_w[row].sum())
        if kept_g[row][order[-1]] and not kept_w[row][order[-1]]:
            bug = "留下了概率最小的词：要从大到小排序（np.argsort(-logits)），从最可能的词开始累加。"
        elif rank_g == list(range(len(rank_g))):             # a prefix of the best tokens
            if len(rank_g) == n_want - 1:
                bug = "少留了一个：累计概率第一次越过 p 的那个词也要保留（它让总和达到 p）。"
            else:
                bug = "保留的个数不对：保留到累计概率第一次 ≥ p 为止。"
        else:
            bug = "留下的词不是概率最大的那一批：在排序后的顺序里算出掩码后，要把它放回原来的词表位置。"
        raise Mismatch(f"{what}：第 {row} 行留下了 {int(kept_g[row].sum())} 个词 "
                       f"{np.flatnonzero(kept_g[row]).tolist()[:8]}，应为 {n_want} 个 "
                       f"{np.flatnonzero(kept_w[row]).tolist()[:8]}。{bug}")
    compare(got, want, what)


@exercise("code", "写 repetition_penalty(logits, seen, penalty)：CTRL 式重复惩罚",
          solution=lambda: _solutions().repetition_penalty,
          wrong=((lambda: _solutions().wrong_penalty_divide_all, "负的 logit"),
                 (lambda: _solutions().wrong_penalty_every_token, "出现过"),
                 (lambda: _solutions().wrong_penalty_subtract, "除以")),
          targets=("course_lib.generation.apply_repetition_penalty",
                   "course_lib.generation.next_token_scores"),
          question="在同一个脚手架里（第 6 节）写 `my_repetition_penalty(logits, seen, penalty)`："
                   "`seen` 是与 `logits` 同形状的布尔数组（这个词已经出现过）；出现过的词，"
                   "正 logit 除以 `penalty`、负 logit 乘以 `penalty`。", cell="sampling")
def repetition_penalty(func) -> bool:
    def body():
        from ..generation import apply_repetition_penalty
        rng = hidden_rng(22)
        for batch, vocab, penalty in ((1, 10, 1.3), (3, 31, 1.1), (2, 17, 2.0)):
            x = _logits(rng, batch, vocab)
            seen = rng.random((batch, vocab)) < 0.3
            seen[:, 0] = True                      # at least one seen token per row
            got = np.asarray(_np(func(x.copy(), seen.copy(), penalty)), np.float64)
            want = apply_repetition_penalty(x, seen, penalty)
            what = f"batch {batch}、词表 {vocab}、penalty={penalty}"
            observe(what, got, want, atol=1e-9, rtol=1e-6)
            if got.shape != want.shape:
                raise Mismatch(f"{what}：输出形状 {got.shape}，应为 {want.shape}。")
            bad = ~np.isclose(got, want, rtol=1e-6, atol=1e-9)
            if not bad.any():
                continue
            b, t = np.argwhere(bad)[0]
            if not seen[b, t]:
                bug = "这个词还没出现过，它的 logit 应该原样保留：只惩罚 seen 为 True 的词。"
            elif x[b, t] < 0 and math.isclose(got[b, t], x[b, t] / penalty, rel_tol=1e-6):
                bug = ("负的 logit 除以 penalty 会更接近 0——这个词反而更可能了。"
                       "负的 logit 要乘以 penalty。")
            elif math.isclose(got[b, t], x[b, t] - penalty, rel_tol=1e-6):
                bug = "减去 penalty 是另一种惩罚（presence penalty）；CTRL 式是正的除以、负的乘以。"
            else:
                bug = "正的 logit 除以 penalty，负的 logit 乘以 penalty。"
            raise Mismatch(f"{what}：第 {b} 行词 {t}（logit {x[b, t]:.4g}，出现过：{bool(seen[b, t])}）"
                           f"得到 {got[b, t]:.4g}，应为 {want[b, t]:.4g}。{bug}")
    return run_code_check("ch07.repetition_penalty", "只改出现过的词：正 logit / penalty，负 logit × penalty。",
                          body)


@exercise("code", "写 append_kv(past_k, past_v, k, v)：把这一步的 K、V 接到 KV cache 后面",
          solution=lambda: _solutions().append_kv,
          wrong=((lambda: _solutions().wrong_append_heads_axis, "轴"),
                 (lambda: _solutions().wrong_append_new_first, "顺序"),
                 (lambda: _solutions().wrong_append_forgets_past, "丢掉")),
          targets=("course_lib.layers.KVCache",),
          question="在第 7 节“往 KV cache 里追加”的脚手架里写 `my_append_kv(past_k, past_v, k, v)`："
                   "把这一步的 `k`、`v`（形状 (batch, heads, 新 token 数, head_dim)）接在缓存**后面**，"
                   "返回新的 (keys, values)；第一步没有缓存（`None`）。")
def append_kv(func) -> bool:
    """Step by step (prefill 3 tokens, then 1, 1, 2) the learner's cache must equal the
    concatenation of everything seen, in order, along the sequence axis."""
    def body():
        rng = hidden_rng(23)
        for batch, heads, dim in ((1, 2, 4), (3, 4, 8)):
            past_k = past_v = None
            all_k, all_v = [], []
            for step, length in enumerate((3, 1, 1, 2)):
                k = rng.standard_normal((batch, heads, length, dim)).astype(np.float32)
                v = rng.standard_normal((batch, heads, length, dim)).astype(np.float32)
                all_k.append(k), all_v.append(v)
                what = f"batch {batch}、{heads} 头，第 {step + 1} 步（新 {length} 个 token）后的"
                past_k, past_v = _append_step(func, past_k, past_v, k, v, step, what,
                                              np.concatenate(all_k, 2))
                _diagnose_append(past_k, np.concatenate(all_k, 2), all_k, what + " keys")
                _diagnose_append(past_v, np.concatenate(all_v, 2), all_v, what + " values")
    return run_code_check("ch07.append_kv", "形状 (batch, heads, seq, head_dim)：沿第 2 维（seq）把新的接在"
                          "旧的后面；第一步没有缓存（None）时，新的就是缓存。", body)


def _append_step(func, past_k, past_v, k, v, step, what, want_k):
    """One call of the learner's append_kv, its (keys, values) as arrays; a failing call is
    observed as no keys at all."""
    from mindspore import Tensor
    cached = None if past_k is None else tuple(past_k.shape)
    past = (None, None) if past_k is None else (Tensor(past_k), Tensor(past_v))
    try:                      # PyNative may report a bad concat only on asnumpy()
        result = func(*past, Tensor(k), Tensor(v))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            observe(what + " keys", None, want_k, atol=1e-6, rtol=1e-4)
            raise Mismatch("append_kv 要返回两个值 (keys, values)。")
        return tuple(np.asarray(_np(t)) for t in result)
    except (ValueError, RuntimeError, TypeError) as err:
        observe(what + " keys", None, want_k, atol=1e-6, rtol=1e-4)
        if cached is not None and "concat" in str(err).lower():
            raise Mismatch(f"第 {step + 1} 步拼接时形状对不上（缓存 {cached}，"
                           f"新的 {k.shape}）：拼接的轴不对，新 token 要接在序列轴"
                           "（第 2 维）上：ops.cat((past, new), 2)。") from None
        raise


def _diagnose_append(got, want, parts, what) -> None:
    got = np.asarray(got)
    observe(what, got, want, atol=1e-6, rtol=1e-4)
    if got.shape != want.shape:
        if got.shape == parts[-1].shape and len(parts) > 1:
            raise Mismatch(f"{what}形状是 {got.shape}，应为 {want.shape}：只留下了这一步的 K/V，"
                           "把过去的丢掉了——缓存要保存所有已经处理过的 token。")
        if got.ndim == 4 and got.shape[1] != want.shape[1]:
            raise Mismatch(f"{what}形状是 {got.shape}，应为 {want.shape}：拼接的轴不对，"
                           "新 token 要接在序列轴（第 2 维）上，不是头的轴。")
        raise Mismatch(f"{what}形状是 {got.shape}，应为 {want.shape}：沿第 2 维（seq）拼接。")
    if len(parts) > 1 and np.allclose(got, np.concatenate(parts[-1:] + parts[:-1], 2)):
        raise Mismatch(f"{what}顺序不对：新 token 放到了过去的前面；位置 = 在缓存里的下标，"
                       "新 token 要接在后面。")
    compare(got, want, what, atol=1e-6)


# ====================================================================== number exercises
@exercise("number", "平均交叉熵 3.2 nats 的模型，验证困惑度是多少", solution=lambda: math.exp(3.2),
          question="某模型在验证集上的平均交叉熵是 3.2（自然对数），它的困惑度是多少？（保留 2 位小数）")
def ex1(answer) -> bool:
    """Validation perplexity of a model whose mean token cross-entropy is 3.2 nats."""
    return check_number(answer, math.exp(3.2), name="ch07.ex1", rel=0.0, abs_=5e-3,
                        hint="困惑度 = exp(平均交叉熵)，交叉熵以自然对数（nats）计。")


PROBS = (0.42, 0.25, 0.15, 0.08, 0.06, 0.04)


def _kept_top_p() -> list:
    from ..generation import apply_top_p
    return np.flatnonzero(np.isfinite(apply_top_p(np.log(np.asarray([PROBS])), 0.8)[0])).tolist()


@exercise("number", "概率 PROBS 做 p=0.8 的 top-p 过滤后保留哪些下标", solution=_kept_top_p,
          question="下一个 token 的概率是 `ch07.PROBS`（已按从大到小排好），top-p 取 0.8 时保留哪些下标？"
                   "给出列表。")
def ex2(answer) -> bool:
    """Indices of PROBS that top-p (nucleus) sampling with p=0.8 keeps."""
    try:
        answer = sorted(answer) if isinstance(answer, (set, frozenset)) else answer
    except TypeError:
        pass
    return check_number(answer, _kept_top_p(), name="ch07.ex2", integer=True, rel=0,
                        hint="从概率最大的词开始累加，直到累计概率第一次达到 p；这些词都保留（至少保留一个）。"
                             "答案是下标的列表。")


@exercise("number", "两个出现过的词 logit [2.0, -1.0]，重复惩罚 1.25 之后是多少",
          solution=lambda: [2.0 / 1.25, -1.0 * 1.25],
          question="两个已经出现过的 token 的 logits 是 `[2.0, -1.0]`，重复惩罚 1.25 之后分别是多少？")
def ex3(answer) -> bool:
    """Logits [2.0, -1.0] of two tokens already in the text after repetition penalty 1.25."""
    return check_number(answer, [2.0 / 1.25, -1.0 * 1.25], name="ch07.ex3", rel=1e-6,
                        hint="正的 logit 除以惩罚系数，负的 logit 乘以惩罚系数——两者都让这个词更不可能。")


def _kv_bytes() -> int:
    from ..baichuan import tiny
    from ..memory import kv_cache_bytes
    return kv_cache_bytes(tiny(), 1, 256, "fp32")


@exercise("number", "baichuan.tiny() 生成 256 个 token 后 float32 KV cache 的字节数", solution=_kv_bytes,
          question="不带参数的 `baichuan.tiny()`（默认尺寸，"
                   "[第 06 章](06_baichuan_build.ipynb)第 8 节打印过；不是本章放大后训练的那个模型）"
                   "生成到第 256 个 token 时（batch 1、float32），KV cache 一共多少字节？")
def ex4(answer) -> bool:
    """Bytes of the float32 KV cache of baichuan.tiny() after 256 tokens, batch 1."""
    return check_number(answer, _kv_bytes(), name="ch07.ex4", integer=True, rel=0,
                        hint="每层存 K 和 V，各为 (batch, heads, seq, head_dim) 个 float32（4 字节）。")
